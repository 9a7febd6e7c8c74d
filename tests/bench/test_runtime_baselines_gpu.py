"""The runtime benchmark's captured-pass baselines (`safemon.bench.runtime`) on a GPU: they
time clean passes, back to back and side by side, and a weight that fails its ECC check
stops them before anything is captured or timed (the pass run by hand raises)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from safemon.errors import SafemonError


def _model(cp: Any, ecc: bool) -> tuple[list[Any], dict[str, Any], Any]:
    from safemon.bench.runtime import ModelShape, _model_operands
    from safemon.ecc import ProtectedArray
    from safemon.kernels.backend import Backend

    layers, weights, x = _model_operands(ModelShape(batch=8, hidden=64, layers=2),
                                         np.random.default_rng(5))
    if ecc:
        kept = {k: ProtectedArray.from_host(w, name=k, backend=Backend.CUPY)
                for k, w in weights.items()}
    else:
        kept = {k: cp.asarray(w) for k, w in weights.items()}
    return layers, kept, cp.asarray(x)


@pytest.mark.gpu
@pytest.mark.parametrize("ecc", [True, False])
def test_captured_passes_are_timed_once_per_round(ecc: bool) -> None:
    import cupy as cp

    from safemon.bench.runtime import _three_captured_passes
    from safemon.config import VariantConfig

    layers, kept, x = _model(cp, ecc)
    serial, side_by_side = _three_captured_passes(cp, layers, kept, x, VariantConfig(), n=4,
                                                  warmup=2)
    assert len(serial) == len(side_by_side) == 4 and all(t > 0 for t in serial + side_by_side)


@pytest.mark.gpu
def test_a_weight_that_fails_its_ecc_check_is_not_timed() -> None:
    """Two flipped bits in one word of a protected weight: uncorrectable, so the first pass,
    run by hand before any capture, raises and nothing is timed. (The timed loop's own
    check, against a pass that goes wrong after capture, is not reached by this test.)"""
    import cupy as cp

    from safemon.bench.runtime import _three_captured_passes
    from safemon.config import VariantConfig

    layers, kept, x = _model(cp, ecc=True)
    data, _check = kept[layers[0].weight_id].storage
    data.view(cp.uint32).ravel()[7] ^= cp.uint32(0b101)
    with pytest.raises(SafemonError):
        _three_captured_passes(cp, layers, kept, x, VariantConfig(), n=2, warmup=1)
