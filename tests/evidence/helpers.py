"""Hand-written evidence for selection, plot and command tests (no GPU needed)."""

from __future__ import annotations

from typing import Any

from safemon.dims import parse_dims

DEVICE = "Test GPU H100"


def _parts(label: str, mode: str) -> tuple[str, str | None, str | None]:
    """(name, checksum, level) of the small-tile variant labelled `label` ("ones/I",
    "xor_fletcher", "ones/M/abft", "unprotected/rmt-warp")."""
    from safemon.evidence.campaign import parse_variants

    v = parse_variants(label, mode, "small")[0]
    return v.name, v.checksum, v.level


def dc_rec(variant: str, dc: float, *, dims: str = "80x80x80", mode: str = "fma") -> dict[str, Any]:
    """A consistent DC record with `dc` percent detected (rounded to a whole fault count)."""
    d = parse_dims(dims)
    inj = d.input_bits
    det = round(inj * dc / 100)
    vis = round(inj * 0.98)
    both = min(det, vis)
    name, checksum, level = _parts(variant, mode)
    return {
        "variant": variant, "name": name, "checksum": checksum,
        "level": level, "mode": mode, "tile": "small", "dims": dims, "injections": inj,
        "detected_es": det, "visible_c": vis, "latent": det - both, "escapes": vis - both,
        "dc_percent": 100 * det / inj, "visible_percent": 100 * vis / inj,
        "latent_percent": 100 * (det - both) / inj, "escapes_percent": 100 * (vis - both) / inj,
        "seconds": 1.0,
    }


def dc_doc(records: list[dict[str, Any]], *, date: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"schema": "safemon.dc/2", "safemon_version": "0.1.0", "date": date, "device": DEVICE,
            "backend": "cupy", "seed": 0, "results": records}


def bench_row(variant: str, overhead: float, *, dims: str = "80x80x80", mode: str = "fma") -> dict[str, Any]:
    d = parse_dims(dims)
    unprot = 0.010
    prot = unprot * overhead
    blas = 0.008
    name, checksum, level = _parts(variant, mode)
    g = d.flops / 1e9
    return {
        "variant": variant, "name": name, "checksum": checksum,
        "level": level, "mode": mode, "tile": "small", "dims": dims, "repeats": 100,
        "protected_ms": prot, "unprotected_ms": unprot, "cublas_ms": blas,
        "overhead": prot / unprot, "vs_cublas": prot / blas, "tflops_protected": g / prot,
        "tflops_unprotected": g / unprot, "tflops_cublas": g / blas,
    }


def bench_doc(rows: list[dict[str, Any]], *, date: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"schema": "safemon.bench/2", "safemon_version": "0.1.0", "date": date,
            "device": DEVICE, "clocks": {"clocks.sm": "1980 MHz"}, "cuda_runtime": 12080,
            "cuda_driver": 12080, "cupy": "13.4.0", "rows": rows}


#: A catalog resembling the seed's 80² evidence: (variant, DC %, overhead).
CATALOG = [
    ("xor/M", 50.0, 1.01),
    ("twos/M", 61.7, 1.05),
    ("ones/M", 62.5, 1.04),
    ("twos/I", 95.7, 1.30),
    ("ones/I", 100.0, 1.50),
    ("crc32c/I", 100.0, 9.0),
    ("xor/E", 12.5, 1.00),
]


def ik_rec(variant: str, scope: str, dangerous: int, detected: int, *, dims: str = "80x80x80",
           mode: str = "fma", es_word: int = 0, no_effect: int = 0) -> dict[str, Any]:
    """A consistent in-kernel record: `detected` of `dangerous` accumulator faults caught."""
    from safemon.evidence.bounds import lower_bound_percent

    name, checksum, level = _parts(variant, mode)
    counts: dict[str, dict[str, int]] = {
        "accumulator": {"neither": no_effect, "es_only": 0, "c_only": dangerous - detected,
                        "both": detected}}
    if es_word:
        counts["es_word"] = {"neither": 0, "es_only": es_word, "c_only": 0, "both": 0}
    return {
        "variant": variant, "name": name, "checksum": checksum,
        "level": level, "mode": mode, "tile": "small", "dims": dims, "scope": scope, "seed": 0,
        "sites": dangerous + es_word + no_effect, "counts": counts, "dangerous": dangerous,
        "detected_dangerous": detected, "escapes": dangerous - detected, "no_effect": no_effect,
        "latent": 0, "safe_es_word": es_word,
        "dc_percent": 100 * detected / dangerous if dangerous else None,
        "dc_lower_percent": lower_bound_percent(detected, dangerous) if dangerous else None,
        "confidence": 0.95, "seconds": 1.0,
    }


def ik_doc(records: list[dict[str, Any]], *, date: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"schema": "safemon.inkernel/2", "safemon_version": "0.1.0", "date": date,
            "device": DEVICE, "backend": "cupy", "results": records}
