"""The demo inference app: a small MLP on scikit-learn's *digits*, every matmul pluggable.

The model is 64 → 64 (ReLU) → 10. Each dense layer is one matmul `x · W` followed by the
layer epilogue of `safemon.models` (bias add, then activation, in float32 exactly as a
channel computes it), so the whole forward pass is also a whole-model request:
`DigitsMLP.layers` gives the `safemon.models.Layer` list for `Client.register_model`, and
`Client.run` returns bit for bit what `forward` computes with safemon's kernel. Per layer,
`forward` calls `matmul(x, weight_id)`; the caller picks what computes it: plain NumPy,
safemon's kernel in-process, or `safemon.Client.matmul` (weights registered once,
`weight_ids` maps the layer names to the ids the daemon returned).

Training runs at first use with NumPy only (full-batch gradient descent with momentum,
deterministic seed, a few seconds) and is cached as a `.npz` (no pickle) in
`$XDG_CACHE_HOME/safemon` (default `~/.cache/safemon`), together with the test split, so
later runs do not even import scikit-learn.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError
from safemon.models import Activation, Layer, epilogue

__all__ = [
    "ACTIVATIONS",
    "CACHE_NAME",
    "LAYERS",
    "RECIPE",
    "DigitsMLP",
    "MatmulFn",
    "accuracy",
    "batch_slices",
    "cache_dir",
    "load_digits_split",
    "load_or_train",
    "numpy_matmul",
    "train",
]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
#: `matmul(x, weight_id) -> x · W` with x (B, K) float32 and the result (B, N) float32.
MatmulFn = Callable[[F32, str], F32]

LAYERS: Final[tuple[str, ...]] = ("fc1", "fc2")
N_IN: Final = 64
N_HIDDEN: Final = 64
N_CLASSES: Final = 10
#: Everything that determines the trained weights; its hash names the cache entry, so a
#: change here retrains instead of loading stale weights.
RECIPE: Final[dict[str, Any]] = {
    "version": 3,
    "seed": 0,
    "test_size": 360,
    "steps": 300,
    "lr": 0.5,
    "momentum": 0.9,
    "hidden": N_HIDDEN,
}
CACHE_NAME: Final = "digits_mlp"


def _augment(x: F32) -> F32:
    """[x, 1]: training folds the bias into an extra weight row (float64 math)."""
    out = np.empty((x.shape[0], x.shape[1] + 1), dtype=np.float32)
    out[:, :-1] = x
    out[:, -1] = 1.0
    return out


#: Each layer's activation (the output layer gives logits).
ACTIVATIONS: Final[Mapping[str, Activation]] = {"fc1": Activation.RELU,
                                                "fc2": Activation.IDENTITY}


@dataclass(frozen=True, eq=False)
class DigitsMLP:
    """The trained model.

    Attributes:
        weights: "fc1" (64, 64) and "fc2" (64, 10) float32, C-contiguous.
        biases: "fc1" (64,) and "fc2" (10,) float32.
    """

    weights: Mapping[str, F32]
    biases: Mapping[str, F32]

    def __post_init__(self) -> None:
        shapes = {"fc1": (N_IN, N_HIDDEN), "fc2": (N_HIDDEN, N_CLASSES)}
        for what, arrays, want in (("weights", self.weights, shapes),
                                   ("biases", self.biases,
                                    {n: (s[1],) for n, s in shapes.items()})):
            if set(arrays) != set(want):
                raise InvalidInputError(
                    f"{what} must be exactly {sorted(want)}, got {sorted(arrays)}"
                )
            for name, shape in want.items():
                a = arrays[name]
                if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != shape:
                    raise InvalidInputError(f"{what}[{name!r}] must be float32 {shape}")
                if not np.isfinite(a).all():
                    raise InvalidInputError(f"{what}[{name!r}] has non-finite values")

    def layers(self, weight_ids: Mapping[str, str] | None = None) -> tuple[Layer, ...]:
        """The model as `safemon.models` layers, for `Client.register_model`.

        Args:
            weight_ids: layer name → the id the daemon gave the weight; None = the layer
                names (what `safemon.models.reference_forward` needs).
        """
        ids = weight_ids if weight_ids is not None else {n: n for n in LAYERS}
        return tuple(Layer(ids[n], self.biases[n], ACTIVATIONS[n]) for n in LAYERS)

    def forward(
        self,
        x: F32,
        matmul: MatmulFn | None = None,
        weight_ids: Mapping[str, str] | None = None,
    ) -> F32:
        """Logits (B, 10) float32 for inputs x (B, 64) float32 (pixel values in [0, 1]).

        Args:
            matmul: computes each layer; None = plain NumPy (`numpy_matmul(self)`).
            weight_ids: layer name → the id `matmul` knows the weight by; None = the layer
                names themselves.

        Raises:
            InvalidInputError: x is not a finite (B, 64) float32 array with B ≥ 1.
            Whatever `matmul` raises (e.g. `SafeStateError` through the Client).
        """
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise InvalidInputError(
                f"x must be a float32 NumPy array, got {getattr(x, 'dtype', type(x))}"
            )
        if x.ndim != 2 or x.shape[1] != N_IN or x.shape[0] == 0:
            raise InvalidInputError(f"x must have shape (B, {N_IN}) with B >= 1, got {x.shape}")
        if not np.isfinite(x).all():
            raise InvalidInputError("x contains NaN or infinity")
        mm = matmul if matmul is not None else numpy_matmul(self)
        ids = weight_ids if weight_ids is not None else {n: n for n in LAYERS}
        # A faulty matmul may return inf/NaN: the arithmetic must not warn (tests turn
        # warnings into errors) but carry them on, as an unprotected app would.
        h = x
        with np.errstate(all="ignore"):
            for name in LAYERS:
                h = epilogue(mm(h, ids[name]), self.biases[name], ACTIVATIONS[name])
        return h

    def predict(
        self,
        x: F32,
        matmul: MatmulFn | None = None,
        weight_ids: Mapping[str, str] | None = None,
    ) -> I64:
        """Class labels (B,) int64: argmax of `forward` (the first index on ties or NaN)."""
        return np.asarray(np.argmax(self.forward(x, matmul, weight_ids), axis=1), dtype=np.int64)


def numpy_matmul(model: DigitsMLP) -> MatmulFn:
    """Plain in-process NumPy: `x @ W` (the app without safemon)."""

    def mm(x: F32, weight_id: str) -> F32:
        with np.errstate(all="ignore"):
            return np.asarray(x @ model.weights[weight_id], dtype=np.float32)

    return mm


def accuracy(pred: npt.NDArray[Any], labels: npt.NDArray[Any]) -> float:
    """Fraction of `pred == labels`; a prediction of -1 (no output) counts as wrong."""
    if pred.shape != labels.shape or labels.size == 0:
        raise InvalidInputError(
            f"pred {pred.shape} and labels {labels.shape} must match and be non-empty"
        )
    return float(np.mean(pred == labels))


def batch_slices(n: int, size: int) -> list[slice]:
    """Consecutive slices of `size` (the last may be shorter) covering range(n)."""
    if n <= 0 or size <= 0:
        raise InvalidInputError(f"need n > 0 and size > 0, got n={n}, size={size}")
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def load_digits_split(recipe: Mapping[str, Any] = RECIPE) -> tuple[F32, I64, F32, I64]:
    """(x_train, y_train, x_test, y_test): digits scaled to [0, 1], a seeded split.

    Imports scikit-learn (the data set ships with it; nothing is downloaded).
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (np.asarray(data.data, dtype=np.float64) / 16.0).astype(np.float32)
    y = np.asarray(data.target, dtype=np.int64)
    perm = np.random.default_rng(int(recipe["seed"])).permutation(len(y))
    test, tr = perm[: int(recipe["test_size"])], perm[int(recipe["test_size"]) :]
    return x[tr], y[tr], x[test], y[test]


