"""Layers and models: what `Client.register_model` takes, how it is checked, named and
carried on the wire.

A model is an ordered, non-empty sequence of *steps*: product `Layer`s and the steps of
`safemon.models.ops` (layer norm, attention, residuals, reshapes). Layer i computes
h_{i+1} = act_i(h_i · W_i + b_i) in float32 (product, then bias add, then activation), with
W_i a registered weight (K_i, N_i) and b_i an optional (N_i,) float32 bias. The widths
chain when each step takes the columns the step before it outputs (`validate_layers`).

Wire form (docs/PROTOCOL.md, "Whole-model requests"): a uint8 frame holding the UTF-8 JSON
list of the steps (the *spec*: `{"weight_id": str, "activation": str, "bias": bool}` for a
layer, `{"kind": ..., ...}` for the other steps) and one float32 frame holding the
parameters: the biases of the layers that have one and each layer norm's weight then bias,
concatenated in step order. The model id is a content address over both, so the same steps
always get the same id (a model of layers only has the id it had before the other steps
existed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError, UnknownWeightError
from safemon.models.activations import Activation
from safemon.models.ops import (
    MAX_RESIDUALS,
    AddResidual,
    Attention,
    LayerNorm,
    Reshape,
    SaveResidual,
)

__all__ = ["MAX_LAYERS", "Layer", "ModelShape", "Step", "decode_model", "decode_steps",
           "encode_model",
           "model_id_of", "step_params", "validate_layers", "weight_ids"]

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


#: One step of a model: a product layer or one of the steps of `safemon.models.ops`.
Step = Layer | LayerNorm | Attention | Reshape | SaveResidual | AddResidual
_STEP_TYPES = (Layer, LayerNorm, Attention, Reshape, SaveResidual, AddResidual)


def weight_ids(steps: Sequence[Step]) -> list[str]:
    """The weight ids of the product layers among `steps`, in order (repeats kept)."""
    return [s.weight_id for s in steps if isinstance(s, Layer)]


@dataclass(frozen=True)
class ModelShape:
    """What a model's steps do to the activation's shape, found by `validate_layers`.

    Rows are tracked as a fraction of the input's M (only `Reshape` changes them).

    Attributes:
        k_in: columns of the input x.
        n_out: columns of the output (whose rows are the input's).
        products: per product layer, (row fraction, K, N).
        attentions: per attention step, (row fraction, tokens, d, score products) with d its
            output width and `Attention.score_products` for its heads.
        row_checks: (numerator, denominator, multiple, step index, what): M·num/den rows
            must be a whole multiple of `multiple` for the step at that index.
    """

    k_in: int
    n_out: int
    products: tuple[tuple[Fraction, int, int], ...]
    attentions: tuple[tuple[Fraction, int, int, int], ...] = ()
    row_checks: tuple[tuple[int, int, int, int, str], ...] = ()

    @property
    def max_dim(self) -> int:
        """The largest K or N of any product (for `limits.max_dim`)."""
        return max(max(k, n) for _, k, n in self.products)

    def check_rows(self, m: int) -> None:
        """Raise InvalidInputError (naming the step) unless an input of `m` rows gives every
        step whole rows: a `Reshape` a whole number of rows of its width, an `Attention`
        whole sequences."""
        for num, den, multiple, i, what in self.row_checks:
            if (m * num) % (den * multiple):
                rows = Fraction(m * num, den)  # str: exact, never a float that overflows
                raise InvalidInputError(f"step {i}: an input of {m} rows gives {what} "
                                        f"{rows} rows, not a whole multiple of {multiple}")

    def cost_s(self, item_cost_s: Callable[[int, int, int], float], m: int) -> float:
        """Seconds a healthy channel may spend on the whole forward pass of M rows: the sum
        of the products' item costs, `item_cost_s(rows, K, N)`, and, per attention step,
        the item costs of its score products (rows × tokens × d each:
        `Attention.score_products`, 2 for a sequence the kernel keeps the scores of)."""
        def rows(f: Fraction) -> int:
            return max(1, int(m * f))
        return (sum(item_cost_s(rows(f), k, n) for f, k, n in self.products)
                + sum(p * item_cost_s(rows(f), d, t) for f, t, d, p in self.attentions))


def validate_layers(layers: Sequence[Step], weight_shapes: Mapping[str, tuple[int, ...]]
                    ) -> ModelShape:
    """Check that the steps `layers` form a model over the weights whose shapes are given;
    returns its `ModelShape`.

    The input's width is the input width of the first product, layer norm or attention;
    only `SaveResidual` may come before it.

    Raises:
        InvalidInputError: no steps, too many, a non-step, no product, an unregistered
            weight, a bias or layer-norm width that is not its input's, widths that do not
            chain (N_i ≠ K_{i+1}), an attention whose input is not 3·heads·dh wide, a residual
            added with no saved one, of another shape, or saved ones left over, more than
            MAX_RESIDUALS saved at once, a reshape before the input width is known, or an
            output whose rows differ from the input's; the message names the step index.
    """
    if isinstance(layers, _STEP_TYPES) or not isinstance(layers, Sequence) or not layers:
        raise InvalidInputError("a model is a non-empty sequence of Layer (and the steps of "
                                "safemon.models.ops)")
    if len(layers) > MAX_LAYERS:
        raise InvalidInputError(f"a model has at most {MAX_LAYERS} steps, got {len(layers)}")
    cols: int | None = None
    k_in: int | None = None
    ratio = Fraction(1)
    stack: list[tuple[int | None, Fraction]] = []
    products: list[tuple[Fraction, int, int]] = []
    attentions: list[tuple[Fraction, int, int, int]] = []
    checks: list[tuple[int, int, int, int, str]] = []

    def takes(i: int, width: int, what: str) -> None:
        nonlocal cols, k_in
        if cols is None:
            cols = k_in = width
            for j, (c, f) in enumerate(stack):
                stack[j] = (width if c is None else c, f)
        elif cols != width:
            raise InvalidInputError(f"step {i}: {what} takes {width} columns but step {i - 1} "
                                    f"outputs {cols}")

    for i, step in enumerate(layers):
        if not isinstance(step, _STEP_TYPES):
            raise InvalidInputError(f"step {i}: not a Layer or a model step "
                                    f"({type(step).__name__})")
        if isinstance(step, Layer):
            shape = weight_shapes.get(step.weight_id)
            if shape is None:
                raise UnknownWeightError(
                    f"layer {i}: weight {step.weight_id[:80]!r} is not registered")
            k, n = int(shape[0]), int(shape[1])
            if cols is not None and k != cols:
                raise InvalidInputError(
                    f"layer {i}: weight is {k}x{n} but layer {i - 1} outputs {cols} columns")
            takes(i, k, "the layer")
            if step.bias is not None and step.bias.shape[0] != n:
                raise InvalidInputError(
                    f"layer {i}: bias has {step.bias.shape[0]} elements, the weight has N={n}")
            products.append((ratio, k, n))
            cols = n
        elif isinstance(step, LayerNorm):
            takes(i, step.width, f"layer norm of width {step.width}")
        elif isinstance(step, Attention):
            if cols is None:
                raise InvalidInputError(f"step {i}: an attention step needs a product or a layer "
                                        "norm before it (its input width is unknown)")
            try:
                dh = step.head_dim(cols)
            except InvalidInputError as exc:
                raise InvalidInputError(f"step {i}: {exc}") from None
            checks.append((ratio.numerator, ratio.denominator, step.tokens, i,
                           "the attention"))
            attentions.append((ratio, step.tokens, step.heads * dh, step.score_products(dh)))
            cols = step.heads * dh
        elif isinstance(step, Reshape):
            if cols is None:
                raise InvalidInputError(f"step {i}: a reshape needs a product or a layer norm "
                                        "before it (its input width is unknown)")
            ratio = ratio * cols / step.width
            checks.append((ratio.numerator, ratio.denominator, 1, i, "the reshape"))
            cols = step.width
        elif isinstance(step, SaveResidual):
            if len(stack) >= MAX_RESIDUALS:
                raise InvalidInputError(f"step {i}: more than {MAX_RESIDUALS} residuals saved "
                                        "at once")
            stack.append((cols, ratio))
        else:  # AddResidual
            if not stack:
                raise InvalidInputError(f"step {i}: a residual added with none saved")
            saved = stack.pop()
            if saved != (cols, ratio):
                raise InvalidInputError(f"step {i}: the residual saved has another shape "
                                        f"({saved[0]} columns) than the activation ({cols})")
    if stack:
        raise InvalidInputError(f"{len(stack)} residual(s) saved and never added")
    if not products:
        raise InvalidInputError("a model needs at least one product layer")
    if ratio != 1:
        raise InvalidInputError(f"the model's output has {ratio} times the input's rows; "
                                "reshape back so that each input row gives one output row")
    assert k_in is not None and cols is not None
    return ModelShape(k_in, cols, tuple(products), tuple(attentions), tuple(checks))


def step_params(step: Step) -> list[F32]:
    """The float32 arrays `step` carries in the parameter ("biases") frame, in order (a
    layer's bias; a layer norm's weight then bias): also what a CuPy pass uploads."""
    if isinstance(step, Layer):
        return [] if step.bias is None else [step.bias]
    if isinstance(step, LayerNorm):
        return [step.weight, step.bias]
    return []


def _spec_entry(step: Step) -> dict[str, Any]:
    """The JSON object of `step` in the spec frame (a product layer's keeps its original
    form, so existing models keep their ids)."""
    if isinstance(step, Layer):
        return {"weight_id": step.weight_id, "activation": step.act.value,
                "bias": step.bias is not None}
    if isinstance(step, LayerNorm):
        return {"kind": "layer_norm", "width": step.width, "eps": float(step.eps).hex()}
    if isinstance(step, Attention):  # "causal" only when set: older models keep their ids
        entry: dict[str, Any] = {"kind": "attention", "heads": step.heads, "tokens": step.tokens}
        if step.causal:
            entry["causal"] = True
        return entry
    if isinstance(step, Reshape):
        return {"kind": "reshape", "width": step.width}
    if isinstance(step, SaveResidual):
        return {"kind": "save_residual"}
    return {"kind": "add_residual"}


def encode_model(layers: Sequence[Step]) -> tuple[npt.NDArray[np.uint8], F32]:
    """(spec, biases): the two frames that carry the steps `layers` (module docstring)."""
    spec = [_spec_entry(step) for step in layers]
    text = json.dumps(spec, separators=(",", ":"), sort_keys=True).encode()
    params = [a for step in layers for a in step_params(step)]
    flat = (np.concatenate(params).astype(np.float32, copy=False) if params
            else np.zeros((0,), dtype=np.float32))
    return np.frombuffer(text, dtype=np.uint8).copy(), np.ascontiguousarray(flat)


def _int_field(i: int, item: Mapping[str, Any], key: str) -> int:
    v = item.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v > 2**31:
        raise InvalidInputError(f"step {i}: {key} must be a positive int")
    return v


def _decode_op(i: int, item: Mapping[str, Any], take: Callable[[int], F32]) -> Step:
    """The non-product step of spec entry `item` (`take(n)` slices its parameters off the
    frame).

    Raises:
        InvalidInputError: an unknown kind or malformed fields.
    """
    kind = item.get("kind")
    keys = {"layer_norm": {"kind", "width", "eps"}, "attention": {"kind", "heads", "tokens"},
            "reshape": {"kind", "width"}, "save_residual": {"kind"},
            "add_residual": {"kind"}}.get(kind if isinstance(kind, str) else "")
    causal = kind == "attention" and item.get("causal") is True
    if keys is None or set(item) != (keys | {"causal"} if causal else keys):
        raise InvalidInputError(f"step {i}: malformed spec entry")
    try:
        if kind == "layer_norm":
            n = _int_field(i, item, "width")
            eps = float.fromhex(str(item["eps"]))
            return LayerNorm(take(n), take(n), eps)
        if kind == "attention":
            return Attention(_int_field(i, item, "heads"), _int_field(i, item, "tokens"),
                             causal)
        if kind == "reshape":
            return Reshape(_int_field(i, item, "width"))
    except (InvalidInputError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"step {i}: {exc}") from None
    return SaveResidual() if kind == "save_residual" else AddResidual()


def decode_model(spec: npt.NDArray[Any], biases: npt.NDArray[Any],
                 weight_shapes: Mapping[str, tuple[int, ...]]) -> list[Step]:
    """The steps carried by the frames `spec` and `biases` (`decode_steps` without the
    shape). Same errors."""
    return decode_steps(spec, biases, weight_shapes)[0]


def decode_steps(spec: npt.NDArray[Any], biases: npt.NDArray[Any],
                 weight_shapes: Mapping[str, tuple[int, ...]]
                 ) -> tuple[list[Step], ModelShape]:
    """The steps carried by the frames `spec` and `biases`, validated against
    `weight_shapes`, and their `ModelShape` (`validate_layers`).

    Each layer's bias is a read-only view of `biases` (of a contiguous copy when `biases`
    is not contiguous), not a copy of its own: the caller keeps `biases` unchanged while the
    layers live (the model registry and the channels pass frames that nobody writes). A
    layer norm copies its 2·N parameters.

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
    layers: list[Step] = []
    biases = np.ascontiguousarray(biases)
    offset = 0

    def take(n: int) -> F32:
        nonlocal offset
        if offset + n > biases.shape[0]:
            raise InvalidInputError("bias frame too short")
        view = biases[offset:offset + n]
        view.flags.writeable = False  # the view only: `biases` stays as the caller made it
        offset += n
        return view

    for i, item in enumerate(items):
        if isinstance(item, dict) and "kind" in item:
            layers.append(_decode_op(i, item, take))
            continue
        if (not isinstance(item, dict) or set(item) != {"weight_id", "activation", "bias"}
                or not isinstance(item["bias"], bool)):
            raise InvalidInputError(f"layer {i}: malformed spec entry")
        bias = None
        if item["bias"]:
            shape = weight_shapes.get(str(item["weight_id"]))
            if shape is None:  # as validate_layers says it: the client registers it again
                raise UnknownWeightError(
                    f"layer {i}: weight {str(item['weight_id'])[:80]!r} is not registered")
            try:
                bias = take(int(shape[1]))
            except InvalidInputError:
                raise InvalidInputError(f"layer {i}: bias frame too short") from None
        layers.append(_frame_layer(str(item["weight_id"]), bias, str(item["activation"])))
    if offset != biases.shape[0]:
        raise InvalidInputError(f"bias frame has {biases.shape[0] - offset} extra values")
    return layers, validate_layers(layers, weight_shapes)


def model_id_of(layers: Sequence[Step]) -> str:
    """Content address of a model: 24 hex characters of SHA-256 over its two wire frames."""
    spec, biases = encode_model(layers)
    h = hashlib.sha256(b"safemon-model-v1")
    h.update(spec.tobytes())
    h.update(biases.tobytes())
    return "m" + h.hexdigest()[:23]
