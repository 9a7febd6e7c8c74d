"""The `safemon::forward` operators: what a protected layer looks like to PyTorch.

    y = torch.ops.safemon.forward(x, key, out_features)   # x (M, K) float32 -> (M, out_features)
    y = torch.ops.safemon.forward_shaped(x, key, out_shape)   # x (..., K) -> out_shape

`forward_shaped` is for a run whose safemon steps depend on the input's shape (an encoder
layer's sequence length, the widths of folded reshapes): its runner takes x in its own
shape and picks (or registers) the model for it, inside the operator, where tracing does
not look.

Each is registered with `torch.library.custom_op`, so `torch.compile`, `torch.export` and
`make_fx` keep it as one opaque node instead of tracing into ZeroMQ, and with a fake
(meta) implementation that gives the output's shape, dtype and device without computing
anything. `key` names a runner (`register_runner`): the callable that sends the product to
the safemon daemon. The operator has no autograd formula: a protected model is for
inference (`checks.check_input` refuses inputs that need a gradient before they get here).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable

import torch

__all__ = ["Runner", "forward", "forward_shaped", "register_runner", "runner_for"]

#: A runner: (M, K) contiguous float32 tensor → new (M, N) float32 tensor on the same device
#: (for `forward_shaped`: a contiguous tensor of any shape → one of the shape asked for).
Runner = Callable[[torch.Tensor], torch.Tensor]

_lock = threading.Lock()
_counter = itertools.count()
# Weak: a runner lives as long as the module that owns it, not as long as this table.
_runners: weakref.WeakValueDictionary[str, Runner] = weakref.WeakValueDictionary()


def register_runner(runner: Runner, label: str) -> str:
    """Make `runner` reachable from the operator; returns its key (`label` plus a number).

    The table holds `runner` weakly: the caller keeps it alive (a protected module does)."""
    with _lock:
        key = f"{label}#{next(_counter)}"
        _runners[key] = runner
    return key


def runner_for(key: str) -> Runner:
    """The runner registered under `key`.

    Raises:
        KeyError: no live runner has that key (its module was deleted).
    """
    runner = _runners.get(key)
    if runner is None:
        raise KeyError(f"safemon.torch: no protected layer with key {key!r} is alive")
    return runner


@torch.library.custom_op("safemon::forward", mutates_args=())
def forward(x: torch.Tensor, key: str, out_features: int) -> torch.Tensor:
    """The protected product(s) of the runner `key` on `x` ((M, K) float32, contiguous);
    returns a new (M, out_features) float32 tensor on x's device."""
    out = runner_for(key)(x)
    if out.shape != (x.shape[0], out_features) or out.dtype != torch.float32:
        raise RuntimeError(f"safemon.torch: runner {key!r} returned {out.dtype} "
                           f"{tuple(out.shape)}, expected float32 {(x.shape[0], out_features)}")
    return out


@forward.register_fake
def _forward_fake(x: torch.Tensor, key: str, out_features: int) -> torch.Tensor:
    return x.new_empty((x.shape[0], out_features))


@torch.library.custom_op("safemon::forward_shaped", mutates_args=())
def forward_shaped(x: torch.Tensor, key: str, out_shape: list[int]) -> torch.Tensor:
    """The protected run of the runner `key` on `x` (contiguous float32, in the run's input
    shape); returns a new float32 tensor of `out_shape` on x's device."""
    out = runner_for(key)(x)
    if tuple(out.shape) != tuple(out_shape) or out.dtype != torch.float32:
        raise RuntimeError(f"safemon.torch: runner {key!r} returned {out.dtype} "
                           f"{tuple(out.shape)}, expected float32 {tuple(out_shape)}")
    return out


@forward_shaped.register_fake
def _forward_shaped_fake(x: torch.Tensor, key: str, out_shape: list[int]) -> torch.Tensor:
    return x.new_empty(out_shape)
