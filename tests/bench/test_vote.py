"""`safemon bench vote`: size parsing, and one small real run (daemon, channel processes,
echo process) whose evidence is complete and self-consistent. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from safemon.bench.vote import (
    FORMAT,
    HOST_SIZES,
    _refused_sizes,
    default_sizes,
    parse_sizes,
    run_vote_bench,
)


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


def test_a_size_the_benchmarks_daemon_would_refuse_fails_before_any_work() -> None:
    """Found by a user trial (2026-12-07): `safemon bench vote --backend numpy` with its
    default sizes ran its baselines for about 3 minutes and then failed, because its own
    daemon refuses 1024x1024x64 on the NumPy backend (priced over what a self-test may wait
    behind). Now such a size fails at once, named, and the NumPy backend's default sizes
    are ones it admits."""
    assert default_sizes("numpy") == HOST_SIZES
    big = parse_sizes("80,1024x1024x64", 10)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"1024x1024x64 \(InvalidInputError: .*min_channel_gflops"):
        run_vote_bench(sizes=big, transports=("ipc",), backend="numpy", warmup=1)
    assert time.monotonic() - t0 < 30.0  # nothing was started or timed
    assert _refused_sizes(parse_sizes(HOST_SIZES, 10), "numpy", False) == []


def test_the_size_check_reads_the_daemons_environment_and_the_pipelined_depth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A review (2026-12-07): the check priced sizes without the SAFEMON_* environment the
    benchmark's daemon inherits, and for a lone request only, while the pipelined part
    keeps `--depth` of them queued (160x160x160 is priced at 0.333 s on the NumPy backend:
    at depth 16 that is 5.3 s of work, over the 2.25 s a self-test may wait behind; at depth
    4, 1.3 s)."""
    sizes = parse_sizes("160", 10)
    assert _refused_sizes(sizes, "numpy", False, depth=4) == []
    (busy,) = _refused_sizes(sizes, "numpy", False, depth=16)
    assert busy.startswith("160x160x160 (BusyError:")
    big = parse_sizes("1024x1024x64", 10)
    assert _refused_sizes(big, "numpy", False)
    monkeypatch.setenv("SAFEMON_LIMITS__MIN_CHANNEL_GFLOPS", "1000.0")
    assert _refused_sizes(big, "numpy", False) == []
