"""Layers, model validation (naming the layer), the wire form and model ids, and the
reference forward against a plain float32 loop."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.config import VariantConfig
from safemon.errors import InvalidInputError, UnknownWeightError
from safemon.kernels.api import run_variant
from safemon.models import (
    Activation,
    Layer,
    decode_model,
    encode_model,
    epilogue,
    first_diverging_layer,
    model_id_of,
    reference_forward,
    run_model,
    validate_layers,
)

SHAPES = {"a": (8, 16), "b": (16, 4), "c": (5, 4)}


def test_layer_normalises_the_activation_and_refuses_unknown_ones() -> None:
    """A str activation becomes the enum; an unknown name is an InvalidInputError."""
    assert Layer("a", activation="gelu").activation is Activation.GELU
    with pytest.raises(InvalidInputError, match="unknown activation"):
        Layer("a", activation="swish")


def test_layer_refuses_a_float64_or_nonfinite_bias() -> None:
    """Biases are finite float32 vectors; anything else is refused at construction."""
    with pytest.raises(InvalidInputError, match="float32"):
        Layer("a", np.zeros(4))
    with pytest.raises(InvalidInputError, match="NaN"):
        Layer("a", np.array([np.nan], dtype=np.float32))


@pytest.mark.parametrize(("layers", "needle"), [
    ([Layer("a"), Layer("c")], "layer 1: weight is 5x4 but layer 0 outputs 16"),
    ([Layer("a"), Layer("zz")], "layer 1: weight 'zz' is not registered"),
    ([Layer("a", np.zeros(3, np.float32))], "layer 0: bias has 3 elements"),
    ([], "non-empty"),
])
def test_validation_names_the_layer_at_fault(layers: list[Layer], needle: str) -> None:
    """Mismatched shapes, unknown weights and wrong bias lengths name the layer index."""
    with pytest.raises(InvalidInputError, match=needle):
        validate_layers(layers, SHAPES)


def test_the_wire_form_round_trips_and_the_id_is_a_content_address() -> None:
    """decode(encode(layers)) gives equal layers; equal layers give equal ids, a changed
    bias gives another id."""
    b = np.arange(16, dtype=np.float32)
    layers = [Layer("a", b, "relu"), Layer("b", None, "gelu")]
    back = decode_model(*encode_model(layers), SHAPES)
    assert [(ly.weight_id, ly.act) for ly in back] == [("a", Activation.RELU), ("b", Activation.GELU)]
    assert back[0].bias is not None and np.array_equal(back[0].bias, b)
    assert model_id_of(back) == model_id_of(layers)
    assert model_id_of([Layer("a", b + 1, "relu"), Layer("b", None, "gelu")]) != model_id_of(layers)


def test_decoded_layers_view_the_bias_frame_and_cannot_write_it() -> None:
    """decode_model stores no second copy of the biases: each layer's bias is a read-only
    view of the bias frame, and the frame the caller passed stays writeable."""
    spec, biases = encode_model([Layer("a", np.arange(16, dtype=np.float32), "relu"),
                                 Layer("b", np.ones(4, np.float32))])
    back = decode_model(spec, biases, SHAPES)
    for layer, want in zip(back, (np.arange(16, dtype=np.float32), np.ones(4, np.float32)),
                           strict=True):
        assert layer.bias is not None and np.array_equal(layer.bias, want)
        assert np.shares_memory(layer.bias, biases) and not layer.bias.flags.writeable
    assert biases.flags.writeable


def test_decode_refuses_a_short_bias_frame() -> None:
    """A spec that announces a bias the bias frame does not hold is refused."""
    spec, _ = encode_model([Layer("a", np.zeros(16, np.float32))])
    with pytest.raises(InvalidInputError, match="layer 0"):
        decode_model(spec, np.zeros(3, np.float32), SHAPES)


def test_decode_names_an_unknown_weight_of_a_layer_with_a_bias_as_unknown() -> None:
    """A layer with a bias whose weight is not registered (evicted, a restarted daemon) is
    an UnknownWeightError, as for a layer without one: `Client.register_model` registers
    its weights again on that error and on no other."""
    for bias in (np.zeros(16, np.float32), None):
        spec, biases = encode_model([Layer("gone", bias)])
        with pytest.raises(UnknownWeightError, match="layer 0: weight 'gone' is not registered"):
            decode_model(spec, biases, SHAPES)


def test_reference_forward_is_product_then_bias_then_activation_per_layer() -> None:
    """reference_forward equals the channel kernel's product followed by the epilogue,
    layer by layer, and run_model on the NumPy backend gives the same bits."""
    rng = np.random.default_rng(3)
    w = [rng.standard_normal(SHAPES[k]).astype(np.float32) for k in ("a", "b")]
    layers = [Layer("a", rng.standard_normal(16).astype(np.float32), "gelu"), Layer("b", None, "relu")]
    x = rng.standard_normal((3, 8)).astype(np.float32)
    vc = VariantConfig()
    h = x
    for wi, ly in zip(w, layers, strict=True):
        h = epilogue(run_variant(h, wi, vc.to_variant(3, wi.shape[1], h.shape[1]), "numpy").c, ly.bias, ly.act)
    ref = reference_forward(w, layers, x)
    assert np.array_equal(ref.view(np.uint32), h.view(np.uint32))
    res = run_model(layers, {"a": w[0], "b": w[1]}, x, vc, "numpy")
    assert np.array_equal(res.out.view(np.uint32), ref.view(np.uint32))
    assert len(res.digest_frame()) == 5


def test_first_diverging_layer_reads_the_digest_frame() -> None:
    """Frames [out, es0, h0, es1, h1]: a difference in layer 1's ES names layer 1."""
    a = [9, 1, 2, 3, 4]
    assert first_diverging_layer(a, a) is None
    assert first_diverging_layer(a, [8, 1, 2, 7, 4]) == 1
    assert first_diverging_layer(a, [8, 1, 5, 3, 4]) == 0


