"""Device probe: where one voted device-resident request spends its time, stage by stage.

usage: python3 scripts/request_timeline.py [--placement process|stream] [--size 80x80x80]
                                           [--requests 300] [--variant LABEL] [--out DIR]

Starts a 2oo3 CuPy daemon (the runtime benchmark's config, ipc://) with a `sitecustomize`
on its PYTHONPATH that timestamps, in every process (client, daemon, channels), each
message sent and received (after decoding), the channel's GPU step (`_run_device`) and the
client's staging and release check. The clock is CLOCK_MONOTONIC, which Linux shares
across processes, so one request's events line up on one time axis. Sends `--requests`
sequential `Client.matmul` calls with a CuPy x (the CUDA IPC path), then prints, per
stage, the median and p90 of its duration over the requests, and the sum of the medians
against the round trip's median, and the parts of the channels' GPU steps (the buffer
views, queuing `run_variant`, the read-back wait, the status decode; wall time).
The instrumentation adds a few µs per event. `--host` runs the NumPy host path without a
GPU (the device stages then read 0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml
from probe_hook import install

#: What the hook records (`probe_hook`'s preamble gives it `_rec` and `_now`).
HOOK = '''
        import safemon.transport.sockets as S
        _send, _recv = S.send_message, S.recv_message

        def send_message(sock, frames, **kw):
            h = json.loads(bytes(frames[0]))
            _rec.append((_now(), "send", h["kind"], h["seq"], h["channel"],
                         h["meta"].get("job", ""), h["meta"].get("kernel_seconds", 0.0)))
            return _send(sock, frames, **kw)

        def recv_message(sock, **kw):
            got = _recv(sock, **kw)
            if got is not None:
                m = got.message
                _rec.append((_now(), "recv", m.kind.value, m.seq, m.channel,
                             m.meta.get("job", ""), 0.0))
            return got

        import safemon.transport as T
        for mod in (S, T):
            mod.send_message, mod.recv_message = send_message, recv_message
        import safemon.channels.worker as W, safemon.daemon as D, safemon.client as C
        for mod in (W, D, C):
            for name in ("send_message", "recv_message"):
                if hasattr(mod, name):
                    setattr(mod, name, locals()[name])

        def _span(owner, name, label):
            inner = getattr(owner, name)

            def wrapped(*a, **kw):  # a method (self in a) or a module's function
                _rec.append((_now(), "begin", label, 0, "", "", 0.0))
                try:
                    return inner(*a, **kw)
                finally:
                    _rec.append((_now(), "end", label, 0, "", "", 0.0))
            setattr(owner, name, wrapped)

        # (A channel runs as `python -m safemon.channels.worker`, i.e. as __main__: its
        # class is not this module's, so its GPU step is read from the result's
        # kernel_seconds, which it measures around exactly that step.)
        import safemon.device_io as IO
        _span(IO.ExchangeBuffers, "stage", "stage")
        _span(IO.ExchangeBuffers, "take", "take")

        # The channel's GPU step, part by part (wall time, waits included): the views of
        # the client's buffers, queuing the product, the read-back of digests and status
        # blocks (the wait), decoding the status. The channel's module imports these after
        # this hook ran, so it gets the wrapped ones.
        import safemon.kernels.api as API, safemon.kernels.model_gpu as MG
        _span(IO.ImportedBuffers, "view", "ch: views of the client's buffers")
        _span(API, "run_variant", "ch: run_variant (queued)")
        _span(MG.DigestBatch, "values", "ch: read-back (the wait)")
        _span(API.MatmulResult, "wait", "ch: status decode")
        import safemon.kernels.checked as CK
        _span(MG.DigestBatch, "__init__", "ch: digest batch (zeroed buffer)")
        _span(MG.DigestBatch, "add_copy", "ch: digesting copy queued")
        _span(MG.DigestBatch, "add", "ch: digest queued")
        _span(MG.DigestBatch, "queue_read", "ch: digests' read-back queued")
        _span(CK, "queue_status_reads", "ch: status read-back queued")
'''


def _load(out: Path) -> dict[int, list[tuple]]:
    events: dict[int, list[tuple]] = {}
    for f in out.glob("*.jsonl"):
        events[int(f.stem)] = [tuple(json.loads(line)) for line in f.read_text().splitlines()]
    return events


def analyse(events: dict[int, list[tuple]], client_pid: int) -> dict[str, list[float]]:
    """Per request, the durations (µs) of the stages between the client's send and its
    release check's end."""
    merged = sorted((e[0], pid, *e[1:]) for pid, evs in events.items() for e in evs
                    if e[2] not in ("heartbeat", "register"))
    client = [e for e in merged if e[1] == client_pid]
    starts = [e[0] for e in client if e[2] == "begin" and e[3] == "stage"] or [
        e[0] for e in client if e[2] == "send" and e[3] == "request"]
    stages: dict[str, list[float]] = defaultdict(list)
    for i, t0 in enumerate(starts):
        t1 = starts[i + 1] if i + 1 < len(starts) else float("inf")
        win = [e for e in merged if t0 <= e[0] < t1]
        try:
            _one(win, client_pid, stages)
        except (StopIteration, ValueError, IndexError, KeyError):
            continue
    return stages


