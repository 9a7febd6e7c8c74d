"""Runs of modules sent as ONE whole-model request: which modules a run can take
(`RunShape`, at plan time) and the safemon steps it is for an input shape (`walk`, at
call time).

A run's members, in model order, are dense layers (`LayerSpec`), encoder layers
(`EncoderSpec`) and reshapes (`Regroup`: `nn.Flatten` / `nn.Unflatten`). safemon computes
on 2-D activations, (rows, cols) with cols the last dimension of PyTorch's tensor: a dense
layer is row-wise, so it takes any leading dimensions; an encoder layer takes (N, T, d) or
(T, d), T consecutive rows a sequence. A reshape of a contiguous tensor moves no value: its
output is the same row-major buffer. Where it changes the last dimension it is a
`safemon.models.ops.Reshape` step (the buffer read with another width); where it does not,
it is nothing at all. A whole-model request must give each input row one output row
(`safemon.models.layers.validate_layers`): when the run's output has other rows than its
input (an `nn.Unflatten` that makes tokens of each sample, and nothing after it flattening
them again), a last `Reshape` regroups it to the input's rows, and PyTorch views the
output in the run's shape (again no arithmetic).

At plan time the input's shape is unknown. `RunShape` tracks what is known: the last
dimension always, and the shape of each sample (the dimensions after the first) once a
reshape needs it. A reshape after dense layers only supposes that the run's input is
(N, in_features), a batch of vectors: in an `nn.Sequential` a positive `Flatten`/`Unflatten`
dimension counts from that batch dimension, and the widths that chain after it were checked
for that shape. At call time `walk` computes the steps from the actual shape and refuses
(ValueError naming the layer) an input for which the run is not one request; with the
supposed shape it always is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from safemon.models.ops import MAX_TOKENS, LayerNorm, Reshape
from safemon.torch.binding import ChainStep, LayerSpec
from safemon.torch.encoder import EncoderSpec

__all__ = ["Member", "Regroup", "RunShape", "Walk", "walk"]


def _prod(xs: tuple[int, ...] | list[int]) -> int:
    """The product of `xs` (a plain loop: `torch.compile` traces it)."""
    out = 1
    for v in xs:
        out *= v
    return out


@dataclass(frozen=True)
class Regroup:
    """An `nn.Flatten` (`dims` = (start_dim, end_dim)) or `nn.Unflatten` (`dims` = (dim,),
    `sizes` its unflattened size) as a function of shapes."""

    name: str
    kind: str
    dims: tuple[int, ...]
    sizes: tuple[int, ...] = ()

    @staticmethod
    def of(name: str, module: nn.Module) -> Regroup | None:
        """The regroup `module` is; None for anything else (an nn.Unflatten of named
        dimensions, a subclass)."""
        if type(module) is nn.Flatten:
            return Regroup(name, "Flatten", (int(module.start_dim), int(module.end_dim)))
        if type(module) is nn.Unflatten:
            sizes = module.unflattened_size
            if (isinstance(module.dim, int)
                    and all(isinstance(s, int) and not isinstance(s, bool) for s in sizes)):
                return Regroup(name, "Unflatten", (module.dim,), tuple(int(s) for s in sizes))
        return None

    def apply(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The output shape of this module on an input of `shape` (PyTorch's rules).

        Raises:
            ValueError: a shape PyTorch would refuse too.
        """
        n = len(shape)
        if self.kind == "Flatten":
            if n == 0:
                return (1,)
            start, end = (d + n if d < 0 else d for d in self.dims)
            if not 0 <= start <= end < n:
                raise ValueError(f"nn.Flatten{self.dims} does not fit an input of shape {shape}")
            return (*shape[:start], _prod(shape[start:end + 1]), *shape[end + 1:])
        dim = self.dims[0] + n if self.dims[0] < 0 else self.dims[0]
        if not 0 <= dim < n:
            raise ValueError(f"nn.Unflatten({self.dims[0]}, {self.sizes}) does not fit an input "
                             f"of shape {shape}")
        sizes = list(self.sizes)
        known = _prod([s for s in sizes if s != -1])
        if sizes.count(-1) == 1 and known > 0 and shape[dim] % known == 0:
            sizes[sizes.index(-1)] = shape[dim] // known
        if min(sizes) < 0 or _prod(sizes) != shape[dim]:
            raise ValueError(f"nn.Unflatten({self.dims[0]}, {self.sizes}) does not fit an input "
                             f"of shape {shape}")
        return (*shape[:dim], *sizes, *shape[dim + 1:])


#: A member of a run.
Member = LayerSpec | EncoderSpec | Regroup


@dataclass(frozen=True)
class Walk:
    """What a run is for one input shape.

    Attributes:
        steps: the chain (`LayerSpec` for products); empty for an input without elements,
            or when not built.
        in_width: columns of the sent input (the input's last dimension).
        out_width: columns of the released output; its rows are the input's.
        out_shape: the run's output shape in PyTorch (the released output viewed so).
        signature: tells the chains of one run apart (equal steps, equal signature).
    """

    steps: tuple[ChainStep, ...]
    in_width: int
    out_width: int
    out_shape: tuple[int, ...]
    signature: tuple[object, ...] = field(default=(), compare=False)


