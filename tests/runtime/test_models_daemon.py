"""Whole-model requests through a real daemon with NumPy stream channels (inproc): the
released output is bit-exact with `reference_forward`; bad models are refused naming the
layer; a channel whose output diverges is outvoted (2oo3) or makes the request fail with
the first diverging layer named (2oo2); the ES arrays never travel (digest voting)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from safemon.errors import DisagreementError, InvalidInputError, SafemonError
from safemon.models import Layer, encode_model, reference_forward
from safemon.transport import Kind

from .helpers import make_config, same_bits, system, wait_for


def _mlp(seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    dims = [12, 16, 16, 8]
    ws = [rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) for i in range(3)]
    bs = [rng.standard_normal(dims[i + 1]).astype(np.float32) for i in range(3)]
    x = rng.standard_normal((5, dims[0])).astype(np.float32)
    return ws, bs, x


def test_a_three_layer_model_is_bit_exact_with_the_reference(tmp_path: Path) -> None:
    """register_model + run under 2oo3: the output equals reference_forward bit for bit,
    for gelu, relu and identity layers with and without biases, twice (same id)."""
    cfg = make_config(tmp_path, "2oo3")
    ws, bs, x = _mlp(1)
    with system(cfg) as (_daemon, client):
        ids = [client.register_weight(w) for w in ws]
        layers = [Layer(ids[0], bs[0], "gelu"), Layer(ids[1], None, "relu"), Layer(ids[2], bs[2])]
        mid = client.register_model(layers)
        assert client.register_model(layers) == mid
        ref = reference_forward(ws, layers, x)
        for _ in range(2):
            assert same_bits(client.run(mid, x, timeout=2.0), ref)


def test_bad_models_are_refused_naming_the_layer(tmp_path: Path) -> None:
    """Shapes that do not chain are refused by the client and, for a message that skips
    the client's check, by the daemon; both name the layer index; an unknown model id and
    a wrong input width are InvalidInputErrors."""
    cfg = make_config(tmp_path, "2oo2")
    ws, _bs, x = _mlp(2)
    with system(cfg) as (_daemon, client):
        ids = [client.register_weight(w) for w in ws]
        bad = [Layer(ids[2]), Layer(ids[0])]  # (16, 8) then (12, 16): 8 != 12
        with pytest.raises(InvalidInputError, match="layer 1"):
            client.register_model(bad)
        reply = client._call(client._ingress, Kind.CONTROL,
                             {"command": "register_model", "args": ""}, encode_model(bad), 2.0)
        assert reply is not None and reply.kind is Kind.ERROR
        assert "layer 1" in str(reply.meta["message"])
        with pytest.raises(InvalidInputError):
            client.run("m-never-registered", x)
        mid = client.register_model([Layer(ids[0])])
        with pytest.raises(InvalidInputError, match="columns"):
            client.run(mid, np.zeros((2, 3), np.float32))


def test_2oo3_outvotes_a_diverging_channel_and_names_layer_0(tmp_path: Path) -> None:
    """A bit flip in c0's first product: the majority's output is released (bit-exact) and
    the fault recorded for c0 names layer 0 as the first diverging layer."""
    cfg = make_config(tmp_path, "2oo3", injection=True)
    ws, bs, x = _mlp(3)
    with system(cfg) as (_daemon, client):
        ids = [client.register_weight(w) for w in ws]
        layers = [Layer(ids[0], bs[0], "relu"), Layer(ids[1], bs[1], "gelu"), Layer(ids[2])]
        mid = client.register_model(layers)
        ref = reference_forward(ws, layers, x)
        client.inject("c0", "bitflip-c")
        assert same_bits(client.run(mid, x, timeout=2.0), ref)
        assert wait_for(lambda: any("first diverging layer 0" in f["detail"]
                                    for f in client.status()["faults"]), 10.0)


def test_2oo2_disagreement_names_the_first_diverging_layer(tmp_path: Path) -> None:
    """Under 2oo2 a diverging channel makes the request fail with DisagreementError whose
    message names layer 0; no output is released."""
    cfg = make_config(tmp_path, "2oo2", injection=True)
    ws, bs, x = _mlp(4)
    with system(cfg) as (_daemon, client):
        ids = [client.register_weight(w) for w in ws]
        mid = client.register_model([Layer(ids[0], bs[0], "gelu"), Layer(ids[1]), Layer(ids[2])])
        client.inject("c1", "bitflip-c")
        with pytest.raises(DisagreementError, match="first diverging layer 0"):
            client.run(mid, x, timeout=2.0)


@pytest.mark.parametrize("fault", ["bitflip-c", "bitflip-es", "stuck", "crash", "corrupt-frame"])
def test_no_wrong_model_output_is_released_under_2oo3(tmp_path: Path, fault: str) -> None:
    """With a fault injected into one channel, every run either releases the reference
    output or raises a typed error."""
    cfg = make_config(tmp_path, "2oo3", injection=True)
    ws, bs, x = _mlp(5)
    with system(cfg) as (_daemon, client):
        ids = [client.register_weight(w) for w in ws]
        layers = [Layer(ids[0], bs[0], "gelu"), Layer(ids[1], bs[1], "relu"), Layer(ids[2])]
        mid = client.register_model(layers)
        ref = reference_forward(ws, layers, x)
        client.inject("c2", fault)
        for _ in range(4):
            try:
                got = client.run(mid, x, timeout=1.0)
            except SafemonError as exc:
                assert not isinstance(exc, InvalidInputError)
            else:
                assert same_bits(got, ref), f"{fault}: a wrong output was released"


def test_1oo1d_refuses_model_requests_with_a_typed_error_and_the_client_can_fall_back(
        tmp_path: Path) -> None:
    """Under 1oo1D the per-request ABFT check cannot see intermediate layers, so a model
    request is answered ModelUnavailableError (a VoteTimeoutError) at once, never released
    unchecked. A client made with `per_layer_fallback` then sends the layers one by one and
    gets the same bits as `reference_forward` (biases and activations included)."""
    from safemon.errors import ModelUnavailableError, VoteTimeoutError

    cfg = make_config(tmp_path, "1oo1D")
    ws, bs, x = _mlp(6)
    with system(cfg) as (_daemon, client):
        ids = [client.register_weight(w) for w in ws]
        layers = [Layer(i, b, act) for i, b, act in zip(ids, bs, ("relu", "gelu", "identity"),
                                                        strict=False)]
        mid = client.register_model(layers)
        with pytest.raises(ModelUnavailableError, match="two or more voting channels") as info:
            client.run(mid, x, timeout=2.0)
        assert isinstance(info.value, VoteTimeoutError)
        assert not client.last_run_per_layer
        client.per_layer_fallback = True
        got = client.run(mid, x, timeout=5.0)
        assert client.last_run_per_layer
        assert same_bits(got, reference_forward(ws, layers, x))


def test_output_bytes_that_differ_from_agreeing_digests_are_never_released(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If a channel's output bytes do not match the digests it voted with (here c0's output
    is altered after its digests were computed), the daemon refuses to release: the client
    gets a DisagreementError, never the altered bytes."""
    from safemon.channels.worker import ChannelWorker

    original = ChannelWorker._run_model

    def altered(self: ChannelWorker, msg: object, meta: dict[str, object]) -> object:
        out, digests = original(self, msg, meta)  # type: ignore[arg-type]
        if self.name == "c0":
            out = out.copy()
            out.view(np.uint32)[0, 0] ^= 1
        return out, digests

    monkeypatch.setattr(ChannelWorker, "_run_model", altered)
    cfg = make_config(tmp_path, "2oo2")
    ws, bs, x = _mlp(7)
    with system(cfg) as (_daemon, client):
        ids = [client.register_weight(w) for w in ws]
        mid = client.register_model([Layer(ids[0], bs[0], "relu"), Layer(ids[1]), Layer(ids[2])])
        with pytest.raises(DisagreementError, match="differ from their digests"):
            client.run(mid, x, timeout=2.0)