def _one(win: list[tuple], cpid: int, acc: dict[str, list[float]]) -> dict[str, list[float]]:
    """One request's stages from its events (t, pid, event, kind|label, seq, channel, job,
    kernel_seconds), appended to `acc`. Raises StopIteration/ValueError when incomplete."""
    def first(pred):
        return next(e for e in win if pred(e))

    def ev(pid_is_client: bool | None, event: str, kind: str, **want: str) -> list[tuple]:
        out = []
        for e in win:
            if pid_is_client is not None and (e[1] == cpid) != pid_is_client:
                continue
            if e[2] != event or e[3] != kind:
                continue
            if "channel" in want and (e[5] == "") != (want["channel"] == ""):
                continue
            if "job" in want and e[6] != want["job"]:
                continue
            out.append(e)
        return out

    c_send = first(lambda e: e[1] == cpid and e[2] == "send" and e[3] == "request")
    staged = [e for e in win if e[1] == cpid and e[3] == "stage"]  # none on the host path
    st_b, st_e = (staged[0], staged[1]) if len(staged) == 2 else (c_send, c_send)
    d_recv = next(e for e in ev(False, "recv", "request", channel="") if e[0] >= c_send[0])
    dpid = d_recv[1]
    work = [e for e in ev(False, "send", "request", channel="x", job="live") if e[1] == dpid]
    ch_recv = {e[1]: e for e in ev(False, "recv", "request", channel="x", job="live")
               if e[1] != dpid}
    ch_send = {e[1]: e for e in ev(False, "send", "result", channel="x", job="live")}
    d_res = sorted(e for e in ev(False, "recv", "result", channel="x", job="live")
                   if e[1] == dpid)
    reply = first(lambda e: e[1] == dpid and e[2] == "send" and e[3] == "reply")
    c_recv = first(lambda e: e[1] == cpid and e[2] == "recv" and e[3] == "reply")
    took = [e for e in win if e[1] == cpid and e[3] == "take"]
    tk_b, tk_e = (took[0], took[1]) if len(took) == 2 else (c_recv, c_recv)
    if len(work) < 2 or len(ch_recv) < 2 or len(ch_send) < 2 or len(d_res) < 2:
        raise ValueError("incomplete")
    decisive = d_res[1]  # 2oo3: the second agreeing result releases
    # The decisive result's channel: the last channel to send before it arrived.
    dec = max((e for e in ch_send.values() if e[0] <= decisive[0]), key=lambda e: e[0])[1]
    gpu_s = ch_send[dec][7]
    us = 1e-3
    rows = {
        "client: stage x (copy, finite check, digest, wait)": (st_e[0] - st_b[0]) * us,
        "client: stage end -> request sent (encode)": (c_send[0] - st_e[0]) * us,
        "hop client -> daemon (incl. daemon decode)": (d_recv[0] - c_send[0]) * us,
        "daemon: request in -> first work out": (work[0][0] - d_recv[0]) * us,
        "daemon: first -> last work out": (work[-1][0] - work[0][0]) * us,
        "hop daemon -> decisive channel (incl. decode)": (ch_recv[dec][0] - work[0][0]) * us,
        "channel: GPU step (kernel_seconds: read x, kernel, digests, write, sync)": gpu_s * 1e6,
        "channel: work in -> result sent, less the GPU step": (
            (ch_send[dec][0] - ch_recv[dec][0]) * us - gpu_s * 1e6),
        "hop channel -> daemon (incl. decode)": (decisive[0] - ch_send[dec][0]) * us,
        "daemon: decisive result in -> reply out (vote)": (reply[0] - decisive[0]) * us,
        "hop daemon -> client (incl. decode)": (c_recv[0] - reply[0]) * us,
        "client: reply in -> take begins": (tk_b[0] - c_recv[0]) * us,
        "client: take (digest of the slot, wait, copy)": (tk_e[0] - tk_b[0]) * us,
        "round trip (stage begin -> take end)": (tk_e[0] - st_b[0]) * us,
        "channels' GPU steps, all (mean)": statistics.fmean(e[7] for e in ch_send.values()) * 1e6,
    }
    for k, v in rows.items():
        acc[k].append(v)
    return acc


