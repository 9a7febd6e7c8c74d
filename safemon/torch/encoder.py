"""`nn.TransformerEncoderLayer` as safemon steps: which layers can be, and the steps they are.

A supported layer (`encoder_support` says None) is, with d = d_model, H = nhead and T
tokens (the sequence length of the input (N, T, d), known at call time):

- norm_first=True: SaveResidual, LayerNorm(norm1), Layer(in_proj), Attention(H, T),
  Layer(out_proj), AddResidual, SaveResidual, LayerNorm(norm2), Layer(linear1, act),
  Layer(linear2), AddResidual;
- norm_first=False (post-norm): SaveResidual, Layer(in_proj), Attention(H, T),
  Layer(out_proj), AddResidual, LayerNorm(norm1), SaveResidual, Layer(linear1, act),
  Layer(linear2), AddResidual, LayerNorm(norm2).

in_proj is `self_attn.in_proj_weight`ᵀ ((d, 3d): columns [q | k | v], which is how
`safemon.models.ops.Attention` reads them) with `in_proj_bias`; every Linear's weight goes
transposed, (in, out). Each row of the activation is one token, T consecutive rows one
sequence: PyTorch's (N, T, d) input, row-major, read as (N·T, d).

The products carry execution signatures (the protected kernels); the layer norms, the
attention scores, softmax and p·v, and the residual adds are computed in every channel and
voted, with no signature: *protected by redundancy* (docs/TORCH.md).

Supported: the class itself (not a subclass), batch_first=True, activation relu (the string
"relu", `F.relu`, `nn.ReLU`) or GELU, exact (the string "gelu", `F.gelu`, `nn.GELU()`) or
tanh (`nn.GELU(approximate="tanh")`), norm_first True
or False, with or without bias, `self_attn` an `nn.MultiheadAttention` with one packed
q/k/v projection (`_qkv_same_embed_dim`), no add_bias_kv / add_zero_attn, heads no wider
than `safemon.models.ops.MAX_HEAD_DIM`, and elementwise-affine layer norms over d. The one
attention mask taken is the causal one (`causal_mask`: Attention(H, T, causal=True)); any
other mask, a key padding mask, and `is_causal=True` without a mask are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from safemon.models import Activation
from safemon.models.ops import (
    MAX_HEAD_DIM,
    AddResidual,
    Attention,
    LayerNorm,
    SaveResidual,
)
from safemon.torch.binding import ChainStep, LayerSpec, linear_spec, to_numpy
from safemon.torch.checks import check_weight_dtype

__all__ = ["EncoderSpec", "ParamMirror", "causal_mask", "encoder_activation", "encoder_spec",
           "encoder_support", "mirror_encoder"]

#: What the printout says of the steps that carry no execution signature.
REDUNDANCY = "computed in every channel and voted, no execution signature"


def encoder_activation(fn: object) -> Activation | str:
    """The safemon activation of an encoder layer's `activation`, or why there is none."""
    if fn is F.relu or fn is torch.relu or type(fn) is nn.ReLU:
        return Activation.RELU
    if type(fn) is nn.GELU:
        assert isinstance(fn, nn.GELU)
        if fn.approximate in ("tanh", "none"):
            return Activation.GELU if fn.approximate == "tanh" else Activation.GELU_ERF
        return f"activation nn.GELU(approximate={fn.approximate!r}) is neither GELU form"
    if fn is F.gelu:  # the string "gelu": PyTorch's exact form
        return Activation.GELU_ERF
    what = getattr(fn, "__name__", type(fn).__name__)
    return f"activation {what} is neither relu nor GELU"


def encoder_support(layer: nn.Module) -> str | None:
    """None when safemon computes `layer` as one chain of steps (module docstring);
    otherwise why not (for the printout and the errors)."""
    if type(layer) is not nn.TransformerEncoderLayer:
        return (f"{type(layer).__name__} is a subclass of nn.TransformerEncoderLayer whose "
                "forward may differ")
    attn = layer.self_attn
    if type(attn) is not nn.MultiheadAttention:
        return f"self_attn is a {type(attn).__name__}, not an nn.MultiheadAttention"
    if not attn.batch_first:
        return ("batch_first=False: safemon takes (N, T, d) inputs, one token a row "
                "(build the layer with batch_first=True)")
    if not attn._qkv_same_embed_dim:
        return "self_attn projects q, k and v with separate weights (kdim/vdim not d_model)"
    if attn.bias_k is not None or attn.bias_v is not None:
        return "self_attn has add_bias_kv=True"
    if attn.add_zero_attn:
        return "self_attn has add_zero_attn=True"
    d, heads = int(attn.embed_dim), int(attn.num_heads)
    if d // heads > MAX_HEAD_DIM:
        return (f"attention heads {d // heads} wide: safemon's attention takes at most "
                f"{MAX_HEAD_DIM}")
    act = encoder_activation(layer.activation)
    if not isinstance(act, Activation):
        return act
    for name in ("linear1", "linear2"):
        if type(getattr(layer, name)) is not nn.Linear:
            return f"{name} is a {type(getattr(layer, name)).__name__}, not an nn.Linear"
    if not isinstance(attn.out_proj, nn.Linear):
        return f"self_attn.out_proj is a {type(attn.out_proj).__name__}, not an nn.Linear"
    for name in ("norm1", "norm2"):
        norm = getattr(layer, name)
        if type(norm) is not nn.LayerNorm:
            return f"{name} is a {type(norm).__name__}, not an nn.LayerNorm"
        if not norm.elementwise_affine or tuple(norm.normalized_shape) != (d,):
            return (f"{name} is not an elementwise-affine layer norm over the last "
                    f"dimension ({d})")
    return None


