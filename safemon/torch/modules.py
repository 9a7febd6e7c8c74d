"""The protected modules that `protect` puts in place of PyTorch's.

- `ProtectedLinear`: one `nn.Linear` (and the activation right after it, when safemon
  computes that activation): act(x · Wᵀ + b) through safemon.
- `ProtectedSequence`: a run of an `nn.Sequential`: consecutive Linear layers with only
  supported activations (ReLU, GELU in either form, Identity, Dropout in eval) between them, and
  supported `nn.TransformerEncoderLayer`s and the `nn.Flatten` / `nn.Unflatten` reshapes
  between them (`safemon.torch.chain`), sent as ONE whole-model request per call instead of
  one request per layer. It takes the first member's place; each later Linear's place holds
  a `FoldedLinear` (its weight and bias, passing its input through), each later encoder
  layer's a `FoldedEncoderLayer`, so the model's `state_dict` keys stay those of the
  unprotected model.
- `ProtectedEncoderLayer`: one `nn.TransformerEncoderLayer` (`safemon.torch.encoder`) as
  one whole-model request: its four products with execution signatures, its layer norms,
  attention scores, softmax and residual adds computed in every channel and voted.
- `ProtectedConv2d`: one `nn.Conv2d` (groups 1, zero padding) as one product over the
  unfolded input (`safemon.torch.conv`), plus its activation.

Each module keeps a detached copy of the original weight and bias as buffers named as the
original's (`weight`, `bias`; an encoder layer's parameters under their own names:
`state_dict`, `.to(device)` and the device check follow the model, and a protected model's
`state_dict` loads into the unprotected model) and calls the `safemon::forward` operator
(`safemon::forward_shaped` for a run whose steps depend on the input's shape), which
`torch.compile` and tracing see as one node. Inputs are
checked first (`safemon.torch.checks`): float32, on the weights' device, no gradient.

The weights the daemon holds are a snapshot taken at construction. Changing the module's
buffers afterwards (an in-place write, `load_state_dict`) would not change what is computed,
so the next eager call raises `ValueError` instead (protect the updated model again; a
compiled graph leaves this check out). A protected
module cannot be copied or pickled either (`copy.deepcopy`, `torch.save(model)`): it holds a
live client; save the unprotected model's `state_dict` instead.

Each protected module carries a forward pre-hook that does nothing. PyTorch's fused fast
paths (`nn.TransformerEncoderLayer` in eval mode) read their child layers' weights directly
instead of calling them, unless a child has a hook; with it they call the protected modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from safemon.client import Client
from safemon.config import VariantConfig
from safemon.models import Activation, Layer, reference_forward
from safemon.models.layers import Step
from safemon.torch import conv as convmath
from safemon.torch.binding import ChainBinding, LayerSpec, linear_spec, to_numpy
from safemon.torch.chain import Member, Regroup, Walk, walk
from safemon.torch.checks import check_input, check_weight_dtype
from safemon.torch.encoder import EncoderSpec, causal_mask, encoder_spec, mirror_encoder
from safemon.torch.op import forward as safemon_forward
from safemon.torch.op import forward_shaped as safemon_forward_shaped
from safemon.torch.op import register_runner

__all__ = ["FoldedEncoderLayer", "FoldedLinear", "ProtectedConv2d", "ProtectedEncoderLayer",
           "ProtectedLinear", "ProtectedSequence", "linear_spec"]


def _called_as_a_module(_module: nn.Module, _args: tuple[object, ...]) -> None:
    """A forward pre-hook that does nothing: its presence keeps PyTorch's fused fast paths,
    which would read the layer's weight directly, off (module docstring)."""
    return None


def _version_of(t: torch.Tensor) -> int | None:
    """`t`'s version counter (bumped by every in-place write), None for an inference tensor,
    which has none (and cannot be written outside inference mode)."""
    try:
        return int(t._version)
    except RuntimeError:
        return None


