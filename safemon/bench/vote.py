"""`safemon bench vote`: what the redundancy pattern costs in time, measured end to end.

A real daemon (`safemon run`, three channel processes, 2oo3) is started per transport, and
this process acts as the inference app. Everything below is measured in the same run:

- **Round trip** (one request in flight): wall time from sending a REQUEST to receiving the
  released C, for `requests` requests after `warmup`. The daemon's reply carries
  `kernel_seconds`, the slowest compute step among the agreeing channels (the time on the
  release's critical path spent in the channel's `_run`: upload, ECC check of the resident
  weights, finite checks, kernel, download); `overhead = round trip - kernel_seconds` is
  safemon's own cost (transport, voting, comparison, scheduling). Percentiles are over
  requests.
- **Baselines**: the same kernel called directly in this process (what the app would do
  without safemon) and a ZeroMQ echo of the same request and reply messages through the same
  wire code (`echo_main`, a separate process): the transport floor.
- **Pipelined throughput**: `depth` requests kept in flight on one socket; requests per
  second against the sequential rate of the same size.
- **Zero-copy**: the echo round trip of a C + ES reply message with the frames sent and
  received zero-copy (as safemon does) and copied; ratio copied / zero-copy.

Transports: "ipc" (everything over ipc:// in a private runtime dir) and "tcp" (the app talks
to the daemon over tcp://127.0.0.1 with CURVE and ZAP, as a remote app would; the channels
stay on ipc://).

Result: a JSON-able dict (`FORMAT`), rendered by `vote_markdown` and `plot_round_trips`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml
import zmq

from safemon.bench.timing import percentiles
from safemon.dims import parse_dims, parse_key
from safemon.errors import SafemonError
from safemon.kernels.backend import Backend
from safemon.transport import messages as msgs

__all__ = [
    "DEVICE_SIZES",
    "FORMAT",
    "HOST_SIZES",
    "VoteBenchSize",
    "default_sizes",
    "echo_main",
    "parse_sizes",
    "plot_round_trips",
    "run_vote_bench",
    "vote_markdown",
]

FORMAT = "safemon.bench_vote/1"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class VoteBenchSize:
    """One benchmarked shape: x (M, K) times W (K, N); `requests` timed round trips."""

    m: int
    n: int
    k: int
    requests: int

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


#: `--sizes` by default on a GPU backend: issue 16's two product shapes.
DEVICE_SIZES = "80x80x80,1024x1024x64"
#: `--sizes` by default on the NumPy backend, whose daemon refuses 1024x1024x64 (priced at
#: 6.7 s of its channels' floor, `limits.min_channel_gflops`, over what a self-test may wait
#: behind) and computes a product at about 0.06 GFLOP/s.
HOST_SIZES = "80x80x80"


def default_sizes(backend: str) -> str:
    """`DEVICE_SIZES` when `backend` ("auto", "numpy", "cupy") resolves to a GPU, else
    `HOST_SIZES`."""
    from safemon.kernels.backend import resolve_backend

    return DEVICE_SIZES if resolve_backend(backend).on_device else HOST_SIZES


def parse_sizes(text: str, requests: int) -> list[VoteBenchSize]:
    """"80x80x80,1024x1024x64" (or "80" for 80x80x80: any `safemon.dims.parse_dims` form)
    into sizes; ValueError on bad input.

    Outputs with more than 2**18 elements get a tenth of `requests` (at least 20, at most
    `requests`)."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            m, n, k = parse_dims(part)
        except ValueError as exc:
            raise ValueError(f"bad size {part!r}: {exc}") from None
        reqs = requests if m * n <= 2**18 else min(requests, max(20, requests // 10))
        out.append(VoteBenchSize(m, n, k, reqs))
    if not out:
        raise ValueError("no sizes given")
    if requests < 10:
        raise ValueError(f"requests must be >= 10, got {requests}")
    return out


# ------------------------------------------------------------------------- statistics


def _stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p90 / p99 / mean / min in microseconds."""
    a = np.asarray(seconds, dtype=np.float64) * 1e6
    p50, p90, p99 = percentiles(a, (50, 90, 99))
    return {
        "p50_us": p50,
        "p90_us": p90,
        "p99_us": p99,
        "mean_us": float(a.mean()),
        "min_us": float(a.min()),
        "n": int(a.size),
    }


# ------------------------------------------------------------------------- the daemon


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bench_config(work: Path, transport: str, backend: str, dims: Sequence[str]) -> dict[str, Any]:
    rd = work / f"rt-{transport}"
    cfg: dict[str, Any] = {
        "name": f"bench-{transport}",
        "policy": "2oo3",
        "backend": backend,
        "channels": [{"name": f"c{i}", "placement": "process"} for i in range(3)],
        "endpoints": {
            "runtime_dir": str(rd),
            "ingress": "ipc://{runtime_dir}/in.sock",
            "control": "ipc://{runtime_dir}/ctl.sock",
            "events": "ipc://{runtime_dir}/ev.sock",
            "channel_base": "ipc://{runtime_dir}/ch",
        },
        # Generous deadlines: the bench measures latency, it must not provoke faults.
        # (Self-tests queue behind pipelined live work in each channel's own queue.)
        "timing": {"request_deadline_s": 10.0, "dti_s": 5.0, "selftest_deadline_s": 4.5,
                   "ftti_s": 20.0, "heartbeat_timeout_s": 5.0, "heartbeat_interval_s": 0.1},
        "patterns": {"dims": list(dims)},
        "metrics": {"port": 0},
        "logging": {"format": "json", "level": "warning"},
    }
    if transport == "tcp":
        from safemon.transport.keys import keys_generate

        keys = work / "keys"
        if not keys.exists():
            keys_generate(keys)
        cfg["endpoints"]["ingress"] = f"tcp://127.0.0.1:{_free_port()}"
        cfg["endpoints"]["control"] = f"tcp://127.0.0.1:{_free_port()}"
        cfg["security"] = {"curve": True, "keys_dir": str(keys)}
    return cfg


@contextlib.contextmanager
def running_daemon(config_path: Path, log_path: Path, timeout_s: float) -> Iterator[Any]:
    """`safemon run --config config_path` as a child process, yielding a connected
    `Client` once every channel is UP; SIGTERM (drain) on exit."""
    from safemon.client import Client

    with log_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "safemon", "run", "--config",
                                 str(config_path)], stdout=subprocess.DEVNULL, stderr=err)
    client = None
    try:
        client = Client(config_path, control_timeout_s=1.0)
        end = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise SafemonError(f"the daemon exited with {proc.returncode}; see {log_path}")
            with contextlib.suppress(SafemonError):
                st = client.status()
                if st["channels"] and all(c["state"] == "UP" for c in st["channels"]):
                    break
            if time.monotonic() >= end:
                raise SafemonError(f"channels not all UP within {timeout_s} s; see {log_path}")
            time.sleep(0.1)
        yield client
    finally:
        if client is not None:
            client.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class _RawRequester:
    """The app side without `Client`'s conveniences: one DEALER on the daemon's ingress,
    requests encoded with the wire code, replies matched by seq, so several can be in
    flight. Uses the client's socket set-up (and CURVE keys) through `Client._connect`."""

    def __init__(self, client: Any) -> None:
        self._sock = client._connect(client.config.endpoints.ingress)
        self._epoch = client.epoch or 0
        self._seq = 0

    def close(self) -> None:
        self._sock.close(linger=0)

    def send(self, x: npt.NDArray[np.float32], weight_id: str) -> int:
        from safemon.transport import Kind, encode, send_message

        self._seq += 1
        frames = encode(Kind.REQUEST, epoch=self._epoch, seq=self._seq,
                        meta=msgs.MatmulRequest(weight_id=weight_id, deadline_ms=30000.0).to_meta(),
                        arrays=(x,))
        send_message(self._sock, frames)
        return self._seq

    def recv(self, timeout_s: float = 30.0) -> tuple[int, float, npt.NDArray[np.float32]]:
        """(seq, kernel_seconds, C) of the next reply; SafemonError for an error reply."""
        from safemon.transport import Kind, Limits, recv_message

        got = recv_message(self._sock, limits=Limits(), timeout_ms=int(timeout_s * 1000))
        if got is None:
            raise SafemonError(f"no reply within {timeout_s} s")
        msg = got.message
        if msg.kind is not Kind.REPLY or msg.meta.get("ok") is not True or len(msg.arrays) != 1:
            raise SafemonError(f"request {msg.seq} not released: {msg.kind.value} {dict(msg.meta)}")
        ks = msg.meta.get("kernel_seconds")
        return msg.seq, float(ks) if isinstance(ks, int | float) else 0.0, msg.arrays[0]


# ------------------------------------------------------------------------- the echo floor


def echo_main(argv: Sequence[str] | None = None) -> int:
    """`python -m safemon.bench.vote ADDRESS COPY`: bind a ROUTER at ADDRESS and
    send every message back re-encoded (decode, CRC checks and encode included), zero-copy
    when COPY is 0, copying every frame when 1. Ends on a message of kind "control"."""
    from safemon.transport import Kind, Limits, encode, make_socket, recv_message, send_message

    address, copy = (sys.argv[1:] if argv is None else list(argv))[:2]
    copying = copy == "1"
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = make_socket(ctx, zmq.ROUTER, address, bind=True)
    limits = Limits()
    try:
        while True:
            got = recv_message(sock, limits=limits, timeout_ms=60_000, copy=copying)
            if got is None or got.message.kind is Kind.CONTROL:
                return 0
            msg = got.message
            frames = encode(Kind.RESULT, epoch=msg.epoch, seq=msg.seq, meta={"ok": True},
                            arrays=tuple(np.ascontiguousarray(a) for a in msg.arrays))
            send_message(sock, frames, identity=got.identity, copy=copying)
    finally:
        sock.close(linger=0)
        ctx.term()


def _echo_round_trips(
    address: str, arrays: tuple[npt.NDArray[Any], ...], n: int, warmup: int, *, copy: bool
) -> list[float]:
    from safemon.transport import Kind, Limits, encode, make_socket, recv_message, send_message

    proc = subprocess.Popen([sys.executable, "-m", "safemon.bench.vote", address,
                             "1" if copy else "0"])
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = make_socket(ctx, zmq.DEALER, address, bind=False)
    limits = Limits()
    out: list[float] = []
    try:
        # The echo process takes a moment to start and bind: wait for the first send to go.
        hello = encode(Kind.REQUEST, epoch=1, seq=1, meta={"job": "live"}, arrays=arrays)
        end = time.monotonic() + 60.0
        while True:
            try:
                send_message(sock, hello, flags=zmq.NOBLOCK)
                break
            except zmq.Again:
                if proc.poll() is not None or time.monotonic() > end:
                    raise SafemonError(f"the echo process at {address} never came up") from None
                time.sleep(0.01)
        if recv_message(sock, limits=limits, timeout_ms=30_000) is None:
            raise SafemonError(f"the echo process at {address} did not answer")
        for i in range(warmup + n):
            frames = encode(Kind.REQUEST, epoch=1, seq=i + 2, meta={"job": "live"}, arrays=arrays)
            t0 = time.perf_counter()
            send_message(sock, frames, copy=copy)
            got = recv_message(sock, limits=limits, timeout_ms=30_000, copy=copy)
            t1 = time.perf_counter()
            if got is None:
                raise SafemonError(f"the echo process at {address} did not answer")
            if i >= warmup:
                out.append(t1 - t0)
        send_message(sock, encode(Kind.CONTROL, epoch=1, seq=warmup + n + 2,
                                  meta={"command": "stop"}))
        proc.wait(10)
    finally:
        sock.close(linger=0)
        ctx.term()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out


# ------------------------------------------------------------------------- the run


def _direct_times(backend: Backend, x: Any, w: Any, variant: Any, n: int, warmup: int) -> list[float]:
    """The kernel called in this process, result on the host: what the app pays without safemon."""
    from safemon.kernels.api import run_variant

    out = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        res = run_variant(x, w, variant, backend)
        c = res.c.get() if backend.on_device else res.c
        t1 = time.perf_counter()
        del c
        if i >= warmup:
            out.append(t1 - t0)
    return out


def run_vote_bench(
    *,
    sizes: Sequence[VoteBenchSize],
    transports: Sequence[str] = ("ipc", "tcp"),
    backend: str = "auto",
    warmup: int = 20,
    depth: int = 8,
    progress: Progress | None = None,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the whole benchmark; returns the evidence dict (see the module docstring).

    Raises:
        ValueError: unknown transport, depth < 1. SafemonError: the daemon did not come up
            or a request was not released (a benchmark never hides a failed request).
    """
    from safemon.config import VariantConfig
    from safemon.kernels.backend import resolve_backend

    say = progress or (lambda _s: None)
    for t in transports:
        if t not in ("ipc", "tcp"):
            raise ValueError(f"unknown transport {t!r}; known: ipc, tcp")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    resolved = resolve_backend(backend)
    refused = _refused_sizes(sizes, backend, resolved.on_device, depth)
    if refused:
        raise ValueError("the benchmark's daemon would refuse "
                         + "; ".join(refused) + ": pass smaller --sizes")
    rng = np.random.default_rng(2026)
    ops = {s.label: (rng.standard_normal((s.m, s.k), dtype=np.float32),
                     rng.standard_normal((s.k, s.n), dtype=np.float32)) for s in sizes}
    variant_cfg = VariantConfig()
    evidence: dict[str, Any] = {
        "format": FORMAT,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"machine": platform.machine(), "python": platform.python_version(),
                 "cpus": os.cpu_count(), "node": platform.node()},
        "backend": resolved.value,
        "policy": "2oo3",
        "placement": "process",
        "variant": f"{variant_cfg.checksum}/{variant_cfg.level}/{variant_cfg.mode}",
        "depth": depth,
        "warmup": warmup,
        "direct": {},
        "echo": {},
        "runs": [],
    }
    if resolved.on_device:
        from safemon.kernels.compiler import import_cupy

        cp = import_cupy()
        evidence["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()

    for s in sizes:
        x, w = ops[s.label]
        variant = variant_cfg.to_variant(s.m, s.n, s.k)
        dx, dw = (x, w)
        if resolved.on_device:
            dx, dw = cp.asarray(x), cp.asarray(w)
        say(f"direct kernel baseline {s.label} ({s.requests} calls)")
        evidence["direct"][s.label] = _stats(_direct_times(resolved, dx, dw, variant, s.requests, warmup))

    with tempfile.TemporaryDirectory(prefix="safemon-bench-vote-") as tmp:
        work = Path(work_dir) if work_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for s in sizes:
            x, w = ops[s.label]
            c_like = np.zeros((s.m, s.n), dtype=np.float32)
            es_like = np.zeros((max(1, s.m * s.n // 16),), dtype=np.uint32)
            echo_dir = work / "echo"
            echo_dir.mkdir(mode=0o700, exist_ok=True)
            address = f"ipc://{echo_dir}/echo.sock"
            for copy in (False, True):
                say(f"echo floor {s.label} ({'copied' if copy else 'zero-copy'} frames)")
                request = _echo_round_trips(address, (x,), s.requests, warmup, copy=copy)
                reply = _echo_round_trips(address, (c_like, es_like), s.requests, warmup, copy=copy)
                evidence["echo"][f"{s.label}/{'copy' if copy else 'zero-copy'}"] = {
                    "request": _stats(request), "reply": _stats(reply)}

        dims = [s.label for s in sizes if s.m * s.n <= 2**18][:1] or ["16x16x16"]
        for transport in transports:
            cfg_path = work / f"bench-{transport}.yaml"
            cfg_path.write_text(yaml.safe_dump(_bench_config(work, transport, backend, dims)))
            say(f"starting a 2oo3 daemon over {transport} (three channel processes)")
            with running_daemon(cfg_path, work / f"daemon-{transport}.log", 180.0) as client:
                raw = _RawRequester(client)
                try:
                    for s in sizes:
                        evidence["runs"].append(
                            _measure(client, raw, transport, s, ops[s.label], warmup, depth, say))
                finally:
                    raw.close()
    return evidence


def _refused_sizes(sizes: Sequence[VoteBenchSize], backend: str, on_device: bool,
                   depth: int = 1) -> list[str]:
    """"SIZE (why)" for each size the benchmark's own daemon would refuse at ingress
    (`admission.check_request` under the config `_bench_config` writes, with the SAFEMON_*
    environment the daemon inherits), alone or with `depth - 1` more of it queued ahead, as
    the pipelined part sends them, so that the run fails before its baselines rather than
    minutes later."""
    from safemon import admission
    from safemon.config import load_config, with_backend_limits

    with tempfile.TemporaryDirectory(prefix="safemon-bench-check-") as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(_bench_config(Path(tmp), "ipc", backend, ["16x16x16"])))
        cfg = with_backend_limits(load_config(path), on_device)
    out = []
    for s in sizes:
        ahead = (depth - 1) * admission.item_cost_s(cfg, s.m, s.k, s.n)
        refusal = admission.check_request(cfg, (s.m, s.k), s.n, 0, queued_s=ahead)
        if refusal is not None:
            out.append(f"{s.label} ({refusal.error_type}: {refusal.message})")
    return out


def _measure(client: Any, raw: _RawRequester, transport: str, s: VoteBenchSize,
             operands: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]], warmup: int,
             depth: int, say: Progress) -> dict[str, Any]:
    x, w = operands
    wid = client.register_weight(w)
    say(f"{transport} {s.label}: {s.requests} sequential round trips")
    rtt: list[float] = []
    over: list[float] = []
    kernel: list[float] = []
    first: npt.NDArray[np.float32] | None = None
    for i in range(warmup + s.requests):
        t0 = time.perf_counter()
        seq = raw.send(x, wid)
        got_seq, ks, c = raw.recv()
        t1 = time.perf_counter()
        if got_seq != seq:
            raise SafemonError(f"reply for request {got_seq}, expected {seq}")
        if first is None:
            first = np.array(c, copy=True)
        elif not np.array_equal(first.view(np.uint32), np.asarray(c).view(np.uint32)):
            raise SafemonError("the same request released two different results")
        if i >= warmup:
            rtt.append(t1 - t0)
            kernel.append(ks)
            over.append(max(0.0, (t1 - t0) - ks))
    say(f"{transport} {s.label}: pipelined, {depth} in flight")
    n = s.requests
    sent = done = 0
    t0 = time.perf_counter()
    while sent < min(depth, n):
        raw.send(x, wid)
        sent += 1
    while done < n:
        raw.recv()
        done += 1
        if sent < n:
            raw.send(x, wid)
            sent += 1
    elapsed = time.perf_counter() - t0
    seq_rate = 1.0 / float(np.median(rtt))
    return {
        "transport": transport,
        "size": s.label,
        "round_trip": _stats(rtt),
        "kernel": _stats(kernel),
        "overhead": _stats(over),
        "round_trip_samples_us": [round(v * 1e6, 2) for v in rtt],
        "pipelined_per_s": n / elapsed,
        "sequential_per_s": seq_rate,
        "pipelined_speedup": (n / elapsed) / seq_rate,
    }


# ------------------------------------------------------------------------- reports


def vote_markdown(ev: dict[str, Any]) -> str:
    """The evidence as Markdown tables (times in µs; ratios against same-run baselines)."""
    lines = [
        f"2oo3, three channel processes, variant {ev['variant']}, backend {ev['backend']}"
        + (f" ({ev['device']})" if ev.get("device") else "")
        + f", host {ev['host']['node']} ({ev['host']['cpus']} CPUs), {ev['when']}.",
        "",
        "Round trip = app sends → released C received. Overhead = round trip − the kernel time"
        " on the release's critical path (reported by the daemon). Direct = the same kernel"
        " called in the app's process. Echo = the request and reply messages bounced through"
        " the same wire code by a bare ZeroMQ process (the transport floor).",
        "",
        "| transport | size | round trip p50 | p99 | overhead p50 | overhead p99 | kernel p50 "
        "| direct p50 | round trip / direct | pipelined req/s | × sequential |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ev["runs"]:
        d = ev["direct"][r["size"]]
        lines.append(
            f"| {r['transport']} | {r['size']} | {r['round_trip']['p50_us']:.0f} | "
            f"{r['round_trip']['p99_us']:.0f} | {r['overhead']['p50_us']:.0f} | "
            f"{r['overhead']['p99_us']:.0f} | {r['kernel']['p50_us']:.0f} | {d['p50_us']:.0f} | "
            f"{r['round_trip']['p50_us'] / d['p50_us']:.1f} | {r['pipelined_per_s']:.0f} | "
            f"{r['pipelined_speedup']:.2f} |"
        )
    lines += ["", "| size | echo request p50 (zero-copy) | echo reply p50 (zero-copy) | "
              "echo reply p50 (copied) | copied / zero-copy |", "|---|---|---|---|---|"]
    sizes = sorted({k.split("/")[0] for k in ev["echo"]}, key=parse_key)
    for size in sizes:
        zc, cp = ev["echo"][f"{size}/zero-copy"], ev["echo"][f"{size}/copy"]
        lines.append(
            f"| {size} | {zc['request']['p50_us']:.0f} | {zc['reply']['p50_us']:.0f} | "
            f"{cp['reply']['p50_us']:.0f} | {cp['reply']['p50_us'] / zc['reply']['p50_us']:.2f} |"
        )
    return "\n".join(lines)


def plot_round_trips(ev: dict[str, Any], path: str | Path) -> None:
    """Cumulative distribution of the round trips, one curve per (transport, size)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in ev["runs"]:
        v = np.sort(np.asarray(r["round_trip_samples_us"], dtype=np.float64))
        ax.step(v, np.arange(1, v.size + 1) / v.size, where="post",
                label=f"{r['transport']} {r['size']}")
    ax.set_xscale("log")
    ax.set_xlabel("round trip (µs, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"2oo3 vote round trips ({ev['backend']})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_evidence(ev: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(ev, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(echo_main())
