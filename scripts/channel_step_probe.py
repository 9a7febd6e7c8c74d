"""Device probe: a channel's device step (issue 16) outside the runtime, alone and with
other processes doing the same step at the same moment.

usage: python3 scripts/channel_step_probe.py [--size 80x80x80] [--iters 300] [--procs 1,3]
                                             [--variant ones/I/exact] [--profile]

Each process owns a non-blocking CuPy stream, an ECC-protected weight and an x, and runs
the step a channel runs for a device-resident request: copy x (as the IPC read does),
`run_variant` with its checks, the digests of C, ES and x, the copy of C into an output
slot. Two orders are timed, alternating per iteration:
- `three waits`: run_variant waits for its status block, the digests wait for their
  read-back, then the stream is synchronised (the channel before commit "one wait");
- `one wait`: everything is queued, then the digests' read-back waits, then the status
  block is read (a second, short wait on an idle stream; the channel of commit "one wait");
- `one read-back`: the status block's copy is queued before the digests, whose read-back
  is the only wait;
- `copies last`: the digests' kernels first, then the slot copy, the digests' and the status
  block's copies to the host, one wait (no copy between kernels but the read of x); the
  digests are finished on the host as the others' are (not before commit "plot", so its
  figures in evidence/h100-2026-11-23-step calls 4 and 5 lack that host work);
- `kernel copies`: x read and the slot written by `safemon_copy_digest` kernels, which also
  digest x and C on the way; ES digested; both read-backs; one wait (no copy engine until
  the read-backs): the channel's step now (`DigestBatch`, safemon/channels/worker.py).
For each, the time to queue (launches, host side) and the step's wall time. With
`--procs 3`, three processes start each iteration together (a barrier), as the daemon's
three work messages reach three channel processes; no sockets are involved. Prints p50 /
p90 in µs per process count and order.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from typing import Any


def _worker(rank: int, size: tuple[int, int, int], iters: int, label: str,
            barrier: Any, queue: Any, profile: bool = False) -> None:
    import cupy as cp
    import numpy as np

    from safemon.bench.runtime import channel_variant
    from safemon.config import VariantConfig
    from safemon.digest import finish
    from safemon.ecc import ProtectedArray
    from safemon.kernels.api import run_variant
    from safemon.kernels.backend import Backend
    from safemon.kernels.checked import queue_status_reads
    from safemon.kernels.gpu import AUX_THREADS, function_for
    from safemon.kernels.model_gpu import DigestBatch, _blocks, device_digests, digest_build

    m, n, k = size
    rng = np.random.default_rng(rank)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        w = ProtectedArray.from_host(rng.standard_normal((k, n), dtype=np.float32),
                                     name="w", backend=Backend.CUPY)
        src = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        slot = cp.empty((m, n), dtype=cp.float32)
    stream.synchronize()
    variant = VariantConfig(**channel_variant(label)).to_variant(m, n, k)

    def three() -> float:
        x = cp.empty((m, k), dtype=cp.float32)
        x.data.copy_from_device_async(src.data, x.nbytes, stream)
        r = run_variant(x, w, variant, "cupy")
        t = time.perf_counter()
        device_digests([r.c, r.es, x])
        slot.data.copy_from_device_async(r.c.data, slot.nbytes, stream)
        stream.synchronize()
        return t

    def one(status_first: bool = False) -> float:
        """`one wait`; with `status_first`, `one read-back` (the status copy queued before
        the digests, which is the only difference between the two orders)."""
        x = cp.empty((m, k), dtype=cp.float32)
        x.data.copy_from_device_async(src.data, x.nbytes, stream)
        p = run_variant(x, w, variant, "cupy", wait=False)
        slot.data.copy_from_device_async(p.c.data, slot.nbytes, stream)
        reads = queue_status_reads([p.status]) if status_first else None
        t = time.perf_counter()
        device_digests([p.c, p.es, x])
        p.wait(reads.reports()[0] if reads is not None else None)
        return t

    digest_k = function_for(("digest",), digest_build, "safemon_digest_sum")
    pinned = np.frombuffer(cp.cuda.alloc_pinned_memory(64), dtype=np.uint64, count=8)
    rt = cp.cuda.runtime

    def digest_into(a: Any, acc: Any) -> None:
        digest_k((_blocks(a.size), 1, 1), (AUX_THREADS, 1, 1), (a, np.uint64(a.size), acc))

    def copies_last() -> float:
        x = cp.empty((m, k), dtype=cp.float32)
        x.data.copy_from_device_async(src.data, x.nbytes, stream)
        p = run_variant(x, w, variant, "cupy", wait=False)
        sums = cp.zeros(3, dtype=cp.uint64)
        for i, a in enumerate((p.c, p.es, x)):
            digest_into(a, sums[i:i + 1])
        slot.data.copy_from_device_async(p.c.data, slot.nbytes, stream)
        rt.memcpyAsync(pinned.ctypes.data, sums.data.ptr, 24, rt.memcpyDeviceToHost, stream.ptr)
        reads = queue_status_reads([p.status])
        t = time.perf_counter()
        p.wait(reads.reports()[0])
        [finish(int(v), int(a.size)) for v, a in zip(pinned[:3], (p.c, p.es, x), strict=True)]
        return t

    def kernel_copies() -> float:  # what the channel's step does now (worker.py)
        x = cp.empty((m, k), dtype=cp.float32)
        batch = DigestBatch(3)
        batch.add_copy(src, x)
        p = run_variant(x, w, variant, "cupy", wait=False)
        batch.add_copy(p.c, slot)
        batch.add(p.es)
        batch.queue_read()
        reads = queue_status_reads([p.status])
        t = time.perf_counter()
        batch.values()
        p.wait(reads.reports()[0])
        return t

    orders = (("three waits", three), ("one wait", one), ("one read-back", lambda: one(status_first=True)),
              ("copies last", copies_last), ("kernel copies", kernel_copies))
    rows: dict[str, list[float]] = {f"{name}{part}": [] for name, _ in orders
                                    for part in ("", ": queue")}
    if profile:  # the channel's order only, under cProfile: where its host time goes
        import cProfile
        import pstats

        with stream:
            for _ in range(20):
                kernel_copies()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(iters):
                kernel_copies()
            prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        queue.put((rank, {}))
        return
    with stream:
        for i in range(iters + 20):
            for name, step in orders:
                barrier.wait()
                t0 = time.perf_counter()
                tq = step()
                t1 = time.perf_counter()
                if i >= 20:
                    rows[name].append((t1 - t0) * 1e6)
                    rows[f"{name}: queue"].append((tq - t0) * 1e6)
    queue.put((rank, rows))


def _pct(vals: list[float], q: float) -> float:
    s = sorted(vals)
    return s[int(q * (len(s) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--procs", default="1,3")
    ap.add_argument("--variant", default="")
    ap.add_argument("--profile", action="store_true",
                    help="one process, the channel's order under cProfile (top 30 by own time)")
    args = ap.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    assert len(size) == 3
    ctx = mp.get_context("spawn")
    if args.profile:
        q = ctx.Queue()
        _worker(0, size, args.iters, args.variant, ctx.Barrier(1), q, profile=True)
        return 0
    print(f"channel step {args.size}, variant {args.variant or 'default'}, {args.iters} "
          "iterations (µs, p50 / p90; `queue` = until the last launch before the final "
          "wait, three waits: after run_variant's own wait)")
    for procs in (int(p) for p in args.procs.split(",")):
        barrier, queue = ctx.Barrier(procs), ctx.Queue()
        ps = [ctx.Process(target=_worker, args=(r, size, args.iters, args.variant, barrier,
                                                queue)) for r in range(procs)]
        for p in ps:
            p.start()
        got = [queue.get(timeout=300) for _ in ps]
        for p in ps:
            p.join(30)
        for name in got[0][1]:
            vals = [v for _, rows in got for v in rows[name]]
            print(f"  {procs} process(es)  {name:22s} {statistics.median(vals):8.1f} "
                  f"{_pct(vals, 0.9):8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
