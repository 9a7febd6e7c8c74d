"""The protected modules that `protect` puts in place of PyTorch's.

- `ProtectedLinear`: one `nn.Linear` (and the activation right after it, when safemon
  computes that activation): act(x · Wᵀ + b) through safemon.
- `ProtectedSequence`: consecutive Linear layers of an `nn.Sequential` with only supported
  activations (ReLU, tanh-GELU, Identity, Dropout in eval) between them, sent as ONE
  whole-model request per call instead of one request per layer. It takes the first
  Linear's place; each later Linear's place holds a `FoldedLinear` (its weight and bias,
  passing its input through), so the model's `state_dict` keys stay those of the
  unprotected model.
- `ProtectedConv2d`: one `nn.Conv2d` (groups 1, zero padding) as one product over the
  unfolded input (`safemon.torch.conv`), plus its activation.

Each module keeps a detached copy of the original weight and bias as buffers named as the
original's (`weight`, `bias`: `state_dict`, `.to(device)` and the device check follow the
model, and a protected model's `state_dict` loads into the unprotected model) and calls the
`safemon::forward` operator, which `torch.compile` and tracing see as one node. Inputs are
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

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from safemon.client import Client
from safemon.config import VariantConfig
from safemon.models import Activation, reference_forward
from safemon.torch import conv as convmath
from safemon.torch.binding import ChainBinding, LayerSpec
from safemon.torch.checks import check_input, check_weight_dtype
from safemon.torch.op import forward as safemon_forward
from safemon.torch.op import register_runner

__all__ = ["FoldedLinear", "ProtectedConv2d", "ProtectedLinear", "ProtectedSequence"]


def _numpy(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().to("cpu", torch.float32).numpy())


def linear_spec(name: str, linear: nn.Linear, activation: Activation | str) -> LayerSpec:
    """The safemon form of `linear`: weight transposed to (in, out), bias as NumPy.

    Raises:
        TypeError: the weight is not float32 (`checks.check_weight_dtype`).
    """
    check_weight_dtype(name, linear.weight)
    bias = None if linear.bias is None else _numpy(linear.bias)
    return LayerSpec(name, _numpy(linear.weight).T.copy(), bias, Activation(activation))


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
        return tuple((id(b), _version_of(b)) for name, b in self._buffers.items()
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
    """What the protected modules share: the binding, its operator key, the checks."""

    def __init__(self, name: str, client: Client, specs: Sequence[LayerSpec],
                 source: nn.Module, timeout: float) -> None:
        """`source` is the (first) module replaced: the weights' device and the mode
        (train/eval) start as its own, so a module built from an eval-mode layer is in eval
        mode."""
        super().__init__(name)
        weight = source.weight
        assert isinstance(weight, torch.Tensor)
        self.train(source.training)
        self.binding = ChainBinding(client, specs, timeout=timeout)
        self._key = register_runner(self.binding, name or "model")
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

    def _product(self, x2d: torch.Tensor) -> torch.Tensor:
        """The operator on an (M, K) input (contiguous), or an empty (0, N) for M = 0."""
        n = self.binding.out_features
        if x2d.shape[0] == 0:
            return x2d.new_empty((0, n))
        out: torch.Tensor = safemon_forward(x2d.contiguous(), self._key, n)
        return out

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

    def _dense(self, x: torch.Tensor) -> torch.Tensor:
        """(..., K) → (..., N) through the binding, after the checks."""
        k = self.binding.in_features
        self._checked(x, k)
        y = self._product(x.reshape(-1, k))
        return y.reshape(*x.shape[:-1], self.binding.out_features)


class ProtectedLinear(_Protected):
    """`act(x · linear.weightᵀ + linear.bias)` computed and voted by safemon.

    Args:
        linear: the layer to protect (float32 weights).
        client: a connected `safemon.Client`.
        name: the layer's name in messages.
        activation: what the channels apply after the bias ("identity", "relu", "gelu" =
            the tanh form, like `nn.GELU(approximate="tanh")`).
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
        return self._dense(x)

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


class ProtectedSequence(_Protected):
    """Consecutive dense layers sent as one whole-model request per call.

    Args:
        layers: (name, linear, activation) in order; out_features of one equals the
            in_features of the next.
        client, timeout: as for `ProtectedLinear`.

    It holds the first layer's weight and bias (`weight`, `bias`); `folded` are the
    `FoldedLinear` modules that `protect` puts in the later layers' places, holding theirs.

    Input (..., in_features of the first) float32; output (..., out_features of the last).
    """

    def __init__(self, layers: Sequence[tuple[str, nn.Linear, Activation | str]],
                 client: Client, *, timeout: float = 1.0) -> None:
        specs = [linear_spec(name, lin, act) for name, lin, act in layers]
        label = f"{layers[0][0]}..{layers[-1][0]}"
        super().__init__(label, client, specs, layers[0][1], timeout)
        self.names = tuple(name for name, _, _ in layers)
        self._hold(layers[0][1].weight, layers[0][1].bias)
        # A tuple, so that nn.Module does not register them as children here too (they are
        # the model's children at their own places).
        self.folded: tuple[FoldedLinear, ...] = tuple(
            FoldedLinear(name, lin, label) for name, lin, _ in layers[1:])

    def _check_unchanged(self) -> None:
        """Raise when this layer's or a folded member's weight or bias was written."""
        super()._check_unchanged()
        for member in self.folded:
            member._check_unchanged()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._dense(x)

    def extra_repr(self) -> str:
        acts = ", ".join(f"{s.name}:{s.activation.value}" for s in self.binding.specs)
        return f"one request for [{acts}]"


class ProtectedConv2d(_Protected):
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
        bias = None if conv.bias is None else _numpy(conv.bias)
        spec = LayerSpec(name, _numpy(convmath.weight_matrix(conv.weight.detach())), bias,
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
        y = self._product(convmath.im2col(xb, self.geometry))
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
