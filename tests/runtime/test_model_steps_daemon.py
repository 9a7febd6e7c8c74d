"""Whole-model requests with layer norms, attention, residuals and reshapes through a real
daemon with NumPy stream channels (inproc): a transformer encoder model is released bit
for bit as `reference_forward` computes it; rows that give no whole sequence are refused
by the client and, for a message that skips the client's check, by the daemon, naming the
step; a channel that diverges is outvoted (2oo3) with the first diverging step named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from safemon.client import Client
from safemon.errors import InvalidInputError
from safemon.models import Layer, Step, reference_forward
from safemon.transport import Kind
from safemon.transport import messages as msgs

from ..models.test_model_steps import encoder_model, weights
from .helpers import make_config, same_bits, system, wait_for


def _register(client: Client, seed: int = 0) -> tuple[str, list[Step], list[np.ndarray]]:
    """Register `encoder_model`'s weights and the model; (id, steps, weights in order)."""
    w = weights(seed)
    ids = {k: client.register_weight(a) for k, a in w.items()}
    rng = np.random.default_rng(seed)
    bias = {k: rng.standard_normal(w[k].shape[1]).astype(np.float32) for k in ("qkv", "o", "head")}
    named = encoder_model(bias)
    steps: list[Step] = [Layer(ids[s.weight_id], s.bias, s.act) if isinstance(s, Layer) else s
                         for s in named]
    return (client.register_model(steps), steps,
            [w[s.weight_id] for s in named if isinstance(s, Layer)])


def test_an_encoder_model_is_bit_exact_with_the_reference(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3")
    with system(cfg) as (_daemon, client):
        mid, steps, ws = _register(client, 1)
        x = np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32)
        ref = reference_forward(ws, steps, x)
        for _ in range(2):
            assert same_bits(client.run(mid, x, timeout=5.0), ref)


def test_rows_without_whole_sequences_are_refused_by_client_and_daemon(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo2")
    with system(cfg) as (_daemon, client):
        w = weights(3)
        ids = {k: client.register_weight(w[k]) for k in ("qkv", "o")}
        steps = [Layer(ids["o"]), *encoder_model()[2:4], Layer(ids["qkv"]),
                 encoder_model()[5], Layer(ids["o"]), encoder_model()[7]]
        mid = client.register_model(steps)
        x = np.ones((6, 8), np.float32)  # 6 tokens: not whole sequences of 4
        with pytest.raises(InvalidInputError, match="step 4: an input of 6 rows"):
            client.run(mid, x)
        reply = client._call(client._ingress, Kind.REQUEST,
                             msgs.ModelRequest(model_id=mid, deadline_ms=2000.0).to_meta(),
                             (x,), 3.0)
        assert reply is not None and reply.kind is Kind.ERROR
        assert "step 4: an input of 6 rows" in str(reply.meta["message"])
        ref = reference_forward([w["o"], w["qkv"], w["o"]], steps, np.ones((8, 8), np.float32))
        assert same_bits(client.run(mid, np.ones((8, 8), np.float32), timeout=5.0), ref)


def test_2oo3_outvotes_a_diverging_channel_and_names_the_step(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3", injection=True)
    with system(cfg) as (_daemon, client):
        mid, steps, ws = _register(client, 4)
        x = np.random.default_rng(5).standard_normal((2, 6)).astype(np.float32)
        ref = reference_forward(ws, steps, x)
        client.inject("c1", "bitflip-c")
        assert same_bits(client.run(mid, x, timeout=5.0), ref)
        assert wait_for(lambda: any("first diverging layer 0" in f["detail"]
                                    for f in client.status()["faults"]), 10.0)


def test_under_1oo1d_the_fallback_computes_the_other_steps_in_the_client(tmp_path: Path) -> None:
    """A `per_layer_fallback` client under 1oo1D sends each product alone and runs layer
    norms, attention, residuals and reshapes itself: the same bits as the reference."""
    cfg = make_config(tmp_path, "1oo1D")
    with system(cfg) as (_daemon, client):
        mid, steps, ws = _register(client, 6)
        x = np.random.default_rng(7).standard_normal((3, 6)).astype(np.float32)
        client.per_layer_fallback = True
        got = client.run(mid, x, timeout=10.0)
        assert client.last_run_per_layer
        assert same_bits(got, reference_forward(ws, steps, x))


def test_a_fault_in_a_product_after_other_steps_names_that_step(tmp_path: Path) -> None:
    """An injected data fault hits a channel's first product, here step 2 (after a saved
    residual and a layer norm): 2oo3 releases the reference's bits and names step 2."""
    cfg = make_config(tmp_path, "2oo3", injection=True)
    with system(cfg) as (_daemon, client):
        w = weights(8)
        ids = {k: client.register_weight(w[k]) for k in ("qkv", "o")}
        named = encoder_model()[2:8]  # save, norm, qkv, attention, o, add
        steps: list[Step] = [Layer(ids[s.weight_id]) if isinstance(s, Layer) else s
                             for s in named]
        mid = client.register_model(steps)
        x = np.random.default_rng(9).standard_normal((8, 8)).astype(np.float32)
        ref = reference_forward([w["qkv"], w["o"]], steps, x)
        client.inject("c1", "bitflip-c")
        assert same_bits(client.run(mid, x, timeout=5.0), ref)
        assert wait_for(lambda: any(f["channel"] == "c1" and "first diverging layer 2"
                                    in f["detail"] for f in client.status()["faults"]), 10.0)
