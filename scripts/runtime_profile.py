"""Device probe: where a voted request's time goes in the daemon and the client.

usage: python3 scripts/runtime_profile.py [--placement process|stream|inline] [--size 80x80x80]
                                          [--model BATCHxHIDDENxLAYERS] [--requests 300]
                                          [--host] [--sampler cprofile|py-spy] [--out DIR]

`--host` sends NumPy arrays to a NumPy-backend daemon (no GPU needed). `--model` sends
whole-model requests (an MLP with gelu and biases, as `safemon bench vote --runtime`) instead
of products.

`--sampler py-spy` attaches py-spy (a sampling profiler in its own process, which must be on
PATH) to the daemon and to this process for the timed requests only, instead of running
them under cProfile: the code runs at full speed, so the shares are those of a real request
(cProfile charges every Python call, and inflates many small ones). It prints, per process,
the functions with the most samples of their own and the safemon functions with the most
samples under them, as shares of the samples in which the process was busy (py-spy leaves out
threads that wait in a system call), and leaves the collapsed stacks in --out.

Starts a 2oo3 CuPy daemon (`safemon run`, under cProfile unless `--sampler py-spy`; ipc://,
the benchmark's config) and sends `--requests` sequential `Client.matmul` (or, with
`--model`, `Client.run`) requests with a CuPy x (the CUDA IPC path; `--host`: through host
memory), profiling this process too. Prints the round trip and critical-path kernel medians
and the top functions of both profiles (cProfile: cumulative and own time), and leaves the
.prof files (or the collapsed stacks) in --out.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml


def _top(path_or_prof: object, title: str, n: int = 25) -> str:
    out = io.StringIO()
    st = pstats.Stats(path_or_prof, stream=out)  # type: ignore[arg-type]
    out.write(f"==== {title}: own time\n")
    st.sort_stats("tottime").print_stats(n)
    out.write(f"==== {title}: cumulative (safemon)\n")
    st.sort_stats("cumtime").print_stats("safemon", n)
    return out.getvalue()


#: A frame of py-spy's raw output: "function (file:line)".
_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _frame_name(frame: str) -> str:
    """`function (file)` of a raw frame, the line number dropped and the path shortened."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    path = m["file"]
    for marker in ("/safemon/", "site-packages/", "/lib/python3"):
        if marker in path:
            path = path[path.index(marker) + 1:]
            break
    return f"{m['fn']} ({path})"


