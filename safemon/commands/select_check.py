"""`safemon select --config FILE --sil N`: does a deployment's configured variant meet the SIL?

For every channel's variant (tile "auto" resolved per size) at every deployment size, the
selection DC (`safemon.evidence.coverage`: min of the input-flip and three in-kernel 95 % lower
bounds) must reach the minimum that IEC 61508-2 sets for the SIL at the HFT of the configured
policy (`Policy.hft`). A variant without all four campaigns at a size falls short (and the
command names the campaigns to run). Exit 0 when everything meets the SIL, 1 when anything
falls short, 2 for a bad config.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["check_deployment"]


def check_deployment(args: argparse.Namespace, ev: Any, dims_list: list[str]) -> int:
    """Check `args.config` against `args.sil` on the evidence `ev`; print and return the exit code."""
    from safemon.config import load_config
    from safemon.dims import parse_dims
    from safemon.errors import ConfigError
    from safemon.evidence.coverage import variant_coverage
    from safemon.evidence.select import requirement
    from safemon.states import Policy

    try:
        cfg = load_config(args.config)
    except (ConfigError, OSError) as exc:
        print(f"safemon select: {exc}", file=sys.stderr)
        return 2
    policy = Policy(cfg.policy)
    hft = policy.hft if args.hft is None else args.hft
    req = requirement(args.sil, hft)
    checks: list[dict[str, Any]] = []
    for ch in cfg.channels or []:
        for dims in dims_list:
            d = parse_dims(dims)
            variant = ch.variant.to_variant(d.m, d.n, d.k)
            cov = variant_coverage(variant.name, dims, ev.dc, ev.inkernel)
            ok = req.allowed and cov.selectable and (cov.selection_dc or 0.0) >= (req.min_dc or 0.0)
            checks.append({"channel": ch.name, "dims": dims, "variant": variant.name, "meets": ok,
                           "coverage": cov.as_dict(),
                           "run": cov.missing_campaigns(str(ev.root))})
    meets = all(c["meets"] for c in checks)
    if args.json:
        print(json.dumps({"config": str(args.config), "policy": policy.value, "hft": hft,
                          "sil": args.sil, "band": req.band, "min_dc_percent": req.min_dc,
                          "device": ev.slug, "evidence": str(ev.root), "meets": meets,
                          "checks": checks}, indent=2))
        return 0 if meets else 1
    head = f"{args.config}: policy {policy.value} (HFT {hft}), SIL {args.sil} needs "
    if not req.allowed:
        print(head + f"an HFT ≥ 1: IEC 61508-2 allows no SIL {args.sil} at HFT {hft} (type B)")
        return 1
    print(head + f"DC ≥ {req.min_dc:g} % ({req.band}) as a 95 % lower bound")
    for c in checks:
        cov = c["coverage"]
        if cov["missing"]:
            why = f"not selectable: no {', '.join(cov['missing'])} evidence; run `{c['run'][0]}`"
        else:
            why = (f"DC ≥ {cov['selection_dc_percent']:.2f} % (limited by {cov['limited_by']})")
        print(f"  {c['channel']} {c['variant']} at {c['dims']}: {'meets' if c['meets'] else 'SHORT'} — {why}")
    print("meets the SIL" if meets else "falls short of the SIL")
    return 0 if meets else 1
