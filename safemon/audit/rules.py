"""Per-instruction arithmetic rules: no fma in exact builds, no float atomics, no `.ftz`.

- fma-in-exact: an `fma.*` or a float `mad.*` in a build compiled as exact (`--fmad=false`):
  the NumPy reference rounds the product and the sum separately.
- float-atomic: an `atom`/`red` on a floating-point type; its result depends on the order
  in which threads arrive (seed 003), which bit-exact voting cannot tolerate.
- ftz: any instruction with `.ftz`; flushing subnormals breaks the bit-for-bit reference.
"""

from __future__ import annotations

from safemon.audit.findings import Finding
from safemon.audit.ptx import Kernel

__all__ = ["instruction_rules"]


def instruction_rules(kernel: Kernel, build: str, *, exact: bool) -> list[Finding]:
    """Findings of the three rules over every instruction of `kernel`."""
    out: list[Finding] = []
    for ins in kernel.instructions:
        def add(check: str, reason: str, line: int = ins.line, text: str = ins.text) -> None:
            out.append(Finding(check, build, kernel.name, line, text, reason))

        if exact and (ins.op == "fma" or (ins.op == "mad" and ins.float_typed())):
            add("fma-in-exact", "fused multiply-add in an exact build (one rounding instead of two)")
        if ins.op in ("atom", "red") and ins.float_typed():
            add("float-atomic", "floating-point atomic: the result depends on thread arrival order")
        if "ftz" in ins.parts[1:]:
            add("ftz", "flush-to-zero arithmetic: subnormals differ from the reference")
        if ins.op == "call":
            add("unanalysed", "call to a non-inlined function: its body is not audited")
    return out
