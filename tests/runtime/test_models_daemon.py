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
                                    for f in client.status()["faults"]), 5.0)


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
