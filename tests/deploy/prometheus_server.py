"""Run a real, throw-away Prometheus (Debian's `prometheus` binary) for tests.

`running_prometheus(scrape_target, tmp_path)` writes a config that scrapes `scrape_target`
every second (job `safemon`) and Prometheus itself (job `prometheus`), starts the server on a
free 127.0.0.1 port with its TSDB under `tmp_path`, waits for `/-/ready` and yields the base URL
(`http://127.0.0.1:PORT`). On exit it stops the server (SIGTERM, then SIGKILL after a bound).
`instant_query` and `wait_for_query` talk to its HTTP API.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

#: Scrape and rule-evaluation interval of the test server, seconds.
SCRAPE_INTERVAL_S: Final = 1
_TARGET = re.compile(r"^[A-Za-z0-9.\-]+:\d{1,5}$|^\[[0-9A-Fa-f:]+\]:\d{1,5}$")
#: Prometheus's message when the port picked was taken between picking and binding.
_ADDRESS_IN_USE = "address already in use"
_START_ATTEMPTS: Final = 3


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_config(
    path: Path,
    scrape_target: str,
    own_address: str,
    rule_files: Sequence[Path] = (),
    extra_jobs: Mapping[str, str] | None = None,
) -> None:
    """Write a Prometheus config to `path`: job `safemon` scrapes `scrape_target`, job
    `prometheus` scrapes `own_address`, each of `extra_jobs` (job name -> "host:port") its
    target, all every `SCRAPE_INTERVAL_S`; `rule_files` are loaded and evaluated at the same
    interval."""
    interval = f"{SCRAPE_INTERVAL_S}s"
    config = {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "scrape_timeout": interval,
        },
        "rule_files": [str(Path(p).resolve()) for p in rule_files],
        "scrape_configs": [
            {"job_name": "safemon", "static_configs": [{"targets": [scrape_target]}]},
            {"job_name": "prometheus", "static_configs": [{"targets": [own_address]}]},
            *(
                {"job_name": job, "static_configs": [{"targets": [target]}]}
                for job, target in (extra_jobs or {}).items()
            ),
        ],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def _http_get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read()


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)


def _wait_ready(proc: subprocess.Popen[bytes], base_url: str, log: Path, timeout_s: float) -> None:
    """Poll `/-/ready` until 200. Raises `RuntimeError` (with the server log) if the process
    exits first, `TimeoutError` if it is not ready within `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"prometheus exited with code {proc.returncode} before it was ready:\n"
                + log.read_text(encoding="utf-8", errors="replace")[-4000:]
            )
        try:
            status, _ = _http_get(base_url + "/-/ready", timeout_s=1.0)
        except OSError:
            status = 0  # not listening yet
        if status == 200:
            return
        time.sleep(0.1)
    raise TimeoutError(
        f"prometheus at {base_url} not ready after {timeout_s} s:\n"
        + log.read_text(encoding="utf-8", errors="replace")[-4000:]
    )


@contextlib.contextmanager
def running_prometheus(
    scrape_target: str,
    tmp_path: Path,
    *,
    rule_files: Sequence[Path] = (),
    extra_jobs: Mapping[str, str] | None = None,
    binary: str | Path | None = None,
    ready_timeout_s: float = 30.0,
) -> Iterator[str]:
    """Run Prometheus scraping `scrape_target` ("host:port", job `safemon`) every second.

    Args:
        scrape_target: the exporter to scrape, "host:port" (no scheme, no path; /metrics).
        tmp_path: a directory for the config, the TSDB and the server log (`prometheus.log`).
        rule_files: rule files to load (e.g. deploy/prometheus/alerts.yml).
        extra_jobs: more scrape jobs, job name -> "host:port" (checked like `scrape_target`).
        binary: the `prometheus` executable; default: the one on PATH.
        ready_timeout_s: bound on the wait for `/-/ready`, seconds.

    Yields:
        The base URL, `http://127.0.0.1:PORT`.

    Raises:
        ValueError: `scrape_target` is not "host:port".
        FileNotFoundError: no `prometheus` binary.
        RuntimeError: the server exited before it was ready (the log is in the message).
        TimeoutError: it did not become ready within `ready_timeout_s`.
    """
    for target in (scrape_target, *(extra_jobs or {}).values()):
        if not _TARGET.match(target):
            raise ValueError(f"scrape targets must be 'host:port', got {target!r}")
    exe = str(binary) if binary is not None else shutil.which("prometheus")
    if exe is None or not Path(exe).exists():
        raise FileNotFoundError(f"prometheus binary not found ({binary or 'not on PATH'})")
    tmp_path.mkdir(parents=True, exist_ok=True)
    log_path = tmp_path / "prometheus.log"
    for attempt in range(1, _START_ATTEMPTS + 1):
        port = free_port()
        address = f"127.0.0.1:{port}"
        base_url = f"http://{address}"
        config_path = tmp_path / "prometheus.yml"
        write_config(config_path, scrape_target, address, rule_files, extra_jobs)
        cmd = [
            exe,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={address}",
            "--log.level=warn",
        ]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            try:
                _wait_ready(proc, base_url, log_path, ready_timeout_s)
            except RuntimeError:
                # Another process took the port between free_port() and the bind: pick again.
                if attempt < _START_ATTEMPTS and _ADDRESS_IN_USE in log_path.read_text(
                    errors="replace"
                ):
                    continue
                raise
            yield base_url
            return
        finally:
            _stop(proc)
    raise AssertionError("unreachable: the loop either yields or raises")  # pragma: no cover


def instant_query(base_url: str, expr: str, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """Evaluate `expr` now through `/api/v1/query`; return the result vector (for a scalar or
    string result, a one-element list with its `value`).

    Raises:
        RuntimeError: Prometheus answered with an error (e.g. a PromQL parse error), with its
            error type and message.
    """
    url = f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = _http_get(url, timeout_s)
    reply = json.loads(body)
    if status != 200 or reply.get("status") != "success":
        raise RuntimeError(
            f"query {expr!r} failed (HTTP {status}): {reply.get('errorType')}: {reply.get('error')}"
        )
    data = reply["data"]
    if data["resultType"] in ("scalar", "string"):
        return [{"value": data["result"]}]
    result: list[dict[str, Any]] = data["result"]
    return result


def wait_for_query(
    base_url: str,
    expr: str,
    predicate: Callable[[list[dict[str, Any]]], bool] = bool,
    timeout_s: float = 15.0,
) -> list[dict[str, Any]]:
    """Re-run `instant_query(expr)` until `predicate(result)` holds (default: non-empty); return
    that result. Raises `TimeoutError` with the last result after `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = instant_query(base_url, expr)
        if predicate(result):
            return result
        time.sleep(0.2)
    raise TimeoutError(
        f"{expr!r} did not satisfy the condition within {timeout_s} s; last: {result}"
    )
