"""CPU probe: the host work of a voted device-resident request, without a GPU (issue 16).

usage: python3 scripts/shell_probe.py [--requests 2000] [--placement inline|process]
                                      [--spin-s 0] [--rounds 1] [--size 80] [--out DIR]

A device-resident request's round trip is the GPU's work (copies, the product, digests, the
waits) plus everything around it: the client's meta and codec, ZeroMQ, the daemon's loop,
its core, the channels' message handling and the reply. This probe measures the second part
alone, on any machine: it starts a real 2oo3 daemon (`safemon run`, the vote benchmark's
config, ipc://, NumPy backend) whose channels answer device-resident work with fixed
digests instead of computing (a `sitecustomize` replaces `ChannelWorker._run_device` with a
generator that reads the work meta as the real one does, yields once where the real one
waits for its stream, and returns [C, ES, x] digests, the x digest being the request's own),
and sends `--requests` sequential requests with `Client._request`, as `Client.matmul` sends
a CUDA x: its meta carries well-formed CUDA IPC handles that nothing opens, and the reply's
slot and digest are read as `Client._take` reads them, without the device copy.

It prints the round trip's p50 / p90 / p99 / max (µs), how many took over 2 ms, and the CPU
time per request of the client and
of the daemon (the threads alive when it is read, from /proc: the daemon's threads live as
long as it does), per round. Run it under two source trees
(PYTHONPATH) in one session to compare them. What it leaves out: every CUDA call (the
client's staging and release check, the channels' graph launches, waits and read-backs).
Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_hook import install
from runtime_cpu_probe import _thread_cpu_s

#: The channels' stand-in for device work (runs in the daemon and in channel processes).
HOOK = '''
    import numpy as _np
    from safemon.channels import worker as _w
    from safemon.device_io import parse_digest as _pd
    from safemon.transport import messages as _msgs

    def _run_device(self, msg, meta):
        work = (_msgs.ModelWork if msg.meta.get("job") == "model" else _msgs.WorkRequest
                ).parse(msg.meta)
        meta["variant"] = self._variant_text()
        yield  # where the real step waits for its stream
        meta["kernel_seconds"] = 1e-5
        meta["ok"] = True
        return (_np.array([0x1234, 0x5678, _pd(work.x_digest)], dtype=_np.uint64),)

    _w.ChannelWorker._run_device = _run_device
'''

_HANDLE = "ab" * 64  # 128 hex characters: well-formed, never opened


def _daemon_pid() -> int:
    """The `safemon run` child of this process (`running_daemon` started it)."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if ppid == me and b"run" in cmd:
            return int(entry)
    raise SystemExit("no daemon process found")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--placement", default="inline", choices=("inline", "process"))
    ap.add_argument("--spin-s", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--size", type=int, default=80, help="x is SIZE×SIZE, W SIZE×SIZE")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="safemon-shell-"))
    os.environ["SHELL_PROBE"] = str(out)
    install(out, "safemon_shell_hook", "SHELL_PROBE", HOOK)

    from safemon.bench.vote import _bench_config, running_daemon
    from safemon.device_io import digest_hex
    from safemon.digest import digest64
    from safemon.transport import messages as msgs

    cfg = _bench_config(out, "ipc", "numpy", ["8x8x8"])
    cfg["channels"] = [{"name": f"c{i}", "placement": args.placement} for i in range(3)]
    cfg["timing"]["spin_s"] = args.spin_s
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rng = np.random.default_rng(0)
    n = args.size
    x = rng.standard_normal((n, n), dtype=np.float32)
    w = rng.standard_normal((n, n), dtype=np.float32)
    staged = {"x_ipc": _HANDLE, "x_rows": n, "x_cols": n, "x_digest": digest_hex(digest64(x)),
              "out_ipc": _HANDLE[::-1], "out_slot_bytes": n * n * 4}
    with running_daemon(path, out / "daemon.log", 120.0) as client:
        wid = client.register_weight(w)
        pid = _daemon_pid()

        def make(ms: float) -> msgs.MatmulRequest:
            return msgs.MatmulRequest(weight_id=wid, deadline_ms=ms, **staged)

        def take(reply: object) -> object:
            answer = msgs.Released.parse(reply.meta)  # type: ignore[attr-defined]
            return answer if answer.slot is not None and answer.digest is not None else None

        def call() -> None:
            client._request(make, (), 5.0, lambda _r: None, take=take)

        for _ in range(200):
            call()
        print(f"shell probe: {args.placement} channels, spin_s {args.spin_s}, "
              f"{args.requests} requests per round, tree {Path(__import__('safemon').__file__).parent.parent}")
        for r in range(args.rounds):
            rtt = []
            c0, d0 = time.process_time(), _thread_cpu_s(pid)
            for _ in range(args.requests):
                t0 = time.perf_counter()
                call()
                rtt.append(time.perf_counter() - t0)
            c1, d1 = time.process_time(), _thread_cpu_s(pid)
            per = 1e6 / args.requests
            print(f"round {r + 1}: round trip p50 {statistics.median(rtt) * 1e6:,.0f} µs "
                  f"p90 {np.percentile(rtt, 90) * 1e6:,.0f} µs "
                  f"p99 {np.percentile(rtt, 99) * 1e6:,.0f} µs max {max(rtt) * 1e6:,.0f} µs; "
                  f"over 2 ms: {sum(t > 2e-3 for t in rtt)}; CPU per request: client "
                  f"{(c1 - c0) * per:,.0f} µs, daemon {(d1 - d0) * per:,.0f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