def channel_spans(events: dict[int, list[tuple]], client_pid: int) -> dict[str, list[float]]:
    """Durations (µs) of the labelled spans ("ch: ...") in every process but the client's,
    pairing each begin with the next end of its label in the same process."""
    out: dict[str, list[float]] = defaultdict(list)
    for pid, evs in events.items():
        if pid == client_pid:
            continue
        open_at: dict[str, list[int]] = defaultdict(list)
        for e in sorted(evs):
            if e[1] == "begin" and str(e[2]).startswith("ch: "):
                open_at[e[2]].append(e[0])
            elif e[1] == "end" and open_at.get(e[2]):
                out[e[2]].append((e[0] - open_at[e[2]].pop()) * 1e-3)
    return dict(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--placement", default="process")
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--variant", default="")
    ap.add_argument("--out", default=None)
    ap.add_argument("--host", action="store_true",
                    help="NumPy backend and a NumPy x (no GPU; the host path)")
    args = ap.parse_args()

    work = Path(args.out or tempfile.mkdtemp(prefix="safemon-tl-"))
    events_dir = work / "events"
    events_dir.mkdir(parents=True, exist_ok=True)
    os.environ["SMTL_OUT"] = str(events_dir)
    hook = install(work, "safemon_tl_hook", "SMTL_OUT", HOOK)  # and this process: the client

    from safemon.bench.runtime import channel_variant
    from safemon.bench.vote import _bench_config, running_daemon

    m, n, k = (int(v) for v in args.size.split("x"))
    cfg = _bench_config(work, "ipc", "numpy" if args.host else "cupy", ["16x16x16"])
    cfg["channels"] = [{"name": f"c{i}", "placement": args.placement,
                        "variant": channel_variant(args.variant)} for i in range(3)]
    cfg_path = work / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    rng = np.random.default_rng(1)
    with running_daemon(cfg_path, work / "daemon.log", 120.0) as client:
        wid = client.register_weight(rng.standard_normal((k, n), dtype=np.float32))
        x = rng.standard_normal((m, k), dtype=np.float32)
        if not args.host:
            import cupy as cp

            x = cp.asarray(x)
        for _ in range(20):
            client.matmul(x, wid, timeout=10.0)
        hook._rec.clear()
        for _ in range(args.requests):
            client.matmul(x, wid, timeout=10.0)
        assert args.host or client.last_request_device, client.device_io_off_reason
    hook._dump()
    stages = analyse(_load(events_dir), os.getpid())
    n_req = len(next(iter(stages.values()), []))
    print(f"{args.placement} {args.size} variant {args.variant or 'default'}: "
          f"{n_req} requests analysed (µs; p50 / p90)")
    total = 0.0
    for name, vals in stages.items():
        p50 = statistics.median(vals)
        p90 = sorted(vals)[int(0.9 * (len(vals) - 1))]
        if not name.startswith(("round trip", "channels'", "daemon: first")):
            total += p50
        print(f"  {name:58s} {p50:9.1f} {p90:9.1f}")
    print(f"  {'sum of the stage medians on the critical path':58s} {total:9.1f}")
    spans = channel_spans(_load(events_dir), os.getpid())
    if spans:
        print("  parts of the channels' GPU steps (all channels; µs, p50 / p90):")
        for name, vals in spans.items():
            print(f"    {name:56s} {statistics.median(vals):9.1f} "
                  f"{sorted(vals)[int(0.9 * (len(vals) - 1))]:9.1f}")
        stages.update({f"span {k}": v for k, v in spans.items()})
    (work / "timeline.json").write_text(json.dumps(stages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
