"""`KernelBuild.code`: the source NVRTC compiles names the headers it may include (no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from safemon.kernels.compiler import KernelBuild
from safemon.kernels.gpu import MMM_SOURCE


def test_code_is_the_source_plus_a_header_digest_that_follows_every_header(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text('#include "fold.cuh"\nextern "C" __global__ void k() {}\n')
    (tmp_path / "fold.cuh").write_text("#define FOLD 1\n")
    (tmp_path / "notes.txt").write_text("not a header\n")
    build = KernelBuild.make(src)
    first = build.code()
    assert first.startswith(src.read_text())
    assert first.rstrip().splitlines()[-1].startswith("// safemon headers sha256 ")
    (tmp_path / "notes.txt").write_text("changed\n")
    assert build.code() == first  # only headers count
    (tmp_path / "fold.cuh").write_text("#define FOLD 2\n")
    assert build.code() != first  # CuPy's disk cache must miss after a header change
    (tmp_path / "other.h").write_text("\n")
    assert len({first, build.code()}) == 2


def test_a_change_to_a_shipped_header_changes_the_mmm_code(tmp_path: Path) -> None:
    """mmm.cu's folds live in signature.cuh: editing it alone must change what NVRTC sees."""
    for f in MMM_SOURCE.parent.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    build = KernelBuild.make(tmp_path / "mmm.cu")
    before = build.code()
    sig = tmp_path / "signature.cuh"
    sig.write_text(sig.read_text() + "\n// edited\n")
    assert build.code() != before
    assert build.code().startswith(MMM_SOURCE.read_text())


def test_cupy_if_imported_follows_the_import_at_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-call device route asks `cupy_if_imported` on every call: a value cached before
    CuPy was imported would keep every later call on the validating path (it did, from
    2026-11-23 to 2026-11-24: the decorator of `cuda_available` had slid onto it)."""
    from safemon.kernels import compiler

    monkeypatch.setattr(compiler, "_cupy_module", None)
    assert compiler.cupy_if_imported() is None
    sentinel = object()
    monkeypatch.setattr(compiler, "_cupy_module", sentinel)
    assert compiler.cupy_if_imported() is sentinel
