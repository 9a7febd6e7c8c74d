"""Run every static check over the PTX text of one build: `audit_ptx_text`.

The checks (docs/AUDIT.md): shared-memory races over barrier intervals and barrier
divergence (`races`), arithmetic rules (`rules`), global-store containment (`stores`).
"""

from __future__ import annotations

from collections.abc import Mapping

from safemon.audit.cfg import build_cfg
from safemon.audit.dataflow import RegisterFacts
from safemon.audit.findings import Finding
from safemon.audit.ptx import parse_ptx
from safemon.audit.races import barrier_divergence, shared_races
from safemon.audit.rules import instruction_rules
from safemon.audit.stores import global_stores

__all__ = ["audit_ptx_text", "module_globals"]


def module_globals(ptx: str) -> set[str]:
    """Names of module-level `.global`/`.const` variables (pointer roots `global:NAME`)."""
    names: set[str] = set()
    for line in ptx.splitlines():
        s = line.strip()
        if s.startswith((".global", ".const", ".visible .global", ".visible .const",
                         ".extern .global", ".extern .const")):
            tok = s.rstrip(";").split()[-1]
            names.add(tok.split("[")[0].split("=")[0].strip())
    return names


def audit_ptx_text(
    ptx: str,
    build: str,
    *,
    exact: bool,
    params: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[list[Finding], list[str]]:
    """Audit PTX text; return (findings, names of the kernels audited).

    Args:
        ptx: the text nvcc wrote with `-ptx`.
        build: a label for the findings (source file and defines).
        exact: the build is an exact one (`--fmad=false`): fma is a finding.
        params: per kernel name, its PTX parameters' kinds ("output", "input", "scalar",
            `builds.param_kinds`); a kernel missing from it (or None) accepts stores through
            any parameter.
    Raises:
        PtxParseError: the text is not PTX.
    """
    kernels, module_shared = parse_ptx(ptx)
    globals_ = module_globals(ptx) - module_shared
    findings: list[Finding] = []
    for k in kernels:
        facts = RegisterFacts(k, module_shared | k.shared, globals_)
        try:
            cfg = build_cfg(k)
        except ValueError as exc:
            findings.append(Finding("unanalysed", build, k.name, 0, "", str(exc)))
            continue
        findings += shared_races(cfg, facts, build)
        findings += barrier_divergence(cfg, facts, build)
        findings += instruction_rules(k, build, exact=exact)
        findings += global_stores(facts, build, None if params is None else params.get(k.name))
    return findings, [k.name for k in kernels]
