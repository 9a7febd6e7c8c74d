"""A full weight or model budget evicts the least recently used entries no request in
flight needs (`safemon.eviction`): the rule alone, the model registry, the core's effects
(the channels are told to drop the weight; a weight in flight is never chosen), and a real
daemon where clients keep getting bit-exact results while their weights come and go."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog
from prometheus_client import CollectorRegistry

from safemon.client import Client
from safemon.daemon import Daemon
from safemon.errors import InvalidInputError
from safemon.eviction import choose_evictions, eviction_order, holds_to_release
from safemon.golden_store import load_patterns
from safemon.metrics import Metrics
from safemon.model_registry import ModelRegistry
from safemon.models import Layer, reference_forward
from safemon.models.layers import encode_model
from safemon.patterns import scheduler as sch
from safemon.runtime import effects as fx
from safemon.runtime import stimuli as st
from safemon.runtime.core import RuntimeCore, StimulusFailed
from safemon.runtime.support import assign_patterns, scheduler_config
from safemon.transport.wire import Kind
from safemon.weight_id import weight_id_of

from .helpers import make_config, reference, same_bits, system
from .test_core import Clock, Processes, _form, _msg, _of

# ------------------------------------------------------------------ the rule

def test_nothing_is_evicted_while_the_new_entry_fits() -> None:
    assert choose_evictions(["a", "b"], {"a": 4, "b": 4}, set(), new_bytes=4,
                            max_count=3, max_bytes=100) == []


def test_the_oldest_entries_not_in_use_go_first_and_no_more_than_needed() -> None:
    sizes = {"a": 10, "b": 10, "c": 10, "d": 10}
    assert choose_evictions("abcd", sizes, set(), new_bytes=10, max_count=4,
                            max_bytes=100) == ["a"]
    assert choose_evictions("abcd", sizes, {"a"}, new_bytes=10, max_count=4,
                            max_bytes=100) == ["b"]
    # bytes decide: 25 more bytes need two 10-byte entries gone
    assert choose_evictions("abcd", sizes, {"b"}, new_bytes=25, max_count=9,
                            max_bytes=50) == ["a", "c"]


def test_when_only_entries_in_use_could_make_room_nothing_is_evicted() -> None:
    sizes = {"a": 10, "b": 10}
    assert choose_evictions("ab", sizes, {"a", "b"}, new_bytes=1, max_count=2,
                            max_bytes=100) is None
    assert choose_evictions("ab", sizes, set(), new_bytes=101, max_count=9,
                            max_bytes=100) is None


# ------------------------------------------------------------------ the model registry

def _model_frames(wid: str, bias: float) -> tuple[Any, ...]:
    spec, biases = encode_model([Layer(wid, np.full(3, bias, np.float32), "relu")])
    return (spec, biases)


def test_weights_nobody_holds_go_first_then_the_least_recently_used() -> None:
    held = {"a": {"c1": None}, "b": {}, "d": {"c2": None}}
    assert eviction_order(["a", "b", "c", "d"], held) == ["b", "c", "a", "d"]
    assert eviction_order(["a", "d"], held) == ["a", "d"]
    assert eviction_order(["a", "b", "c", "d"], held, also_unheld={"d"}) == ["b", "c", "d", "a"]


def test_a_client_over_its_quota_gives_up_its_oldest_holds_and_no_more() -> None:
    sizes = {"a": 40, "b": 40, "c": 40}
    assert holds_to_release(["a", "b", "c"], sizes, new_bytes=10, quota_bytes=200) == []
    assert holds_to_release(["a", "b", "c"], sizes, new_bytes=40, quota_bytes=120) == ["a"]
    assert holds_to_release(["a", "b", "c"], sizes, new_bytes=100, quota_bytes=120) == [
        "a", "b", "c"]
    assert holds_to_release(["a"], sizes, new_bytes=121, quota_bytes=120) is None


def test_the_model_registry_evicts_its_least_recently_used_model_not_in_flight() -> None:
    shapes = {"w" * 64: (2, 3)}
    reg = ModelRegistry(capacity=2)
    a, _ = reg.register(_model_frames("w" * 64, 1.0), shapes)
    b, _ = reg.register(_model_frames("w" * 64, 2.0), shapes)
    reg.touch(a.model_id)  # b is now the least recently used
    c, evicted = reg.register(_model_frames("w" * 64, 3.0), shapes)
    assert evicted == [b.model_id] and b.model_id not in reg and len(reg) == 2
    d, evicted = reg.register(_model_frames("w" * 64, 4.0), shapes,
                              in_use=frozenset({a.model_id}))
    assert evicted == [c.model_id] and a.model_id in reg and d.model_id in reg
    with pytest.raises(InvalidInputError, match="requests in flight use every one"):
        reg.register(_model_frames("w" * 64, 5.0), shapes,
                     in_use=frozenset({a.model_id, d.model_id}))
    assert reg.drop_using("w" * 64) == [a.model_id, d.model_id] and len(reg) == 0


def test_the_model_registry_holds_at_most_its_byte_budget_evicting_the_oldest_first() -> None:
    """Models count their spec and bias frames against `max_bytes`: a new model evicts the
    fewest least recently used ones not in flight that make it fit; a model larger than the
    whole budget is refused naming `limits.max_model_total_bytes`, and nothing is evicted."""
    shapes = {"w" * 64: (2, 3), "v" * 64: (2, 20)}
    one = sum(f.nbytes for f in _model_frames("w" * 64, 0.0))
    reg = ModelRegistry(capacity=100, max_bytes=3 * one)
    small = [reg.register(_model_frames("w" * 64, float(i)), shapes)[0] for i in range(3)]
    assert reg.nbytes == 3 * one and all(m.nbytes == one for m in small)
    d, evicted = reg.register(_model_frames("w" * 64, 9.0), shapes)
    assert evicted == [small[0].model_id] and len(reg) == 3 and reg.nbytes <= 3 * one
    # a wider bias (20 floats instead of 3) needs the room of two small models
    wide_frames = encode_model([Layer("v" * 64, np.full(20, 1.0, np.float32))])
    assert one < sum(f.nbytes for f in wide_frames) <= 2 * one
    wide, evicted = reg.register(wide_frames, shapes, in_use=frozenset({small[1].model_id}))
    assert evicted == [small[2].model_id, d.model_id]
    assert small[1].model_id in reg and wide.model_id in reg and reg.nbytes <= 3 * one
    with pytest.raises(InvalidInputError, match="requests in flight use every one"):
        reg.register(_model_frames("w" * 64, 10.0), shapes,
                     in_use=frozenset({small[1].model_id, wide.model_id}))
    tight = ModelRegistry(max_bytes=one - 1)
    with pytest.raises(InvalidInputError, match=rf"{one} bytes .* limits.max_model_total_bytes "
                                                 rf"\({one - 1}\)"):
        tight.register(_model_frames("w" * 64, 0.0), shapes)
    assert len(tight) == 0 and tight.nbytes == 0


def test_a_registered_models_biases_are_stored_once() -> None:
    """The layers' biases are read-only views of the model's one bias frame (a copy per
    layer stored every bias twice), which is the daemon's own read-only copy of the frame
    it received."""
    shapes = {"w" * 64: (3, 3)}
    got = (np.arange(3, dtype=np.float32), np.full(3, 2.0, np.float32))
    spec, biases = encode_model([Layer("w" * 64, got[0], "relu"), Layer("w" * 64),
                                 Layer("w" * 64, got[1])])
    model, _ = ModelRegistry().register((spec, biases), shapes)
    with_bias = [ly for ly in model.layers if ly.bias is not None]
    assert len(with_bias) == 2
    for layer, want in zip(with_bias, got, strict=True):
        assert layer.bias is not None and np.array_equal(layer.bias, want)
        assert np.shares_memory(layer.bias, model.biases) and not layer.bias.flags.writeable
    assert not np.shares_memory(model.biases, biases) and not model.biases.flags.writeable
    assert np.array_equal(model.biases, biases) and not model.spec.flags.writeable
    assert model.nbytes == spec.nbytes + biases.nbytes


# ------------------------------------------------------------------ the core

def _core(tmp_path: Path, max_weights: int, policy: str = "1oo1D",
          **limits: int | None) -> tuple[RuntimeCore, Processes, Clock]:
    cfg = make_config(tmp_path, policy, extra={"limits": {"max_weights": max_weights, **limits}})
    by_channel, ids = assign_patterns(cfg, load_patterns(cfg), None)
    procs = Processes({n: 0 for n in cfg.channel_names})
    clock = Clock()
    core = RuntimeCore(cfg, sch.Scheduler(scheduler_config(cfg, ids), rng=random.Random(0)),
                       by_channel, procs, Metrics(cfg, CollectorRegistry(), backend="numpy"),
                       "numpy", clock)
    return core, procs, clock


def _register(core: RuntimeCore, clock: Clock, w: np.ndarray, seq: int,
              client: str | None = None) -> list[fx.Effect]:
    """register_weight (from `client`, its key; None: the key-less connection b"c"), and
    the channel's acknowledgement of any weight sent to it."""
    meta = {"command": "register_weight"} | ({} if client is None else {"client": client})
    effects = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, seq, meta, (w,)),
                                            clock(), "reg"))
    for send in _of(effects, fx.SendToChannel):
        if send.meta.get("command") == "weight":
            ack = _msg(Kind.EVENT, 900 + seq, {"event": "weight", "weight_id": send.meta["args"],
                                               "ok": True}, channel=send.channel)
            effects += core.handle(st.ChannelMessage(send.channel, ack, clock(), "ack"))
    return effects