def _signature(steps: tuple[ChainStep, ...]) -> tuple[object, ...]:
    """A key that tells the chains of one run apart: the steps, parameters by identity."""
    return tuple(id(s) if isinstance(s, LayerSpec | LayerNorm) else s for s in steps)


def _error(name: str, what: str) -> ValueError:
    return ValueError(f"safemon.torch: layer {name!r} {what}")


def walk(members: tuple[Member, ...], shape: tuple[int, ...], *, build: bool = True,
         causal: bool = False) -> Walk:
    """The steps of the run `members` for an input of `shape` (module docstring); without
    `build`, only the shapes and the checks (what a traced forward computes: ints only);
    with `causal`, the encoder layers' attentions are causal.

    Raises:
        ValueError: naming the member: a shape it does not take (as PyTorch would refuse
            it), an encoder layer's sequence longer than MAX_TOKENS, or an input for which
            the run's output cannot keep the input's rows.
    """
    if not shape:
        raise _error(_name(members[0]), "got a 0-dimensional input")
    empty = _prod(shape) == 0
    build = build and not empty
    steps: list[ChainStep] = []
    cur = shape
    for m in members:
        if isinstance(m, LayerSpec):
            k, n = int(m.weight.shape[0]), int(m.weight.shape[1])
            if cur[-1] != k:
                raise _error(m.name, f"expects inputs of shape (..., {k}), got {cur}.")
            if build:
                steps.append(m)
            cur = (*cur[:-1], n)
        elif isinstance(m, EncoderSpec):
            if len(cur) not in (2, 3) or cur[-1] != m.d:
                raise _error(m.name, f"expects (N, T, {m.d}) inputs (batch_first) or (T, "
                             f"{m.d}), got {cur}.")
            tokens = cur[-2]
            if tokens > MAX_TOKENS and not empty:
                raise _error(m.name, f"got sequences of {tokens} tokens; safemon's attention "
                             f"takes at most {MAX_TOKENS} per sequence. Fix: shorter sequences "
                             "(or do not protect this layer).")
            if build:
                steps += m.steps(tokens, causal)
        else:
            try:
                new = m.apply(cur)
            except ValueError as exc:
                raise _error(m.name, f"cannot reshape: {exc}") from None
            if new[-1:] != cur[-1:] and build:
                steps.append(Reshape(new[-1]))
            cur = new
    rows = _prod(shape[:-1])
    out_width = cur[-1]
    if not empty and _prod(cur[:-1]) != rows:
        total = _prod(cur)
        if total % rows:
            raise _error(_name(members[0]), f"and the modules after it in one request cannot "
                         f"keep the rows of an input of shape {shape} (output {cur}); the "
                         "request takes (N, in_features) inputs")
        out_width = total // rows
        if build:
            steps.append(Reshape(out_width))
    chain = tuple(steps)
    return Walk(chain, shape[-1], out_width, cur, _signature(chain))


def _name(m: Member) -> str:
    return m.name


@dataclass(frozen=True)
class RunShape:
    """What a run under construction knows of its activation's shape (module docstring).

    Attributes:
        cols: the last dimension.
        sample: the dimensions after the first (the batch), when known.
        dense_only: every member so far is a dense layer (so a reshape may suppose the
            run's input to be (N, in_features)).
    """

    cols: int
    sample: tuple[int, ...] | None
    dense_only: bool

    @staticmethod
    def start(module: nn.Module) -> RunShape:
        """The shape after the run's first member (an nn.Linear or a supported encoder
        layer)."""
        if isinstance(module, nn.Linear):
            return RunShape(int(module.out_features), None, True)
        assert isinstance(module, nn.TransformerEncoderLayer)
        return RunShape(int(module.self_attn.embed_dim), None, False)

    def take(self, module: nn.Module, regroup: Regroup | None = None) -> RunShape | None:
        """The shape after `module` joins the run, or None when it cannot (widths that do
        not chain, a reshape where the sample shape is unknown or that would touch the
        batch dimension, an encoder layer whose input is not (N, T, d))."""
        if isinstance(module, nn.Linear):
            if int(module.in_features) != self.cols:
                return None
            sample = None if self.sample is None else (*self.sample[:-1], int(module.out_features))
            return RunShape(int(module.out_features), sample, self.dense_only)
        if isinstance(module, nn.TransformerEncoderLayer):
            d = int(module.self_attn.embed_dim)
            if d != self.cols or (self.sample is not None and len(self.sample) != 2):
                return None
            return RunShape(d, self.sample, False)
        if regroup is None:
            return None
        sample = self.sample
        if sample is None:
            if not self.dense_only:
                return None
            sample = (self.cols,)
        outs = []
        for batch in (2, 3):
            try:
                outs.append(regroup.apply((batch, *sample)))
            except ValueError:
                return None
        if (len(outs[0]) < 2 or outs[0][0] != 2 or outs[1][0] != 3
                or outs[0][1:] != outs[1][1:]):
            return None
        return RunShape(outs[0][-1], outs[0][1:], self.dense_only)
