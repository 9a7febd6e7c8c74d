"""Device probe: where a voted device-resident request's time goes, span by span.

usage: python3 scripts/span_probe.py [--placement inline|process|stream] [--size 80x80x80]
                                     [--model BATCHxHIDDENxLAYERS] [--requests 300]
                                     [--spin-s 0] [--out DIR]

Starts a 2oo3 CuPy daemon (`safemon run`, the runtime benchmark's config, ipc://) with a
`sitecustomize` on its PYTHONPATH that times chosen functions in every process (the daemon
and this client; `SPANS` below), then sends `--requests` sequential `Client.matmul` calls
with a CuPy x (with `--model`, `Client.run` of an MLP with gelu and biases). Prints, per span, how often it ran per request and its median and p90
duration (µs, wall clock, waits included), and the round trip's median: what the spans do
not cover is ZeroMQ's hops, the wake-ups and the loop between them. With inline channels
it then prints what the lockstep round still does after the reply against when the next
request is sent (`after_the_reply`). The timing adds about
a microsecond per span. Nothing here is asserted; it is a probe.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml
from probe_hook import install

#: (module, attribute path, label): what is timed, in whichever process runs it.
SPANS = [  # module functions first: later imports must bind the wrapped ones
    ("safemon.kernels.api", "run_variant", "channel: run_variant (queued)"),
    ("safemon.device_io", "ExchangeBuffers.stage", "client: stage x (copy, digest, wait)"),
    ("safemon.device_io", "ExchangeBuffers.take", "client: take the slot (copy, digest, wait)"),
    ("safemon.client", "Client._call", "client: send + wait for the reply"),
    ("safemon.daemon", "Daemon._client_message", "daemon: a client message (core + effects)"),
    ("safemon.daemon", "Daemon._channel_message", "daemon: a channel message (core + effects)"),
    ("safemon.daemon", "Daemon._reply", "daemon: encode + send a reply"),
    ("safemon.runtime.core", "RuntimeCore.handle", "daemon: RuntimeCore.handle"),
    ("safemon.channels.inline", "InlineChannels.run_round", "inline: one lockstep round"),
    ("safemon.channels.inline", "InlineChannel.launch", "inline: a channel's launch"),
    ("safemon.channels.inline", "InlineChannel.finish", "inline: a channel's finish (wait)"),
    ("safemon.kernels.model_gpu", "DigestBatch.values", "channel: read-back (the wait)"),
    ("safemon.channels.step_graphs", "StepGraphs.capture", "channel: capture a step graph"),
    ("safemon.channels.step_graphs", "CapturedStep.launch", "channel: launch a step graph"),
    ("safemon.models.forward", "QueuedPass.finish", "channel: a model pass's wait and checks"),
    ("safemon.models", "decode_model", "channel: decode the model's layers"),
]

#: What the hook records (`probe_hook`'s preamble gives it `_rec` and `_now`): each span in
#: `SPAN_LIST` as (begin ns, end ns, label).
HOOK = '''
    import importlib

    def _wrap(owner, name, label):
        inner = getattr(owner, name)

        def wrapped(*a, **kw):
            t0 = _now()
            try:
                return inner(*a, **kw)
            finally:
                _rec.append((t0, _now(), label))
        setattr(owner, name, wrapped)

    for mod, path, label in json.loads(os.environ["SPAN_LIST"]):
        try:
            owner = importlib.import_module(mod)
        except ImportError:
            continue
        *parents, name = path.split(".")
        for p in parents:
            owner = getattr(owner, p, None)
        if owner is not None and hasattr(owner, name):  # an older tree may lack it
            _wrap(owner, name, label)
'''



def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--placement", default="inline")
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--spin-s", type=float, default=0.0)
    ap.add_argument("--model", default=None, help="BATCHxHIDDENxLAYERS: whole-model requests")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="safemon-spans-"))
    spans = out / "spans"
    spans.mkdir(parents=True, exist_ok=True)
    os.environ["SPAN_OUT"] = str(spans)
    os.environ["SPAN_LIST"] = json.dumps(SPANS)
    if args.spin_s:
        os.environ["SAFEMON_TIMING__SPIN_S"] = str(args.spin_s)
    hook = install(out, "safemon_span_hook", "SPAN_OUT", HOOK)  # and this process too

    import cupy as cp

    from safemon.bench.vote import _bench_config, running_daemon

    m, n, k = (int(v) for v in args.size.split("x"))
    cfg = _bench_config(out, "ipc", "cupy", ["16x16x16"])
    cfg["channels"] = [{"name": f"c{i}", "placement": args.placement} for i in range(3)]
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rng = np.random.default_rng(0)
    if args.model:
        m, k, depth = (int(v) for v in args.model.split("x"))
        n = k
    x = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    w = rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))
    rtt = []
    with running_daemon(path, out / "daemon.log", 240.0) as client:
        client.control_timeout_s = 60.0  # a 4096-wide weight takes longer than 1 s to store
        wid = client.register_weight(w)
        if args.model:
            from safemon.models import Layer

            bias = rng.standard_normal(n).astype(np.float32)
            mid = client.register_model([Layer(wid, bias, "gelu")] * depth)

            def call() -> object:
                return client.run(mid, x, timeout=30.0)
        else:
            def call() -> object:
                return client.matmul(x, wid, timeout=30.0)
        for _ in range(20):
            call()
        t_begin = time.monotonic_ns()
        for _ in range(args.requests):
            t0 = time.perf_counter()
            call()
            rtt.append(time.perf_counter() - t0)
            assert client.last_request_device, client.device_io_off_reason
        t_end = time.monotonic_ns()
    hook._dump()  # (the daemon's own dump ran at its exit)
    print(f"{args.placement} {args.model or args.size}, spin_s {args.spin_s}")
    print(report(out, args.requests, rtt, t_begin, t_end))
    print()
    print(after_the_reply(out, t_begin, t_end))
    return 0


def report(out: Path, requests: int, rtt: list[float], t_begin: int, t_end: int) -> str:
    """The table: per span, count per request, median and p90 (µs)."""
    durations = {label: [(e - b) / 1e3 for b, e in spans]
                 for label, spans in _spans(out, t_begin, t_end).items()}
    lines = [f"round trip: p50 {statistics.median(rtt) * 1e6:,.0f} µs, "
             f"p90 {np.percentile(rtt, 90) * 1e6:,.0f} µs over {requests} requests", "",
             "| span | per request | p50 µs | p90 µs |", "|---|---:|---:|---:|"]
    for _mod, _path, label in SPANS:
        d = durations.get(label)
        if not d:
            continue
        lines.append(f"| {label} | {len(d) / requests:.2f} | {statistics.median(d):,.1f} | "
                     f"{np.percentile(d, 90):,.1f} |")
    return "\n".join(lines)


def _spans(out: Path, t_begin: int, t_end: int) -> dict[str, list[tuple[int, int]]]:
    """Every recorded span inside [t_begin, t_end] (ns), by label, sorted by begin."""
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for f in (out / "spans").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            b, e, label = json.loads(line)
            if t_begin <= b and e <= t_end:
                spans[label].append((b, e))
    for v in spans.values():
        v.sort()
    return spans


def after_the_reply(out: Path, t_begin: int, t_end: int) -> str:
    """With inline channels, what the lockstep round still does after the quorum's reply
    has left (the third channel's wait, read-back and vote), against when the client's next
    request is sent (the begin of its `Client._call`, a few µs before the send itself):
    whether that request found the loop still in the round, which is the most that
    finishing the third channel outside the round could save a client that sends back to
    back. Per request but the last (µs, one monotonic clock for both processes):
    - left: from the reply's send to the round's end;
    - gap: from the reply's send to the client's next send (its ZeroMQ hop and decode, the
      release check, the next staging);
    - blocked: how long the next request was sent before the round ended (0 when after);
    - to handling: from the client's next send to the daemon's handling of it."""
    spans = _spans(out, t_begin, t_end)
    calls = spans.get("client: send + wait for the reply", [])
    replies = spans.get("daemon: encode + send a reply", [])
    rounds = spans.get("inline: one lockstep round", [])
    handled = spans.get("daemon: a client message (core + effects)", [])
    rows: list[tuple[float, float, float, float]] = []
    for (cb, ce), (nb, _ne) in itertools.pairwise(calls):
        reply = [e for _b, e in replies if cb <= e <= ce]
        if not reply:
            continue
        sent = reply[-1]
        rnd = [e for b, e in rounds if b <= sent <= e]
        nxt = [b for b, _e in handled if b >= nb]
        if not rnd or not nxt:
            continue
        rows.append(((rnd[0] - sent) / 1e3, (nb - sent) / 1e3, max(0, rnd[0] - nb) / 1e3,
                     (nxt[0] - nb) / 1e3))
    if not rows:
        return "after the reply: no request whose reply was sent inside a lockstep round"
    cols = list(zip(*rows, strict=True))
    blocked = sum(1 for r in rows if r[2] > 0)
    lines = [f"after the reply ({len(rows)} requests; µs):", "",
             "| | p50 | p90 |", "|---|---:|---:|"]
    for name, col in zip(("round goes on after the reply (left)", "reply to the next send (gap)",
                          "next request sent before the round ended (blocked)",
                          "next send to its handling"), cols, strict=True):
        lines.append(f"| {name} | {statistics.median(col):,.1f} | {np.percentile(col, 90):,.1f} |")
    lines.append("")
    lines.append(f"next request sent while the round still ran: {blocked} of {len(rows)}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
