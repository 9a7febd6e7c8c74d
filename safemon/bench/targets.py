"""Issue 16's targets, read from one `safemon bench vote --runtime` evidence file.

The targets are stated for one H100 (issue 16, "Targets"), p50 / p99 from one run:

- 80x80x80, 2oo3, device-resident: overhead over the critical-path channel's busy time
  (the bench's ``overhead``: round trip less the slowest agreeing channel's
  ``kernel_seconds``) at most 150 µs p50 and 500 µs p99;
- 1024x1024x64: round trip p50 at most 1.5× the direct kernel's p50;
- the 4-layer MLP: round trip p50 at most 1.2× the three channels' GPU work back to back
  (``model_three_graphs``: their passes captured as CUDA graphs and launched one after
  another; the Python-paced forwards are not the channels' GPU work, docs/RUNTIME.md), and
  at most 3.5× one unprotected forward with ``cupy.matmul`` (``model_cupy_matmul``);
- no wrong output released with faults injected.

`target_rows` judges each figure against its limit as measured, for the device-resident
path ("cuda-ipc") only: the targets are for device-resident requests, and rows of the "host"
path (arrays through host memory) are not judged. Whether the run counts for the issue is a
separate question (`counts_for_issue`): only a 2oo3 run on an H100 does. A figure is never
carried from another run: a target whose request, figure or baseline the file does not hold
is left out, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TargetRow", "counts_for_issue", "target_rows", "targets_markdown"]

#: Issue 16's limits (µs for the overheads, ratios of p50s otherwise).
OVERHEAD_P50_US = 150.0
OVERHEAD_P99_US = 500.0
WIDE_RATIO = 1.5
MLP_GPU_RATIO = 1.2
MLP_CUPY_RATIO = 3.5


@dataclass(frozen=True)
class TargetRow:
    """One target of one placement and path: `figure` against `limit` (same unit)."""

    placement: str
    path: str
    target: str
    figure: float
    limit: float
    unit: str  # "µs" or "×"

    @property
    def met(self) -> bool:
        return self.figure <= self.limit


#: The path whose rows are judged (`safemon.bench.runtime.PATHS`).
DEVICE_PATH = "cuda-ipc"


def counts_for_issue(ev: dict[str, Any]) -> bool:
    """Whether the run is of the kind the targets are stated for: 2oo3 on one H100."""
    return "H100" in str(ev.get("device", "")) and ev.get("policy") == "2oo3"


def _where(pl: dict[str, Any]) -> str:
    spin = pl.get("spin_s") or 0.0
    return str(pl["placement"]) + (f" (spin {spin * 1e3:g} ms)" if spin else "")


def target_rows(ev: dict[str, Any]) -> list[TargetRow]:
    """Every target figure the evidence holds for the device-resident path, per placement,
    in issue order.

    Args:
        ev: a parsed `safemon.bench_runtime/2` file (`run_runtime_bench`'s result).
    """
    b = ev["baselines"]
    rows: list[TargetRow] = []
    for pl in ev["placements"]:
        where = _where(pl)
        for r in pl["runs"]:
            req, path = r["request"], r["path"]
            if path != DEVICE_PATH or "round_trip" not in r:
                continue
            rt = r["round_trip"]["p50_us"]
            if req == "80x80x80":
                over = r.get("overhead", {})
                if "p50_us" in over:
                    rows.append(TargetRow(where, path, "80³ overhead p50", over["p50_us"],
                                          OVERHEAD_P50_US, "µs"))
                if "p99_us" in over:
                    rows.append(TargetRow(where, path, "80³ overhead p99", over["p99_us"],
                                          OVERHEAD_P99_US, "µs"))
            elif req == "1024x1024x64" and req in b.get("direct", {}):
                rows.append(TargetRow(where, path, "1024×1024×64 ÷ direct kernel",
                                      rt / b["direct"][req]["p50_us"], WIDE_RATIO, "×"))
            elif req == "model":
                if "model_three_graphs" in b:
                    rows.append(TargetRow(where, path, "MLP ÷ 3 channels' passes back to back",
                                          rt / b["model_three_graphs"]["p50_us"],
                                          MLP_GPU_RATIO, "×"))
                if "model_cupy_matmul" in b:
                    rows.append(TargetRow(where, path, "MLP ÷ one cupy.matmul forward",
                                          rt / b["model_cupy_matmul"]["p50_us"],
                                          MLP_CUPY_RATIO, "×"))
        wrong = [f["wrong_released"] for f in pl.get("faults", {}).values()]
        if wrong:
            rows.append(TargetRow(where, "all", "wrong outputs released with faults",
                                  float(sum(wrong)), 0.0, ""))
    return rows


def _fmt(v: float, unit: str) -> str:
    if unit == "µs":
        return f"{v:,.0f} µs"
    if unit == "×":
        return f"{v:.2f}×"
    return f"{v:,.0f}"


def targets_markdown(ev: dict[str, Any]) -> str:
    """Issue 16's targets for this run as a Markdown table, with whether the run counts."""
    rows = target_rows(ev)
    if not rows:
        return ""
    counts = counts_for_issue(ev)
    injected = sum(f["injected"] for pl in ev["placements"] for f in pl.get("faults", {}).values())
    lines = ["Issue 16's targets (stated for 2oo3 on one H100; "
             + ("this run was that" if counts else
                f"this run was {ev.get('policy', 'an unrecorded policy')} on "
                f"{ev.get('device', 'an unrecorded device')}, so a target met here is not met "
                "for the issue") + f"; CUDA MPS {ev.get('mps', 'not recorded')}; "
             f"device-resident path only; faults: {injected} requests with bitflip-c in one "
             "channel):", "",
             "| placement | path | target | figure | limit | met |", "|---|---|---|---|---|---|"]
    for t in rows:
        lines.append(f"| {t.placement} | {t.path} | {t.target} | {_fmt(t.figure, t.unit)} | "
                     f"{_fmt(t.limit, t.unit)} | {'yes' if t.met else 'no'} |")
    return "\n".join(lines) + "\n"
