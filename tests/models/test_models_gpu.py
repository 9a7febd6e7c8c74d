"""GPU against reference: the digest word-sum kernel, the epilogue kernel (bias, relu,
gelu) and the whole forward pass are bit-exact with their NumPy references; device arrays
round-trip through a real daemon with CuPy channels and come back as the same kind on the
same device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from safemon.arrays import as_host
from safemon.config import VariantConfig
from safemon.digest import digest64
from safemon.errors import InvalidInputError
from safemon.models import Activation, Layer, epilogue, reference_forward, run_model
from tests.runtime.helpers import make_config, reference, same_bits, system

pytestmark = pytest.mark.gpu

#: GPU daemons in these tests run the device-covering self-test shapes; three stream
#: channels sharing one GPU need DTIs longer than the CPU tests' 0.2 s (as the benchmark).
GENEROUS = {"request_deadline_s": 10.0, "dti_s": 5.0, "selftest_deadline_s": 4.5,
            "ftti_s": 20.0, "heartbeat_timeout_s": 5.0, "heartbeat_interval_s": 0.1}


def _cp() -> Any:
    import cupy

    return cupy


@pytest.mark.parametrize("n", [1, 31, 1000, (1 << 20) + 3])
def test_digest_kernel_is_bit_exact_with_the_reference(n: int) -> None:
    """device_digests equals digest64 for float32 and uint32 arrays of odd sizes."""
    from safemon.kernels.model_gpu import device_digests

    cp = _cp()
    rng = np.random.default_rng(n)
    f = rng.standard_normal(n).astype(np.float32)
    u = rng.integers(0, 2**32, n, dtype=np.uint32)
    assert device_digests([cp.asarray(f), cp.asarray(u)]) == [digest64(f), digest64(u)]


@pytest.mark.parametrize("n", [1, 31, 1000, (1 << 20) + 3])
def test_copy_digest_copies_digests_and_counts_non_finite_words(n: int) -> None:
    """copy_digest equals digest64 of the source, copies it bit for bit, and counts its
    NaN and infinity words (the client's staging and release check, device_io)."""
    from safemon.kernels.model_gpu import copy_digest

    cp = _cp()
    rng = np.random.default_rng(n + 5)
    f = rng.standard_normal(n).astype(np.float32)
    bad = rng.choice(n, size=min(n, 7), replace=False)
    f[bad] = np.array([np.nan, np.inf, -np.inf, np.nan, np.inf, -np.nan, np.inf],
                      dtype=np.float32)[: bad.size]
    src, dst = cp.asarray(f), cp.zeros(n, dtype=cp.float32)
    assert copy_digest(src, dst) == (digest64(f), bad.size)
    assert np.array_equal(dst.get().view(np.uint32), f.view(np.uint32))
    u = rng.integers(0, 2**32, n, dtype=np.uint32)
    assert copy_digest(cp.asarray(u))[0] == digest64(u)
    with pytest.raises(ValueError, match="elements"):
        copy_digest(src, cp.zeros(n + 1, dtype=cp.float32))


def _special_values() -> np.ndarray:
    rng = np.random.default_rng(7)
    edge = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, 3e38, -3e38, 9.01, -9.01, 12.5, -12.5,
                     12.7279, 12.728, -12.7279, -12.728],  # gelu_erf: |x|/√2 = 9 (erfc = 0)
                    dtype=np.float32)
    grid = np.linspace(-14, 14, 300_001).astype(np.float32)
    return np.concatenate([edge, grid, rng.standard_normal(100_000).astype(np.float32) * 4])


def test_a_digest_batch_reads_every_entry_back_in_order_with_one_wait() -> None:
    """DigestBatch: plain digests, a digesting copy and a count-only entry, read back
    together, equal digest64 (and the non-finite counts); the copy is bit for bit; a
    full batch and an entry added after the read is queued are refused."""
    from safemon.kernels.model_gpu import DigestBatch

    cp = _cp()
    rng = np.random.default_rng(16)
    f = rng.standard_normal(777).astype(np.float32)
    f[[3, 500]] = [np.inf, np.nan]
    u = rng.integers(0, 2**32, 65, dtype=np.uint32)
    dst = cp.zeros(777, dtype=cp.float32)
    batch = DigestBatch(4)
    batch.add(cp.asarray(u))
    batch.add_copy(cp.asarray(f), dst)
    batch.add_copy(cp.asarray(u), None)
    batch.add(cp.zeros(0, dtype=cp.float32))
    with pytest.raises(ValueError, match="full"):
        batch.add(cp.asarray(u))
    batch.queue_read()
    with pytest.raises(ValueError, match="after queue_read"):
        batch.add(cp.asarray(u))
    u_bad = int(np.count_nonzero((u & 0x7F800000) == 0x7F800000))
    assert batch.values() == [(digest64(u), 0), (digest64(f), 2), (digest64(u), u_bad),
                              (digest64(np.zeros(0, np.float32)), 0)]
    assert np.array_equal(dst.get().view(np.uint32), f.view(np.uint32))
    many = [cp.asarray(rng.integers(0, 2**32, 9, dtype=np.uint32)) for _ in range(40)]
    big = DigestBatch(40)  # 80 words: more than the first page-locked buffer holds
    for arr in many:
        big.add(arr)
    assert [d for d, _ in big.values()] == [digest64(arr.get()) for arr in many]


