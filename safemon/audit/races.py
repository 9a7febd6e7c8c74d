"""Shared-memory race and barrier-divergence checks over barrier intervals (seed 002).

Race rule: a write (st/atom/red/cp.async to shared memory) and a read (ld/atom of shared
memory) of the same shared symbol that can run in the same barrier interval
(`Cfg.interval_origins` meet) are a race unless their addresses are proven thread-private:
both are affine in `%tid.x` with the same coefficient `a` and the same other terms, and no
other thread's (d != 0) write bytes `[a*d + b_w, a*d + b_w + w_w)` overlap the read bytes
`[b_r, b_r + w_r)`. Anything not proven is reported. Two atomics never race with each other.
Write-write pairs are not checked (module docs: docs/AUDIT.md).

Divergence rule: a barrier reachable from a branch, `ret` or `exit` on a thread-varying
predicate before that branch's immediate post-dominator is reported: barrier intervals are
only meaningful when every thread of the block meets the same barriers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from safemon.audit.cfg import Cfg, is_barrier
from safemon.audit.dataflow import Affine, RegisterFacts
from safemon.audit.findings import Finding
from safemon.audit.ptx import Instruction
from safemon.audit.uniformity import divergent_regions

__all__ = ["SharedAccess", "barrier_divergence", "shared_accesses", "shared_races"]

_TYPE_BYTES = re.compile(r"^[busf](8|16|32|64|128)$")


@dataclass(frozen=True)
class SharedAccess:
    """One shared-memory access: instruction index, read/write, symbols (None: any), bytes."""

    index: int
    ins: Instruction
    reads: bool
    writes: bool
    atomic: bool
    symbols: frozenset[str] | None
    address: Affine | None
    width: int


def _width(ins: Instruction) -> int:
    size = 4
    vec = 1
    for p in ins.parts[1:]:
        m = _TYPE_BYTES.match(p)
        if m:
            size = int(m.group(1)) // 8
        if p in ("v2", "v4", "v8"):
            vec = int(p[1:])
    return size * vec


def _classify(ins: Instruction, facts: RegisterFacts) -> tuple[bool, bool, frozenset[str] | None] | None:
    """(reads, writes, symbols) when `ins` may touch shared memory, else None."""
    op = ins.op
    if op not in ("ld", "st", "atom", "red", "cp", "ldmatrix", "stmatrix"):
        return None
    addr = ins.address()
    space = ins.space()
    if op == "cp" and any(p in ins.parts for p in ("commit_group", "wait_group", "wait_all")):
        return None  # bookkeeping of asynchronous copies: no address of its own
    if op == "cp":
        space = "shared" if "shared" in ins.parts else space
        addr = Instruction(ins.line, ins.text, "x", ins.operands[:1]).address()
    if space not in ("shared", None):
        return None
    roots = facts.operand_roots(addr.base) if addr is not None else frozenset({"loaded"})
    syms = frozenset(r.split(":", 1)[1] for r in roots if r.startswith("shared:"))
    if space is None and not syms and any(r.startswith(("param:", "global:")) for r in roots):
        return None  # a generic access into a global buffer
    reads = op in ("ld", "ldmatrix", "atom")
    writes = op in ("st", "stmatrix", "atom", "red", "cp")
    return reads, writes, (syms or None)


def shared_accesses(facts: RegisterFacts) -> list[SharedAccess]:
    """Every instruction of the kernel that may read or write shared memory."""
    out: list[SharedAccess] = []
    for i, ins in enumerate(facts.kernel.instructions):
        c = _classify(ins, facts)
        if c is None:
            continue
        addr = ins.address()
        aff: Affine | None = None
        if addr is not None:
            base = facts.affine_operand(addr.base)
            aff = Affine(base.terms, base.const + addr.offset) if base is not None else None
        out.append(SharedAccess(i, ins, c[0], c[1], ins.op in ("atom", "red"), c[2], aff, _width(ins)))
    return out


def thread_private(w: SharedAccess, r: SharedAccess) -> bool:
    """True when no other thread's write `w` can overlap this thread's read `r` (module doc)."""
    if w.address is None or r.address is None:
        return False
    a = w.address.coeff("%tid.x")
    if a == 0 or r.address.coeff("%tid.x") != a:
        return False
    if w.address.without("%tid.x") != r.address.without("%tid.x"):
        return False
    if any(t.startswith("%tid.") for t, _ in w.address.without("%tid.x")):
        return False
    bw, br = w.address.const, r.address.const
    reach = (abs(br - bw) + w.width + r.width) // abs(a) + 1
    for d in range(-reach, reach + 1):
        if d and a * d + bw < br + r.width and br < a * d + bw + w.width:
            return False
    return True


def shared_races(cfg: Cfg, facts: RegisterFacts, build: str) -> list[Finding]:
    """Findings of the race rule (module docstring), one per (write, read) pair."""
    origins = cfg.interval_origins()
    accesses = shared_accesses(facts)
    by_origin: dict[int, list[SharedAccess]] = {}
    for acc in accesses:
        for o in origins[acc.index]:
            by_origin.setdefault(o, []).append(acc)
    seen: set[tuple[int, int]] = set()
    findings: list[Finding] = []
    for group in by_origin.values():
        writes = [a for a in group if a.writes]
        reads = [a for a in group if a.reads]
        for w in writes:
            for r in reads:
                if (w.index, r.index) in seen or (w.atomic and r.atomic):
                    continue
                if w.symbols is not None and r.symbols is not None and not (w.symbols & r.symbols):
                    continue
                seen.add((w.index, r.index))
                if thread_private(w, r):
                    continue
                sym = ", ".join(sorted(w.symbols or r.symbols or {"<unknown shared address>"}))
                findings.append(Finding(
                    "race", build, facts.kernel.name, r.ins.line, r.ins.text,
                    f"shared {sym}: read may run in the same barrier interval as the write at "
                    f"PTX line {w.ins.line} ({w.ins.text}) by another thread; no bar.sync "
                    f"separates them on some path and the addresses are not provably thread-private",
                ))
    return findings


def barrier_divergence(cfg: Cfg, facts: RegisterFacts, build: str) -> list[Finding]:
    """Findings of the divergence rule (module docstring), one per (branch, barrier)."""
    regions = divergent_regions(cfg)
    ins = facts.kernel.instructions
    findings: list[Finding] = []
    for branch, blocks in regions:
        for b in sorted(blocks):
            blk = cfg.blocks[b]
            for i in range(blk.start, blk.end):
                if is_barrier(ins[i]) or (ins[i].op in ("bar", "barrier") and "sync" in ins[i].parts):
                    findings.append(Finding(
                        "barrier-divergence", build, facts.kernel.name, ins[i].line, ins[i].text,
                        f"barrier under thread-dependent control flow from PTX line {branch.line} "
                        f"({branch.text}); threads of one block may not all reach it",
                    ))
    return findings
