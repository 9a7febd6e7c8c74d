"""The sans-IO runtime core's own cost per device-resident request, on the CPU (issue 16).

usage: python3 scripts/core_probe.py [--requests N] [--profile TOP] [--sort KEY]

No GPU, no sockets, no channels: a formed 2oo3 `RuntimeCore` (the test suite's set-up,
`tests/runtime/test_device_requests.py`) with one registered weight handles N device-resident
requests as the daemon's loop hands them over: the client's REQUEST (decoded beforehand, as
the transport delivers it), then each of the three channels' RESULT with its digest frame, as
inline channels deliver them (`inline_message`, no encoding, with the schema the channel
checked before sending). It prints the mean wall time per request of those four `handle`
calls and of building the three RESULTs (the channels' schema checks included): the core's
share of the daemon's CPU per voted request and a little of the channels' (the rest:
transport, channels, effects, metrics export); with `--profile` the functions with the most
own (`--sort tottime`) or cumulative time under cProfile. Figures are reported, never
asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safemon.channels.inline import inline_message
from safemon.runtime import effects as fx
from safemon.runtime import stimuli as st
from safemon.transport.messages import parse_from_channel
from safemon.transport.wire import Kind
from tests.runtime.test_core import _msg, _of
from tests.runtime.test_device_requests import _device_meta, _frame, _registered

RESULT_META = {"ok": True, "job": "live", "variant": "v", "kernel_seconds": 0.001}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--profile", type=int, default=0, help="print the TOP functions by --sort")
    ap.add_argument("--sort", default="tottime", help="pstats key: tottime (own) or cumulative")
    args = ap.parse_args()
    core, _, clock, cfg, wid, x, w = _registered(Path(tempfile.mkdtemp()), "2oo3")
    meta = _device_meta(wid, x, w.shape[1])
    frame = _frame(x, w, cfg)
    warmup = 200
    total = warmup + args.requests * (2 if args.profile else 1)
    asks = [_msg(Kind.REQUEST, seq, meta) for seq in range(total)]

    def request(i: int) -> None:
        works = _of(core.handle(st.IngressMessage(b"c", asks[i], clock(), "ask")), fx.SendToChannel)
        if len(works) != 3:
            raise SystemExit(f"request {i}: {len(works)} work items sent, expected 3")
        replies: list[fx.Effect] = []
        for work in works:
            # As `_InlineWorker._send` hands it over: checked against its schema, the typed
            # result travelling with it (the core does not parse it again).
            result = inline_message(Kind.RESULT, epoch=1, seq=work.seq, channel=work.channel,
                                    meta=RESULT_META, arrays=(frame,),
                                    parsed=parse_from_channel(Kind.RESULT, RESULT_META))
            replies += _of(core.handle(st.ChannelMessage(work.channel, result, clock(), "res")),
                           fx.Reply)
        if not replies:
            raise SystemExit(f"request {i}: no reply after three agreeing results")

    for i in range(warmup):
        request(i)
    t0 = time.perf_counter()
    for i in range(warmup, warmup + args.requests):
        request(i)
    per = (time.perf_counter() - t0) / args.requests
    print(f"RuntimeCore.handle and the channels' RESULT checks, one device-resident 2oo3 "
          f"request (1 REQUEST + 3 RESULTs): "
          f"{per * 1e6:.1f} µs mean over {args.requests}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for i in range(warmup + args.requests, total):
            request(i)
        prof.disable()
        pstats.Stats(prof).sort_stats(args.sort).print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