@pytest.mark.parametrize("act", list(Activation))
@pytest.mark.parametrize("with_bias", [False, True])
def test_epilogue_kernel_is_bit_exact_with_the_reference(act: Activation, with_bias: bool) -> None:
    """Bias add then activation on the device gives the reference's bits, edge values
    (signed zeros, subnormals, overflowing cubes, the saturation region) included."""
    from safemon.kernels.model_gpu import launch_epilogue

    cp = _cp()
    vals = _special_values()
    n = 97
    m = vals.size // n
    c = vals[: m * n].reshape(m, n)
    bias = np.random.default_rng(1).standard_normal(n).astype(np.float32) if with_bias else None
    d = cp.asarray(c)
    launch_epilogue(d, None if bias is None else cp.asarray(bias), act)
    got = d.get()
    want = epilogue(c, bias, act)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_run_model_on_the_gpu_equals_numpy_digests_included() -> None:
    """A 3-layer model: the CuPy forward's output and its whole digest frame (output, every
    layer's ES and output) equal the NumPy backend's, and the output equals reference_forward."""
    cp = _cp()
    rng = np.random.default_rng(11)
    dims = [96, 130, 64, 40]
    ws = [rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) for i in range(3)]
    layers = [Layer(f"w{i}", rng.standard_normal(dims[i + 1]).astype(np.float32), a)
              for i, a in enumerate(("gelu", "relu", "identity"))]
    x = rng.standard_normal((33, dims[0])).astype(np.float32)
    vc = VariantConfig()
    host = run_model(layers, {f"w{i}": w for i, w in enumerate(ws)}, x, vc, "numpy")
    dev = run_model(layers, {f"w{i}": cp.asarray(w) for i, w in enumerate(ws)}, cp.asarray(x),
                    vc, "cupy")
    assert np.array_equal(dev.out.get().view(np.uint32), host.out.view(np.uint32))
    assert dev.digest_frame().tolist() == host.digest_frame().tolist()
    ref = reference_forward(ws, layers, x)
    assert np.array_equal(ref.view(np.uint32), host.out.view(np.uint32))


@pytest.mark.parametrize("variant", [VariantConfig(), VariantConfig(checksum="ones", level="M",
                                                                     mode="fma")])
def test_split_layers_and_a_corrected_weight_give_the_reference_forward(
        variant: VariantConfig) -> None:
    """Layers with a long K run split over K (64×4096×1024 and 1×…: `to_variant`'s split), on
    ECC-protected weights one of which holds a flipped bit: the pass queues every layer
    without a wait, finds the correction when it settles, and runs again; the output and
    digests equal the NumPy backend's on the clean weights."""
    from safemon.ecc import ProtectedArray

    cp = _cp()
    rng = np.random.default_rng(12)
    dims = [1024, 512, 640, 24]
    ws = [rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) for i in range(3)]
    layers = [Layer(f"w{i}", rng.standard_normal(dims[i + 1]).astype(np.float32), a)
              for i, a in enumerate(("relu", "gelu", "identity"))]
    for m in (64, 1):
        x = rng.standard_normal((m, dims[0])).astype(np.float32)
        assert variant.to_variant(m, dims[1], dims[0]).split > 1
        host = run_model(layers, {f"w{i}": w for i, w in enumerate(ws)}, x, variant, "numpy")
        protected = {f"w{i}": ProtectedArray(cp.asarray(w), name=f"w{i}")
                     for i, w in enumerate(ws)}
        protected["w1"].verified().view(cp.uint8).reshape(-1)[4001] ^= 0x10
        x_dev = cp.asarray(x)
        slot = cp.full((m, dims[-1]), np.nan, dtype=cp.float32)  # as a channel's slot
        dev = run_model(layers, protected, x_dev, variant, "cupy", out_into=slot,
                        extra_digests=[x_dev])
        assert protected["w1"].corrected_total == 1
        assert np.array_equal(dev.out.get().view(np.uint32), host.out.view(np.uint32))
        assert np.array_equal(slot.get().view(np.uint32), host.out.view(np.uint32))
        assert dev.digest_frame().tolist() == host.digest_frame().tolist()
        assert dev.extra_digests == (digest64(x),)


