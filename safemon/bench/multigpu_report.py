"""The Markdown report of `safemon.bench.multigpu` evidence: tables of round trips,
throughput, whole-model requests, direct-kernel baselines, peer copies and GPU-wide fault
outcomes per deployment (µs; ratios only against baselines of the same run). Pure.

Throughput ratios are taken against the kernel (or the forward pass) called directly in the
app's process on one GPU, sequentially, host arrays in and out: "unprotected" (no
signatures, `cupy.matmul` for the forward) and the channels' protected variant. The 1oo1D
deployment (one channel through the daemon) is a row of its own, not the baseline: its
per-request host ABFT check dominates its time at large shapes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["markdown"]

_MM = ("unprotected", "protected")
_MODEL = ("model unprotected (cupy.matmul)", "model protected")
#: The keys of the protected baseline in evidence written before 2026-11-24 07:00 UTC. They
#: said "ones/I exact", but the run timed the channels' default variant, which is ones/T fma
#: from commit 1cb57cf (2026-11-24 03:16 UTC) on; so an old file's protected baseline is
#: reported as "the channels' default variant", not by that name.
_LEGACY = {"protected": "ones/I exact", "model protected": "model ones/I exact"}
_CURRENT = {old: new for new, old in _LEGACY.items()}


def _entry(direct: dict[str, Any], name: str) -> dict[str, Any] | None:
    if name in direct:
        return direct[name]  # type: ignore[no-any-return]
    legacy = _LEGACY.get(name)
    return direct.get(legacy) if legacy is not None else None


def _protected(direct: dict[str, Any]) -> str:
    """What the protected baseline ran: the recorded label, else (older evidence) unnamed."""
    return str(direct.get("protected_variant", "the channels' default variant"))


def _ratios(per_s: float, direct: dict[str, Any], names: tuple[str, str]) -> str:
    cells = []
    for n in names:
        e = _entry(direct, n)
        cells.append("—" if e is None else f"{per_s / e['per_s']:.2f}")
    return " | ".join(cells)


def _products(ev: dict[str, Any], direct: dict[str, Any]) -> list[str]:
    lines = ["| deployment | GPUs | HFT declared / effective | round trip p50 / p99 (C on host) "
             "| p50 / p99 (C on app GPU) | req/s, depth " + str(ev["depth"])
             + f" | × direct unprotected | × direct protected ({_protected(direct)}) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in ev["deployments"]:
        if "per_s" not in r:
            continue
        h, a = r["round_trip"]["host"], r["round_trip"]["to_app_gpu"]
        lines.append(f"| {r['label']} | {r['gpus']} | {r['hft_declared']} / {r['hft_effective']} "
                     f"| {h['p50_us']:.0f} / {h['p99_us']:.0f} | {a['p50_us']:.0f} / "
                     f"{a['p99_us']:.0f} | {r['per_s']:.1f} | {_ratios(r['per_s'], direct, _MM)} |")
    return lines


def _models(ev: dict[str, Any], direct: dict[str, Any]) -> list[str]:
    models = [r for r in ev["deployments"] if "model" in r]
    if not models:
        return []
    lines = ["", f"Whole-model requests ({models[0]['model']['label']}, one vote per forward pass;"
             " host x in, host output back; 1oo1D takes none):", "",
             "| deployment | round trip p50 / p99 µs | req/s, depth " + str(ev["depth"])
             + " | × direct unprotected forward | × direct protected forward "
             f"({_protected(direct)}) |", "|---|---|---|---|---|"]
    for r in models:
        mr = r["model"]
        lines.append(f"| {r['label']} | {mr['round_trip']['p50_us']:.0f} / "
                     f"{mr['round_trip']['p99_us']:.0f} | {mr['per_s']:.1f} | "
                     f"{_ratios(mr['per_s'], direct, _MODEL)} |")
    return lines


def _device(ev: dict[str, Any]) -> list[str]:
    rows = [r for r in ev["deployments"] if "device" in r]
    if not rows:
        return []
    lines = ["", f"Device-resident requests (x on the app's GPU {ev['app_gpu']} in, the "
             "released output on it out: the channels read x and write their output slot over "
             "CUDA IPC, peer to peer from other GPUs; digests over ZeroMQ), one in flight:", "",
             "| deployment | GPUs | matmul p50 / p99 µs | path | model p50 / p99 µs | path |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        mm = r["device"]["matmul"]
        md = r["device"].get("model")
        model = (f"{md['round_trip']['p50_us']:.0f} / {md['round_trip']['p99_us']:.0f} | "
                 f"{md['path']}" if md else "— | —")
        lines.append(f"| {r['label']} | {r['gpus']} | {mm['round_trip']['p50_us']:.0f} / "
                     f"{mm['round_trip']['p99_us']:.0f} | {mm['path']} | {model} |")
    return lines


def _direct(direct: dict[str, Any]) -> list[str]:
    if not direct:
        return []
    lines = ["", f"Called directly in the app's process on GPU {direct['gpu']} (host x in, host "
             "result out; no daemon, no redundancy), sequential; these are the baselines:", "",
             "| kernel | p50 µs | p99 µs | req/s (1 / p50) |", "|---|---|---|---|"]
    for name in [k for k in direct if k not in ("gpu", "protected_variant")]:
        r = direct[name]
        shown = _CURRENT.get(name, name)
        if shown in ("protected", "model protected"):
            shown += f" ({_protected(direct)})"
        lines.append(f"| {shown} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['per_s']:.1f} |")
    return lines


def _copies_and_faults(ev: dict[str, Any]) -> list[str]:
    lines = ["", "| copy of C to the app's GPU | path | peer p50 µs | host-staged p50 µs | "
             "host / peer |", "|---|---|---|---|---|"]
    for c in ev["peer_copies"]:
        lines.append(f"| GPU {c['from']} → GPU {c['to']} ({c['bytes']} B) | {c['path']} | "
                     f"{c['peer']['p50_us']:.0f} | {c['host_staged']['p50_us']:.0f} | "
                     f"{c['host_over_peer']:.2f} |")
    lines += ["", "| deployment | fault | GPU | channels | first request | next requests | "
              "then mode / policy / voting | HFT effective |", "|---|---|---|---|---|---|---|---|"]
    for r in ev["deployments"]:
        for s in r.get("faults", []):
            lines.append(f"| {r['label']} | {s['kind']} | {s['gpu']} | {', '.join(s['channels'])} "
                         f"| {s['outcome']} | {', '.join(s['after']) or '—'} | {s['mode']} / "
                         f"{s['policy']} / {', '.join(s['voting']) or '—'} | "
                         f"{s['hft_effective']} |")
    return lines


def markdown(ev: dict[str, Any]) -> str:
    """The evidence as Markdown tables (µs; ratios against the same run's direct calls)."""
    devs = "; ".join(f"{d['index']}: {d['name']} {d['uuid']}" for d in ev["devices"])
    direct: dict[str, Any] = ev.get("direct", {})
    head = [f"{ev['shape']} (x M×K times resident W K×N, float32), app on GPU {ev['app_gpu']}, "
            f"{ev['when']}, {ev['requests']} timed requests per figure. Visible devices: {devs}. "
            f"Every deployment released the same C (bit for bit): "
            f"{ev['same_product_everywhere']}.", ""]
    return "\n".join([*head, *_products(ev, direct), *_models(ev, direct), *_device(ev),
                      *_direct(direct),
                      *_copies_and_faults(ev)]) + "\n"
