"""HFT 2 end to end: `safemon run` under 1oo3D with three channel processes over ipc://
(NumPy backend). Two channels faulted at once, returning the same wrong C, release nothing
wrong; the transient double fault leaves all three voting. A permanent double fault
isolates both faulty channels and the third carries on under 1oo1D. The daemon reports
its declared and effective HFT (status, metric, a warning at start)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from safemon.client import Client
from safemon.config import Config
from safemon.errors import DisagreementError, SafemonError

from .helpers import make_config, operands, reference, same_bits, system, wait_for

PY = [sys.executable, "-m", "safemon"]
#: Fault injection is off unless the config enables it (testing.fault_injection).
INJECTION: dict[str, Any] = {"testing": {"fault_injection": True}}
#: Periodic self-tests far apart (a long DTI): each injected bit flip is then consumed by
#: the live request it is meant to corrupt, not by a periodic self-test in between.
#: On-demand self-tests (the 1oo3D diagnosis) still run at once.
#: Deadlines are generous bounds for a loaded 2-core machine, not timing claims.
QUIET_TIMING: dict[str, Any] = {
    "request_deadline_s": 5.0, "dti_s": 120.0, "dti_jitter": 0.0, "selftest_deadline_s": 3.0,
    "heartbeat_timeout_s": 5.0, "ftti_s": 123.0, "scrub_interval_s": None,
}


def _config(tmp_path: Path, **kw: Any) -> Config:
    return make_config(tmp_path, "1oo3D", extra={"timing": QUIET_TIMING, **INJECTION}, **kw)


@pytest.fixture
def daemon_process(tmp_path: Path) -> Iterator[tuple[Config, Path, Path]]:
    """`safemon run` on a 1oo3D config with channel processes over ipc; yields the config,
    its file and the daemon's stderr (JSON logs)."""
    cfg = _config(tmp_path, placement="process", transport="ipc")
    path = tmp_path / "hft2.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    err_path = tmp_path / "run.err"
    with (tmp_path / "run.out").open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen([*PY, "run", "--config", str(path)], stdout=out, stderr=err)
        try:
            yield cfg, path, err_path
        finally:
            proc.terminate()
            try:
                proc.wait(cfg.timing.drain_timeout_s + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _status_cli(path: Path) -> dict[str, Any]:
    r = subprocess.run([*PY, "status", "--json", "--config", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _all_up(client: Client) -> bool:
    try:
        st = client.status()
    except SafemonError:
        return False
    return st["mode"] == "NORMAL" and all(c["state"] == "UP" for c in st["channels"])


def test_two_channels_faulted_at_once_release_nothing_wrong(
    daemon_process: tuple[Config, Path, Path],
) -> None:
    """Five rounds, each with bitflip-c armed on two channels at once (a different pair
    each round): both return the same wrong C, and 1oo3D withholds it every time
    (DisagreementError), self-tests all three (they pass: the flip was transient) and
    keeps voting with all three. A clean request afterwards is released bit-exact."""
    cfg, _path, err_path = daemon_process
    x, w = operands(11)
    ref = reference(x, w, cfg)
    with Client(cfg) as client:
        assert wait_for(lambda: _all_up(client), 60.0), err_path.read_text()[-4000:]
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=10.0), ref)
        pairs = [("c0", "c1"), ("c1", "c2"), ("c0", "c2"), ("c0", "c1"), ("c1", "c2")]
        for i, pair in enumerate(pairs):
            for ch in pair:
                client.inject(ch, "bitflip-c")
            try:
                got = client.matmul(x, wid, timeout=10.0)
            except DisagreementError:
                pass
            else:
                assert same_bits(got, ref), f"round {i}: {pair} faulted, a wrong C was released"
                pytest.fail(f"round {i}: {pair} faulted, yet the request was released")
            # The diagnosis of this mismatch ends with three passed self-tests.
            def diagnosed(n: int = i + 1) -> bool:
                return bool(client.status()["unexplained_mismatches"] == n)

            assert wait_for(diagnosed, 30.0), (client.status(), err_path.read_text()[-4000:])
        assert _all_up(client) and client.status()["effective_policy"] == "1oo3D"
        assert same_bits(client.matmul(x, wid, timeout=10.0), ref)
    assert '"event": "disagreement"' in err_path.read_text()


def test_status_metric_and_start_warning_report_the_hft(
    daemon_process: tuple[Config, Path, Path],
) -> None:
    """1oo3D declares HFT 2; three NumPy channels share the host CPU, so the effective
    HFT is 0: `safemon status --json`, safemon_hft and a warning at start all say so."""
    cfg, path, err_path = daemon_process
    with Client(cfg) as client:
        assert wait_for(lambda: _all_up(client), 60.0), err_path.read_text()[-4000:]
    st = _status_cli(path)
    assert (st["policy"], st["hft_declared"], st["hft_effective"]) == ("1oo3D", 2, 0)
    assert "share host-cpu" in st["hft_reason"]
    assert st["hft_hardware"] == {"host-cpu": ["c0", "c1", "c2"]}
    text_status = subprocess.run([*PY, "status", "--config", str(path)], capture_output=True,
                                 text=True, timeout=60)
    assert "HFT declared 2, effective 0: " in text_status.stdout, text_status.stderr
    with urllib.request.urlopen(st["metrics_url"], timeout=10) as resp:
        text = resp.read().decode()
    assert 'safemon_hft{kind="declared"} 2.0' in text
    assert 'safemon_hft{kind="effective"} 0.0' in text
    warnings = [json.loads(line) for line in err_path.read_text().splitlines()
                if '"hft_below_declared"' in line]
    assert len(warnings) == 1
    assert (warnings[0]["declared"], warnings[0]["effective"]) == (2, 0)


def test_a_permanent_double_fault_isolates_both_and_the_third_carries_on(tmp_path: Path) -> None:
    """stuck on two channels: the request is withheld, both fail their self-tests and are
    isolated, and the survivor runs 1oo1D (DEGRADED) and still releases the clean C.
    (In-process stream channels: the reaction logic is the same, the start is faster.)"""
    cfg = _config(tmp_path)
    x, w = operands(12)
    ref = reference(x, w, cfg)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=10.0), ref)
        assert daemon.status()["hft_effective"] == 0
        client.inject("c0", "stuck")
        client.inject("c2", "stuck")
        with pytest.raises(DisagreementError):
            client.matmul(x, wid, timeout=10.0)

        def degraded() -> bool:
            st = client.status()
            return st["effective_policy"] == "1oo1D" and [c["state"] for c in st["channels"]] == [
                "ISOLATED", "UP", "ISOLATED"]

        assert wait_for(degraded, 30.0), client.status()
        st = client.status()
        assert st["mode"] == "DEGRADED" and st["voting"] == ["c1"]
        assert (st["hft_declared"], st["hft_effective"]) == (2, 0)
        assert st["hft_reason"].startswith("Degraded: voting under 1oo1D (HFT 0)")
        assert daemon.registry.get_sample_value("safemon_hft", {"kind": "effective"}) == 0
        for _ in range(3):
            assert same_bits(client.matmul(x, wid, timeout=10.0), ref)
