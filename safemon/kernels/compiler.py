"""Compile `.cu` files with NVRTC through CuPy, once per (device, source, options), and cache.

This is the one place that turns kernel sources into loaded modules; the protected-MMM
backend, the ECC kernels and the fault-injection builds all go through `load_module`.
The same option list is what `safemon.kernels.nvcc_check` hands to `nvcc -arch=sm_90` in CI,
so a syntax error fails CI on a machine without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from safemon.errors import BackendUnavailableError, CompileError

__all__ = [
    "BASE_OPTIONS",
    "KernelBuild",
    "clear_cache",
    "cuda_available",
    "cupy_if_imported",
    "import_cupy",
    "load_module",
    "on_clear",
]

#: Flags every build gets. Denormals are kept and division/sqrt are IEEE so that the NumPy
#: reference can mirror results bit for bit; `--fmad` is set per build by the arithmetic mode.
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")


@dataclass(frozen=True)
class KernelBuild:
    """One compilation: a `.cu` file, its preprocessor defines and its extra options.

    The same object drives NVRTC at run time and `nvcc` in CI (`safemon.kernels.nvcc_check`).
    """

    source: Path
    defines: tuple[tuple[str, str], ...] = ()
    options: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = field(default=())

    @classmethod
    def make(
        cls,
        source: Path,
        defines: Mapping[str, object] | None = None,
        options: Sequence[str] = (),
    ) -> KernelBuild:
        defs = tuple(sorted((k, str(v)) for k, v in (defines or {}).items()))
        return cls(source, defs, tuple(options), (source.parent,))

    def header_digest(self) -> str:
        """SHA-256 (hex) of every header (`.cuh`, `.h`) in the include directories, names
        and contents: what a build may include besides its own source."""
        h = hashlib.sha256()
        for d in self.include_dirs:
            for f in sorted(Path(d).glob("*")):
                if f.suffix in (".cuh", ".h"):
                    h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()

    def code(self) -> str:
        """The source NVRTC compiles: the `.cu` text, then one comment line with
        `header_digest()`. CuPy's on-disk kernel cache keys on the code string and the options
        only, so without that line a process would load the binary built from an earlier
        version of a header (the signature folds, the CRC table) as long as the `.cu` file
        itself is unchanged."""
        return f"{self.source.read_text()}\n// safemon headers sha256 {self.header_digest()}\n"

    def flags(self) -> list[str]:
        """Compiler flags common to NVRTC and nvcc (defines, includes, options)."""
        out = list(BASE_OPTIONS) + list(self.options)
        out += [f"-D{k}={v}" for k, v in self.defines]
        out += [f"-I{d}" for d in self.include_dirs]
        return out


_cupy_module: ModuleType | None = None  # set once CuPy imported and a device answered


def import_cupy() -> ModuleType:
    """Import CuPy or raise `BackendUnavailableError` saying why it cannot be used.

    After the first success the module is returned at once (it is on every call's path).
    """
    global _cupy_module
    if _cupy_module is not None:
        return _cupy_module
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        raise BackendUnavailableError(
            f"the cupy backend needs CuPy and a CUDA device; importing cupy failed: {exc}. "
            "Install the cuda12 or cuda13 extra (pip install 'safemon[cuda13]')."
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise BackendUnavailableError(f"CuPy is installed but no CUDA device is usable: {exc}") from exc
    if count < 1:
        raise BackendUnavailableError("CuPy is installed but no CUDA device is present")
    module: ModuleType = cupy
    _cupy_module = module
    return module


def cupy_if_imported() -> ModuleType | None:
    """The cupy module when `import_cupy` has succeeded in this process (CuPy imported and a
    device answered), else None; never imports. For per-call paths that take the device
    route only once it is known to work."""
    return _cupy_module


@functools.cache
def cuda_available() -> bool:
    """True when CuPy imports and at least one CUDA device answers. Cached for the process."""
    try:
        import_cupy()
    except BackendUnavailableError:
        return False
    return True


_lock = threading.Lock()  # guards the two dicts below, never held while compiling
_modules: dict[tuple[int, KernelBuild], Any] = {}
_compiling: dict[tuple[int, KernelBuild], threading.Lock] = {}


def load_module(build: KernelBuild) -> Any:
    """Return the compiled `cupy.RawModule` for `build` on the current device, compiling once.

    Thread-safe. A cached module is returned without waiting; a compile holds only its own
    build's lock, so stream channels of one process neither wait for each other's unrelated
    compiles nor compile the same build twice.

    Raises:
        BackendUnavailableError: no CuPy or no device.
        CompileError: NVRTC rejected the source; the message carries the full NVRTC log.
    """
    cupy = import_cupy()
    device = cupy.cuda.Device().id
    key = (device, build)
    mod = _modules.get(key)
    if mod is not None:
        return mod
    with _lock:
        build_lock = _compiling.setdefault(key, threading.Lock())
    with build_lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        mod = cupy.RawModule(code=build.code(), options=tuple(build.flags()), backend="nvrtc")
        try:
            mod.compile()
        except Exception as exc:
            get_message = getattr(exc, "get_message", None)
            log = get_message() if callable(get_message) else str(exc)
            raise CompileError(
                f"NVRTC failed to compile {build.source.name} with {build.flags()}:\n{log}"
            ) from exc
        with _lock:
            _modules[key] = mod
        return mod


_clear_hooks: list[Callable[[], None]] = []


def on_clear(hook: Callable[[], None]) -> None:
    """Call `hook` from `clear_cache` (modules that cache functions of loaded modules)."""
    _clear_hooks.append(hook)


def clear_cache() -> None:
    """Forget every compiled module (test-only: forces the next `load_module` to recompile)."""
    with _lock:
        _modules.clear()
        _compiling.clear()
    for hook in _clear_hooks:
        hook()