def test_layers_with_a_long_k_run_the_split_protected_matmul_picks() -> None:
    """A channel's layer runs the tile and split-K factor that `protected_matmul` picks for
    its shape (issue 14's split-K reaches the runtime): (3, 512)·(512, 16) splits in four,
    and the output equals the chain of direct `protected_matmul` calls bit for bit."""
    from safemon.kernels.api import protected_matmul

    rng = np.random.default_rng(11)
    w = {"k": rng.standard_normal((512, 16)).astype(np.float32),
         "o": rng.standard_normal((16, 4)).astype(np.float32)}
    layers = [Layer("k", rng.standard_normal(16).astype(np.float32), "relu"), Layer("o", None, "identity")]
    x = rng.standard_normal((3, 512)).astype(np.float32)
    vc = VariantConfig()
    assert vc.to_variant(3, 16, 512).split == 4
    h = x
    for ly in layers:
        c = protected_matmul(h, w[ly.weight_id], checksum=vc.checksum, level=vc.level, mode=vc.mode,
                             backend="numpy").c
        h = epilogue(c, ly.bias, ly.act)
    res = run_model(layers, w, x, vc, "numpy")
    assert np.array_equal(res.out.view(np.uint32), h.view(np.uint32))
    ref = reference_forward([w["k"], w["o"]], layers, x)
    assert np.array_equal(ref.view(np.uint32), h.view(np.uint32))


def test_the_output_is_copied_out_and_extra_digests_follow_the_frame() -> None:
    """`run_model(out_into=..., extra_digests=...)` on NumPy: the output lands in
    `out_into` bit for bit; the extra arrays' digests land in `extra_digests`, in order;
    the digest frame is unchanged."""
    from safemon.digest import digest64

    rng = np.random.default_rng(12)
    w = {"a": rng.standard_normal((6, 5)).astype(np.float32)}
    layers = [Layer("a", None, "gelu")]
    x = rng.standard_normal((2, 6)).astype(np.float32)
    extra = np.arange(7, dtype=np.float32)
    slot = np.full((2, 5), np.nan, dtype=np.float32)
    res = run_model(layers, w, x, VariantConfig(), "numpy", out_into=slot,
                    extra_digests=[x, extra])
    plain = run_model(layers, w, x, VariantConfig(), "numpy")
    assert np.array_equal(slot.view(np.uint32), res.out.view(np.uint32))
    assert res.extra_digests == (digest64(x), digest64(extra))
    assert res.digest_frame().tolist() == plain.digest_frame().tolist()
    assert plain.extra_digests == ()


def test_an_out_into_of_another_shape_is_refused_before_anything_runs() -> None:
    """`out_into` must have the output's shape (a transposed slot is not accepted)."""
    w = {"a": np.ones((6, 5), dtype=np.float32)}
    with pytest.raises(InvalidInputError, match=r"out_into must be \(2, 5\)"):
        run_model([Layer("a")], w, np.ones((2, 6), dtype=np.float32), VariantConfig(),
                  "numpy", out_into=np.zeros((5, 2), dtype=np.float32))
