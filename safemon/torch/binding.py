"""A chain of safemon steps registered with a safemon `Client`, called with torch tensors.

`ChainBinding(client, steps, timeout=...)` registers each dense layer's weight ((K, N)
float32, resident in every channel) and the chain as one whole-model request
(`Client.register_model`), once. The steps are dense layers (`LayerSpec`) and, between
them, the other steps of `safemon.models.ops` (layer norm, attention, residuals, reshapes:
what a protected `nn.TransformerEncoderLayer` or a folded `nn.Flatten` is). Calling it with
an (M, K) float32 tensor sends one request and returns the released (M, N) output as a
tensor on the input's device:

- a CPU tensor goes as a NumPy array sharing its memory (`Tensor.numpy()`);
- a CUDA tensor goes as a CuPy array over the same device memory (DLPack, no copy here)
  and the CuPy result comes back the same way (`torch.from_dlpack`). Without CuPy the
  tensor itself is passed: the client accepts torch tensors too.

The output is what the voter released, computed by the channels (product, then bias add,
then activation, each in float32; the other steps as `safemon.models.ops` defines them): it
equals `safemon.models.reference_forward` on the same input bit for bit, not PyTorch's own
`F.linear` (which may round differently).

A chain of one layer with no bias and the identity activation is a bare product: it goes
as a product request (`Client.matmul` on the registered weight), which the channels compute
on x in place, instead of a whole-model request, which copies x in first and digests every
layer. Same bits, same vote on C and ES digests; measured on the H100 a model request of
one 64×4096×4096 layer took 1.02-1.10× a product request (evidence/h100-2026-12-06-stop53/,
calls 7 and 9).

Errors from the client (`SafeStateError`, `VoteTimeoutError`, `DisagreementError`,
`InvalidInputError`) pass through unchanged: no output is ever made up. `BusyError` (the
daemon's admission control: "retry later", not a fault) is retried with a short back-off
until the call's timeout has passed, then raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from safemon.client import Client
from safemon.errors import BusyError
from safemon.models import Activation, Layer
from safemon.models.layers import Step, validate_layers
from safemon.models.ops import AddResidual, Attention, LayerNorm, Reshape, SaveResidual
from safemon.torch.checks import check_weight_dtype

__all__ = ["ChainBinding", "ChainStep", "LayerSpec", "linear_spec"]

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class LayerSpec:
    """One dense layer as safemon computes it: act(h · weight + bias).

    Attributes:
        name: the layer's qualified name in the model (for messages and the printout).
        weight: (K, N) float32, C-contiguous (a Linear's weight transposed).
        bias: (N,) float32 or None.
        activation: applied by the channels after the bias.
    """

    name: str
    weight: F32
    bias: F32 | None
    activation: Activation


#: One step of a chain as the torch adapter builds it: a dense layer, whose weight the
#: binding registers, or one of the steps of `safemon.models.ops`, sent as it is.
ChainStep = LayerSpec | LayerNorm | Attention | Reshape | SaveResidual | AddResidual


def to_numpy(t: torch.Tensor) -> F32:
    """A detached, contiguous float32 host copy of `t` as NumPy."""
    out: F32 = np.ascontiguousarray(t.detach().to("cpu", torch.float32).numpy())
    return out


def linear_spec(name: str, linear: nn.Linear, activation: Activation | str) -> LayerSpec:
    """The safemon form of `linear`: weight transposed to (in, out), bias as NumPy.

    Raises:
        TypeError: the weight is not float32 (`checks.check_weight_dtype`).
    """
    check_weight_dtype(name, linear.weight)
    bias = None if linear.bias is None else to_numpy(linear.bias)
    return LayerSpec(name, to_numpy(linear.weight).T.copy(), bias, Activation(activation))


def _to_client(x: torch.Tensor) -> tuple[Any, Callable[[Any], torch.Tensor]]:
    """x as an array the client takes, and how to turn its result back into a tensor."""
    if x.device.type == "cpu":
        return x.numpy(), lambda out: torch.from_numpy(out)
    try:
        import cupy
    except ImportError:
        return x, lambda out: out
    with cupy.cuda.Device(x.device.index):
        arr = cupy.from_dlpack(x)
    from torch.utils.dlpack import from_dlpack

    return arr, lambda out: from_dlpack(out)


class ChainBinding:
    """`steps` registered with `client` as one model; see the module docstring.

    Args:
        client: a connected `safemon.Client` (one per thread: it is not thread-safe).
        steps: the chain in order: `LayerSpec`s and `safemon.models.ops` steps whose widths
            chain (`safemon.models.layers.validate_layers`); a chain of `LayerSpec`s only
            is the dense chain it always was.
        timeout: seconds per request (the client's deadline for one vote).
        registered: weight ids by `id(spec)` of `LayerSpec`s already registered with
            `client` (filled here): bindings of one module for several input shapes share
            their weights instead of sending them again.

    Raises:
        InvalidInputError: a weight, bias or chain the client refuses (non-finite values,
            shapes that do not chain). DaemonUnreachableError: registration not answered
            in time.
    """

    def __init__(self, client: Client, steps: Sequence[ChainStep], *, timeout: float,
                 registered: MutableMapping[int, str] | None = None) -> None:
        self.client = client
        self.chain = tuple(steps)
        self.specs = tuple(s for s in self.chain if isinstance(s, LayerSpec))
        self.timeout = timeout
        ids = {} if registered is None else registered
        for s in self.specs:
            if id(s) not in ids:
                ids[id(s)] = client.register_weight(s.weight)
        self.steps: tuple[Step, ...] = tuple(
            Layer(ids[id(s)], s.bias, s.activation) if isinstance(s, LayerSpec) else s
            for s in self.chain)
        #: the product layers among `steps`, in order (one per `specs` entry)
        self.layers = tuple(s for s in self.steps if isinstance(s, Layer))
        shape = validate_layers(self.steps, {ly.weight_id: spec.weight.shape
                                             for ly, spec in zip(self.layers, self.specs,
                                                                 strict=True)})
        self.model_id = client.register_model(list(self.steps))
        self.in_features, self.out_features = shape.k_in, shape.n_out
        #: the weight id when the chain is one bare product (sent with `Client.matmul`)
        self.product_weight_id: str | None = (
            self.layers[0].weight_id if len(self.chain) == 1 and len(self.specs) == 1
            and self.specs[0].bias is None
            and self.specs[0].activation is Activation.IDENTITY else None)

    @property
    def weights(self) -> list[F32]:
        """The (K, N) weights in layer order (what `reference_forward` takes)."""
        return [s.weight for s in self.specs]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The released output for x ((M, K) float32, contiguous), on x's device."""
        arr, back = _to_client(x)
        end = time.monotonic() + self.timeout
        pause = 0.002
        while True:
            remaining = end - time.monotonic()
            try:
                if self.product_weight_id is not None:
                    return back(self.client.matmul(arr, self.product_weight_id,
                                                   timeout=max(remaining, 1e-3)))
                return back(self.client.run(self.model_id, arr, timeout=max(remaining, 1e-3)))
            except BusyError:
                if remaining <= pause:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
