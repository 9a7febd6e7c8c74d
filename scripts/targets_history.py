"""Issue 16's targets over every committed targets run, as a table and a plot.

    .venv/bin/python scripts/targets_history.py [--evidence evidence] [--plot FILE.png]
                                                [--since YYYY-MM-DD] [--skip WHERE ...]

(the `.venv` that `make test` makes: it has matplotlib and safemon's dependencies.)

A targets run is `scripts/stop-gpu`'s `safemon bench vote --runtime` with inline channels
and `timing.spin_s` 5 ms, which writes `vote-inline-spin5.json`. This finds every such file
under `--evidence`, loose or inside a `.tgz`, reads the inline placement's targets with
`safemon.bench.targets.target_rows` (the figures the runtime report gives, device-resident
path only, nothing carried from elsewhere), and prints one Markdown row per run, oldest
first: the evidence file, the date and device (and a channel variant other than the
default), whether CUDA MPS ran, and each target's figure, in bold where it meets its limit.
A file found twice with the same content (one run copied into two calls' archives) is
listed once, under its first path. A run with no inline figures (its placement failed) is
a row that says so.

`--plot` draws each target's figure divided by its limit (at or below 1: met) per run, the
fault count left out (its limit is 0), H100, H200 and other devices marked apart (the
targets are stated for an H100: a run on another device does not count for them); a run
without MPS says so under its date. `--since` keeps runs on or after that date and says
how many it hid; `--skip WHERE` leaves one out (a run of a tree that was reverted, say; a
WHERE that names no run is an error), and the output names what it left out.

The runs differ in more than their trees: machine, MPS, and each run's own baselines (the
ratios are against baselines measured in that run). A change between two rows is not an
effect of the code between them; `scripts/runtime-ab` is the comparison for that.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safemon.bench import targets as tg
from safemon.bench.runtime import DEFAULT_VARIANT_LABEL
from safemon.bench.targets import TargetRow, counts_for_issue, format_figure, target_rows

NAME = "vote-inline-spin5.json"
#: The plotted targets (every one but the fault count, whose limit is 0), in table order.
COLUMNS = (tg.OVERHEAD_P50, tg.OVERHEAD_P99, tg.WIDE, tg.MLP_GPU, tg.MLP_CUPY)


def find_runs(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, evidence) for every targets run under `root`, oldest first; `where` is the
    run's folder or archive, relative to `root`."""
    runs: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(root.rglob(NAME)):
        runs.append((str(path.parent.relative_to(root)), json.loads(path.read_text())))
    for path in sorted(root.rglob("*.tgz")):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                if Path(member.name).name == NAME:
                    f = tar.extractfile(member)
                    if f is not None:
                        runs.append((str(path.relative_to(root)), json.load(f)))
    seen: set[str] = set()  # a run copied into two calls' archives is listed once
    unique = []
    for where, ev in runs:
        key = json.dumps(ev, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append((where, ev))
    return sorted(unique, key=lambda r: str(r[1].get("when", "")))


def _inline_placement(ev: dict[str, Any]) -> dict[str, Any] | None:
    """The run's one inline placement (None: none; ValueError: more than one)."""
    found = [pl for pl in ev["placements"] if pl["placement"] == "inline"]
    if len(found) > 1:
        raise ValueError(f"run of {ev.get('when')}: {len(found)} inline placements; "
                         "a targets run has one")
    return found[0] if found else None


def _inline(ev: dict[str, Any]) -> dict[str, TargetRow]:
    """The inline placement's targets by name (`target_rows`: device-resident path only)."""
    pl = _inline_placement(ev)
    if pl is None:
        return {}
    return {t.target: t for t in target_rows({**ev, "placements": [pl]})}


def _cell(t: TargetRow | None) -> str:
    """The figure without its unit (the header gives it), in bold where it meets its limit."""
    if t is None:
        return "—"
    text = format_figure(t.figure, "×" if t.unit == "×" else "", t.limit)
    return f"**{text}**" if t.met else text


def _run_cells(where: str, ev: dict[str, Any]) -> str:
    """The row's first four cells: evidence, date, device (and a variant other than the
    default), MPS."""
    variant = str(ev.get("variant", DEFAULT_VARIANT_LABEL))
    device = str(ev.get("device", "?")).replace("NVIDIA ", "")
    return (f"| {where} | {str(ev.get('when', '?'))[:16].replace('T', ' ')} | "
            f"{device}{'' if variant == DEFAULT_VARIANT_LABEL else f', {variant}'} | "
            f"{ev.get('mps', '?')} |")


def table(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """One Markdown row per run; a figure that meets its target is in bold."""
    lines = [f"| evidence ({NAME}) | when (UTC) | device | MPS "
             f"| 80³ overhead p50 / p99 µs (≤ {tg.OVERHEAD_P50_US:.0f} / {tg.OVERHEAD_P99_US:.0f}) "
             f"| 1024×1024×64 ÷ direct (≤ {tg.WIDE_RATIO}×) "
             f"| MLP ÷ passes back to back (≤ {tg.MLP_GPU_RATIO}×) "
             f"| MLP ÷ cupy forward (≤ {tg.MLP_CUPY_RATIO}×) "
             "| wrong released / faulted requests (0) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for where, ev in runs:
        t = _inline(ev)
        if not t:
            failed = "; ".join(f"{k}: {v}" for k, v in ev.get("failed", {}).items())
            lines.append(f"{_run_cells(where, ev)} no inline figures"
                         f"{f' (failed: {failed[:200]})' if failed else ''} | | | | |")
            continue
        wrong = t.get(tg.FAULTS)
        lines.append(
            f"{_run_cells(where, ev)} "
            f"{_cell(t.get(COLUMNS[0]))} / {_cell(t.get(COLUMNS[1]))} | "
            f"{_cell(t.get(COLUMNS[2]))} | {_cell(t.get(COLUMNS[3]))} | "
            f"{_cell(t.get(COLUMNS[4]))} | "
            f"{'—' if wrong is None else f'{_cell(wrong)} / {wrong.injected}'} |")
    return "\n".join(lines) + "\n"


def _device_kind(ev: dict[str, Any]) -> str:
    device = str(ev.get("device", ""))
    return "H100" if "H100" in device else "H200" if "H200" in device else "other"


def plot(runs: list[tuple[str, dict[str, Any]]], out: Path) -> None:
    """Each target's figure ÷ its limit per run (log scale; 1 is the target), the fault
    count left out (its limit is 0: the table gives it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    xs = range(len(runs))
    for i, name in enumerate(COLUMNS):
        for kind, marker in (("H100", "o"), ("H200", "s"), ("other", "x")):
            pts = [(x, t.figure / t.limit) for x, (_w, ev) in zip(xs, runs, strict=True)
                   if _device_kind(ev) == kind and (t := _inline(ev).get(name))]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker,
                           color=f"C{i}", label=f"{name} ({kind})",
                           facecolors="none" if kind == "H200" else f"C{i}")
    ax.axhline(1.0, color="black", linewidth=1)
    ax.text(0, 1.05, "target", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [str(ev.get("when", "?"))[5:16].replace("T", "\n")
                             + ("" if ev.get("mps") == "on" else f"\nMPS {ev.get('mps', '?')}")
                             for _w, ev in runs], fontsize=7)
    ax.set_ylabel("figure ÷ issue 16's limit (≤ 1: met)")
    ax.set_title("Issue 16's targets per targets run (inline, spin 5 ms; hollow: H200, x: "
                 "another device; neither counts)", fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--evidence", type=Path, default=Path("evidence"))
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--since", default="")
    ap.add_argument("--skip", action="append", default=[], metavar="WHERE",
                    help="leave out the run at WHERE (as the first column prints it); repeatable")
    args = ap.parse_args()
    found = find_runs(args.evidence)
    unknown = sorted(set(args.skip) - {w for w, _ev in found})
    if unknown:
        print(f"--skip names no run under {args.evidence}: {', '.join(unknown)}", file=sys.stderr)
        return 2
    before = [w for w, ev in found if str(ev.get("when", "")) < args.since]
    runs = [r for r in found if r[0] not in args.skip and r[0] not in before]
    if not runs:
        print(f"no {NAME} under {args.evidence}" + (
            f" ({len(found)} found, every one left out by --since or --skip)" if found else ""),
            file=sys.stderr)
        return 1
    sys.stdout.write(table(runs))
    counted = sum(counts_for_issue(ev) for _w, ev in runs)
    print(f"\n{len(runs)} runs, {counted} of them 2oo3 on an H100 with protected channels "
          "(what the targets are stated for)."
          + (f" Left out: {', '.join(args.skip)} (--skip)." if args.skip else "")
          + (f" {len(before)} older than {args.since} not shown." if before else ""))
    if args.plot is not None:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
