"""nn.TransformerEncoderLayer and Flatten/Unflatten in `safemon.torch`, without a daemon:
the steps an encoder layer maps to, how `plan` folds a Sequential into one request and what
its report says, the refusals (each naming the layer), and the protected modules' outputs
through a stand-in client that computes `reference_forward` (their plumbing, caching per
sequence length, and their `reference` against PyTorch's own output).

tests/torch/test_encoder_daemon.py runs the same through a real daemon."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from safemon.models import Layer, model_id_of, reference_forward  # noqa: E402
from safemon.models.layers import Step, validate_layers  # noqa: E402
from safemon.models.ops import (  # noqa: E402
    MAX_TOKENS,
    AddResidual,
    Attention,
    LayerNorm,
    Reshape,
    SaveResidual,
)
from safemon.torch import (  # noqa: E402
    FoldedEncoderLayer,
    FoldedLinear,
    ProtectedEncoderLayer,
    ProtectedSequence,
    plan,
    protect,
    report_of,
)
from safemon.torch.binding import LayerSpec  # noqa: E402
from safemon.torch.chain import walk  # noqa: E402
from safemon.torch.encoder import causal_mask, encoder_spec, encoder_support  # noqa: E402
from safemon.torch.report import NOT_MODULES, Status  # noqa: E402

F32 = npt.NDArray[np.float32]


class FakeClient:
    """What the protected modules use of `safemon.Client`, computed here with
    `reference_forward` (no daemon, no vote): for the modules' plumbing only."""

    def __init__(self) -> None:
        self.weights: dict[str, F32] = {}
        self.models: dict[str, list[Step]] = {}
        self.sent: list[tuple[str, str, tuple[int, ...]]] = []

    def register_weight(self, w: F32) -> str:
        wid = f"w{len(self.weights)}"
        self.weights[wid] = np.array(w, copy=True)
        return wid

    def register_model(self, steps: list[Step]) -> str:
        validate_layers(steps, {k: v.shape for k, v in self.weights.items()})
        mid = model_id_of(steps)
        self.models[mid] = list(steps)
        return mid

    def run(self, mid: str, x: F32, *, timeout: float = 1.0) -> F32:
        steps = self.models[mid]
        self.sent.append(("run", mid, tuple(x.shape)))
        return reference_forward([self.weights[s.weight_id] for s in steps
                                  if isinstance(s, Layer)], steps, x)

    def matmul(self, x: F32, wid: str, *, timeout: float = 1.0) -> F32:
        self.sent.append(("matmul", wid, tuple(x.shape)))
        return reference_forward([self.weights[wid]], [Layer(wid)], x)


def encoder(d: int = 16, heads: int = 2, *, seed: int = 0, **kw: Any) -> nn.TransformerEncoderLayer:
    torch.manual_seed(seed)
    kw = {"dropout": 0.0, "batch_first": True, **kw}
    return nn.TransformerEncoderLayer(d, heads, 2 * d, **kw).eval()


def digits_encoder(d: int = 16, seed: int = 0, **kw: Any) -> nn.Sequential:
    """The example's "encoder" model at width d: 8 tokens of d from 64 inputs."""
    torch.manual_seed(seed)
    kw = {"dropout": 0.0, "batch_first": True, "norm_first": True, **kw}
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 8 * d), nn.Unflatten(1, (8, d)),
                         nn.TransformerEncoderLayer(d, 4, 4 * d, **kw), nn.Flatten(),
                         nn.Linear(8 * d, 10)).eval()


