"""The forward pass of a registered model: the reference (`reference_forward`) and what a
channel runs (`run_model`, NumPy or CuPy), with the digests the vote compares.

Per product layer i: C_i, ES_i = the channel's protected kernel on (h_i, W_i); h_{i+1} =
epilogue(C_i, b_i, act_i). Any other step i computes h_{i+1} from h_i as
`safemon.models.ops` defines (on CuPy with `cuda/ops.cu`), and its ES is empty. The result
of a whole-model request is h_L (the output), its digest, and per step the digests of ES_i
and of h_{i+1}, so that the voter's caller can name the first step at which two channels
diverged (`first_diverging_layer`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.config import VariantConfig
from safemon.digest import digest64
from safemon.errors import InvalidInputError, NonFiniteOperandError
from safemon.kernels.api import run_variant
from safemon.kernels.reference import reference_matmul
from safemon.models.activations import epilogue
from safemon.models.layers import Layer, Step, step_params, validate_layers
from safemon.models.ops import (
    Attention,
    LayerNorm,
    Reshape,
    SaveResidual,
    op_reference,
)
from safemon.steps import run_steps

__all__ = [
    "EMPTY_DIGEST",
    "LayerHook",
    "ModelResult",
    "QueuedPass",
    "activation_widths",
    "device_biases",
    "first_diverging_layer",
    "output_columns",
    "queue_pass",
    "reference_forward",
    "run_model",
    "run_model_steps",
]

F32 = npt.NDArray[np.float32]

#: The ES digest of a step that is not a product: the digest of an empty array.
EMPTY_DIGEST = digest64(np.zeros((0,), dtype=np.float32))


def reference_forward(weights: Sequence[F32], layers: Sequence[Step], x: F32, *,
                      variant: VariantConfig | None = None) -> F32:
    """The output the channels release for the steps `layers` on `x`, bit for bit (NumPy).

    Args:
        weights: weights[i] is the (K, N) float32 weight of the i-th product layer among
            `layers` (one per `Layer`, in order; the other steps take none).
        layers: the model (`Layer.weight_id` is not looked at here).
        x: (M, K_0) float32, finite.
        variant: the channels' kernel variant (C depends only on its arithmetic mode);
            None = the default channel variant.

    Raises:
        InvalidInputError: mismatched shapes or rows (naming the step), a weight count
            that is not the layer count, non-float32 arrays.
    """
    products = [step for step in layers if isinstance(step, Layer)]
    if len(weights) != len(products):
        raise InvalidInputError(f"{len(weights)} weights for {len(products)} layers")
    by_id = (_shapes_by_index(weights, products)
             if len({ly.weight_id for ly in products}) < len(products) else
             {ly.weight_id: tuple(w.shape) for ly, w in zip(products, weights, strict=True)})
    shape = validate_layers(layers, by_id)
    vc = variant or VariantConfig()
    h = np.ascontiguousarray(x, dtype=np.float32)
    if h.ndim != 2 or h.shape[1] != shape.k_in:
        raise InvalidInputError(f"x must be (M, {shape.k_in}), got {h.shape}")
    shape.check_rows(int(h.shape[0]))
    ws = iter(weights)
    stack: list[F32] = []
    for step in layers:
        if isinstance(step, Layer):
            w = np.ascontiguousarray(next(ws))
            c, _es = reference_matmul(h, w, vc.to_variant(h.shape[0], w.shape[1], h.shape[1]))
            h = epilogue(c, step.bias, step.act)
        else:
            h = op_reference(step, h, stack)
    return h


def _shapes_by_index(weights: Sequence[F32], layers: Sequence[Layer]
                     ) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for ly, w in zip(layers, weights, strict=True):
        if shapes.setdefault(ly.weight_id, tuple(w.shape)) != tuple(w.shape):
            raise InvalidInputError(f"weight id {ly.weight_id!r} given two shapes")
    return shapes


@dataclass(frozen=True)
class ModelResult:
    """What one channel computed for a whole-model request.

    Attributes:
        out: the (M, N_L) float32 output (NumPy or CuPy, the backend's device).
        out_digest: safemon-digest64 of `out`.
        es_digests: per step, the digest of its ES array (of an empty array for a step
            that is not a product: `EMPTY_DIGEST`).
        h_digests: per step, the digest of its output h_{i+1}.
        extra_digests: the digests of `run_model`'s `extra_digests`, in order.
    """

    out: Any
    out_digest: int
    es_digests: tuple[int, ...]
    h_digests: tuple[int, ...]
    extra_digests: tuple[int, ...] = ()

    def digest_frame(self) -> npt.NDArray[np.uint64]:
        """[out, es_0, h_0, es_1, h_1, ...] as uint64: what the channel sends to be voted."""
        words = [self.out_digest]
        for e, h in zip(self.es_digests, self.h_digests, strict=True):
            words += [e, h]
        return np.array(words, dtype=np.uint64)


def device_biases(layers: Sequence[Step]) -> list[Any]:
    """Every step's parameters on the current device: a layer's bias (None where it has
    none), a layer norm's (weight, bias) pair, None for the other steps. Uploaded as one
    float32 array and sliced: one host-to-device copy per pass instead of one per layer
    (each cost about 30 µs of host time on the H100 host)."""
    from safemon.kernels.compiler import import_cupy

    cp = import_cupy()
    host = [a for step in layers for a in step_params(step)]
    if not host:
        return [None] * len(layers)
    flat = cp.asarray(np.concatenate(host))
    out: list[Any] = []
    at = 0
    for step in layers:
        parts = []
        for a in step_params(step):
            parts.append(flat[at:at + a.size])
            at += a.size
        out.append(tuple(parts) if isinstance(step, LayerNorm) else
                   parts[0] if parts else None)
    return out


def output_columns(layers: Sequence[Step], weights: Mapping[str, Any]) -> int:
    """The columns of the model's output (its rows are the input's), from the last step
    that sets the width; `weights` maps the layers' ids to arrays with a `shape`."""
    for i in range(len(layers) - 1, -1, -1):
        step = layers[i]
        if isinstance(step, Layer):
            return int(weights[step.weight_id].shape[1])
        if isinstance(step, (Reshape, LayerNorm)):
            return step.width
        if isinstance(step, Attention):
            return output_columns(layers[:i], weights) // 3
    raise InvalidInputError("a model without a product layer")


