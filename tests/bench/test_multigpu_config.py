"""The multi-GPU benchmark's deployments (`safemon.bench.multigpu`) are valid
configs on the CPU: every deployment of both sets loads through `load_config`, runs on the
GPUs it names, and the fault deployments enable injection and turn restarts off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from safemon.bench.multigpu import SETS, Deployment, deployment_config
from safemon.config import load_config


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_deployment_of_a_set_is_a_valid_config(name: str, tmp_path: Path) -> None:
    deployments = SETS[name]()
    assert sum(d.baseline for d in deployments) == (1 if any(d.measure for d in deployments)
                                                    else 0)
    for i, d in enumerate(deployments):
        data = deployment_config(d, tmp_path, f"t-{i}")
        path = tmp_path / f"t-{i}.yaml"
        path.write_text(yaml.safe_dump(data))
        cfg = load_config(path, env={})
        assert cfg.channels is not None
        gpus = tuple(ch.gpu for ch in cfg.channels)
        if d.gpus is not None:
            assert gpus == d.gpus
        assert cfg.testing.fault_injection is (d.faults is not None)
        if d.faults is not None:
            assert not cfg.actions.restart
            assert {g for _kind, g in d.faults} <= set(gpus)


def test_the_single_channel_baseline_is_1oo1d_on_one_gpu(tmp_path: Path) -> None:
    d = Deployment("b", "2oo3-3gpu", (1,), single=True, baseline=True)
    data = deployment_config(d, tmp_path, "b")
    assert data["policy"] == "1oo1D" and "degraded_policy" not in data
    assert [ch["gpu"] for ch in data["channels"]] == [1]


def test_gpus_that_do_not_fit_the_channels_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2 GPUs for 3 channels"):
        deployment_config(Deployment("x", "2oo3-3gpu", (0, 1)), tmp_path, "x")


def test_the_three_gpu_set_leaves_gpu_0_to_the_app(tmp_path: Path) -> None:
    for d in SETS["three"]():
        data = deployment_config(d, tmp_path, "t")
        assert 0 not in [ch["gpu"] for ch in data["channels"]]


@pytest.mark.slow
def test_the_harness_runs_end_to_end_on_the_host_cpu(tmp_path: Path) -> None:
    """`run_bench` with backend numpy (every channel on the host CPU): a 1oo1D baseline and
    a faulted 1oo2D through real daemons (about 40 s on two cores, hence slow). Both 1oo2D
    channels share the host CPU, so the "GPU-wide" fault reaches both alike and their
    agreeing wrong product is released: the effective HFT 0 the report shows."""
    from safemon.bench.multigpu import run_bench
    from safemon.bench.multigpu_report import markdown

    deps = (Deployment("base", "1oo2d-2gpu", (0,), single=True, baseline=True),
            Deployment("pair", "1oo2d-2gpu", faults=(("stuck", 1),)))
    ev = run_bench(deps, shape=(4, 8, 8), requests=10, warmup=2, backend="numpy",
                   model=True, model_dims=(4, 16, 2), work_dir=tmp_path)
    assert ev["same_product_everywhere"] and ev["peer_copies"] == [] and "direct" not in ev
    base, pair = ev["deployments"]
    assert "model" not in base and pair["model"]["per_s"] > 0  # 1oo1D takes no model requests
    assert base["per_s"] > 0 and pair["hft_hardware"] == {"host-cpu": ["ch-a", "ch-b"]}
    (step,) = pair["faults"]
    # Both channels share the host CPU: the "GPU" fault reaches both alike (effective HFT 0).
    assert tuple(step["channels"]) == ("ch-a", "ch-b") and step["outcome"] == "released-wrong"
    text = markdown(ev)
    assert "Whole-model requests (mlp2x16/batch4" in text
    assert "| base |" in text and "| pair | stuck | 1 | ch-a, ch-b | released-wrong | released-wrong |" in text


def _evidence(direct: dict) -> dict:
    st = {"p50_us": 1000.0, "p99_us": 1200.0}
    return {"shape": "4x8x8", "app_gpu": 0, "when": "now", "requests": 3, "depth": 8,
            "devices": [{"index": 0, "name": "gpu", "uuid": "GPU-0"}],
            "same_product_everywhere": True, "peer_copies": [], "direct": direct,
            "deployments": [{"label": "pair", "gpus": [0, 1], "hft_declared": 1,
                             "hft_effective": 1, "per_s": 50.0,
                             "round_trip": {"host": st, "to_app_gpu": st}}]}


def test_report_names_the_protected_baseline_by_the_variant_it_ran() -> None:
    """The direct protected baseline runs the channels' default variant. Until 2026-11-24 the
    evidence called it "ones/I exact" even after the default became ones/T fma; the report
    names what the run recorded, and an old file's baseline only as the default variant."""
    from safemon.bench.multigpu import default_variant_label
    from safemon.bench.multigpu_report import markdown

    entry = {"p50_us": 10_000.0, "p99_us": 11_000.0, "per_s": 100.0}
    new = markdown(_evidence({"gpu": 0, "protected_variant": default_variant_label(),
                              "unprotected": entry, "protected": entry}))
    assert default_variant_label() == "ones/T fma"
    assert "× direct protected (ones/T fma) |" in new and "| 0.50 | 0.50 |" in new
    assert "| protected (ones/T fma) | 10000 | 11000 | 100.0 |" in new
    old = markdown(_evidence({"gpu": 0, "unprotected": entry, "ones/I exact": entry}))
    assert "× direct protected (the channels' default variant) |" in old
    assert "| 0.50 | 0.50 |" in old and "ones/I" not in old
