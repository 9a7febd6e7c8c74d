"""A channel decodes a whole-model request's frames once per model
(`ChannelWorker._layers_of`): later requests with the same frames reuse the decoding,
frames that fail to decode are refused every time, and the cache is bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zmq

from safemon.channels import worker as worker_module
from safemon.channels.worker import ChannelWorker
from safemon.errors import InvalidInputError
from safemon.models import Layer, encode_model
from safemon.weight_id import weight_id_of

from ..runtime.helpers import make_config


@pytest.fixture
def worker(tmp_path: Path):  # type: ignore[no-untyped-def]
    ctx = zmq.Context()
    try:
        yield ChannelWorker(ctx, make_config(tmp_path, "2oo3"), "c0", incarnation=0, epoch=1,
                            link="")
    finally:
        ctx.term()


def _weight(worker: ChannelWorker, k: int, n: int, seed: int) -> str:
    w = np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32)
    wid = weight_id_of(w)
    assert worker._store_weight(wid, w)
    return wid


def test_the_same_frames_are_decoded_once(worker: ChannelWorker,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import safemon.models as models

    w1, w2 = _weight(worker, 8, 6, 1), _weight(worker, 6, 4, 2)
    layers = [Layer(w1, np.arange(6, dtype=np.float32), "relu"), Layer(w2, None, "gelu")]
    spec, biases = encode_model(layers)
    calls = []
    real = models.decode_model
    monkeypatch.setattr(models, "decode_model", lambda *a: calls.append(1) or real(*a))
    first, frames = worker._layers_of(spec, biases)
    again, _ = worker._layers_of(spec.copy(), biases.copy())  # equal bytes, new arrays
    assert again is first and len(calls) == 1
    assert frames == (spec.tobytes(), biases.tobytes())
    assert [(ly.weight_id, ly.act.value) for ly in first.layers] == [(w1, "relu"),
                                                                      (w2, "gelu")]
    assert first.layers[0].bias is not None and first.layers[0].bias.tolist() == list(range(6))
    assert (first.out_cols, first.widths, first.weight_ids) == (4, (6, 4), (w1, w2))
    other, _ = worker._layers_of(*encode_model(layers[:1]))
    assert other is not first and len(calls) == 2


def test_a_repeat_of_the_last_model_gets_the_kept_key_and_a_changed_bias_does_not(
        worker: ChannelWorker) -> None:
    """The last request's model is found by comparing bytes, and the kept key (whose bytes
    are hashed already) comes back; one changed bias byte is another model."""
    wid = _weight(worker, 4, 8, 5)
    spec, biases = encode_model([Layer(wid, np.arange(8, dtype=np.float32), "relu")])
    first, key = worker._layers_of(spec, biases)
    again, key_again = worker._layers_of(spec.copy(), biases.copy())
    assert again is first and key_again is key
    changed = biases.copy()
    changed.view(np.uint8)[5] ^= 1
    other, other_key = worker._layers_of(spec, changed)
    assert other is not first and other_key == (spec.tobytes(), changed.tobytes())
    assert other.layers[0].bias is not None
    assert other.layers[0].bias.tobytes() == changed.tobytes()


def test_frames_that_fail_are_refused_every_time(worker: ChannelWorker) -> None:
    unknown = Layer("w" + "0" * 40, None, "identity")
    spec, biases = encode_model([unknown])
    for _ in range(2):
        with pytest.raises(InvalidInputError):
            worker._layers_of(spec, biases)
    assert not worker._decoded


def test_the_cache_keeps_the_most_recently_used_models(worker: ChannelWorker,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "DECODED_MODELS", 2)
    wid = _weight(worker, 4, 4, 3)
    models = [encode_model([Layer(wid, np.full(4, v, np.float32), "identity")]) for v in (1, 2, 3)]
    a = worker._layers_of(*models[0])[0]
    worker._layers_of(*models[1])
    assert worker._layers_of(*models[0])[0] is a  # used again: now the most recent
    worker._layers_of(*models[2])  # evicts models[1]
    assert list(worker._decoded) == [tuple(x.tobytes() for x in models[0]),
                                     tuple(x.tobytes() for x in models[2])]


def test_the_cache_keeps_no_more_than_its_byte_budget_beyond_the_newest(
        worker: ChannelWorker, monkeypatch: pytest.MonkeyPatch) -> None:
    wid = _weight(worker, 4, 64, 4)
    models = [encode_model([Layer(wid, np.full(64, v, np.float32), "identity")])
              for v in (1, 2, 3)]
    one = sum(len(x.tobytes()) for x in models[0])
    monkeypatch.setattr(worker_module, "DECODED_MODEL_BYTES", 2 * one)
    for m in models:
        worker._layers_of(*m)
    assert list(worker._decoded) == [tuple(x.tobytes() for x in m) for m in models[1:]]
    monkeypatch.setattr(worker_module, "DECODED_MODEL_BYTES", 1)
    worker._layers_of(*models[0])  # over budget on its own: kept alone, the newest
    assert list(worker._decoded) == [tuple(x.tobytes() for x in models[0])]


def test_a_kept_decodings_biases_are_views_of_its_key_not_another_copy(
        worker: ChannelWorker) -> None:
    """The layers' biases view the bias bytes that key the decoding: the channel holds each
    kept model's biases once, and not the request's frame."""
    wid = _weight(worker, 4, 8, 6)
    spec, biases = encode_model([Layer(wid, np.arange(8, dtype=np.float32), "relu")])
    model, key = worker._layers_of(spec, biases)
    bias = model.layers[0].bias
    assert bias is not None and bias.tobytes() == key[1] and not bias.flags.writeable
    assert not np.shares_memory(bias, biases)
    assert np.shares_memory(bias, np.frombuffer(key[1], dtype=np.uint8))


def test_a_kept_decoding_carries_the_sizes_of_a_model_with_steps_besides_products(
        worker: ChannelWorker) -> None:
    """Output width, per-step widths and weight ids (each once, in layer order) are worked
    out at decoding, and equal what `safemon.models.forward` gives for the same steps."""
    from safemon.models.forward import activation_widths, output_columns
    from safemon.models.ops import AddResidual, Attention, LayerNorm, Reshape, SaveResidual

    up, qkv, head = _weight(worker, 4, 16, 7), _weight(worker, 8, 24, 8), _weight(worker, 16, 3, 9)
    steps = [Layer(up, None, "identity"), Reshape(8), SaveResidual(),
             Layer(qkv, None, "identity"), Attention(heads=2, tokens=2), AddResidual(),
             LayerNorm(np.ones(8, np.float32), np.zeros(8, np.float32), 1e-5), Reshape(16),
             Layer(head, None, "relu")]
    model = worker._layers_of(*encode_model(steps))[0]
    assert model.out_cols == output_columns(model.layers, worker._weights) == 3
    assert model.widths == tuple(activation_widths(model.layers, worker._weights))
    assert model.widths == (16, 16, 16, 48, 16, 16, 16, 16, 3)
    assert model.weight_ids == (up, qkv, head)
