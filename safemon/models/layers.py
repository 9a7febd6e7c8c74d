"""Layers and models: what `Client.register_model` takes, how it is checked, named and
carried on the wire.

A model is an ordered, non-empty sequence of `Layer`s. Layer i computes
h_{i+1} = act_i(h_i · W_i + b_i) in float32 (product, then bias add, then activation), with
W_i a registered weight (K_i, N_i) and b_i an optional (N_i,) float32 bias. The shapes chain
when N_i = K_{i+1}.

Wire form (docs/PROTOCOL.md, "Whole-model requests"): a uint8 frame holding the UTF-8 JSON
list `[{"weight_id": str, "activation": str, "bias": bool}, ...]` (the *spec*) and one
float32 frame holding the biases of the layers that have one, concatenated in layer order.
The model id is a content address over both, so the same layers always get the same id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError, UnknownWeightError
from safemon.models.activations import Activation

__all__ = ["MAX_LAYERS", "Layer", "decode_model", "encode_model", "model_id_of",
           "validate_layers"]

F32 = npt.NDArray[np.float32]

#: The most layers one model may have (bounds the spec frame and the per-layer digests).
MAX_LAYERS = 256


@dataclass(frozen=True)
class Layer:
    """One layer: the registered weight `weight_id` ((K, N) float32), an optional bias
    ((N,) float32, finite; copied and made read-only; the layers `decode_model` returns
    view their bias frame instead) and an activation.

    Raises:
        InvalidInputError: a bias that is not a finite 1-D float32 array, an unknown
            activation, or an empty weight id.
    """

    weight_id: str
    bias: F32 | None = field(default=None, compare=False)
    activation: Activation | str = Activation.IDENTITY

    def __post_init__(self) -> None:
        if not isinstance(self.weight_id, str) or not self.weight_id:
            raise InvalidInputError(f"weight_id must be a non-empty str, got {self.weight_id!r}")
        try:
            act = Activation(self.activation)
        except ValueError:
            names = ", ".join(a.value for a in Activation)
            raise InvalidInputError(
                f"unknown activation {self.activation!r} (one of {names})") from None
        object.__setattr__(self, "activation", act)
        if self.bias is not None:
            b = self.bias
            _check_bias(b)
            copy = np.array(b, dtype=np.float32, order="C", copy=True)
            copy.flags.writeable = False
            object.__setattr__(self, "bias", copy)

    @property
    def act(self) -> Activation:
        """The activation as the enum (the constructor normalises it)."""
        assert isinstance(self.activation, Activation)
        return self.activation


def _check_bias(b: object) -> None:
    """Raise InvalidInputError unless `b` is a non-empty, finite, 1-D float32 array."""
    if not isinstance(b, np.ndarray) or b.dtype != np.float32 or b.ndim != 1 or b.size == 0:
        raise InvalidInputError("bias must be a non-empty 1-D float32 numpy array, got "
                                f"{type(b).__name__} {getattr(b, 'dtype', '')} "
                                f"{getattr(b, 'shape', '')}")
    if not np.isfinite(b).all():
        raise InvalidInputError("bias contains NaN or infinity")


def _frame_layer(weight_id: str, bias: F32 | None, activation: str) -> Layer:
    """A Layer whose bias is `bias` itself, a read-only view of a bias frame, checked as
    `Layer` checks a bias but not copied: the frame is kept anyway (the model registry
    sends it with every request, a channel keys its decodings by it), and a copy per layer
    stored every bias twice.

    Raises:
        InvalidInputError: as `Layer`.
    """
    layer = Layer(weight_id, None, activation)
    if bias is not None:
        _check_bias(bias)
        assert not bias.flags.writeable
        object.__setattr__(layer, "bias", bias)
    return layer


def validate_layers(layers: Sequence[Layer], weight_shapes: Mapping[str, tuple[int, ...]]
                    ) -> None:
    """Check that `layers` form a model over the weights whose shapes are given.

    Raises:
        InvalidInputError: no layers, too many, a non-Layer, an unregistered weight, a bias
            whose length is not the weight's N, or N_i ≠ K_{i+1}; the message names the
            layer index.
    """
    if isinstance(layers, Layer) or not isinstance(layers, Sequence) or not layers:
        raise InvalidInputError("a model is a non-empty sequence of Layer")
    if len(layers) > MAX_LAYERS:
        raise InvalidInputError(f"a model has at most {MAX_LAYERS} layers, got {len(layers)}")
    prev_n: int | None = None
    for i, layer in enumerate(layers):
        if not isinstance(layer, Layer):
            raise InvalidInputError(f"layer {i}: not a Layer ({type(layer).__name__})")
        shape = weight_shapes.get(layer.weight_id)
        if shape is None:
            raise UnknownWeightError(f"layer {i}: weight {layer.weight_id[:80]!r} is not registered")
        k, n = int(shape[0]), int(shape[1])
        if prev_n is not None and k != prev_n:
            raise InvalidInputError(
                f"layer {i}: weight is {k}x{n} but layer {i - 1} outputs {prev_n} columns")
        if layer.bias is not None and layer.bias.shape[0] != n:
            raise InvalidInputError(
                f"layer {i}: bias has {layer.bias.shape[0]} elements, the weight has N={n}")
        prev_n = n


def encode_model(layers: Sequence[Layer]) -> tuple[npt.NDArray[np.uint8], F32]:
    """(spec, biases): the two frames that carry `layers` (see the module docstring)."""
    spec = [{"weight_id": ly.weight_id, "activation": ly.act.value, "bias": ly.bias is not None}
            for ly in layers]
    text = json.dumps(spec, separators=(",", ":"), sort_keys=True).encode()
    biases = [ly.bias for ly in layers if ly.bias is not None]
    flat = (np.concatenate(biases).astype(np.float32, copy=False) if biases
            else np.zeros((0,), dtype=np.float32))
    return np.frombuffer(text, dtype=np.uint8).copy(), np.ascontiguousarray(flat)


def decode_model(spec: npt.NDArray[Any], biases: npt.NDArray[Any],
                 weight_shapes: Mapping[str, tuple[int, ...]]) -> list[Layer]:
    """The layers carried by the frames `spec` and `biases`, validated against
    `weight_shapes` (`validate_layers`).

    Each layer's bias is a read-only view of `biases` (of a contiguous copy when `biases` is
    not contiguous), not a copy of its own: the caller keeps `biases` unchanged while the
    layers live (the model registry and the channels pass frames that nobody writes).

    Raises:
        UnknownWeightError: a layer names a weight not in `weight_shapes` (with or
            without a bias).
        InvalidInputError: malformed JSON or frames, or the checks of `validate_layers`.
    """
    if spec.dtype != np.uint8 or spec.ndim != 1 or biases.dtype != np.float32 or biases.ndim != 1:
        raise InvalidInputError("a model is carried as a uint8 spec frame and a float32 bias frame")
    try:
        items = json.loads(bytes(spec).decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"model spec is not JSON: {exc}") from None
    if not isinstance(items, list) or len(items) > MAX_LAYERS:
        raise InvalidInputError("model spec must be a list of at most "
                                f"{MAX_LAYERS} layer objects")
    layers: list[Layer] = []
    biases = np.ascontiguousarray(biases)
    offset = 0
    for i, item in enumerate(items):
        if (not isinstance(item, dict) or set(item) != {"weight_id", "activation", "bias"}
                or not isinstance(item["bias"], bool)):
            raise InvalidInputError(f"layer {i}: malformed spec entry")
        bias = None
        if item["bias"]:
            shape = weight_shapes.get(str(item["weight_id"]))
            if shape is None:  # as validate_layers says it: the client registers it again
                raise UnknownWeightError(
                    f"layer {i}: weight {str(item['weight_id'])[:80]!r} is not registered")
            n = int(shape[1])
            if offset + n > biases.shape[0]:
                raise InvalidInputError(f"layer {i}: bias frame too short")
            bias = biases[offset:offset + n]
            bias.flags.writeable = False  # the view only: `biases` stays as the caller made it
            offset += n
        layers.append(_frame_layer(str(item["weight_id"]), bias, str(item["activation"])))
    if offset != biases.shape[0]:
        raise InvalidInputError(f"bias frame has {biases.shape[0] - offset} extra values")
    validate_layers(layers, weight_shapes)
    return layers


def model_id_of(layers: Sequence[Layer]) -> str:
    """Content address of a model: 24 hex characters of SHA-256 over its two wire frames."""
    spec, biases = encode_model(layers)
    h = hashlib.sha256(b"safemon-model-v1")
    h.update(spec.tobytes())
    h.update(biases.tobytes())
    return "m" + h.hexdigest()[:23]