class _Snapshot(nn.Module):
    """A module holding copies of a layer's weight and bias (as buffers) that the daemon
    computes with: a write to them after `protect` is refused at the next call."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.layer_name = name
        self._versions: tuple[tuple[int, int | None], ...] = ()

    def _hold(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """Keep detached copies of `weight` and `bias` as the buffers `weight` and `bias`,
        and record their versions."""
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self._snapshot_taken()

    def _snapshot_taken(self) -> None:
        """Record the versions of the weight and bias buffers."""
        self._versions = self._buffer_versions()

    def _buffer_versions(self) -> tuple[tuple[int, int | None], ...]:
        """Each weight/bias buffer's identity and version: an in-place write bumps the
        version, a replacement (`load_state_dict(assign=True)`, `layer.weight = t`) the
        identity."""
        # an encoder layer's copies are in child modules; the others' in this one alone
        items = self.named_buffers() if self._modules else self._buffers.items()
        return tuple((id(b), _version_of(b)) for name, b in items
                     if b is not None and name != "_device_probe")

    def _check_unchanged(self) -> None:
        """Raise when a weight or bias buffer was written since protect (in eager mode:
        inside `torch.compile` a version counter is a data-dependent value, so the check is
        left out of compiled graphs).

        Raises:
            ValueError: naming the layer and the fix.
        """
        if torch.compiler.is_compiling():
            return
        if self._buffer_versions() != self._versions:
            raise ValueError(
                f"safemon.torch: layer {self.layer_name!r}: its weight or bias was changed "
                "after protect() (an in-place write or load_state_dict), but the daemon "
                "computes with the weights registered then. Fix: protect the updated model "
                "again (protect(model, client=...) on a model with plain nn.Linear/nn.Conv2d "
                "layers).")

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        """`.to()`, `.cuda()` and the like: refused after a change, re-recorded after."""
        self._check_unchanged()
        out = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self._snapshot_taken()
        return out

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(
            f"safemon.torch: layer {self.layer_name!r} cannot be copied or pickled: a "
            "protected model holds a live safemon client. Fix: save or copy the unprotected model (its state_dict), "
            "and protect the copy with its own client.")


class _Protected(_Snapshot):
    """What the protected modules share: the mode, the device, the checks, the call of the
    operator through a `ChainBinding`."""

    def __init__(self, name: str, source: nn.Module, timeout: float) -> None:
        """`source` is the (first) module replaced: the weights' device and the mode
        (train/eval) start as its own, so a module built from an eval-mode layer is in eval
        mode."""
        super().__init__(name)
        weight = next(iter(source.parameters()))
        self.train(source.training)
        self.timeout = timeout
        #: the operator's key of this module's runner (`op.register_runner`)
        self._key = ""
        # The device the weights live on (moves with .to()): what inputs must match.
        self.register_buffer("_device_probe", torch.empty(0, device=weight.device),
                             persistent=False)
        self.register_forward_pre_hook(_called_as_a_module)

    def _checked(self, x: torch.Tensor, in_features: int) -> None:
        """The checks of every call: `check_input` on x, then `_check_unchanged`."""
        check_input(self.layer_name, x, device=self.device, in_features=in_features,
                    training=self.training)
        self._check_unchanged()

    @property
    def device(self) -> torch.device:
        """The device of the layer's weights."""
        probe = self._device_probe
        assert isinstance(probe, torch.Tensor)
        return probe.device

    def _product(self, x2d: torch.Tensor, binding: ChainBinding) -> torch.Tensor:
        """The operator on an (M, K) input (contiguous), or an empty (0, N) for M = 0."""
        n = binding.out_features
        if x2d.shape[0] == 0:
            return x2d.new_empty((0, n))
        out: torch.Tensor = safemon_forward(x2d.contiguous(), self._key, n)
        return out

    def _dense(self, x: torch.Tensor, binding: ChainBinding) -> torch.Tensor:
        """(..., K) → (..., N) through `binding` (the caller has run the checks)."""
        y = self._product(x.reshape(-1, binding.in_features), binding)
        return y.reshape(*x.shape[:-1], binding.out_features)