def test_a_non_finite_input_stops_a_pass_that_waits_once() -> None:
    """A NaN in x of a 2-layer pass: the status blocks read with the digests' read-back
    report it (InvalidInputError naming a), also with an output copy and extra digests
    queued; a clean x after it in the same thread reads its own, clean, status blocks."""
    cp = _cp()
    rng = np.random.default_rng(14)
    ws = {"w0": cp.asarray(rng.standard_normal((40, 24), dtype=np.float32)),
          "w1": cp.asarray(rng.standard_normal((24, 8), dtype=np.float32))}
    layers = [Layer("w0", None, "relu"), Layer("w1", None, "identity")]
    x = rng.standard_normal((5, 40), dtype=np.float32)
    bad = x.copy()
    bad[3, 7] = np.nan
    slot = cp.zeros((5, 8), dtype=cp.float32)
    with pytest.raises(InvalidInputError, match="finite check of a"):
        run_model(layers, ws, cp.asarray(bad), VariantConfig(), "cupy", out_into=slot,
                  extra_digests=[slot])
    x_dev = cp.asarray(x)
    ok = run_model(layers, ws, x_dev, VariantConfig(), "cupy", out_into=slot,
                   extra_digests=[x_dev])
    host = run_model(layers, {k: v.get() for k, v in ws.items()}, x, VariantConfig(), "numpy")
    assert ok.digest_frame().tolist() == host.digest_frame().tolist()
    assert ok.extra_digests == (digest64(x),)
    assert np.array_equal(slot.get().view(np.uint32), host.out.view(np.uint32))
    seen: list[bool] = []  # settle=True: the hook sees checked results, the pass is the same

    def hook(i: int, c: Any, es: Any) -> None:
        seen.append(bool(cp.isfinite(c).all()))

    settled = run_model(layers, ws, x_dev, VariantConfig(), "cupy", hook, settle=True)
    assert seen == [True, True] and settled.digest_frame().tolist() == host.digest_frame().tolist()


def test_queued_status_reads_decode_each_block_in_order() -> None:
    """Three checked launches (clean, NaN in A, NaN in B) whose status copies are queued
    together: one wait, and each report belongs to its own launch; again after a
    read_status of this thread reused the first row."""
    from safemon.kernels.catalog import make_variant
    from safemon.kernels.checked import launch_checked, queue_status_reads, read_status

    cp = _cp()
    rng = np.random.default_rng(15)
    a = rng.standard_normal((33, 50), dtype=np.float32)
    b = rng.standard_normal((50, 20), dtype=np.float32)
    a_bad, b_bad = a.copy(), b.copy()
    a_bad[1, 2] = np.inf
    b_bad[4, 5] = np.nan
    v = make_variant("ones", "I", "exact", "small")
    for _ in range(2):
        launches = [launch_checked(cp.asarray(aa), cp.asarray(bb), v)
                    for aa, bb in ((a, b), (a_bad, b), (a, b_bad)) * 2]  # > 4 rows: grows
        reads = queue_status_reads([la.status for la in launches])
        got = [(r.ok, r.a_nonfinite, r.b_nonfinite) for r in reads.reports()]
        assert got == [(True, False, False), (False, True, False), (False, False, True)] * 2
        assert not read_status(launches[1].status).ok  # row 0 again, for the next round


def test_device_arrays_are_checked_before_anything_is_sent() -> None:
    """float64, non-contiguous and wrong-device CuPy arrays are InvalidInputErrors."""
    cp = _cp()
    with pytest.raises(InvalidInputError, match="float32"):
        as_host("x", cp.zeros((2, 2), dtype=cp.float64))
    with pytest.raises(InvalidInputError, match="contiguous"):
        as_host("x", cp.zeros((4, 2), dtype=cp.float32).T)
    with pytest.raises(InvalidInputError, match="cuda:0"):
        as_host("x", cp.zeros((2, 2), dtype=cp.float32), devices={5})


@pytest.mark.parametrize("placement", ["stream", "process"])
def test_device_arrays_round_trip_through_a_cupy_daemon(tmp_path: Path, placement: str) -> None:
    """2oo3 CuPy channels: a CuPy x gives a CuPy C on the same device, bit-exact with the
    reference; a whole-model run likewise; a torch CUDA tensor (when torch is installed)
    gives a torch CUDA tensor."""
    cp = _cp()
    cfg = make_config(tmp_path, "2oo3", placement=placement,
                      transport="inproc" if placement == "stream" else "ipc",
                      extra={"backend": "cupy", "timing": GENEROUS})
    rng = np.random.default_rng(5)
    x = rng.standard_normal((80, 80)).astype(np.float32)
    w1 = rng.standard_normal((80, 80)).astype(np.float32)
    w2 = rng.standard_normal((80, 24)).astype(np.float32)
    b1 = rng.standard_normal(80).astype(np.float32)
    with system(cfg) as (_daemon, client):
        wid1, wid2 = client.register_weight(w1), client.register_weight(w2)
        got = client.matmul(cp.asarray(x), wid1, timeout=5.0)
        assert isinstance(got, cp.ndarray) and got.device.id == 0
        assert same_bits(got.get(), reference(x, w1, cfg))
        layers = [Layer(wid1, b1, "gelu"), Layer(wid2)]
        mid = client.register_model(layers)
        out = client.run(mid, cp.asarray(x), timeout=5.0)
        assert isinstance(out, cp.ndarray)
        assert same_bits(out.get(), reference_forward([w1, w2], layers, x))
        torch = pytest.importorskip("torch")
        t = client.run(mid, torch.from_numpy(x).to("cuda:0"), timeout=5.0)
        assert isinstance(t, torch.Tensor) and t.device.type == "cuda"
        assert same_bits(t.cpu().numpy(), out.get())
