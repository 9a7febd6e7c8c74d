"""Device probe: does a request wait for the daemon's work on the request before it?

    PYTHONPATH=$PWD SAFEMON_TIMING__SPIN_S=0.005 python3 scripts/gap_probe.py \
        [--rounds 6] [--reps 60] [--gaps-us 0,300,1000]

With inline 2oo3 channels the daemon replies once two channels agree, and only then waits
for the third channel's pass, reads it back and votes on it (`Daemon._take_inline`), all
in its one loop thread. A client that sends its next request at once may therefore find the
daemon still busy with the last one. This probe starts a real 2oo3 daemon with inline
channels (the runtime bench's config, cupy, ipc://) and times `Client.run` of the issue-16
MLP and `Client.matmul` at 80³ with a pause of each `--gaps-us` before every request (a
busy wait, so the client's core stays awake; the pause is not in the round trip), in
alternating rounds. A round trip that falls with the pause measures what the leftovers of
the request before cost the next one: an upper bound on what finishing the third channel
outside the round could save, since the pause also lets the third channel's GPU work end
before the next request's starts. A round trip that rises instead bounds nothing: the
pause brings a slowdown of its own (measured on the H100: docs/RUNTIME.md, "Requests after
a pause are slower"), which can hide such a saving. As a control, the same pauses precede the products
computed directly in this process, without safemon ("mlp direct": four cupy.matmul of the
MLP's weights; "80 direct": one 80³ cupy.matmul; each followed by a device synchronize): a
slowdown there too belongs to the GPU or its driver, not to safemon. Outputs are compared
bit for bit across arms. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import time

import cupy as cp
import numpy as np
from client_stream_probe import inline_mlp_daemon, same_bits_as_before

from safemon.bench.runtime import ModelShape, _model_operands


def _pause(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--gaps-us", default="0,300,1000")
    args = ap.parse_args()
    gaps = [int(g) for g in args.gaps_us.split(",")]
    rng = np.random.default_rng(1)
    _layers, weights, x_host = _model_operands(ModelShape(), rng)
    dws = [cp.asarray(w) for w in weights.values()]
    dx = cp.asarray(x_host)
    x80 = cp.asarray(rng.standard_normal((80, 80), dtype=np.float32))
    w80 = cp.asarray(rng.standard_normal((80, 80), dtype=np.float32))

    def mlp_direct() -> cp.ndarray:
        h = dx
        for w in dws:
            h = cp.matmul(h, w)
        cp.cuda.Device().synchronize()
        return h

    def direct80() -> cp.ndarray:
        c = cp.matmul(x80, w80)
        cp.cuda.Device().synchronize()
        return c

    kinds = ("mlp", "mlp direct", "80", "80 direct")
    rtt: dict[tuple[int, str], list[float]] = {(g, r): [] for g in gaps for r in kinds}
    with inline_mlp_daemon() as (client, voted):
        calls = {"mlp": voted["mlp"], "mlp direct": mlp_direct, "80": voted["80"],
                 "80 direct": direct80}
        want: dict[str, np.ndarray | None] = {r: None for r in calls}
        print(f"gap probe, {datetime.datetime.now(datetime.UTC):%FT%TZ}, "
              f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, "
              f"spin_s {client.config.timing.spin_s}, gaps {gaps} µs")
        for rnd in range(args.rounds + 1):  # round 0 warms up
            order = gaps if rnd % 2 == 0 else list(reversed(gaps))
            for gap in order:
                for req, call in calls.items():
                    for _ in range(args.reps):
                        _pause(gap * 1e-6)
                        t0 = time.perf_counter()
                        out = call()
                        t1 = time.perf_counter()
                        if "direct" not in req and not client.last_request_device:
                            raise SystemExit(f"{req}: fell back to host memory")
                        if rnd:
                            rtt[(gap, req)].append(t1 - t0)
                    same_bits_as_before(want, req, out, f"{req} after a {gap} µs pause")
    print("| request | pause before it (µs) | round trip p50 / p99 µs | p50 ÷ no pause |")
    print("|---|---|---|---|")
    for req in kinds:
        base = float(np.median(rtt[(gaps[0], req)]))
        for gap in gaps:
            xs = np.array(rtt[(gap, req)]) * 1e6
            print(f"| {req} | {gap} | {np.percentile(xs, 50):,.0f} / {np.percentile(xs, 99):,.0f} "
                  f"| {np.median(xs) / (base * 1e6):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