class _Bound(_Protected):
    """A protected module of one registered chain (`binding`), whatever the input's shape."""

    def __init__(self, name: str, client: Client, specs: Sequence[LayerSpec],
                 source: nn.Module, timeout: float) -> None:
        super().__init__(name, source, timeout)
        self.binding = ChainBinding(client, specs, timeout=timeout)
        self._key = register_runner(self.binding, name or "model")

    def _reference_2d(self, x2d: torch.Tensor, variant: VariantConfig | None) -> np.ndarray:
        host = np.ascontiguousarray(x2d.detach().to("cpu").numpy())
        out: np.ndarray = reference_forward(self.binding.weights, list(self.binding.layers),
                                            host, variant=variant)
        return out

    def reference(self, x: torch.Tensor, variant: VariantConfig | None = None) -> np.ndarray:
        """What this module must output for `x`, from `safemon.models.reference_forward`
        (NumPy, on the host): a released output equals it bit for bit.

        Args:
            x: an input this module accepts (any device; copied to the host).
            variant: the channels' kernel variant (`config.channels[0].variant`); None =
                the default.
        """
        k = self.binding.in_features
        out = self._reference_2d(x.reshape(-1, k), variant)
        return out.reshape(*x.shape[:-1], self.binding.out_features)


class ProtectedLinear(_Bound):
    """`act(x · linear.weightᵀ + linear.bias)` computed and voted by safemon.

    Args:
        linear: the layer to protect (float32 weights).
        client: a connected `safemon.Client`.
        name: the layer's name in messages.
        activation: what the channels apply after the bias ("identity", "relu", "gelu" =
            the tanh form, like `nn.GELU(approximate="tanh")`, "gelu_erf" = the exact
            form, like `nn.GELU()`).
        timeout: seconds per request.

    Input (..., in_features) float32 on the weights' device; output (..., out_features).

    Raises (construction): TypeError for non-float32 weights; the client's errors.
    Raises (call): see `safemon.torch.checks.check_input`; the client's errors.
    """

    def __init__(self, linear: nn.Linear, client: Client, *, name: str = "linear",
                 activation: Activation | str = Activation.IDENTITY,
                 timeout: float = 1.0) -> None:
        spec = linear_spec(name, linear, activation)
        super().__init__(name, client, [spec], linear, timeout)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._hold(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._checked(x, self.binding.in_features)
        return self._dense(x, self.binding)

    def extra_repr(self) -> str:
        act = self.binding.specs[0].activation.value
        return (f"{self.layer_name!r}, in_features={self.in_features}, "
                f"out_features={self.out_features}, activation={act}")


class FoldedLinear(_Snapshot):
    """The place of a Linear that a `ProtectedSequence` computes (every member after the
    first): it holds that Linear's weight and bias, so the model's `state_dict` keeps the
    unprotected model's keys, and passes its input through unchanged (the sequence before it
    has already applied this layer).

    Its `forward` and the sequence's each refuse a call after its weight or bias was
    written (`_check_unchanged`).
    """

    def __init__(self, name: str, linear: nn.Linear, computed_by: str) -> None:
        super().__init__(name)
        self.train(linear.training)  # as the Linear it replaces, like the protected modules
        self.computed_by = computed_by
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._hold(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_unchanged()
        return x

    def extra_repr(self) -> str:
        return (f"{self.layer_name!r}, in_features={self.in_features}, "
                f"out_features={self.out_features}: computed by {self.computed_by!r}'s "
                "request")


class FoldedEncoderLayer(_Snapshot):
    """The place of an `nn.TransformerEncoderLayer` that a `ProtectedSequence` computes (a
    member after its first): it holds copies of the layer's parameters under the layer's
    names (`self_attn.in_proj_weight`, ..., `norm2.bias`), so the model's `state_dict` keeps
    its keys, and passes its input through unchanged. A call after one of them was written
    is refused, as `FoldedLinear` refuses one."""

    def __init__(self, name: str, layer: nn.TransformerEncoderLayer, computed_by: str) -> None:
        super().__init__(name)
        self.train(layer.training)
        self.computed_by = computed_by
        mirror_encoder(self, layer)
        self._snapshot_taken()

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        self._check_unchanged()
        return src

    def extra_repr(self) -> str:
        return f"{self.layer_name!r}: computed by {self.computed_by!r}'s request"


def _member(name: str, module: nn.Module, act: Activation | str) -> Member:
    """The run member of `module` (an nn.Linear, a supported nn.TransformerEncoderLayer, an
    nn.Flatten or nn.Unflatten).

    Raises:
        ValueError: anything else; TypeError: non-float32 weights.
    """
    if type(module) is nn.Linear:
        return linear_spec(name, module, act)
    if isinstance(module, nn.TransformerEncoderLayer):
        return encoder_spec(name, module)
    regroup = Regroup.of(name, module)
    if regroup is None:
        raise ValueError(f"safemon.torch: layer {name!r} ({type(module).__name__}) cannot be "
                         "part of a protected run (nn.Linear, nn.TransformerEncoderLayer, "
                         "nn.Flatten, nn.Unflatten)")
    return regroup


class _ShapedRunner:
    """The runner of a `ProtectedSequence` whose steps depend on the input's shape (held by
    the module; the operator's table holds it weakly); `causal`: its encoder layers'
    attentions are causal (`ProtectedEncoderLayer` called with the causal mask)."""

    def __init__(self, module: ProtectedSequence, causal: bool = False) -> None:
        self.module = module
        self.causal = causal

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.module._run_shaped(x, self.causal)


class ProtectedSequence(_Protected):
    """A run of an `nn.Sequential` sent as one whole-model request per call: dense layers,
    encoder layers and the reshapes between them.

    Args:
        layers: (name, module, activation) in order: nn.Linear (the activation is applied
            after it), supported nn.TransformerEncoderLayer (`encoder.encoder_support`), and
            after the first, nn.Flatten / nn.Unflatten (`safemon.torch.chain`). Widths
            chain.
        client, timeout: as for `ProtectedLinear`.

    Holds the first member's parameters (a Linear's as `weight` and `bias`, an encoder
    layer's under its own names); `folded` are the `FoldedLinear` / `FoldedEncoderLayer`
    modules that `protect` puts in the places of the later Linear and encoder members, and
    `places` every later member's place with the module for it (those, and `nn.Identity`
    for a reshape).

    A run of Linear layers only is one model, registered here (as it always was); any
    other run's steps depend on the input's shape (an encoder layer's sequence length T, the
    widths a reshape gives), so it registers one model per input shape it meets, on the
    first call with that shape (cached), and calls `torch.ops.safemon.forward_shaped`.

    Input: what the first member takes (a Linear (..., in_features); an encoder layer
    (N, T, d) or (T, d)); output: what the last member gives, in PyTorch's shape.

    Raises (call): see `checks.check_input`; ValueError from `chain.walk` for a shape the
    run does not take; the client's errors.
    """

    def __init__(self, layers: Sequence[tuple[str, nn.Module, Activation | str]],
                 client: Client, *, timeout: float = 1.0) -> None:
        members = tuple(_member(name, m, act) for name, m, act in layers)
        if isinstance(members[0], Regroup):
            raise ValueError(f"safemon.torch: a protected run starts with an nn.Linear or an "
                             f"nn.TransformerEncoderLayer, not {type(layers[0][1]).__name__}")
        first_name, first, _ = layers[0]
        label = first_name if len(layers) == 1 else f"{first_name}..{layers[-1][0]}"
        super().__init__(label, first, timeout)
        self.members = members
        self.names = tuple(name for name, _, _ in layers)
        self.in_features = (members[0].d if isinstance(members[0], EncoderSpec)
                            else int(members[0].weight.shape[0]))
        self._registered: dict[int, str] = {}
        self._bindings: dict[tuple[object, ...], ChainBinding] = {}
        self._walks: dict[tuple[tuple[int, ...], bool], Walk] = {}
        #: a run of dense layers only: one model, whatever the input's shape
        self.static = all(isinstance(m, LayerSpec) for m in members)
        self.binding: ChainBinding | None = None
        if self.static:
            self.binding = ChainBinding(client, [m for m in members if isinstance(m, LayerSpec)],
                                        timeout=timeout, registered=self._registered)
            self._key = register_runner(self.binding, label or "model")
        else:
            for spec in self._dense_specs():
                self._registered[id(spec)] = client.register_weight(spec.weight)
            self._runner = _ShapedRunner(self)
            self._key = register_runner(self._runner, label or "model")
        self.client = client
        if isinstance(first, nn.TransformerEncoderLayer):
            mirror_encoder(self, first)
            self._snapshot_taken()
        else:
            assert isinstance(first, nn.Linear)
            self._hold(first.weight, first.bias)
        places: list[tuple[str, nn.Module]] = []
        for name, module, _ in layers[1:]:
            if isinstance(module, nn.Linear):
                places.append((name, FoldedLinear(name, module, label)))
            elif isinstance(module, nn.TransformerEncoderLayer):
                places.append((name, FoldedEncoderLayer(name, module, label)))
            else:
                places.append((name, nn.Identity()))
        # Tuples, so that nn.Module does not register them as children here too (they are
        # the model's children at their own places).
        self.places: tuple[tuple[str, nn.Module], ...] = tuple(places)
        self.folded: tuple[FoldedLinear | FoldedEncoderLayer, ...] = tuple(
            m for _, m in places if isinstance(m, FoldedLinear | FoldedEncoderLayer))

    def _dense_specs(self) -> list[LayerSpec]:
        """Every dense layer of the run, the encoder layers' four included, in order."""
        specs: list[LayerSpec] = []
        for m in self.members:
            if isinstance(m, LayerSpec):
                specs.append(m)
            elif isinstance(m, EncoderSpec):
                specs += [m.in_proj, m.out_proj, m.linear1, m.linear2]
        return specs

    def _check_unchanged(self) -> None:
        """Raise when this layer's or a folded member's weight or bias was written."""
        super()._check_unchanged()
        for member in self.folded:
            member._check_unchanged()

    def walk_of(self, shape: tuple[int, ...], causal: bool = False) -> Walk:
        """The run's steps for an input of `shape` (`chain.walk`, cached per shape and
        `causal`)."""
        found = self._walks.get((shape, causal))
        if found is None:
            found = walk(self.members, shape, causal=causal)
            if len(self._walks) >= 256:  # many batch sizes: start again, nothing is lost
                self._walks.clear()
            self._walks[(shape, causal)] = found
        return found

    def binding_for(self, w: Walk) -> ChainBinding:
        """The registered model of the chain `w` (registered on its first use)."""
        found = self._bindings.get(w.signature)
        if found is None:
            found = ChainBinding(self.client, w.steps, timeout=self.timeout,
                                 registered=self._registered)
            self._bindings[w.signature] = found
        return found

    def _run_shaped(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        """The runner of a shape-dependent run: x (contiguous, the run's input shape) →
        the released output in the run's output shape."""
        w = self.walk_of(tuple(int(s) for s in x.shape), causal)
        out = self.binding_for(w)(x.reshape(-1, w.in_width))
        return out.reshape(w.out_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._checked(x, self.in_features)
        return self._forward(x, self._key)

    def _forward(self, x: torch.Tensor, key: str) -> torch.Tensor:
        """The run on a checked `x` through the runner `key`."""
        if self.binding is not None:
            return self._dense(x, self.binding)
        w = walk(self.members, tuple(x.shape), build=False)
        if math.prod(w.out_shape) == 0 or x.numel() == 0:
            return x.new_empty(w.out_shape)
        out: torch.Tensor = safemon_forward_shaped(x.contiguous(), key, list(w.out_shape))
        return out

    def reference(self, x: torch.Tensor, variant: VariantConfig | None = None,
                  causal: bool = False) -> np.ndarray:
        """What this module must output for `x`, from `safemon.models.reference_forward`
        on the run's steps for x's shape (NumPy, on the host): a released output equals it
        bit for bit. Arguments as `ProtectedLinear.reference`; `causal`: as called with the
        causal mask."""
        w = walk(self.members, tuple(int(s) for s in x.shape), causal=causal)
        if not w.steps:
            return np.zeros(w.out_shape, dtype=np.float32)
        steps: list[Step] = [Layer(self._registered[id(s)], s.bias, s.activation)
                             if isinstance(s, LayerSpec) else s for s in w.steps]
        host = np.ascontiguousarray(x.detach().to("cpu").reshape(-1, w.in_width).numpy())
        out: np.ndarray = reference_forward([s.weight for s in w.steps
                                             if isinstance(s, LayerSpec)], steps, host,
                                            variant=variant)
        return out.reshape(w.out_shape)

    @property
    def specs(self) -> list[LayerSpec]:
        """Every dense layer computed by the run, in order."""
        return self._dense_specs()

    def extra_repr(self) -> str:
        parts = []
        for name, m in zip(self.names, self.members, strict=True):
            if isinstance(m, LayerSpec):
                parts.append(f"{name}:{m.activation.value}")
            elif isinstance(m, EncoderSpec):
                parts.append(f"{name}:encoder({'pre' if m.norm_first else 'post'}-norm, "
                             f"{m.heads} heads, {m.activation.value})")
            else:
                parts.append(f"{name}:{m.kind}")
        return f"one request for [{', '.join(parts)}]"


class ProtectedEncoderLayer(ProtectedSequence):
    """One `nn.TransformerEncoderLayer` (batch_first, relu or GELU; see
    `safemon.torch.encoder`) computed by safemon as one whole-model request per call: its
    products with execution signatures, its layer norms, attention scores, softmax and
    residual adds protected by redundancy (computed in every channel and voted).

    Args:
        layer: the layer to protect (float32).
        client: a connected `safemon.Client`.
        name: the layer's name in messages.
        timeout: seconds per request.

    Input (N, T, d_model) or (T, d_model) float32, T at most
    `safemon.models.ops.MAX_TOKENS`; output the same shape. One model is registered per
    sequence length met (and per causal or not). Its `state_dict` is the layer's. The one
    mask it takes is the causal one, as `src_mask` (`encoder.causal_mask`, which compares
    its values on every call; under torch.compile that comparison runs eagerly, a graph
    break, where a call without a mask compiles whole).

    Raises (construction): ValueError when `encoder_support` refuses the layer (naming it
    and why); TypeError for non-float32 weights; the client's errors.
    Raises (call): ValueError for another mask, a key padding mask, is_causal=True without
    a mask, or a nested tensor; see `ProtectedSequence`.
    """

    def __init__(self, layer: nn.TransformerEncoderLayer, client: Client, *,
                 name: str = "encoder", timeout: float = 1.0) -> None:
        super().__init__([(name, layer, Activation.IDENTITY)], client, timeout=timeout)
        spec = self.members[0]
        assert isinstance(spec, EncoderSpec)
        self.d_model, self.nhead, self.norm_first = spec.d, spec.heads, spec.norm_first
        # The runner of calls with the causal mask (their steps' attention is causal).
        self._causal_runner = _ShapedRunner(self, causal=True)
        self._causal_key = register_runner(self._causal_runner, f"{name}:causal")

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None,
                src_key_padding_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        if src.is_nested:
            raise ValueError(
                f"safemon.torch: layer {self.layer_name!r} got a nested tensor; safemon takes "
                "dense (N, T, d) inputs. Fix: pad the sequences to one length (no mask).")
        self._checked(src, self.in_features)
        if src_mask is None and src_key_padding_mask is None and not is_causal:
            return self._forward(src, self._key)
        causal = self._causal_call(src, src_mask, src_key_padding_mask, is_causal)
        return self._forward(src, self._causal_key if causal else self._key)

    @torch.compiler.disable  # type: ignore[untyped-decorator]  # torch is untyped to mypy here
    def _causal_call(self, src: torch.Tensor, src_mask: torch.Tensor | None,
                     src_key_padding_mask: torch.Tensor | None, is_causal: bool) -> bool:
        """`encoder.causal_mask` for this call (run eagerly under torch.compile: it reads
        the mask's values)."""
        return causal_mask(self.layer_name, src_mask, src_key_padding_mask, is_causal,
                           int(src.shape[-2]) if src.dim() >= 2 else 0, src.device)

    def extra_repr(self) -> str:
        spec = self.members[0]
        assert isinstance(spec, EncoderSpec)
        return (f"{self.layer_name!r}, d_model={spec.d}, nhead={spec.heads}, "
                f"norm_first={spec.norm_first}, activation={spec.activation.value}")


class ProtectedConv2d(_Bound):
    """A Conv2d (groups 1, zero padding) as one safemon product over the unfolded input,
    then bias and activation in the channels.

    Input (N, C, H, W) float32 on the weights' device; output (N, O, Ho, Wo). An unbatched
    (C, H, W) input gives (O, Ho, Wo), as `nn.Conv2d` does.

    Raises (construction): ValueError if `conv_support(conv)` refuses the layer; TypeError
    for non-float32 weights; the client's errors.
    """

    def __init__(self, conv: nn.Conv2d, client: Client, *, name: str = "conv",
                 activation: Activation | str = Activation.IDENTITY,
                 timeout: float = 1.0) -> None:
        why = convmath.conv_support(conv)
        if why is not None:
            raise ValueError(f"safemon.torch: layer {name!r} cannot be protected: {why}")
        check_weight_dtype(name, conv.weight)
        bias = None if conv.bias is None else to_numpy(conv.bias)
        spec = LayerSpec(name, to_numpy(convmath.weight_matrix(conv.weight.detach())), bias,
                         Activation(activation))
        super().__init__(name, client, [spec], conv, timeout)
        self.geometry = convmath.geometry_of(conv)
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self._hold(conv.weight, conv.bias)

    def _batched(self, x: torch.Tensor) -> torch.Tensor:
        """x as (N, C, H, W): an unbatched (C, H, W) input, which `nn.Conv2d` accepts too,
        as a batch of one.

        Raises:
            ValueError: any other shape, or another channel count (naming the layer).
        """
        if x.ndim == 3 and x.shape[0] == self.in_channels:
            return x.unsqueeze(0)
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"safemon.torch: layer {self.layer_name!r} expects (N, {self.in_channels}, H, W)"
                f" or ({self.in_channels}, H, W) inputs, got {tuple(x.shape)}.")
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._checked(x, 0)
        xb = self._batched(x)
        ho, wo = self.geometry.out_size(int(xb.shape[2]), int(xb.shape[3]))
        y = self._product(convmath.im2col(xb, self.geometry), self.binding)
        out = convmath.col2im(y, int(xb.shape[0]), ho, wo)
        return out.squeeze(0) if x.ndim == 3 else out

    def reference(self, x: torch.Tensor, variant: VariantConfig | None = None) -> np.ndarray:
        """What this module must output for `x` ((N, C, H, W) or (C, H, W)), from
        `reference_forward` on the unfolded input (NumPy, host, (N, O, Ho, Wo) or
        (O, Ho, Wo)); see `_Protected.reference`."""
        xb = self._batched(x)
        ho, wo = self.geometry.out_size(int(xb.shape[2]), int(xb.shape[3]))
        cols = convmath.im2col(xb.detach().to("cpu"), self.geometry)
        out = convmath.col2im(torch.from_numpy(self._reference_2d(cols, variant)),
                              int(xb.shape[0]), ho, wo)
        return (out.squeeze(0) if x.ndim == 3 else out).numpy()

    def extra_repr(self) -> str:
        g = self.geometry
        return (f"{self.layer_name!r}, {self.in_channels}, {self.out_channels}, "
                f"kernel_size={g.kernel}, stride={g.stride}, padding={g.padding}, "
                f"dilation={g.dilation}, activation={self.binding.specs[0].activation.value}")
