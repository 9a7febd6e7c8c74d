"""Split-K kernels and the checked launch sequence on the GPU, against the NumPy reference.

Split shapes: the inference shapes (1×4096×4096, 64×4096×4096, 256×1024×4096) with a spec set
that covers every checksum, every level and both modes, and random odd shapes with every
standard variant in both modes. Each case compares C and ES bit for bit and runs twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from safemon.kernels.catalog import Variant, auto_split, auto_tile, make_variant, standard_variants
from safemon.kernels.precompile import compile_variant
from tests.kernels.case_references import case_references

pytestmark = pytest.mark.gpu

INFERENCE = [(1, 4096, 4096), (64, 4096, 4096), (256, 1024, 4096)]  # (M, N, K)
# Every checksum (xor and fletcher through a combination), every level, both modes.
INFERENCE_SPECS = [(None, None, "exact"), (None, None, "fma"), ("ones", "I", "fma"),
                   ("ones", "M", "fma"), ("twos", "M", "exact"), ("crc32c", "E", "exact"),
                   ("xor_fletcher", "I", "exact"), ("crc32c", "I", "fma")]
ODD = [(1, 333, 2049), (3, 50, 1000), (37, 129, 777)]
EXPLICIT = [((97, 61, 1500), "large", 5), ((5, 300, 999), "wide", 7), ((130, 7, 64), "small", 3),
            ((11, 257, 1001), "skinny", 6)]


def _inputs(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 7919 + n * 104729 + k)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


def _auto(m: int, n: int, k: int, spec: tuple[Any, Any, str]) -> Variant:
    tile = auto_tile(m, n, k, spec[1])
    return make_variant(spec[0], spec[1], spec[2], tile, auto_split(m, n, k, tile))


def _cases() -> list[tuple[tuple[int, int, int], Variant]]:
    cases = [(d, _auto(*d, spec)) for d in INFERENCE for spec in INFERENCE_SPECS]
    for d in ODD:
        tile = auto_tile(*d)
        split = auto_split(*d, tile)
        for mode in ("exact", "fma"):
            cases += [(d, v) for v in standard_variants(mode, tile, split)]
            cases.append((d, make_variant(None, None, mode, tile, split)))
    for d, tile_name, split in EXPLICIT:
        for spec in [("ones", "I"), ("crc32c", "E"), ("xor_fletcher", "I")]:
            cases.append((d, make_variant(*spec, "exact", tile_name, split)))
    return cases


CASES = _cases()


def _reference(case: tuple[tuple[int, int, int], Variant]) -> tuple[bytes, bytes]:
    from safemon.kernels.reference import reference_matmul

    (m, n, k), v = case
    a, b = _inputs(m, n, k)
    c, es = reference_matmul(a, b, v)
    compile_variant(v)  # this worker also compiles the case's kernel (safemon.kernels.precompile)
    return c.tobytes(), es.tobytes()


@pytest.fixture(scope="session")
def split_references(request: pytest.FixtureRequest) -> Mapping[int, tuple[bytes, bytes]]:
    return case_references(request, CASES, "test_split_gpu_equals_reference_bit_for_bit", _reference)


def test_every_case_is_split() -> None:
    """The shapes here exercise split-K: every case launches more than one K-slice."""
    assert all(v.slices(d[2]) > 1 for d, v in CASES)


@pytest.mark.timeout(1800)  # the session fixture's references and compiles (test_gpu.py)
@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{'x'.join(map(str, d))}-{v.name}" for d, v in CASES])
def test_split_gpu_equals_reference_bit_for_bit(index: int, split_references: Mapping[int, tuple[bytes, bytes]]) -> None:
    import cupy as cp

    from safemon.kernels.gpu import gpu_matmul

    (m, n, k), v = CASES[index]
    a, b = _inputs(m, n, k)
    c_ref, es_ref = split_references[index]
    a_d, b_d = cp.asarray(a), cp.asarray(b)
    for _ in range(2):  # repeated runs give the same bits
        c, es = gpu_matmul(a_d, b_d, v)
        assert cp.asnumpy(c).tobytes() == c_ref, f"C differs for {v.name}"
        assert cp.asnumpy(es).tobytes() == es_ref, f"ES differs for {v.name}"


# ---------------------------------------------------------------- the checked sequence


def _bad(x: np.ndarray, value: float) -> np.ndarray:
    y = x.copy()
    y.ravel()[y.size // 2] = value
    return y


@pytest.mark.parametrize("operand", ["a", "b"])
def test_device_nonfinite_input_is_rejected_naming_the_operand(operand: str) -> None:
    import cupy as cp

    import safemon
    from safemon.errors import InvalidInputError

    a, b = _inputs(3, 50, 1000)
    args = {"a": a, "b": b}
    args[operand] = _bad(args[operand], np.inf)
    with pytest.raises(InvalidInputError, match=f"finite check of {operand}"):
        safemon.protected_matmul(cp.asarray(args["a"]), cp.asarray(args["b"]))
    with pytest.raises(InvalidInputError, match=f"finite check of {operand}"):
        safemon.matmul(cp.asarray(args["a"]), cp.asarray(args["b"]))


def test_pending_result_holds_poison_until_wait_raises() -> None:
    """wait=False returns at once; when the finite check fails, every tile that loaded
    the bad element holds canonical NaN in C (split and unsplit: here the whole C row of the
    bad A row) and 0xFFFFFFFF in its threads' ES, and wait() raises."""
    import cupy as cp

    import safemon
    from safemon.errors import InvalidInputError

    a, b = _inputs(64, 256, 4096)
    bad_row = (a.size // 2) // a.shape[1]
    for split in (1, 4):
        r = safemon.protected_matmul(cp.asarray(_bad(a, np.nan)), cp.asarray(b), split=split, wait=False)
        assert r.pending
        assert (cp.asnumpy(r.c)[bad_row].view(np.uint32) == 0x7FFFFFFF).all()
        assert (cp.asnumpy(r.es) == 0xFFFFFFFF).all(axis=1).any()
        with pytest.raises(InvalidInputError, match="finite check of a"):
            r.wait()


# Where a non-finite element sits: first, last, and the middle of A or B; tiles and splits
# that put it in the first, a middle or the last (partly padded) K-slice and edge tile.
FINITE_SHAPES = [((1, 4096, 4096), "skinny", None), ((37, 129, 777), "small", 5),
                 ((64, 300, 2000), "wide", None), ((130, 140, 1500), "large", 3),
                 ((256, 136, 1000), "large", None),  # `large` reads Aᵀ in 16-byte runs (M % 4 = 0)
                 ((8, 900, 8), "skinny", 1)]


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("operand", ["a", "b"])
@pytest.mark.parametrize("shape", FINITE_SHAPES, ids=lambda s: f"{'x'.join(map(str, s[0]))}-{s[1]}")
def test_finite_check_finds_every_position(
    shape: tuple[tuple[int, int, int], str, int | None], operand: str, where: str
) -> None:
    """The kernel's finite check (mmm.cu) reports a NaN or infinity at any position of either
    operand, under every tile and split, naming the operand; a clean call with the same
    arrays afterwards settles (the status block is per call)."""
    import cupy as cp

    import safemon
    from safemon.errors import InvalidInputError

    (m, n, k), tile, split = shape
    a, b = _inputs(m, n, k)
    x = a if operand == "a" else b
    y = x.copy()
    y.ravel()[{"first": 0, "middle": x.size // 2, "last": x.size - 1}[where]] = (
        np.inf if where == "middle" else np.nan)
    args = {"a": a, "b": b, operand: y}
    with pytest.raises(InvalidInputError, match=f"finite check of {operand}"):
        safemon.protected_matmul(cp.asarray(args["a"]), cp.asarray(args["b"]), checksum="ones",
                                 level="F", mode="fma", tile=tile, split=split)
    r = safemon.protected_matmul(cp.asarray(a), cp.asarray(b), checksum="ones", level="F",
                                 mode="fma", tile=tile, split=split)
    assert np.isfinite(cp.asnumpy(r.c)).all()


@pytest.mark.parametrize("build", ["exact", "rmt-warp", "rmt-block"])
@pytest.mark.parametrize("operand", ["a", "b"])
def test_finite_check_under_exact_mode_and_both_rmt_kinds(operand: str, build: str) -> None:
    """The same check in the builds the position test leaves out: exact mode (mul + add, no
    FMA) and both RMT kinds, whose replica lanes or blocks both meet the bad element, on a
    split `large` product (Aᵀ read in 16-byte runs) and on `wide`."""
    import cupy as cp

    import safemon
    from safemon.errors import InvalidInputError

    mode, rmt = ("exact", "none") if build == "exact" else ("fma", build.split("-")[1])
    for (m, n, k), tile, split in [((256, 136, 1000), "large", 3), ((64, 300, 2000), "wide", None)]:
        a, b = _inputs(m, n, k)
        args = {"a": a, "b": b}
        args[operand] = _bad(args[operand], np.nan if operand == "a" else -np.inf)
        with pytest.raises(InvalidInputError, match=f"finite check of {operand}"):
            safemon.protected_matmul(cp.asarray(args["a"]), cp.asarray(args["b"]), checksum="ones",
                                     level="M", mode=mode, tile=tile, split=split, rmt=rmt)


@pytest.mark.parametrize("mode", ["exact", "fma"])
@pytest.mark.parametrize("shape", FINITE_SHAPES, ids=lambda s: f"{'x'.join(map(str, s[0]))}-{s[1]}")
def test_finite_inputs_that_overflow_are_released_like_the_reference(
    shape: tuple[tuple[int, int, int], str, int | None], mode: str
) -> None:
    """Finite inputs whose products overflow give C elements of +inf (and NaN in exact mode,
    below). Those accumulators send their blocks to read the inputs again (mmm.cu's finite
    check), which must find them finite: the call settles to the reference's C and ES,
    nothing raised and no tile poisoned, and with the unprotected kernel too."""
    import cupy as cp

    import safemon
    from safemon.kernels.reference import reference_matmul

    (m, n, k), tile, split = shape
    a, b = _inputs(m, n, k)
    big = np.float32(3e38)
    a[m // 2, :3] = [big, big, big]  # row m/2: 3e38·(b0 + b1 + b2) overflows to +inf
    b[:3, :] = np.float32(2.0)
    b[1, n // 2] = -2.0  # exact mode rounds 3e38·-2 to -inf first: inf - inf is NaN there
    for checksum, level in (("ones", "F"), (None, None)):
        r = safemon.protected_matmul(cp.asarray(a), cp.asarray(b), checksum=checksum, level=level,
                                     mode=mode, tile=tile, split=split)
        c_ref, es_ref = reference_matmul(a, b, r.variant)
        c = cp.asnumpy(r.c)
        assert not np.isfinite(c_ref).all()  # the case is what it says
        assert c.tobytes() == c_ref.tobytes()
        assert np.array_equal(cp.asnumpy(r.es), es_ref)


def test_pending_result_settles_to_the_reference() -> None:
    import cupy as cp

    import safemon
    from safemon.kernels.reference import reference_matmul

    a, b = _inputs(2, 96, 700)
    r = safemon.protected_matmul(cp.asarray(a), cp.asarray(b), checksum="fletcher", level="M",
                                 wait=False)
    done = r.wait()
    assert not done.pending and done.variant.split > 1
    c_ref, es_ref = reference_matmul(a, b, done.variant)
    assert cp.asnumpy(done.c).tobytes() == c_ref.tobytes()
    assert np.array_equal(cp.asnumpy(done.es), es_ref)


def test_protected_weight_single_flip_is_corrected_and_the_product_is_right() -> None:
    import cupy as cp

    import safemon
    from safemon.ecc import ProtectedArray
    from safemon.kernels.reference import reference_matmul

    a, b = _inputs(4, 128, 900)
    pb = ProtectedArray(cp.asarray(b), name="w")
    pb.verified().view(cp.uint32).ravel()[777] ^= cp.uint32(1 << 30)  # one flip behind its back
    r = safemon.protected_matmul(cp.asarray(a), pb)
    c_ref, es_ref = reference_matmul(a, b, r.variant)
    assert cp.asnumpy(r.c).tobytes() == c_ref.tobytes()
    assert np.array_equal(cp.asnumpy(r.es), es_ref)
    assert pb.corrected_total == 1


def test_protected_weight_double_flip_raises_and_releases_nothing() -> None:
    import cupy as cp

    import safemon
    from safemon.ecc import ProtectedArray
    from safemon.errors import UncorrectableError

    a, b = _inputs(4, 128, 900)
    pb = ProtectedArray(cp.asarray(b), name="w")
    pb.verified().view(cp.uint32).ravel()[5] ^= cp.uint32(0b11)  # two bits of one word
    pending = safemon.protected_matmul(cp.asarray(a), pb, wait=False)
    assert (cp.asnumpy(pending.c).view(np.uint32) == 0x7FFFFFFF).all()
    with pytest.raises(UncorrectableError, match="'w'"):
        pending.wait()
    with pytest.raises(UncorrectableError):
        safemon.protected_matmul(cp.asarray(a), pb)


def test_reused_status_block_reports_every_failure_and_only_its_own() -> None:
    """A synchronous call reuses its thread's status block only after a read found it all
    zero (safemon.kernels.checked.run_checked). Alternating clean and failing calls, on two
    streams and two operand positions, each failure is reported (the reused block carries no
    stale zero that hides it) and each clean call after a failure settles to the reference
    (no stale failure word survives into it)."""
    import cupy as cp

    import safemon
    from safemon.errors import InvalidInputError
    from safemon.kernels import checked
    from safemon.kernels.reference import reference_matmul

    a, b = _inputs(3, 300, 999)
    a_d, b_d = cp.asarray(a), cp.asarray(b)
    bad = {"a": cp.asarray(_bad(a, np.nan)), "b": cp.asarray(_bad(b, np.inf))}
    clean = safemon.protected_matmul(a_d, b_d, checksum="ones", level="M")
    c_ref, es_ref = reference_matmul(a, b, clean.variant)
    device = cp.cuda.runtime.getDevice()
    for stream in (cp.cuda.Stream.null, cp.cuda.Stream(non_blocking=True)):
        with stream:
            for operand in ("a", "b", "a"):
                before = checked._zero_blocks.by_device.get(device)
                assert before is not None  # the last clean call left its block for reuse
                args = {"a": a_d, "b": b_d, operand: bad[operand]}
                with pytest.raises(InvalidInputError, match=f"finite check of {operand}"):
                    safemon.protected_matmul(args["a"], args["b"], checksum="ones", level="M")
                # The failed call took the block and did not give it back.
                assert checked._zero_blocks.by_device.get(device) is None
                assert int(cp.asnumpy(before).any()) == 1
                r = safemon.protected_matmul(a_d, b_d, checksum="ones", level="M")
                assert cp.asnumpy(r.c).tobytes() == c_ref.tobytes()
                assert np.array_equal(cp.asnumpy(r.es), es_ref)
                assert checked._zero_blocks.by_device.get(device) is not before
