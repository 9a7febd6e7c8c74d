"""Global-store containment: every global write derives from an output-buffer parameter.

For each `st`, `atom` and `red` to global memory (or a generic one whose pointer does not
come from shared memory) the base register's provenance (`RegisterFacts.roots`) must name at
least one kernel parameter, and every parameter it names must be an output buffer of the
kernel (a non-const pointer in the CUDA prototype, see `safemon.audit.builds`). A value read
from memory combined with an output parameter is taken as a data-dependent index (e.g. a
slot returned by an atomic counter). A write through a module-level variable or a pointer of
unknown origin is reported. Index bounds (that the offset stays inside the buffer) are not
proven; docs/AUDIT.md says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from safemon.audit.dataflow import RegisterFacts
from safemon.audit.findings import Finding

__all__ = ["global_stores"]


def global_stores(facts: RegisterFacts, build: str, kinds: Mapping[str, str] | None) -> list[Finding]:
    """Findings for global writes outside the output parameters.

    `kinds` maps PTX parameter names to "output", "input" or "scalar"
    (`builds.param_kinds`); None when the prototype is unknown: then any parameter counts as
    a possible output buffer.
    """
    out: list[Finding] = []
    k = facts.kernel
    for ins in k.instructions:
        if ins.op not in ("st", "atom", "red") or ins.space() not in ("global", None):
            continue
        addr = ins.address()
        roots = facts.operand_roots(addr.base) if addr is not None else frozenset({"loaded"})
        if ins.space() is None and any(r.startswith("shared:") for r in roots):
            continue
        params = {r.split(":", 1)[1] for r in roots if r.startswith("param:")}
        if kinds is not None:
            params = {p for p in params if kinds.get(p, "output") != "scalar"}
        bad = sorted(r for r in roots if r.startswith("global:"))
        if kinds is not None:
            bad += sorted(f"param {p} (an input buffer)" for p in params if kinds.get(p) == "input")
        if not params:
            bad.append("no kernel parameter (pointer of unknown origin)")
        if bad:
            out.append(Finding("global-store", build, k.name, ins.line, ins.text,
                               "global write outside the output buffers: " + "; ".join(bad)))
    return out
