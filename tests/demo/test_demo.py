"""The whole demo on the CPU: safemon keeps every result right while faults are injected."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from safemon.commands import demo as demo_cmd
from safemon.demo.report import JSON_KEYS


@pytest.mark.timeout(120)
def test_demo_json_protected_equals_clean_and_every_fault_detected(
    model_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`safemon demo --json`: protected == clean accuracy, all faults detected, no wrong
    output released, and the unprotected run with the same faults is worse."""
    import tempfile

    monkeypatch.setenv("XDG_CACHE_HOME", str(model_cache.parent))
    run_tmp = model_cache.parent / "tmp"
    run_tmp.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(run_tmp))
    # reuse the session's trained model: cache_dir() is $XDG_CACHE_HOME/safemon
    target = model_cache.parent / "safemon"
    if not target.exists():
        target.symlink_to(model_cache, target_is_directory=True)
    parser = argparse.ArgumentParser()
    demo_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["demo", "--json", "--duration", "6"])
    code = args.handler(args)
    data = json.loads(capsys.readouterr().out)
    for key in JSON_KEYS:
        assert key in data
    assert data["faults_injected"] == 4
    assert data["faults_detected"] == data["faults_injected"], data["faults"]
    assert data["wrong_outputs_released"] == 0
    assert data["outputs_released"] > 0
    assert data["protected_accuracy"] == data["clean_accuracy"], data
    assert data["unprotected_faulty_accuracy"] < data["clean_accuracy"]
    # every detected fault led to a reaction with a measured FRTI; injected ones also an FDTI
    assert len(data["reactions"]) >= data["faults_detected"], data["reactions"]
    assert all(r["frti_ms"] >= 0 for r in data["reactions"])
    assert sum(r["fdti_ms"] is not None for r in data["reactions"]) >= data["faults_detected"]
    assert code == 0
    # the temporary runtime directory (sockets, log) is gone, and the report does not name it
    assert _leftovers(run_tmp) == []
    assert data["log_file"] is None


def test_read_reactions_takes_only_well_formed_fault_reaction_records(tmp_path: Path) -> None:
    from safemon.demo.runner import read_reactions

    log = tmp_path / "daemon.log"
    log.write_text("\n".join([
        '{"event": "fault_reaction", "kind": "crash", "fdti_s": 0.03, "frti_s": 0.0004}',
        '{"event": "fault_reaction", "kind": "deadline_miss", "fdti_s": null, "frti_s": 0.001}',
        '{"event": "mode_changed", "mode": "SAFE"}',
        'not json',
        '{"event": "fault_reaction", "kind": "crash", "frti_s": "fast"}',
    ]))
    assert read_reactions(log) == (("crash", 0.03, 0.0004), ("deadline_miss", None, 0.001))
    assert read_reactions(tmp_path / "missing.log") == ()


def _leftovers(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("safemon-demo-*"))


def test_demo_removes_its_temporary_run_dir_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A demo that ends with an error before its daemon started (here: a missing
    configuration file) leaves no /tmp/safemon-demo-* directory behind."""
    import tempfile

    from safemon.demo.runner import run_demo
    from safemon.errors import ConfigError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ConfigError):
        run_demo(tmp_path / "missing.yaml")
    assert _leftovers(tmp_path) == []


def test_a_demo_whose_daemon_failed_keeps_the_log_its_error_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review (2026-12-07): the demo removed its directory on every failure, also the
    daemon log its own error pointed to. configs/hft1.yaml on a host without a GPU: the
    daemon exits (its channels name GPUs), and the log stays where the error says."""
    import tempfile

    from safemon.demo.runner import run_demo
    from safemon.errors import SafemonError
    from safemon.kernels.backend import resolve_backend

    if resolve_backend("auto").on_device:
        pytest.skip("a GPU is usable here: hft1.yaml's daemon would start")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(SafemonError, match=r"daemon\.log") as caught:
        run_demo(Path(__file__).resolve().parents[2] / "configs" / "hft1.yaml")
    (kept,) = _leftovers(tmp_path)
    log = kept / "daemon.log"
    assert str(log) in str(caught.value) and "channels.0.gpu" in log.read_text()


def test_demo_keeps_its_run_dir_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keep_run_dir=True (`safemon demo --keep-run-dir`) keeps the directory."""
    import tempfile

    from safemon.demo.runner import run_demo
    from safemon.errors import ConfigError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ConfigError):
        run_demo(tmp_path / "missing.yaml", keep_run_dir=True)
    assert len(_leftovers(tmp_path)) == 1


def test_demo_cli_has_keep_run_dir() -> None:
    parser = argparse.ArgumentParser()
    demo_cmd.register(parser.add_subparsers())
    assert parser.parse_args(["demo"]).keep_run_dir is False
    assert parser.parse_args(["demo", "--keep-run-dir"]).keep_run_dir is True
