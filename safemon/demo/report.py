"""The demo report: a readable table and JSON with documented keys.

JSON keys (documented; the CI test asserts them):

- ``clean_accuracy``: the app with safemon's kernel in-process, no faults (float in [0, 1]).
- ``protected_accuracy``: the app through `safemon.Client` while faults were injected.
- ``unprotected_faulty_accuracy``: the app on one device without safemon, same faults.
- ``faults_injected``: number of faults injected into the protected channel.
- ``faults_detected``: how many of them the daemon reported as a fault of that channel.
- ``wrong_outputs_released``: released C matrices that differ in any bit from the reference
  kernel's result for the same input.
- ``latency_ms``: per-batch inference latency percentiles, ``{"without_safemon": {"p50",
  "p90", "p99"}, "with_safemon": {...}}`` in milliseconds.

Additional keys: ``faults`` (one record per fault), ``faults_masked``, ``safe_state_events``,
``restarts``, ``requests_failed``, ``outputs_released``, ``samples``, ``channel``,
``policy``, ``backend``, ``metrics_url``, ``log_file``, ``duration_s``, ``notes``
(configuration changes the demo made, e.g. on a CPU-only machine).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from safemon.bench.timing import percentiles

__all__ = ["JSON_KEYS", "DemoReport", "FaultRecord", "percentiles_ms"]

JSON_KEYS: Final[tuple[str, ...]] = (
    "clean_accuracy",
    "protected_accuracy",
    "unprotected_faulty_accuracy",
    "faults_injected",
    "faults_detected",
    "wrong_outputs_released",
    "latency_ms",
)


def percentiles_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99 of durations given in seconds, in milliseconds (None when empty)."""
    if not seconds:
        return {"p50": None, "p90": None, "p99": None}
    p50, p90, p99 = percentiles(seconds, (50, 90, 99), 1e3)
    return {"p50": round(p50, 3), "p90": round(p90, 3), "p99": round(p99, 3)}


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault and what the daemon did about it.

    detected_as: the fault kinds the daemon reported for the channel in the fault's window
    (empty = not detected). failed_requests: requests answered with an error in that window
    (the app got no output, but never a wrong one). masked: detected and no request failed.
    """

    kind: str
    channel: str
    batch: int
    detected_as: tuple[str, ...]
    failed_requests: int

    @property
    def detected(self) -> bool:
        return bool(self.detected_as)

    @property
    def masked(self) -> bool:
        return self.detected and self.failed_requests == 0


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo measured. `as_json()` gives the documented keys."""

    clean_accuracy: float
    protected_accuracy: float
    unprotected_faulty_accuracy: float
    faults: tuple[FaultRecord, ...]
    wrong_outputs_released: int
    outputs_released: int
    requests_failed: int
    latency_without_s: tuple[float, ...]
    latency_with_s: tuple[float, ...]
    safe_state_events: int
    restarts: int
    samples: int
    channel: str
    policy: str
    backend: str
    metrics_url: str | None
    log_file: str | None
    duration_s: float
    notes: tuple[str, ...] = ()
    #: The daemon's `fault_reaction` log records: (kind, FDTI s or None, FRTI s), in order.
    reactions: tuple[tuple[str, float | None, float], ...] = ()

    def as_json(self) -> dict[str, Any]:
        faults = []
        for f in self.faults:
            d = asdict(f)
            d["detected_as"] = list(f.detected_as)
            d["detected"], d["masked"] = f.detected, f.masked
            faults.append(d)
        return {
            "clean_accuracy": round(self.clean_accuracy, 6),
            "protected_accuracy": round(self.protected_accuracy, 6),
            "unprotected_faulty_accuracy": round(self.unprotected_faulty_accuracy, 6),
            "faults_injected": len(self.faults),
            "faults_detected": sum(f.detected for f in self.faults),
            "wrong_outputs_released": self.wrong_outputs_released,
            "latency_ms": {
                "without_safemon": percentiles_ms(self.latency_without_s),
                "with_safemon": percentiles_ms(self.latency_with_s),
            },
            "faults": faults,
            "faults_masked": sum(f.masked for f in self.faults),
            "safe_state_events": self.safe_state_events,
            "restarts": self.restarts,
            "requests_failed": self.requests_failed,
            "outputs_released": self.outputs_released,
            "samples": self.samples,
            "channel": self.channel,
            "policy": self.policy,
            "backend": self.backend,
            "metrics_url": self.metrics_url,
            "log_file": self.log_file,
            "duration_s": round(self.duration_s, 3),
            "notes": list(self.notes),
            "reactions": [
                {"kind": k, "fdti_ms": None if d is None else round(d * 1e3, 3),
                 "frti_ms": round(r * 1e3, 3)}
                for k, d, r in self.reactions
            ],
        }

    def table(self) -> str:
        """The human-readable report."""
        j = self.as_json()

        def pct(v: float) -> str:
            return f"{100.0 * v:6.2f} %"

        def ms(v: float | None) -> str:
            return "      -" if v is None else f"{v:8.2f}"

        lines = [
            f"safemon demo: digits MLP, {self.samples} test samples, policy {self.policy}, "
            f"backend {self.backend}, faults into channel {self.channel}",
            "",
            "accuracy",
            f"  clean (no faults)                 {pct(self.clean_accuracy)}",
            f"  protected by safemon (faults)     {pct(self.protected_accuracy)}",
            f"  unprotected (same faults)         {pct(self.unprotected_faulty_accuracy)}",
            "",
            "faults                 batch  detected as                        outcome",
        ]
        for f in self.faults:
            seen = ", ".join(f.detected_as) if f.detected_as else "NOT DETECTED"
            outcome = (
                "masked"
                if f.masked
                else (f"{f.failed_requests} request(s) refused" if f.detected else "-")
            )
            lines.append(f"  {f.kind:<20} {f.batch:5d}  {seen:<34} {outcome}")
        lines += [
            "",
            f"  injected {j['faults_injected']}, detected {j['faults_detected']}, "
            f"masked {j['faults_masked']}",
            f"  wrong outputs released            {self.wrong_outputs_released} "
            f"(of {self.outputs_released} released)",
            f"  requests refused with an error    {self.requests_failed}",
            f"  safe-state events                 {self.safe_state_events}",
            f"  channel restarts                  {self.restarts}",
            "",
            "latency per batch (ms)       p50      p90      p99",
        ]
        for label, key in (
            ("without safemon", "without_safemon"),
            ("with safemon", "with_safemon"),
        ):
            p = j["latency_ms"][key]
            lines.append(f"  {label:<22} {ms(p['p50'])} {ms(p['p90'])} {ms(p['p99'])}")
        if self.reactions:
            lines += ["", "reactions (daemon log)   FDTI ms   FRTI ms   (FDTI from injection)"]
            for k, d, r in self.reactions:
                lines.append(f"  {k:<22} {ms(None if d is None else d * 1e3)}  {ms(r * 1e3)}")
        lines += [
            "",
            f"metrics: {self.metrics_url or 'not served'}",
            f"daemon log: {self.log_file or '-'}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)
