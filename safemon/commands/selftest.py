"""`safemon selftest [--config FILE]`: run every configured golden pattern on every channel
once, in this process (no daemon needed: a CI / Kubernetes preflight), on each channel's
backend and GPU. Exit 0 only when all pass; 1 when any fails; 2 for an invalid
configuration or bad/missing golden patterns.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from safemon.commands._daemon_cli import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_config,
    config_of,
)
from safemon.errors import SafemonError

__all__ = ["register", "run", "run_selftests"]


def register(subparsers: Any) -> None:
    """Add `selftest` to an argparse subparsers object."""
    p = subparsers.add_parser("selftest", help="run every golden pattern on every channel once",
                              description="Preflight: run every configured golden pattern on every "
                              "channel's backend/GPU; exit 0 only when all pass.")
    add_config(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(handler=run)


def run_selftests(config: Any) -> list[dict[str, Any]]:
    """One row per (channel, pattern of its variant): {channel, pattern, passed, error}.

    Raises:
        PatternError: missing/tampered patterns or none for a channel's variant.
        ConfigError: the backend is unusable.
    """
    from safemon.errors import ConfigError, PatternError
    from safemon.golden_store import load_patterns
    from safemon.kernels.api import run_variant
    from safemon.kernels.backend import Backend, resolve_backend

    try:
        backend = resolve_backend(config.backend)
    except Exception as exc:
        raise ConfigError(f"backend: {exc}") from None
    patterns = load_patterns(config)
    rows: list[dict[str, Any]] = []
    for ch in config.channels:
        mine = [p for p in patterns for (m, n, k) in config.patterns.shapes()
                if p.variant == ch.variant.to_variant(m, n, k) and p.a.shape == (m, k)
                and p.b.shape == (k, n)]
        if not mine:
            raise PatternError(f"no golden pattern for channel {ch.name!r}")
        for p in mine:
            try:
                if backend.on_device:
                    from safemon.kernels.compiler import import_cupy

                    cupy = import_cupy()
                    with cupy.cuda.Device(ch.gpu or 0):
                        res = run_variant(cupy.asarray(p.a), cupy.asarray(p.b), p.variant, Backend.CUPY)
                        c, es = res.c.get(), res.es.get()
                else:
                    res = run_variant(p.a, p.b, p.variant, Backend.NUMPY)
                    c, es = res.c, res.es
                rows.append({"channel": ch.name, "pattern": p.id, "passed": bool(p.check(c, es)),
                             "error": None})
            except SafemonError as exc:
                rows.append({"channel": ch.name, "pattern": p.id, "passed": False, "error": str(exc)})
    return rows


def run(args: argparse.Namespace) -> int:
    config = config_of(args)
    if config is None:
        return EXIT_USAGE
    try:
        rows = run_selftests(config)
    except SafemonError as exc:
        print(f"safemon: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['channel']:<12} {r['pattern']:<28} {'pass' if r['passed'] else 'FAIL'}"
                  + (f"  {r['error']}" if r["error"] else ""))
    return EXIT_OK if rows and all(r["passed"] for r in rows) else EXIT_CHECK_FAILED
