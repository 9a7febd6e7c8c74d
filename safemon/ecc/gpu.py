"""CuPy backend of the ECC codec: loads `cuda/ecc.cu` and launches encode / check / locate.

The kernels are compiled with the Hsiao row masks of `safemon.ecc.code` as defines and
decode with that module's syndrome table, so the device and the host codec compute the
same check bytes by construction; the `gpu`-marked tests hold them to it bit for bit.

Decoding is two-pass: a read-only kernel counts words with a nonzero syndrome (one 8-byte
device-to-host copy when the data are clean); only when it counts errors does a second
kernel locate them, classify them with the syndrome table and, if asked, correct them.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from safemon.ecc.code import (
    EccReport,
    check_bits,
    check_masks,
    n_check_words,
    n_words,
    syndrome_table,
)
from safemon.errors import InvalidInputError
from safemon.kernels.compiler import KernelBuild, import_cupy, load_module

__all__ = [
    "BLOCK",
    "SOURCE",
    "clear_launch_cache",
    "count_errors_device",
    "data_device",
    "decode_device",
    "encode_device",
    "is_device_array",
    "nvcc_builds",
    "spin_function",
]

#: The kernel source, shipped as package data.
SOURCE: Path = Path(__file__).with_name("cuda") / "ecc.cu"
#: Threads per block of every ECC kernel.
BLOCK = 256
#: Groups (4 words) per thread per loop trip; the kernels' ECC_UNROLL32/64 defines.
UNROLL = {32: 2, 64: 1}
#: Grid-stride launches cap the grid at this many blocks per multiprocessor. On an H100
#: (docs/ECC.md) 4..32 were 2-15 % slower and no cap was within noise of 64; unroll 2/1
#: was as good as 4/2 and 8/4. Computing the check bits without POPCs did not help: the same
#: bits from single-bit tensor-core MMAs (`mma.m16n8k256.b1.and.popc`, one warp per 128
#: words) counted the same and ran 0.88x as fast at 64 MiB and 0.96x at 256 MiB, each launch
#: timed alone (evidence/h100-2026-11-25-stop46/, call 6). Launched back to back, the scalar
#: kernel reads 2.4 TB/s at 64 MiB and 2.7 TB/s at 256 MiB (call 8).
BLOCKS_PER_SM = 64


def _defines() -> dict[str, str]:
    defs: dict[str, str] = {}
    for r, m in enumerate(check_masks(32)):
        defs[f"ECC32_M{r}"] = f"0x{m:08x}u"
    for r, m in enumerate(check_masks(64)):
        defs[f"ECC64_M{r}"] = f"0x{m:016x}ull"
    defs["ECC_UNROLL32"] = str(UNROLL[32])
    defs["ECC_UNROLL64"] = str(UNROLL[64])
    return defs


def _build() -> KernelBuild:
    return _build_for(UNROLL[32], UNROLL[64])


@functools.cache
def _build_for(unroll32: int, unroll64: int) -> KernelBuild:
    del unroll32, unroll64  # the cache key: _defines() reads UNROLL
    return KernelBuild.make(SOURCE, _defines(), ())


@dataclass(frozen=True)
class _Launch:
    """The loaded kernels of one word size on one device, and what sizes their grids."""

    encode: Any
    check: Any
    locate: Any
    unroll: int
    max_blocks: int


_launch_cache: dict[tuple[int, int, int, int, int], _Launch] = {}


def _launch(cupy: Any, word_bits: int) -> _Launch:
    # Cached so that a call costs a dict lookup, not a module lookup: at 64 MiB the kernels
    # run for tens of microseconds, comparable to Python-side overhead.
    dev = int(cupy.cuda.runtime.getDevice())
    # Plain ints as the key: hashing the KernelBuild cost tens of microseconds per call.
    key = (dev, word_bits, UNROLL[32], UNROLL[64], BLOCKS_PER_SM)
    got = _launch_cache.get(key)
    if got is None:
        build = _build()
        mod = load_module(build)
        sms = int(cupy.cuda.Device(dev).attributes["MultiProcessorCount"])
        got = _Launch(
            encode=mod.get_function(f"ecc{word_bits}_encode"),
            check=mod.get_function(f"ecc{word_bits}_check"),
            locate=mod.get_function(f"ecc{word_bits}_locate"),
            unroll=UNROLL[word_bits],
            max_blocks=sms * BLOCKS_PER_SM,
        )
        with _lock:
            _launch_cache[key] = got
    return got


def clear_launch_cache() -> None:
    """Forget the loaded kernels (test-only; pair with `safemon.kernels.compiler.clear_cache`)."""
    with _lock:
        _launch_cache.clear()
        _tables.clear()


def spin_function() -> Any:
    """The `ecc_spin(ns)` helper kernel of the benchmark, from the current build."""
    return load_module(_build()).get_function("ecc_spin")


def _grid_for(launch: _Launch, threads: int) -> int:
    return max(1, min((threads + BLOCK - 1) // BLOCK, launch.max_blocks))


def nvcc_builds() -> list[KernelBuild]:
    """Every build of `cuda/ecc.cu` the runtime loads (one: both word sizes in one module)."""
    return [_build()]


def is_device_array(x: object) -> bool:
    """True for a `cupy.ndarray`, checked without importing CuPy when it is not loaded."""
    import sys

    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


_lock = threading.Lock()
_tables: dict[tuple[int, int], Any] = {}


def _table_on_device(cupy: Any, word_bits: int) -> Any:
    dev = cupy.cuda.Device().id
    with _lock:
        t = _tables.get((dev, word_bits))
        if t is None:
            t = cupy.asarray(syndrome_table(word_bits))
            _tables[(dev, word_bits)] = t
        return t


def _check_data(cupy: Any, data: Any) -> None:
    if not isinstance(data, cupy.ndarray):
        raise InvalidInputError(f"expected a CuPy array, got {type(data).__name__}")
    if not data.flags.c_contiguous:
        raise InvalidInputError("ECC needs a C-contiguous array (it is viewed as raw words)")


def _check_check(cupy: Any, check: Any, data: Any, word_bits: int) -> None:
    nbytes = data.nbytes
    want = n_check_words(nbytes, word_bits)
    if not isinstance(check, cupy.ndarray):
        raise InvalidInputError(
            f"check must be a CuPy array on the data's device, got {type(check).__name__}"
        )
    if check.dtype != np.uint32 or check.ndim != 1 or check.size != want:
        raise InvalidInputError(
            f"check must be a 1-D uint32 array of {want} elements for {nbytes} bytes of "
            f"{word_bits}-bit words, got {check.dtype} with shape {check.shape}"
        )
    if not check.flags.c_contiguous:
        raise InvalidInputError("check must be C-contiguous")
    if data_device(check) != data_device(data):
        raise InvalidInputError(
            f"check is on device {data_device(check)} but data on device {data_device(data)}"
        )


def data_device(x: Any) -> int:
    """CUDA device id of a CuPy array."""
    return int(x.device.id)


def encode_device(data: Any, word_bits: int = 32) -> Any:
    """Packed check array (CuPy uint32, shape (ceil(words/4),)) of a C-contiguous CuPy array.

    Runs on `data`'s device and the current stream; returns without synchronising.
    """
    cupy = import_cupy()
    check_bits(word_bits)
    _check_data(cupy, data)
    with cupy.cuda.Device(data_device(data)):
        ngroups = n_check_words(data.nbytes, word_bits)
        check = cupy.empty(ngroups, dtype=cupy.uint32)
        if ngroups == 0:
            return check
        k = _launch(cupy, word_bits)
        grid = _grid_for(k, (ngroups + k.unroll - 1) // k.unroll)
        k.encode((grid,), (BLOCK,), (data, np.uint64(data.nbytes), check, np.uint64(ngroups)))
        return check


def count_errors_device(data: Any, check: Any, word_bits: int = 32, out: Any = None) -> Any:
    """Launch the read-only check; returns a CuPy uint64 array of one element (no sync).

    The number of words with a nonzero syndrome is added to `out` when given (a zeroed
    1-element uint64 CuPy array, or the device address of a zeroed uint64 as `numpy.uintp`,
    e.g. inside a larger status block), else to a new array, which is returned.
    """
    cupy = import_cupy()
    ngroups = n_check_words(data.nbytes, word_bits)
    nerr = cupy.zeros(1, dtype=cupy.uint64) if out is None else out
    if ngroups:
        k = _launch(cupy, word_bits)
        grid = _grid_for(k, (ngroups + k.unroll - 1) // k.unroll)
        k.check((grid,), (BLOCK,), (data, np.uint64(data.nbytes), check, np.uint64(ngroups), nerr))
    return nerr


def decode_device(data: Any, check: Any, word_bits: int = 32, correct: bool = True) -> EccReport:
    """Device counterpart of `safemon.ecc.code.decode_host`; same report, same in-place fixes.

    Synchronises with the current stream (it reads the error count back).

    Raises:
        InvalidInputError: bad types/shapes/devices, or the data changed while decoding.
    """
    cupy = import_cupy()
    check_bits(word_bits)
    _check_data(cupy, data)
    nb = data.nbytes
    nw = n_words(nb, word_bits)
    with cupy.cuda.Device(data_device(data)):
        _check_check(cupy, check, data, word_bits)
        n = int(count_errors_device(data, check, word_bits).get()[0])
        if n == 0:
            empty = np.empty(0, dtype=np.int64)
            return EccReport.from_found(nw, word_bits, empty, empty, applied=correct)
        ngroups = n_check_words(nb, word_bits)
        nfound = cupy.zeros(1, dtype=cupy.uint64)
        out_word = cupy.empty(n, dtype=cupy.int64)
        out_pos = cupy.empty(n, dtype=cupy.int16)
        k = _launch(cupy, word_bits)
        k.locate(
            (_grid_for(k, ngroups),),
            (BLOCK,),
            (
                data,
                np.uint64(nb),
                check,
                np.uint64(ngroups),
                _table_on_device(cupy, word_bits),
                np.int32(1 if correct else 0),
                nfound,
                np.uint64(n),
                out_word,
                out_pos,
            ),
        )
        found = int(nfound.get()[0])
        if found != n:
            raise InvalidInputError(
                f"the buffer changed during decode ({n} bad words counted, then {found}); "
                "ECC checks must not race with writers"
            )
        return EccReport.from_found(nw, word_bits, out_word.get(), out_pos.get(), applied=correct)
