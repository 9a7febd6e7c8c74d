"""Device-resident requests in the runtime core (issue 16; docs/PROTOCOL.md section 11).

`DeviceRequests` is the part of `RuntimeCore` that checks a request whose x sits in the
client's CUDA IPC input buffer, tells each voting channel where to read x and where to
write its output (its slot of the client's output buffer), votes on the digests the
channels send back, and answers the client with the released channel's slot and the voted
digest instead of the bytes. The daemon never touches the buffers: it needs no CUDA.

What is voted, per channel: the C digest (prefixed with the output's dtype and shape, as for
models) and, as the ES part, the ES digest(s) followed by the digest of the x the channel
read. So a channel that answers digests of a different x disagrees with the others like any
faulty channel, and an x that every channel read alike but that differs from the client's
own digest (the shared buffer changed before they read it) is answered `DeviceInputError`
without blaming a channel. A channel that cannot open the client's handles, or finds that
the x it read is not the client's, answers `input_error`; that answer is voted on too (as
the C digest `INPUT_ERROR_DIGEST`), so one bad client handle, which every channel fails
alike, is refused without a channel fault. A disagreement between channels that answered
`input_error` and channels that computed and agree faults nobody
(`Roles._on_input_disagreement`): the client's buffer, not a channel, explains it, unless
the same channel answers so `INPUT_ERROR_STREAK` device requests in a row.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from safemon.device_io import digest_hex, parse_digest, valid_handle
from safemon.patterns import voter as vot
from safemon.runtime.roles import INPUT_ERROR_STREAK, Roles
from safemon.runtime.support import Live
from safemon.transport import messages as msgs
from safemon.transport.wire import Message

__all__ = ["DEVICE_REQUESTS_KEPT", "INPUT_ERROR_DIGEST", "DeviceIo", "DeviceRequests", "device_io_of",
           "is_device_request"]

INPUT_ERROR_DIGEST = b"device-input-unreadable"
"""The C digest the voter sees for a channel that could not read the client's buffers."""


@dataclass
class DeviceIo:
    """Where a device-resident request's x and outputs live, and what came back."""

    x_ipc: str
    rows: int
    cols: int
    x_digest: int
    out_ipc: str
    #: the client's slot stride in its output allocation: channel i writes at i × this
    slot_bytes: int
    #: columns of the output
    n_out: int
    #: channel -> its output slot (its position in the deployment's channel list)
    slots: dict[str, int] = field(default_factory=dict)
    #: channel -> (C digest, x digest) of its result, or the input_error text of a channel
    #: that could not read the buffers
    answers: dict[str, tuple[int, int] | str] = field(default_factory=dict)
    #: what the voter's C digest starts with: the output's dtype and shape (as for
    #: models), so that outputs of different shapes never agree
    c_digest_prefix: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.c_digest_prefix = f"<f4({self.rows}, {self.n_out})".encode()


def _device_keys(request: msgs.DeviceInput) -> tuple[object, ...]:
    return (request.x_ipc, request.x_rows, request.x_cols, request.x_digest, request.out_ipc,
            request.out_slot_bytes)


def is_device_request(request: msgs.DeviceInput) -> bool:
    """Whether `request` sets any device-resident field (it then carries no frame)."""
    return any(k is not None for k in _device_keys(request))


def device_io_of(request: msgs.MatmulRequest | msgs.ModelRequest, n_out: int) -> DeviceIo | str | None:
    """The request's `DeviceIo`; None for a request that carries x as a frame; a problem
    text when the device fields are incomplete or inconsistent (`n_out`: the output's
    columns)."""
    keys = _device_keys(request)
    if all(k is None for k in keys):
        return None
    if any(k is None for k in keys):
        return "a device-resident request needs x_ipc, x_rows, x_cols, x_digest, out_ipc and out_slot_bytes"
    assert request.x_rows is not None and request.x_cols is not None
    assert request.out_slot_bytes is not None
    if not (valid_handle(request.x_ipc) and valid_handle(request.out_ipc)):
        return "x_ipc and out_ipc must be CUDA IPC handles (128 hex characters)"
    digest = parse_digest(request.x_digest)
    if digest is None:
        return "x_digest must be 16 hex characters"
    if request.x_rows < 1 or request.x_cols < 1:
        return f"x must be non-empty, got {request.x_rows}×{request.x_cols}"
    need = request.x_rows * n_out * 4
    if request.out_slot_bytes < need or request.out_slot_bytes % 4:
        return (f"out_slot_bytes is {request.out_slot_bytes}; a {request.x_rows}×{n_out} "
                f"float32 output needs a slot stride of at least {need} bytes, a multiple of 4")
    assert request.x_ipc is not None and request.out_ipc is not None
    return DeviceIo(request.x_ipc, request.x_rows, request.x_cols, digest, request.out_ipc,
                    request.out_slot_bytes, n_out)


#: Device-resident requests remembered after their release, so that a late channel's digests
#: still reach the voter as the digests they are (the voter judges every result).
DEVICE_REQUESTS_KEPT = 4096


