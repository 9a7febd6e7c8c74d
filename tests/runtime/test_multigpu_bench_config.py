"""The multi-GPU benchmark's deployments (`safemon.patterns.multigpu_bench`) are valid
configs on the CPU: every deployment of both sets loads through `load_config`, runs on the
GPUs it names, and the fault deployments enable injection and turn restarts off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from safemon.config import load_config
from safemon.patterns.multigpu_bench import SETS, Deployment, deployment_config


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_deployment_of_a_set_is_a_valid_config(name: str, tmp_path: Path) -> None:
    deployments = SETS[name]()
    assert sum(d.baseline for d in deployments) == 1
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
            assert set(d.faults[1]) <= set(gpus)


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
