"""The daemon's own /readyz and /healthz over its real metrics port: ready once the voting set
forms, unready (but alive) in latched SAFE, ready again after `reset`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from .helpers import make_config, system, wait_for


def probe(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_readyz_follows_the_voting_set_and_safe(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "1oo1D")
    cfg = cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={"port": 0})})
    with system(cfg, serve_metrics=True) as (daemon, client):
        assert daemon.metrics_url is not None
        base = daemon.metrics_url.removesuffix("/metrics")
        assert wait_for(lambda: probe(base + "/readyz")[0] == 200)
        assert probe(base + "/readyz")[1]["voting"] == ["c0"]
        client.inject("c0", "stuck")
        assert wait_for(lambda: probe(base + "/readyz")[0] == 503, 3 * cfg.timing.dti_s + 2.0)
        _status, body = probe(base + "/readyz")
        assert body["mode"] == "SAFE" and "SAFE" in str(body["reason"])
        assert probe(base + "/healthz")[0] == 200  # SAFE is a verdict, not a dead process
        client.clear_faults()
        client.reset()
        assert wait_for(lambda: probe(base + "/readyz")[0] == 200)
