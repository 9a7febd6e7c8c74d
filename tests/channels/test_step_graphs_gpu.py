"""Captured device steps on a GPU (`safemon.channels.step_graphs`): the sequence a channel
queues for a device-resident product (copy and digest x, the ECC-checked product, copy
and digest C, digest ES, the read-backs), recorded once as a CUDA graph and launched again
and again on new inputs, gives the bits and digests the sequence queued by hand gives;
other allocations between launches do not disturb it; an ECC error in the weight is still
caught and corrected (by hand, outside the graph)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from safemon.channels.step_graphs import StepGraphs
from safemon.config import VariantConfig
from safemon.digest import digest64
from safemon.ecc import ProtectedArray
from safemon.kernels.api import run_variant
from safemon.kernels.reference import reference_matmul

pytestmark = pytest.mark.gpu


def _queue(cp: Any, xin: Any, out: Any, weight: Any, variant: Any) -> Any:
    """What `ChannelWorker._device_product` queues (the same calls, in the same order)."""
    from safemon.kernels.checked import queue_status_reads
    from safemon.kernels.model_gpu import DigestBatch

    def queue() -> tuple[Any, Any, Any]:
        x = cp.empty(xin.shape, dtype=np.float32)
        batch = DigestBatch(3)
        batch.add_copy(xin, x)
        pending = run_variant(x, weight, variant, "cupy", wait=False)
        batch.add_copy(pending.c, out)
        batch.add(pending.es)
        batch.queue_read()
        return batch, pending, queue_status_reads([pending.status])
    return queue


def _finish(handles: tuple[Any, Any, Any]) -> tuple[list[int], Any]:
    batch, pending, reads = handles
    digests = [d for d, _ in batch.values()]
    result = pending.wait(reads.reports()[0])
    return digests, result


# (M, K, N); (256, 256, 2048) runs `large`, whose graph holds the transpose of A as well.
@pytest.mark.parametrize("shape", [(80, 80, 80), (64, 1024, 512), (1, 4096, 256),
                                   (37, 91, 53), (256, 256, 2048)])
def test_a_launched_graph_gives_the_bits_of_the_hand_queued_step(shape: tuple[int, int, int]
                                                                 ) -> None:
    import cupy as cp

    m, k, n = shape
    rng = np.random.default_rng(m * 7 + k)
    w = rng.standard_normal((k, n)).astype(np.float32)
    variant = VariantConfig().to_variant(m, n, k)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        weight = ProtectedArray.from_host(w, name="w", backend="cupy")
        xin = cp.empty((m, k), dtype=np.float32)
        out = cp.empty((m, n), dtype=np.float32)
        graphs = StepGraphs(capacity=2)
        queue = _queue(cp, xin, out, weight, variant)
        step = graphs.capture("k", stream, queue, keep=(weight,))
        for i in range(6):
            x = rng.standard_normal((m, k)).astype(np.float32) * np.float32(i + 1)
            xin.set(x, stream=stream)
            junk = [cp.full((1 << (10 + j),), 7.0, dtype=cp.float32) for j in range(4)]
            digests, result = _finish(step.launch(stream))
            del junk
            c_ref, es_ref = reference_matmul(x, w, variant)
            got = out.get(stream=stream)
            assert np.array_equal(got.view(np.uint32), c_ref.view(np.uint32)), i
            assert np.array_equal(result.es.get().view(np.uint32), es_ref), i
            assert digests == [digest64(x), digest64(c_ref), digest64(es_ref)], i
            # the same step queued by hand, same inputs: the same digests
            hand, _ = _finish(queue())
            assert hand == digests
        assert len(graphs) == 1 and graphs.captured == 1


def test_an_ecc_error_in_the_weight_is_caught_between_launches() -> None:
    """A bit flipped in the protected weight's device words after the capture: the launched
    graph's ECC check reports it, `wait` corrects the weight and recomputes by hand, and
    the result is the clean product; the next launch runs on the corrected weight."""
    import cupy as cp

    m, k, n = 64, 256, 128
    rng = np.random.default_rng(5)
    w = rng.standard_normal((k, n)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    variant = VariantConfig().to_variant(m, n, k)
    c_ref, _ = reference_matmul(x, w, variant)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        weight = ProtectedArray.from_host(w, name="w", backend="cupy")
        xin = cp.asarray(x)
        out = cp.empty((m, n), dtype=np.float32)
        step = StepGraphs().capture("k", stream, _queue(cp, xin, out, weight, variant),
                                    keep=(weight,))
        _finish(step.launch(stream))
        data, _check = weight.storage
        data.view(cp.uint32)[3, 5] ^= np.uint32(1 << 12)  # one flipped bit: correctable
        stream.synchronize()
        _digests, result = _finish(step.launch(stream))
        assert result.c is not step.outputs[1].c  # recomputed by hand on the corrected weight
        assert np.array_equal(result.c.get().view(np.uint32), c_ref.view(np.uint32))
        assert weight.corrected_total == 1
        digests, result = _finish(step.launch(stream))
        assert result.c is step.outputs[1].c  # clean again: the graph's own C
        assert digests[1] == digest64(c_ref)


def test_a_launched_model_pass_gives_the_reference_forward() -> None:
    """A two-layer pass (`queue_pass`: products, bias, gelu, digests, the output's copy)
    recorded once and launched on new inputs: the reference forward's bits every time. A
    bit flipped in a weight after the capture makes `finish` answer None (recompute the
    pass, settled, by hand), and that pass gives the reference output."""
    import cupy as cp

    from safemon.models import Layer, reference_forward, run_model
    from safemon.models.forward import device_biases, queue_pass

    m, k, h, n = 64, 256, 128, 48
    rng = np.random.default_rng(11)
    w1 = rng.standard_normal((k, h)).astype(np.float32)
    w2 = rng.standard_normal((h, n)).astype(np.float32)
    b1 = rng.standard_normal(h).astype(np.float32)
    layers = [Layer("w1", b1, "gelu"), Layer("w2")]
    variant = VariantConfig()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        weights = {"w1": ProtectedArray.from_host(w1, name="w1", backend="cupy"),
                   "w2": ProtectedArray.from_host(w2, name="w2", backend="cupy")}
        xin = cp.empty((m, k), dtype=np.float32)
        out = cp.empty((m, n), dtype=np.float32)
        dev_b = device_biases(layers)
        step = StepGraphs().capture(
            "m", stream, lambda: queue_pass(layers, weights, xin, variant, dev_b,
                                            out_into=out, extra_digests=[xin]),
            keep=(dev_b,))
        for i in range(4):
            x = rng.standard_normal((m, k)).astype(np.float32)
            xin.set(x, stream=stream)
            res = step.launch(stream).finish()
            want = reference_forward([w1, w2], layers, x)
            assert res is not None
            assert np.array_equal(out.get(stream=stream).view(np.uint32), want.view(np.uint32)), i
            assert res.out_digest == digest64(want) and res.extra_digests == (digest64(x),)
        data, _check = weights["w1"].storage
        data.view(cp.uint32)[1, 2] ^= np.uint32(1 << 7)
        stream.synchronize()
        assert step.launch(stream).finish() is None
        again = run_model(layers, weights, xin, variant, "cupy", out_into=out, settle=True)
        assert np.array_equal(again.out.get().view(np.uint32), want.view(np.uint32))
        assert weights["w1"].corrected_total == 1
