"""The demo run: clean, unprotected-faulty and protected runs of the digits app, one report.

`run_demo` starts a daemon in this process (its channels are processes or streams as the
configuration says), runs the app through `safemon.Client` while `Client.inject` puts the
faults of `plan_faults` into one channel, and compares with the same app run in-process
without faults and without safemon under the same faults.

The protected app sends each batch as one whole-model request (`Client.register_model`
once, then `Client.run`): every channel runs both layers, bias and activation included, and
the daemon votes once on the output and the per-layer digests. Every fault is armed just
before its batch's request, in the protected run as in the unprotected one; a channel applies
an injected data fault to layer 0's product, from where it propagates like a real one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from safemon.config import VariantConfig
from safemon.demo.app import F32, I64, LAYERS, DigitsMLP, batch_slices, load_or_train
from safemon.demo.faulty import (
    MIN_BATCHES,
    FaultStep,
    kernel_matmul,
    order_for_flip,
    plan_faults,
    run_unprotected,
)
from safemon.demo.report import DemoReport, FaultRecord
from safemon.errors import SafemonError
from safemon.models import Layer, reference_forward

__all__ = [
    "ClientLike",
    "EventStream",
    "ProtectedResult",
    "released_accuracy",
    "run_demo",
    "run_protected",
]


class ClientLike(Protocol):
    """The part of `safemon.Client` the demo uses."""

    def register_weight(self, w: F32) -> str: ...

    def register_model(self, layers: Sequence[Layer]) -> str: ...

    def run(self, model_id: str, x: F32, *, timeout: float = ...) -> F32: ...

    @property
    def last_run_per_layer(self) -> bool: ...

    def inject(self, channel: str, fault: str) -> None: ...

    def clear_faults(self, channel: str | None = None) -> None: ...

    def status(self) -> dict[str, Any]: ...


class EventSource(Protocol):
    """Yields (receipt time, event dict) pairs that arrived since the last call."""

    def poll(self) -> list[tuple[float, dict[str, Any]]]: ...


class EventStream:
    """A SUB socket on the daemon's events endpoint (JSON bodies of typed events)."""

    def __init__(self, config: Any, context: Any) -> None:
        import zmq

        from safemon.transport import CurveClientKeys, Limits, make_socket

        address = config.endpoints.events
        curve = None
        sec = config.security
        if sec.curve and not address.startswith("inproc://"):
            curve = CurveClientKeys.from_files(
                sec.keys_dir / "client.key_secret", sec.keys_dir / "server.key"
            )
        self._sock = make_socket(context, zmq.SUB, address, bind=False, curve=curve)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._limits = Limits()

    def poll(self) -> list[tuple[float, dict[str, Any]]]:
        import json

        from safemon.transport import recv_message

        out: list[tuple[float, dict[str, Any]]] = []
        while True:
            got = recv_message(self._sock, limits=self._limits, timeout_ms=0)
            if got is None:
                return out
            if got.message.arrays:
                try:
                    body = json.loads(bytes(got.message.arrays[0]).decode())
                except (UnicodeDecodeError, ValueError):
                    continue  # not ours to judge; the daemon's own tests cover its events
                if isinstance(body, dict):
                    out.append((time.monotonic(), body))

    def close(self) -> None:
        self._sock.close(linger=0)


@dataclass
class ProtectedResult:
    """What the protected run saw.

    predictions: (n,) int64, -1 where the request was refused (a typed error, no output).
    failed_batches: (batch, error type) per refused batch.
    batches_per_layer: batches sent layer by layer (whole-model requests while the daemon
        ran 1oo1D, through the client's `per_layer_fallback`).
    """

    predictions: I64
    failed_batches: list[tuple[int, str]]
    wrong_outputs_released: int
    outputs_released: int
    latencies_s: list[float]
    faults: list[FaultRecord]
    safe_state_events: int
    restarts: int
    events: list[dict[str, Any]] = field(default_factory=list)
    batches_per_layer: int = 0


