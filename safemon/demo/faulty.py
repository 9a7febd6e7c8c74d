"""The fault schedule of the demo, and the app run *without* safemon under the same faults.

The faults are the channel fault model of `safemon.channels.faults` (the one `Client.inject`
arms in a channel), applied here in-process to an unprotected app that computes on one
device with the same kernel:

- ``bitflip-c`` (transient): the next first-layer product gets an exponent bit of element
  0 flipped.
- ``stuck`` (permanent until cleared): bit 30 of every element of every later first-layer
  product is forced.

Both data faults hit only the fc1 product, as in a channel that runs a batch as a
whole-model request (it applies injected data faults to layer 0's product), so that the
protected and the unprotected run see the same faults.
- ``crash``: the device's process dies; the batch in flight gets no output, then the app
  restarts it (the fault is gone, like a restarted channel).
- ``hang``: the device stops answering; every batch until the fault is cleared waits for
  the app's timeout and gets no output. (Modelled without sleeping: the outcome, no output,
  is what matters for accuracy.)

A sample without output counts as wrong (prediction -1).

Sans-IO: nothing here touches a socket or a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from safemon.channels.faults import FaultState
from safemon.demo.app import F32, I64, LAYERS, DigitsMLP, MatmulFn
from safemon.errors import InvalidInputError
from safemon.kernels.catalog import Variant
from safemon.kernels.reference import reference_matmul

__all__ = [
    "DEMO_FAULTS",
    "DeviceLost",
    "FaultStep",
    "UnprotectedDevice",
    "UnprotectedResult",
    "flip_victim",
    "kernel_matmul",
    "order_for_flip",
    "plan_faults",
    "run_unprotected",
]

#: The faults the demo injects, in schedule order.
DEMO_FAULTS: Final[tuple[str, ...]] = ("bitflip-c", "stuck", "crash", "hang")
#: The fewest batches that leave every fault its own batches (inject, effect, clear).
MIN_BATCHES: Final = 10

VariantFor = Callable[[int, int, int], Variant]


@dataclass(frozen=True)
class FaultStep:
    """Inject `kind` just before batch `batch` and clear every fault just before
    `clear_batch` (None: the fault ends by itself — a transient, or a crash followed by a
    restart)."""

    kind: str
    batch: int
    clear_batch: int | None


def plan_faults(n_batches: int, flip_batch: int | None = None) -> tuple[FaultStep, ...]:
    """The demo's schedule over `n_batches` batches: each fault in its own stretch.

    Args:
        n_batches: ≥ MIN_BATCHES.
        flip_batch: the batch of the transient flip; None = at 10 %. Must fall before the
            stuck fault.

    Raises:
        InvalidInputError: too few batches, or `flip_batch` outside its stretch.
    """
    if n_batches < MIN_BATCHES:
        raise InvalidInputError(f"the demo needs at least {MIN_BATCHES} batches, got {n_batches}")

    def at(frac: float) -> int:
        return max(1, round(n_batches * frac))

    stuck, stuck_end = at(0.25), at(0.4)
    crash = at(0.55)
    hang, hang_end = at(0.7), at(0.85)
    flip = at(0.1) if flip_batch is None else flip_batch
    if not 0 <= flip < stuck:
        raise InvalidInputError(f"flip_batch must be in [0, {stuck}), got {flip}")
    return (
        # The flipped element is the first sample's first hidden unit (see `flip_victim`).
        FaultStep("bitflip-c", flip, None),
        FaultStep("stuck", stuck, stuck_end),
        FaultStep("crash", crash, None),
        FaultStep("hang", hang, hang_end),
    )


class DeviceLost(RuntimeError):
    """The unprotected device produced no output (crashed or hung)."""


class UnprotectedDevice:
    """One compute device without safemon: safemon's kernel (NumPy reference, bit-identical
    to a healthy channel) plus the channel fault model, in this process.

    Args:
        model: supplies the weights by layer name.
        variant_for: (M, N, K) → the kernel variant (a channel's `VariantConfig.to_variant`).
    """

    def __init__(self, model: DigitsMLP, variant_for: VariantFor) -> None:
        self._model = model
        self._variant_for = variant_for
        self._faults = FaultState()
        self._crash = False
        self._hang = False

    def inject(self, kind: str) -> None:
        """Arm `kind` (one of `DEMO_FAULTS`). Raises InvalidInputError for others."""
        if kind == "crash":
            self._crash = True
        elif kind == "hang":
            self._hang = True
        elif kind in ("bitflip-c", "stuck"):
            self._faults.inject(kind)
        else:
            raise InvalidInputError(f"unknown demo fault {kind!r}; known: {', '.join(DEMO_FAULTS)}")

    def clear(self) -> None:
        """Remove every fault (an operator fixed the device)."""
        self._faults.clear()
        self._crash = self._hang = False

    def matmul(self, x: F32, weight_id: str) -> F32:
        """x · W with the armed faults applied. Raises DeviceLost for crash/hang."""
        if self._crash:
            self._crash = False
            self._faults.clear()  # the process restarts: nothing of the old one survives
            raise DeviceLost("crashed")
        if self._hang:
            raise DeviceLost("hung (the app's timeout expired)")
        w = self._model.weights[weight_id]
        # Straight to the reference kernel: an unprotected app does not reject the inf/NaN
        # an earlier corrupted layer produced, it computes on with them.
        with np.errstate(all="ignore"):
            c, _ = reference_matmul(x, w, self._variant_for(x.shape[0], w.shape[1], x.shape[1]))
        if weight_id == LAYERS[0]:  # data faults hit the first layer only (module docstring)
            self._faults.apply(c, np.empty(0, dtype=np.uint32))
        return c


@dataclass(frozen=True)
class UnprotectedResult:
    """predictions (n,) int64 with -1 where no output came; lost_batches: their indices."""

    predictions: I64
    lost_batches: tuple[int, ...]
    accuracy: float


def _apply_schedule(device: UnprotectedDevice, plan: Sequence[FaultStep], b: int) -> None:
    for step in plan:
        if step.clear_batch == b:
            device.clear()
    for step in plan:
        if step.batch == b:
            device.inject(step.kind)


def run_unprotected(
    model: DigitsMLP,
    x: F32,
    y: I64,
    batches: Sequence[slice],
    plan: Sequence[FaultStep],
    variant_for: VariantFor,
) -> UnprotectedResult:
    """The app on the test set, on one unprotected device, under the fault schedule."""
    device = UnprotectedDevice(model, variant_for)
    pred = np.full(len(y), -1, dtype=np.int64)
    lost: list[int] = []
    for b, sl in enumerate(batches):
        _apply_schedule(device, plan, b)
        try:
            pred[sl] = model.predict(x[sl], device.matmul)
        except DeviceLost:
            lost.append(b)
    return UnprotectedResult(pred, tuple(lost), float(np.mean(pred == y)))


def flip_victim(model: DigitsMLP, x: F32, y: I64, variant_for: VariantFor) -> int | None:
    """The first sample that the app classifies correctly but, alone in a batch, gets wrong
    when the transient flip hits its first hidden unit (element 0 of the "fc1" product, the
    batch's first product); None if no sample does. Putting it first in the flip's batch
    makes the flip provably change a prediction in the unprotected run (the flip always hits
    element 0), and so also the output of a channel that computes the batch as a
    whole-model request: its flip is not masked by the ReLU, and the vote sees it."""
    plain = UnprotectedDevice(model, variant_for)
    for i in range(len(y)):
        xi = x[i : i + 1]
        if model.predict(xi, plain.matmul)[0] != y[i]:
            continue
        dev = UnprotectedDevice(model, variant_for)
        dev.inject("bitflip-c")
        if model.predict(xi, dev.matmul)[0] != y[i]:
            return i
    return None


def order_for_flip(
    model: DigitsMLP,
    x: F32,
    y: I64,
    batches: Sequence[slice],
    flip_batch: int,
    variant_for: VariantFor,
) -> npt.NDArray[np.intp]:
    """A sample order (indices into x, y) that puts `flip_victim` first in `flip_batch`
    (a swap of two samples; the identity when there is no victim)."""
    order = np.arange(len(y))
    victim = flip_victim(model, x, y, variant_for)
    if victim is not None:
        first = batches[flip_batch].start
        order[first], order[victim] = victim, first
    return order


def kernel_matmul(model: DigitsMLP, variant_for: VariantFor, backend: str = "numpy") -> MatmulFn:
    """In-process safemon kernel without faults or voting (the clean run and its latency)."""
    from safemon.kernels.api import run_variant

    def mm(x: F32, weight_id: str) -> F32:
        w = model.weights[weight_id]
        res = run_variant(x, w, variant_for(x.shape[0], w.shape[1], x.shape[1]), backend=backend)
        c: Any = res.c
        return c if isinstance(c, np.ndarray) else np.asarray(c.get(), dtype=np.float32)

    return mm