def pytorch_eval(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """PyTorch's own output, on the encoder layer's plain path: its fused fast path computes
    a tanh-GELU layer with the exact GELU (a difference of ~1e-4, not safemon's)."""
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.inference_mode():
            out: torch.Tensor = model(x)
            return out
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


#: The encoder activations safemon computes, and the safemon activation each one is.
ACTIVATIONS = ["relu", nn.GELU(approximate="tanh"), "gelu", nn.GELU()]


def act_name(act: Any) -> str:
    """The safemon activation of `act` as `ACTIVATIONS` lists it: "gelu" (the string, or
    `nn.GELU()`) is PyTorch's exact form, safemon's gelu_erf."""
    if act == "relu":
        return "relu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu"
    return "gelu_erf"


def kinds(steps: Any) -> list[str]:
    return [("Layer:" + s.name.rsplit(".", 1)[-1]) if isinstance(s, LayerSpec)
            else type(s).__name__ for s in steps]


# --- the mapping ---------------------------------------------------------------------------

@pytest.mark.parametrize("act", ACTIVATIONS)
def test_pre_norm_layer_maps_to_the_documented_steps(act: Any) -> None:
    """norm_first: Save, LN1, in_proj, Attention(H, T), out_proj, Add, Save, LN2, linear1
    (act), linear2, Add; in_proj's weight is in_proj_weightᵀ (d, 3d) with its bias."""
    layer = encoder(16, 4, norm_first=True, activation=act)
    spec = encoder_spec("enc", layer)
    steps = spec.steps(5)
    assert kinds(steps) == ["SaveResidual", "LayerNorm", "Layer:in_proj", "Attention",
                            "Layer:out_proj", "AddResidual", "SaveResidual", "LayerNorm",
                            "Layer:linear1", "Layer:linear2", "AddResidual"]
    assert steps[3] == Attention(4, 5)
    assert steps[1] is spec.norm1 and steps[7] is spec.norm2
    assert spec.linear1.activation.value == act_name(act)
    assert spec.linear2.activation.value == "identity"
    attn = layer.self_attn
    assert np.array_equal(spec.in_proj.weight, attn.in_proj_weight.detach().numpy().T)
    assert spec.in_proj.weight.shape == (16, 48) and spec.in_proj.weight.flags.c_contiguous
    assert spec.in_proj.bias is not None
    assert np.array_equal(spec.in_proj.bias, attn.in_proj_bias.detach().numpy())
    assert np.array_equal(spec.linear1.weight, layer.linear1.weight.detach().numpy().T)
    assert np.array_equal(spec.norm1.weight, layer.norm1.weight.detach().numpy())
    assert spec.norm1.eps == pytest.approx(layer.norm1.eps)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_post_norm_layer_maps_to_the_documented_steps(act: Any) -> None:
    """norm_first=False: Save, in_proj, Attention, out_proj, Add, LN1, Save, linear1 (act),
    linear2, Add, LN2."""
    spec = encoder_spec("enc", encoder(16, 2, activation=act))
    assert kinds(spec.steps(3)) == [
        "SaveResidual", "Layer:in_proj", "Attention", "Layer:out_proj", "AddResidual",
        "LayerNorm", "SaveResidual", "Layer:linear1", "Layer:linear2", "AddResidual",
        "LayerNorm"]
    assert spec.linear1.activation.value == act_name(act)


def test_a_layer_without_bias_has_no_biases_and_zero_norm_shifts() -> None:
    """bias=False: no product bias; each layer norm's β is zeros (its PyTorch form has no
    bias at all, and y + 0 is y)."""
    spec = encoder_spec("enc", encoder(16, 2, bias=False))
    assert all(s.bias is None for s in (spec.in_proj, spec.out_proj, spec.linear1,
                                        spec.linear2))
    assert not spec.norm1.bias.any() and not spec.norm2.bias.any()


@pytest.mark.parametrize(("kw", "why"), [
    ({"batch_first": False}, r"batch_first=False"),
    ({"activation": torch.tanh}, r"neither relu nor"),
])
def test_unsupported_layers_are_refused_with_the_reason(kw: dict[str, Any], why: str) -> None:
    """encoder_support says why; ProtectedEncoderLayer refuses the layer naming it (before
    anything is registered); plan leaves it to PyTorch with that reason and protects its
    linear1/linear2 one by one."""
    layer = encoder(**kw)
    assert encoder_support(layer) is not None
    client = FakeClient()
    with pytest.raises(ValueError, match=rf"layer 'blk' cannot be protected: .*{why}"):
        ProtectedEncoderLayer(layer, client, name="blk")  # type: ignore[arg-type]
    assert client.weights == {}
    model = nn.Sequential(layer)
    groups, report = plan(model)
    note = {e.name: e.note for e in report.entries if e.status is Status.UNPROTECTED}
    assert re.search(why, note["0"]), note["0"]
    assert [g.members[0][0] for g in groups] == ["0.linear1", "0.linear2"]


def test_other_refusals() -> None:
    """add_bias_kv, a subclass, a layer norm without affine parameters: refused."""
    class Sub(nn.TransformerEncoderLayer):
        pass

    layer = encoder()
    layer.self_attn = nn.MultiheadAttention(16, 2, add_bias_kv=True, batch_first=True)
    assert "add_bias_kv" in str(encoder_support(layer))
    assert "subclass" in str(encoder_support(Sub(16, 2, batch_first=True)))
    layer = encoder()
    layer.norm2 = nn.LayerNorm(16, elementwise_affine=False)
    assert "elementwise-affine" in str(encoder_support(layer))


def test_a_layer_in_training_mode_is_not_taken_whole() -> None:
    """protect recognises an encoder layer in eval mode only."""
    layer = encoder().train()
    _, report = plan(nn.Sequential(layer))
    assert "training mode" in next(e.note for e in report.entries if e.name == "0")


# --- plan: one request for a Sequential ----------------------------------------------------

def test_the_digits_sequential_is_one_request() -> None:
    """Flatten, Linear, Unflatten, encoder layer, Flatten, Linear: the run after the first
    Flatten is ONE group (the first Flatten, with no arithmetic, stays PyTorch's: the input
    reaches the run as (N, 64) anyway); the report lists the products as protected, the
    residual adds, attention scores and norms as protected by redundancy."""
    groups, report = plan(digits_encoder())
    assert [[name for name, _, _ in g.members] for g in groups] == [["1", "2", "3", "4", "5"]]
    assert report.requests == 1
    assert report.protected == ["1", "3.self_attn", "3.self_attn.out_proj", "3.linear1",
                                "3.linear2", "5"]
    assert report.redundant == ["3", "3.self_attn", "3.norm1", "3.norm2"]
    assert report.unprotected == ["0"]
    folded = [e.name for e in report.entries if e.status is Status.FOLDED]
    assert folded == ["2", "3.dropout", "3.dropout1", "3.dropout2", "4"]
    text = report.render()
    assert "6 layers protected in 1 request(s) per forward; 4 step(s) protected by " \
           "redundancy only; 1 module(s) left to PyTorch" in text
    assert ("protected by redundancy: scores q·kᵀ/√dh, softmax and p·v (4 heads of 4), "
            "computed in every channel and voted, no execution signature") in text
    assert ("3.norm1               LayerNorm                        protected by redundancy: "
            "layer norm, computed in every channel and voted") in text
    assert NOT_MODULES in text


def test_runs_end_where_the_shape_is_unknown_or_nothing_computes_after() -> None:
    """A reshape after an encoder layer that started the run (its T unknown) ends it; a
    reshape with no computing member after it is left to PyTorch; an activation after an
    encoder layer ends the run (it has no activation slot)."""
    enc = encoder(16)
    groups, report = plan(nn.Sequential(enc, nn.Flatten(), nn.Linear(16 * 4, 2)))
    assert [[n for n, _, _ in g.members] for g in groups] == [["0"], ["2"]]
    assert report.unprotected == ["1"]
    groups, _ = plan(nn.Sequential(nn.Linear(4, 16), encoder(16), nn.Linear(16, 3),
                                   nn.Unflatten(1, (3, 1)), nn.Dropout(0.1)))
    assert [[n for n, _, _ in g.members] for g in groups] == [["0", "1", "2"]]
    assert groups[0].folded == []
    groups, _ = plan(nn.Sequential(encoder(16), nn.ReLU(), nn.Linear(16, 2)))
    assert [[n for n, _, _ in g.members] for g in groups] == [["0"], ["2"]]


def test_a_reshape_that_touches_the_batch_or_does_not_chain_ends_the_run() -> None:
    """Flatten(0, 1) would merge the batch; Unflatten to a width the next Linear does not
    take does not chain: neither is folded."""
    groups, _ = plan(nn.Sequential(nn.Linear(4, 8), nn.Flatten(0, 1), nn.Linear(8, 2)))
    assert [[n for n, _, _ in g.members] for g in groups] == [["0"], ["2"]]
    groups, _ = plan(nn.Sequential(nn.Linear(4, 8), nn.Unflatten(1, (2, 4)), nn.Linear(8, 2)))
    assert [[n for n, _, _ in g.members] for g in groups] == [["0"], ["2"]]


def test_walk_gives_the_steps_and_regroups_the_output_rows() -> None:
    """For an (N, 64) input: Layer, Reshape(d), the encoder's steps with T = 8,
    Reshape(8d), Layer; a run ending in tokens gets a last Reshape back to one row per
    input row, viewed as (N, 8, d) in PyTorch."""
    model = digits_encoder(16)
    c = FakeClient()
    protect(model, client=c, verbose=False)  # type: ignore[arg-type]
    seq = model[1]
    assert isinstance(seq, ProtectedSequence)
    w = seq.walk_of((5, 64))
    names = kinds(w.steps)
    assert names[:2] == ["Layer:1", "Reshape"] and names[-2:] == ["Reshape", "Layer:5"]
    assert Attention(4, 8) in w.steps and w.steps[1] == Reshape(16)
    assert w.steps[-2] == Reshape(128) and (w.in_width, w.out_width) == (64, 10)
    short = walk(seq.members[:3], (5, 64))  # Linear, Unflatten, encoder: tokens out
    assert short.out_shape == (5, 8, 16) and short.out_width == 128
    assert short.steps[-1] == Reshape(128)
    with pytest.raises(ValueError, match=rf"layer '3' .*at most {MAX_TOKENS}"):
        walk(seq.members[2:3], (2, MAX_TOKENS + 1, 16))
    assert walk(seq.members[2:3], (2, MAX_TOKENS, 16)).out_shape == (2, MAX_TOKENS, 16)
    with pytest.raises(ValueError, match=r"layer '1' expects inputs of shape \(\.\.\., 64\)"):
        walk(seq.members, (5, 63))


# --- the protected modules (stand-in client) ------------------------------------------------

@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("bias", [True, False])
def test_reference_is_pytorchs_output_to_float32_rounding(norm_first: bool, act: Any,
                                                          bias: bool) -> None:
    """ProtectedEncoderLayer.reference (the bit-exact safemon output) is within 1e-4 of
    PyTorch's own layer; the module's output is its reference bit for bit; the state_dict
    is the layer's."""
    layer = encoder(32, 4, seed=3, norm_first=norm_first, activation=act, bias=bias)
    client = FakeClient()
    protected = ProtectedEncoderLayer(layer, client, name="enc")  # type: ignore[arg-type]
    x = torch.randn(3, 7, 32, generator=torch.Generator().manual_seed(4))
    want = pytorch_eval(layer, x)
    ref = protected.reference(x)
    assert ref.shape == (3, 7, 32) and ref.dtype == np.float32
    assert np.allclose(ref, want.numpy(), rtol=1e-4, atol=1e-4)
    with torch.inference_mode():
        got = protected(x)
    assert np.array_equal(got.numpy().view(np.uint32), ref.view(np.uint32))
    state, own = protected.state_dict(), layer.state_dict()
    assert list(state) == list(own) and all(torch.equal(state[k], own[k]) for k in own)


def test_one_model_per_sequence_length_and_an_unbatched_input() -> None:
    """The steps depend on T: a model per distinct T, registered on its first call and
    reused; an unbatched (T, d) input is one sequence of T; an empty batch sends nothing."""
    layer = encoder(16, 2)
    client = FakeClient()
    protected = ProtectedEncoderLayer(layer, client, name="enc")  # type: ignore[arg-type]
    assert client.models == {}  # no T known yet: weights only
    with torch.inference_mode():
        for t in (4, 6, 4):
            protected(torch.randn(2, t, 16))
        one = protected(torch.randn(5, 16))
        empty = protected(torch.randn(0, 4, 16))
    assert len(client.models) == 3 and len(client.sent) == 4
    assert one.shape == (5, 16) and empty.shape == (0, 4, 16)
    assert {Attention(2, 4), Attention(2, 6), Attention(2, 5)} == {
        s for m in client.models.values() for s in m if isinstance(s, Attention)}


def test_the_sequential_runs_as_one_request_with_its_state_dict() -> None:
    """protect puts a ProtectedSequence at the first Linear, a FoldedEncoderLayer and a
    FoldedLinear at the later members, Identity at the reshapes; one call sends one
    request; the output is the reference's bit for bit and within 1e-4 of PyTorch's; the
    state_dict is the unprotected model's."""
    plain, model = digits_encoder(16), digits_encoder(16)
    keys = list(model.state_dict())
    client = FakeClient()
    protect(model, client=client, verbose=False)  # type: ignore[arg-type]
    assert type(model[0]) is nn.Flatten and isinstance(model[1], ProtectedSequence)
    assert isinstance(model[3], FoldedEncoderLayer) and isinstance(model[5], FoldedLinear)
    assert type(model[2]) is nn.Identity and type(model[4]) is nn.Identity
    assert model[1].folded == (model[3], model[5])
    assert list(model.state_dict()) == keys
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in model.state_dict().items())
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        got = model(x)
    assert client.sent == [("run", next(iter(client.models)), (6, 64))]
    ref = model[1].reference(x.flatten(1))
    assert np.array_equal(got.numpy().view(np.uint32), ref.view(np.uint32))
    assert torch.allclose(got, pytorch_eval(plain, x), rtol=1e-4, atol=1e-4)
    steps = next(iter(client.models.values()))
    assert [type(s).__name__ for s in steps].count("Layer") == 6
    assert isinstance(steps[2], SaveResidual) and isinstance(steps[3], LayerNorm)
    assert isinstance(steps[-3], AddResidual) and isinstance(steps[-2], Reshape)


