"""Parse PTX text into kernels and instructions: the input of every static audit check.

Only what the checks need is parsed: each `.entry` with its parameter names, the `.shared`
symbols (module level and function level), labels, and one `Instruction` per statement with
its PTX line number (1-based), predicate, dotted opcode and operands. Comments are removed.

Raises `PtxParseError` on text that is not PTX as nvcc emits it (an unterminated entry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Address", "Instruction", "Kernel", "PtxParseError", "parse_ptx", "split_operands"]

#: Opcodes whose first operand is a source, not a destination (they define no register).
NO_DEF_OPS = frozenset({
    "st", "red", "bar", "barrier", "bra", "ret", "exit", "membar", "fence", "trap",
    "prefetch", "prefetchu", "stmatrix", "cp", "brkpt", "nanosleep", "pmevent",
})
FLOAT_TYPES = frozenset({"f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "e4m3", "e5m2"})
_REG = re.compile(r"%[A-Za-z_][\w.]*")
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(?")
_PARAM = re.compile(r"\.param\s+[^,)]*?\s([\w$]+)\s*(?:\[\d*\])?\s*[,)]?\s*$")
_SHARED = re.compile(r"\.shared\s+(?:\.align\s+\d+\s+)?\.\w+\s+([\w$]+)")
_LABEL = re.compile(r"^([\w$]+):$")


class PtxParseError(ValueError):
    """The text is not PTX of the shape nvcc emits."""


@dataclass(frozen=True)
class Address:
    """A memory operand `[base+offset]`: base is a register (`%r1`) or a symbol name."""

    base: str
    offset: int

    @property
    def is_register(self) -> bool:
        return self.base.startswith("%")


@dataclass(frozen=True)
class Instruction:
    """One PTX statement. `line` is its 1-based line in the PTX text."""

    line: int
    text: str
    opcode: str
    operands: tuple[str, ...]
    predicate: str | None = None
    negated: bool = False

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.opcode.split("."))

    @property
    def op(self) -> str:
        return self.parts[0]

    def space(self) -> str | None:
        """The state space named in the opcode (shared, global, param, local, const) or None."""
        for s in ("shared", "global", "param", "local", "const"):
            if s in self.parts[1:]:
                return s
        return None

    def _defines(self) -> bool:
        """False for the NO_DEF_OPS, except `bar.red`/`barrier.red`, whose first operand is
        the reduction's destination."""
        return self.op not in NO_DEF_OPS or (self.op in ("bar", "barrier") and "red" in self.parts)

    def defs(self) -> tuple[str, ...]:
        """Registers this instruction writes."""
        if not self._defines() or not self.operands:
            return ()
        return tuple(_REG.findall(self.operands[0]))

    def uses(self) -> tuple[str, ...]:
        """Registers this instruction reads (the predicate included)."""
        ops = self.operands[1:] if self._defines() else self.operands
        regs = [r for o in ops for r in _REG.findall(o)]
        if self.predicate:
            regs.append(self.predicate)
        return tuple(regs)

    def address(self) -> Address | None:
        """The first `[...]` operand, parsed; None when there is none or it is not base+const."""
        for o in self.operands:
            if o.startswith("["):
                return parse_address(o)
        return None

    def float_typed(self) -> bool:
        return any(p in FLOAT_TYPES for p in self.parts[1:])


@dataclass
class Kernel:
    """One `.entry`: parameter names in order, instructions and label positions."""

    name: str
    params: list[str]
    instructions: list[Instruction] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> index of next instruction
    shared: set[str] = field(default_factory=set)        # .shared symbols declared in the body
    calls: list[Instruction] = field(default_factory=list)


def parse_address(operand: str) -> Address | None:
    inner = operand.strip()[1:-1].replace(" ", "")
    m = re.fullmatch(r"([%\w$.]+)(?:\+(-?\d+))?", inner)
    if m is None:
        return None
    return Address(m.group(1), int(m.group(2) or 0))


def split_operands(text: str) -> tuple[str, ...]:
    """Split an operand list at commas outside braces and brackets."""
    out: list[str] = []
    depth = 0
    cur = ""
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return tuple(out)


def _strip_comments(text: str) -> list[str]:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return [re.sub(r"//.*", "", line).strip() for line in text.splitlines()]


def _instruction(line_no: int, stmt: str) -> Instruction:
    pred = None
    negated = False
    m = re.match(r"@(!?)(%[\w.]+)\s+(.*)", stmt)
    if m:
        negated, pred, stmt = m.group(1) == "!", m.group(2), m.group(3)
    opcode, _, rest = stmt.partition(" ")
    opcode, _, rest2 = opcode.partition("\t")
    return Instruction(line_no, stmt, opcode, split_operands((rest2 + " " + rest).strip()), pred, negated)


def parse_ptx(text: str) -> tuple[list[Kernel], set[str]]:
    """Parse PTX text into its kernels and the module-level `.shared` symbols.

    Raises:
        PtxParseError: an `.entry` without a closed body.
    """
    lines = _strip_comments(text)
    kernels: list[Kernel] = []
    module_shared: set[str] = set()
    cur: Kernel | None = None
    in_params = False
    depth = 0
    for no, line in enumerate(lines, start=1):
        if not line:
            continue
        if cur is None:
            m = _ENTRY.search(line)
            if m:
                cur, in_params, depth = Kernel(m.group(1), []), True, 0
                continue
            s = _SHARED.search(line)
            if s and line.rstrip(";").strip():
                module_shared.add(s.group(1))
            continue
        if in_params:
            p = _PARAM.search(line)
            if p:
                cur.params.append(p.group(1))
            if line.startswith("{"):
                in_params, depth = False, 1
            continue
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            kernels.append(cur)
            cur = None
            continue
        _body_line(cur, no, line)
    if cur is not None:
        raise PtxParseError(f"entry {cur.name} has no closing brace")
    return kernels, module_shared


def _body_line(k: Kernel, no: int, line: str) -> None:
    lab = _LABEL.match(line)
    if lab:
        k.labels[lab.group(1)] = len(k.instructions)
        return
    if line.startswith("."):
        s = _SHARED.search(line)
        if s:
            k.shared.add(s.group(1))
        return
    if line in ("{", "}") or line.startswith(("{", "}")):
        return
    for stmt in line.split(";"):
        stmt = stmt.strip()
        if stmt:
            ins = _instruction(no, stmt)
            k.instructions.append(ins)
            if ins.op == "call":
                k.calls.append(ins)