def _norm(name: str, norm: nn.LayerNorm) -> LayerNorm:
    check_weight_dtype(name, norm.weight)
    gamma = to_numpy(norm.weight)
    beta = (np.zeros_like(gamma) if norm.bias is None else to_numpy(norm.bias))
    return LayerNorm(gamma, beta, float(norm.eps))


@dataclass(frozen=True)
class EncoderSpec:
    """A supported `nn.TransformerEncoderLayer` as safemon computes it.

    Attributes:
        name: its qualified name in the model.
        d, heads: d_model and nhead.
        norm_first: pre-norm (True) or post-norm.
        activation: of linear1.
        in_proj, out_proj, linear1, linear2: the dense layers ((in, out) weights).
        norm1, norm2: the layer norms (a layer norm without bias has β = 0).
    """

    name: str
    d: int
    heads: int
    norm_first: bool
    activation: Activation
    in_proj: LayerSpec
    out_proj: LayerSpec
    linear1: LayerSpec
    linear2: LayerSpec
    norm1: LayerNorm
    norm2: LayerNorm

    def steps(self, tokens: int, causal: bool = False) -> list[ChainStep]:
        """The layer's steps for sequences of `tokens` rows (module docstring), its
        attention causal or not.

        Raises:
            InvalidInputError: tokens not in 1..MAX_TOKENS (`safemon.models.ops.Attention`).
        """
        attn = Attention(self.heads, tokens, causal)
        if self.norm_first:
            return [SaveResidual(), self.norm1, self.in_proj, attn, self.out_proj,
                    AddResidual(), SaveResidual(), self.norm2, self.linear1, self.linear2,
                    AddResidual()]
        return [SaveResidual(), self.in_proj, attn, self.out_proj, AddResidual(), self.norm1,
                SaveResidual(), self.linear1, self.linear2, AddResidual(), self.norm2]


def causal_mask(name: str, src_mask: torch.Tensor | None,
                src_key_padding_mask: torch.Tensor | None, is_causal: bool,
                tokens: int, device: torch.device | None = None) -> bool:
    """Whether an encoder layer's call over sequences of `tokens` is causal: True for a
    `src_mask` that is exactly the causal mask ((T, T), bool True above the diagonal, or
    float −inf above it and 0 elsewhere: `nn.Transformer.generate_square_subsequent_mask`),
    False for no mask. The mask's values are compared on its own device, on every call (a
    mask can be written without PyTorch seeing it, through `.data` or DLPack): for a GPU
    mask that is one small comparison and a wait.

    Raises:
        ValueError: naming layer `name`: a key padding mask; `is_causal=True` without a
            mask (PyTorch then attends to every token on one path and causally on another);
            a mask on another device than `device` (the input's, when given); any other
            mask, or a causal hint on a mask that is not causal.
    """
    fix = ("Fix: call it without a mask, or with the causal mask "
           "(nn.Transformer.generate_square_subsequent_mask(T)), or leave this layer to "
           "PyTorch (do not protect it).")
    if src_key_padding_mask is not None:
        raise ValueError(f"safemon.torch: layer {name!r} got an attention mask "
                         "(src_key_padding_mask); masks are not supported but the causal "
                         f"one: pad the sequences to one length. {fix}")
    if src_mask is None:
        if is_causal:
            raise ValueError(f"safemon.torch: layer {name!r} got an attention mask hint "
                             "(is_causal=True) without src_mask; masks are not supported "
                             f"without the mask itself. {fix}")
        return False
    if device is not None and src_mask.device != device:
        raise ValueError(f"safemon.torch: layer {name!r} got an attention mask (src_mask) on "
                         f"{src_mask.device}, its input on {device}. Fix: put the mask on "
                         "the input's device.")
    causal = False
    if (tuple(src_mask.shape) == (tokens, tokens) and not src_mask.is_nested
            and (src_mask.dtype == torch.bool or src_mask.is_floating_point())):
        try:
            causal = torch.equal(src_mask.detach(), _causal_form(tokens, src_mask))
        except Exception as exc:  # a fake (traced), meta or sparse mask has no values here
            raise ValueError(
                f"safemon.torch: layer {name!r} got an attention mask (src_mask) whose values "
                f"cannot be read ({type(exc).__name__}): a call with a mask cannot be traced "
                f"or exported, and the mask must be a dense tensor. {fix}") from None
    if not causal:
        raise ValueError(f"safemon.torch: layer {name!r} got an attention mask (src_mask) "
                         f"that is not the causal mask of {tokens} tokens; masks are not "
                         f"supported but the causal one. {fix}")
    return True