def test_masks_and_nested_inputs_are_refused_naming_the_layer() -> None:
    """A src_mask that is not the causal one, src_key_padding_mask, is_causal=True on a
    mask that is not causal: ValueError naming the layer and saying masks are not
    supported (but the causal one), before anything is sent."""
    client = FakeClient()
    protected = ProtectedEncoderLayer(encoder(16, 2), client, name="enc")  # type: ignore[arg-type]
    x = torch.randn(2, 4, 16)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    calls: list[dict[str, Any]] = [{"src_mask": mask},
                                   {"src_key_padding_mask": torch.zeros(2, 4, dtype=torch.bool)},
                                   {"is_causal": True, "src_mask": torch.ones(4, 4).triu(1)}]
    for kwargs in calls:
        with torch.inference_mode(), pytest.raises(
                ValueError, match=r"layer 'enc' got an attention mask.*masks are not supported"):
            protected(x, **kwargs)
    with torch.inference_mode(), pytest.raises(ValueError, match=r"layer 'enc' expects"):
        protected(torch.randn(2, 4, 8))
    with torch.inference_mode(), pytest.raises(ValueError,
                                               match=rf"at most {MAX_TOKENS} per sequence"):
        protected(torch.randn(1, MAX_TOKENS + 1, 16))
    assert client.sent == []