def collapsed_table(path: Path, title: str, n: int = 30) -> str:
    """Self and inclusive sample shares of py-spy's collapsed stacks at `path`."""
    own: collections.Counter[str] = collections.Counter()
    under: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = [_frame_name(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += c
        own[frames[-1]] += c
        for f in set(frames):
            under[f] += c
    out = io.StringIO()
    out.write(f"==== {title}: {total} busy samples\n")
    out.write("own % | function\n")
    for f, c in own.most_common(n):
        out.write(f"{100 * c / max(total, 1):5.1f} | {f}\n")
    out.write("under % | safemon function\n")
    for f, c in [(f, c) for f, c in under.most_common() if "(safemon/" in f][:n]:
        out.write(f"{100 * c / max(total, 1):5.1f} | {f}\n")
    return out.getvalue()


def _py_spy(pid: int, path: Path) -> subprocess.Popen[bytes]:
    """py-spy recording process `pid` into collapsed stacks at `path` until SIGINT."""
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--rate", "2000",
                             "--format", "raw", "--nonblocking", "--threads", "-o", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop_py_spy(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode not in (0, -signal.SIGINT):
        print(f"py-spy ended with {proc.returncode}: {err.decode(errors='replace')[-400:]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--placement", default="process")
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--model", default=None)
    ap.add_argument("--host", action="store_true")
    ap.add_argument("--sampler", choices=("cprofile", "py-spy"), default="cprofile")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from safemon.bench.vote import _bench_config
    from safemon.client import Client
    from safemon.models import Layer

    out = Path(args.out or tempfile.mkdtemp(prefix="safemon-prof-"))
    out.mkdir(parents=True, exist_ok=True)
    m, n, k = (int(v) for v in args.size.split("x"))
    backend = "numpy" if args.host else "cupy"
    cfg = _bench_config(out, "ipc", backend, ["16x16x16"])
    cfg["channels"] = [{"name": f"c{i}", "placement": args.placement} for i in range(3)]
    cfg_path = out / "config.yaml"
    cfg["limits"] = {"min_channel_gflops": 100.0}  # as the runtime benchmark (model items)
    cfg_path.write_text(yaml.safe_dump(cfg))
    prof_path = out / f"daemon-{args.placement}.prof"
    sampled = args.sampler == "py-spy"
    profiler = [] if sampled else ["-m", "cProfile", "-o", str(prof_path)]
    with (out / "daemon.log").open("w") as err:
        proc = subprocess.Popen([sys.executable, *profiler, "-m", "safemon", "run", "--config",
                                 str(cfg_path)], stderr=err)
    client = Client(cfg_path, control_timeout_s=60.0, device_io=not args.host)
    try:
        end = time.monotonic() + 240
        while True:
            try:
                st = client.status()
                if st["channels"] and all(c["state"] == "UP" for c in st["channels"]):
                    break
            except Exception:  # not up yet
                pass
            if time.monotonic() > end or proc.poll() is not None:
                raise SystemExit("daemon not up")
            time.sleep(0.2)
        rng = np.random.default_rng(0)
        if args.model:
            batch, hidden, depth = (int(v) for v in args.model.split("x"))
            scale = np.float32(1.0 / np.sqrt(hidden))
            ids = [client.register_weight(
                rng.standard_normal((hidden, hidden), dtype=np.float32) * scale)
                for _ in range(depth)]
            mid = client.register_model([
                Layer(w, rng.standard_normal(hidden, dtype=np.float32) * np.float32(0.1), "gelu")
                for w in ids])
            x = rng.standard_normal((batch, hidden)).astype(np.float32)

            def request() -> None:
                client.run(mid, x, timeout=60.0)
        else:
            wid = client.register_weight(rng.standard_normal((k, n)).astype(np.float32))
            x = rng.standard_normal((m, k)).astype(np.float32)

            def request() -> None:
                client.matmul(x, wid, timeout=30.0)
        if not args.host:
            import cupy as cp

            x = cp.asarray(x)
        for _ in range(20):
            request()
        rtt, ks = [], []
        if sampled:
            spies = [_py_spy(proc.pid, out / "daemon.collapsed"),
                     _py_spy(os.getpid(), out / "client.collapsed")]
            time.sleep(1.0)  # py-spy attached
        else:
            prof = cProfile.Profile()
            prof.enable()
        try:
            for _ in range(args.requests):
                t0 = time.perf_counter()
                request()
                rtt.append(time.perf_counter() - t0)
                ks.append(client.last_kernel_seconds or 0.0)
        finally:
            if sampled:
                for spy in spies:
                    _stop_py_spy(spy)
            else:
                prof.disable()
                prof.dump_stats(str(out / "client.prof"))
        r, kk = np.array(rtt) * 1e6, np.array(ks) * 1e6
        what = f"model {args.model}" if args.model else args.size
        print(f"{args.placement} {what} {'host' if args.host else 'cuda-ipc'} "
              f"(device path used: {client.last_request_device}): round trip p50 "
              f"{np.median(r):.0f} p99 {np.percentile(r, 99):.0f} µs; critical-path channel "
              f"time p50 {np.median(kk):.0f} µs; overhead p50 {np.median(r - kk):.0f} µs")
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    if sampled:
        for name in ("client", "daemon"):
            path = out / f"{name}.collapsed"
            print(collapsed_table(path, name) if path.exists() else f"no samples for {name}")
    else:
        print(_top(str(out / "client.prof"), "client"))
        print(_top(str(prof_path), "daemon"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