def activation_widths(layers: Sequence[Step], weights: Mapping[str, Any]) -> list[int]:
    """Per step, the float32 elements of its output per input row (its columns times its
    rows over the input's; a reshape changes the rows, not the elements): what a step
    graph's size rule (`safemon.channels.step_graphs.worth_a_graph`) adds up."""
    widths: list[int] = []
    elements: int | Fraction = 0  # a Fraction only where rows were merged below the input's
    for step in layers:
        if isinstance(step, Layer):
            w = weights[step.weight_id]
            k, n = int(w.shape[0]), int(w.shape[1])
            rows = (1 if not elements else elements // k if elements % k == 0
                    else Fraction(elements, k))
            elements = rows * n
        elif isinstance(step, Attention) and elements:
            elements = Fraction(elements, 3) if elements % 3 else elements // 3
        elif isinstance(step, LayerNorm) and not elements:
            elements = step.width
        widths.append(math.ceil(elements))
    return widths


#: Called after each layer's product with (the product's ordinal among the model's
#: product layers: 0 for the first, C, ES) before the epilogue, on the backend's arrays;
#: may modify them in place (the channel's fault injection).
LayerHook = Callable[[int, Any, Any], None]


def run_model(layers: Sequence[Step], weights: Mapping[str, Any], x: Any,
              variant: VariantConfig, backend: str, hook: LayerHook | None = None, *,
              out_into: Any = None, extra_digests: Sequence[Any] = (),
              settle: bool = False) -> ModelResult:
    """`run_model_steps` run to its end: the whole forward pass, waited for. Same
    arguments, result and errors."""
    return run_steps(run_model_steps(layers, weights, x, variant, backend, hook,
                                     out_into=out_into, extra_digests=extra_digests,
                                     settle=settle))


