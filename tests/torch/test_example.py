"""examples/torch_digits.py end to end in a child process (it starts its own daemon): for
the CNN, the transformer block and the nn.TransformerEncoderLayer model, a stuck-at fault
kept in one of three channels releases no wrong output, the protected model classifies like
plain PyTorch, and the report names what was and was not protected.

The CPU run is the example's own `main` on the NumPy backend with one epoch, one timed
batch and the first `CPU_TEST_SAMPLES` test digits (the emulated kernels cost about a
second per batch of 16 on two cores; every code path is the example's). The `gpu` run is
the example as `--device cuda` runs it, on the CuPy backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torch_digits.py"

#: Test digits the CPU run evaluates on (10 batches of 16, a fault injected before each).
CPU_TEST_SAMPLES = 160

#: Runs the example's `main` with its test split cut to the first N digits (argv[1]).
_CUT_TEST_SPLIT = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("torch_digits", sys.argv[2])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
n, load = int(sys.argv[1]), mod.load_digits_split
def cut(device):
    x_tr, y_tr, x_te, y_te = load(device)
    return x_tr, y_tr, x_te[:n], y_te[:n]
mod.load_digits_split = cut
sys.exit(mod.main(sys.argv[3:]))
"""

#: What the example protects in each model, and what it leaves to PyTorch.
EXPECTED = {
    "cnn": {"protected": ["features.0", "features.2", "head.0", "head.2"],
            "unprotected": ["features.4", "features.5"], "requests": 3},
    "transformer": {"protected": ["embed", "qkv", "proj", "ffn.0", "ffn.2", "head"],
                    "unprotected": ["norm1", "norm2"], "requests": 5},
    # the whole Sequential after its first Flatten in one request; the encoder layer's
    # residual adds ("3"), attention scores ("3.self_attn") and norms protected by redundancy
    "encoder": {"protected": ["1", "3.self_attn", "3.self_attn.out_proj", "3.linear1",
                              "3.linear2", "5"],
                "redundant": ["3", "3.self_attn", "3.norm1", "3.norm2"],
                "unprotected": ["0"], "requests": 1},
}

#: |protected - PyTorch| clean accuracy allowed: released outputs equal safemon's
#: `reference_forward` bit for bit, not PyTorch's F.linear/conv (which round differently,
#: TF32 convolutions on a GPU), so a near-tie may classify differently.
ACCURACY_SLACK = 0.02


def _env(backend: str) -> dict[str, str]:
    """This environment without SAFEMON_* settings, and the daemon's backend pinned (the
    embedded default's "auto" would pick CuPy for the CPU run on a GPU host)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAFEMON_")}
    env.update(SAFEMON_BACKEND=backend, PYTHONUNBUFFERED="1")
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=EXAMPLE.parents[1], stdin=subprocess.DEVNULL)


def _check_report(report: dict[str, Any], n_test: int, out: str) -> None:
    """The facts every run of the example must report, for both models."""
    assert "errors" not in report, report.get("errors")
    assert set(report["models"]) == set(EXPECTED), out
    assert report["policy"] == "2oo3"
    for name, r in report["models"].items():
        want, f = EXPECTED[name], r["faults"]
        assert r["protected_layers"] == want["protected"], name
        assert r["unprotected_modules"] == want["unprotected"], name
        assert r["redundant_steps"] == want.get("redundant", []), name
        assert r["requests_per_forward"] == want["requests"], name
        # The safety claim: every protected module's released output was checked against
        # reference_forward on its input, bit for bit, while the fault was in ch1.
        assert f["wrong_outputs_released"] == 0, (name, f)
        assert f["faults_injected"] > 0, (name, f)
        assert f["protected_outputs_released"] > 0, (name, f)
        assert f["channel"] == "ch1"
        # Released outputs are the same bits with or without the fault, so every batch
        # that was not refused classifies exactly as in the clean protected pass.
        clean, faulty = r["accuracy_clean_protected"], f["accuracy"]
        refused = f["samples_refused"] / n_test
        assert clean - refused - 1e-9 <= faulty <= clean + 1e-9, (name, clean, faulty, refused)
        assert abs(clean - r["accuracy_clean_pytorch"]) <= ACCURACY_SLACK, (name, r)
        # The fault does bite the unprotected model (else the run proves nothing).
        assert r["accuracy_unprotected_with_faults"] < r["accuracy_clean_pytorch"] - 0.2, name
        assert r["daemon_ready_after_faults"] is True, name


def _check_layer_bench(report: dict[str, Any], n: int, path: str) -> None:
    """The layer bench ran every call it times (a protected Linear, the client's `run` and
    `matmul`, PyTorch) on the shape asked for, through the expected path."""
    bench = report["layer_bench"]
    assert bench["shape"] == [64, n, n] and bench["device_path"] == path, bench
    for call in ("pytorch", "protected_layer", "client_run", "client_matmul"):
        assert bench[call]["p50"] > 0, (call, bench)


def test_example_on_the_cpu_releases_no_wrong_output(tmp_path: Path) -> None:
    """CPU, NumPy backend: exit 0; for both models 0 wrong outputs released with faults
    injected, clean protected accuracy that of PyTorch, the protected/unprotected lists."""
    out_json = tmp_path / "report.json"
    argv = [sys.executable, "-c", _CUT_TEST_SPLIT, str(CPU_TEST_SAMPLES), str(EXAMPLE),
            "--device", "cpu", "--epochs", "1", "--reps", "1", "--batch", "16",
            "--layer-bench", "32", "--out", str(out_json), "--run-dir", str(tmp_path / "run")]
    done = _run(argv, _env("numpy"), timeout=240)
    log = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, log
    report = json.loads(out_json.read_text())
    assert report["backend"] == "numpy" and report["device"].startswith("CPU"), report
    _check_report(report, CPU_TEST_SAMPLES, log)
    for r in report["models"].values():
        assert r["device_path"] == "host"
    _check_layer_bench(report, 32, "host")


@pytest.mark.gpu
def test_example_on_cuda_releases_no_wrong_output(tmp_path: Path) -> None:
    """`--device cuda` (CuPy backend, the example's GPU timing): the same report facts as
    on the CPU, on the whole test split, with CUDA tensors in and out."""
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    out_json = tmp_path / "report.json"
    argv = [sys.executable, str(EXAMPLE), "--device", "cuda", "--epochs", "2", "--reps", "5",
            "--layer-bench", "256", "--out", str(out_json), "--run-dir", str(tmp_path / "run")]
    done = _run(argv, _env("cupy"), timeout=280)
    log = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, log
    report = json.loads(out_json.read_text())
    assert report["backend"] == "cupy" and not report["device"].startswith("CPU"), report
    n_test = 1797 - int(0.7 * 1797)  # the example's split: 70 % train
    _check_report(report, n_test, log)
    for r in report["models"].values():
        assert r["latency_ms"]["batch"] == 64  # the example's CUDA default
    _check_layer_bench(report, 256, "cuda-ipc")
