"""Probe: what one ZeroMQ hop between two processes costs, blocking against spinning.

usage: python3 scripts/zmq_hop_probe.py [--n 3000] [--spin-us 200] [--gaps-us 0]

A ROUTER in this process and a DEALER echo in a child process, over ipc://, bounce a
small message (a 300-byte header-like frame) `--n` times; printed: the round trip (two
hops) p50 / p90 in µs for four ways of waiting:

- ``block``: both sides wait in a blocking poll (what safemon's loops do);
- ``spin``: both sides poll with timeout 0 in a loop, never sleeping;
- ``spin-then-block``: poll(0) for up to `--spin-us`, then a blocking poll;
- ``block+codec``: blocking, plus safemon's wire encode and decode on both sides.

`--gaps-us` (comma list) sleeps that long between round trips, as a request stream with
gaps does (a daemon's channels idle while the client works): with a gap the waiting
processes and ZeroMQ's I/O threads go idle, and the row says what waking them costs. A
spin window shorter than the gap does not cover it (the side then blocks as in ``block``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path

import zmq

MODES = ("block", "spin", "spin-then-block", "block+codec")


def _wait(sock: zmq.Socket, mode: str, spin_s: float) -> None:  # type: ignore[type-arg]
    if mode == "spin":
        while not sock.poll(0):
            pass
        return
    if mode == "spin-then-block":
        end = time.perf_counter() + spin_s
        while time.perf_counter() < end:
            if sock.poll(0):
                return
    sock.poll(10_000)


def _echo(address: str, mode: str, spin_s: float) -> None:
    from safemon.transport import Kind, Limits, decode, encode

    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(address)
    s.send(b"hello")
    limits = Limits()
    while True:
        _wait(s, mode, spin_s)
        frames = s.recv_multipart(copy=False)
        if bytes(frames[0]) == b"stop":
            break
        if mode == "block+codec":
            m = decode(frames, limits)
            frames = encode(Kind.RESULT, epoch=1, seq=m.seq, channel="c0",
                            meta={"job": "live", "ok": True, "variant": "ones/I/exact/small"})
        s.send_multipart(frames)
    s.close(0)
    ctx.term()


def run(mode: str, n: int, spin_s: float, gap_s: float = 0.0) -> list[float]:
    from safemon.transport import Kind, Limits, decode, encode

    d = tempfile.mkdtemp(prefix="hop-")
    address = f"ipc://{Path(d) / 's'}"
    ctx = zmq.Context()
    r = ctx.socket(zmq.ROUTER)
    r.bind(address)
    p = mp.get_context("spawn").Process(target=_echo, args=(address, mode, spin_s))
    p.start()
    ident = r.recv_multipart()[0]
    limits = Limits()
    out = []
    for i in range(n + 200):
        if gap_s:
            time.sleep(gap_s)
        t0 = time.perf_counter()
        if mode == "block+codec":
            frames = encode(Kind.REQUEST, epoch=1, seq=i + 1, channel="c0",
                            meta={"job": "live", "weight_id": "w" * 64, "x_rows": 80})
        else:
            frames = [b"h" * 300]
        r.send_multipart([ident, *frames])
        _wait(r, mode, spin_s)
        got = r.recv_multipart(copy=False)
        if mode == "block+codec":
            decode(got[1:], limits)
        if i >= 200:
            out.append((time.perf_counter() - t0) * 1e6)
    r.send_multipart([ident, b"stop"])
    p.join(10)
    r.close(0)
    ctx.term()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--spin-us", type=float, default=200.0)
    ap.add_argument("--gaps-us", default="0", help="comma list of sleeps between round trips")
    args = ap.parse_args()
    for gap in (float(g) for g in args.gaps_us.split(",")):
        for mode in MODES:
            t = sorted(run(mode, args.n, args.spin_us * 1e-6, gap * 1e-6))
            print(f"gap {gap:6.0f} µs {mode:16s} round trip (2 hops) p50 "
                  f"{statistics.median(t):7.1f} µs p90 {t[int(0.9 * (len(t) - 1))]:7.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
