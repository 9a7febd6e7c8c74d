"""The errors a PyTorch user sees: each names the layer and says how to fix the call.

Every check raises before anything is sent to the daemon, so a refused input never costs a
request and never yields a half-computed output:

- `check_weight_dtype`: at `protect` time, a layer whose weight is not float32
  (`TypeError`: the kernels protect float32 products only; fix: `model.float()`).
- `check_input`: at every forward,
  - an input that is not float32 (`TypeError`; fix: `x.float()`, no autocast),
  - an input on another device than the layer's weights (`ValueError`; fix: `x.to(...)`),
  - a module in training mode (`ValueError`: safemon computes what the model computes in
    eval mode: a Dropout folded into a request is skipped; fix: `model.eval()`), or an
    input that requires a gradient while autograd is on (`ValueError`: safemon computes no
    gradients; fix: `torch.no_grad()` / `torch.inference_mode()`),
  - an input whose last dimension is not the layer's input width (`ValueError`).

  Under `torch.autocast` a float32 input is accepted and computed in float32 (where
  `nn.Linear` would have computed in the autocast dtype); `check_input` warns once per layer
  (`AutocastWarning`), since the output is then float32, not the autocast dtype.
"""

from __future__ import annotations

import warnings

import torch

__all__ = ["AutocastWarning", "check_input", "check_weight_dtype"]


class AutocastWarning(UserWarning):
    """A protected layer was called under `torch.autocast`: it computes in float32."""

_FP32_ONLY = ("safemon's kernels and their signatures protect float32 products only "
              "(fp16/bf16 products are not protected)")


def check_weight_dtype(name: str, weight: torch.Tensor) -> None:
    """Refuse a layer whose weight is not float32.

    Raises:
        TypeError: naming the layer, its dtype and the fix (`model.float()` before `protect`).
    """
    if weight.dtype != torch.float32:
        raise TypeError(
            f"safemon.torch: layer {name!r} has {weight.dtype} weights; {_FP32_ONLY}. "
            "Fix: call model.float() before protect(model, ...).")


def check_input(name: str, x: torch.Tensor, *, device: torch.device, in_features: int,
                training: bool) -> None:
    """Refuse an input the protected layer `name` cannot compute exactly.

    Args:
        name: the layer's qualified name in the model (as `named_modules` gives it).
        x: the input; its last dimension is the layer's input width (for a Conv2d, the
            channel dimension is checked by the caller before unfolding).
        device: the device of the layer's weights.
        in_features: the expected last dimension, or 0 to skip that check.
        training: the module's `training` flag.

    Raises:
        TypeError: x is not float32.
        ValueError: x on another device, the module in training mode, x requires a
            gradient while autograd is on, or a wrong last dimension.
    """
    if x.dtype != torch.float32:
        raise TypeError(
            f"safemon.torch: layer {name!r} got a {x.dtype} input; {_FP32_ONLY}. "
            "Fix: run the protected model in float32 (x.float(), no torch.autocast).")
    if x.device != device:
        raise ValueError(
            f"safemon.torch: layer {name!r} has its weights on {device} but got an input on "
            f"{x.device}. Fix: x.to({str(device)!r}), or move the model with model.to(...) "
            "before calling it.")
    if (x.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(x.device.type)
            and not torch.compiler.is_compiling()):
        warnings.warn(
            f"safemon.torch: layer {name!r} is called under torch.autocast; safemon computes "
            "it in float32 and returns float32 (unprotected layers keep the autocast dtype). "
            "A protected layer whose input comes out of an autocast layer in fp16/bf16 is "
            "refused with a TypeError.", AutocastWarning, stacklevel=4)
    if training:
        raise ValueError(
            f"safemon.torch: layer {name!r} got a call in training mode; safemon protects "
            "inference and computes the layers as in eval mode (a Dropout inside a protected "
            "group is skipped). Fix: train the unprotected model, then call model.eval() and "
            "run the protected one under torch.no_grad() or torch.inference_mode().")
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"safemon.torch: layer {name!r} got an input that requires grad with autograd "
            "on; safemon computes no gradients. Fix: run the protected model under "
            "torch.no_grad() or torch.inference_mode().")
    if in_features and (x.ndim == 0 or x.shape[-1] != in_features):
        raise ValueError(
            f"safemon.torch: layer {name!r} expects inputs of shape (..., {in_features}), "
            f"got {tuple(x.shape)}.")
