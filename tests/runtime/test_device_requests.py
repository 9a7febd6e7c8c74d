"""Device-resident requests in the sans-IO core (docs/PROTOCOL.md section 11): what is sent
to each channel, the digest vote, the slot release, and the answers that refuse a request
without blaming a channel. No GPU: the channels' digest frames are computed here with the
NumPy reference (`safemon.digest.digest64`), as a CuPy channel computes them on its device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from safemon.device_io import digest_hex, output_layout
from safemon.digest import digest64
from safemon.kernels.api import run_variant
from safemon.models import Layer, encode_model, run_model
from safemon.runtime import effects as fx
from safemon.runtime import stimuli as st
from safemon.runtime.core import RuntimeCore
from safemon.states import ChannelState, Mode
from safemon.transport.wire import Kind
from tests.runtime.helpers import operands
from tests.runtime.test_core import Clock, Processes, _core, _form, _msg, _of

X_IPC = "ab" * 64
OUT_IPC = "cd" * 64


def _registered(tmp_path: Path, policy: str = "2oo3") -> tuple[RuntimeCore, Processes, Clock, Any, str,
                                                               npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    core, procs, clock, cfg = _core(tmp_path, policy)
    _form(core, procs, clock)
    x, w = operands(11)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg"))
    wid = ""
    for send in _of(reg, fx.SendToChannel):
        wid = str(send.meta["args"])
        ack = _msg(Kind.EVENT, 2, {"event": "weight", "weight_id": wid, "ok": True}, channel=send.channel)
        core.handle(st.ChannelMessage(send.channel, ack, clock(), "ack"))
    return core, procs, clock, cfg, wid, x, w


def _client_stride(rows: int, n_out: int, slots: int = 3) -> int:
    """The slot stride `ExchangeBuffers.stage` sends for a first (rows, n_out) output."""
    return output_layout(None, rows * n_out * 4, slots)[1]


def _device_meta(wid: str, x: npt.NDArray[np.float32], n_out: int, **over: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"weight_id": wid, "x_ipc": X_IPC, "x_rows": x.shape[0],
                            "x_cols": x.shape[1], "x_digest": digest_hex(digest64(x)),
                            "out_ipc": OUT_IPC, "out_slot_bytes": _client_stride(x.shape[0], n_out)}
    meta.update(over)
    return meta


def _frame(x: npt.NDArray[np.float32], w: npt.NDArray[np.float32], cfg: Any,
           flip: bool = False) -> npt.NDArray[np.uint64]:
    """What a channel answers: [d(C), d(ES), d(x)] of the variant's product."""
    r = run_variant(x, w, cfg.channels[0].variant.to_variant(x.shape[0], w.shape[1], x.shape[1]), "numpy")
    c = r.c.copy()
    if flip:
        c.view(np.uint32)[0, 0] ^= 1 << 20
    return np.array([digest64(c), digest64(r.es), digest64(x)], dtype=np.uint64)


def _answer(core: RuntimeCore, clock: Clock, work: fx.SendToChannel, frame: npt.NDArray[Any] | None,
            **meta: Any) -> list[fx.Effect]:
    m: dict[str, Any] = {"ok": True, "job": "live", "variant": "v", "kernel_seconds": 0.001, **meta}
    arrays = () if frame is None else (frame,)
    return core.handle(st.ChannelMessage(work.channel, _msg(Kind.RESULT, work.seq, m, arrays, work.channel),
                                         clock(), f"res-{work.channel}"))


def _ask(core: RuntimeCore, clock: Clock, meta: dict[str, Any],
         arrays: tuple[npt.NDArray[Any], ...] = ()) -> list[fx.Effect]:
    return core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 9, meta, arrays), clock(), "ask"))


def _minority(effects: list[fx.Effect]) -> list[str]:
    """The channels a `disagreement` log line of `effects` names as the minority."""
    return [ch for e in _of(effects, fx.Log) if e.event == "disagreement"
            for ch in e.fields["minority"]]


def _work(effects: list[fx.Effect]) -> list[fx.SendToChannel]:
    return [s for s in _of(effects, fx.SendToChannel) if s.meta.get("job") in ("live", "model")]