def _weights(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(n)]


def test_a_full_budget_evicts_the_oldest_weight_no_request_in_flight_needs(
        tmp_path: Path) -> None:
    core, procs, clock = _core(tmp_path, max_weights=2)
    _form(core, procs, clock)
    w1, w2, w3, w4 = _weights(4)
    id1, id2, id3 = (weight_id_of(w) for w in (w1, w2, w3))
    _register(core, clock, w1, 1)
    _register(core, clock, w2, 2)
    x = np.ones((2, 4), np.float32)
    # a request on w1 stays in flight (no result yet): w1 is needed, w2 is the one to go
    asked = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 3, {"weight_id": id1}, (x,)),
                                          clock(), "ask"))
    assert [s.meta.get("job") for s in _of(asked, fx.SendToChannel)] == ["live"]
    effects = _register(core, clock, w3, 4)
    drops = [s for s in _of(effects, fx.SendToChannel) if s.meta.get("command") == "drop_weight"]
    assert [(s.channel, s.meta["args"]) for s in drops] == [("c0", id2)]
    assert [r.meta["outcome"] for r in _of(effects, fx.Reply)] == [id3]
    assert set(core.weights) == {id1, id3}
    assert core.metrics.evictions.labels(what="weight")._value.get() == 1
    # w2's client is told so, and registers it again (test_client side: Client does)
    gone = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 5, {"weight_id": id2}, (x,)),
                                         clock(), "gone"))
    assert [r.meta["error_type"] for r in _of(gone, fx.Reply)] == ["UnknownWeightError"]
    # w1 and w3 both in flight: no room can be made, and nothing is evicted
    core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 6, {"weight_id": id3}, (x,)),
                                  clock(), "ask3"))
    refused = _register(core, clock, w4, 7)
    assert [r.meta["error_type"] for r in _of(refused, fx.Reply)] == ["WeightBudgetError"]
    assert set(core.weights) == {id1, id3}