def train(x: F32, y: I64, recipe: Mapping[str, Any] = RECIPE) -> DigitsMLP:
    """Full-batch gradient descent with momentum on softmax cross-entropy (float64 math).

    Deterministic: the same data and recipe give the same weights bit for bit.
    """
    rng = np.random.default_rng(int(recipe["seed"]) + 1)
    hidden = int(recipe["hidden"])
    xa = _augment(x).astype(np.float64)
    w1 = rng.standard_normal((N_IN + 1, hidden)) * np.sqrt(2.0 / N_IN)
    w2 = rng.standard_normal((hidden + 1, N_CLASSES)) * np.sqrt(1.0 / hidden)
    w1[-1], w2[-1] = 0.0, 0.0
    onehot = np.eye(N_CLASSES)[y]
    v1, v2 = np.zeros_like(w1), np.zeros_like(w2)
    lr, mom = float(recipe["lr"]), float(recipe["momentum"])
    ones = np.ones((len(xa), 1))
    for _ in range(int(recipe["steps"])):
        z1 = xa @ w1
        h = np.hstack([np.maximum(z1, 0.0), ones])
        z2 = h @ w2
        z2 -= z2.max(axis=1, keepdims=True)
        p = np.exp(z2)
        p /= p.sum(axis=1, keepdims=True)
        g2 = (p - onehot) / len(xa)
        gw2 = h.T @ g2
        gz1 = (g2 @ w2[:-1].T) * (z1 > 0)
        gw1 = xa.T @ gz1
        v1 = mom * v1 - lr * gw1
        v2 = mom * v2 - lr * gw2
        w1 += v1
        w2 += v2
    # Hidden units in a fixed order: first the one whose fc1 product (before the bias)
    # lies in (0, 1) for the most training samples. The demo's injected flip hits element
    # 0 of a batch's first product and flips exponent bit 30 of such a value, which makes
    # it about 2^128 times larger, and the ReLU passes it on (`channels.faults.flip_c`; a
    # negative value stays negative and is masked, one in [1, 2) gets bit 29 and becomes
    # tiny). A unit that is never in that range would mask the flip. A permutation of
    # hidden units leaves the model's function unchanged (up to summation order).
    prod = xa[:, :-1] @ w1[:-1]
    order = np.argsort(-np.mean((prod > 0) & (prod < 1), axis=0), kind="stable")
    w1, w2 = w1[:, order], np.vstack([w2[:-1][order], w2[-1:]])
    return _split({"fc1": w1, "fc2": w2})


