"""Device-covering self-tests: sizing, failing-SM attribution, per-DTI coverage in the scheduler."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.errors import InvalidInputError
from safemon.kernels.catalog import TILES, make_variant
from safemon.patterns.scheduler import (
    ChannelJoined,
    RunNow,
    Scheduler,
    SchedulerConfig,
    SelfTestDone,
    SelfTestFailed,
    StartSelfTest,
    Tick,
)
from safemon.patterns.sm_coverage import (
    SmCoverage,
    cover_dims,
    cover_pattern,
    failing_blocks,
    failing_sms,
)


@pytest.mark.parametrize("sms", [1, 2, 108, 132, 144])
def test_cover_dims_give_at_least_two_blocks_per_sm(sms: int) -> None:
    t = TILES["small"]
    d = cover_dims(sms, t)
    gx, gy = t.grid(d.m, d.n)
    assert gx * gy >= 2 * sms
    assert d.m % t.bm == 0 and d.n % t.bn == 0  # whole blocks: no padding rows or columns
    assert gx * gy < 2 * sms + max(gx, gy)  # and not much more than asked for


def test_cover_dims_refuse_nonsense() -> None:
    with pytest.raises(ValueError):
        cover_dims(0, TILES["small"])


def test_a_corrupted_block_names_its_sm() -> None:
    v = make_variant("ones", "I", "exact", "small")
    p = cover_pattern(3, v)  # 6 blocks of 32x32: 3 block rows, 2 block columns
    c, es = p.expected_c.copy(), p.expected_es.copy()
    assert failing_blocks(p.expected_c, p.expected_es, c, es, v.tile) == []
    gx, _ = v.tile.grid(c.shape[0], c.shape[1])
    c[40, 40] = np.float32(c[40, 40] + 1)  # row block 1, column block 1 → block 1·gx + 1
    es[0, 0] ^= 1  # thread 0 → block 0
    bad = failing_blocks(p.expected_c, p.expected_es, c, es, v.tile)
    assert gx == 2 and bad == [0, gx + 1]
    sm_of_block = np.array([5, 1, 2, 0, 2, 1], dtype=np.uint32)
    assert failing_sms(bad, sm_of_block) == (0, 5)


def test_coverage_counts_sms_seen_within_the_window() -> None:
    cov = SmCoverage(4)
    cov.record([0, 1], now=1.0)
    cov.record([2], now=1.8)
    assert cov.ratio(2.0, window=1.0) == 0.75
    assert cov.ratio(2.5, window=1.0) == 0.25  # SMs 0 and 1 were last seen more than 1 s ago
    assert cov.uncovered(2.5, window=1.0) == (0, 1, 3)
    with pytest.raises(InvalidInputError):
        cov.record([4], now=3.0)


def _started(out: list[object]) -> StartSelfTest:
    return next(i for i in out if isinstance(i, StartSelfTest))


def test_scheduler_keeps_per_channel_coverage_over_the_dti() -> None:
    """Passed self-tests add their SMs; failed ones add none and name the failing SM; the
    ratio forgets SMs not seen within the last DTI."""
    s = Scheduler(SchedulerConfig(dti=1.0, selftest_deadline=0.5, patterns=("p",)))
    s.handle(ChannelJoined("a", 0.0))
    s.handle(ChannelJoined("b", 0.0))
    assert s.sm_coverage("a") is None
    t1 = _started(s.handle(RunNow("a", 0.1)))
    s.handle(SelfTestDone("a", t1.test_id, True, 0.2, sms=(0, 1, 2, 3), sm_count=4))
    assert s.sm_coverage("a") == 1.0 and s.sm_coverage("b") is None
    t2 = _started(s.handle(RunNow("b", 0.3)))
    out = s.handle(SelfTestDone("b", t2.test_id, False, 0.4, sms=(0, 1), sm_count=4, failing_sms=(1,)))
    assert next(i for i in out if isinstance(i, SelfTestFailed)).failing_sms == (1,)
    assert s.sm_coverage("b") == 0.0
    s.handle(Tick(1.15))
    assert s.sm_coverage("a") == 1.0
    s.handle(Tick(1.25))
    assert s.sm_coverage("a") == 0.0  # nothing passed within the last DTI


def test_scheduler_refuses_sm_ids_outside_the_device_and_stays_unchanged() -> None:
    s = Scheduler(SchedulerConfig(dti=1.0, selftest_deadline=0.5, patterns=("p",)))
    s.handle(ChannelJoined("a", 0.0))
    t1 = _started(s.handle(RunNow("a", 0.1)))
    with pytest.raises(InvalidInputError):
        s.handle(SelfTestDone("a", t1.test_id, True, 0.2, sms=(4,), sm_count=4))
    assert s.pending("a") == (t1.test_id,)


def _config(extra: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    from safemon.config import Config

    data: dict[str, object] = {"policy": "1oo1D", "backend": "numpy",
                               "channels": [{"name": "c0", "variant": {"checksum": "ones", "level": "I",
                                                                        "mode": "exact", "tile": "small"}}]}
    data.update(extra or {})
    return Config.model_validate(data)


def test_pattern_shapes_put_the_device_covering_shape_first_on_a_gpu() -> None:
    """Without an SM count (no GPU) the configured dims; with one, the covering shape replaces
    the default dims, keeps dims the config names, and `cover: false` turns it off."""
    from safemon.patterns.golden import pattern_shapes

    assert pattern_shapes(_config()) == [(16, 16, 16)]
    d = cover_dims(132, TILES["small"])
    assert pattern_shapes(_config(), 132) == [(d.m, d.n, d.k)]
    named = _config({"patterns": {"dims": ["16x16x16", "80x80x80"]}})
    assert pattern_shapes(named, 132) == [(d.m, d.n, d.k), (16, 16, 16), (80, 80, 80)]
    assert pattern_shapes(_config({"patterns": {"cover": False}}), 132) == [(16, 16, 16)]


def test_each_channel_self_tests_at_the_covering_shape_of_its_own_tile() -> None:
    """Channels with different tiles get different covering shapes, each >= 2 blocks per SM
    with that channel's tile; none runs another channel's covering shape."""
    from safemon.patterns.golden import channel_pattern_shapes, pattern_shapes

    cfg = _config({"policy": "1oo2D", "channels": [
        {"name": "s", "variant": {"checksum": "ones", "level": "I", "mode": "exact", "tile": "small"}},
        {"name": "l", "variant": {"checksum": "ones", "level": "I", "mode": "exact", "tile": "large"}},
    ]})
    assert cfg.channels is not None
    small, large = cover_dims(132, TILES["small"]), cover_dims(132, TILES["large"])
    assert (small.m, small.n) != (large.m, large.n)
    by_name = {ch.name: channel_pattern_shapes(cfg, ch, 132) for ch in cfg.channels}
    assert by_name == {"s": [(small.m, small.n, small.k)], "l": [(large.m, large.n, large.k)]}
    for ch in cfg.channels:
        (m, n, k), = by_name[ch.name]
        gx, gy = ch.variant.tile_for(m, n, k).grid(m, n)
        assert gx * gy >= 2 * 132
    assert pattern_shapes(cfg, 132) == [by_name["s"][0], by_name["l"][0]]


def test_sm_report_reads_the_result_meta_and_names_failing_sms() -> None:
    from safemon.patterns.sm_coverage import sm_report

    v = make_variant("ones", "I", "exact", "small")
    p = cover_pattern(3, v)  # 6 blocks
    per_block = np.array([2, 2, 0, 1, 0, 1], dtype=np.uint32)
    c, es = p.expected_c.copy(), p.expected_es.copy()
    assert sm_report(3, per_block, p, c, es, True) == ((0, 1, 2), 3, ())
    es[-1, 0] ^= 4  # the last thread belongs to block 5, which ran on SM 1
    assert sm_report(3, per_block, p, c, es, False) == ((0, 1, 2), 3, (1,))
    assert sm_report(3, np.array([0, 7], dtype=np.uint32), p, c, es, False) == ((), None, ())
    assert sm_report(None, None, p, c, es, True) == ((), None, ())
    assert sm_report(3, per_block.astype(np.int64), p, c, es, True) == ((), None, ())


def test_sm_coverage_metric_is_set_per_channel() -> None:
    from prometheus_client import CollectorRegistry

    from safemon.metrics import Metrics

    reg = CollectorRegistry()
    m = Metrics(_config(), reg)
    labels = m.channel_labels("c0")  # channel plus dcgm-exporter's gpu and UUID
    m.set_sm_coverage("c0", None)
    assert reg.get_sample_value("safemon_selftest_sm_coverage_ratio", labels) is None
    m.set_sm_coverage("c0", 0.5)
    assert reg.get_sample_value("safemon_selftest_sm_coverage_ratio", labels) == 0.5
