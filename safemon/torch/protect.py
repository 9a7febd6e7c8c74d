"""`protect(model, client=...)`: swap a model's Linear and Conv2d layers for safemon ones.

Two steps, so that a refused model is left untouched:

1. `plan(model)` (pure, no client): walks the modules and decides. In an `nn.Sequential`
   (the class itself: a subclass may call its layers in another order), a *run* becomes
   ONE group (one whole-model request per call): `nn.Linear` layers and supported
   `nn.TransformerEncoderLayer`s whose widths chain, with only ReLU, GELU (either form; folded
   into the Linear before them), Identity or Dropout between them, and `nn.Flatten` /
   `nn.Unflatten` reshapes between two of them where the shape of each sample is known
   (`safemon.torch.chain.RunShape`); a Linear or Conv2d followed by a supported activation
   takes it along. Elsewhere each Linear / Conv2d / supported encoder layer is a group of its
   own. Everything else is reported as left to PyTorch, with why. Every float32 check on
   weights runs here, before anything is registered.
2. `protect` registers each group with the client and puts the protected module in the
   group's first place; a later Linear of the group becomes a `FoldedLinear` and a later
   encoder layer a `FoldedEncoderLayer` (they keep the parameters, so `state_dict` keys do
   not change), a folded activation or reshape `nn.Identity`, so a Sequential keeps its
   indices. It prints the report and returns the same model.

An `nn.TransformerEncoderLayer` is supported as `safemon.torch.encoder` says (batch_first,
relu or GELU, no mask but the causal one, ...) and in eval mode; it is then computed whole by safemon:
its in-projection, output projection and feed-forward products with execution signatures,
its layer norms, attention scores, softmax and residual adds *protected by redundancy*
(computed in every channel and voted, no execution signature). An unsupported one is left
to PyTorch with the reason, its `nn.Linear` layers (linear1, linear2) protected one by one.

Not swapped, on purpose: subclasses of Linear/Conv2d (their forward may differ), layers of
`nn.MultiheadAttention` outside a supported encoder layer (it reads `out_proj.weight`
directly, so a swapped module would never be called), a module that the model holds at
several places (weight tying: one swap would leave the other uses unprotected),
and grouped/depthwise or non-zero-padded convolutions. A product that the model's own
forward computes from a layer's weight (`F.linear(x, self.fc.weight)`) never calls the
layer, so no swap can protect it.
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
from safemon.torch.chain import Regroup, RunShape
from safemon.torch.checks import check_weight_dtype
from safemon.torch.encoder import REDUNDANCY, encoder_activation, encoder_support
from safemon.torch.modules import (
    FoldedEncoderLayer,
    FoldedLinear,
    ProtectedConv2d,
    ProtectedEncoderLayer,
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
        members: (qualified name, module, activation applied after it): a Linear or Conv2d,
            or, in a run, a Linear, TransformerEncoderLayer, Flatten or Unflatten.
        folded: (qualified name, class name) of the modules absorbed into the request (activations,
            Identity, Dropout); they become `nn.Identity` (a later Linear member becomes a
            `FoldedLinear`, a later encoder layer a `FoldedEncoderLayer`, a reshape
            `nn.Identity`).
        shape: what the run knows of its activation's shape (None for a Conv2d group).
    """

    members: list[tuple[str, nn.Module, Activation]] = field(default_factory=list)
    folded: list[tuple[str, str]] = field(default_factory=list)
    shape: RunShape | None = None

    @property
    def is_conv(self) -> bool:
        return isinstance(self.members[0][1], nn.Conv2d)


def _activation(module: nn.Module) -> Activation | None:
    """The safemon activation `module` is, or None (an Identity/Dropout is IDENTITY)."""
    if type(module) in (nn.ReLU, nn.GELU):  # as an encoder layer's activation reads them
        act = encoder_activation(module)
        return act if isinstance(act, Activation) else None
    if type(module) in (nn.Identity, nn.Dropout):
        return Activation.IDENTITY
    return None


def _is_regroup(module: nn.Module) -> bool:
    return type(module) in (nn.Flatten, nn.Unflatten)