def test_an_encoder_inside_transformer_encoder_is_protected_per_layer() -> None:
    """nn.TransformerEncoder holds its layers in a ModuleList: each becomes a
    ProtectedEncoderLayer (a request each), called by the stack's own forward."""
    torch.manual_seed(6)
    stack = nn.TransformerEncoder(encoder(16, 2), 2, enable_nested_tensor=False).eval()
    plain = nn.TransformerEncoder(encoder(16, 2), 2, enable_nested_tensor=False).eval()
    plain.load_state_dict(stack.state_dict())
    client = FakeClient()
    protect(stack, client=client, verbose=False)  # type: ignore[arg-type]
    assert all(isinstance(m, ProtectedEncoderLayer) for m in stack.layers)
    assert report_of(stack).requests == 2
    x = torch.randn(3, 5, 16)
    with torch.inference_mode():
        got = stack(x)
    assert len(client.sent) == 2
    assert torch.allclose(got, pytorch_eval(plain, x), rtol=1e-4, atol=1e-4)


def test_causal_mask_reads_the_causal_mask_and_refuses_the_rest() -> None:
    """The causal mask, bool or float (PyTorch's generator), is causal; no mask is not;
    a padding mask, a hint without a mask, a mask of other values or size are refused."""
    t = 5
    square = nn.Transformer.generate_square_subsequent_mask(t)
    above = torch.ones(t, t, dtype=torch.bool).triu(1)
    assert causal_mask("enc", square, None, False, t) is True
    assert causal_mask("enc", above, None, True, t) is True
    assert causal_mask("enc", None, None, False, t) is False
    refused = [(None, torch.zeros(2, t, dtype=torch.bool), False),
               (None, None, True),
               (square.clamp(min=-1e9), None, True),  # -1e9, not -inf: another function
               (above.T.contiguous(), None, False),  # anti-causal
               (torch.zeros(t, t), None, True),  # a wrong hint
               (nn.Transformer.generate_square_subsequent_mask(t + 1), None, False)]
    for mask, padding, hint in refused:
        with pytest.raises(ValueError, match=r"layer 'enc' got an attention mask"):
            causal_mask("enc", mask, padding, hint, t)
    with pytest.raises(ValueError, match=r"on cpu, its input on meta"):
        causal_mask("enc", square, None, True, t, torch.device("meta"))


