"""The runtime benchmark's captured-pass baselines (`safemon.bench.runtime`) on a GPU: they
time clean passes, back to back and side by side; a weight that fails its ECC check stops
them before anything is captured (the pass run by hand raises), and a weight spoilt after
the capture stops the timed loop."""

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
def test_side_by_side_passes_run_on_streams_of_the_priorities_given() -> None:
    """The quorum-first priorities inline channels get: every side-by-side round still
    checks all three passes' digests, and the time until the first two were done is
    recorded for each timed round and is never later than the round's end."""
    import cupy as cp

    from safemon.bench.runtime import _three_captured_passes
    from safemon.channels.stream_priority import device_priority_range
    from safemon.config import VariantConfig

    least, greatest = device_priority_range()
    made: list[Any] = []
    real_stream = cp.cuda.Stream

    def recording_stream(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs.get("priority"))
        return real_stream(*args, **kwargs)

    layers, kept, x = _model(cp, ecc=True)
    two: list[float] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cp.cuda, "Stream", recording_stream)
        _serial, side_by_side = _three_captured_passes(
            cp, layers, kept, x, VariantConfig(), n=4, warmup=2,
            priorities=[greatest, greatest, least], two_done=two)
    assert made[:3] == [greatest, greatest, least]
    assert len(two) == len(side_by_side) == 4
    assert all(0 < t <= s for t, s in zip(two, side_by_side, strict=True))


@pytest.mark.gpu
def test_a_weight_that_fails_its_ecc_check_is_not_timed() -> None:
    """Two flipped bits in one word of a protected weight: uncorrectable, so the first pass,
    run by hand before any capture, raises and nothing is timed."""
    import cupy as cp

    from safemon.bench.runtime import _three_captured_passes
    from safemon.config import VariantConfig

    layers, kept, x = _model(cp, ecc=True)
    data, _check = kept[layers[0].weight_id].storage
    data.view(cp.uint32).ravel()[7] ^= cp.uint32(0b101)
    with pytest.raises(SafemonError):
        _three_captured_passes(cp, layers, kept, x, VariantConfig(), n=2, warmup=1)


@pytest.mark.gpu
def test_a_weight_corrupted_after_capture_stops_the_timed_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One flipped bit in a protected weight after the graphs were captured: the replay's ECC
    check reports it, the pass comes back recomputed instead of clean, and the timed loop
    raises instead of recording a time."""
    import cupy as cp

    from safemon.bench.runtime import _three_captured_passes
    from safemon.channels.step_graphs import StepGraphs
    from safemon.config import VariantConfig

    layers, kept, x = _model(cp, ecc=True)
    data, _check = kept[layers[-1].weight_id].storage
    captured = []
    real_capture = StepGraphs.capture

    def capture_then_flip(self: StepGraphs, *args: Any, **kwargs: Any) -> Any:
        step = real_capture(self, *args, **kwargs)
        captured.append(step)
        if len(captured) == 3:  # every graph is captured: spoil the weight they all read
            data.view(cp.uint32).ravel()[11] ^= cp.uint32(1 << 4)
        return step

    monkeypatch.setattr(StepGraphs, "capture", capture_then_flip)
    with pytest.raises(SafemonError, match="captured baseline pass"):
        _three_captured_passes(cp, layers, kept, x, VariantConfig(), n=2, warmup=1)
    assert len(captured) == 3
