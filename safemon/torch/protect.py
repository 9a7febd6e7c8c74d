"""`protect(model, client=...)`: swap a model's Linear and Conv2d layers for safemon ones.

Two steps, so that a refused model is left untouched:

1. `plan(model)` (pure, no client): walks the modules and decides. In an `nn.Sequential`
   (the class itself: a subclass may call its layers in another order),
   a run of `nn.Linear` layers whose widths chain, with only ReLU, tanh-GELU, Identity or
   Dropout between them, becomes ONE group (one whole-model request per call); a Linear
   or Conv2d followed by a supported activation takes it along. Elsewhere each Linear /
   Conv2d is a group of its own. Everything else is reported as left to PyTorch, with why.
   Every float32 check on weights runs here, before anything is registered.
2. `protect` registers each group with the client and puts the protected module in the
   group's first place; a later Linear of the group becomes a `FoldedLinear` (it keeps the
   Linear's weight and bias, so `state_dict` keys do not change) and a folded activation
   `nn.Identity`, so a Sequential keeps its indices. It prints the report and returns the
   same model.

Not swapped, on purpose: subclasses of Linear/Conv2d (their forward may differ), layers of
`nn.MultiheadAttention` (it reads `out_proj.weight` directly, so a swapped module would
never be called), a module that the model holds at several places (weight tying: one swap
would leave the other uses unprotected), grouped/depthwise or non-zero-padded convolutions,
and GELU in its exact (erf) form, which safemon does not compute (its gelu is the tanh
form). A product that the model's own forward computes from a layer's weight (`F.linear(x,
self.fc.weight)`) never calls the layer, so no swap can protect it.
"""

from __future__ import annotations

import collections
import sys
from dataclasses import dataclass, field
from typing import TextIO

import torch
from torch import nn

from safemon.client import Client
from safemon.models import Activation
from safemon.torch import conv as convmath
from safemon.torch.checks import check_weight_dtype
from safemon.torch.modules import (
    FoldedLinear,
    ProtectedConv2d,
    ProtectedLinear,
    ProtectedSequence,
)
from safemon.torch.report import Entry, ProtectionReport, Status

__all__ = ["Group", "plan", "protect", "report_of"]

_REPORT_ATTR = "safemon_report"


@dataclass
class Group:
    """Modules computed by one safemon request.

    Attributes:
        members: (qualified name, Linear or Conv2d, activation applied after it).
        folded: (qualified name, class name) of the modules absorbed into the request (activations,
            Identity, Dropout); they become `nn.Identity` (a later Linear member becomes a
            `FoldedLinear`).
    """

    members: list[tuple[str, nn.Module, Activation]] = field(default_factory=list)
    folded: list[tuple[str, str]] = field(default_factory=list)

    @property
    def is_conv(self) -> bool:
        return isinstance(self.members[0][1], nn.Conv2d)


def _activation(module: nn.Module) -> Activation | None:
    """The safemon activation `module` is, or None (an Identity/Dropout is IDENTITY)."""
    if type(module) is nn.ReLU:
        return Activation.RELU
    if type(module) is nn.GELU and module.approximate == "tanh":
        return Activation.GELU
    if type(module) in (nn.Identity, nn.Dropout):
        return Activation.IDENTITY
    return None


def _why_not(module: nn.Module) -> str:
    """The printout's reason for a leaf module left to PyTorch."""
    if isinstance(module, nn.Linear | nn.Conv2d):
        return f"{type(module).__name__} is a subclass whose forward may differ"
    if type(module) is nn.GELU:
        return "exact (erf) GELU: safemon computes the tanh form only, PyTorch runs this one"
    if isinstance(module, nn.LayerNorm | nn.BatchNorm1d | nn.BatchNorm2d | nn.GroupNorm
                  | nn.RMSNorm):
        return "normalisation runs in PyTorch"
    if isinstance(module, nn.Softmax | nn.LogSoftmax):
        return "softmax runs in PyTorch"
    if _activation(module) is not None or isinstance(module, nn.Tanh | nn.Sigmoid | nn.SiLU):
        return "elementwise; runs in PyTorch (not next to a protected layer in a Sequential)"
    return "no protected counterpart; runs in PyTorch"