def _incarnations(status: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for ch in status.get("channels", []):
        if isinstance(ch, dict) and isinstance(ch.get("incarnation"), int):
            out[str(ch.get("name"))] = int(ch["incarnation"])
    return out


def run_protected(
    client: ClientLike,
    model: DigitsMLP,
    x: F32,
    y: I64,
    batches: Sequence[slice],
    plan: Sequence[FaultStep],
    channel: str,
    variant: VariantConfig,
    events: EventSource,
    *,
    pace_s: float = 0.0,
    timeout_s: float = 2.0,
    grace_s: float = 2.0,
    settle_s: float = 15.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProtectedResult:
    """The app through the Client, one whole-model request per batch (layer by layer
    where the client's `per_layer_fallback` must: under an effective 1oo1D), while the
    schedule's faults go into `channel`.

    Every released output is compared bit for bit with `reference_forward` of the same
    layers and variant on the same input (exact-mode channels are bit-identical to it),
    which gives `wrong_outputs_released`. Batches start `pace_s` apart so that self-tests
    and restarts happen during the run; before each injection the run waits (at most
    `settle_s`) until every channel is UP again; after the last batch, up to `grace_s` is
    spent waiting for the last fault's detection.
    """
    ids = {name: client.register_weight(model.weights[name]) for name in LAYERS}
    model_id = client.register_model(model.layers(ids))
    ref_weights = [model.weights[name] for name in LAYERS]
    ref_layers = model.layers()
    start_inc = _incarnations(client.status())
    released = wrong = per_layer = 0

    def forward(xb: F32) -> F32:
        nonlocal released, wrong, per_layer
        out = client.run(model_id, xb, timeout=timeout_s)
        per_layer += client.last_run_per_layer
        ref = reference_forward(ref_weights, ref_layers, xb, variant=variant)
        released += 1
        same = (
            out.dtype == ref.dtype
            and out.shape == ref.shape
            and np.array_equal(out.view(np.uint32), np.asarray(ref).view(np.uint32))
        )
        wrong += 0 if same else 1
        return out

    pred = np.full(len(y), -1, dtype=np.int64)
    failed: list[tuple[int, str]] = []
    latencies: list[float] = []
    seen: list[tuple[float, dict[str, Any]]] = []
    injected_at: dict[int, float] = {}
    mode_at: dict[int, str | None] = {}
    t0 = clock()
    for b, sl in enumerate(batches):
        wait = t0 + b * pace_s - clock()
        if wait > 0:
            sleep(wait)
        seen += events.poll()
        for step in plan:
            if step.clear_batch == b:
                client.clear_faults(channel)
        for i, step in enumerate(plan):
            if step.batch == b:
                # One fault at a time: the previous one's reaction (restart, rejoin after
                # a self-test) must be over, or this one would test something else.
                # The mode is read before the injection: SAFE is latched, so SAFE then is
                # SAFE at the injection (the report says "not exercised"); any other mode
                # may be stale and counts as exercised.
                mode_at[i] = _wait_healthy(client, settle_s, clock, sleep)
                injected_at[i] = clock()
                client.inject(channel, step.kind)
        t = clock()
        try:
            logits = forward(np.ascontiguousarray(x[sl]))
            pred[sl] = np.asarray(np.argmax(logits, axis=1), dtype=np.int64)
        except SafemonError as exc:
            failed.append((b, type(exc).__name__))
        latencies.append(clock() - t)
    # The last fault may still be in its detection window (a hang needs a heartbeat timeout).
    end = clock() + grace_s
    last = len(plan) - 1
    while clock() < end:
        seen += events.poll()
        if (
            last >= 0
            and last in injected_at
            and _detections(seen, channel, injected_at[last], None)
        ):
            break
        sleep(0.05)
    seen += events.poll()
    with contextlib.suppress(SafemonError):
        client.clear_faults(channel)
    end_inc = _incarnations(client.status())
    restarts = sum(max(0, end_inc.get(n, v) - v) for n, v in start_inc.items())

    records: list[FaultRecord] = []
    order = sorted(injected_at.items(), key=lambda kv: kv[1])
    for pos, (i, t_inj) in enumerate(order):
        t_next = order[pos + 1][1] if pos + 1 < len(order) else None
        step = plan[i]
        stop_batch = plan[order[pos + 1][0]].batch if pos + 1 < len(order) else len(batches)
        n_failed = sum(1 for fb, _ in failed if step.batch <= fb < stop_batch)
        records.append(
            FaultRecord(
                kind=step.kind,
                channel=channel,
                batch=step.batch,
                detected_as=_detections(seen, channel, t_inj, t_next),
                failed_requests=n_failed,
                mode_at_injection=mode_at.get(i),
            )
        )
    safe = sum(
        1 for _, e in seen if e.get("event") == "mode" and str(e.get("mode")).upper() == "SAFE"
    )
    return ProtectedResult(
        predictions=pred,
        failed_batches=failed,
        wrong_outputs_released=wrong,
        outputs_released=released,
        latencies_s=latencies,
        faults=records,
        safe_state_events=safe,
        restarts=restarts,
        events=[e for _, e in seen],
        batches_per_layer=per_layer,
    )


def _wait_healthy(
    client: ClientLike, limit_s: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> str | None:
    """Wait (at most `limit_s`) until the mode is NORMAL and every channel is UP, or the
    mode is SAFE (latched: no point waiting then); returns the last mode seen (None when
    the status carried none)."""
    end = clock() + limit_s
    while True:
        st = client.status()
        mode = st.get("mode")
        chans = st.get("channels", [])
        healthy = mode == "NORMAL" and all(c.get("state") == "UP" for c in chans)
        if healthy or mode == "SAFE" or clock() >= end:
            return None if mode is None else str(mode)
        sleep(0.05)


def released_accuracy(predictions: I64, y: I64) -> tuple[float | None, int]:
    """Accuracy over the released samples and the number of refused ones.

    predictions: (n,) int64 class per sample, -1 where the request was refused (no output,
    the safe behaviour: neither right nor wrong). Returns (accuracy in [0, 1], or None when
    nothing was released; refused count)."""
    released = predictions >= 0
    refused = int(np.count_nonzero(~released))
    if not released.any():
        return None, refused
    return float(np.mean(predictions[released] == y[released])), refused


def _detections(
    seen: Sequence[tuple[float, dict[str, Any]]], channel: str, t_from: float, t_to: float | None
) -> tuple[str, ...]:
    """Fault kinds seen on `channel` whose detection falls in [t_from, t_to).

    The detection time is the event's own `detected_at` (the daemon's monotonic clock, the
    same CLOCK_MONOTONIC as this process on one machine), not the time the event was polled:
    an event of an earlier fault that is read late must not count for a later one."""
    kinds: list[str] = []
    for t_polled, e in seen:
        if e.get("event") != "fault" or e.get("channel") != channel:
            continue
        at = e.get("detected_at")
        t = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else t_polled
        if t < t_from or (t_to is not None and t >= t_to):
            continue
        k = str(e.get("kind"))
        if k not in kinds:
            kinds.append(k)
    return tuple(kinds)


# ------------------------------------------------------------------------------ the demo


#: Applied only to the embedded default on a CPU-only machine (NumPy backend). There, a
#: channel restart (a fresh interpreter importing NumPy, pyzmq, pydantic) takes the CPU
#: from the healthy channels for a second or more on 2 cores, and the default 0.2 s
#: self-test deadline then reports DTI overruns on *healthy* channels. 0.5 s keeps
#: dti + selftest_deadline (1.5 s) within the default FTTI (2 s).
CPU_DEMO_TIMING: dict[str, str] = {"SAFEMON_TIMING__SELFTEST_DEADLINE_S": "0.5"}


def demo_config(
    config_path: str | Path | None, run_dir: Path
) -> tuple[Any, dict[str, str], list[str]]:
    """The configuration the demo runs, the environment that yields it (for the daemon's
    process), and notes on what the demo changed.

    The file (or the embedded default, 2oo3 = HFT 2) with a private runtime directory, an
    OS-chosen metrics port and quiet channel logs; `CPU_DEMO_TIMING` on top for the
    embedded default when no GPU is usable.
    """
    from safemon.config import load_config
    from safemon.kernels.backend import resolve_backend

    env = {
        **os.environ,
        "SAFEMON_ENDPOINTS__RUNTIME_DIR": str(run_dir),
        "SAFEMON_METRICS__PORT": "0",
        "SAFEMON_LOGGING__LEVEL": "error",
        "SAFEMON_LOGGING__FORMAT": "json",
        # The demo injects faults on purpose (testing.fault_injection is off by default).
        "SAFEMON_TESTING__FAULT_INJECTION": "true",
    }
    notes: list[str] = []
    config = load_config(config_path, env=env)
    if config_path is None and not resolve_backend(config.backend).on_device:
        env.update(CPU_DEMO_TIMING)
        config = load_config(None, env=env)
        notes.append("CPU-only: timing.selftest_deadline_s = 0.5 s (default 0.2 s)")
    return config, env, notes


@dataclass
class _DaemonProc:
    status: dict[str, Any]
    metrics_snapshot: bytes | None = None


@contextlib.contextmanager
def _daemon(
    config_path: str | Path | None,
    env: Mapping[str, str],
    client: ClientLike,
    log_path: Path,
    ready_timeout_s: float,
) -> Iterator[_DaemonProc]:
    """A daemon in a child process (see `safemon.demo.daemon_main`); on exit its metrics
    are scraped once, then it is drained with SIGTERM."""
    import signal
    import subprocess
    import sys
    import urllib.request

    argv = [sys.executable, "-m", "safemon.demo.daemon_main", str(log_path)]
    if config_path is not None:
        argv.append(str(config_path))
    proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL)
    info = _DaemonProc(status={})
    try:
        end = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise SafemonError(f"the daemon exited with {proc.returncode} (log: {log_path})")
            try:
                st = client.status()
            except SafemonError:
                st = {}
            chans = st.get("channels", [])
            if chans and all(c.get("state") == "UP" for c in chans):
                info.status = st
                break
            if time.monotonic() >= end:
                raise SafemonError(
                    f"the daemon's channels were not all UP within {ready_timeout_s} s (log: {log_path})"
                )
            time.sleep(0.1)
        yield info
        url = info.status.get("metrics_url")
        if isinstance(url, str) and url.startswith("http://127.0.0.1:"):
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2.0) as resp:
                info.metrics_snapshot = resp.read()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _percentile_friendly(seconds: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(s) for s in seconds)


def run_demo(
    config_path: str | Path | None = None,
    *,
    duration_s: float = 12.0,
    batch_size: int = 24,
    cache: Path | None = None,
    run_dir: Path | None = None,
    keep_run_dir: bool = False,
    progress: Callable[[str], None] | None = None,
) -> DemoReport:
    """The whole demo; returns the report.

    Args:
        config_path: a YAML configuration; None = the embedded default (2oo3).
        duration_s: the protected run is paced over about this long (> 0), so self-tests,
            restarts and detections happen while the app runs.
        batch_size: samples per request (the test set must give ≥ 10 batches).
        cache: the model cache directory (None = `safemon.demo.app.cache_dir()`).
        run_dir: where the runtime sockets, the daemon log and the metrics snapshot go,
            kept afterwards; None = a fresh temporary directory, removed when the demo
            ends unless `keep_run_dir`, or unless it failed after its daemon started (its
            error names the daemon log there). A removed directory's log and
            snapshot are not named in the report (`log_file` None; a note says so).
        keep_run_dir: keep the temporary directory of `run_dir=None`.

    Raises:
        ConfigError: invalid configuration. PatternError: tampered golden patterns.
        SafemonError: the daemon did not start.
    """
    if not duration_s > 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration_s}")
    kwargs: dict[str, Any] = dict(
        duration_s=duration_s, batch_size=batch_size, cache=cache, progress=progress
    )
    if run_dir is not None:
        return _run_demo_in(config_path, run_dir, removed=False, **kwargs)
    rd = Path(tempfile.mkdtemp(prefix="safemon-demo-"))
    try:
        report = _run_demo_in(config_path, rd, removed=not keep_run_dir, **kwargs)
    except BaseException:
        # A demo that failed after its daemon started keeps the directory: its error names
        # the daemon log in it. One that failed before (a bad config) has nothing to keep.
        if not keep_run_dir and not (rd / "daemon.log").exists():
            shutil.rmtree(rd, ignore_errors=True)
        raise
    # Its sockets are stale once the daemon has gone (`_daemon` waits for that).
    if not keep_run_dir:
        shutil.rmtree(rd, ignore_errors=True)
    return report


