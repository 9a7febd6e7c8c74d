"""What an audit check reports: one `Finding` per defect, with file, PTX line and reason."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["Finding"]


@dataclass(frozen=True)
class Finding:
    """One defect found in the PTX of one build.

    `check` names the rule (race, barrier-divergence, fma-in-exact, float-atomic, ftz,
    global-store, unanalysed); `line` is the 1-based line in the PTX text and `ptx` its
    statement; `build` says which source and defines produced it.
    """

    check: str
    build: str
    kernel: str
    line: int
    ptx: str
    reason: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.build}: {self.kernel}: PTX line {self.line}: [{self.check}] {self.reason}\n    {self.ptx}"