def _why_not(module: nn.Module) -> str:
    """The printout's reason for a leaf module left to PyTorch."""
    if isinstance(module, nn.Flatten | nn.Unflatten):
        return "reshape only (no arithmetic, nothing to protect); PyTorch runs it"
    if isinstance(module, nn.Linear | nn.Conv2d):
        return f"{type(module).__name__} is a subclass whose forward may differ"
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
        if type(module) is nn.TransformerEncoderLayer and self.encoder_reason(module) is None:
            for param_name, p in module.named_parameters():
                check_weight_dtype(f"{name}.{param_name}", p)
            return True
        return False

    def encoder_reason(self, layer: nn.Module) -> str | None:
        """None when `protect` computes the encoder layer `layer` whole; else why not."""
        why = encoder_support(layer)
        if why is not None:
            return why
        if layer.training:
            return ("in training mode at protect() (safemon protects inference: call "
                    "model.eval() first)")
        if any(self.shared(m) for m in layer.modules()):
            return "holds a module that the model holds at several places too"
        return None

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
        elif type(child) is nn.TransformerEncoderLayer and not self.shared(child):
            self.unprotected(name, child, f"{self.encoder_reason(child)}; PyTorch computes "
                             "its attention, norms and residual adds (its nn.Linear layers "
                             "are protected one by one)")
            self.walk(child, f"{name}.")
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
            group = Group([(f"{prefix}{name}", child, Activation.IDENTITY)],
                          shape=None if isinstance(child, nn.Conv2d) else RunShape.start(child))
            i += 1
            # the run up to its last computing member (members, folded, next index): a
            # reshape (and what is folded after it) with no computing member after it is
            # left to PyTorch
            kept = (1, 0, i)
            while i < len(children) and self.extend(group, f"{prefix}{children[i][0]}",
                                                    children[i][1]):
                i += 1
                if not _is_regroup(group.members[-1][1]):
                    kept = (len(group.members), len(group.folded), i)
            del group.members[kept[0]:], group.folded[kept[1]:]
            i = kept[2]
            self.add_group(group)

    def extend(self, group: Group, name: str, nxt: nn.Module) -> bool:
        """Take `nxt` into `group` when safemon computes it there; False ends the group."""
        last_name, last, act = group.members[-1]
        nxt_act = _activation(nxt)
        if nxt_act is Activation.IDENTITY:
            group.folded.append((name, type(nxt).__name__))
            return True
        if (nxt_act is not None and act is Activation.IDENTITY
                and type(last) in (nn.Linear, nn.Conv2d)):
            group.members[-1] = (last_name, last, nxt_act)
            group.folded.append((name, type(nxt).__name__))
            return True
        if group.shape is None:  # a Conv2d takes an activation, nothing more
            return False
        if type(nxt) in (nn.Linear, nn.TransformerEncoderLayer):
            shape = group.shape.take(nxt) if self.protectable(name, nxt) else None
        else:
            regroup = Regroup.of(name, nxt)
            shape = None if regroup is None else group.shape.take(nxt, regroup)
        if shape is None:
            return False
        group.members.append((name, nxt, Activation.IDENTITY))
        group.shape = shape
        return True

    def add_group(self, group: Group) -> None:
        self.groups.append(group)
        n = len(self.groups)
        names = [m[0] for m in group.members]
        kinds = "layers" if all(type(m) is nn.Linear for _, m, _ in group.members) else "modules"
        run = (f"; one request for {names[0]}..{names[-1]} ({len(names)} {kinds})"
               if len(names) > 1 else "")
        for name, module, act in group.members:
            if isinstance(module, nn.TransformerEncoderLayer):
                self.entries += _encoder_entries(name, module, n, run)
                continue
            if _is_regroup(module):
                self.entries.append(Entry(
                    name, type(module).__name__, Status.FOLDED, n,
                    "reshape inside the request: the same row-major buffer read with another "
                    "width (no arithmetic)" + run))
                continue
            how = ("im2col product" if isinstance(module, nn.Conv2d) else "product")
            how += f" + bias + {act.value}" if act is not Activation.IDENTITY else " + bias"
            self.entries.append(Entry(name, type(module).__name__, Status.PROTECTED, n,
                                      how + run))
        for name, kind in group.folded:
            self.entries.append(Entry(name, kind, Status.FOLDED, n,
                                      "computed inside the request (activation/identity)"))

    def unprotected(self, name: str, module: nn.Module, why: str) -> None:
        self.entries.append(Entry(name, type(module).__name__, Status.UNPROTECTED, None, why))


