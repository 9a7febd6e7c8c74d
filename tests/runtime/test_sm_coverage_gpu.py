"""On a GPU: the daemon's default self-tests cover every SM, it exports the coverage, and a
failed self-test's fault event names the SM that ran the failing block."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import zmq

from safemon.transport import Limits, decode

from .helpers import make_config, system, wait_for

pytestmark = pytest.mark.gpu


def test_gpu_default_selftests_cover_every_sm_and_name_a_failing_sm(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3", extra={"backend": "cupy"})
    with system(cfg) as (daemon, client):
        def covered() -> bool:
            return all(c["sm_coverage"] == 1.0 for c in client.status()["channels"])

        assert wait_for(covered, 30.0), client.status()["channels"]
        assert daemon.registry.get_sample_value(
            "safemon_selftest_sm_coverage_ratio", daemon.metrics.channel_labels("c1")) == 1.0
        sub = daemon.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(cfg.endpoints.events)
        try:
            time.sleep(0.2)  # the subscription reaches the PUB socket
            client.inject("c1", "bitflip-c")  # no live work: c1's next C is a self-test's
            details = []
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline and sub.poll(1000):
                body = json.loads(bytes(decode(sub.recv_multipart(copy=False), Limits()).arrays[0]).decode())
                if body["event"] == "fault" and body.get("channel") == "c1":
                    details.append(body["detail"])
                    break
        finally:
            sub.close(linger=0)
    assert details and "on SM " in details[0], details
