"""Pure parts of the runtime: fault injection arithmetic, the ABFT per-request check, the
supervisor with a fake launcher and an injected clock (no sleeping), sd_notify."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from safemon.channels.faults import FaultState, flip_c
from safemon.errors import InvalidInputError
from safemon.kernels.abft import abft_passes as abft_ok
from safemon.systemd import sd_notify
from safemon.weight_id import weight_id_of

from .helpers import make_config, operands, reference


def test_bitflip_c_changes_one_value_and_stays_finite() -> None:
    for v in (0.0, 1.5, -3.0, 1e-30, 7e37):
        c = np.array([[v, 2.0]], dtype=np.float32)
        before = c.copy()
        bit = flip_c(c)
        assert bit in (29, 30) and np.isfinite(c).all() and c[0, 0] != before[0, 0]
        assert c[0, 1] == before[0, 1]


def test_fault_state_transient_and_permanent() -> None:
    fs = FaultState()
    fs.inject("bitflip-c")
    fs.inject("stuck")
    c1 = np.full((2, 2), 0.5, dtype=np.float32)
    es = np.zeros((4, 1), dtype=np.uint32)
    fs.apply(c1, es)
    c2 = np.full((2, 2), 0.5, dtype=np.float32)
    fs.apply(c2, es)
    assert not np.array_equal(c2, np.full((2, 2), 0.5, np.float32))  # stuck persists
    fs.clear()
    c3 = np.full((2, 2), 0.5, dtype=np.float32)
    fs.apply(c3, es)
    assert np.array_equal(c3, np.full((2, 2), 0.5, np.float32))
    with pytest.raises(InvalidInputError):
        fs.inject("meltdown")


def test_abft_accepts_clean_results_and_rejects_flipped_ones(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "1oo1D")
    rng = np.random.default_rng(3)
    for _ in range(20):
        x, w = (rng.standard_normal((8, 64)) * 100).astype(np.float32), rng.standard_normal((64, 5)).astype(np.float32)
        c = reference(x, w, cfg)
        v = cfg.channels[0].variant.to_variant(8, 5, 64)  # type: ignore[index]
        assert abft_ok(x, w, c, v)
        bad = c.copy()
        flip_c(bad)
        assert not abft_ok(x, w, bad, v)
    x, w = operands()
    c = reference(x, w, cfg)
    c[1, 1] = np.inf
    assert not abft_ok(x, w, c, cfg.channels[0].variant.to_variant(  # type: ignore[index]
        x.shape[0], w.shape[1], x.shape[1]))


def test_weight_ids_are_content_addresses() -> None:
    _, w = operands()
    assert weight_id_of(w) == weight_id_of(w.copy())
    w2 = w.copy()
    w2[0, 0] += 1
    assert weight_id_of(w) != weight_id_of(w2)


def test_sd_notify_writes_one_datagram(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(path)
        assert sd_notify("READY=1", {"NOTIFY_SOCKET": path})
        assert s.recv(64) == b"READY=1"
    assert not sd_notify("READY=1", {})