def test_each_channel_gets_the_handles_and_its_own_slot_and_no_frame(tmp_path: Path) -> None:
    """2oo3: every voter is told where x is, the client's digest of x (each channel checks
    what it read against it) and to write at its own slot's byte offset (its position in
    the deployment times the client's slot stride); x does not travel."""
    core, _procs, clock, _cfg, wid, x, w = _registered(tmp_path)
    meta = _device_meta(wid, x, w.shape[1])
    sent = _work(_ask(core, clock, meta))
    assert all(s.meta["x_digest"] == meta["x_digest"] for s in sent)
    slot = meta["out_slot_bytes"]
    assert sorted((s.channel, s.meta["out_offset"]) for s in sent) == [
        ("c0", 0), ("c1", slot), ("c2", 2 * slot)]
    assert all(s.arrays == () and s.meta["x_ipc"] == X_IPC and s.meta["out_ipc"] == OUT_IPC
               and (s.meta["x_rows"], s.meta["x_cols"]) == x.shape for s in sent)


def test_agreeing_digests_release_a_slot_and_the_voted_digest_without_bytes(tmp_path: Path) -> None:
    """Two equal digest frames release: the reply carries no frame, the slot of a channel
    in the agreeing pair and the C digest they voted on; a bit flip in the third channel's
    C makes it the minority (a disagreement fault), as with full arrays."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    good = _frame(x, w, cfg)
    assert not _of(_answer(core, clock, sent["c0"], good), fx.Reply)
    [reply] = _of(_answer(core, clock, sent["c1"], good), fx.Reply)
    assert reply.kind is Kind.REPLY and reply.arrays == () and reply.seq == 9
    assert reply.meta["slot"] in (0, 1) and reply.meta["digest"] == digest_hex(int(good[0]))
    late = _answer(core, clock, sent["c2"], _frame(x, w, cfg, flip=True))
    assert _minority(late) == ["c2"] and not _of(late, fx.Reply)


def test_a_late_agreeing_digest_is_not_a_channel_fault(tmp_path: Path) -> None:
    """The third channel's digests arrive after the release: they reach the voter as
    digests (not as a malformed result), so an agreeing latecomer stays UP."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    good = _frame(x, w, cfg)
    _answer(core, clock, sent["c0"], good)
    _answer(core, clock, sent["c1"], good)
    late = _answer(core, clock, sent["c2"], good)
    assert not _minority(late) and not [e for e in _of(late, fx.Log) if e.level == "error"]
    assert core.controller.mode is Mode.NORMAL
    assert all(core.controller.channel_state(c) is ChannelState.UP for c in ("c0", "c1", "c2"))


def test_a_channel_that_read_another_x_is_the_minority(tmp_path: Path) -> None:
    """The x digest is voted with the ES: a channel whose copy of x differs disagrees even
    when its C happened to agree, and is the 2oo3 minority."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    good = _frame(x, w, cfg)
    odd = good.copy()
    odd[2] ^= np.uint64(1)
    _answer(core, clock, sent["c0"], odd)
    _answer(core, clock, sent["c1"], good)
    done = _answer(core, clock, sent["c2"], good)
    [reply] = _of(done, fx.Reply)
    assert reply.meta["outcome"] == "released" and reply.meta["slot"] in (1, 2)
    assert _minority(done) == ["c0"]


def test_an_x_that_changed_before_every_channel_read_it_is_refused_without_a_fault(tmp_path: Path) -> None:
    """All channels read the same x, but not the one the client digested (the shared buffer
    changed): DeviceInputError, nothing released, every channel stays UP."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    meta = _device_meta(wid, x, w.shape[1], x_digest=digest_hex(digest64(x) ^ 1))
    sent = {s.channel: s for s in _work(_ask(core, clock, meta))}
    good = _frame(x, w, cfg)
    _answer(core, clock, sent["c0"], good)
    [reply] = _of(_answer(core, clock, sent["c1"], good), fx.Reply)
    assert reply.kind is Kind.ERROR and reply.meta["error_type"] == "DeviceInputError"
    assert "changed" in reply.meta["message"]
    late = _answer(core, clock, sent["c2"], good)
    assert not _minority(late) and core.controller.mode is Mode.NORMAL


