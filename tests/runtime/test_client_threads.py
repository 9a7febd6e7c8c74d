"""One `Client` shared by several threads (found by the bad-input review: replies were lost,
since a reply to another thread's request was skipped as stale). Calls now take turns under
the client's lock; each thread must get the result of its own input, bit for bit."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from safemon.models import Layer, reference_forward

from .helpers import make_config, operands, reference, same_bits, system

THREADS = 4
CALLS = 15


def test_threads_sharing_one_client_each_get_their_own_result(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3", transport="ipc")
    _, w = operands(5)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        layers = [Layer(wid, None, "relu")]
        mid = client.register_model(layers)
        start = threading.Barrier(THREADS)
        failures: list[str] = []

        def work(t: int) -> None:
            rng = np.random.default_rng(100 + t)
            start.wait()
            try:
                for i in range(CALLS):
                    x = rng.standard_normal((8 + t, 16)).astype(np.float32)
                    if i % 3 == 2:
                        ok = same_bits(client.run(mid, x, timeout=10.0),
                                       reference_forward([w], layers, x))
                    else:
                        ok = same_bits(client.matmul(x, wid, timeout=10.0),
                                       reference(x, w, cfg))
                    if i % 5 == 4:
                        ok = ok and client.status()["mode"] == "NORMAL"
                    if not ok:
                        failures.append(f"thread {t} call {i}: not its own result")
            except Exception as exc:
                failures.append(f"thread {t}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not any(th.is_alive() for th in threads)
        assert failures == []
        released = daemon.registry.get_sample_value("safemon_requests_total",
                                                    {"outcome": "released"})
        assert released is not None and released >= THREADS * CALLS
