"""safemon for PyTorch models: protect a model's Linear, Conv2d and TransformerEncoderLayer
layers in a few lines.

    import safemon, safemon.torch
    client = safemon.Client("configs/hft2.yaml")
    model = safemon.torch.protect(model.eval(), client=client)   # prints what it protected
    with torch.inference_mode():
        y = model(x)                                             # voted products

Needs the optional extra: `pip install 'safemon[torch]'`. See docs/TORCH.md for what is
and is not protected, the errors, grouping into whole-model requests and `torch.compile`.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401  (the import that fails without the extra)
except ImportError as exc:  # pragma: no cover - exercised only where torch is absent
    raise ImportError(
        "safemon.torch needs PyTorch: pip install 'safemon[torch]' (or install torch "
        f"yourself first); importing torch failed: {exc}") from exc

from safemon.torch.binding import ChainBinding, LayerSpec
from safemon.torch.checks import AutocastWarning
from safemon.torch.modules import (
    FoldedEncoderLayer,
    FoldedLinear,
    ProtectedConv2d,
    ProtectedEncoderLayer,
    ProtectedLinear,
    ProtectedSequence,
)
from safemon.torch.protect import Group, plan, protect, report_of
from safemon.torch.report import NOT_MODULES, Entry, ProtectionReport, Status

__all__ = [
    "NOT_MODULES",
    "AutocastWarning",
    "ChainBinding",
    "Entry",
    "FoldedEncoderLayer",
    "FoldedLinear",
    "Group",
    "LayerSpec",
    "ProtectedConv2d",
    "ProtectedEncoderLayer",
    "ProtectedLinear",
    "ProtectedSequence",
    "ProtectionReport",
    "Status",
    "plan",
    "protect",
    "report_of",
]