def test_unreadable_buffers_are_voted_on_so_one_bad_handle_faults_nobody(tmp_path: Path) -> None:
    """Every channel answers input_error (a foreign handle): DeviceInputError, no fault.
    A channel alone in failing to read them is the minority of a disagreement, which the
    input explains: the others' output is released and no channel is faulted."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    _answer(core, clock, sent["c0"], None, input_error="cannot open the CUDA IPC handle")
    [reply] = _of(_answer(core, clock, sent["c1"], None, input_error="cannot open the CUDA IPC handle"),
                  fx.Reply)
    assert reply.meta["error_type"] == "DeviceInputError" and "cannot open" in reply.meta["message"]
    late = _answer(core, clock, sent["c2"], None, input_error="cannot open the CUDA IPC handle")
    assert not _minority(late) and core.controller.mode is Mode.NORMAL

    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    good = _frame(x, w, cfg)
    _answer(core, clock, sent["c0"], good)
    _answer(core, clock, sent["c1"], None, input_error="cannot open the CUDA IPC handle")
    done = _answer(core, clock, sent["c2"], good)
    [reply] = _of(done, fx.Reply)
    assert reply.meta["outcome"] == "released" and reply.meta["slot"] in (0, 2)
    assert _minority(done) == ["c1"]
    assert [e.fields["input_error"] for e in _of(done, fx.Log)
            if e.event == "disagreement_explained_by_the_input"] == [["c1"]]
    assert core.controller.mode is Mode.NORMAL and _faulted(done) == []
    assert all(core.controller.channel_state(c) is ChannelState.UP for c in ("c0", "c1", "c2"))


def _disagreement_count(core: RuntimeCore, channel: str) -> float:
    return core.metrics.registry.get_sample_value(  # type: ignore[no-any-return]
        "safemon_channel_disagreements_total", {"channel": channel, "gpu": "", "UUID": ""}) or 0.0


def test_a_channel_that_keeps_answering_input_error_is_faulted(tmp_path: Path) -> None:
    """c2 answers input_error while c0 and c1 compute and agree: released each time, and
    c2 is faulted (`channel_error`) only on the `INPUT_ERROR_STREAK`-th request in a row; a
    request it computes in between starts the count again."""
    from safemon.runtime.roles import INPUT_ERROR_STREAK

    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    good = _frame(x, w, cfg)
    faults: list[list[str]] = []
    plan = [True, True, False] + [True] * INPUT_ERROR_STREAK  # True: c2 answers input_error
    for unreadable in plan:
        sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
        effects = _answer(core, clock, sent["c0"], good) + _answer(core, clock, sent["c1"], good)
        effects += (_answer(core, clock, sent["c2"], None, input_error="cannot open the handle")
                    if unreadable else _answer(core, clock, sent["c2"], good))
        assert [r.meta["outcome"] for r in _of(effects, fx.Reply)] == ["released"]
        faults.append([f"{e.payload['channel']}:{e.payload['kind']}" for e in _of(effects, fx.Publish)
                       if e.event_type == "fault"])
    assert faults == [[]] * (len(plan) - 1) + [["c2:channel_error"]]


def _faulted(effects: list[fx.Effect]) -> list[str]:
    """The channels `effects` take a fault for: published, or first retested (a fault
    judged transient is retested before the channel leaves the vote)."""
    return ([e.payload["channel"] for e in _of(effects, fx.Publish) if e.event_type == "fault"]
            + [e.fields["channel"] for e in _of(effects, fx.Log)
               if e.event == "fault_retest_started"])


def test_a_changed_input_puts_no_channel_out_of_the_vote(tmp_path: Path) -> None:
    """The client's x changed between the channels' reads (it may stage its next request
    once two channels agreed): the channels that read another x answer input_error. Two
    of them against one that computed: the request is refused (DeviceInputError) and the
    one that computed is not the faulted minority. One of them against two that computed
    and agree: released, nobody faulted. One of them against two that computed and
    disagree: that disagreement is judged as always."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    changed = "the x this channel read has safemon-digest64 00, the request's x_digest is 11"
    clock.now += 0.01  # after the start-up self-tests' instant
    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    good = _frame(x, w, cfg)
    effects = _answer(core, clock, sent["c0"], good)
    effects += _answer(core, clock, sent["c1"], None, input_error=changed)
    effects += _answer(core, clock, sent["c2"], None, input_error=changed)
    [reply] = _of(effects, fx.Reply)
    assert reply.meta["error_type"] == "DeviceInputError"
    assert _minority(effects) == ["c0"] and _faulted(effects) == []
    assert all(core.controller.channel_state(c) is ChannelState.UP for c in ("c0", "c1", "c2"))

    assert [_disagreement_count(core, c) for c in ("c0", "c1", "c2")] == [0, 1, 1]
    assert [s.channel for s in _of(effects, fx.SendToChannel)
            if s.meta.get("job") == "selftest"] == ["c0"]  # the lone one that computed

    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    effects = _answer(core, clock, sent["c0"], good)
    effects += _answer(core, clock, sent["c1"], _frame(x, w, cfg, flip=True))
    effects += _answer(core, clock, sent["c2"], None, input_error=changed)
    assert sorted(_minority(effects)) == ["c0", "c1", "c2"]
    assert not [e for e in _of(effects, fx.Log) if e.event == "disagreement_explained_by_the_input"]
    # judged: a disagreement no single channel explains
    assert [e.payload["kind"] for e in _of(effects, fx.Publish) if e.event_type == "fault"] == [
        "disagreement_unresolved"]