def test_a_1oo2d_daemon_degraded_to_1oo1d_serves_models_per_layer_to_a_client_that_opts_in(
        tmp_path: Path) -> None:
    """1oo2D after a channel crash runs 1oo1D (the other channel isolated): whole-model
    requests are refused with ModelUnavailableError, and a `per_layer_fallback` client
    still gets the reference's bits, layer by layer (the deployment's sidecar app)."""
    from safemon.errors import ModelUnavailableError

    cfg = make_config(tmp_path, "1oo2D", injection=True)
    ws, bs, x = _mlp(7)
    with system(cfg) as (daemon, client):
        ids = [client.register_weight(w) for w in ws]
        layers = [Layer(i, b, "relu") for i, b in zip(ids, bs, strict=True)]
        mid = client.register_model(layers)
        ref = reference_forward(ws, layers, x)
        assert same_bits(client.run(mid, x, timeout=2.0), ref)
        client.inject("c1", "crash")
        assert wait_for(lambda: client.status()["mode"] == "DEGRADED", 20.0)
        with pytest.raises(ModelUnavailableError):
            client.run(mid, x, timeout=2.0)
        refused = daemon.registry.get_sample_value("safemon_requests_total",
                                                   {"outcome": "model_unavailable"})
        assert refused == 1.0
        client.per_layer_fallback = True
        assert same_bits(client.run(mid, x, timeout=5.0), ref)
        assert client.last_run_per_layer
