"""ECC throughput on the GPU against a device-to-device copy measured in the same run.

`run_ecc_bench` times, for each size, with CUDA events after a warm-up, the median of
`repeats` runs of:

* copy: `cudaMemcpyAsync` device-to-device, bytes = 2 × size (read + write);
* encode: the encode kernel, bytes = size read + check bytes written;
* check: the read-only check kernel on clean data, bytes = size + check bytes read;
* decode: the whole `decode()` call on clean data (check kernel, counter reset and the
  8-byte read-back), same bytes as check.

Each timed run is preceded by a 200 µs spin kernel on the same stream, so the operation is
already queued when its start event fires and Python's launch latency (tens of µs, the
size of a 64 MiB kernel) is not counted; `decode` still includes its host round trip.
Each throughput is also given as a ratio to the copy's. Timings are never asserted in
tests; this is a report (docs/ECC.md, "Overheads").
"""

from __future__ import annotations

import functools
import json
import platform
from collections.abc import Callable, Sequence
from typing import Any

from safemon.bench.timing import median_kernel_ms
from safemon.ecc.api import decode
from safemon.ecc.code import n_check_words
from safemon.ecc.gpu import count_errors_device, encode_device
from safemon.kernels.compiler import import_cupy

__all__ = ["markdown_table", "run_ecc_bench"]

MIB = 1 << 20


#: Busy time queued before each timed run, in nanoseconds: longer than Python's launch
#: path, so the timed operation is already queued when its start event is reached.
SPIN_NS = 200_000


def run_ecc_bench(
    sizes_mib: Sequence[int] = (64, 256, 1024),
    repeats: int = 50,
    *,
    word_bits: Sequence[int] = (32, 64),
    warmup: int = 5,
    print_table: bool = False,
) -> dict[str, Any]:
    """Measure encode/check/decode throughput vs copy; return a JSON-ready dict.

    Args:
        sizes_mib: buffer sizes in MiB (2**20 bytes).
        repeats: timed runs per measurement (the median is reported).
        word_bits: codes to measure.
        warmup: untimed runs before each measurement.
        print_table: also print `markdown_table(result)`.

    Returns:
        {"device", "cupy", "cuda_runtime", "cuda_driver", "python", "repeats", "rows": [
        {"size_mib", "word_bits", "op", "median_ms", "gb_per_s", "ratio_to_copy"}...]};
        GB/s are 1e9 bytes per second.

    Raises:
        BackendUnavailableError: no CuPy or no CUDA device.
    """
    cupy = import_cupy()
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"]
    result: dict[str, Any] = {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "cupy": cupy.__version__,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "cuda_driver": cupy.cuda.runtime.driverGetVersion(),
        "python": platform.python_version(),
        "repeats": repeats,
        "rows": [],
    }
    rows: list[dict[str, Any]] = result["rows"]
    for size in sizes_mib:
        rows.extend(_bench_size(cupy, int(size), word_bits, repeats, warmup))
        cupy.get_default_memory_pool().free_all_blocks()
    if print_table:
        print(markdown_table(result))
    return result


def _bench_size(
    cupy: Any, size_mib: int, word_bits: Sequence[int], repeats: int, warmup: int
) -> list[dict[str, Any]]:
    nbytes = size_mib * MIB
    src = cupy.random.randint(0, 2**31 - 1, size=nbytes // 4, dtype=cupy.int32).view(cupy.uint8)
    dst = cupy.empty_like(src)

    def copy() -> None:
        dst.data.copy_from_device_async(src.data, nbytes)

    copy_ms = median_kernel_ms(cupy, copy, repeats, warmup, spin_ns=SPIN_NS)
    copy_gbs = 2 * nbytes / copy_ms / 1e6
    rows: list[dict[str, Any]] = [
        {"size_mib": size_mib, "word_bits": None, "op": "copy", "median_ms": copy_ms,
         "gb_per_s": copy_gbs, "ratio_to_copy": 1.0}
    ]
    for wb in word_bits:
        check = encode_device(src, wb)
        cbytes = n_check_words(nbytes, wb) * 4
        ops: dict[str, Callable[[], object]] = {
            "encode": functools.partial(encode_device, src, wb),
            "check": functools.partial(count_errors_device, src, check, wb),
            "decode": functools.partial(decode, src, check, word_bits=wb),
        }
        for op, fn in ops.items():
            ms = median_kernel_ms(cupy, fn, repeats, warmup, spin_ns=SPIN_NS)
            gbs = (nbytes + cbytes) / ms / 1e6
            rows.append(
                {"size_mib": size_mib, "word_bits": wb, "op": op, "median_ms": ms,
                 "gb_per_s": gbs, "ratio_to_copy": gbs / copy_gbs}
            )
    return rows


def markdown_table(result: dict[str, Any]) -> str:
    """Render a `run_ecc_bench` result as a Markdown table with a one-line header."""
    lines = [
        f"Device: {result['device']}; CuPy {result['cupy']}, CUDA runtime "
        f"{result['cuda_runtime']}, driver {result['cuda_driver']}; median of "
        f"{result['repeats']} runs.",
        "",
        "| size (MiB) | code | op | median (ms) | GB/s | vs copy |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        code = "—" if r["word_bits"] is None else f"({r['word_bits'] + (7 if r['word_bits'] == 32 else 8)},{r['word_bits']})"
        lines.append(
            f"| {r['size_mib']} | {code} | {r['op']} | {r['median_ms']:.3f} | "
            f"{r['gb_per_s']:.0f} | {r['ratio_to_copy']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":  # python -m safemon.bench.ecc
    print(json.dumps(run_ecc_bench(print_table=True), indent=2))
