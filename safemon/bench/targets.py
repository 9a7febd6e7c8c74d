"""Issue 16's targets, read from one `safemon bench vote --runtime` evidence file.

The targets are stated for one H100 (issue 16, "Targets"), p50 / p99 from one run:

- 80x80x80, 2oo3, device-resident: overhead over the critical-path channel's busy time
  (the bench's ``overhead``: round trip less the slowest agreeing channel's
  ``kernel_seconds``) at most 150 µs p50 and 500 µs p99;
- 1024x1024x64: round trip p50 at most 1.5× the direct kernel's p50;
- the 4-layer MLP (batch 64, hidden 4096: `ISSUE_MODEL`): round trip p50 at most 1.2× the
  three channels' GPU work back to back (``model_three_graphs``: their passes captured as
  CUDA graphs and launched one after another; the Python-paced forwards are not the
  channels' GPU work, docs/RUNTIME.md), and at most 3.5× one unprotected forward with
  ``cupy.matmul`` (``model_cupy_matmul``);
- no wrong output released with faults injected.

`target_rows` judges each figure against its limit as measured, for the device-resident
path ("cuda-ipc") only: the targets are for device-resident requests, and rows of the "host"
path (arrays through host memory) are not judged. The fault row is judged on the path the
bench's faulted requests took (device-resident whenever the run had that path). Whether the
run counts for the issue is a separate question (`counts_for_issue`): a 2oo3 run on an
H100 with protected channels does. A figure is never carried from another run: a target
whose request, figure or baseline the file does not hold (an MLP of another shape, a run
with no faulted request) is left out, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from safemon.bench.placement_label import placement_label

__all__ = ["FAULTS", "ISSUE_MODEL", "MLP_CUPY", "MLP_GPU", "OVERHEAD_P50", "OVERHEAD_P99",
           "WIDE", "TargetRow", "counts_for_issue", "format_figure", "target_rows",
           "targets_markdown"]

#: Issue 16's limits (µs for the overheads, ratios of p50s otherwise).
OVERHEAD_P50_US = 150.0
OVERHEAD_P99_US = 500.0
WIDE_RATIO = 1.5
MLP_GPU_RATIO = 1.2
MLP_CUPY_RATIO = 3.5

#: The targets' names, as rows and tables print them.
OVERHEAD_P50 = "80³ overhead p50"
OVERHEAD_P99 = "80³ overhead p99"
WIDE = "1024×1024×64 ÷ direct kernel"
MLP_GPU = "MLP ÷ 3 channels' passes back to back"
MLP_CUPY = "MLP ÷ one cupy.matmul forward"
FAULTS = "wrong outputs released with faults"

#: The MLP the issue states its targets for (`safemon.bench.runtime.ModelShape().label`).
ISSUE_MODEL = "mlp4x4096/batch64"

#: The path whose rows are judged (`safemon.bench.runtime.PATHS`).
DEVICE_PATH = "cuda-ipc"


@dataclass(frozen=True)
class TargetRow:
    """One target of one placement and path: `figure` against `limit` (same unit).

    `injected`: for the fault row, the faulted requests behind it (0 otherwise)."""

    placement: str
    path: str
    target: str
    figure: float
    limit: float
    unit: str  # "µs", "×", or "" (a count)
    injected: int = 0

    @property
    def met(self) -> bool:
        return self.figure <= self.limit


def counts_for_issue(ev: dict[str, Any]) -> bool:
    """Whether the run is of the kind the targets are stated for: 2oo3 on one H100, the
    channels on a protected variant (an unprotected kernel is not the issue's product)."""
    return ("H100" in str(ev.get("device", "")) and ev.get("policy") == "2oo3"
            and not str(ev.get("variant", "")).startswith("unprotected"))


def target_rows(ev: dict[str, Any]) -> list[TargetRow]:
    """Every target figure the evidence holds for the device-resident path, per placement,
    in issue order.

    Args:
        ev: a parsed `safemon.bench_runtime/2` file (`run_runtime_bench`'s result).
    """
    b = ev["baselines"]
    issue_model = ev.get("model") == ISSUE_MODEL
    faults_path = DEVICE_PATH if DEVICE_PATH in ev.get("paths", [DEVICE_PATH]) else "host"
    rows: list[TargetRow] = []
    for pl in ev["placements"]:
        where = placement_label(pl)
        for r in pl["runs"]:
            req, path = r["request"], r["path"]
            if path != DEVICE_PATH:
                continue
            rt = r["round_trip"]["p50_us"]
            if req == "80x80x80":
                over = r.get("overhead", {})
                if "p50_us" in over:
                    rows.append(TargetRow(where, path, OVERHEAD_P50, over["p50_us"],
                                          OVERHEAD_P50_US, "µs"))
                if "p99_us" in over:
                    rows.append(TargetRow(where, path, OVERHEAD_P99, over["p99_us"],
                                          OVERHEAD_P99_US, "µs"))
            elif req == "1024x1024x64" and req in b.get("direct", {}):
                rows.append(TargetRow(where, path, WIDE, rt / b["direct"][req]["p50_us"],
                                      WIDE_RATIO, "×"))
            elif req == "model" and issue_model:
                if "model_three_graphs" in b:
                    rows.append(TargetRow(where, path, MLP_GPU,
                                          rt / b["model_three_graphs"]["p50_us"],
                                          MLP_GPU_RATIO, "×"))
                if "model_cupy_matmul" in b:
                    rows.append(TargetRow(where, path, MLP_CUPY,
                                          rt / b["model_cupy_matmul"]["p50_us"],
                                          MLP_CUPY_RATIO, "×"))
        faults = pl.get("faults", {}).values()
        injected = sum(int(f["injected"]) for f in faults)
        if injected:
            rows.append(TargetRow(where, faults_path, FAULTS,
                                  float(sum(f["wrong_released"] for f in faults)), 0.0, "",
                                  injected))
    return rows


def format_figure(v: float, unit: str, limit: float | None = None) -> str:
    """`v` as the tables print it; with `limit`, one more digit where the usual rounding
    would print the limit for a figure that is not it (150.4 µs: "150.4 µs", not "150 µs")."""
    digits = {"µs": 0, "×": 2}.get(unit, 0)
    if limit is not None and v != limit and round(v, digits) == round(limit, digits):
        digits += 1
    text = f"{v:,.{digits}f}"
    return f"{text} µs" if unit == "µs" else f"{text}×" if unit == "×" else text


def targets_markdown(ev: dict[str, Any]) -> str:
    """Issue 16's targets for this run as a Markdown table, with whether the run counts."""
    rows = target_rows(ev)
    if not rows:
        return ""
    what = (f"{ev.get('policy', 'an unrecorded policy')} on "
            f"{ev.get('device', 'an unrecorded device')}, channel variant "
            f"{ev.get('variant', 'not recorded')}")
    lines = ["Issue 16's targets (stated for 2oo3 on one H100, protected channels; this run: "
             + what + ("" if counts_for_issue(ev) else
                       ", so a target met here is not met for the issue")
             + f"; CUDA MPS {ev.get('mps', 'not recorded')}; device-resident path only; "
             "faults: bitflip-c in one channel):", "",
             "| placement | path | target | figure | limit | met |", "|---|---|---|---|---|---|"]
    for t in rows:
        name = f"{t.target} ({t.injected} faulted requests)" if t.injected else t.target
        lines.append(f"| {t.placement} | {t.path} | {name} | "
                     f"{format_figure(t.figure, t.unit, t.limit)} | "
                     f"{format_figure(t.limit, t.unit)} | {'yes' if t.met else 'no'} |")
    return "\n".join(lines) + "\n"
