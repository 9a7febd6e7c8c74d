"""Register facts of one PTX kernel: where pointers come from, affine addresses, uniformity.

- `roots(reg)`: the memory objects a register's value may derive from, found by following
  every definition backwards: `shared:SYM`, `param:NAME` (a kernel parameter read by
  `ld.param`), `global:SYM` (a module-level variable) and `loaded` (a value read from memory
  or returned by an atomic, whose origin is unknown).
- `affine(reg)`: the value as `sum(coeff * atom) + const` over atoms that are constant for a
  whole kernel run (`%tid.x`, `%ctaid.*`, `%ntid.*`, `%nctaid.*`, shared symbols, parameters),
  or None when it is not that (a register with several definitions, a loaded value, a
  non-linear operation). Integer overflow and wrap-around are not modelled.
Thread uniformity is flow-sensitive and lives in `safemon.audit.uniformity`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from safemon.audit.ptx import Instruction, Kernel

__all__ = ["Affine", "RegisterFacts"]

_SPECIAL_CONST = re.compile(r"^%(ntid|nctaid|ctaid|tid)\.[xyz]$")
_INT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)[uU]?$")


@dataclass(frozen=True)
class Affine:
    """`const + sum(coeff * atom)`; `terms` is sorted and has no zero coefficients."""

    terms: tuple[tuple[str, int], ...]
    const: int

    def coeff(self, atom: str) -> int:
        return dict(self.terms).get(atom, 0)

    def without(self, atom: str) -> tuple[tuple[str, int], ...]:
        return tuple(t for t in self.terms if t[0] != atom)


def _lin(terms: dict[str, int], const: int) -> Affine:
    return Affine(tuple(sorted((a, c) for a, c in terms.items() if c)), const)


def _int(text: str) -> int | None:
    if not _INT.match(text):
        return None
    return int(text.rstrip("uU"), 0)


class RegisterFacts:
    """Def-use facts of one kernel (module docstring). Built once, queried many times."""

    def __init__(self, kernel: Kernel, shared_symbols: set[str], global_symbols: set[str]) -> None:
        self.kernel = kernel
        self.shared_symbols = shared_symbols
        self.global_symbols = global_symbols
        self.defs: dict[str, list[Instruction]] = defaultdict(list)
        for ins in kernel.instructions:
            for r in ins.defs():
                self.defs[r].append(ins)
        self._roots: dict[str, frozenset[str]] = {}
        self._roots_done = False
        self._affine: dict[str, Affine | None] = {}

    # -- provenance ------------------------------------------------------------------------
    def operand_roots(self, operand: str) -> frozenset[str]:
        if operand in self.shared_symbols:
            return frozenset({f"shared:{operand}"})
        if operand in self.global_symbols:
            return frozenset({f"global:{operand}"})
        if operand.startswith("%"):
            return self.roots(operand)
        return frozenset()

    def roots(self, reg: str) -> frozenset[str]:
        """Memory objects `reg` may derive from (module docstring)."""
        if not self._roots_done:
            self._solve_roots()
        return self._roots.get(reg, frozenset())

    def _solve_roots(self) -> None:
        """Fixpoint over all registers at once (iterative: def chains can be thousands long)."""
        direct: dict[str, set[str]] = defaultdict(set)
        flows: dict[str, set[str]] = defaultdict(set)  # source register -> dest registers
        for ins in self.kernel.instructions:
            dests = ins.defs()
            if not dests:
                continue
            own, sources = self._def_sources(ins)
            for d in dests:
                direct[d] |= own
                for src in sources:
                    flows[src].add(d)
        roots: dict[str, set[str]] = {r: set(v) for r, v in direct.items()}
        work = list(roots)
        while work:
            r = work.pop()
            cur = roots.get(r, set())
            for d in flows.get(r, ()):
                tgt = roots.setdefault(d, set())
                if not cur <= tgt:
                    tgt |= cur
                    work.append(d)
        self._roots = {r: frozenset(v) for r, v in roots.items()}
        self._roots_done = True

    def _def_sources(self, ins: Instruction) -> tuple[set[str], list[str]]:
        """(roots the instruction itself introduces, registers whose roots flow into its dest)."""
        if ins.op in ("ld", "ldu", "atom"):
            addr = ins.address()
            if ins.space() == "param" and addr is not None and not addr.is_register:
                return {f"param:{addr.base}"}, []
            return {"loaded"}, []
        if ins.op in ("setp", "set", "vote", "activemask", "shfl"):
            return set(), []
        own: set[str] = set()
        regs: list[str] = []
        for o in ins.operands[1:]:
            for tok in re.findall(r"[%\w$.]+", o):
                if tok.startswith("%"):
                    regs.append(tok)
                elif tok in self.shared_symbols:
                    own.add(f"shared:{tok}")
                elif tok in self.global_symbols:
                    own.add(f"global:{tok}")
        return own, regs

    # -- affine forms ----------------------------------------------------------------------
    def affine_operand(self, operand: str) -> Affine | None:
        v = _int(operand)
        if v is not None:
            return Affine((), v)
        if _SPECIAL_CONST.match(operand) or operand in self.shared_symbols:
            return Affine(((operand, 1),), 0)
        if operand.startswith("%"):
            return self.affine(operand)
        return None

    def affine(self, reg: str) -> Affine | None:
        """`reg` as an affine form over run-constant atoms, or None (module docstring)."""
        if reg in self._affine:
            return self._affine[reg]
        # Resolve the single-definition chain bottom-up without recursion.
        stack = [reg]
        while stack:
            r = stack[-1]
            if r in self._affine:
                stack.pop()
                continue
            defs = self.defs.get(r, [])
            if len(defs) != 1:
                self._affine[r] = None
                stack.pop()
                continue
            pending = [t for o in defs[0].operands[1:] for t in re.findall(r"%[\w.]+", o)
                       if t in self.defs and t not in self._affine and t not in stack]
            if pending:
                stack += pending
                continue
            self._affine[r] = None  # guards a cycle through this register
            self._affine[r] = self._def_affine(defs[0])
            stack.pop()
        return self._affine[reg]

    def _def_affine(self, ins: Instruction) -> Affine | None:
        if ins.predicate is not None:
            return None
        op, ops = ins.op, ins.operands[1:]
        if op == "ld" and ins.space() == "param":
            addr = ins.address()
            return Affine(((f"param:{addr.base}", 1),), 0) if addr and not addr.is_register else None
        if op in ("mov", "cvt", "cvta") and len(ops) == 1:
            return self.affine_operand(ops[0])
        args = [self.affine_operand(o) for o in ops]
        if any(a is None for a in args):
            return None
        vals = [a for a in args if a is not None]
        if op in ("add", "sub") and len(vals) == 2:
            sign = 1 if op == "add" else -1
            terms = dict(vals[0].terms)
            for a, c in vals[1].terms:
                terms[a] = terms.get(a, 0) + sign * c
            return _lin(terms, vals[0].const + sign * vals[1].const)
        if op == "shl" and len(vals) == 2 and not vals[1].terms:
            return _scale(vals[0], 1 << vals[1].const)
        if op == "mul" and len(vals) == 2 and ("lo" in ins.parts or "wide" in ins.parts):
            return _mul(vals[0], vals[1])
        if op == "mad" and len(vals) == 3 and ("lo" in ins.parts or "wide" in ins.parts):
            prod = _mul(vals[0], vals[1])
            if prod is None:
                return None
            terms = dict(prod.terms)
            for a, c in vals[2].terms:
                terms[a] = terms.get(a, 0) + c
            return _lin(terms, prod.const + vals[2].const)
        if op == "neg" and len(vals) == 1:
            return _scale(vals[0], -1)
        return None


def _scale(a: Affine, k: int) -> Affine:
    return _lin({t: c * k for t, c in a.terms}, a.const * k)


def _mul(x: Affine, y: Affine) -> Affine | None:
    if not x.terms:
        return _scale(y, x.const)
    if not y.terms:
        return _scale(x, y.const)
    return None