def run_model_steps(layers: Sequence[Step], weights: Mapping[str, Any], x: Any,
                    variant: VariantConfig, backend: str, hook: LayerHook | None = None, *,
                    out_into: Any = None, extra_digests: Sequence[Any] = (),
                    settle: bool = False) -> Generator[None, None, ModelResult]:
    """A generator that runs the whole forward pass and returns its `ModelResult`.

    On CuPy it yields once, after everything of the pass is queued and before its one wait,
    so that a caller driving several channels on one thread (`safemon.channels.inline`) can
    queue every channel's pass before waiting on any. Whoever resumes it must make the same
    CuPy stream current again (a recomputation after an ECC correction is queued there).
    On NumPy it does not yield.

    Run the whole forward pass on this channel's backend ("numpy" or "cupy"; for CuPy
    on the current device and stream, `x` and the weights already there or uploaded by
    the kernel's checks). `weights` maps ids to resident weights (arrays or ECC-protected).

    On CuPy the pass waits once: every layer, the digests (one `DigestBatch`), the copy of
    the output into `out_into` and the copies of the status blocks are queued, and the
    read-back waits for all of it. A pass whose ECC-protected weight had to be corrected
    runs again, waiting once per layer.

    Args:
        hook: called per layer with its C and ES before the epilogue (fault injection).
        out_into: an array of the output's (M, N_L) shape, the backend's kind, that
            receives a copy of the output: a channel's slot in the client's buffer. On CuPy
            the copy is a kernel queued after the layers. Its contents are unspecified
            when the pass raises.
        extra_digests: arrays (4-byte elements) whose digests join the pass's read-back,
            in `ModelResult.extra_digests` (a channel's x).
        settle: wait for each layer's checks before the next (CuPy), so that `hook` sees
            checked results (a channel with an injected fault armed).

    Raises:
        InvalidInputError, KernelCheckError, UncorrectableError: as `run_variant`;
            InvalidInputError also for an `out_into` of another shape.
    """
    if out_into is not None:
        want = (int(x.shape[0]), output_columns(layers, weights))
        if tuple(out_into.shape) != want:
            raise InvalidInputError(f"out_into must be {want}, not {tuple(out_into.shape)}")
    h = x
    es_d: list[int] = []
    h_d: list[int] = []
    if backend == "cupy":
        from safemon.kernels.compiler import import_cupy

        cp = import_cupy()
        dev_biases = device_biases(layers)
        # Every layer is queued without a wait, then the digests, the output's copy and the
        # read-backs of the digests and of the layers' status blocks: the one wait.
        for settle_each in ((True,) if settle else (False, True)):
            h = cp.ascontiguousarray(cp.asarray(x))
            queued = queue_pass(layers, weights, h, variant, dev_biases, hook,
                                out_into=out_into, extra_digests=extra_digests,
                                settle=settle_each)
            yield  # everything is queued: other channels may queue theirs before the wait
            result = queued.finish()
            if result is not None:
                return result
        raise AssertionError("a settled pass recomputed a layer")  # pragma: no cover
    stack: list[Any] = []
    products = 0
    for i, step in enumerate(layers):
        if not isinstance(step, Layer):
            h = op_reference(step, h, stack)
            es_d.append(EMPTY_DIGEST)
            h_d.append(digest64(h))
            continue
        w = weights[step.weight_id]
        with _naming_layer(i):
            res = run_variant(np.ascontiguousarray(h), w,
                              variant.to_variant(*_shape(h, w)), "numpy")
        if hook is not None:
            hook(products, res.c, res.es)
        products += 1
        h = epilogue(res.c, step.bias, step.act)
        es_d.append(digest64(res.es))
        h_d.append(digest64(h))
    if out_into is not None:
        out_into[...] = h
    return ModelResult(h, h_d[-1], tuple(es_d), tuple(h_d),
                       tuple(digest64(a) for a in extra_digests))


@contextlib.contextmanager
def _naming_layer(i: int) -> Iterator[None]:
    """Re-raise a `NonFiniteOperandError` of layer `i`'s product with the layer named: a
    non-finite input of a layer after the first is the previous layer's output, which
    overflowed float32 on the request's values (every channel finds it alike)."""
    try:
        yield
    except NonFiniteOperandError as exc:
        if exc.operand != "a":
            raise
        what = ("the request's x holds NaN or infinity" if i == 0 else
                f"the input of layer {i} (the output of layer {i - 1}) holds NaN or infinity: "
                "the request's values overflow float32")
        raise NonFiniteOperandError(f"layer {i}: {what} ({exc})", operand="a", layer=i) from None


