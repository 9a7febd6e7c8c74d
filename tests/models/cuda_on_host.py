"""The element-wise CUDA kernels of whole-model requests (`cuda/ops.cu`, `cuda/epilogue.cu`)
compiled for the host CPU, so that their operation order can be checked against the NumPy
references on machines without a GPU.

How: the kernels' own source text is compiled by the host C++ compiler with a prelude that
makes the CUDA keywords plain C++ and runs each kernel as ONE thread (gridDim = blockDim
= 1, so every grid-stride loop visits every index in turn). `float_rn.cuh`'s PTX helpers
(add.rn, sub.rn, mul.rn, div.rn, sqrt.rn, cvt.rni, setp.gt) become the host's IEEE float32
operations, which round the same way on x86-64 (SSE scalar arithmetic, round to nearest
even, subnormals kept while the FTZ/DAZ bits are clear, as they are in a Python process);
`-ffp-contract=off` forbids fused multiply-adds, as the PTX does. `safemon_exp_f32` is
taken from `float_rn.cuh` as written, with its one PTX conversion (cvt.rzi.s32.f32, k is
integral) replaced by a C++ cast.

What this checks: that each kernel does the reference's float32 operations in the
reference's order (the bit-exactness contract of `safemon.models.ops` and
`safemon.models.activations`). What it does not: the PTX helpers themselves, NVRTC's
compilation, thread indexing over many threads, or anything the GPU does differently from
IEEE; those need the GPU tests (tests/models/test_ops_gpu.py, test_models_gpu.py).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from safemon.kernels.gpu import CUDA_DIR
from safemon.models.ops import ATTENTION_CHUNK, STORED_TOKENS

#: The host compiler's flags: strict IEEE float32, no contraction into FMA.
CXX_FLAGS = ["-std=c++20", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math",
             "-mno-fma", "-fno-builtin"]

_PRELUDE = """\
#include <cmath>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
struct safemon_host_dim3 { unsigned int x, y, z; };
static const safemon_host_dim3 gridDim = {1u, 1u, 1u}, blockDim = {1u, 1u, 1u};
static const safemon_host_dim3 blockIdx = {0u, 0u, 0u}, threadIdx = {0u, 0u, 0u};
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
"""

_HELPERS = """\
#pragma once
static inline float sm_add(float a, float b) { return a + b; }
static inline float sm_sub(float a, float b) { return a - b; }
static inline float sm_mul(float a, float b) { return a * b; }
static inline float sm_div(float a, float b) { return a / b; }
static inline float sm_sqrt(float a) { return std::sqrt(a); }
static inline float sm_rint(float a) { return std::nearbyint(a); }
static inline bool sm_gt(float a, float b) { return a > b; }
"""

_EXP_START = "// safemon.models.activations.exp_f32, operation for operation."
_CVT = 'asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(ki) : "f"(k));'


def host_compiler() -> str | None:
    """The host C++ compiler to use (g++ or clang++ on PATH), or None."""
    for name in ("g++", "clang++", "c++"):
        path = shutil.which(name)
        if path:
            return path
    return None


def host_float_rn(source: str) -> str:
    """`float_rn.cuh` for the host: the IEEE helpers above, then the file's own
    `safemon_exp_f32` with its PTX conversion replaced by a cast.

    Raises:
        ValueError: the file no longer has the pieces this relies on (then update this
            module with it).
    """
    if _EXP_START not in source or source.count(_CVT) != 1:
        raise ValueError("float_rn.cuh changed: safemon_exp_f32 or its cvt.rzi not found")
    exp_text = source[source.index(_EXP_START):].replace(_CVT, "ki = (int)k;")
    if "asm" in exp_text:
        raise ValueError("float_rn.cuh's safemon_exp_f32 has PTX this module does not map")
    return _HELPERS + exp_text


def build(out_dir: Path) -> ctypes.CDLL:
    """Compile ops.cu and epilogue.cu for the host into `out_dir`; returns the library.

    Raises:
        RuntimeError: no host compiler, or the compile failed (with its output).
    """
    cxx = host_compiler()
    if cxx is None:
        raise RuntimeError("no host C++ compiler (g++ or clang++) on PATH")
    (out_dir / "float_rn.cuh").write_text(host_float_rn((CUDA_DIR / "float_rn.cuh").read_text()))
    (out_dir / "prelude.h").write_text(_PRELUDE)
    units = []
    for name in ("ops.cu", "epilogue.cu"):
        unit = out_dir / (name + ".cpp")  # next to the host float_rn.cuh, which it includes
        unit.write_text((CUDA_DIR / name).read_text())
        units.append(str(unit))
    lib = out_dir / "libsafemon_host_kernels.so"
    cmd = [cxx, *CXX_FLAGS, f"-DSAFEMON_STORED_TOKENS={STORED_TOKENS}",
           f"-DSAFEMON_ATTENTION_CHUNK={ATTENTION_CHUNK}", "-include",
           str(out_dir / "prelude.h"), *units, "-o", str(lib)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"host compile failed: {' '.join(cmd)}\n{done.stderr[-4000:]}")
    return ctypes.CDLL(str(lib))


def _ptr(a: np.ndarray) -> Any:
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class HostKernels:
    """The kernels of `build`, called with NumPy arrays the way `safemon.kernels.model_gpu`
    launches them (the same host-rounded float32 arguments)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        f, u64, i32 = ctypes.c_float, ctypes.c_ulonglong, ctypes.c_int
        p = ctypes.POINTER(ctypes.c_float)
        self._ln = lib.safemon_layer_norm
        self._ln.argtypes = [p, p, p, p, u64, u64, f, f]
        self._att = lib.safemon_attention
        self._att.argtypes = [p, p, u64, i32, i32, i32, f, i32]
        self._add = lib.safemon_add
        self._add.argtypes = [p, p, p, u64]
        self._epi = lib.safemon_epilogue
        self._epi.argtypes = [p, p, u64, u64, i32]
        for fn in (self._ln, self._att, self._add, self._epi):
            fn.restype = None

    def layer_norm(self, x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
        rows, n = x.shape
        out = np.empty_like(x)
        self._ln(_ptr(x), _ptr(w), _ptr(b), _ptr(out), rows, n, float(np.float32(n)),
                 float(np.float32(eps)))
        return out

    def attention(self, h: np.ndarray, heads: int, tokens: int, scale: np.float32,
                  causal: bool = False) -> np.ndarray:
        rows, width = h.shape
        dh = width // (3 * heads)
        out = np.full((rows, heads * dh), np.nan, dtype=np.float32)
        self._att(_ptr(h), _ptr(out), rows // tokens, tokens, heads, dh, float(scale),
                  int(causal))
        return out

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty_like(a)
        self._add(_ptr(a), _ptr(b), _ptr(out), a.size)
        return out

    def epilogue(self, c: np.ndarray, bias: np.ndarray | None, act: int) -> np.ndarray:
        h = c.copy()
        m, n = h.shape
        self._epi(_ptr(h), None if bias is None else _ptr(bias), m, n, act)
        return h
