"""Which values and branches may differ between the threads of one block (flow-sensitive).

nvcc reuses virtual registers, so uniformity is tracked per *definition* with reaching
definitions (bitmasks over definition ids, solved per basic block). A definition is varying
when it reads a varying special register (`%tid.*`, `%laneid`, clocks...), is an atomic,
shuffle or vote, loads from a thread-local space or from shared memory at a varying address,
reads a register whose reaching definitions include a varying one (except the result of a
block-wide `bar.red`, the same in every thread), or sits in a block that a
varying branch controls (the blocks between the branch and its immediate post-dominator;
this also covers values merged from the two sides of such a branch). A branch, `ret` or
`exit` is varying when its predicate is.
"""

from __future__ import annotations

import re

from safemon.audit.cfg import EXIT, Cfg
from safemon.audit.ptx import Instruction

__all__ = ["divergent_regions"]

_VARYING_SPECIAL = re.compile(r"^%(tid\.[xyz]|laneid|warpid|clock\w*|globaltimer\w*|lanemask\w*|smid)$")
_TOKEN = re.compile(r"%[\w.]+")


def _reaching(cfg: Cfg) -> tuple[list[tuple[int, str]], list[dict[str, list[int]]]]:
    """Definition ids (instruction index, register) and, per instruction, the reaching
    definition ids of each register it reads."""
    ins = cfg.kernel.instructions
    defs: list[tuple[int, str]] = []
    def_ids: dict[int, list[int]] = {}
    by_reg: dict[str, int] = {}
    for i, x in enumerate(ins):
        for r in x.defs():
            def_ids.setdefault(i, []).append(len(defs))
            by_reg[r] = by_reg.get(r, 0) | (1 << len(defs))
            defs.append((i, r))

    def transfer(mask: int, i: int) -> int:
        for d in def_ids.get(i, ()):
            mask = (mask & ~by_reg[defs[d][1]]) | (1 << d)
        return mask

    block_in = [0] * len(cfg.blocks)
    block_out: list[int | None] = [None] * len(cfg.blocks)
    work = list(range(len(cfg.blocks)))
    while work:
        b = work.pop()
        blk = cfg.blocks[b]
        mask = block_in[b]
        for i in range(blk.start, blk.end):
            mask = transfer(mask, i)
        if block_out[b] == mask:
            continue
        block_out[b] = mask
        for s in blk.succs:
            if mask & ~block_in[s]:
                block_in[s] |= mask
                work.append(s)
    uses: list[dict[str, list[int]]] = [{} for _ in ins]
    for blk in cfg.blocks:
        mask = block_in[blk.index]
        for i in range(blk.start, blk.end):
            for r in _reads(ins[i]):
                uses[i][r] = _bits(mask & by_reg.get(r, 0))
            mask = transfer(mask, i)
    return defs, uses


def _reads(x: Instruction) -> set[str]:
    return set(x.uses())


def _bits(mask: int) -> list[int]:
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _source_varying(x: Instruction, reg_varying: dict[str, bool]) -> bool:
    if x.op in ("bar", "barrier") and "red" in x.parts:
        return False  # a block-wide reduction (__syncthreads_or): one result for every thread
    if x.op in ("atom", "shfl", "vote", "activemask", "match", "redux"):
        return True
    if x.op in ("ld", "ldu") and x.space() == "local":
        return True
    toks = [t for o in (x.operands[1:] if x.defs() else x.operands) for t in _TOKEN.findall(o)]
    return any(_VARYING_SPECIAL.match(t) or reg_varying.get(t, False) for t in toks) or (
        x.predicate is not None and reg_varying.get(x.predicate, False))


def divergent_regions(cfg: Cfg) -> list[tuple[Instruction, set[int]]]:
    """Each varying branch/ret/exit with the blocks it controls (module docstring)."""
    ins = cfg.kernel.instructions
    defs, uses = _reaching(cfg)
    pdom = cfg.postdominators()
    varying_def = [False] * len(defs)
    in_region: set[int] = set()
    regions: dict[int, set[int]] = {}
    changed = True
    while changed:
        changed = False
        for d, (i, _r) in enumerate(defs):
            if varying_def[d]:
                continue
            reg_varying = {r: any(varying_def[x] for x in ds) for r, ds in uses[i].items()}
            if cfg.block_of[i] in in_region or _source_varying(ins[i], reg_varying):
                varying_def[d] = True
                changed = True
        for i, x in enumerate(ins):
            if x.op not in ("bra", "ret", "exit") or x.predicate is None or i in regions:
                continue
            if any(varying_def[d] for d in uses[i].get(x.predicate, [])):
                b = cfg.block_of[i]
                stop = cfg.ipdom(b, pdom)
                regions[i] = cfg.region(b, stop if stop != EXIT else -99)
                in_region |= regions[i]
                changed = True
    return [(ins[i], blocks) for i, blocks in regions.items()]