def _quota_core(tmp_path: Path, *, max_weights: int, quota_bytes: int | None,
                **limits: int) -> tuple[RuntimeCore, Clock]:
    """A formed 1oo1D core whose budget holds `max_weights` weights of 48 bytes (4x3)."""
    core, procs, clock = _core(tmp_path, max_weights, max_weight_total_bytes=48 * max_weights,
                               max_client_weight_bytes=quota_bytes, **limits)
    _form(core, procs, clock)
    return core, clock


def _ok(effects: list[fx.Effect]) -> bool:
    return bool(_of(effects, fx.Reply)[0].meta.get("ok"))


@pytest.mark.parametrize("quota", [None, 2 * 48])
def test_under_a_quota_a_client_registering_in_a_loop_evicts_only_its_own_weights(
        tmp_path: Path, quota: int | None) -> None:
    """Budget of 4 weights of 48 bytes. Client "b" registers two, then client "a" registers
    new weights in a loop. Without a quota (plain LRU) a's loop pushes b's weights out; with
    a quota of two weights a gives up its own oldest holds, which are evicted first, and b's
    weights stay."""
    core, clock = _quota_core(tmp_path, max_weights=4, quota_bytes=quota)
    ws = [np.full((4, 3), i + 1, np.float32) for i in range(8)]
    ids = [weight_id_of(w) for w in ws]
    for seq, w in enumerate(ws[:2], start=1):
        assert _ok(_register(core, clock, w, seq, "b"))
    for seq, w in enumerate(ws[2:], start=3):
        assert _ok(_register(core, clock, w, seq, "a"))
    if quota is None:
        assert set(core.weights) == set(ids[4:])  # b's are gone
        assert not core._holders  # nothing is tracked without a quota
    else:
        assert set(core.weights) == {*ids[:2], *ids[6:]}  # b's stay, a keeps its newest two


def test_small_weights_count_at_least_their_share_of_the_count_budget(tmp_path: Path) -> None:
    """A client registering many tiny weights stays within a quota of bytes, but each counts
    at least `max_weight_total_bytes / max_weights`: it cannot fill the count budget with
    them and push out another client's weights."""
    core, clock = _quota_core(tmp_path, max_weights=4, quota_bytes=2 * 48)
    kept = [np.full((4, 3), i + 1, np.float32) for i in range(2)]
    for seq, w in enumerate(kept, start=1):
        assert _ok(_register(core, clock, w, seq, "b"))
    for seq in range(3, 13):
        assert _ok(_register(core, clock, np.full((1, 1), seq, np.float32), seq, "a"))
    assert {weight_id_of(w) for w in kept} <= set(core.weights)
    assert sum("key:a" in h for h in core._holders.values()) == 2


def test_a_weight_over_the_quota_is_refused_and_a_shared_weight_stays_for_its_other_holder(
        tmp_path: Path) -> None:
    core, clock = _quota_core(tmp_path, max_weights=8, quota_bytes=48)
    big = np.ones((4, 6), np.float32)  # 96 bytes
    refused = _register(core, clock, big, 1, "a")
    assert [(r.meta["error_type"], "limits.max_client_weight_bytes" in r.meta["message"])
            for r in _of(refused, fx.Reply)] == [("WeightBudgetError", True)]
    assert not core.weights
    shared, own = np.full((4, 3), 1, np.float32), np.full((4, 3), 2, np.float32)
    for seq, (w, client) in enumerate([(shared, "a"), (shared, "b"), (own, "a")], start=2):
        assert _ok(_register(core, clock, w, seq, client))
    # a gave up its hold on `shared` to register `own`; b still holds it, and nothing went
    assert set(core.weights) == {weight_id_of(shared), weight_id_of(own)}
    assert list(core._holders[weight_id_of(shared)]) == ["key:b"]
    assert list(core._holders[weight_id_of(own)]) == ["key:a"]
    # a key-less sender is its connection; an over-long key is refused
    assert _ok(_register(core, clock, shared, 5, None))
    assert list(core._holders[weight_id_of(shared)]) == ["key:b", "conn:" + b"c".hex()]
    long_key = _register(core, clock, own, 6, "k" * 65)
    assert [r.meta["error_type"] for r in _of(long_key, fx.Reply)] == ["InvalidInputError"]


def test_a_refused_registration_gives_up_no_hold(tmp_path: Path) -> None:
    """A weight refused by the other limits (here over `max_weight_bytes`) leaves the
    client's holds as they were: they are given up only for a registration accepted."""
    core, clock = _quota_core(tmp_path, max_weights=4, quota_bytes=2 * 48, max_weight_bytes=48)
    for seq in (1, 2):
        assert _ok(_register(core, clock, np.full((4, 3), seq, np.float32), seq, "a"))
    before = {wid: list(h) for wid, h in core._holders.items()}
    refused = _register(core, clock, np.ones((4, 6), np.float32), 3, "a")  # 96 bytes
    assert [r.meta["error_type"] for r in _of(refused, fx.Reply)] == ["InvalidInputError"]
    assert {wid: list(h) for wid, h in core._holders.items()} == before


