"""Health over HTTP: `/healthz` and `/readyz` beside `/metrics`, on the one metrics port.

Probes (Kubernetes `httpGet`, Docker HEALTHCHECK, a load balancer) ask the running daemon
instead of starting a process. The daemon passes a read-only `HealthProbe`, a callable that
returns a `HealthReport` built by `assess` from its own state; this module never reaches
into the daemon.

- `/healthz`: 200 while the process serves HTTP *and* its event loop has turned within
  `LOOP_STALE_S` (a hung loop behind a live HTTP thread must not pass a liveness probe);
  503 otherwise.
- `/readyz`: 200 once a voting set has formed (the channels passed their start-up
  self-tests) and while the mode is not SAFE; 503 otherwise, with the reason. SAFE is
  latched, so a SAFE daemon stays unready until an operator's `safemon reset`.

Both answer a small JSON object (`HealthReport.as_dict`), GET and HEAD only. Without a probe
(`probe=None`, e.g. a bare `Metrics` in a test) both answer 200: the process is alive and
there is nothing else to judge.

`serve` runs a threaded WSGI server with that routing in front of prometheus_client's
exposition app, plain HTTP or HTTPS; `start_http_server` does so for a config's `metrics`
section and returns a `MetricsServer` (both re-exported by `safemon.metrics`).
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from safemon.states import Mode

if TYPE_CHECKING:
    from safemon.config import Config, MetricsConfig

__all__ = [
    "HEALTH_PATH",
    "LOOP_STALE_S",
    "READY_PATH",
    "HealthProbe",
    "HealthReport",
    "MetricsServer",
    "assess",
    "health_app",
    "serve",
    "start_http_server",
]

HEALTH_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"
#: Seconds without a turn of the daemon's loop after which /healthz fails. The loop wakes at
#: least every 50 ms; 10 s is the systemd unit's WatchdogSec, the bound already accepted
#: there for "hung" (a slow fault reaction is logged, not killed, below it).
LOOP_STALE_S: Final = 10.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class HealthReport:
    """What the probes answer.

    live: the process works (its loop turns). ready: it can serve requests now.
    reason: why not live or not ready ("" when both hold).
    mode: the system mode's value ("NORMAL", "DEGRADED", "SAFE").
    voting: the channels in the voting set.
    """

    live: bool
    ready: bool
    reason: str = ""
    mode: str = Mode.NORMAL.value
    voting: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {"live": self.live, "ready": self.ready, "reason": self.reason,
                "mode": self.mode, "voting": list(self.voting)}


HealthProbe = Callable[[], HealthReport]


def assess(
    *,
    mode: Mode,
    voting: Sequence[str],
    formed: bool,
    loop_age_s: float | None,
    stale_after_s: float = LOOP_STALE_S,
) -> HealthReport:
    """Judge health from the daemon's state (a pure function).

    Args:
        mode: the current system mode.
        voting: the channels voting now.
        formed: a voting set has formed at least once since start (start-up self-tests passed).
        loop_age_s: seconds since the event loop last turned; None before the loop started.
        stale_after_s: the liveness bound, seconds.
    """
    live = loop_age_s is None or loop_age_s <= stale_after_s
    reasons = []
    if not live:
        reasons.append(f"event loop has not turned for {loop_age_s:.1f} s")
    if not formed:
        reasons.append("start-up self-tests not passed yet")
    if mode is Mode.SAFE:
        reasons.append("mode is SAFE (latched until `safemon reset`)")
    elif formed and not voting:
        reasons.append("no channel is voting")
    ready = live and not reasons
    return HealthReport(live=live, ready=ready, reason="; ".join(reasons), mode=mode.value,
                        voting=tuple(voting))


def _answer(start_response: StartResponse, ok: bool, report: HealthReport | None,
            head: bool) -> list[bytes]:
    body = json.dumps(report.as_dict() if report else {"live": True, "ready": True}).encode()
    status = "200 OK" if ok else "503 Service Unavailable"
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))), ("Cache-Control", "no-store")])
    return [] if head else [body]


def health_app(metrics_app: WsgiApp, probe: HealthProbe | None) -> WsgiApp:
    """A WSGI app that answers `/healthz` and `/readyz` from `probe` and passes every other
    path to `metrics_app`. A probe that raises counts as not live (answered 503)."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in (HEALTH_PATH, READY_PATH):
            return metrics_app(environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return []
        report: HealthReport | None = None
        if probe is not None:
            try:
                report = probe()
            except Exception as exc:  # a broken probe must fail the check, not the server
                report = HealthReport(live=False, ready=False, reason=f"probe failed: {exc}")
        ok = report is None or (report.live if path == HEALTH_PATH else report.ready)
        return _answer(start_response, ok, report, method == "HEAD")

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scrape must not hold the daemon's exit


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds would flood stderr; structlog has the events."""


def serve(
    host: str,
    port: int,
    registry: CollectorRegistry,
    *,
    probe: HealthProbe | None = None,
    tls: tuple[Path, Path] | None = None,
) -> tuple[WSGIServer, threading.Thread]:
    """Serve `/metrics` (and every other path) from `registry`, and the probes from `probe`,
    on `host:port` in a daemon thread. `tls` = (certificate, key) PEM files for HTTPS.

    Port 0 binds a free port (read `server.server_port`).

    Raises:
        OSError: the address cannot be bound; ssl.SSLError / OSError: the TLS files cannot
            be read.
    """
    server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
    app = health_app(make_wsgi_app(registry), probe)
    server = make_server(host, port, app, server_class, _QuietHandler)
    if tls is not None:
        try:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile=str(tls[0]), keyfile=str(tls[1]))
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        except BaseException:
            server.server_close()
            raise
    thread = threading.Thread(target=server.serve_forever, name="safemon-http", daemon=True)
    thread.start()
    return server, thread


@dataclass
class MetricsServer:
    """A running metrics HTTP(S) endpoint. `url` is the scrape URL; `stop()` shuts it down
    and joins its thread (idempotent)."""

    url: str
    _server: Any = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout_s)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_http_server(
    config: Config | MetricsConfig,
    registry: CollectorRegistry,
    *,
    health: HealthProbe | None = None,
) -> MetricsServer:
    """Serve `registry` on `config.metrics.host:port` (HTTPS when tls_cert/tls_key are set),
    with `/healthz` and `/readyz` answered from `health` on the same port (`safemon.health`).

    Port 0 binds a free port; the returned `url` carries the actual one.

    Raises:
        OSError: the address cannot be bound, or the TLS files cannot be read.
    """
    from safemon.config import Config  # late: config is heavy and the probes do not need it

    mc = config.metrics if isinstance(config, Config) else config
    tls = (mc.tls_cert, mc.tls_key) if mc.tls_cert is not None and mc.tls_key is not None else None
    server, thread = serve(mc.host, mc.port, registry, probe=health, tls=tls)
    port = int(server.server_port)
    host = f"[{mc.host}]" if ":" in mc.host else mc.host
    scheme = "https" if tls else "http"
    return MetricsServer(url=f"{scheme}://{host}:{port}/metrics", _server=server, _thread=thread)


def check_url(config: Any, path: str = READY_PATH) -> str:
    """The URL a local health check asks: the config's metrics port on loopback (a wildcard
    bind address is reached through 127.0.0.1 / ::1), https when the config sets TLS."""
    mc = config.metrics
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(mc.host, mc.host)
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if mc.tls_cert is not None else "http"
    return f"{scheme}://{host}:{mc.port}{path}"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m safemon.health [--live] [--config FILE]`: exit 0 when the running daemon's
    /readyz (with --live: /healthz) answers 200, 1 otherwise, 2 for an unusable config.

    For container HEALTHCHECKs: no `safemon` CLI start-up, one HTTP GET. The config comes from
    --config, else $SAFEMON_CONFIG (a file path), else the embedded default. Over TLS the
    certificate is not verified: the check talks to its own container over loopback.
    """
    import argparse
    import os
    import sys
    import urllib.error
    import urllib.request

    from safemon.config import load_config
    from safemon.errors import ConfigError

    parser = argparse.ArgumentParser(prog="python -m safemon.health", description=main.__doc__)
    parser.add_argument("--config", default=None, help="config file (default: $SAFEMON_CONFIG)")
    parser.add_argument("--live", action="store_true", help="ask /healthz instead of /readyz")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config or os.environ.get("SAFEMON_CONFIG") or None)
    except ConfigError as exc:
        print(f"safemon.health: {exc}", file=sys.stderr)
        return 2
    url = check_url(config, HEALTH_PATH if args.live else READY_PATH)
    ctx = ssl._create_unverified_context() if url.startswith("https") else None
    try:
        with urllib.request.urlopen(url, timeout=args.timeout, context=ctx) as resp:
            print(resp.read().decode(errors="replace"))
            return 0
    except urllib.error.HTTPError as err:
        with err:
            print(err.read().decode(errors="replace"), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"safemon.health: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
