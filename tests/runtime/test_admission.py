"""Admission control and work budgets (`safemon.admission`), pure functions of the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from safemon import admission

from .helpers import make_config


def test_the_work_budget_grows_with_the_work_and_the_queue_ahead(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3", extra={"limits": {"min_channel_gflops": 1.0,
                                                          "item_overhead_s": 0.01}})
    small = admission.work_budget_s(cfg, 8, 8, 8)
    # 8x8x8 runs on the 32x32 `small` tile (k-tiles of 8): 2 * 32 * 8 * 32 flops
    assert small == pytest.approx(cfg.timing.request_deadline_s + 0.01 + 16384 / 1e9)
    assert admission.work_budget_s(cfg, 1024, 1024, 1024) == pytest.approx(
        cfg.timing.request_deadline_s + 0.01 + 2 * 1024**3 / 1e9)
    assert admission.work_budget_s(cfg, 8, 8, 8, queued_s=0.5) == pytest.approx(small + 0.5)
    with pytest.raises(ValueError):
        admission.item_cost_s(cfg, 0, 8, 8)


def test_work_is_priced_in_whole_tiles_of_the_slowest_configured_channel(tmp_path: Path) -> None:
    """The kernel and its NumPy reference compute whole tiles. Until 2026-12-07 an item was
    priced at 2*M*K*N: a 4096x32x32 product, which the `large_k16` tile (128x128) computes
    as 4096x32x128, was priced at a quarter of its work, its channels all missed the
    budget, and the embedded default latched SAFE on one client's ordinary request."""
    cfg = make_config(tmp_path, "2oo3")
    tile = cfg.channels[0].variant.tile_for(4096, 32, 32)
    assert (tile.bm, tile.bn) == (128, 128)
    assert admission.padded_flops(cfg, 4096, 32, 32) == 2.0 * 4096 * 32 * 128
    assert admission.padded_flops(cfg, 80, 80, 80) == 2.0 * 96 * 80 * 96  # 32x32 tiles
    # the channel whose tile pads the most prices the item: `wide64` makes 80x80 128x128
    mixed = make_config(tmp_path, "2oo3", extra={"channels": [
        {"name": "c0", "placement": "stream"}, {"name": "c1", "placement": "stream"},
        {"name": "c2", "placement": "stream", "variant": {"tile": "wide64"}}]})
    assert mixed.channels[2].variant.tile_for(80, 80, 80).name == "wide64"  # 64x128
    assert admission.padded_flops(mixed, 80, 80, 80) == 2.0 * 128 * 80 * 128
    assert admission.item_cost_s(cfg, 4096, 32, 32) == pytest.approx(
        cfg.limits.item_overhead_s + 2.0 * 4096 * 32 * 128 / (cfg.limits.min_channel_gflops * 1e9))
    # a weight's store is no tiled product: 2*8*K*N, unpadded (a review, 2026-12-07)
    assert admission.store_cost_s(cfg, 512, 100) == pytest.approx(
        cfg.limits.item_overhead_s + 2.0 * 8 * 512 * 100 / (cfg.limits.min_channel_gflops * 1e9))


def test_requests_are_refused_by_size_dimension_in_flight_and_queued_work(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3", extra={"limits": {
        "max_request_bytes": 4096, "max_dim": 100, "max_in_flight": 2, "item_overhead_s": 0.01}})
    assert admission.check_request(cfg, (8, 16), 12, 0) is None
    r = admission.check_request(cfg, (64, 32), 12, 0)
    assert r is not None and r.error_type == "InvalidInputError" and "max_request_bytes" in r.message
    r = admission.check_request(cfg, (1, 8), 101, 0)
    assert r is not None and "max_dim" in r.message
    r = admission.check_request(cfg, (8, 16), 12, 2)
    assert r is not None and r.error_type == "BusyError" and r.outcome == "busy"
    full = admission.max_ahead_s(cfg)
    r = admission.check_request(cfg, (8, 16), 12, 1, queued_s=full)
    assert r is not None and r.error_type == "BusyError"


def test_the_work_ahead_of_a_self_test_is_bounded_by_the_ftti(tmp_path: Path) -> None:
    """Half the self-test deadline is work its deadline allows for; beyond that the
    deadline is extended, at most by what keeps the verdict within the FTTI and before the
    next periodic test."""
    def timing(dti: float, deadline: float, ftti: float, jitter: float = 0.0):  # type: ignore[no-untyped-def]
        return make_config(tmp_path, "2oo3", extra={"timing": {
            "dti_s": dti, "selftest_deadline_s": deadline, "ftti_s": ftti, "dti_jitter": jitter}})

    cfg = timing(1.0, 0.2, 2.0)
    assert admission.max_queued_s(cfg) == pytest.approx(0.1)
    assert admission.max_ahead_s(cfg) == pytest.approx(0.1 + 0.8)
    assert admission.max_ahead_s(timing(1.0, 0.2, 1.5)) == pytest.approx(0.1 + 0.3)
    assert admission.max_ahead_s(timing(0.5, 0.1, 3.0)) == pytest.approx(0.05 + 0.4)  # dti caps
    # the next periodic test may come (1 - jitter) * dti after this one's start
    assert admission.max_ahead_s(timing(0.5, 0.1, 3.0, 0.2)) == pytest.approx(0.05 + 0.3)
    assert admission.max_ahead_s(timing(1.0, 0.2, 1.2)) == pytest.approx(0.1)  # no slack
    assert admission.selftest_extension_s(cfg, 0.05) == 0.0
    assert admission.selftest_extension_s(cfg, 0.7) == pytest.approx(0.6)


def test_a_request_priced_over_the_most_work_ahead_is_refused_even_alone(tmp_path: Path) -> None:
    """Until 2026-12-06 a request was refused for its cost only when work was already
    queued: a lone 64x1024x1024 product on the NumPy backend (priced 2.7 s) was admitted,
    the self-tests queued behind it overran, and the daemon went to SAFE. A whole model is
    priced by all its layers (`cost_s`), not by one."""
    cfg = make_config(tmp_path, "2oo3")
    most = admission.max_ahead_s(cfg)
    big = admission.item_cost_s(cfg, 64, 1024, 1024)
    assert big > most
    r = admission.check_request(cfg, (64, 1024), 1024, 0)
    assert r is not None and r.error_type == "InvalidInputError" and r.outcome == "invalid_input"
    assert "min_channel_gflops" in r.message and "ftti_s" in r.message
    small = admission.item_cost_s(cfg, 8, 64, 64)
    assert admission.check_request(cfg, (8, 64), 64, 0) is None
    assert admission.check_request(cfg, (8, 64), 64, 0, cost_s=small * 1000) is not None
    r = admission.check_request(cfg, (8, 64), 64, 1, queued_s=most - small / 2)
    assert r is not None and r.error_type == "BusyError"


def test_weights_are_refused_by_size_count_and_total_bytes(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3", extra={"limits": {
        "max_weight_bytes": 1024, "max_weights": 2, "max_weight_total_bytes": 1500}})
    assert admission.check_weight(cfg, (8, 8), 0, 0) is None
    r = admission.check_weight(cfg, (32, 32), 0, 0)
    assert r is not None and "max_weight_bytes" in r.message
    r = admission.check_weight(cfg, (8, 8), 2, 512)
    assert r is not None and r.error_type == "WeightBudgetError"
    r = admission.check_weight(cfg, (16, 16), 1, 600)
    assert r is not None and "max_weight_total_bytes" in r.message