def test_a_malformed_digest_frame_is_a_channel_error(tmp_path: Path) -> None:
    """ok with two digests instead of three is a failed result: the channel is blamed."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    sent = {s.channel: s for s in _work(_ask(core, clock, _device_meta(wid, x, w.shape[1])))}
    good = _frame(x, w, cfg)
    failed = _answer(core, clock, sent["c0"], good[:2])
    assert [e for e in _of(failed, fx.Publish)
            if e.event_type == "fault" and e.payload["channel"] == "c0"
            and "3 uint64 digests" in e.payload["detail"]]


@pytest.mark.parametrize(("over", "frames", "needle"), [
    ({"out_ipc": None}, (), "needs x_ipc"),
    ({"x_ipc": "zz" * 64}, (), "CUDA IPC handles"),
    ({"x_digest": "123"}, (), "16 hex"),
    ({"out_slot_bytes": 4}, (), "out_slot_bytes"),
    ({"out_slot_bytes": 8 * 12 * 4 + 2}, (), "multiple of 4"),  # x 8×16, w 16×12
    ({"x_cols": 5}, (), "inner dimensions"),
    ({}, (np.zeros((8, 16), np.float32),), "no frame"),
])
def test_inconsistent_device_fields_are_refused_before_anything_is_sent(
        tmp_path: Path, over: dict[str, Any], frames: tuple[Any, ...], needle: str) -> None:
    """Each broken field is an InvalidInputError naming it; no channel hears of it."""
    core, _procs, clock, _cfg, wid, x, w = _registered(tmp_path)
    meta = {k: v for k, v in _device_meta(wid, x, w.shape[1], **over).items() if v is not None}
    effects = _ask(core, clock, meta, frames)
    [reply] = _of(effects, fx.Reply)
    assert reply.meta["error_type"] == "InvalidInputError" and needle in reply.meta["message"]
    assert not _work(effects)


def test_1oo1d_refuses_device_requests_it_cannot_check(tmp_path: Path) -> None:
    """1oo1D checks C against x on the host: a device request is DeviceInputError (the
    client resends through host memory) and nothing runs."""
    core, _procs, clock, _cfg, wid, x, w = _registered(tmp_path, "1oo1D")
    effects = _ask(core, clock, _device_meta(wid, x, w.shape[1]))
    [reply] = _of(effects, fx.Reply)
    assert reply.meta["error_type"] == "DeviceInputError" and not _work(effects)


def test_a_device_model_request_votes_its_layers_and_names_the_diverging_one(tmp_path: Path) -> None:
    """A model over device buffers: channels answer the model digest frame plus d(x); a
    channel whose layer-0 product differs is the minority, and the log and the metric name
    layer 0."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    layers = [Layer(wid, None, "identity")]
    spec, biases = encode_model(layers)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 3, {"command": "register_model"},
                                                   (spec, biases)), clock(), "model"))
    mid = str(_of(reg, fx.Reply)[0].meta["outcome"])
    meta = {k: v for k, v in _device_meta(wid, x, w.shape[1]).items() if k != "weight_id"}
    effects = _ask(core, clock, {"job": "model", "model_id": mid, **meta})
    sent = {s.channel: s for s in _work(effects)}
    assert all(s.arrays[0].dtype == np.uint8 and len(s.arrays) == 2 for s in sent.values())

    def frame(flip: bool) -> npt.NDArray[np.uint64]:
        def hook(i: int, c: Any, _es: Any) -> None:
            if flip and i == 0:
                c.view(np.uint32)[0, 0] ^= 1 << 20
        res = run_model(layers, {wid: w}, x, cfg.channels[0].variant, "numpy", hook)
        return np.append(res.digest_frame(), np.uint64(digest64(x)))

    _answer(core, clock, sent["c0"], frame(False), job="model")
    [reply] = _of(_answer(core, clock, sent["c1"], frame(False), job="model"), fx.Reply)
    assert reply.meta["outcome"] == "released" and reply.arrays == ()
    late = _answer(core, clock, sent["c2"], frame(True), job="model")
    logs = [e for e in _of(late, fx.Log) if e.event == "disagreement"]
    assert logs and logs[0].fields["first_diverging_layer"] == "0"
    counted = core.metrics.model_diverging_layer.labels(layer="0")._value.get()
    assert counted == 1  # safemon_model_diverging_layer_total{layer="0"}