class DeviceRequests(Roles):
    """The digest vote and the slot release of device-resident requests."""

    _queued: dict[str, dict[int, tuple[float, float]]]

    def _init_device(self) -> None:
        #: seq -> the device-resident request, newest DEVICE_REQUESTS_KEPT
        self._device_requests: collections.OrderedDict[int, Live] = collections.OrderedDict()
        #: channel -> device-resident requests in a row it answered with input_error while
        #: other channels computed (`Roles._on_input_disagreement`)
        self._input_error_runs: dict[str, int] = {}
        #: channel -> its output slot: its position in the deployment's channel list
        self._slot_index = {n: i for i, n in enumerate(self.config.channel_names)}

    def _remember_device(self, seq: int, live: Live) -> None:
        self._device_requests[seq] = live
        while len(self._device_requests) > DEVICE_REQUESTS_KEPT:
            self._device_requests.popitem(last=False)

    def device_request(self, seq: int) -> Live | None:
        """The device-resident request `seq`, while it is remembered, else None."""
        return self._device_requests.get(seq)

    def _device_work_meta(self, io: DeviceIo) -> dict[str, Any]:
        """The device fields of the work sent to every voter; each channel's also names
        its slot's byte offset (`_slot_of`)."""
        return {"x_ipc": io.x_ipc, "x_rows": io.rows, "x_cols": io.cols,
                "x_digest": digest_hex(io.x_digest), "out_ipc": io.out_ipc}

    def _slot_of(self, io: DeviceIo, channel: str) -> int:
        """`channel`'s output slot (its position in the deployment's channel list),
        recorded in `io.slots`."""
        slot = io.slots[channel] = self._slot_index[channel]
        return slot

    def _on_device_result(self, name: str, msg: Message, m: msgs.Result, live: Live,
                          now: float) -> None:
        """[digests] of device-resident work: live [C, ES, x]; model [out, ES_0, h_1, ...,
        x] (docs/PROTOCOL.md section 11). Anything else that claims ok is a channel error."""
        io = live.device
        assert io is not None
        self._queued[name].pop(msg.seq, None)
        if m.ok and m.input_error is not None and not msg.arrays:
            io.answers.setdefault(name, m.input_error)  # the voter keeps a channel's first
            self._voter(vot.ChannelResult(msg.seq, name, now, True, INPUT_ERROR_DIGEST, b"",
                                          m.variant))
            return
        layers = 0 if live.model is None else len(live.model.layers)
        words = 3 if live.model is None else 2 + 2 * layers
        frame = msg.arrays[0] if m.ok and len(msg.arrays) == 1 else None
        if frame is None or frame.dtype != np.uint64 or frame.shape != (words,):
            text = m.error or (f"device result without its {words} uint64 digests")
            self._voter(vot.ChannelResult(msg.seq, name, now, False, b"", b"", "", text))
            return
        if m.kernel_seconds is not None and m.kernel_seconds >= 0:
            self.metrics.observe_kernel(name, m.kernel_seconds)
            live.kernel_seconds[name] = m.kernel_seconds
        values: list[int] = frame.tolist()
        if live.model is not None:
            self._keep_model_digests(msg.seq, name, tuple(values[:-1]))
        io.answers.setdefault(name, (values[0], values[-1]))
        self._input_error_runs.pop(name, None)  # it read the client's buffers
        raw = frame.tobytes()
        self._voter(vot.ChannelResult(msg.seq, name, now, True, io.c_digest_prefix + raw[:8],
                                      raw[8:], m.variant))

    def _unread_input(self, seq: int) -> frozenset[str]:
        live = self._device_requests.get(seq)
        if live is None or live.device is None:
            return frozenset()
        return frozenset(ch for ch, a in live.device.answers.items() if isinstance(a, str))

    def _input_error_streaks(self, unread: frozenset[str]) -> list[str]:
        reached = []
        for ch in sorted(unread):
            runs = self._input_error_runs[ch] = self._input_error_runs.get(ch, 0) + 1
            if runs >= INPUT_ERROR_STREAK:
                del self._input_error_runs[ch]
                reached.append(ch)
        return reached

    def _keep_model_digests(self, seq: int, name: str, frame: tuple[int, ...]) -> None:
        """Keep a model result's per-layer digests (to name a diverging layer);
        `ModelRequests` implements it."""

    def _release_device(self, d: vot.Release, live: Live, now: float) -> None:
        """Answer a device-resident request whose vote released `d.channel`: its slot and
        the voted digest, or DeviceInputError when the channels could not read the client's
        buffers or read an x other than the one the client sent."""
        io = live.device
        assert io is not None
        answer = io.answers[d.channel]
        if isinstance(answer, str):
            self.metrics.count_request("invalid_input")
            self._error_to("ingress", live.identity, live.client_seq, "DeviceInputError",
                           f"the channels could not read the request's device buffers: {answer}")
            return
        c_digest, x_digest = answer
        if x_digest != io.x_digest:
            self.metrics.count_request("invalid_input")
            self._log("warning", "device_input_changed", seq=d.req_id,
                      sent=digest_hex(io.x_digest), read=digest_hex(x_digest))
            self._error_to("ingress", live.identity, live.client_seq, "DeviceInputError",
                           "the channels read an x whose digest differs from the request's "
                           "x_digest: the input buffer changed before they read it")
            return
        self.metrics.count_request("released")
        self.metrics.observe_vote_latency(max(0.0, now - live.submitted))
        kernel_s = max((live.kernel_seconds.get(ch, 0.0) for ch in d.agreed), default=0.0)
        self._reply("ingress", live.identity, msgs.Released.KIND, live.client_seq,
                    msgs.Released(ok=True, outcome="released", kernel_seconds=kernel_s,
                                  vote_seconds=max(0.0, now - live.submitted),
                                  slot=io.slots[d.channel], digest=digest_hex(c_digest)
                                  ).to_meta())
        self._log("debug", "vote_released", seq=d.req_id, channel=d.channel,
                  slot=io.slots[d.channel])