@pytest.mark.parametrize("tokens", [5, 80])
def test_a_causal_layer_is_pytorchs_causal_layer(tokens: int) -> None:
    """Called with the causal mask, a ProtectedEncoderLayer sends the causal model: its
    output is the causal reference bit for bit and within 1e-4 of PyTorch's masked layer
    (and not of its unmasked one); a mask written in place since is checked again."""
    layer = encoder(16, 2, seed=9, activation="gelu")
    client = FakeClient()
    protected = ProtectedEncoderLayer(layer, client, name="enc")  # type: ignore[arg-type]
    x = torch.randn(2, tokens, 16, generator=torch.Generator().manual_seed(10))
    mask = nn.Transformer.generate_square_subsequent_mask(tokens)
    with torch.inference_mode():
        got = protected(x, src_mask=mask, is_causal=True)
        again = protected(x, src_mask=mask)
        want = layer(x, src_mask=mask, is_causal=True)
        unmasked = layer(x)
    ref = protected.reference(x, causal=True)
    assert np.array_equal(got.numpy().view(np.uint32), ref.view(np.uint32))
    assert torch.equal(again, got)
    assert np.allclose(ref, want.numpy(), rtol=1e-4, atol=1e-4)
    assert not np.allclose(ref, unmasked.numpy(), rtol=1e-4, atol=1e-4)
    assert any(isinstance(s, Attention) and s.causal for s in client.models[client.sent[0][1]])
    with torch.inference_mode():
        compiled = torch.compile(protected, backend="eager")(x, src_mask=mask, is_causal=True)
    assert torch.equal(compiled, got)
    mask[0, 1] = 0.0  # no longer causal: its new version is read again
    with torch.inference_mode(), pytest.raises(ValueError, match="not the causal mask"):
        protected(x, src_mask=mask)


