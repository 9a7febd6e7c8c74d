"""safemon.mps: where CUDA looks for an MPS control daemon, whether one is there, and what
the daemon reports about it (metric and log), with real pipes in a temporary directory."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from safemon.mps import DEFAULT_PIPE_DIRECTORY, control_pipe_found, pipe_directory, shared_gpus

from .runtime.helpers import make_config, system


def test_the_pipe_directory_is_the_environments_or_cudas_default(tmp_path: Path) -> None:
    assert pipe_directory({}) == DEFAULT_PIPE_DIRECTORY == Path("/tmp/nvidia-mps")
    assert pipe_directory({"CUDA_MPS_PIPE_DIRECTORY": ""}) == DEFAULT_PIPE_DIRECTORY
    assert pipe_directory({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) == tmp_path


def test_a_control_fifo_or_listening_socket_is_found_and_anything_else_is_not(tmp_path: Path
                                                                                ) -> None:
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}
    assert not control_pipe_found(env)  # nothing there
    assert not control_pipe_found({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "missing")})
    (tmp_path / "control").write_text("")  # a plain file is not a control pipe
    assert not control_pipe_found(env)
    (tmp_path / "control").unlink()
    os.mkfifo(tmp_path / "control")
    assert control_pipe_found(env)
    (tmp_path / "control").unlink()
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # AF_UNIX paths: ~108 bytes
        env_short = {"CUDA_MPS_PIPE_DIRECTORY": short}
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(str(Path(short) / "control"))
            assert not control_pipe_found(env_short)  # bound, nobody listening
            s.listen(1)
            assert control_pipe_found(env_short)  # a control daemon's socket
            assert control_pipe_found(env_short)  # the probe's connection is closed at once
        finally:
            s.close()
        # what a killed control daemon leaves: the socket file, no listener
        assert (Path(short) / "control").is_socket()
        assert not control_pipe_found(env_short)
        (Path(short) / "control").unlink()
        # a listener of the other type (CUDA 13's control daemon: SOCK_SEQPACKET)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.bind(str(Path(short) / "control"))
            s.listen(1)
            assert control_pipe_found(env_short)
        finally:
            s.close()


def test_shared_gpus_counts_the_default_device_as_zero() -> None:
    assert shared_gpus([None, 0, 1]) == [0]
    assert shared_gpus([0, 1, 2]) == []
    assert shared_gpus([None, None, None, 3, 3]) == [0, 3]


@pytest.mark.parametrize("found", [False, True])
def test_the_daemon_reports_mps_in_its_metric_and_log(tmp_path: Path, found: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`_report_mps` runs at start on a GPU backend only; called here on a running NumPy
    daemon with the environment pointing at a directory with or without a control FIFO."""
    pipes = tmp_path / "mps"
    pipes.mkdir()
    if found:
        os.mkfifo(pipes / "control")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipes))
    cfg = make_config(tmp_path, "2oo3")
    with system(cfg) as (daemon, _client):
        assert daemon.registry.get_sample_value("safemon_cuda_mps_found") == 0  # NumPy backend
        with capture_logs() as logs:
            daemon._report_mps(daemon.config)
        assert daemon.registry.get_sample_value("safemon_cuda_mps_found") == (1 if found else 0)
    events = {e["event"]: e for e in logs}
    if found:
        assert events["cuda_mps_found"]["pipe_directory"] == str(pipes)
        assert "cuda_mps_not_found" not in events
    else:  # the three channels of the 2oo3 config share the default GPU
        assert events["cuda_mps_not_found"]["shared_gpus"] == [0]
        assert events["cuda_mps_not_found"]["log_level"] == "warning"
