"""What `protect` did to a model, as data and as the printout a user reads.

Every module of the model that does arithmetic gets one `Entry`: protected (and in which
request), protected by redundancy only (the layer norms, attention scores and softmax, and
residual adds of a protected `nn.TransformerEncoderLayer`: computed in every channel and
voted, with no execution signature), folded into a request (an activation, Identity,
Dropout or reshape between protected layers), or left to PyTorch with the reason. The
printout ends with what is never protected because it is not a module at all (products
written in `forward`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["NOT_MODULES", "Entry", "ProtectionReport", "Status"]

#: Said in every printout and in docs/TORCH.md: what `protect` cannot see or swap.
NOT_MODULES = (
    "never protected (they are not modules protect() swaps): products written in "
    "forward() - attention scores q·kᵀ and p·v, @, torch.matmul, F.linear, "
    "F.scaled_dot_product_attention - and softmax, norms, residual adds, pooling, "
    "embeddings, except inside a protected nn.TransformerEncoderLayer (listed above); "
    "PyTorch computes them unchecked")


class Status(StrEnum):
    """What happened to one module."""

    PROTECTED = "protected"
    #: computed in every channel and voted, without an execution signature
    REDUNDANT = "redundant"
    FOLDED = "folded"
    UNPROTECTED = "unprotected"


@dataclass(frozen=True)
class Entry:
    """One module of the model.

    Attributes:
        name: qualified name (as `named_modules` gives it).
        kind: the module's class name.
        status: see `Status`.
        request: for PROTECTED/REDUNDANT/FOLDED, the number (1-based) of the request that
            computes it.
        note: how it is computed, or why it is left to PyTorch.
    """

    name: str
    kind: str
    status: Status
    request: int | None
    note: str


@dataclass
class ProtectionReport:
    """All entries, in model order; `requests` is the number of safemon requests one
    forward pass sends (each protected group runs once per call of its module)."""

    model: str
    entries: list[Entry] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return len({e.request for e in self.entries if e.request is not None})

    @property
    def protected(self) -> list[str]:
        """Names of the layers whose products safemon computes."""
        return [e.name for e in self.entries if e.status is Status.PROTECTED]

    @property
    def redundant(self) -> list[str]:
        """Names of the modules (and, for an encoder layer's attention scores, of its
        self_attn) whose arithmetic safemon computes in every channel and votes, without an
        execution signature (`Status.REDUNDANT`)."""
        return [e.name for e in self.entries if e.status is Status.REDUNDANT]

    @property
    def unprotected(self) -> list[str]:
        """Names of the modules PyTorch computes unchecked."""
        return [e.name for e in self.entries if e.status is Status.UNPROTECTED]

    def render(self) -> str:
        """The printout: a summary line, one line per module, and `NOT_MODULES`."""
        redundant = (f"{len(self.redundant)} step(s) protected by redundancy only; "
                     if self.redundant else "")
        lines = [
            f"safemon.torch.protect({self.model}): {len(self.protected)} layers protected in "
            f"{self.requests} request(s) per forward; {redundant}{len(self.unprotected)} "
            "module(s) left to PyTorch"]
        width = max((len(e.name) for e in self.entries), default=4)
        kind_w = max((len(e.kind) for e in self.entries), default=4)
        for e in self.entries:
            req = f"#{e.request}" if e.request is not None else "-"
            label = {Status.PROTECTED: "protected", Status.FOLDED: "folded",
                     Status.REDUNDANT: "protected by redundancy",
                     Status.UNPROTECTED: "NOT protected"}[e.status]
            lines.append(f"  {req:>4}  {e.name:<{width}}  {e.kind:<{kind_w}}  {label}: {e.note}")
        lines.append(f"  {NOT_MODULES}")
        return "\n".join(lines)