def test_host_arrays_never_take_the_device_path_and_inproc_clients_never_try(tmp_path: Path) -> None:
    """Through a real daemon (NumPy backend): on an ipc:// ingress the client would use the
    CUDA IPC buffers for CUDA arrays only, so a NumPy x goes as a frame and
    `last_request_device` says so; an inproc:// client has device I/O off from the start."""
    from safemon.client import Client
    from tests.runtime.helpers import make_config, reference, same_bits, system

    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc")
    x, w = operands(12)
    with system(cfg) as (_daemon, client):
        assert client.device_io
        wid = client.register_weight(w)
        client.last_request_device = True  # stale from an earlier request: must be reset
        assert same_bits(client.matmul(x, wid, timeout=5.0), reference(x, w, cfg))
        assert not client.last_request_device and client.device_io_off_reason is None
        with Client(cfg) as other:  # a weight it did not register itself: host path too
            other.last_request_device = True
            assert same_bits(other.matmul(x, wid, timeout=5.0), reference(x, w, cfg))
            assert not other.last_request_device
    with system(make_config(tmp_path, "1oo1D")) as (_daemon, client):
        assert not client.device_io


def test_a_channel_one_request_behind_cannot_write_over_a_later_released_slot(
        tmp_path: Path) -> None:
    """Found on the H100 (evidence/h100-2026-12-07-stop64/, call 6): the client raised
    DisagreementError on the slot the daemon released. Each channel wrote at its index
    times the request's own slot size in the client's one output allocation, and a 2oo3
    vote is answered before the third channel is done: a channel still on a larger request
    A wrote [0, size_A) after the client had been told to take a smaller request B's slot
    1, which lay inside it. The client now sends its allocation's fixed slot stride, which
    B (smaller, in the same allocation) shares with A. The property: no range a channel
    writes for A meets the range released for B on another channel."""
    core, _procs, clock, cfg, wid, x, w = _registered(tmp_path)
    n = w.shape[1]
    xb = np.ascontiguousarray(x[:2])
    meta_a = _device_meta(wid, x, n)
    sent_a = {s.channel: s for s in _work(_ask(core, clock, meta_a))}
    fa = _frame(x, w, cfg)
    for ch in ("c1", "c2"):  # the quorum; c0 is still computing A
        _answer(core, clock, sent_a[ch], fa)
    meta_b = _device_meta(wid, xb, n, out_slot_bytes=meta_a["out_slot_bytes"])
    sent_b = {s.channel: s for s in _work(_ask(core, clock, meta_b))}
    fb = _frame(xb, w, cfg)
    _answer(core, clock, sent_b["c1"], fb)
    [reply] = _of(_answer(core, clock, sent_b["c2"], fb), fx.Reply)
    released = int(reply.meta["slot"])
    size_a, size_b = x.shape[0] * n * 4, xb.shape[0] * n * 4
    late = int(sent_a["c0"].meta["out_offset"])
    start = int(sent_b[f"c{released}"].meta["out_offset"])
    assert late + size_a <= start or start + size_b <= late, (late, size_a, start, size_b)


@pytest.mark.parametrize("slots", [1, 2, 3])
@pytest.mark.parametrize("out_bytes", [4, 2560, 349_444, 3 << 20])
def test_the_client_slot_stride_holds_the_output_in_its_allocation(slots: int, out_bytes: int) -> None:
    """The stride `ExchangeBuffers.stage` sends for a first output of `out_bytes`: at least
    that output, 256-byte aligned, and the slots inside the allocation."""
    size, stride = output_layout(None, out_bytes, slots)
    assert stride >= out_bytes and stride % 256 == 0 and stride * slots <= size


def test_a_smaller_output_keeps_the_stride_and_a_larger_one_grows_a_new_allocation() -> None:
    """The torch example's CNN: a 4096×32 output, then its 64×10 head, then a 4096×256
    output. The head stays in the same allocation at the same stride (a late writer of the
    first stays in its own slot); the largest needs a new allocation (a new handle)."""
    first = output_layout(None, 4096 * 32 * 4, 3)
    assert output_layout(first[0], 64 * 10 * 4, 3) == first
    size, stride = output_layout(first[0], 4096 * 256 * 4, 3)
    assert size > first[0] and stride >= 4096 * 256 * 4