def test_a_new_mask_is_read_even_where_a_checked_one_lay() -> None:
    """A mask checked causal, then freed: a non-causal mask made after it (often at the
    same address, often with the same id) is read, and refused."""
    protected = ProtectedEncoderLayer(encoder(16, 2), FakeClient(), name="enc")  # type: ignore[arg-type]
    x = torch.randn(1, 4, 16)
    for _ in range(20):
        mask = nn.Transformer.generate_square_subsequent_mask(4)
        with torch.inference_mode():
            protected(x, src_mask=mask)
        del mask
        other = torch.zeros(4, 4)
        with torch.inference_mode(), pytest.raises(ValueError, match="not the causal mask"):
            protected(x, src_mask=other)
        del other


def test_masks_made_in_inference_mode_and_written_behind_pytorchs_back() -> None:
    """A causal mask made under inference_mode (no version counter) is taken, also through
    nn.TransformerEncoder with a bool mask (it makes a float mask per call); one zeroed
    through `.data` after a call (no version bump) is read again and refused."""
    protected = ProtectedEncoderLayer(encoder(16, 2), FakeClient(), name="enc")  # type: ignore[arg-type]
    x = torch.randn(1, 4, 16)
    with torch.inference_mode():
        mask = nn.Transformer.generate_square_subsequent_mask(4)
        protected(x, src_mask=mask)
    stack = nn.TransformerEncoder(encoder(16, 2), 2, enable_nested_tensor=False).eval()
    protect(stack, client=FakeClient(), verbose=False)  # type: ignore[arg-type]
    with torch.inference_mode():
        stack(x, mask=torch.ones(4, 4, dtype=torch.bool).triu(1))
    written = nn.Transformer.generate_square_subsequent_mask(4)
    with torch.inference_mode():
        protected(x, src_mask=written)
    written.data.zero_()
    with torch.inference_mode(), pytest.raises(ValueError, match="not the causal mask"):
        protected(x, src_mask=written)


