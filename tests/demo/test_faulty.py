"""The fault schedule and the unprotected run under the channel fault model."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.demo.app import DigitsMLP, batch_slices
from safemon.demo.faulty import (
    DEMO_FAULTS,
    DeviceLost,
    FaultStep,
    UnprotectedDevice,
    kernel_matmul,
    order_for_flip,
    plan_faults,
    run_unprotected,
)
from safemon.errors import InvalidInputError
from safemon.kernels.catalog import make_variant

Trained = tuple[DigitsMLP, np.ndarray, np.ndarray]


def variant_for(m: int, n: int, k: int):  # type: ignore[no-untyped-def]
    return make_variant("ones", "I", "exact", "small")


def test_plan_puts_each_fault_in_its_own_stretch() -> None:
    """Four faults in order; stuck and hang are cleared later; invalid plans raise."""
    plan = plan_faults(15, flip_batch=2)
    assert tuple(s.kind for s in plan) == DEMO_FAULTS
    batches = [s.batch for s in plan]
    assert batches == sorted(batches) and len(set(batches)) == 4
    assert plan[1].clear_batch is not None and plan[1].clear_batch > plan[1].batch
    assert plan[3].clear_batch is not None and plan[3].clear_batch > plan[3].batch
    with pytest.raises(InvalidInputError):
        plan_faults(5)
    with pytest.raises(InvalidInputError):
        plan_faults(15, flip_batch=plan[1].batch)


def test_clean_kernel_matches_plain_numpy_predictions(trained: Trained) -> None:
    """safemon's exact-mode kernel and NumPy's matmul give the same predictions here."""
    model, x, _ = trained
    mm = kernel_matmul(model, variant_for)
    assert np.array_equal(model.predict(x[:60], mm), model.predict(x[:60]))


def test_flip_provably_changes_a_prediction(trained: Trained) -> None:
    """With the demo's sample order, the transient flip turns a right answer wrong, and
    only in its own batch (it is transient)."""
    model, x, y = trained
    batches = batch_slices(len(y), 24)
    b = 2
    order = order_for_flip(model, x, y, batches, b, variant_for)
    assert sorted(order.tolist()) == list(range(len(y)))
    assert not np.array_equal(order, np.arange(len(y)))  # a victim exists and was moved
    xo, yo = x[order], y[order]
    step = FaultStep("bitflip-c", b, None)
    clean = run_unprotected(model, xo, yo, batches, (), variant_for)
    faulty = run_unprotected(model, xo, yo, batches, (step,), variant_for)
    first = batches[b].start
    assert clean.predictions[first] == yo[first]
    assert faulty.predictions[first] != yo[first]
    diff = np.flatnonzero(clean.predictions != faulty.predictions)
    assert diff.tolist() == [first]


def test_device_crash_and_hang_semantics(trained: Trained) -> None:
    """A crash loses one call then the device is back; a hang loses every call until cleared."""
    model, x, _ = trained
    dev = UnprotectedDevice(model, variant_for)
    dev.inject("stuck")
    dev.inject("crash")
    with pytest.raises(DeviceLost):
        model.predict(x[:4], dev.matmul)
    clean = UnprotectedDevice(model, variant_for)
    # the crash restarted the device: the stuck fault is gone with the old process
    assert np.array_equal(model.predict(x[:4], dev.matmul), model.predict(x[:4], clean.matmul))
    dev.inject("hang")
    for _ in range(2):
        with pytest.raises(DeviceLost):
            model.predict(x[:4], dev.matmul)
    dev.clear()
    assert np.array_equal(model.predict(x[:4], dev.matmul), model.predict(x[:4], clean.matmul))
    with pytest.raises(InvalidInputError):
        dev.inject("cosmic-ray")


def test_unprotected_faulty_run_is_worse_than_clean(trained: Trained) -> None:
    """Under the demo schedule the app without safemon loses accuracy (and whole batches)."""
    model, x, y = trained
    batches = batch_slices(len(y), 24)
    plan = plan_faults(len(batches))
    order = order_for_flip(model, x, y, batches, plan[0].batch, variant_for)
    x, y = x[order], y[order]
    clean = run_unprotected(model, x, y, batches, (), variant_for)
    faulty = run_unprotected(model, x, y, batches, plan, variant_for)
    assert clean.lost_batches == ()
    assert faulty.accuracy < clean.accuracy
    crash, hang = plan[2], plan[3]
    assert crash.batch in faulty.lost_batches
    assert hang.clear_batch is not None
    assert set(range(hang.batch, hang.clear_batch)) <= set(faulty.lost_batches)
    # The stuck bit alone (no crash or hang) already destroys predictions in its stretch.
    stuck = plan[1]
    assert stuck.clear_batch is not None
    sl = slice(batches[stuck.batch].start, batches[stuck.clear_batch - 1].stop)
    assert np.mean(faulty.predictions[sl] == y[sl]) < np.mean(clean.predictions[sl] == y[sl]) - 0.3
