"""Multi-GPU checks on real GPUs (`multigpu(n)`: skipped with fewer than n visible CUDA
devices; scripts/multigpu-check runs them). The released product moves to the app's GPU
bit-exact by a peer copy; every GPU reports its own UUID and the effective HFT counts them;
through a real daemon, a GPU-wide stuck fault is handled as the policy says (1oo2D on two
GPUs; 2oo3 and 1oo3D on GPUs 1-3 with GPU 0 left to the app)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from safemon.bench.multigpu import CONFIGS, Deployment, _daemon, deployment_config
from safemon.channels.gpu_faults import hardware_from_status, run_fault_sequence
from safemon.config import load_config
from safemon.errors import InvalidInputError
from safemon.gpu_identity import cuda_uuid
from safemon.hft import assess, channel_hardware


def _cp() -> Any:
    from safemon.kernels.compiler import import_cupy

    return import_cupy()


@pytest.mark.multigpu(2)
def test_a_peer_copy_moves_the_product_bit_exact_onto_the_app_gpu() -> None:
    from safemon.transport.peer_copy import copy_to_device, host_staged_copy

    cp = _cp()
    with cp.cuda.Device(1):
        src = cp.random.default_rng(7).standard_normal((64, 4096), dtype=cp.float32)
    for fn in (copy_to_device, host_staged_copy):
        out = fn(src, 0)
        assert out.device.id == 0 and out.shape == src.shape and out.dtype == src.dtype
        assert cp.asnumpy(out).tobytes() == cp.asnumpy(src).tobytes()


@pytest.mark.multigpu(2)
def test_a_peer_copy_refuses_host_arrays_strided_views_and_missing_devices() -> None:
    from safemon.transport.peer_copy import copy_to_device

    cp = _cp()
    with cp.cuda.Device(1):
        src = cp.zeros((8, 8), dtype=cp.float32)
    with pytest.raises(InvalidInputError, match="CuPy array"):
        copy_to_device(np.zeros((8, 8), np.float32), 0)
    with pytest.raises(InvalidInputError, match="C-contiguous"):
        copy_to_device(src[:, ::2], 0)
    with pytest.raises(InvalidInputError, match="no CUDA device"):
        copy_to_device(src, cp.cuda.runtime.getDeviceCount())


@pytest.mark.multigpu(2)
def test_each_gpu_reports_its_own_uuid_and_the_2gpu_configs_earn_their_hft() -> None:
    n = _cp().cuda.runtime.getDeviceCount()
    uuids = [cuda_uuid(i) for i in range(n)]
    assert len(set(uuids)) == n
    for name, expected in (("1oo2d-2gpu", (1, 1)), ("2oo3-2gpu", (1, 0)), ("hft2-2gpu", (2, 1))):
        cfg = load_config(CONFIGS / f"{name}.yaml", env={})
        assert cfg.channels is not None
        hw = channel_hardware(cfg, "cupy", {c.name: uuids[c.gpu or 0] for c in cfg.channels})
        a = assess(cfg.policy, cfg.policy, hw)
        assert (a.declared, a.effective) == expected, a.reason


@pytest.mark.multigpu(4)
def test_the_3gpu_configs_earn_hft_1_for_2oo3_and_2_for_1oo3d() -> None:
    for name, expected in (("2oo3-3gpu", (1, 1)), ("hft2-3gpu", (2, 2))):
        cfg = load_config(CONFIGS / f"{name}.yaml", env={})
        assert cfg.channels is not None
        hw = channel_hardware(cfg, "cupy", {c.name: cuda_uuid(c.gpu or 0) for c in cfg.channels})
        a = assess(cfg.policy, cfg.policy, hw)
        assert (a.declared, a.effective) == expected, a.reason


def _sequence(tmp_path: Path, source: str, fault_gpus: tuple[int, ...]) -> tuple[dict[str, Any], list[Any]]:
    """Start `source` through a real daemon (faults on, restarts off), read its status, then
    fault `fault_gpus` one after the other with a GPU-wide stuck fault (64×256×512)."""
    d = Deployment(source, source, faults=tuple(("stuck", g) for g in fault_gpus))
    data = deployment_config(d, tmp_path, "mg")
    path = tmp_path / "mg.yaml"
    path.write_text(yaml.safe_dump(data))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 512), dtype=np.float32)
    w = rng.standard_normal((512, 256), dtype=np.float32)
    with _daemon(path, tmp_path / "mg.log", 300.0) as client:
        st = client.status()
        wid = client.register_weight(w)
        ref = client.matmul(x, wid, timeout=30.0)
        hw = hardware_from_status(st)
        by_gpu = {ch["gpu"]: hw[ch["name"]] for ch in data["channels"]}
        steps = run_fault_sequence(client, hw, [(by_gpu[g], "stuck") for g in fault_gpus], x,
                                   wid, ref, timeout=30.0)
    return st, steps


@pytest.mark.multigpu(2)
def test_1oo2d_one_channel_per_gpu_isolates_a_faulty_gpu_and_continues(tmp_path: Path) -> None:
    st, (step,) = _sequence(tmp_path, "1oo2d-2gpu", (1,))
    assert (st["hft_declared"], st["hft_effective"]) == (1, 1)
    assert set(st["hft_hardware"]) == {cuda_uuid(0), cuda_uuid(1)}
    assert step.outcome.startswith("withheld")
    assert (step.policy, step.voting, step.after[-1]) == ("1oo1D", ("ch-a",), "released-correct")
    assert not any("wrong" in o for o in step.after)


@pytest.mark.multigpu(4)
def test_2oo3_on_gpus_1_to_3_masks_one_gpu_and_goes_safe_on_a_second(tmp_path: Path) -> None:
    st, (first, second) = _sequence(tmp_path, "2oo3-3gpu", (1, 2))
    assert (st["hft_declared"], st["hft_effective"]) == (1, 1)
    assert (first.outcome, first.after) == ("released-correct", ("released-correct",))
    assert (first.policy, first.voting) == ("2oo2", ("ch1", "ch2"))
    assert second.outcome.startswith("withheld") and second.mode == "SAFE"


@pytest.mark.multigpu(4)
def test_1oo3d_on_gpus_1_to_3_isolates_each_faulty_gpu_and_releases_nothing_wrong(
    tmp_path: Path,
) -> None:
    st, (first, second) = _sequence(tmp_path, "hft2-3gpu", (1, 2))
    assert (st["hft_declared"], st["hft_effective"]) == (2, 2)
    assert first.outcome.startswith("withheld") and second.outcome.startswith("withheld")
    assert not any("wrong" in o for s in (first, second) for o in (s.outcome, *s.after))
    assert (first.policy, first.voting, first.after[-1]) == ("1oo2D", ("ch1", "ch2"),
                                                             "released-correct")
    assert (second.policy, second.voting, second.after[-1]) == ("1oo1D", ("ch2",),
                                                                "released-correct")


@pytest.mark.multigpu(2)
def test_device_requests_cross_gpus_peer_to_peer_and_land_on_the_app_gpu(tmp_path: Path) -> None:
    """1oo2D with one channel per GPU: a CuPy x on GPU 0 (then on GPU 1) goes through the
    client's CUDA IPC buffers; the channel on the other GPU reads x and writes its slot peer
    to peer; the released C is on x's GPU and equals the host path's bits."""
    cp = _cp()
    data = deployment_config(Deployment("1oo2d-2gpu", "1oo2d-2gpu"), tmp_path, "dev")
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 512), dtype=np.float32)
    w = rng.standard_normal((512, 256), dtype=np.float32)
    with _daemon(path, tmp_path / "dev.log", 300.0) as client:
        wid = client.register_weight(w)
        ref = client.matmul(x, wid, timeout=30.0)
        for gpu in (0, 1):
            with cp.cuda.Device(gpu):
                got = client.matmul(cp.asarray(x), wid, timeout=30.0)
            assert client.last_request_device, client.device_io_off_reason
            assert got.device.id == gpu
            assert cp.asnumpy(got).tobytes() == ref.tobytes()
