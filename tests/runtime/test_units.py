"""Pure parts of the runtime: fault injection arithmetic, the ABFT per-request check, the
supervisor with a fake launcher and an injected clock (no sleeping), sd_notify."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from safemon.channels.faults import FaultState, flip_c
from safemon.errors import InvalidInputError
from safemon.kernels.abft import abft_passes as abft_ok
from safemon.supervisor import Lost, Started, Supervisor
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
        assert abft_ok(x, w, c)
        bad = c.copy()
        flip_c(bad)
        assert not abft_ok(x, w, bad)
    x, w = operands()
    c = reference(x, w, cfg)
    c[1, 1] = np.inf
    assert not abft_ok(x, w, c)


def test_weight_ids_are_content_addresses() -> None:
    _, w = operands()
    assert weight_id_of(w) == weight_id_of(w.copy())
    w2 = w.copy()
    w2[0, 0] += 1
    assert weight_id_of(w) != weight_id_of(w2)


@dataclass
class FakeHandle:
    name: str
    incarnation: int
    running: bool = True
    stopped: bool = False

    def alive(self) -> bool:
        return self.running

    def request_stop(self) -> None:
        self.running = False
        self.stopped = True

    def kill(self) -> None:
        self.running = False
        self.stopped = True

    def stop(self, timeout_s: float) -> None:
        self.running = False
        self.stopped = True


@dataclass
class FakeLauncher:
    started: list[FakeHandle] = field(default_factory=list)

    def start(self, name: str, incarnation: int, epoch: int) -> FakeHandle:
        h = FakeHandle(name, incarnation)
        self.started.append(h)
        return h


def test_supervisor_detects_crash_and_silence_and_restarts_after_the_delay(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3")
    launcher = FakeLauncher()
    sup = Supervisor(cfg, launcher, epoch=5)
    sup.start_all(0.0)
    assert [h.name for h in launcher.started] == ["c0", "c1", "c2"]
    assert sup.on_register("c0", 0, 0.1) == Started("c0", 0, 0.1)
    assert sup.on_register("c0", 7, 0.1) is None  # not the current incarnation
    assert sup.on_heartbeat("c1", 0, 0.1) == Started("c1", 0, 0.1)  # lost REGISTER
    sup.on_register("c2", 0, 0.1)
    launcher.started[1].running = False
    lost = sup.tick(0.2)
    assert lost == [Lost("c1", "crash", 0.2, "incarnation 0 exited")]
    assert sup.tick(0.25) == []  # reported once
    timeout = cfg.timing.heartbeat_timeout_s
    sup.on_heartbeat("c0", 0, 0.2)
    lost = sup.tick(0.2 + timeout + 0.01)
    assert [(x.channel, x.kind) for x in lost] == [("c0", "heartbeat_lost"), ("c2", "heartbeat_lost")]
    sup.restart("c1", 0.5, 1.0)
    sup.tick(1.4)
    assert len(launcher.started) == 3
    sup.tick(1.5)
    assert launcher.started[-1].name == "c1" and launcher.started[-1].incarnation == 1
    assert sup.incarnation("c1") == 1
    assert sup.on_register("c1", 0, 1.6) is None and sup.on_register("c1", 1, 1.6) is not None
    sup.isolate("c2", 2.0)
    assert launcher.started[2].stopped


def test_sd_notify_writes_one_datagram(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(path)
        assert sd_notify("READY=1", {"NOTIFY_SOCKET": path})
        assert s.recv(64) == b"READY=1"
    assert not sd_notify("READY=1", {})


def test_isolating_a_channel_that_ignores_the_stop_request_kills_it_after_the_grace(
    tmp_path: Path,
) -> None:
    """isolate() never blocks on the channel; tick() forces the stop STOP_GRACE_S later."""
    from safemon.supervisor import STOP_GRACE_S

    launcher = FakeLauncher()
    sup = Supervisor(make_config(tmp_path, "2oo3"), launcher, epoch=1)
    sup.start_all(0.0)
    stubborn = launcher.started[0]
    killed: list[bool] = []
    stubborn.request_stop = lambda: None  # type: ignore[method-assign]

    def kill() -> None:
        killed.append(True)
        stubborn.running = False

    stubborn.kill = kill  # type: ignore[method-assign]
    sup.isolate(stubborn.name, 1.0)
    assert sup.next_wakeup() == 1.0 + STOP_GRACE_S
    sup.tick(1.0 + STOP_GRACE_S / 2)
    assert killed == [] and stubborn.running
    sup.tick(1.0 + STOP_GRACE_S)
    assert killed == [True] and not stubborn.running
    assert sup.next_wakeup() != 1.0 + STOP_GRACE_S


def test_a_due_restart_waits_for_the_old_incarnation_without_blocking(tmp_path: Path) -> None:
    """The new incarnation starts only once the old one is gone (it would bind the same
    address), also when the old one was isolated just before; a stubborn one is SIGKILLed
    STOP_GRACE_S after the stop request, without waiting."""
    from safemon.supervisor import STOP_GRACE_S

    launcher = FakeLauncher()
    sup = Supervisor(make_config(tmp_path, "2oo3"), launcher, epoch=1)
    sup.start_all(0.0)
    old = launcher.started[1]
    old.request_stop = lambda: None  # type: ignore[method-assign]
    old.kill = lambda: None  # type: ignore[method-assign]  # not dead yet when killed
    sup.isolate("c1", 1.0)  # e.g. the reaction; then the operator's reset restarts it
    assert not sup.running("c1")
    sup.restart("c1", 0.0, 1.05)
    assert sup.running("c1")
    sup.tick(1.1)
    assert len(launcher.started) == 3 and old.running  # waits, does not start a second c1
    sup.tick(1.0 + STOP_GRACE_S)  # grace over: killed (no wait), still not gone
    assert len(launcher.started) == 3
    old.running = False  # the kernel reaped it
    sup.tick(1.0 + STOP_GRACE_S + 0.01)
    assert len(launcher.started) == 4 and launcher.started[3].name == "c1"
    assert sup.incarnation("c1") == 1