def _split(augmented: Mapping[str, npt.NDArray[Any]]) -> DigitsMLP:
    """The model from weights with the bias as their last row."""
    return DigitsMLP(
        {n: np.ascontiguousarray(w[:-1], dtype=np.float32) for n, w in augmented.items()},
        {n: np.ascontiguousarray(w[-1], dtype=np.float32) for n, w in augmented.items()},
    )


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/safemon`, or `~/.cache/safemon` (a relative XDG value is ignored,
    as the XDG spec says)."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "safemon"


def _recipe_hash(recipe: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(dict(recipe), sort_keys=True).encode()).hexdigest()[:16]


def _load_cache(path: Path) -> tuple[DigitsMLP, F32, I64] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            model = DigitsMLP({n: npz[n] for n in LAYERS},
                              {n: npz[f"{n}_bias"] for n in LAYERS})
            x_test = np.ascontiguousarray(npz["x_test"])
            y_test = np.ascontiguousarray(npz["y_test"])
    except (OSError, KeyError, ValueError):  # InvalidInputError is a ValueError
        return None
    if (
        x_test.dtype != np.float32
        or x_test.ndim != 2
        or x_test.shape[1] != N_IN
        or y_test.dtype != np.int64
        or y_test.shape != (x_test.shape[0],)
        or not np.isfinite(x_test).all()
    ):
        return None
    return model, x_test, y_test


def load_or_train(
    cache: Path | None = None, recipe: Mapping[str, Any] = RECIPE
) -> tuple[DigitsMLP, F32, I64, bool]:
    """The trained model and the test split, from the cache or trained now.

    Args:
        cache: the cache directory; None = `cache_dir()`.

    Returns:
        (model, x_test (n, 64) float32, y_test (n,) int64, trained_now).

    A cache file that is unreadable or malformed is replaced by a fresh training run (it
    is a cache: the recipe, not the file, defines the model).
    """
    directory = cache_dir() if cache is None else cache
    path = directory / f"{CACHE_NAME}-{_recipe_hash(recipe)}.npz"
    cached = _load_cache(path) if path.is_file() else None
    if cached is not None:
        return (*cached, False)
    x_tr, y_tr, x_te, y_te = load_digits_split(recipe)
    model = train(x_tr, y_tr, recipe)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}.npz")
    np.savez(tmp, fc1=model.weights["fc1"], fc2=model.weights["fc2"], fc1_bias=model.biases["fc1"],
             fc2_bias=model.biases["fc2"], x_test=x_te, y_test=y_te)
    os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file
    return model, x_te, y_te, True