def _causal_form(tokens: int, like: torch.Tensor) -> torch.Tensor:
    """The causal mask of `tokens` in the dtype and on the device of `like`: bool True
    above the diagonal, or a float −inf above it and 0 elsewhere. Made afresh for each
    call (nothing kept that a traced call could leave behind)."""
    above = torch.ones(tokens, tokens, dtype=torch.bool, device=like.device).triu(1)
    if like.dtype == torch.bool:
        return above
    return torch.zeros(tokens, tokens, dtype=like.dtype, device=like.device).masked_fill(
        above, float("-inf"))


def encoder_spec(name: str, layer: nn.TransformerEncoderLayer) -> EncoderSpec:
    """The safemon form of `layer`.

    Raises:
        ValueError: `encoder_support` refuses it (naming the layer and why).
        TypeError: weights that are not float32 (`checks.check_weight_dtype`).
    """
    why = encoder_support(layer)
    if why is not None:
        raise ValueError(f"safemon.torch: layer {name!r} cannot be protected: {why}")
    attn = layer.self_attn
    act = encoder_activation(layer.activation)
    assert isinstance(act, Activation)
    check_weight_dtype(f"{name}.self_attn", attn.in_proj_weight)
    in_bias = None if attn.in_proj_bias is None else to_numpy(attn.in_proj_bias)
    in_proj = LayerSpec(f"{name}.self_attn.in_proj", to_numpy(attn.in_proj_weight).T.copy(),
                        in_bias, Activation.IDENTITY)
    return EncoderSpec(
        name, int(attn.embed_dim), int(attn.num_heads), bool(layer.norm_first), act, in_proj,
        linear_spec(f"{name}.self_attn.out_proj", attn.out_proj, Activation.IDENTITY),
        linear_spec(f"{name}.linear1", layer.linear1, act),
        linear_spec(f"{name}.linear2", layer.linear2, Activation.IDENTITY),
        _norm(f"{name}.norm1", layer.norm1), _norm(f"{name}.norm2", layer.norm2))


class ParamMirror(nn.Module):
    """Detached copies of a module's parameters as buffers under the same names (its place
    in `state_dict`, `.to()` and the change check follow them)."""

    def __init__(self, tensors: dict[str, torch.Tensor | None]) -> None:
        super().__init__()
        for key, t in tensors.items():
            self.register_buffer(key, None if t is None else t.detach().clone())

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={tuple(b.shape)}" for k, b in self._buffers.items()
                         if b is not None)


def mirror_encoder(target: nn.Module, layer: nn.TransformerEncoderLayer) -> None:
    """Give `target` children named as `layer`'s that hold copies of its parameters, so that
    `target`'s `state_dict` has `layer`'s keys and values (`self_attn.in_proj_weight`, ...,
    `norm2.bias`), in its order. `target.self_attn` also answers `batch_first`, `num_heads`
    and `embed_dim` as `layer.self_attn` does (`nn.TransformerEncoder` reads
    `layers[0].self_attn.batch_first`)."""
    attn = layer.self_attn
    mirror = ParamMirror({"in_proj_weight": attn.in_proj_weight,
                          "in_proj_bias": attn.in_proj_bias})
    mirror.out_proj = ParamMirror({"weight": attn.out_proj.weight, "bias": attn.out_proj.bias})
    mirror.batch_first = attn.batch_first
    mirror.num_heads = attn.num_heads
    mirror.embed_dim = attn.embed_dim
    target.self_attn = mirror
    for key in ("linear1", "linear2", "norm1", "norm2"):
        part = getattr(layer, key)
        setattr(target, key, ParamMirror({"weight": part.weight, "bias": part.bias}))
