"""Probe: the CPU time one voted request costs each process of a 2oo3 deployment.

usage: python3 scripts/runtime_cpu_probe.py [--tree DIR ...] [--rounds 4] [--requests 1000]
                                            [--size 8] [--variant unprotected] [--out FILE]
                                            [--device] [--placement process|stream|inline]
                                            [--model BATCHxHIDDENxLAYERS]

Starts a 2oo3 daemon on the NumPy backend (three channel processes, ipc://, the vote
benchmark's config), registers an N×N weight and sends `--requests` sequential
`Client.matmul` calls with an N×N host x, after 50 warm-up calls. For each process
(client, daemon, each channel) it reads the CPU time of every thread from /proc before and
after, and prints the CPU microseconds per request next to the round trip's p50 / p90.

The point of the small default shape (8×8×8, unprotected) is that the channels' kernel
costs next to nothing: what is left is safemon's own per-request work (message codec,
sockets, the daemon's loop and core, the channels' loop). CPU time, unlike a round trip,
does not depend on how the 2-core CI VM schedules five busy processes, so it is the
steadier figure there; round trips on such a machine mostly measure contention.

`--device` measures the GPU path instead (a CuPy daemon, CuPy x: device-resident requests),
`--placement` the channels' placement, `--model` whole-model requests of an MLP with gelu
and biases instead of products.

`--tree` (repeatable) runs the same measurement against another source tree, e.g. a
`git worktree` of an older commit (its `safemon` package is put first on PYTHONPATH, for
the client, the daemon and the channels alike). Trees are run in turn for `--rounds`
rounds, so that a comparison is made in one run; medians over rounds are printed per tree.
Linux only (/proc).

Also counted, through a `sitecustomize` put first on the daemon's PYTHONPATH: how often the
daemon ran its timers (`Daemon._advance`) per request, during the timed requests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

#: The daemon's sitecustomize: counts `Daemon._advance` calls into a file named by
#: SMPROBE_TIMERS (rewritten on each call: the count when the daemon stops).
TIMER_HOOK = """
import os
_out = os.environ.get("SMPROBE_TIMERS")
if _out:
    import sys
    if sys.argv[1:2] == ["run"] or "safemon" in sys.argv[0]:
        try:
            import safemon.daemon as _d
        except Exception:
            _d = None
        if _d is not None and hasattr(_d.Daemon, "_advance"):
            _inner = _d.Daemon._advance
            _n = [0]

            def _advance(self, now):
                _n[0] += 1
                if _n[0] % 16 == 0:
                    with open(_out, "w") as f:
                        f.write(str(_n[0]))
                return _inner(self, now)
            _d.Daemon._advance = _advance