def test_the_least_charge_is_rounded_up_so_that_the_count_budget_cannot_overfill(
        tmp_path: Path) -> None:
    """Budget of 49 bytes in 10 weights: a weight counts at least 5 bytes (49 / 10 rounded
    up), so a quota of 24 holds at most 4 tiny weights, and two clients whose quotas fit the
    49 bytes together hold at most 8 of the 10. Client b's registrations then never evict
    a's held weights (rounded down, a would hold 6 and lose 2)."""
    core, procs, clock = _core(tmp_path, 10, max_weight_total_bytes=49,
                               max_client_weight_bytes=24)
    _form(core, procs, clock)
    tiny = [np.full((1, 1), i + 1, np.float32) for i in range(12)]
    for seq, w in enumerate(tiny[:6], start=1):
        assert _ok(_register(core, clock, w, seq, "a"))
    held_by_a = {wid for wid, h in core._holders.items() if "key:a" in h}
    assert len(held_by_a) == 4
    for seq, w in enumerate(tiny[6:], start=7):
        assert _ok(_register(core, clock, w, seq, "b"))
    assert held_by_a <= set(core.weights)


def test_without_a_quota_the_client_key_is_not_looked_at(tmp_path: Path) -> None:
    core, clock = _quota_core(tmp_path, max_weights=4, quota_bytes=None)
    assert _ok(_register(core, clock, np.ones((4, 3), np.float32), 1, "k" * 65))
    assert not core._holders


def _drops(effects: list[fx.Effect]) -> list[tuple[str, str]]:
    return [(s.channel, s.meta["args"]) for s in _of(effects, fx.SendToChannel)
            if s.meta.get("command") == "drop_weight"]


def test_a_drop_that_could_not_be_queued_is_sent_again(tmp_path: Path) -> None:
    """The shell reports a `drop_weight` it could not queue (`DropSendFailed`): the next tick
    sends it again, and again while it fails; a weight registered again meanwhile, or a
    channel replaced meanwhile, is not dropped (the new copy / the new incarnation holds
    what the core holds)."""
    core, procs, clock = _core(tmp_path, max_weights=1)
    _form(core, procs, clock)
    w1, w2, w3 = _weights(3)
    id1, id2 = weight_id_of(w1), weight_id_of(w2)
    _register(core, clock, w1, 1)
    evicting = _register(core, clock, w2, 2)
    assert _drops(evicting) == [("c0", id1)]
    drop = next(s for s in _of(evicting, fx.SendToChannel) if s.meta.get("command") == "drop_weight")
    assert drop.drops_weight == id1
    core.handle(st.DropSendFailed("c0", (id1,), clock(), "full"))
    clock.now += 0.05
    assert _drops(core.handle(st.TimerTick(clock(), "tick"))) == [("c0", id1)]
    clock.now += 0.05
    assert _drops(core.handle(st.TimerTick(clock(), "tick"))) == []  # sent: owed no more
    # failed again, then w1 registered again before the next tick: nothing to drop
    core.handle(st.DropSendFailed("c0", (id1,), clock(), "full"))
    _register(core, clock, w1, 3)  # evicts w2 (the budget is 1)
    clock.now += 0.05
    assert _drops(core.handle(st.TimerTick(clock(), "tick"))) == []
    # failed for w2, then the channel is replaced: the new incarnation holds nothing of it
    core.handle(st.DropSendFailed("c0", (id2,), clock(), "full"))
    core.handle(st.ChannelRegistered("c0", 1, clock(), "reg"))
    clock.now += 0.05
    assert _drops(core.handle(st.TimerTick(clock(), "tick"))) == []
    assert set(core.weights) == {id1} and weight_id_of(w3) not in core.weights


# ------------------------------------------------------------------ a real daemon

@pytest.mark.parametrize("placement", ["inline", "process"])
def test_clients_get_bit_exact_results_while_a_small_budget_evicts_their_weights(
        tmp_path: Path, placement: str) -> None:
    """Budget of 3 weights, 5 weights and a 2-layer model in use by one client: every
    result is the reference's bits (evicted weights and models are registered again by the
    client), evictions are counted, and the channels hold only what the core holds."""
    cfg = make_config(tmp_path, "2oo3", placement=placement, transport="ipc",
                      extra={"limits": {"max_weights": 3}})
    ws = _weights(5)
    rng = np.random.default_rng(3)
    with system(cfg) as (daemon, client):
        ids = [client.register_weight(w) for w in ws[:2]]
        square = np.eye(3, 4, dtype=np.float32)[:, :3].copy()  # (3, 3): chains after w
        sid = client.register_weight(square)
        layers = [Layer(ids[0], None, "relu"), Layer(sid)]
        mid = client.register_model(layers)
        ids += [client.register_weight(w) for w in ws[2:]]  # evicts; drops the model
        for rnd in range(3):
            for i, w in enumerate(ws):
                x = rng.standard_normal((2, 4)).astype(np.float32)
                assert same_bits(client.matmul(x, ids[i], timeout=10.0),
                                 reference(x, w, cfg)), (rnd, i)
            x = rng.standard_normal((2, 4)).astype(np.float32)
            assert same_bits(client.run(mid, x, timeout=10.0),
                             reference_forward([ws[0], square], layers, x))
        assert daemon.core is not None and len(daemon.core.weights) <= 3
        weights = daemon.registry.get_sample_value("safemon_evictions_total", {"what": "weight"})
        models = daemon.registry.get_sample_value("safemon_evictions_total", {"what": "model"})
        assert weights is not None and weights >= 10 and models is not None and models >= 1
        assert client.status()["mode"] == "NORMAL"
        if placement == "inline":
            assert daemon._inline is not None
            for ch in daemon._inline._current.values():
                assert set(ch.worker._weights) == set(daemon.core.weights), ch.name


