"""`safemon bench vote`: size parsing, and one small real run (daemon, channel processes,
echo process) whose evidence is complete and self-consistent. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from safemon.bench.vote import FORMAT, parse_sizes


def test_parse_sizes() -> None:
    s = parse_sizes("80, 1024x1024x64", 100)
    assert [(x.m, x.n, x.k, x.requests) for x in s] == [(80, 80, 80, 100), (1024, 1024, 64, 20)]
    for bad in ("", "80x80", "0", "axb", "80x80x-1"):
        with pytest.raises(ValueError):
            parse_sizes(bad, 100)
    with pytest.raises(ValueError):
        parse_sizes("80", 5)


def test_bench_vote_small_run_writes_complete_evidence(tmp_path: Path) -> None:
    out = tmp_path / "vote.json"
    png = tmp_path / "vote.png"
    r = subprocess.run(
        [sys.executable, "-m", "safemon", "bench", "vote", "--backend", "numpy", "--sizes", "16,32x64x8",
         "--requests", "10", "--warmup", "2", "--depth", "4", "--transports", "ipc,tcp",
         "--json", str(out), "--plot", str(png)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ev = json.loads(out.read_text())
    assert ev["format"] == FORMAT and ev["backend"] == "numpy"
    assert [(run["transport"], run["size"]) for run in ev["runs"]] == [
        ("ipc", "16x16x16"), ("ipc", "32x64x8"), ("tcp", "16x16x16"), ("tcp", "32x64x8")]
    for run in ev["runs"]:
        assert run["round_trip"]["n"] == 10 and len(run["round_trip_samples_us"]) == 10
        # the overhead is the round trip less a non-negative kernel time
        assert run["overhead"]["p50_us"] <= run["round_trip"]["p50_us"]
        assert run["kernel"]["p50_us"] > 0
        assert run["pipelined_per_s"] > 0
    assert set(ev["echo"]) == {"16x16x16/zero-copy", "16x16x16/copy", "32x64x8/zero-copy", "32x64x8/copy"}
    assert "| ipc | 16x16x16 |" in r.stdout and "copied / zero-copy" in r.stdout
    assert png.stat().st_size > 1000