"""

VARIANTS = {
    "unprotected": {"checksum": None, "level": None},
    "ones/I": {"checksum": "ones", "level": "I", "mode": "exact"},
}


def _thread_cpu_s(pid: int) -> float:
    """User + system CPU seconds of every thread of `pid` (0.0 if it is gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0.0
    for tid in tasks:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _children(pid: int) -> list[int]:
    """The live child processes of `pid`, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def measure(size: int, requests: int, variant: str, device: bool = False,
            placement: str = "process", model: str | None = None) -> dict[str, float]:
    """One measurement in this process (the client): CPU µs per request by process, and
    the round trip's p50 / p90 in µs. `device`: a CuPy daemon and CuPy x (device-resident
    requests); `model` BATCHxHIDDENxLAYERS: `Client.run` of that MLP instead of a product."""
    import numpy as np
    import yaml

    from safemon.bench.vote import _bench_config, running_daemon

    work = Path(tempfile.mkdtemp(prefix="smcpu-"))
    cfg = _bench_config(work, "ipc", "cupy" if device else "numpy", [f"{size}x{size}x{size}"])
    for ch in cfg["channels"]:
        ch["variant"] = VARIANTS[variant]
        ch["placement"] = placement
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rng = np.random.default_rng(0)
    m, k, depth = (int(v) for v in model.split("x")) if model else (size, size, 0)
    w = (rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    if device:
        import cupy

        x = cupy.asarray(x)
    with running_daemon(path, work / "daemon.log", 240.0) as client:
        client.control_timeout_s = 60.0
        wid = client.register_weight(w)
        call = lambda: client.matmul(x, wid)  # noqa: E731
        if model:
            from safemon.models import Layer

            mid = client.register_model(
                [Layer(wid, rng.standard_normal(k).astype(np.float32), "gelu")] * depth)
            call = lambda: client.run(mid, x)  # noqa: E731
        for _ in range(50):
            call()
        (daemon,) = _children(os.getpid())
        procs = {"client": os.getpid(), "daemon": daemon}
        procs.update({f"channel{i}": p for i, p in enumerate(sorted(_children(daemon)))})
        timers = Path(os.environ.get("SMPROBE_TIMERS", "/nonexistent"))
        timers_before = int(timers.read_text()) if timers.exists() else 0
        before = {k: _thread_cpu_s(p) for k, p in procs.items()}
        times = []
        for _ in range(requests):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        after = {k: _thread_cpu_s(p) for k, p in procs.items()}
        timers_after = int(timers.read_text()) if timers.exists() else 0
    times.sort()
    out = {f"{k}_cpu_us": (after[k] - before[k]) / requests * 1e6 for k in procs}
    out["timer_runs_per_request"] = (timers_after - timers_before) / requests
    out["round_trip_p50_us"] = times[len(times) // 2] * 1e6
    out["round_trip_p90_us"] = times[int(len(times) * 0.9)] * 1e6
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[],
                    help="another source tree to measure in turn (repeatable)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--size", type=int, default=8, help="N of the N×N×N product")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="unprotected")
    ap.add_argument("--device", action="store_true",
                    help="a CuPy daemon and device-resident CuPy x (needs a GPU)")
    ap.add_argument("--placement", default="process", choices=("process", "stream", "inline"))
    ap.add_argument("--model", default=None,
                    help="BATCHxHIDDENxLAYERS: whole-model requests of that MLP")
    ap.add_argument("--out", default=None, help="write every round as JSON here")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child run
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.size, args.requests, args.variant, args.device,
                                 args.placement, args.model)))
        return 0
    trees = [str(HERE), *[str(Path(t).resolve()) for t in args.tree]]
    site = Path(tempfile.mkdtemp(prefix="smprobe-site-"))
    (site / "sitecustomize.py").write_text(TIMER_HOOK)
    rounds: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for r in range(args.rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), tree]),
                       SMPROBE_TIMERS=str(site / f"timers-{r}-{trees.index(tree)}"))
            extra = (["--device"] if args.device else []) + ["--placement", args.placement]
            extra += ["--model", args.model] if args.model else []
            res = subprocess.run(
                [sys.executable, __file__, "--one", "--size", str(args.size),
                 "--requests", str(args.requests), "--variant", args.variant, *extra],
                env=env, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                print(res.stderr[-2000:], file=sys.stderr)
                return 1
            rounds[tree].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}/{args.rounds} {tree}: done", file=sys.stderr, flush=True)
    keys = list(rounds[trees[0]][0])
    what = f"model {args.model}" if args.model else f"{args.size}x{args.size}x{args.size}"
    print(f"{what} {args.variant}, {'device-resident, cupy' if args.device else 'host, numpy'}, "
          f"{args.placement} channels, {args.requests} requests, median of {args.rounds} rounds "
          "(µs per request)")
    print("| tree | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for tree in trees:
        med = {k: statistics.median(r[k] for r in rounds[tree]) for k in keys}
        print(f"| {tree} | " + " | ".join(
            f"{med[k]:,.2f}" if k.startswith("timer") else f"{med[k]:,.0f}" for k in keys) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"size": args.size, "variant": args.variant,
                                              "requests": args.requests, "rounds": rounds},
                                             indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
