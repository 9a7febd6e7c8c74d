"""Device probe: one channel worker's GPU path outside the daemon, step by step and timed.

usage: python3 scripts/channel_gpu_probe.py [--weights-first]
Prints the warm-up time, weight uploads, the first live runs (the first one profiled), and
every golden self-test's verdict (with what differs when one fails).
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import numpy as np
import zmq

from safemon.channels.worker import ChannelWorker
from safemon.config import load_config
from safemon.golden_store import load_patterns


def main() -> int:
    weights_first = "--weights-first" in sys.argv
    cfg = load_config(None, env={"SAFEMON_BACKEND": "cupy"})
    assert cfg.channels is not None
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    w = ChannelWorker(ctx, cfg, cfg.channels[0].name, incarnation=0, epoch=1)
    t = time.perf_counter()
    w._setup_device()
    print(f"setup_device {time.perf_counter() - t:.3f} s")
    t = time.perf_counter()
    w._warm_up()
    print(f"warm_up {time.perf_counter() - t:.3f} s")
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((65, 64), dtype=np.float32)
    w2 = rng.standard_normal((65, 10), dtype=np.float32)
    x = rng.standard_normal((20, 65), dtype=np.float32)
    pats = [p for p in load_patterns(cfg)
            if p.variant == cfg.channels[0].variant.to_variant(p.a.shape[0], p.b.shape[1], p.a.shape[1])]

    def selftests() -> None:
        for p in pats:
            t0 = time.perf_counter()
            try:
                c, es = w._run(p.a, w._to_device(p.b), p.variant)
            except Exception as exc:  # the probe reports, it does not judge
                print(f"selftest {p.id}: EXCEPTION {exc!r}")
                continue
            ok = p.check(c, es)
            print(f"selftest {p.id}: {'pass' if ok else 'FAIL'} {time.perf_counter() - t0:.4f} s")
            if not ok:
                print("   c differs at", int(np.sum(c.view(np.uint32) != p.expected_c.view(np.uint32))),
                      "elements; es differs at", int(np.sum(es != p.expected_es)), "words",
                      "shapes", c.shape, p.expected_c.shape, es.shape, p.expected_es.shape)

    if not weights_first:
        selftests()
    for wid, arr in (("w1", w1), ("w2", w2)):
        t = time.perf_counter()
        w._store_weight(wid, arr)
        print(f"store_weight {wid} {arr.shape} {time.perf_counter() - t:.3f} s")
    if weights_first:
        selftests()
    v = cfg.channels[0].variant.to_variant(20, 64, 65)
    prof = cProfile.Profile()
    for i in range(3):
        t = time.perf_counter()
        if i == 0:
            prof.enable()
        c, es = w._run(x, w._weights["w1"], v)
        if i == 0:
            prof.disable()
        print(f"live run {i} (20x65 @ 65x64, {v.name}) {time.perf_counter() - t:.4f} s")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
    selftests()
    ctx.term()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