def test_a_client_over_its_quota_never_pushes_another_clients_weights_out(
        tmp_path: Path) -> None:
    """A real daemon (inline channels), a budget of 4 weights and a quota of two per client:
    one `Client` keeps two weights while another registers six in turn. The first client's
    weights are never evicted; the second's results stay bit-exact (its evicted weights are
    registered again by `Client`), and every channel holds what the core holds."""
    cfg = make_config(tmp_path, "2oo3", placement="inline", transport="ipc",
                      extra={"limits": {"max_weights": 4, "max_weight_total_bytes": 4 * 48,
                                        "max_client_weight_bytes": 2 * 48}})
    ws = _weights(8)
    rng = np.random.default_rng(5)
    with system(cfg) as (daemon, keeper), Client(cfg) as churner:
        assert daemon.core is not None and daemon._inline is not None
        kept = [keeper.register_weight(w) for w in ws[:2]]
        churned = []
        for w in ws[2:]:
            churned.append(churner.register_weight(w))
            assert set(kept) <= set(daemon.core.weights)
        for i, wid in [(0, kept[0]), (1, kept[1]), (2, churned[0]), (7, churned[-1])]:
            x = rng.standard_normal((2, 4)).astype(np.float32)
            user = keeper if i < 2 else churner
            assert same_bits(user.matmul(x, wid, timeout=10.0), reference(x, ws[i], cfg)), i
        assert set(kept) <= set(daemon.core.weights)
        evicted = daemon.registry.get_sample_value("safemon_evictions_total", {"what": "weight"})
        assert evicted is not None and evicted >= 4  # the churner's own, never the keeper's
        for ch in daemon._inline._current.values():
            assert set(ch.worker._weights) == set(daemon.core.weights), ch.name


def test_a_model_with_biases_on_an_evicted_weight_registers_after_its_weight_again(
        tmp_path: Path) -> None:
    """Budget of 2 weights: w0 is evicted by w1 and w2; registering a model whose layer has a
    bias on w0 gets `UnknownWeightError` from the daemon (it was `InvalidInputError`, which the
    client does not recover from), so the client registers w0 again and the model runs
    bit-exact."""
    cfg = make_config(tmp_path, "2oo3", placement="inline", transport="ipc",
                      extra={"limits": {"max_weights": 2}})
    ws = _weights(3)
    with system(cfg) as (daemon, client):
        ids = [client.register_weight(w) for w in ws]
        assert daemon.core is not None and ids[0] not in daemon.core.weights
        layers = [Layer(ids[0], np.full(3, 0.5, np.float32), "relu")]
        mid = client.register_model(layers)
        x = np.ones((2, 4), np.float32)
        assert same_bits(client.run(mid, x, timeout=10.0), reference_forward([ws[0]], layers, x))


def test_models_past_the_byte_budget_evict_the_oldest_and_run_bit_exact_when_sent_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real daemon whose model budget (`limits.max_model_total_bytes`) holds two of one
    client's three models: the third evicts the first (counted), a request on it gets
    `UnknownModelError`, which `Client` answers by registering it again, and every result is
    the reference's bits while the daemon never holds more than the budget."""
    ws = _weights(1)
    biases = [np.full(3, 0.25 * (i + 1), np.float32) for i in range(3)]
    one = sum(f.nbytes for f in encode_model([Layer(weight_id_of(ws[0]), biases[0], "relu")]))
    cfg = make_config(tmp_path, "2oo3", extra={"limits": {"max_model_total_bytes": 2 * one}})
    with system(cfg) as (daemon, client):
        assert daemon.core is not None
        sent_again: list[str] = []
        reregister = client._reregister_model

        def spy(model_id: str, reply: Any) -> None:
            sent_again.append(str(reply.meta.get("error_type")))
            reregister(model_id, reply)

        monkeypatch.setattr(client, "_reregister_model", spy)
        wid = client.register_weight(ws[0])
        models = [[Layer(wid, b, "relu")] for b in biases]
        ids = [client.register_model(layers) for layers in models]
        assert ids[0] not in daemon.core.models and ids[1] in daemon.core.models
        assert daemon.core.models.nbytes <= 2 * one
        x = np.random.default_rng(11).standard_normal((2, 4)).astype(np.float32)
        for mid, layers in zip(ids, models, strict=True):
            assert same_bits(client.run(mid, x, timeout=10.0),
                             reference_forward([ws[0]], layers, x)), mid
            assert daemon.core.models.nbytes <= 2 * one and len(daemon.core.models) <= 2
        # least recently used first: each model was evicted by the next one sent again
        assert sent_again == ["UnknownModelError"] * 3
        evicted = daemon.registry.get_sample_value("safemon_evictions_total", {"what": "model"})
        assert evicted == 1 + len(sent_again)
        assert client.status()["mode"] == "NORMAL"


