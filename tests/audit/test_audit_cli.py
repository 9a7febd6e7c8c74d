"""`safemon audit` usage errors exit 2 before any GPU or nvcc work."""

from __future__ import annotations

import pytest

from safemon.cli import main


def test_audit_without_subcommand_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit"]) == 2
    assert "ptx" in capsys.readouterr().err


def test_determinism_refuses_a_size_without_two_blocks_per_variant(capsys: pytest.CaptureFixture[str]) -> None:
    from safemon.kernels.catalog import TILES

    largest = max(max(t.bm, t.bn) for t in TILES.values())  # 256 since the skinny tile
    assert main(["audit", "determinism", "--size", "100"]) == 2
    assert f"size > {largest}" in capsys.readouterr().err


def test_ptx_refuses_a_define_without_a_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "ptx", "--source", __file__, "-D", "=1"]) == 2
    assert "bad define" in capsys.readouterr().err
