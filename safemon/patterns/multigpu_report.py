"""The Markdown report of `safemon.patterns.multigpu_bench` evidence: tables of round trips,
throughput, whole-model requests, direct-kernel baselines, peer copies and GPU-wide fault
outcomes per deployment (µs; ratios only against baselines of the same run). Pure."""

from __future__ import annotations

from typing import Any

__all__ = ["markdown"]


def markdown(ev: dict[str, Any]) -> str:
    """The evidence as Markdown tables (µs; ratios against the same run's baseline)."""
    devs = "; ".join(f"{d['index']}: {d['name']} {d['uuid']}" for d in ev["devices"])
    base = next((r for r in ev["deployments"] if r["baseline"] and "per_s" in r), None)
    lines = [f"{ev['shape']} (x M×K times resident W K×N, float32), app on GPU {ev['app_gpu']}, "
             f"{ev['when']}. Visible devices: {devs}. Every deployment released the same C "
             f"(bit for bit): {ev['same_product_everywhere']}.", "",
             "| deployment | GPUs | HFT declared / effective | round trip p50 / p99 (C on host) "
             "| p50 / p99 (C on app GPU) | req/s, depth " + str(ev["depth"]) + " | × baseline |",
             "|---|---|---|---|---|---|---|"]
    for r in ev["deployments"]:
        if "per_s" not in r:
            continue
        h, a = r["round_trip"]["host"], r["round_trip"]["to_app_gpu"]
        ratio = f"{r['per_s'] / base['per_s']:.2f}" if base else "—"
        lines.append(f"| {r['label']} | {r['gpus']} | {r['hft_declared']} / {r['hft_effective']} "
                     f"| {h['p50_us']:.0f} / {h['p99_us']:.0f} | {a['p50_us']:.0f} / "
                     f"{a['p99_us']:.0f} | {r['per_s']:.0f} | {ratio} |")
    models = [r for r in ev["deployments"] if "model" in r]
    if models:
        # 1oo1D takes no whole-model requests: the baseline is the forward called directly.
        mbase = ev.get("direct", {}).get("model unprotected (cupy.matmul)")
        lines += ["", f"Whole-model requests ({models[0]['model']['label']}, one vote per forward "
                  "pass; host x in, host output back):", "",
                  "| deployment | round trip p50 / p99 µs | req/s, depth " + str(ev["depth"])
                  + " | × the unprotected forward called directly |", "|---|---|---|---|"]
        for r in models:
            mr = r["model"]
            ratio = f"{mr['per_s'] / mbase['per_s']:.2f}" if mbase else "—"
            lines.append(f"| {r['label']} | {mr['round_trip']['p50_us']:.0f} / "
                         f"{mr['round_trip']['p99_us']:.0f} | {mr['per_s']:.1f} | {ratio} |")
    if "direct" in ev:
        lines += ["", f"Kernel called directly in the app's process on GPU {ev['direct']['gpu']} "
                  "(host x in, host C out; no daemon, no redundancy), sequential:", "",
                  "| kernel | p50 µs | p99 µs | req/s (1 / p50) | × baseline deployment's req/s |",
                  "|---|---|---|---|---|"]
        for name in [k for k in ev["direct"] if k != "gpu"]:
            r = ev["direct"][name]
            ratio = f"{base['per_s'] / r['per_s']:.2f}" if base else "—"
            lines.append(f"| {name} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['per_s']:.0f} "
                         f"| {ratio} |")
    lines += ["", "| copy of C to the app's GPU | path | peer p50 µs | host-staged p50 µs | "
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
    return "\n".join(lines) + "\n"
