"""Device-resident requests through a real daemon with inline channels, on a host without a
GPU: everything but the channels' device step is the production code (the client's request
and codec, the daemon's loop, the core's digest vote and slot release, the inline channels'
message path with the schema they already checked). The device step, which needs CUDA, is
replaced by one that answers fixed digests ([C, ES, x], the x digest the request's own), as
`scripts/shell_probe.py` does; tests/runtime/test_device_io_gpu.py runs the real one."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from safemon.channels.worker import ChannelWorker
from safemon.client import Client
from safemon.device_io import digest_hex, parse_digest
from safemon.digest import digest64
from safemon.errors import DeviceInputError
from safemon.transport import messages as msgs
from safemon.transport.wire import Message

from .helpers import make_config, operands, system, wait_for

C_DIGEST, ES_DIGEST = 0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321
HANDLE = "ab" * 64  # a well-formed CUDA IPC handle that nothing opens


def _stub(c_digest_of: Callable[[str], int], x_digest_of: Callable[[str, int], int],
          offsets: dict[str, list[int]] | None = None
          ) -> Callable[..., Generator[None, None, tuple[npt.NDArray[np.uint64], ...]]]:
    """A `ChannelWorker._run_device` that reads the work meta as the real one does, yields
    where the real one waits for its stream, and answers [C, ES, x] digests: C from
    `c_digest_of(channel)`, x from `x_digest_of(channel, request's x digest)`. Each
    channel's `out_offset` (where it was told to write) is appended to `offsets`."""

    def run_device(self: ChannelWorker, msg: Message, meta: dict[str, Any]
                   ) -> Generator[None, None, tuple[npt.NDArray[np.uint64], ...]]:
        work = msgs.WorkRequest.parse(msg.meta)
        meta["variant"] = self._variant_text()
        if offsets is not None and work.out_offset is not None:
            offsets.setdefault(self.name, []).append(work.out_offset)
        yield
        meta["kernel_seconds"] = 1e-5
        meta["ok"] = True
        sent = parse_digest(work.x_digest)
        assert sent is not None
        return (np.array([c_digest_of(self.name), ES_DIGEST, x_digest_of(self.name, sent)],
                         dtype=np.uint64),)

    return run_device


def _ask(client: Client, wid: str, x: npt.NDArray[np.float32], n_out: int) -> msgs.Released:
    """One device-resident product request as `Client.matmul` sends a CUDA x (an output of
    `n_out` columns); the released answer (slot and voted digest), or the daemon's typed
    error raised."""
    staged = {"x_ipc": HANDLE, "x_rows": x.shape[0], "x_cols": x.shape[1],
              "x_digest": digest_hex(digest64(x)), "out_ipc": HANDLE[::-1],
              "out_slot_bytes": x.shape[0] * n_out * 4}
    answer: msgs.Released = client._request(
        lambda ms: msgs.MatmulRequest(weight_id=wid, deadline_ms=ms, **staged), (), 5.0,
        lambda _reply: None, take=lambda reply: msgs.Released.parse(reply.meta))
    return answer


def _disagreements(daemon: Any, channel: str) -> float:
    return daemon.registry.get_sample_value(  # type: ignore[no-any-return]
        "safemon_channel_disagreements_total", {"channel": channel, "gpu": "", "UUID": ""}) or 0.0


def test_agreeing_digests_release_a_slot_and_the_voted_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three inline channels answer the same digests: each request is released with the
    first channel's slot and the C digest they agreed on; channel i was told to write at
    byte i × the slot's size; no channel is counted as disagreeing."""
    offsets: dict[str, list[int]] = {}
    monkeypatch.setattr(ChannelWorker, "_run_device",
                        _stub(lambda _ch: C_DIGEST, lambda _ch, sent: sent, offsets))
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands(5)
    slot_bytes = x.shape[0] * w.shape[1] * 4
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        for _ in range(5):
            answer = _ask(client, wid, x, w.shape[1])
            assert (answer.ok, answer.slot, answer.digest) == (True, 0, digest_hex(C_DIGEST))
        assert offsets == {f"c{i}": [i * slot_bytes] * 5 for i in range(3)}
        assert all(_disagreements(daemon, ch) == 0 for ch in ("c0", "c1", "c2"))
        assert daemon.core is not None and daemon.core.in_flight == 0


def test_a_channel_with_another_c_digest_is_outvoted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c0 answers another C digest: 2oo3 releases the majority's slot (c1's) and digest,
    and c0 is counted as the disagreeing minority."""
    monkeypatch.setattr(ChannelWorker, "_run_device",
                        _stub(lambda ch: C_DIGEST ^ (ch == "c0"), lambda _ch, sent: sent))
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands(6)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        answer = _ask(client, wid, x, w.shape[1])
        assert (answer.slot, answer.digest) == (1, digest_hex(C_DIGEST))
        assert _disagreements(daemon, "c0") == 1
        assert _disagreements(daemon, "c1") == _disagreements(daemon, "c2") == 0


def test_an_x_that_every_channel_read_differently_from_the_client_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every channel read an x whose digest is not the request's (the shared input buffer
    changed): nothing is released, the client gets DeviceInputError, and no channel is
    blamed (they agree with one another)."""
    monkeypatch.setattr(ChannelWorker, "_run_device",
                        _stub(lambda _ch: C_DIGEST, lambda _ch, sent: sent ^ 1))
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands(7)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        with pytest.raises(DeviceInputError, match="x_digest"):
            _ask(client, wid, x, w.shape[1])
        assert all(_disagreements(daemon, ch) == 0 for ch in ("c0", "c1", "c2"))


def test_a_channel_that_read_a_changed_x_is_not_put_out_of_the_vote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c2 answers input_error, as a channel does that read an x the client had already
    replaced (its digest is not the request's), on requests 1, 2, 4 and 5 and computes on
    request 3: c0 and c1 agree, every output is released, and c2, never
    `INPUT_ERROR_STREAK` times in a row, stays in the vote (no fault, the mode stays
    NORMAL). Its answers are counted as c2's disagreements."""
    from safemon.runtime.roles import INPUT_ERROR_STREAK

    real = _stub(lambda _ch: C_DIGEST, lambda _ch, sent: sent)
    answered: list[int] = []

    def run_device(self: ChannelWorker, msg: Message, meta: dict[str, Any]
                   ) -> Generator[None, None, tuple[npt.NDArray[np.uint64], ...]]:
        if self.name != "c2" or len(answered) == 2:
            if self.name == "c2":
                answered.append(msg.seq)
            return (yield from real(self, msg, meta))
        answered.append(msg.seq)
        yield
        meta["ok"] = True
        meta["input_error"] = "the x this channel read has safemon-digest64 ..., the request's ..."
        return ()

    monkeypatch.setattr(ChannelWorker, "_run_device", run_device)
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands(9)
    assert INPUT_ERROR_STREAK == 3
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        for _ in range(5):
            answer = _ask(client, wid, x, w.shape[1])
            assert (answer.ok, answer.digest) == (True, digest_hex(C_DIGEST))
        assert len(answered) == 5
        # the last one counted once its third result is in
        assert wait_for(lambda: _disagreements(daemon, "c2") == 4, 5.0)
        assert _disagreements(daemon, "c0") == _disagreements(daemon, "c1") == 0
        status = client.status()
        assert status["mode"] == "NORMAL", status
        assert status["voting"] == ["c0", "c1", "c2"], status
