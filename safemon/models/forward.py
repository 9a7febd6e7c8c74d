"""The forward pass of a registered model: the reference (`reference_forward`) and what a
channel runs (`run_model`, NumPy or CuPy), with the digests the vote compares.

Per layer i: C_i, ES_i = the channel's protected kernel on (h_i, W_i); h_{i+1} =
epilogue(C_i, b_i, act_i). The result of a whole-model request is h_L (the output), its
digest, and per layer the digests of ES_i and of h_{i+1}, so that the voter's caller can
name the first layer at which two channels diverged (`first_diverging_layer`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.config import VariantConfig
from safemon.digest import digest64
from safemon.errors import InvalidInputError, NonFiniteOperandError
from safemon.kernels.api import run_variant
from safemon.kernels.reference import reference_matmul
from safemon.models.activations import epilogue
from safemon.models.layers import Layer, validate_layers
from safemon.steps import run_steps

__all__ = [
    "LayerHook",
    "ModelResult",
    "QueuedPass",
    "device_biases",
    "first_diverging_layer",
    "queue_pass",
    "reference_forward",
    "run_model",
    "run_model_steps",
]

F32 = npt.NDArray[np.float32]


def reference_forward(weights: Sequence[F32], layers: Sequence[Layer], x: F32, *,
                      variant: VariantConfig | None = None) -> F32:
    """The output the channels release for `layers` on `x`, bit for bit (NumPy).

    Args:
        weights: weights[i] is layer i's (K_i, N_i) float32 weight.
        layers: the model (`layers[i].weight_id` is not looked at here).
        x: (M, K_0) float32, finite.
        variant: the channels' kernel variant (C depends only on its arithmetic mode);
            None = the default channel variant.

    Raises:
        InvalidInputError: mismatched shapes (naming the layer), non-float32 arrays.
    """
    if len(weights) != len(layers):
        raise InvalidInputError(f"{len(weights)} weights for {len(layers)} layers")
    validate_layers(layers, {ly.weight_id: tuple(w.shape) for ly, w in zip(layers, weights,
                                                                            strict=True)}
                    if len({ly.weight_id for ly in layers}) == len(layers) else
                    _shapes_by_index(weights, layers))
    vc = variant or VariantConfig()
    h = np.ascontiguousarray(x, dtype=np.float32)
    if h.ndim != 2 or h.shape[1] != weights[0].shape[0]:
        raise InvalidInputError(f"x must be (M, {weights[0].shape[0]}), got {h.shape}")
    for w, layer in zip(weights, layers, strict=True):
        c, _es = reference_matmul(h, np.ascontiguousarray(w),
                                  vc.to_variant(h.shape[0], w.shape[1], h.shape[1]))
        h = epilogue(c, layer.bias, layer.act)
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
        es_digests: per layer, the digest of that layer's ES array.
        h_digests: per layer, the digest of that layer's output h_{i+1}.
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


def device_biases(layers: Sequence[Layer]) -> list[Any]:
    """Every layer's bias on the current device (None where a layer has none), uploaded as
    one float32 array and sliced: one host-to-device copy per pass instead of one per layer
    (each cost about 30 µs of host time on the H100 host)."""
    from safemon.kernels.compiler import import_cupy

    cp = import_cupy()
    host = [ly.bias for ly in layers if ly.bias is not None]  # 1-D float32 (Layer checks)
    if not host:
        return [None] * len(layers)
    flat = cp.asarray(np.concatenate(host))
    out: list[Any] = []
    at = 0
    for ly in layers:
        if ly.bias is None:
            out.append(None)
        else:
            out.append(flat[at:at + ly.bias.size])
            at += ly.bias.size
    return out


#: Called after each layer's product with (layer index, C, ES) before the epilogue, on
#: the backend's arrays; may modify them in place (the channel's fault injection).
LayerHook = Callable[[int, Any, Any], None]


def run_model(layers: Sequence[Layer], weights: Mapping[str, Any], x: Any,
              variant: VariantConfig, backend: str, hook: LayerHook | None = None, *,
              out_into: Any = None, extra_digests: Sequence[Any] = (),
              settle: bool = False) -> ModelResult:
    """`run_model_steps` run to its end: the whole forward pass, waited for. Same
    arguments, result and errors."""
    return run_steps(run_model_steps(layers, weights, x, variant, backend, hook,
                                     out_into=out_into, extra_digests=extra_digests,
                                     settle=settle))


def run_model_steps(layers: Sequence[Layer], weights: Mapping[str, Any], x: Any,
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
        want = (int(x.shape[0]), int(weights[layers[-1].weight_id].shape[1]))
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
    for i, layer in enumerate(layers):
        w = weights[layer.weight_id]
        with _naming_layer(i):
            res = run_variant(np.ascontiguousarray(h), w,
                              variant.to_variant(*_shape(h, w)), "numpy")
        if hook is not None:
            hook(i, res.c, res.es)
        h = epilogue(res.c, layer.bias, layer.act)
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
    pending: list[Any]
    layers: int
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
        for i, res in enumerate(self.pending):
            with _naming_layer(i):
                settled = res.wait(next(reports) if res.pending else None)
            if settled.c is not res.c:
                return None
        ours = sums[:2 * self.layers]
        return ModelResult(self.out, ours[-1], tuple(ours[0::2]), tuple(ours[1::2]),
                           tuple(sums[i] for i in self.extra_at))


def queue_pass(layers: Sequence[Layer], weights: Mapping[str, Any], x: Any,
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
    from safemon.kernels.model_gpu import DigestBatch, launch_epilogue

    h = x
    kept: list[Any] = []  # per layer ES and output, digested after the last layer
    pending = []
    for i, layer in enumerate(layers):
        w = weights[layer.weight_id]
        res = run_variant(h, w, variant.to_variant(*_shape(h, w)), "cupy", wait=settle)
        pending.append(res)
        if hook is not None:
            hook(i, res.c, res.es)
        launch_epilogue(res.c, dev_biases[i], layer.act)
        kept += [res.es, res.c]
        h = res.c
    batch = DigestBatch(len(kept) + 1 + len(extra_digests))
    for a in kept:
        batch.add(a)
    if out_into is not None:
        batch.add_copy(h, out_into)
    extra_at = [batch.add(a) for a in extra_digests]
    batch.queue_read()
    reads = queue_status_reads([res.status for res in pending if res.pending])
    return QueuedPass(h, pending, len(layers), batch, reads, extra_at)


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