def _encoder_entries(name: str, layer: nn.TransformerEncoderLayer, request: int,
                     run: str) -> list[Entry]:
    """The report's entries of a supported encoder layer computed by request `request`: one
    per module of it, and one for its attention scores (not a module)."""
    attn = layer.self_attn
    heads, d = int(attn.num_heads), int(attn.embed_dim)
    act = encoder_activation(layer.activation)
    assert isinstance(act, Activation)
    def product(bias: object) -> str:
        return "product + bias" if bias is not None else "product"

    form = "pre-norm" if layer.norm_first else "post-norm"
    notes: dict[str, tuple[Status, str]] = {
        "": (Status.REDUNDANT, f"{form} encoder layer, whole in the request: its two residual "
             f"adds {REDUNDANCY}; its products, attention and norms below{run}"),
        "self_attn": (Status.PROTECTED, "in-projection "
                      + product(attn.in_proj_bias).replace("product", "product (q | k | v)")),
        "self_attn.out_proj": (Status.PROTECTED, product(attn.out_proj.bias)),
        "linear1": (Status.PROTECTED, f"{product(layer.linear1.bias)} + {act.value}"),
        "linear2": (Status.PROTECTED, product(layer.linear2.bias)),
        "norm1": (Status.REDUNDANT, f"layer norm, {REDUNDANCY}"),
        "norm2": (Status.REDUNDANT, f"layer norm, {REDUNDANCY}"),
    }
    entries = []
    for sub, module in layer.named_modules():
        status, note = notes.get(sub, (Status.FOLDED, "computed inside the request "
                                       "(activation; a dropout is the identity in eval mode)"))
        full = f"{name}.{sub}" if sub else name
        entries.append(Entry(full, type(module).__name__, status, request, note))
        if sub == "self_attn":
            entries.append(Entry(
                full, "attention", Status.REDUNDANT, request,
                f"scores q·kᵀ/√dh, softmax and p·v ({heads} heads of {d // heads}), "
                f"{REDUNDANCY}"))
    return entries


def plan(model: nn.Module) -> tuple[list[Group], ProtectionReport]:
    """The groups `protect` would register, and the report it would print (no client).

    Raises:
        TypeError: a Linear/Conv2d to protect has non-float32 weights (names it).
        ValueError: nothing in `model` can be protected (the message says what is), or
            `model` holds layers that `protect` already swapped (names them).
    """
    done = [name for name, m in model.named_modules()
            if isinstance(m, ProtectedLinear | ProtectedSequence | ProtectedConv2d
                          | FoldedLinear | FoldedEncoderLayer)]
    if done:
        raise ValueError(
            f"safemon.torch: model {type(model).__name__} was already protected: "
            f"{', '.join(repr(n) for n in done[:4])}{' ...' if len(done) > 4 else ''} "
            "are safemon layers. Fix: call protect once per model; to protect it with "
            "another client, protect a fresh instance of the unprotected model (load its "
            "state_dict).")
    planner = _Planner(model)
    if type(model) is nn.TransformerEncoderLayer:
        why = planner.encoder_reason(model)
        planner.unprotected("", model, (
            f"{why}; " if why else "the model itself: protect() swaps the modules inside the "
            "model it is given, not that model (put the layer in an nn.Sequential to protect "
            "it whole); ") + "PyTorch computes its attention, norms and residual adds (its "
            "nn.Linear layers are protected one by one)")
    planner.walk(model, "")
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    entries = sorted(planner.entries, key=lambda e: order.get(e.name, len(order)))
    report = ProtectionReport(type(model).__name__, entries)
    if not planner.groups:
        raise ValueError(
            f"safemon.torch: model {type(model).__name__} has no nn.Linear or nn.Conv2d layer "
            "that safemon can protect. Fix: safemon protects float32 nn.Linear layers, "
            "nn.Conv2d layers with groups=1 and zero padding, and nn.TransformerEncoderLayer "
            "(batch_first, relu or GELU); products written in forward() or inside a "
            "bare nn.MultiheadAttention cannot be swapped (use nn.Linear modules for the "
            "projections).")
    return planner.groups, report


def _protected(group: Group, client: Client, timeout: float) -> nn.Module:
    name, module, act = group.members[0]
    if isinstance(module, nn.Conv2d):
        return ProtectedConv2d(module, client, name=name, activation=act, timeout=timeout)
    if len(group.members) == 1 and isinstance(module, nn.TransformerEncoderLayer):
        return ProtectedEncoderLayer(module, client, name=name, timeout=timeout)
    if len(group.members) == 1:
        assert isinstance(module, nn.Linear)
        return ProtectedLinear(module, client, name=name, activation=act, timeout=timeout)
    return ProtectedSequence(group.members, client, timeout=timeout)


def _places(group: Group, client: Client, timeout: float) -> list[tuple[str, nn.Module]]:
    """(qualified name, module to put there) for every place of `group`: the protected
    module at its first member's place, a `FoldedLinear` / `FoldedEncoderLayer` /
    `nn.Identity` at each later member's (`ProtectedSequence.places`), `nn.Identity` at each
    folded activation's."""
    protected = _protected(group, client, timeout)
    places: list[tuple[str, nn.Module]] = [(group.members[0][0], protected)]
    if isinstance(protected, ProtectedSequence):
        places += list(protected.places)
    return places + [(name, nn.Identity()) for name, _ in group.folded]


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
