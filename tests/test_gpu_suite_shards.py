"""scripts/gpu-suite's four shards select every gpu test once: `kernels-main` and
`kernels-other` split tests/kernels (plus tests/evidence), `rest` takes the rest of tests/
but tests/deploy, which must therefore hold no gpu test, and the gpu_alone tests, which
`alone` runs one at a time with nothing beside them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _selections() -> dict[str, str]:
    text = (REPO / "scripts/gpu-suite").read_text()
    return {name: sel for name, sel in re.findall(r"^\s*([a-z-]+)\)\s+sel=\(([^)]*)\)", text, re.M)}


def test_the_shards_are_the_ones_this_test_knows() -> None:
    assert _selections() == {
        "kernels-main": "-m gpu tests/kernels/test_gpu.py",
        "kernels-other": "-m gpu tests/kernels --ignore=tests/kernels/test_gpu.py tests/evidence",
        "rest": '-m "gpu and not gpu_alone" tests --ignore=tests/kernels --ignore=tests/evidence '
                "--ignore=tests/deploy",
        "alone": '-m "gpu and gpu_alone" tests --ignore=tests/kernels --ignore=tests/evidence '
                 "--ignore=tests/deploy",
    }


def test_every_gpu_alone_test_lies_where_rest_and_alone_look() -> None:
    """A gpu_alone test in tests/kernels or tests/evidence would run beside others in a
    parallel shard, and one in tests/deploy in no shard at all."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "-m", "gpu_alone", "tests"],
                         capture_output=True, text=True, cwd=REPO, check=False)
    assert out.returncode == 0, out.stdout[-2000:]
    alone = [line for line in out.stdout.splitlines() if "::" in line]
    assert alone, "no test is marked gpu_alone"
    outside = [t for t in alone if t.startswith(("tests/kernels/", "tests/evidence/", "tests/deploy/"))]
    assert not outside, outside


def test_the_directory_rest_leaves_out_holds_no_gpu_test() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "-m", "gpu", "tests/deploy"],
                         capture_output=True, text=True, cwd=REPO, check=False)
    # 5: collected, none selected. 0 would mean a gpu test there that no shard runs.
    assert out.returncode == 5, out.stdout[-2000:]
    assert "deselected" in out.stdout
