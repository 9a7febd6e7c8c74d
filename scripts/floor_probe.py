"""Device probe: the floor under any voter that runs beside the app, in another process.

usage: python3 scripts/floor_probe.py [--size 80x80x80] [--requests 2000] [--spin-us 5000]

Issue 16 asks for an 80³ 2oo3 device-resident request with at most 150 µs p50 over the
critical-path channel's kernel time, and for a 1024×1024×64 one within 1.5× the direct
kernel. This probe times the least such a request can cost when the voter runs in its own
process, with none of safemon's code in the path: no schema, no core, no vote, no metrics.

- The "app" (this process) exports an input buffer and an output buffer by CUDA IPC.
  Per request it copies x into the input buffer with safemon's copy-digest kernel and
  waits for the digest (an app must wait: the digest goes into the request), sends a
  300-byte message over ipc:// (ZeroMQ DEALER → ROUTER), waits for the answer, then copies
  the released slot out with its digest and waits (the check of the released bytes).
- The "daemon" (a child process) imports both buffers once. Three "channels", each with
  its own stream, each run a CUDA graph captured once: x copied from the input buffer,
  the product (safemon's own kernel, unprotected: no checksum, no signature check), the
  product copied into the channel's slot with its digest. Per request the daemon launches the three graphs, waits for each stream, and
  answers. That is all the GPU work a 2oo3 request needs, without ECC or signatures.

Rows (p50 / p99 µs over `--requests` after 200 warm-up requests, one run):
- ``gpu alone``: the daemon's three launches and waits, timed in the daemon (its critical
  path: the product is the same on every channel);
- ``zmq only``: the round trip with no GPU work on either side;
- ``request``: the whole request as above; ``request − gpu alone`` is the floor of the
  overhead that issue 16's first target bounds at 150 µs;
- ``request, staged without a wait (IPC event)``: the app queues its copy and digest of x
  and records an interprocess CUDA event instead of waiting; each channel's stream waits
  for that event on the device before its graph (cudaStreamWaitEvent). The digest would
  stay in device memory for the channels to check;
- ``... slot not taken``: the app does no GPU work after the answer (as if it used the
  released slot in place, with no copy and no check);
- ``request, no app GPU work``: the same without the app's two copies and waits.

Each row runs with both processes blocking in poll (`--spin-us 0`) and spinning up to
`--spin-us` before blocking (as `timing.spin_s`). The direct kernel (one cupy.matmul and a
wait, in the app: the bench's baseline) is timed too. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zmq
from zmq_hop_probe import _wait as hop_wait

WARMUP = 200


def _wait(sock: Any, spin_s: float) -> None:
    """Poll without sleeping for up to `spin_s`, then block (zmq_hop_probe's waiting)."""
    hop_wait(sock, "spin-then-block", spin_s)


def _daemon(address: str, m: int, n: int, k: int, x_handle: bytes, out_handle: bytes,
            event_handle: bytes, spin_s: float, gpu: bool) -> None:
    import cupy as cp

    from safemon.config import VariantConfig
    from safemon.kernels.api import run_variant
    from safemon.kernels.model_gpu import DigestBatch

    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    s.bind(address)
    ident, _hello = s.recv_multipart()
    rt = cp.cuda.runtime
    x_ptr = rt.ipcOpenMemHandle(x_handle)
    out_ptr = rt.ipcOpenMemHandle(out_handle)
    staged_event = rt.ipcOpenEventHandle(event_handle)  # the app's "x is staged" event
    slot_bytes = m * n * 4

    def view(ptr: int, offset: int, shape: tuple[int, int]) -> Any:
        mem = cp.cuda.UnownedMemory(ptr, offset + shape[0] * shape[1] * 4, None)
        return cp.ndarray(shape, cp.float32, cp.cuda.MemoryPointer(mem, offset))

    source = view(x_ptr, 0, (m, k))
    # The channels' own kernel, unprotected (no checksum, no ES check): the product a
    # channel computes, without the protection's cost.
    variant = VariantConfig(checksum=None, level=None).to_variant(m, n, k)
    rng = np.random.default_rng(1)
    channels = []
    notes = []
    for c in range(3):
        stream = cp.cuda.Stream(non_blocking=True)
        w = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        slot = view(out_ptr, c * slot_bytes, (m, n))

        def step(w: Any = w, slot: Any = slot) -> tuple[Any, ...]:
            x = source.copy()
            c_ = run_variant(x, w, variant, "cupy", wait=False).c
            batch = DigestBatch(1)
            batch.add_copy(c_, slot)
            batch.queue_read()
            return batch, x, c_  # kept: a graph's memory must not go back to the pool

        with stream:
            step()  # the kernels compiled and loaded outside the capture
            stream.synchronize()
            graph = None
            kept: tuple[Any, ...] = ()
            try:
                stream.begin_capture(mode=rt.streamCaptureModeRelaxed)
                try:
                    kept = step()
                finally:
                    captured = stream.end_capture()
                graph = captured
            except Exception as exc:  # then queued by hand: said in the output
                notes.append(f"channel {c}: capture failed ({exc!r:.80}), queued by hand")
        channels.append((stream, graph, step, kept))

    def run_channels(after_event: bool = False) -> None:
        for stream, graph, step, _ in channels:
            if after_event:  # the stream waits on the GPU for the app's staging, not the host
                rt.streamWaitEvent(stream.ptr, staged_event, 0)
            if graph is not None:
                graph.launch(stream)
            else:
                with stream:
                    step()
        for stream, _, _, _ in channels:
            stream.synchronize()

    alone = []
    for i in range(WARMUP + 500):
        t0 = time.perf_counter()
        run_channels()
        if i >= WARMUP:
            alone.append((time.perf_counter() - t0) * 1e6)
    s.send_multipart([ident, np.array(alone).tobytes(), "; ".join(notes).encode()])
    while True:
        _wait(s, spin_s)
        ident, what = s.recv_multipart()
        if what == b"stop":
            break
        if gpu:
            run_channels(after_event=what == b"e")
        s.send_multipart([ident, b"done"])
    s.close(0)
    ctx.term()


def _percentiles(samples: list[float]) -> str:
    a = np.array(samples)
    return f"{np.percentile(a, 50):8.1f} / {np.percentile(a, 99):8.1f}"


def run(size: tuple[int, int, int], requests: int, spin_s: float) -> dict[str, list[float]]:
    import cupy as cp

    from safemon.kernels.model_gpu import DigestBatch, copy_digest

    m, n, k = size
    rt = cp.cuda.runtime
    inp = cp.cuda.Memory(m * k * 4)
    out = cp.cuda.Memory(3 * m * n * 4)
    staged = cp.ndarray((m, k), cp.float32, cp.cuda.MemoryPointer(inp, 0))
    slot0 = cp.ndarray((m, n), cp.float32, cp.cuda.MemoryPointer(out, 0))
    x = cp.asarray(np.random.default_rng(0).standard_normal((m, k), dtype=np.float32))
    staged_event = cp.cuda.Event(block=False, disable_timing=True, interprocess=True)
    event_handle = bytes(rt.ipcGetEventHandle(staged_event.ptr))
    staged[...] = x
    d = tempfile.mkdtemp(prefix="floor-")
    ctx = zmq.Context()
    rows: dict[str, list[float]] = {}
    for gpu in (False, True):
        address = f"ipc://{Path(d) / f's{int(gpu)}'}"
        p = mp.get_context("spawn").Process(
            target=_daemon, args=(address, m, n, k, bytes(rt.ipcGetMemHandle(inp.ptr)),
                                  bytes(rt.ipcGetMemHandle(out.ptr)), event_handle, spin_s,
                                  gpu))
        p.start()
        app = ctx.socket(zmq.DEALER)
        app.connect(address)
        app.send(b"hello")
        while not app.poll(1000):  # the daemon's set-up (kernels compiled: seconds)
            if not p.is_alive():
                raise SystemExit(f"the probe's daemon process died (exit code {p.exitcode})")
        alone, notes = app.recv_multipart()
        if notes:
            print(f"note: {notes.decode()}")
        if gpu:
            rows["gpu alone"] = np.frombuffer(alone, dtype=np.float64).tolist()
        # (label, how x is staged, whether the released slot is copied out and checked)
        modes = [("request", "wait", True),
                 ("request, staged without a wait (IPC event)", "event", True),
                 ("request, staged with a wait, slot not taken", "wait", False),
                 ("request, staged without a wait, slot not taken", "event", False),
                 ("request, no app GPU work", None, False)] if gpu else [
            ("zmq only", None, False)]
        for label, staging, take in modes:
            samples = []
            for i in range(WARMUP + requests):
                t0 = time.perf_counter()
                if staging == "wait":  # the digest read back before the request is sent
                    copy_digest(x, staged)
                elif staging == "event":  # the digest stays on the device; no host wait
                    DigestBatch(1).add_copy(x, staged)
                    staged_event.record()
                app.send(b"e" if staging == "event" else b"r")
                _wait(app, spin_s)
                if not app.poll(0):
                    raise SystemExit("no answer from the probe's daemon within 10 s")
                app.recv()
                if take:
                    copy_digest(slot0, cp.empty((m, n), cp.float32))
                if i >= WARMUP:
                    samples.append((time.perf_counter() - t0) * 1e6)
            rows[label] = samples
        app.send(b"stop")
        p.join(30)
        app.close(0)
    direct = []
    w = cp.asarray(np.random.default_rng(2).standard_normal((k, n), dtype=np.float32))
    for i in range(WARMUP + requests):
        t0 = time.perf_counter()
        cp.matmul(x, w)
        cp.cuda.get_current_stream().synchronize()
        if i >= WARMUP:
            direct.append((time.perf_counter() - t0) * 1e6)
    rows["direct kernel (one cupy.matmul + wait, in the app)"] = direct
    ctx.term()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="80x80x80", help="MxNxK")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--spin-us", type=float, default=5000.0)
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.size.split("x"))
    import cupy as cp

    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"floor probe {args.size}, {args.requests} requests per row, "
          f"{name}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    print("| waiting | row | p50 / p99 µs |")
    print("|---|---|---|")
    for spin in (0.0, args.spin_us * 1e-6):
        rows = run((m, n, k), args.requests, spin)
        how = "block" if spin == 0 else f"spin {args.spin_us:.0f} µs"
        for label, samples in rows.items():
            print(f"| {how} | {label} | {_percentiles(samples)} |")
        over = statistics.median(rows["request"]) - statistics.median(rows["gpu alone"])
        print(f"| {how} | request − gpu alone (p50) | {over:8.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