def test_channels_drop_an_evicted_weight_whose_first_drop_could_not_be_queued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real daemon with inline channels, budget of 2 weights, where the shell cannot queue
    the first `drop_weight` to each channel (as at a full socket): once the retries have
    gone out, every channel holds exactly the weights the core holds, and results stay
    bit-exact."""
    cfg = make_config(tmp_path, "2oo3", placement="inline", transport="ipc",
                      extra={"limits": {"max_weights": 2}})
    ws = _weights(3)
    with system(cfg) as (daemon, client):
        assert daemon.core is not None and daemon._inline is not None
        refused: list[str] = []
        real = daemon._send_to

        def send_to(name: str, kind: Kind, seq: int, meta: dict[str, Any],
                    arrays: tuple[Any, ...] = ()) -> bool:
            if meta.get("command") == "drop_weight" and name not in refused:
                refused.append(name)
                return False
            return real(name, kind, seq, meta, arrays)

        monkeypatch.setattr(daemon, "_send_to", send_to)
        ids = [client.register_weight(w) for w in ws]  # the third evicts the first
        assert sorted(refused) == sorted(cfg.channel_names)
        x = np.ones((2, 4), np.float32)
        assert same_bits(client.matmul(x, ids[2], timeout=10.0), reference(x, ws[2], cfg))
        deadline = time.monotonic() + 5.0
        held = {}
        while time.monotonic() < deadline:
            held = {ch.name: set(ch.worker._weights) for ch in daemon._inline._current.values()}
            if all(h == set(daemon.core.weights) for h in held.values()):
                break
            time.sleep(0.05)
        assert ids[0] not in daemon.core.weights
        assert all(h == set(daemon.core.weights) for h in held.values()), held


class _FailingFirstCore:
    """A stand-in core: its first stimulus asks for a `drop_weight` (which the shell cannot
    queue) and then fails in the core (`how="core"`), or in the shell, on an effect after
    the drop (`how="effect"`: a log level structlog lacks); the `DropSendFailed` fed back
    fails too when `how="feedback"`."""

    def __init__(self, how: str) -> None:
        self.fed: list[st.Stimulus] = []
        self.how = how

    def handle(self, stim: st.Stimulus) -> list[fx.Effect]:
        self.fed.append(stim)
        drop = fx.SendToChannel("c0", Kind.CONTROL, 1, {"command": "drop_weight"},
                                drops_weight="w1")
        if len(self.fed) == 1 and self.how == "effect":
            return [drop, fx.Log("no_such_level", "never_logged")]  # type: ignore[arg-type]
        if len(self.fed) == 1:
            raise StimulusFailed([drop], RuntimeError("the first stimulus fails"))
        if self.how == "feedback":
            raise StimulusFailed([], RuntimeError("the feedback fails too"))
        return []


@pytest.mark.parametrize("how", ["core", "feedback", "effect"])
def test_what_a_failed_stimulus_fed_back_is_handled_before_its_failure_is_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """A stimulus whose handling raises (in the core, or on a later effect in the shell)
    still had its effects before the failure carried out; a drop among them that the shell
    could not queue is fed back at once, not after the next stimulus. A feedback stimulus
    that fails in turn is logged as itself, and the first failure is the one raised."""
    daemon = Daemon(make_config(tmp_path, "2oo3", placement="inline", transport="ipc"),
                    registry=CollectorRegistry())
    core = _FailingFirstCore(how)
    daemon.core = core  # type: ignore[assignment]
    monkeypatch.setattr(daemon, "_send_to", lambda *args, **kwargs: False)
    raised = (pytest.raises(AttributeError, match="no_such_level") if how == "effect"
              else pytest.raises(StimulusFailed, match="the first stimulus fails"))
    try:
        with structlog.testing.capture_logs() as logs, raised:
            daemon._feed(st.TimerTick(0.0, "tick"))
    finally:
        daemon.close()  # never started: closes its ZeroMQ context
    assert [type(s) for s in core.fed] == [st.TimerTick, st.DropSendFailed]
    fed_back = core.fed[1]
    assert isinstance(fed_back, st.DropSendFailed) and fed_back.weight_ids == ("w1",)
    assert not daemon._feedback
    failed = [e for e in logs if e["event"] == "feedback_handling_failed"]
    assert [(e["channel"], e["weight_ids"]) for e in failed] == (
        [("c0", ["w1"])] if how == "feedback" else [])


def _one_corrected_flip_in_c0(daemon: Any, client: Any, cfg: Any,
                              w: np.ndarray) -> tuple[str, Callable[[], float]]:
    """Register `w`, flip one bit of its ECC store in inline channel c0 and compute with it
    (bit-exact: the flip is corrected at use); once the daemon counts that one correction,
    return the weight id and a reader of `safemon_ecc_corrected_total{buffer="weights"}`."""
    from .helpers import wait_for

    wid = client.register_weight(w)
    assert daemon._inline is not None
    store = daemon._inline._current["c0"].worker._weights[wid].verified()
    store.reshape(-1).view(np.uint8)[5] ^= np.uint8(1 << 3)
    x = np.ones((2, 4), np.float32)
    assert same_bits(client.matmul(x, wid, timeout=10.0), reference(x, w, cfg))

    def corrected() -> float:
        value = daemon.registry.get_sample_value("safemon_ecc_corrected_total",
                                                 {"buffer": "weights"})
        return value or 0.0

    assert wait_for(lambda: corrected() == 1.0)
    return wid, corrected


def test_an_evicted_weights_ecc_counts_stay_in_the_channels_totals(tmp_path: Path) -> None:
    """A channel reports cumulative ECC totals per incarnation, which must never go down:
    the corrections counted on a weight it later drops stay in them (no
    `bad_heartbeat_ecc`, the counter keeps its value)."""

    from .helpers import wait_for

    cfg = make_config(tmp_path, "2oo3", placement="inline", extra={"limits": {"max_weights": 1}})
    w1, w2 = _weights(2)
    with system(cfg) as (daemon, client), structlog.testing.capture_logs() as logs:
        _, corrected = _one_corrected_flip_in_c0(daemon, client, cfg, w1)
        client.register_weight(w2)  # evicts w1: c0 drops it
        assert daemon.core is not None and set(daemon.core.weights) == {weight_id_of(w2)}
        hb = cfg.timing.heartbeat_interval_s
        assert not wait_for(lambda: corrected() != 1.0, timeout=5 * hb)
    assert not [e for e in logs if e.get("event") == "bad_heartbeat_ecc"]


def test_a_weight_stored_again_over_an_undropped_copy_keeps_the_ecc_totals(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drop of an evicted weight never reaches c0 (refused by the shell, as at a full
    socket), and the weight is registered again before the retry: c0 stores the new copy
    over its old one, whose corrected count must stay in its totals (no
    `bad_heartbeat_ecc`, the counter keeps its value), and later results stay bit-exact."""

    from .helpers import wait_for

    cfg = make_config(tmp_path, "2oo3", placement="inline", extra={"limits": {"max_weights": 1}})
    w1, w2 = _weights(2)
    x = np.ones((2, 4), np.float32)
    with system(cfg) as (daemon, client), structlog.testing.capture_logs() as logs:
        id1, corrected = _one_corrected_flip_in_c0(daemon, client, cfg, w1)
        real = daemon._send_to

        def send_to(name: str, kind: Kind, seq: int, meta: dict[str, Any],
                    arrays: tuple[Any, ...] = ()) -> bool:
            if meta.get("command") == "drop_weight" and name == "c0":
                return False  # refused every time: only a new store can replace the copy
            return real(name, kind, seq, meta, arrays)

        monkeypatch.setattr(daemon, "_send_to", send_to)
        client.register_weight(w2)  # evicts w1; c0 keeps it
        assert id1 in daemon._inline._current["c0"].worker._weights
        client.register_weight(w1)  # evicts w2; c0 stores w1 over its old copy
        assert same_bits(client.matmul(x, id1, timeout=10.0), reference(x, w1, cfg))
        hb = cfg.timing.heartbeat_interval_s
        assert not wait_for(lambda: corrected() != 1.0, timeout=5 * hb)
    assert not [e for e in logs if e.get("event") == "bad_heartbeat_ecc"]


