"""Which builds the PTX audit covers, and how each is compiled to PTX with nvcc.

The builds are not listed here: they come from `safemon.kernels.nvcc_check.shipped_builds()`
(the protected MMM builds of the catalog, the ECC kernels and the finite check), so a build
added there is audited without a change here.

Each build is compiled with the flags it gets at run time. CuPy appends `-ftz=true` to every
NVRTC compile after safemon's `--ftz=false`, so the PTX is produced with `-ftz=true` in place
of `--ftz=false` (as tests/kernels/test_ptx.py does): `.ftz` found in it is what the run-time
code would contain. PTX is cached on disk by (nvcc version, flags, source and header bytes),
because one large MMM build takes about a minute to compile on a 2-core CI machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from safemon.kernels.compiler import KernelBuild

__all__ = [
    "NvccError",
    "PtxBuild",
    "compile_ptx",
    "describe",
    "is_exact",
    "param_kinds",
    "ptx_flags",
    "shipped_builds",
]


class NvccError(RuntimeError):
    """nvcc could not be run or rejected the source; the message carries its log."""


@dataclass(frozen=True)
class PtxBuild:
    """A build and its PTX text."""

    build: KernelBuild
    ptx: str


def shipped_builds() -> list[KernelBuild]:
    """Every build safemon loads at run time (from `nvcc_check.shipped_builds`)."""
    from safemon.kernels.nvcc_check import shipped_builds as shipped

    return shipped()


def describe(build: KernelBuild) -> str:
    """A short label: file name and defines, e.g. `mmm.cu[BM=32,...]`."""
    defs = ",".join(f"{k}={v}" for k, v in build.defines if not k.startswith("ECC"))
    return f"{build.source.name}[{defs}]" if defs else build.source.name


def is_exact(build: KernelBuild) -> bool:
    """True when the build is compiled without contraction (`--fmad=false`): exact mode."""
    return "--fmad=false" in build.options


def ptx_flags(build: KernelBuild) -> list[str]:
    """The run-time flags with CuPy's `-ftz=true` in place of `--ftz=false` (module doc)."""
    return [f for f in build.flags() if not f.startswith("--ftz")] + ["-ftz=true"]


def _cache_dir() -> Path:
    base = os.environ.get("SAFEMON_AUDIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "safemon-audit")
    return Path(base)


def _key(nvcc: str, args: list[str], build: KernelBuild) -> str:
    h = hashlib.sha256()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    h.update(version.encode())
    h.update("\0".join(args).encode())
    h.update(build.source.read_bytes())
    h.update(build.header_digest().encode())
    return h.hexdigest()


def _run_nvcc(nvcc: str, args: list[str], build: KernelBuild, suffix: str) -> str:
    key = _key(nvcc, args, build)
    cached = _cache_dir() / f"{key}{suffix}"
    if cached.exists():
        return cached.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"out{suffix}"
        try:
            proc = subprocess.run([nvcc, *args, str(build.source), "-o", str(out)],
                                  capture_output=True, text=True)
        except OSError as exc:
            raise NvccError(f"cannot run {nvcc}: {exc}") from exc
        if proc.returncode != 0:
            raise NvccError(f"nvcc failed on {describe(build)}:\n{proc.stdout}{proc.stderr}")
        text = out.read_text()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp_file = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp_file.write_text(text)
        tmp_file.replace(cached)
    except OSError:
        pass  # a read-only cache only costs time
    return text


def compile_ptx(build: KernelBuild, *, nvcc: str = "nvcc", arch: str = "sm_90") -> str:
    """The PTX nvcc emits for `build` with its run-time flags (module docstring).

    Raises:
        NvccError: nvcc is missing or rejects the source (the log is in the message).
    """
    return _run_nvcc(nvcc, [f"-arch={arch}", "-ptx", *ptx_flags(build)], build, ".ptx")


_PROTO = re.compile(r"__attribute__\(\(global\)\)")


def param_kinds(build: KernelBuild, kernels: list[str], *, nvcc: str = "nvcc") -> dict[str, dict[str, str]]:
    """Per `extern "C"` kernel, each PTX parameter (`NAME_param_I`) as "output", "input" or
    "scalar", from the preprocessed CUDA prototype: a pointer whose pointee is not `const` is
    an output buffer, a `const` pointer an input, anything else a scalar. Kernels whose
    prototype is not found (C++-mangled names) are left out; the store check then treats
    every parameter as a possible output.

    Raises:
        NvccError: the preprocessor failed.
    """
    text = _run_nvcc(nvcc, ["-E", *ptx_flags(build)], build, ".ii")
    out: dict[str, dict[str, str]] = {}
    for name in kernels:
        params = _prototype_params(text, name)
        if params is None:
            continue
        kinds: dict[str, str] = {}
        for i, p in enumerate(params):
            if "*" not in p:
                kinds[f"{name}_param_{i}"] = "scalar"
            elif re.match(r"\s*(volatile\s+)?const\b", p):
                kinds[f"{name}_param_{i}"] = "input"
            else:
                kinds[f"{name}_param_{i}"] = "output"
        out[name] = kinds
    return out


def _prototype_params(text: str, name: str) -> list[str] | None:
    for m in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        before = text[max(0, m.start() - 400):m.start()]
        if not _PROTO.search(before) or ";" in before[before.rfind("global"):]:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        inner = text[m.end():i - 1]
        parts, cur, d = [], "", 0
        for ch in inner:
            d += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
            if ch == "," and d == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur)
        return [p.strip() for p in parts]
    return None