def _children(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every child slot of `module` in order, a module held in two slots in both
    (`named_children` lists it once)."""
    return [(name, child) for name, child in module._modules.items() if child is not None]


class _Planner:
    def __init__(self, model: nn.Module) -> None:
        self.groups: list[Group] = []
        self.entries: list[Entry] = []
        #: how many places of the model hold each module (more than one: shared)
        self.uses = collections.Counter(
            id(m) for _, m in model.named_modules(remove_duplicate=False))
        #: modules already reported (a shared one is met at each of its places)
        self.seen: set[int] = set()

    def shared(self, module: nn.Module) -> bool:
        return self.uses[id(module)] > 1

    def protectable(self, name: str, module: nn.Module) -> bool:
        if self.shared(module):
            return False
        if type(module) is nn.Linear:
            check_weight_dtype(name, module.weight)
            return True
        if type(module) is nn.Conv2d and convmath.conv_support(module) is None:
            check_weight_dtype(name, module.weight)
            return True
        return False

    def walk(self, module: nn.Module, prefix: str) -> None:
        if isinstance(module, nn.MultiheadAttention):
            for name, sub in module.named_modules(prefix=prefix.rstrip(".")):
                self.unprotected(name, sub, "nn.MultiheadAttention computes its projections "
                                 "and scores itself (it reads out_proj.weight directly)")
            return
        children = _children(module)
        if type(module) is nn.Sequential:
            self.scan_sequence(prefix, children)
            return
        for name, child in children:
            self.visit(f"{prefix}{name}", child)

    def visit(self, name: str, child: nn.Module) -> None:
        # A shared layer or container is left alone (an activation held twice is not:
        # each of its places is judged as it stands)
        if self.shared(child) and (isinstance(child, nn.Linear | nn.Conv2d)
                                   or bool(child._modules)):
            if id(child) not in self.seen:
                self.seen.add(id(child))
                self.unprotected(name, child, "held at several places in the model (shared "
                                 "or tied weights): one swap would leave the other uses "
                                 "unprotected; give each use its own layer to protect it")
            return
        if self.protectable(name, child):
            self.add_group(Group([(name, child, Activation.IDENTITY)]))
        elif not list(child.children()):
            reason = (convmath.conv_support(child) if isinstance(child, nn.Conv2d)
                      and type(child) is nn.Conv2d else None)
            self.unprotected(name, child, reason or _why_not(child))
        else:
            self.walk(child, f"{name}.")

    def scan_sequence(self, prefix: str, children: list[tuple[str, nn.Module]]) -> None:
        i = 0
        while i < len(children):
            name, child = children[i]
            if not self.protectable(f"{prefix}{name}", child):
                self.visit(f"{prefix}{name}", child)
                i += 1
                continue
            group = Group([(f"{prefix}{name}", child, Activation.IDENTITY)])
            i += 1
            while i < len(children) and self.extend(group, f"{prefix}{children[i][0]}",
                                                    children[i][1]):
                i += 1
            self.add_group(group)

    def extend(self, group: Group, name: str, nxt: nn.Module) -> bool:
        """Take `nxt` into `group` when safemon computes it there; False ends the group."""
        last_name, last, act = group.members[-1]
        nxt_act = _activation(nxt)
        if nxt_act is Activation.IDENTITY:
            group.folded.append((name, type(nxt).__name__))
            return True
        if nxt_act is not None and act is Activation.IDENTITY:
            group.members[-1] = (last_name, last, nxt_act)
            group.folded.append((name, type(nxt).__name__))
            return True
        if (type(nxt) is nn.Linear and not group.is_conv and isinstance(last, nn.Linear)
                and nxt.in_features == last.out_features and self.protectable(name, nxt)):
            group.members.append((name, nxt, Activation.IDENTITY))
            return True
        return False

    def add_group(self, group: Group) -> None:
        self.groups.append(group)
        n = len(self.groups)
        names = [m[0] for m in group.members]
        for name, module, act in group.members:
            how = ("im2col product" if isinstance(module, nn.Conv2d) else "product")
            how += f" + bias + {act.value}" if act is not Activation.IDENTITY else " + bias"
            if len(names) > 1:
                how += f"; one request for {names[0]}..{names[-1]} ({len(names)} layers)"
            self.entries.append(Entry(name, type(module).__name__, Status.PROTECTED, n, how))
        for name, kind in group.folded:
            self.entries.append(Entry(name, kind, Status.FOLDED, n,
                                      "computed inside the request (activation/identity)"))

    def unprotected(self, name: str, module: nn.Module, why: str) -> None:
        self.entries.append(Entry(name, type(module).__name__, Status.UNPROTECTED, None, why))


def plan(model: nn.Module) -> tuple[list[Group], ProtectionReport]:
    """The groups `protect` would register, and the report it would print (no client).

    Raises:
        TypeError: a Linear/Conv2d to protect has non-float32 weights (names it).
        ValueError: nothing in `model` can be protected (the message says what is), or
            `model` holds layers that `protect` already swapped (names them).
    """
    done = [name for name, m in model.named_modules()
            if isinstance(m, ProtectedLinear | ProtectedSequence | ProtectedConv2d
                          | FoldedLinear)]
    if done:
        raise ValueError(
            f"safemon.torch: model {type(model).__name__} was already protected: "
            f"{', '.join(repr(n) for n in done[:4])}{' ...' if len(done) > 4 else ''} "
            "are safemon layers. Fix: call protect once per model; to protect it with "
            "another client, protect a fresh instance of the unprotected model (load its "
            "state_dict).")
    planner = _Planner(model)
    planner.walk(model, "")
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    entries = sorted(planner.entries, key=lambda e: order.get(e.name, len(order)))
    report = ProtectionReport(type(model).__name__, entries)
    if not planner.groups:
        raise ValueError(
            f"safemon.torch: model {type(model).__name__} has no nn.Linear or nn.Conv2d layer "
            "that safemon can protect. Fix: safemon protects float32 nn.Linear layers and "
            "nn.Conv2d layers with groups=1 and zero padding; products written in forward() "
            "or inside nn.MultiheadAttention cannot be swapped (use nn.Linear modules for "
            "the projections).")
    return planner.groups, report


def _build(group: Group, client: Client, timeout: float) -> list[tuple[str, nn.Module]]:
    """The modules to put in the group's places: the protected module at its first member's
    place, a `FoldedLinear` at each later Linear's, `nn.Identity` at each folded activation's."""
    return ([(group.members[0][0], _protected(group, client, timeout))]
            + [(name, nn.Identity()) for name, _ in group.folded])


def _protected(group: Group, client: Client, timeout: float) -> nn.Module:
    name, module, act = group.members[0]
    if isinstance(module, nn.Conv2d):
        return ProtectedConv2d(module, client, name=name, activation=act, timeout=timeout)
    if len(group.members) == 1:
        assert isinstance(module, nn.Linear)
        return ProtectedLinear(module, client, name=name, activation=act, timeout=timeout)
    linears = []
    for n, m, a in group.members:
        assert isinstance(m, nn.Linear)
        linears.append((n, m, a))
    return ProtectedSequence(linears, client, timeout=timeout)


def _places(group: Group, client: Client, timeout: float) -> list[tuple[str, nn.Module]]:
    """(qualified name, module to put there) for every place of `group` (`_build`), the
    later Linear members' `FoldedLinear` modules included."""
    places = _build(group, client, timeout)
    protected = places[0][1]
    if isinstance(protected, ProtectedSequence):
        places += [(member.layer_name, member) for member in protected.folded]
    return places


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent_name), attr, new)


