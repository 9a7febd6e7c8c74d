"""Models with steps besides products (`safemon.models.ops`): validation naming the step,
the row rules (`ModelShape`), the wire form and ids (a model of layers only keeps its old
id), and the channel's NumPy pass against the reference, digest by digest."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safemon.config import VariantConfig
from safemon.errors import InvalidInputError
from safemon.models import (
    AddResidual,
    Attention,
    Layer,
    LayerNorm,
    Reshape,
    SaveResidual,
    decode_model,
    encode_model,
    first_diverging_layer,
    model_id_of,
    reference_forward,
    run_model,
    validate_layers,
)
from safemon.models.forward import EMPTY_DIGEST, activation_widths, output_columns

D, T, H = 8, 4, 2
SHAPES = {"embed": (6, T * D), "qkv": (D, 3 * D), "o": (D, D), "f1": (D, 16), "f2": (16, D),
          "head": (T * D, 3)}


def _ln(seed: int, n: int = D) -> LayerNorm:
    rng = np.random.default_rng(seed)
    return LayerNorm(rng.standard_normal(n).astype(np.float32),
                     rng.standard_normal(n).astype(np.float32), 1e-5)


def encoder_model(bias: dict[str, np.ndarray] | None = None) -> list:
    """Embed 6 features into T tokens of width D, one pre-norm encoder layer, a head."""
    b = bias or {}
    return [Layer("embed", b.get("embed")), Reshape(D),
            SaveResidual(), _ln(1), Layer("qkv", b.get("qkv")), Attention(H, T),
            Layer("o", b.get("o")), AddResidual(),
            SaveResidual(), _ln(2), Layer("f1", b.get("f1"), "gelu"), Layer("f2"), AddResidual(),
            Reshape(T * D), Layer("head", b.get("head"))]


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
            for k, s in SHAPES.items()}


def test_the_encoder_model_validates_and_its_shape_is_known() -> None:
    shape = validate_layers(encoder_model(), SHAPES)
    assert (shape.k_in, shape.n_out) == (6, 3)
    assert [(int(f), k, n) for f, k, n in shape.products][:2] == [(1, 6, T * D), (T, D, 3 * D)]
    assert shape.attentions == ((T, T, D, 2),)
    shape.check_rows(5)  # 5 inputs: 20 tokens, 5 sequences of T
    assert output_columns(encoder_model(), weights()) == 3
    assert activation_widths(encoder_model(), weights())[5] == T * D  # attention: (4M, D)


@pytest.mark.parametrize(("steps", "needle"), [
    ([Layer("qkv"), Attention(3, T)], "3·3·dh"),
    ([Layer("o"), AddResidual()], "none saved"),
    ([SaveResidual(), Layer("o")], "never added"),
    ([SaveResidual(), Layer("qkv"), AddResidual()], "another shape"),
    ([Layer("o"), _ln(0, 5)], "step 1: layer norm of width 5 takes 5 columns"),
    ([Reshape(4), Layer("o")], "step 0: a reshape"),
    ([Layer("embed"), Reshape(D)], "times the input's rows"),
    ([SaveResidual(), _ln(0), AddResidual()], "at least one product"),
    ([Layer("o"), "relu"], "step 1: not a Layer"),
])
def test_validation_names_the_step_at_fault(steps: list, needle: str) -> None:
    with pytest.raises(InvalidInputError, match=needle):
        validate_layers(steps, SHAPES)


def test_activation_widths_count_rows_merged_below_the_input() -> None:
    """Elements per input row, as a step graph's size rule adds them: a reshape that merges
    rows leaves fewer than one row of the next product per input row."""
    w = {"a": np.zeros((4, 10), np.float32), "b": np.zeros((40, 8), np.float32)}
    steps = [Layer("a"), Reshape(40), Layer("b"), Reshape(2)]
    assert activation_widths(steps, w) == [10, 10, 2, 2]


def test_rows_that_give_no_whole_sequence_are_refused_naming_the_step() -> None:
    shape = validate_layers([Layer("qkv"), Attention(H, T), Layer("o")], SHAPES)
    shape.check_rows(8)
    with pytest.raises(InvalidInputError, match="step 1: an input of 6 rows"):
        shape.check_rows(6)
    with pytest.raises(InvalidInputError, match="step 1"):  # any int a device request sends
        shape.check_rows(10**400 + 1)
    reshaped = validate_layers([Layer("o"), Reshape(2 * D), Reshape(D), Layer("o")], SHAPES)
    with pytest.raises(InvalidInputError, match="the reshape"):
        reshaped.check_rows(3)
    with pytest.raises(InvalidInputError, match="step 1"):
        reference_forward([weights()["qkv"], weights()["o"]],
                          [Layer("qkv"), Attention(H, T), Layer("o")],
                          np.zeros((6, D), np.float32))


def test_the_wire_form_round_trips_with_parameters_in_step_order() -> None:
    rng = np.random.default_rng(4)
    bias = {k: rng.standard_normal(SHAPES[k][1]).astype(np.float32) for k in ("qkv", "head")}
    steps = encoder_model(bias)
    spec, params = encode_model(steps)
    assert params.size == 4 * D + 3 * D + 3  # two layer norms (γ, β), two biases
    back = decode_model(spec, params, SHAPES)
    assert back == steps and model_id_of(back) == model_id_of(steps)
    ln = back[3]
    assert isinstance(ln, LayerNorm) and np.array_equal(ln.weight, steps[3].weight)
    other = encoder_model(bias)
    other[3] = _ln(9)  # other γ, β: another model
    assert model_id_of(other) != model_id_of(steps)


def test_a_model_of_layers_only_keeps_the_id_it_had() -> None:
    """The spec of a layer is the form it had before other steps existed, so ids that
    clients and evidence hold stay valid."""
    b = np.ones(4, np.float32)
    layers = [Layer("a", b, "relu"), Layer("b")]
    text = json.dumps([{"activation": "relu", "bias": True, "weight_id": "a"},
                       {"activation": "identity", "bias": False, "weight_id": "b"}],
                      separators=(",", ":"), sort_keys=True).encode()
    h = hashlib.sha256(b"safemon-model-v1")
    h.update(text)
    h.update(b.tobytes())
    assert model_id_of(layers) == "m" + h.hexdigest()[:23]


def test_a_causal_attention_round_trips_and_is_another_model() -> None:
    """`causal` travels as `"causal": true` (and only then, so a model without it keeps
    the spec, and the id, it had): decoded back, and a different model id."""
    steps = encoder_model()
    causal = [Attention(s.heads, s.tokens, causal=True) if isinstance(s, Attention) else s
              for s in steps]
    spec, params = encode_model(causal)
    assert b'"causal":true' in bytes(spec) and b"causal" not in bytes(encode_model(steps)[0])
    assert decode_model(spec, params, SHAPES) == causal
    assert model_id_of(causal) != model_id_of(steps)


@pytest.mark.parametrize("entry", [
    {"kind": "attention", "heads": 0, "tokens": 4},
    {"kind": "attention", "heads": 2},
    {"kind": "attention", "heads": 2, "tokens": 4, "causal": False},
    {"kind": "attention", "heads": 2, "tokens": 4, "causal": 1},
    {"kind": "layer_norm", "width": D, "eps": "1e-5"},
    {"kind": "dropout"},
    {"kind": "reshape", "width": True},
])
def test_malformed_step_entries_are_refused(entry: dict) -> None:
    spec = np.frombuffer(json.dumps([{"activation": "identity", "bias": False,
                                      "weight_id": "qkv"}, entry]).encode(), np.uint8).copy()
    with pytest.raises(InvalidInputError, match="step 1"):
        decode_model(spec, np.zeros(2 * D, np.float32), SHAPES)


def test_the_channel_pass_equals_the_reference_with_a_digest_per_step() -> None:
    """run_model (NumPy) gives reference_forward's bits; each step has an ES and an output
    digest, the steps without a product the empty ES digest; a changed layer norm shows
    as the first diverging step."""
    w = weights(5)
    steps = encoder_model()
    x = np.random.default_rng(6).standard_normal((3, 6)).astype(np.float32)
    vc = VariantConfig()
    ref = reference_forward([w[s.weight_id] for s in steps if isinstance(s, Layer)], steps, x)
    res = run_model(steps, w, x, vc, "numpy")
    assert np.array_equal(res.out.view(np.uint32), ref.view(np.uint32))
    assert len(res.es_digests) == len(steps) and res.es_digests[1] == EMPTY_DIGEST
    assert res.es_digests[0] != EMPTY_DIGEST
    other = encoder_model()
    other[9] = _ln(7)
    frame = run_model(other, w, x, vc, "numpy").digest_frame()
    assert first_diverging_layer(res.digest_frame().tolist(), frame.tolist()) == 9


def test_reference_forward_takes_one_weight_per_product_layer() -> None:
    w = weights()
    with pytest.raises(InvalidInputError, match="weights for 6 layers"):
        reference_forward([w["embed"]], encoder_model(), np.zeros((1, 6), np.float32))


_entries = st.one_of(
    st.fixed_dictionaries({"weight_id": st.sampled_from([*SHAPES, "zz", ""]),
                           "activation": st.sampled_from(["identity", "relu", "gelu", "x"]),
                           "bias": st.one_of(st.booleans(), st.integers())}),
    st.fixed_dictionaries({"kind": st.sampled_from(["layer_norm", "attention", "reshape",
                                                    "save_residual", "add_residual", "?"])},
                          optional={"width": st.one_of(st.integers(-3, 2**40), st.text(max_size=3)),
                                    "heads": st.integers(-1, 2**33), "tokens": st.integers(-1, 99),
                                    "causal": st.one_of(st.booleans(), st.integers(0, 1)),
                                    "eps": st.one_of(st.text(max_size=12),
                                                     st.sampled_from(["0x1p+99999", "nan",
                                                                      "0x1p+200", "0x1p-200",
                                                                      "-0x1p-3", "0x1.4f8b58p-17"])),
                                    "extra": st.none()}),
    st.integers(), st.none(), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_entries, max_size=8), n_params=st.integers(0, 80))
def test_decoding_any_spec_raises_only_typed_errors(items: list, n_params: int) -> None:
    """What a client sends as a spec is decoded or refused with InvalidInputError (or
    UnknownWeightError, a subclass): never another exception, whatever the entries hold."""
    spec = np.frombuffer(json.dumps(items).encode(), np.uint8).copy()
    try:
        steps = decode_model(spec, np.ones(n_params, np.float32), SHAPES)
    except InvalidInputError:
        return
    shape = validate_layers(steps, SHAPES)
    for m in (1, 4, 12, 10**400 + 1):  # a device request's x_rows is any int the client sends
        try:
            shape.check_rows(m)
        except InvalidInputError:
            continue