def test_an_encoder_layer_without_a_mask_compiles_whole() -> None:
    """torch.compile(fullgraph=True) of a ProtectedEncoderLayer called without a mask: no
    graph break (the mask check is skipped), the eager output."""
    protected = ProtectedEncoderLayer(encoder(16, 2), FakeClient(), name="enc")  # type: ignore[arg-type]
    x = torch.randn(2, 5, 16)
    with torch.inference_mode():
        eager = protected(x)
        compiled = torch.compile(protected, backend="eager", fullgraph=True)(x)
    assert torch.equal(compiled, eager)


def test_exporting_a_masked_call_is_refused_and_leaves_nothing_behind() -> None:
    """torch.export of a call with a mask: a ValueError saying it cannot be traced (the
    mask's values are fake there); eager calls with the causal mask work after it."""
    protected = ProtectedEncoderLayer(encoder(16, 2), FakeClient(), name="enc")  # type: ignore[arg-type]
    x = torch.randn(1, 4, 16)
    mask = nn.Transformer.generate_square_subsequent_mask(4)

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = protected

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.layer(x, src_mask=mask)
            return out

    with pytest.raises(ValueError, match="cannot be traced"):
        torch.export.export(Masked(), (x, mask), strict=False)
    with torch.inference_mode():
        assert protected(x, src_mask=mask).shape == (1, 4, 16)


def test_a_causal_transformer_encoder_is_protected_per_layer() -> None:
    """nn.TransformerEncoder with a causal mask (a decoder-only stack): each layer's
    request is causal, and the stack is within 1e-4 of PyTorch's."""
    torch.manual_seed(7)
    stack = nn.TransformerEncoder(encoder(16, 2), 2, enable_nested_tensor=False).eval()
    plain = nn.TransformerEncoder(encoder(16, 2), 2, enable_nested_tensor=False).eval()
    plain.load_state_dict(stack.state_dict())
    protect(stack, client=FakeClient(), verbose=False)  # type: ignore[arg-type]
    x = torch.randn(3, 6, 16)
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    with torch.inference_mode():
        got = stack(x, mask=mask, is_causal=True)
        want = plain(x, mask=mask, is_causal=True)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def test_compile_fullgraph_keeps_one_shaped_node() -> None:
    """torch.compile(fullgraph=True) of the protected Sequential: no graph break, ONE
    `safemon::forward_shaped` node in the captured graph (the whole run), and the eager
    output bit for bit."""
    model = digits_encoder(16)
    protect(model, client=FakeClient(), verbose=False)  # type: ignore[arg-type]
    x = torch.rand(3, 1, 8, 8)
    graphs: list[torch.fx.GraphModule] = []

    def recording(gm: torch.fx.GraphModule, _inputs: list[torch.Tensor]) -> object:
        graphs.append(gm)
        return gm.forward

    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True, backend=recording)(x)
    assert torch.equal(eager, compiled)
    targets = [n.target for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    shaped = [t for t in targets if "forward_shaped" in str(t)]
    assert len(graphs) == 1 and len(shaped) == 1, targets


def test_a_write_to_a_folded_encoder_layer_is_refused() -> None:
    """The daemon computes with the weights of protect time: an in-place write to the folded
    encoder layer's linear1 weight makes the next call raise, naming it."""
    model = digits_encoder(16)
    client = FakeClient()
    protect(model, client=client, verbose=False)  # type: ignore[arg-type]
    with torch.no_grad():
        model[3].linear1.weight.mul_(2.0)
        with pytest.raises(ValueError, match=r"layer '3'.*changed after protect"):
            model(torch.rand(2, 1, 8, 8))
    assert client.sent == []


def test_an_exact_gelu_layer_matches_pytorchs_fast_path_too() -> None:
    """With the exact GELU, PyTorch's default eval-mode call (its fused fast path where that
    applies, which computes any GELU exactly) and its plain path compute one function, and
    safemon's reference is within 1e-4 of both."""
    layer = encoder(32, 4, seed=5, activation="gelu")
    protected = ProtectedEncoderLayer(layer, FakeClient(), name="enc")  # type: ignore[arg-type]
    x = torch.randn(4, 6, 32, generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        fast = layer(x)
    ref = protected.reference(x)
    assert np.allclose(ref, fast.numpy(), rtol=1e-4, atol=1e-4)
    assert np.allclose(ref, pytorch_eval(layer, x).numpy(), rtol=1e-4, atol=1e-4)
