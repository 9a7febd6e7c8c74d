"""The demo report: a readable table and JSON with documented keys.

JSON keys (documented; the CI test asserts them):

- ``clean_accuracy``: the app with safemon's kernel in-process, no faults (float in [0, 1]).
- ``protected_accuracy``: the app through `safemon.Client` while faults were injected, over
  the samples whose output the daemon released (``samples_released``); a refused sample (the
  request answered with an error: no output, the safe behaviour) is neither right nor wrong
  and is counted in ``samples_refused`` instead. null when nothing was released.
- ``unprotected_faulty_accuracy``: the app on one device without safemon, same faults.
- ``faults_injected``: number of faults injected into the protected channel.
- ``faults_detected``: how many of them the daemon reported as a fault of that channel.
- ``faults_undetected``: faults injected while the daemon was not in SAFE (so able to
  release an output) that it did not report. A fault injected after SAFE was latched is not
  exercised (nothing is released in SAFE) and is counted in ``faults_injected_in_safe``,
  never as undetected; ``safemon demo`` exits 1 when ``faults_undetected`` > 0 or
  ``wrong_outputs_released`` > 0.
- ``wrong_outputs_released``: released C matrices that differ in any bit from the reference
  kernel's result for the same input.
- ``latency_ms``: per-batch inference latency percentiles, ``{"without_safemon": {"p50",
  "p90", "p99"}, "with_safemon": {...}}`` in milliseconds.

Additional keys: ``faults`` (one record per fault, with ``mode_at_injection`` and
``injected_in_safe``), ``faults_masked``, ``faults_injected_in_safe``, ``samples_released``,
``samples_refused``, ``safe_state_events``, ``restarts``, ``requests_failed``,
``outputs_released`` (released requests, i.e. batches), ``samples``, ``channel``,
``policy``, ``backend``, ``metrics_url``, ``log_file`` (null when the demo's temporary runtime
directory was removed at the end, as it is unless ``--keep-run-dir``), ``duration_s``, ``notes``
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
    "faults_undetected",
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
    mode_at_injection: the daemon's mode read just before the injection (None = unknown).
    SAFE is latched, so SAFE then means SAFE at the injection: the fault could not lead to a
    wrong output, and its non-detection is "not exercised", not "undetected". Any other mode
    (read before the injection, so possibly stale) counts as exercised.
    """

    kind: str
    channel: str
    batch: int
    detected_as: tuple[str, ...]
    failed_requests: int
    mode_at_injection: str | None = None

    @property
    def detected(self) -> bool:
        return bool(self.detected_as)

    @property
    def injected_in_safe(self) -> bool:
        return self.mode_at_injection == "SAFE"

    @property
    def undetected(self) -> bool:
        """Not reported although injected while the daemon could release outputs."""
        return not self.detected and not self.injected_in_safe

    @property
    def masked(self) -> bool:
        return self.detected and self.failed_requests == 0


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo measured. `as_json()` gives the documented keys."""

    clean_accuracy: float
    #: Over the released samples (`samples - samples_refused`); None when none was released.
    protected_accuracy: float | None
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
    #: Samples whose request was refused (no output released).
    samples_refused: int = 0
    #: The daemon's `fault_reaction` log records: (kind, FDTI s or None, FRTI s), in order.
    reactions: tuple[tuple[str, float | None, float], ...] = ()

    def as_json(self) -> dict[str, Any]:
        faults = []
        for f in self.faults:
            d = asdict(f)
            d["detected_as"] = list(f.detected_as)
            d["detected"], d["masked"] = f.detected, f.masked
            d["injected_in_safe"] = f.injected_in_safe
            faults.append(d)
        return {
            "clean_accuracy": round(self.clean_accuracy, 6),
            "protected_accuracy": (
                None if self.protected_accuracy is None else round(self.protected_accuracy, 6)
            ),
            "unprotected_faulty_accuracy": round(self.unprotected_faulty_accuracy, 6),
            "faults_injected": len(self.faults),
            "faults_detected": sum(f.detected for f in self.faults),
            "faults_undetected": sum(f.undetected for f in self.faults),
            "wrong_outputs_released": self.wrong_outputs_released,
            "latency_ms": {
                "without_safemon": percentiles_ms(self.latency_without_s),
                "with_safemon": percentiles_ms(self.latency_with_s),
            },
            "faults": faults,
            "faults_masked": sum(f.masked for f in self.faults),
            "faults_injected_in_safe": sum(f.injected_in_safe for f in self.faults),
            "samples_released": self.samples - self.samples_refused,
            "samples_refused": self.samples_refused,
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

        released = j["samples_released"]
        protected = (
            "      - (no output released)"
            if self.protected_accuracy is None
            else f"{pct(self.protected_accuracy)} of {released} released samples"
        )
        lines = [
            f"safemon demo: digits MLP, {self.samples} test samples, policy {self.policy}, "
            f"backend {self.backend}, faults into channel {self.channel}",
            "",
            "accuracy",
            f"  clean (no faults)                 {pct(self.clean_accuracy)}",
            f"  protected by safemon (faults)     {protected}",
        ]
        if self.samples_refused:
            lines.append(
                f"    refused (no output, not counted) {self.samples_refused:6d} of "
                f"{self.samples} samples"
            )
        lines += [
            f"  unprotected (same faults)         {pct(self.unprotected_faulty_accuracy)}",
            "",
            "faults                 batch  detected as                        outcome",
        ]
        for f in self.faults:
            if f.detected_as:
                seen = ", ".join(f.detected_as)
            elif f.injected_in_safe:
                seen = "not exercised: injected after SAFE"
            else:
                seen = "NOT DETECTED"
            if f.injected_in_safe:
                outcome = f"{f.failed_requests} request(s) refused (already SAFE)"
            elif f.masked:
                outcome = "masked"
            else:
                outcome = f"{f.failed_requests} request(s) refused" if f.detected else "-"
            lines.append(f"  {f.kind:<20} {f.batch:5d}  {seen:<34} {outcome}")
        in_safe = j["faults_injected_in_safe"]
        lines += [
            "",
            f"  injected {j['faults_injected']}"
            + (f" ({in_safe} after SAFE was latched)" if in_safe else "")
            + f", detected {j['faults_detected']}, masked {j['faults_masked']}, "
            f"undetected {j['faults_undetected']}",
            f"  wrong outputs released            {self.wrong_outputs_released} "
            f"(of {self.outputs_released} released, one per batch)",
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