def protect(model: nn.Module, *, client: Client, timeout: float = 1.0,
            verbose: bool = True, file: TextIO | None = None) -> nn.Module:
    """Swap `model`'s Linear / Conv2d layers for safemon-protected ones, in place.

    Args:
        model: a float32 model (protect after `model.to(device)`; run it in `eval()` mode
            under `torch.no_grad()`).
        client: a connected `safemon.Client`; every protected request goes through it.
        timeout: seconds per request.
        verbose: print the report (protected and unprotected layers) to `file`
            (default stdout).

    Returns:
        `model` itself; `report_of(model)` gives the `ProtectionReport`.

    Raises:
        TypeError / ValueError: see `plan` (nothing is changed then); the client's errors
        while registering weights.
    """
    groups, report = plan(model)
    with torch.no_grad():
        built = [_places(group, client, timeout) for group in groups]
    for places in built:
        for name, new in places:  # each starts in its replaced layer's mode (eval stays eval)
            _replace(model, name, new)
    setattr(model, _REPORT_ATTR, report)
    if verbose:
        print(report.render(), file=file or sys.stdout)
    return model


def report_of(model: nn.Module) -> ProtectionReport:
    """The report `protect` attached to `model`.

    Raises:
        ValueError: `model` was not protected.
    """
    report = getattr(model, _REPORT_ATTR, None)
    if not isinstance(report, ProtectionReport):
        raise ValueError("safemon.torch: this model was not protected (call protect first)")
    return report
