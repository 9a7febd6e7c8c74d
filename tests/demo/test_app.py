"""The digits app: accuracy, caching, determinism, input validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from safemon.demo.app import (
    CACHE_NAME,
    DigitsMLP,
    accuracy,
    batch_slices,
    cache_dir,
    load_or_train,
    numpy_matmul,
)
from safemon.errors import InvalidInputError


def test_plain_numpy_accuracy_above_90_percent(
    trained: tuple[DigitsMLP, np.ndarray, np.ndarray],
) -> None:
    """The MLP classifies the held-out digits with > 90 % accuracy in plain NumPy."""
    model, x, y = trained
    assert x.shape == (360, 64) and x.dtype == np.float32 and y.dtype == np.int64
    assert accuracy(model.predict(x), y) > 0.9


def test_cache_is_reused_and_identical(
    trained: tuple[DigitsMLP, np.ndarray, np.ndarray], model_cache: Path
) -> None:
    """A second load comes from the cache (no training) with bit-identical weights."""
    model, x, y = trained
    again, x2, y2, trained_now = load_or_train(model_cache)
    assert not trained_now
    for name in ("fc1", "fc2"):
        assert np.array_equal(
            model.weights[name].view(np.uint32), again.weights[name].view(np.uint32)
        )
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    files = list(model_cache.glob(f"{CACHE_NAME}-*.npz"))
    assert len(files) == 1
    with np.load(files[0], allow_pickle=False) as npz:
        assert sorted(npz.files) == ["fc1", "fc1_bias", "fc2", "fc2_bias", "x_test", "y_test"]


def test_corrupt_cache_is_replaced(
    tmp_path: Path, trained: tuple[DigitsMLP, np.ndarray, np.ndarray], model_cache: Path
) -> None:
    """A malformed cache file is not trusted: the model is trained again, identically."""
    model, _, _ = trained
    src = next(model_cache.glob(f"{CACHE_NAME}-*.npz"))
    (tmp_path / src.name).write_bytes(b"garbage")
    again, _, _, trained_now = load_or_train(tmp_path)
    assert trained_now
    assert np.array_equal(again.weights["fc1"], model.weights["fc1"])  # deterministic training


def test_forward_uses_the_given_matmul_for_every_layer(
    trained: tuple[DigitsMLP, np.ndarray, np.ndarray],
) -> None:
    """Each dense layer is exactly one call matmul(x, weight_id) with the mapped id."""
    model, x, _ = trained
    calls: list[tuple[tuple[int, ...], str]] = []
    plain = numpy_matmul(model)
    ids = {"fc1": "id-one", "fc2": "id-two"}
    back = {v: k for k, v in ids.items()}

    def spy(xb: np.ndarray, wid: str) -> np.ndarray:
        calls.append((xb.shape, wid))
        return plain(xb, back[wid])

    logits = model.forward(x[:5], spy, ids)
    assert calls == [((5, 64), "id-one"), ((5, 64), "id-two")]
    assert np.array_equal(logits, model.forward(x[:5]))


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((3, 64), dtype=np.float64),
        np.zeros((3, 63), dtype=np.float32),
        np.zeros((0, 64), dtype=np.float32),
        np.full((2, 64), np.nan, dtype=np.float32),
    ],
)
def test_bad_inputs_are_refused(
    trained: tuple[DigitsMLP, np.ndarray, np.ndarray], bad: np.ndarray
) -> None:
    """Wrong dtype, width, empty or non-finite input raises; nothing is converted."""
    model, _, _ = trained
    with pytest.raises(InvalidInputError):
        model.predict(bad)


def test_model_refuses_bad_weights() -> None:
    """Weights or biases of the wrong shape or dtype, or missing, are refused at construction."""
    w = {"fc1": np.zeros((64, 64), np.float32), "fc2": np.zeros((64, 10), np.float32)}
    b = {"fc1": np.zeros(64, np.float32), "fc2": np.zeros(10, np.float32)}
    DigitsMLP(w, b)
    with pytest.raises(InvalidInputError):
        DigitsMLP({**w, "fc1": np.zeros((65, 64), np.float32)}, b)
    with pytest.raises(InvalidInputError):
        DigitsMLP({**w, "fc2": np.zeros((64, 10), np.float64)}, b)
    with pytest.raises(InvalidInputError):
        DigitsMLP(w, {"fc1": b["fc1"]})
    with pytest.raises(InvalidInputError):
        DigitsMLP(w, {**b, "fc2": np.full(10, np.inf, np.float32)})


def test_forward_with_the_kernel_is_the_whole_model_reference_bit_for_bit(
    trained: tuple[DigitsMLP, np.ndarray, np.ndarray],
) -> None:
    """`forward` with safemon's kernel per layer equals `reference_forward` of
    `model.layers()`, which is what a whole-model request releases: the demo's clean run and
    its protected run compute the same thing."""
    from safemon.config import VariantConfig
    from safemon.demo.faulty import kernel_matmul
    from safemon.models import Activation, reference_forward

    model, x, _ = trained
    vc = VariantConfig()
    per_layer = model.forward(x[:40], kernel_matmul(model, vc.to_variant))
    whole = reference_forward([model.weights["fc1"], model.weights["fc2"]], model.layers(),
                              x[:40], variant=vc)
    assert np.array_equal(per_layer.view(np.uint32), whole.view(np.uint32))
    assert [ly.activation for ly in model.layers()] == [Activation.RELU, Activation.IDENTITY]
    assert [ly.weight_id for ly in model.layers({"fc1": "a", "fc2": "b"})] == ["a", "b"]


def test_helpers() -> None:
    """batch_slices covers the range; accuracy counts -1 as wrong; the cache dir follows XDG."""
    sl = batch_slices(10, 4)
    assert [(s.start, s.stop) for s in sl] == [(0, 4), (4, 8), (8, 10)]
    assert accuracy(np.array([1, -1, 2]), np.array([1, 1, 2])) == pytest.approx(2 / 3)
    assert cache_dir({"XDG_CACHE_HOME": "/x/y"}) == Path("/x/y/safemon")
    assert cache_dir({"XDG_CACHE_HOME": "relative"}) == Path.home() / ".cache" / "safemon"
    with pytest.raises(InvalidInputError):
        batch_slices(0, 4)