def test_a_stream_of_new_weights_never_keeps_a_voting_channel_from_its_tests(
        tmp_path: Path) -> None:
    """Every new weight takes the channels out of the self-test schedule while they store
    it, and with eviction the stream of new weights has no end. A channel rejoins with the
    self-test and scrub it was due (found by a review: the schedule restarted at each
    rejoin, and a registration every 0.1 s left a voting channel with no self-test and no
    scrub for as long as it went on). 10 s of core time, a new weight every 0.1 s."""

    from .test_core import _pass_selftests

    core, procs, clock = _core(tmp_path, max_weights=2)
    _form(core, procs, clock)
    t = core.config.timing
    assert t.scrub_interval_s is not None
    ws = _weights(3)
    tests = scrubs = registered = 0
    end, next_reg, i = clock.now + 10.0, clock.now, 0
    while clock.now < end:
        effects: list[fx.Effect] = []
        if clock.now >= next_reg:
            got = _register(core, clock, ws[i % 3], 100 + i)
            registered += sum(1 for r in _of(got, fx.Reply) if r.kind is Kind.REPLY)
            effects += got
            i, next_reg = i + 1, clock.now + 0.1
        effects += core.handle(st.TimerTick(clock.now, st.stimulus_id("tick")))
        sends = _of(effects, fx.SendToChannel)
        tests += sum(1 for s in sends if s.meta.get("job") == "selftest")
        scrubs += sum(1 for s in sends if s.meta.get("command") == "scrub")
        _pass_selftests(core, sends, clock)
        clock.now += 0.05
    assert registered >= 90  # the weights still come and go
    assert tests >= 0.8 * 10.0 / t.dti_s and scrubs >= 0.8 * 10.0 / t.scrub_interval_s
    assert core.controller.mode.value == "NORMAL"


def test_a_new_weight_waits_while_a_voting_channel_is_due_its_selftest(tmp_path: Path) -> None:
    """A voting channel whose last passed self-test started more than a DTI ago is due its
    next one: a registration (a new weight would take it out of the schedule) is answered
    BusyError, before the weight is hashed, until it has passed."""
    core, procs, clock = _core(tmp_path, max_weights=4)
    _form(core, procs, clock)
    w1, w2 = _weights(2)
    _register(core, clock, w1, 1)
    core._selftest_passed_at["c0"] = clock.now - 2 * core.config.timing.dti_s
    refused = _register(core, clock, w2, 2)
    assert [r.meta.get("error_type") for r in _of(refused, fx.Reply)] == ["BusyError"]
    again = _register(core, clock, w1, 3)
    assert [r.meta.get("error_type") for r in _of(again, fx.Reply)] == ["BusyError"]
    core._selftest_passed_at["c0"] = clock.now
    accepted = _register(core, clock, w2, 4)
    assert [r.meta.get("outcome") for r in _of(accepted, fx.Reply)] == [weight_id_of(w2)]


def test_a_request_whose_weight_was_evicted_keeps_its_timeout(tmp_path: Path) -> None:
    """The client registers an evicted weight again inside the request, within the
    request's timeout: a 16 MiB weight that three inline NumPy channels take far longer to
    store than the request's 0.2 s is answered VoteTimeoutError saying so (not after the
    registration's own, much longer, wait), and the daemon goes on storing it."""
    from safemon.errors import VoteTimeoutError

    from .helpers import wait_for

    cfg = make_config(tmp_path, "2oo3", placement="inline", transport="ipc",
                      extra={"limits": {"max_weights": 1}})
    big = np.random.default_rng(8).standard_normal((2048, 2048)).astype(np.float32)
    small = _weights(1)[0]
    with system(cfg) as (daemon, client):
        client.control_timeout_s = 30.0
        big_id = client.register_weight(big)
        client.register_weight(small)  # evicts the big one
        assert daemon.core is not None and big_id not in daemon.core.weights
        with pytest.raises(VoteTimeoutError, match="registering it again did not finish"):
            client.matmul(np.ones((1, 2048), np.float32), big_id, timeout=0.2)
        assert wait_for(lambda: big_id in daemon.core.weights, timeout=30.0)  # type: ignore[union-attr]