@dataclass
class QueuedPass:
    """A CuPy forward pass queued on the current stream and not yet waited for
    (`queue_pass`). `finish` may be called once per time the pass ran: a pass recorded as a
    CUDA graph (`safemon.channels.step_graphs`) is finished after every launch."""

    out: Any
    pending: list[Any]  # per product layer, its `run_variant` result
    layers: int  # steps
    product_steps: list[int]  # the step index of each product layer
    batch: Any
    reads: Any
    extra_at: list[int]

    def finish(self) -> ModelResult | None:
        """Wait (one host synchronisation), check every layer's status and return the
        result; None when a layer had to be recomputed on its corrected ECC weight (the
        layers after it read poison: run the pass again, settling each layer).

        Raises:
            InvalidInputError, KernelCheckError, UncorrectableError: as `run_variant`.
        """
        sums = [d for d, _ in self.batch.values()]
        reports = iter(self.reads.reports())
        # Stop at the first recomputed layer: the ones after it read poison.
        for i, res in zip(self.product_steps, self.pending, strict=True):
            with _naming_layer(i):
                settled = res.wait(next(reports) if res.pending else None)
            if settled.c is not res.c:
                return None
        ours = sums[:2 * self.layers]  # per step: ES, output
        return ModelResult(self.out, ours[-1], tuple(ours[0::2]), tuple(ours[1::2]),
                           tuple(sums[i] for i in self.extra_at))


def queue_pass(layers: Sequence[Step], weights: Mapping[str, Any], x: Any,
               variant: VariantConfig, dev_biases: Sequence[Any], hook: LayerHook | None = None,
               *, out_into: Any = None, extra_digests: Sequence[Any] = (),
               settle: bool = False) -> QueuedPass:
    """Queue the whole CuPy pass on the current stream without waiting: each layer's
    checked product and epilogue, then the digests of every ES and output, the copy of the
    output into `out_into`, the digests of `extra_digests`, and the read-backs of the
    digests and of the status blocks. `x` is a C-contiguous CuPy float32 array;
    `dev_biases` is `device_biases(layers)`. With `settle`, each layer's checks are waited
    for before the next (so that `hook` sees checked results). Arguments otherwise as
    `run_model`."""
    from safemon.kernels.checked import queue_status_reads
    from safemon.kernels.compiler import import_cupy
    from safemon.kernels.model_gpu import (
        DigestBatch,
        launch_add,
        launch_attention,
        launch_epilogue,
        launch_layer_norm,
    )

    h = x
    kept: list[Any] = []  # per step ES (empty for the other steps) and output, digested last
    pending = []
    product_steps: list[int] = []
    stack: list[Any] = []
    no_es = None
    for i, step in enumerate(layers):
        if isinstance(step, Layer):
            w = weights[step.weight_id]
            res = run_variant(h, w, variant.to_variant(*_shape(h, w)), "cupy", wait=settle)
            pending.append(res)
            product_steps.append(i)
            if hook is not None:
                hook(len(product_steps) - 1, res.c, res.es)
            launch_epilogue(res.c, dev_biases[i], step.act)
            kept += [res.es, res.c]
            h = res.c
            continue
        if isinstance(step, LayerNorm):
            weight, bias = dev_biases[i]
            h = launch_layer_norm(h, weight, bias, step.eps)
        elif isinstance(step, Attention):
            h = launch_attention(h, step.heads, step.tokens, step.causal)
        elif isinstance(step, Reshape):
            h = h.reshape(-1, step.width)
        elif isinstance(step, SaveResidual):
            stack.append(h)
        else:  # AddResidual
            h = launch_add(h, stack.pop())
        if no_es is None:
            no_es = import_cupy().empty((0,), dtype=np.float32)
        kept += [no_es, h]
    batch = DigestBatch(len(kept) + 1 + len(extra_digests))
    for a in kept:
        batch.add(a)
    if out_into is not None:
        batch.add_copy(h, out_into)
    extra_at = [batch.add(a) for a in extra_digests]
    batch.queue_read()
    reads = queue_status_reads([res.status for res in pending if res.pending])
    return QueuedPass(h, pending, len(layers), product_steps, batch, reads, extra_at)


def _shape(h: Any, w: Any) -> tuple[int, int, int]:
    """(M, N, K) of the product h·w."""
    return int(h.shape[0]), int(w.shape[1]), int(h.shape[1])


def first_diverging_layer(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first layer whose ES or output digest differs between two digest frames
    (`ModelResult.digest_frame` layout); None when the per-layer digests all agree."""
    for i in range(1, min(len(a), len(b)) - 1, 2):
        if a[i] != b[i] or a[i + 1] != b[i + 1]:
            return (i - 1) // 2
    return None
