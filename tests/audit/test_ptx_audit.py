"""The static PTX audit finds planted defects and passes the shipped kernels (needs nvcc).

Fixtures under tests/audit/fixtures/ each plant one defect; `clean_private.cu` and the
double-buffer kernel with its barrier are clean kernels the audit must not flag. The
shipped builds come from `nvcc_check.shipped_builds()`, as in `safemon audit ptx`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from safemon.audit.builds import shipped_builds
from safemon.audit.ptx_audit import audit_build, audit_builds
from safemon.cli import main
from safemon.kernels.compiler import KernelBuild
from safemon.kernels.gpu import MMM_SOURCE

NVCC = shutil.which("nvcc")
FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")


def _checks(source: Path, defines: dict[str, object] | None = None, exact: bool = True) -> dict[str, int]:
    build = KernelBuild.make(source, defines, ("--fmad=false" if exact else "--fmad=true",))
    counts: dict[str, int] = {}
    for f in audit_build(build).findings:
        counts[f.check] = counts.get(f.check, 0) + 1
    return counts


def test_missing_barrier_is_a_race() -> None:
    assert _checks(FIXTURES / "missing_barrier.cu") == {"race": 1}


def test_read_before_barrier_in_double_buffered_loop_is_a_race_on_both_buffers() -> None:
    build = KernelBuild.make(FIXTURES / "double_buffer_race.cu", {"PLANT_BUG": 1}, ("--fmad=false",))
    findings = audit_build(build).findings
    assert findings and {f.check for f in findings} == {"race"}
    assert any("a0" in f.reason for f in findings) and any("a1" in f.reason for f in findings)


def test_double_buffered_loop_with_its_barrier_is_clean() -> None:
    assert _checks(FIXTURES / "double_buffer_race.cu") == {}


def test_fma_in_an_exact_build_is_found_and_allowed_in_an_fma_build() -> None:
    assert _checks(FIXTURES / "fma_exact.cu")["fma-in-exact"] == 1
    assert "fma-in-exact" not in _checks(FIXTURES / "fma_exact.cu", exact=False)


def test_float_atomic_is_found() -> None:
    assert _checks(FIXTURES / "float_atomic.cu") == {"float-atomic": 1}


def test_barrier_under_thread_dependent_branch_is_found() -> None:
    assert _checks(FIXTURES / "divergent_barrier.cu").get("barrier-divergence") == 1


def test_branch_on_a_block_reduction_is_uniform() -> None:
    """bar.red's result is the same in every thread: a barrier behind a branch on it is clean."""
    assert _checks(FIXTURES / "reduced_barrier.cu") == {}


def test_store_through_an_input_pointer_is_found() -> None:
    assert _checks(FIXTURES / "input_store.cu") == {"global-store": 1}


def test_thread_private_reuse_and_separated_reads_are_clean() -> None:
    assert _checks(FIXTURES / "clean_private.cu") == {}


def test_ftz_from_cupys_flag_is_found_in_plain_float_arithmetic(tmp_path: Path) -> None:
    src = tmp_path / "plain_add.cu"
    src.write_text('extern "C" __global__ void plain_add(const float* a, float* b) '
                   "{ b[threadIdx.x] = a[threadIdx.x] + 1.0f; }\n")
    assert _checks(src) == {"ftz": 1}


# The two barriers of mmm.cu's k-loop: after the first k-tile's store, and at the end of
# every k-tile (after the next k-tile's store into the other stage).
MMM_BARRIERS = {
    "prologue-barrier": "    __syncthreads();\n#if STAGES == 2\n    // Two k-tiles per trip",
    "step-barrier": "        __syncthreads();\n    };",
}


@pytest.mark.parametrize("which", MMM_BARRIERS)
def test_shipped_mmm_with_one_barrier_removed_is_a_race(tmp_path: Path, which: str) -> None:
    for f in MMM_SOURCE.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    text = MMM_SOURCE.read_text()
    context = MMM_BARRIERS[which]
    assert text.count(context) == 1, f"mmm.cu changed: find the {which} again"
    (tmp_path / "mmm.cu").write_text(text.replace(context, context.replace("__syncthreads();\n", "\n", 1)))
    defines = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "MODE_FMA": 0,
               "SIG_I": 1, "SIG_M": 0, "SIG_E": 0}
    build = KernelBuild.make(tmp_path / "mmm.cu", defines, ("--fmad=false",))
    findings = audit_build(build).findings
    assert {f.check for f in findings} == {"race"}
    assert any("As" in f.reason for f in findings) and any("Bs" in f.reason for f in findings)


@pytest.mark.slow  # `make test` runs this same audit as its audit-ptx step, before the suite
def test_every_shipped_build_passes() -> None:
    builds = shipped_builds()
    sources = {b.source.name for b in builds}
    assert {"mmm.cu", "ecc.cu", "finite.cu"} <= sources
    reports = audit_builds(builds)
    assert [f.describe() for r in reports for f in r.findings] == []
    assert all(r.kernels for r in reports)


def test_cli_exit_codes_and_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert main(["audit", "ptx", "--source", str(FIXTURES / "float_atomic.cu"), "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert doc["findings"] == 1
    finding = doc["builds"][0]["findings"][0]
    assert finding["check"] == "float-atomic" and finding["line"] > 0 and "atom" in finding["ptx"]
    assert "float_atomic.cu" in capsys.readouterr().out
    assert main(["audit", "ptx", "--source", str(FIXTURES / "clean_private.cu")]) == 0
    assert main(["audit", "ptx", "--source", str(tmp_path / "missing.cu")]) == 2