def test_a_model_whose_weights_do_not_fit_together_is_a_budget_error(tmp_path: Path) -> None:
    """Budget of one weight, a model of two: each registration evicts the other, and
    register_model says that the weights do not fit together (WeightBudgetError), not that
    a weight the caller has just registered is unknown."""
    from safemon.errors import WeightBudgetError

    cfg = make_config(tmp_path, "2oo3", extra={"limits": {"max_weights": 1}})
    w1, w2 = _weights(2)
    with system(cfg) as (_daemon, client):
        first, second = client.register_weight(w1), client.register_weight(w2.T.copy())
        with pytest.raises(WeightBudgetError, match=r"2 weights .* do not fit"):
            client.register_model([Layer(first), Layer(second)])


def test_results_that_arrive_while_a_channel_stores_a_weight_still_count(
        tmp_path: Path) -> None:
    """A self-test or scrub sent before a channel left the schedule to store a weight
    reports while it is out (found by a review: the reports were dropped, so a
    registration during each test or scrub discarded failures and uncorrectable words).
    A wrong self-test result faults the channel, and so does an uncorrectable word (1oo1D
    here: the fault latches SAFE)."""
    core, procs, clock = _core(tmp_path, max_weights=8)
    _form(core, procs, clock)
    w1, w2 = _weights(2)
    clock.now += core.config.timing.dti_s  # the next self-test falls due
    sent = _of(core.handle(st.TimerTick(clock.now, st.stimulus_id("t"))), fx.SendToChannel)
    [test] = [s for s in sent if s.meta.get("job") == "selftest"]
    core._selftest_passed_at["c0"] = clock.now  # (due a test: registrations would wait)
    # a registration while that test runs: c0 leaves the schedule to store w1 (no ack yet)
    core.handle(st.IngressMessage(
        b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w1,)), clock(), "reg"))
    assert "c0" not in core.scheduler.channels
    a, b = test.arrays
    wrong = np.zeros((a.shape[0], b.shape[1]), np.float32)
    es = np.zeros((1, 1), np.uint32)
    reply = _msg(Kind.RESULT, test.seq, {"ok": True, "job": "selftest"}, (wrong, es), "c0")
    core.handle(st.ChannelMessage("c0", reply, clock(), st.stimulus_id("r")))
    assert core.controller.mode.value == "SAFE"  # 1oo1D: the wrong result faulted c0

    (tmp_path / "b").mkdir()
    core2, procs2, clock2 = _core(tmp_path / "b", max_weights=8)
    _form(core2, procs2, clock2)
    core2._selftest_passed_at["c0"] = clock2.now
    core2.handle(st.IngressMessage(
        b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w2,)), clock2(), "reg"))
    scrub = _msg(Kind.EVENT, 9, {"event": "scrub", "buffer": "weights", "corrected": 0,
                                 "uncorrectable": 1, "count": 1}, channel="c0")
    core2.handle(st.ChannelMessage("c0", scrub, clock2(), st.stimulus_id("s")))
    assert core2.controller.mode.value == "SAFE"  # an uncorrectable word faulted c0


def test_a_selftest_failed_while_storing_is_retested_as_soon_as_the_channel_rejoins(
        tmp_path: Path) -> None:
    """2oo3: a voting channel's wrong self-test result that arrives while it stores a
    weight starts the fault's retests (as any failed self-test of a voting channel does);
    they cannot run while it stores, and the first is sent the moment it rejoins."""
    core, procs, clock = _core(tmp_path, max_weights=8, policy="2oo3")
    cfg = core.config
    _form(core, procs, clock)
    clock.now += cfg.timing.dti_s
    sent = _of(core.handle(st.TimerTick(clock.now, st.stimulus_id("t"))), fx.SendToChannel)
    [test] = [s for s in sent if s.meta.get("job") == "selftest" and s.channel == "c0"]
    for ch in cfg.channel_names:
        core._selftest_passed_at[ch] = clock.now
    (w,) = _weights(1)
    reg = core.handle(st.IngressMessage(
        b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)), clock(), "reg"))
    stores = [s for s in _of(reg, fx.SendToChannel) if s.meta.get("command") == "weight"]
    a, b = test.arrays
    wrong = _msg(Kind.RESULT, test.seq, {"ok": True, "job": "selftest"},
                 (np.zeros((a.shape[0], b.shape[1]), np.float32), np.zeros((1, 1), np.uint32)),
                 "c0")
    clock.now += 0.01
    got = core.handle(st.ChannelMessage("c0", wrong, clock(), st.stimulus_id("r")))
    assert "fault_retest_started" in [e.event for e in got if isinstance(e, fx.Log)]
    [store] = [s for s in stores if s.channel == "c0"]
    ack = _msg(Kind.EVENT, 50, {"event": "weight", "weight_id": store.meta["args"], "ok": True},
               channel="c0")
    rejoined = core.handle(st.ChannelMessage("c0", ack, clock(), st.stimulus_id("a")))
    assert [s.meta.get("job") for s in _of(rejoined, fx.SendToChannel)] == ["selftest"]
