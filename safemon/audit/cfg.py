"""The control-flow graph of one PTX kernel, its barriers and its barrier intervals.

Nodes are basic blocks (`Block`): a label or the instruction after a branch starts one, a
branch, `ret` or `exit` ends one. `EXIT` is a virtual node after every `ret`/`exit`.

A *barrier* is an unpredicated `bar.sync`/`barrier.sync`/`bar.red` naming barrier 0..15
without a thread count, i.e. one that waits for every thread of the block (`__syncthreads`).
Partial or predicated barriers are not counted as barriers (the sound choice: the checks
then see no separation where such a barrier sits).

`interval_origins` labels every instruction with the set of places (the kernel entry `-1` or
the index of a barrier instruction) from which it is reachable without passing a barrier. Two
instructions can run in the same barrier interval, in different threads, when their sets
meet; this is the barrier-interval relation of the race check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from safemon.audit.ptx import Instruction, Kernel

__all__ = ["ENTRY", "EXIT", "Block", "Cfg", "build_cfg", "is_barrier"]

ENTRY = -1
EXIT = -2


def is_barrier(ins: Instruction) -> bool:
    """True for a barrier every thread of the block waits at (see the module docstring)."""
    if ins.predicate is not None:
        return False
    parts = ins.parts
    if parts[0] not in ("bar", "barrier") or len(parts) < 2 or parts[1] not in ("sync", "red"):
        return False
    if parts[1] == "sync":
        return len(ins.operands) == 1
    return len(ins.operands) == 3  # bar.red.op d, a, {!}c: no thread count operand


@dataclass
class Block:
    """Instructions `start..end-1` of the kernel and the indices of successor blocks."""

    index: int
    start: int
    end: int
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)


@dataclass
class Cfg:
    kernel: Kernel
    blocks: list[Block]
    block_of: list[int]  # instruction index -> block index

    def postdominators(self) -> dict[int, set[int]]:
        """Post-dominator sets per block (EXIT included as a node)."""
        nodes = [b.index for b in self.blocks]
        full = set(nodes) | {EXIT}
        pdom: dict[int, set[int]] = {n: set(full) for n in nodes}
        pdom[EXIT] = {EXIT}
        changed = True
        while changed:
            changed = False
            for n in reversed(nodes):
                succs = self.blocks[n].succs or [EXIT]
                new = set.intersection(*(pdom[s] for s in succs)) | {n}
                if new != pdom[n]:
                    pdom[n], changed = new, True
        return pdom

    def ipdom(self, block: int, pdom: dict[int, set[int]]) -> int:
        """The immediate post-dominator of `block`: the strict one every other strict one
        post-dominates (EXIT when nothing closer)."""
        strict = pdom[block] - {block}
        for cand in strict:
            if pdom[cand] == strict:
                return cand
        return EXIT

    def region(self, branch_block: int, stop: int) -> set[int]:
        """Blocks reachable from `branch_block`'s successors without passing `stop`."""
        seen: set[int] = set()
        todo = [s for s in self.blocks[branch_block].succs if s != stop]
        while todo:
            b = todo.pop()
            if b in seen or b == stop:
                continue
            seen.add(b)
            todo += self.blocks[b].succs
        return seen

    def interval_origins(self) -> list[frozenset[int]]:
        """Per instruction, the barrier-interval origins that reach it (module docstring)."""
        ins = self.kernel.instructions
        block_in: dict[int, set[int]] = {b.index: set() for b in self.blocks}
        if self.blocks:
            block_in[0].add(ENTRY)
        out_cache: dict[int, set[int]] = {}
        work = [b.index for b in self.blocks]
        while work:
            bi = work.pop()
            b = self.blocks[bi]
            cur = set(block_in[bi])
            for i in range(b.start, b.end):
                if is_barrier(ins[i]):
                    cur = {i}
            if out_cache.get(bi) == cur:
                continue
            out_cache[bi] = cur
            for s in b.succs:
                if not cur <= block_in[s]:
                    block_in[s] |= cur
                    work.append(s)
        result: list[frozenset[int]] = [frozenset()] * len(ins)
        for b in self.blocks:
            cur = set(block_in[b.index])
            for i in range(b.start, b.end):
                if is_barrier(ins[i]):
                    cur = {i}
                result[i] = frozenset(cur)
        return result


def _leaders(kernel: Kernel) -> list[int]:
    ins = kernel.instructions
    leaders = {0} | set(kernel.labels.values())
    for i, x in enumerate(ins):
        if x.op in ("bra", "ret", "exit", "brx") and i + 1 < len(ins):
            leaders.add(i + 1)
    return sorted(n for n in leaders if n < len(ins))


def build_cfg(kernel: Kernel) -> Cfg:
    """Basic blocks and edges of `kernel`.

    Raises:
        ValueError: a branch to a label the kernel does not define, or an indirect branch.
    """
    ins = kernel.instructions
    starts = _leaders(kernel)
    blocks = [Block(n, s, starts[n + 1] if n + 1 < len(starts) else len(ins))
              for n, s in enumerate(starts)]
    block_of = [0] * len(ins)
    for b in blocks:
        for i in range(b.start, b.end):
            block_of[i] = b.index
    for b in blocks:
        last = ins[b.end - 1]
        succs: list[int] = []
        if last.op == "brx":
            raise ValueError(f"line {last.line}: indirect branch (brx.idx) is not analysed")
        if last.op == "bra":
            target = last.operands[-1]
            if target not in kernel.labels:
                raise ValueError(f"line {last.line}: branch to unknown label {target}")
            succs.append(block_of[kernel.labels[target]] if kernel.labels[target] < len(ins) else EXIT)
            if last.predicate is not None and b.end < len(ins):
                succs.append(block_of[b.end])
        elif last.op in ("ret", "exit"):
            if last.predicate is not None and b.end < len(ins):
                succs.append(block_of[b.end])
        elif b.end < len(ins):
            succs.append(block_of[b.end])
        b.succs = [s for s in dict.fromkeys(succs) if s != EXIT]
        for s in b.succs:
            blocks[s].preds.append(b.index)
    return Cfg(kernel, blocks, block_of)