def _run_demo_in(
    config_path: str | Path | None,
    rd: Path,
    *,
    removed: bool,
    duration_s: float,
    batch_size: int,
    cache: Path | None,
    progress: Callable[[str], None] | None,
) -> DemoReport:
    """`run_demo` in the runtime directory `rd`; `removed`: the caller removes `rd` once
    this returns, so the report must not point into it."""
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    rd.mkdir(parents=True, exist_ok=True)
    os.chmod(rd, 0o700)  # the ipc sockets live here; make_socket wants a private directory
    config, env, notes = demo_config(config_path, rd)
    assert config.channels is not None
    names = config.channel_names
    channel = names[1] if len(names) > 1 else names[0]
    vc = config.channels[0].variant

    def variant_for(m: int, n: int, k: int) -> Any:
        return vc.to_variant(m, n, k)

    say("loading the model (trained at first use)")
    model, x, y, _trained = load_or_train(cache)
    batches = batch_slices(len(y), batch_size)
    if len(batches) < MIN_BATCHES:
        raise ValueError(
            f"batch_size {batch_size} gives {len(batches)} batches; need {MIN_BATCHES}"
        )

    from safemon.kernels.backend import resolve_backend

    backend = resolve_backend(config.backend)

    plan = plan_faults(len(batches))
    flip = plan[0]
    order = order_for_flip(model, x, y, batches, flip.batch, variant_for)
    x, y = np.ascontiguousarray(x[order]), np.ascontiguousarray(y[order])
    say("clean run (in-process kernel, no faults)")
    clean_mm = kernel_matmul(model, variant_for, backend)
    clean_pred = np.full(len(y), -1, dtype=np.int64)
    lat_without: list[float] = []
    for sl in batches:
        t = time.perf_counter()
        clean_pred[sl] = model.predict(x[sl], clean_mm)
        lat_without.append(time.perf_counter() - t)
    clean_acc = float(np.mean(clean_pred == y))
    say("unprotected run with the same faults")
    unprotected = run_unprotected(model, x, y, batches, plan, variant_for)

    notes.append("each batch is one whole-model request (both layers, bias and ReLU on the "
                 "channels, one vote on the output and per-layer digests)")
    say(f"starting the daemon ({config.policy.value}, backend {backend}, whole-model requests)")
    import zmq

    from safemon.client import Client

    log_path = rd / "daemon.log"
    ctx = zmq.Context()
    # Under an effective 1oo1D (configured, or a 1oo2D deployment degraded to it) the daemon
    # cannot vote whole models: those batches go layer by layer (counted in the notes).
    client = Client(config, context=ctx, control_timeout_s=1.0, per_layer_fallback=True)
    events = EventStream(config, ctx)
    try:
        with _daemon(config_path, env, client, log_path, ready_timeout_s=60.0) as proc:
            metrics_url = proc.status.get("metrics_url")
            say(f"protected run: faults into {channel}")
            result = run_protected(
                client,
                model,
                x,
                y,
                batches,
                plan,
                channel,
                vc,
                events,
                pace_s=duration_s / len(batches),
                timeout_s=max(2.0, 4 * config.timing.request_deadline_s),
                grace_s=config.timing.heartbeat_timeout_s + config.timing.dti_s + 1.0,
            )
    finally:
        client.close()
        events.close()
        ctx.term()
    if result.batches_per_layer:
        notes.append(f"{result.batches_per_layer} batches went layer by layer (the daemon ran "
                     "1oo1D, which cannot vote a whole model)")
    snapshot = rd / "metrics.prom"
    saved = proc.metrics_snapshot is not None and not removed
    if saved:
        snapshot.write_bytes(proc.metrics_snapshot or b"")
    if removed:
        notes.append(f"the daemon log and the metrics were in the temporary directory {rd}, "
                     "removed at the end (safemon demo --keep-run-dir keeps it)")

    protected_acc, refused = released_accuracy(result.predictions, y)
    return DemoReport(
        clean_accuracy=clean_acc,
        protected_accuracy=protected_acc,
        samples_refused=refused,
        unprotected_faulty_accuracy=unprotected.accuracy,
        faults=tuple(result.faults),
        wrong_outputs_released=result.wrong_outputs_released,
        outputs_released=result.outputs_released,
        requests_failed=len(result.failed_batches),
        latency_without_s=_percentile_friendly(lat_without),
        latency_with_s=_percentile_friendly(result.latencies_s),
        safe_state_events=result.safe_state_events,
        restarts=result.restarts,
        samples=len(y),
        channel=channel,
        policy=config.policy.value,
        backend=backend.value,
        metrics_url=(
            f"{metrics_url} (while the demo ran; last scrape saved to {snapshot})"
            if saved
            else (f"{metrics_url} (while the demo ran)" if metrics_url else None)
        ),
        log_file=None if removed else str(log_path),
        duration_s=time.monotonic() - started,
        notes=tuple(notes),
        reactions=read_reactions(log_path),
    )


def read_reactions(log_path: Path) -> tuple[tuple[str, float | None, float], ...]:
    """The `fault_reaction` records of a JSON daemon log: (kind, fdti_s, frti_s) each;
    lines that are not such records (or not JSON) are skipped."""
    import json

    out: list[tuple[str, float | None, float]] = []
    if not log_path.is_file():
        return ()
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("event") != "fault_reaction":
            continue
        kind, fdti, frti = rec.get("kind"), rec.get("fdti_s"), rec.get("frti_s")
        if isinstance(kind, str) and isinstance(frti, int | float) and (
                fdti is None or isinstance(fdti, int | float)):
            out.append((kind, None if fdti is None else float(fdti), float(frti)))
    return tuple(out)
