"""A client written from docs/PROTOCOL.md alone (section 4.1, with sections 2 and 3): raw
pyzmq and json, no import of safemon's client or wire code. Against a real daemon on ipc://
sockets it says hello, registers a weight and gets a product, bit-identical to the reference,
then gets a typed error for an unknown weight id."""

from __future__ import annotations

import json
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zmq
from prometheus_client import CollectorRegistry

from safemon import admission
from safemon.daemon import Daemon
from tests.runtime.helpers import make_config, operands, reference, same_bits


def _send(sock: zmq.Socket[bytes], seq: int, kind: str, meta: dict[str, Any],
          arrays: tuple[npt.NDArray[np.float32], ...] = ()) -> None:
    """Section 2 and 3: a compact JSON header, then each array's raw little-endian bytes."""
    frames = [{"dtype": "float32", "shape": list(a.shape), "crc32": zlib.crc32(a.tobytes())}
              for a in arrays]
    header = {"v": 1, "epoch": 0, "seq": seq, "channel": "", "kind": kind, "frames": frames,
              "meta": meta}
    sock.send_multipart([json.dumps(header).encode(), *(a.astype("<f4").tobytes() for a in arrays)])


def _recv(sock: zmq.Socket[bytes]) -> tuple[dict[str, Any], list[npt.NDArray[Any]]]:
    assert sock.poll(20_000), "no answer from the daemon"
    header, *payload = sock.recv_multipart()
    h = json.loads(header)
    arrays = []
    for spec, raw in zip(h["frames"], payload, strict=True):
        assert zlib.crc32(raw) == spec["crc32"]
        arrays.append(np.frombuffer(raw, dtype=np.dtype(spec["dtype"]).newbyteorder("<"))
                      .reshape(spec["shape"]))
    return h, arrays


def test_a_client_written_from_the_protocol_document_registers_a_weight_and_gets_a_product(
        tmp_path: Path) -> None:
    # Timing headroom: this is about the protocol; a starved CPU must not overrun DTIs.
    cfg = make_config(tmp_path, "2oo2", transport="ipc", extra={"timing": {
        "request_deadline_s": 1.0, "selftest_deadline_s": 0.5, "dti_s": 0.6,
        "heartbeat_timeout_s": 1.0, "ftti_s": 2.0, "scrub_interval_s": 1.0}})
    daemon = Daemon(cfg, registry=CollectorRegistry())
    daemon.start()
    loop = threading.Thread(target=daemon.run, daemon=True)
    loop.start()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        assert daemon.ready.wait(60), "the voting set was never formed"
        sock.connect(cfg.endpoints.ingress)
        x, w = operands(5)

        _send(sock, 1, "control", {"command": "hello"})
        h, _ = _recv(sock)
        admits = admission.client_limits(cfg)  # what the daemon's transport admits
        assert (h["kind"], h["seq"], h["meta"]) == ("reply", 1, {
            "ok": True, "outcome": "hello", "max_frame_bytes": admits.max_frame_bytes,
            "max_total_bytes": admits.max_total_bytes})

        _send(sock, 2, "control", {"command": "register_weight"}, (w,))
        h, _ = _recv(sock)
        assert (h["kind"], h["seq"], h["meta"]["ok"]) == ("reply", 2, True)
        weight_id = h["meta"]["outcome"]

        _send(sock, 3, "request", {"weight_id": weight_id, "deadline_ms": 5000}, (x,))
        h, arrays = _recv(sock)
        assert (h["kind"], h["seq"], h["meta"]["outcome"]) == ("reply", 3, "released"), h
        assert same_bits(arrays[0].astype(np.float32), reference(x, w, cfg))

        _send(sock, 4, "request", {"weight_id": "0123456789abcdef01234567"}, (x,))
        h, _ = _recv(sock)
        assert (h["kind"], h["seq"], h["meta"]["error_type"]) == ("error", 4, "UnknownWeightError")
    finally:
        sock.close()
        ctx.term()
        daemon.request_stop()
        loop.join(10)
    assert not loop.is_alive()
