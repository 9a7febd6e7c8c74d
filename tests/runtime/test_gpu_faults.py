"""GPU-wide fault injection (`safemon.channels.gpu_faults`) on the CPU: a real daemon with
NumPy stream channels, each given a faked hardware unit, so that faulting a "GPU" faults
every channel mapped to it at once. The reactions are the policy's: 2oo3 masks one unit
and goes SAFE on a second; 1oo3D isolates the faulty unit's channel, degrades to 1oo2D and
releases nothing wrong; 2oo3 with two channels on one unit releases a wrong product when
that unit fails (its effective HFT is 0). The same sequences run on real GPUs in
tests/runtime/test_multigpu.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from safemon.channels.gpu_faults import (
    channels_on,
    hardware_from_status,
    inject_on_unit,
    run_fault_sequence,
)
from safemon.errors import InvalidInputError
from safemon.hft import assess
from safemon.states import Policy

from .helpers import make_config, operands, reference, system

#: Long DTI (no periodic self-test consumes a transient flip); isolation at once, since an
#: injected fault would not survive a restart while a real GPU fault would.
PERMANENT: dict[str, Any] = {
    "timing": {"request_deadline_s": 5.0, "dti_s": 120.0, "dti_jitter": 0.0,
               "selftest_deadline_s": 3.0, "heartbeat_timeout_s": 5.0, "ftti_s": 123.0,
               "scrub_interval_s": None},
    "actions": {"restart": False},
}


def _run(tmp_path: Path, policy: str, units: dict[str, str], order: list[str],
         kind: str = "stuck") -> list[Any]:
    cfg = make_config(tmp_path, policy, extra=PERMANENT, injection=True)
    x, w = operands(21)
    ref = reference(x, w, cfg)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        return run_fault_sequence(client, units, [(u, kind) for u in order], x, wid, ref,
                                  quiet_s=0.5)


def test_2oo3_masks_one_gpu_and_goes_safe_on_a_second(tmp_path: Path) -> None:
    steps = _run(tmp_path, "2oo3", {"c0": "gA", "c1": "gB", "c2": "gC"}, ["gA", "gB"])
    first, second = steps
    assert (first.outcome, first.after) == ("released-correct", ("released-correct",))
    assert (first.mode, first.policy, first.voting) == ("DEGRADED", "2oo2", ("c1", "c2"))
    assert second.outcome.startswith("withheld") and second.mode == "SAFE"


def test_hft2_isolates_the_faulty_gpu_degrades_to_1oo2d_and_releases_nothing_wrong(
    tmp_path: Path,
) -> None:
    steps = _run(tmp_path, "1oo3D", {"c0": "gA", "c1": "gB", "c2": "gC"}, ["gA", "gB", "gC"])
    assert not any("wrong" in o for s in steps for o in (s.outcome, *s.after))
    assert steps[0].outcome.startswith("withheld")
    assert (steps[0].policy, steps[0].voting, steps[0].after[-1]) == ("1oo2D", ("c1", "c2"),
                                                                      "released-correct")
    assert (steps[1].policy, steps[1].voting, steps[1].after[-1]) == ("1oo1D", ("c2",),
                                                                      "released-correct")
    assert steps[2].outcome.startswith("withheld")


def test_2oo3_with_two_channels_on_one_gpu_releases_a_wrong_product_when_it_fails(
    tmp_path: Path,
) -> None:
    """The effective HFT 0 made visible: both channels of gB return the same wrong C and
    outvote the healthy one."""
    units = {"c0": "gA", "c1": "gB", "c2": "gB"}
    assert assess(Policy.TWO_OO_THREE, Policy.TWO_OO_THREE, units).effective == 0
    (step,) = _run(tmp_path, "2oo3", units, ["gB"])
    assert step.channels == ("c1", "c2") and step.outcome == "released-wrong"


def test_a_gpu_wide_bit_flip_on_2oo3_is_masked_and_the_channel_isolated(tmp_path: Path) -> None:
    (step,) = _run(tmp_path, "2oo3", {"c0": "gA", "c1": "gB", "c2": "gC"}, ["gC"],
                   kind="bitflip-c")
    assert step.outcome == "released-correct" and step.voting == ("c0", "c1")


class _Recorder:
    def __init__(self) -> None:
        self.injected: list[tuple[str, str]] = []

    def inject(self, channel: str, fault: str) -> None:
        self.injected.append((channel, fault))


def test_inject_on_unit_arms_every_channel_of_the_unit_and_no_other() -> None:
    rec = _Recorder()
    hw = {"a": "GPU-1", "b": "GPU-2", "c": "GPU-1"}
    assert inject_on_unit(rec, hw, "GPU-1", "stuck") == ("a", "c")  # type: ignore[arg-type]
    assert rec.injected == [("a", "stuck"), ("c", "stuck")]


def test_an_unknown_unit_or_kind_is_refused_before_anything_is_injected() -> None:
    rec = _Recorder()
    with pytest.raises(InvalidInputError, match="no channel runs on 'GPU-9'"):
        inject_on_unit(rec, {"a": "GPU-1"}, "GPU-9", "stuck")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="unknown fault kind"):
        inject_on_unit(rec, {"a": "GPU-1"}, "GPU-1", "melt")  # type: ignore[arg-type]
    assert rec.injected == []


def test_hardware_from_status_inverts_hft_hardware() -> None:
    st = {"hft_hardware": {"GPU-1": ["a", "c"], "GPU-2": ["b"]}}
    hw = hardware_from_status(st)
    assert hw == {"a": "GPU-1", "c": "GPU-1", "b": "GPU-2"}
    assert channels_on(hw, "GPU-1") == ("a", "c")
    with pytest.raises(InvalidInputError):
        hardware_from_status({})


def _run_mixed(tmp_path: Path, policy: str, faults: list[tuple[str, str]]) -> list[Any]:
    cfg = make_config(tmp_path, policy, extra=PERMANENT, injection=True)
    x, w = operands(22)
    ref = reference(x, w, cfg)
    units = {"c0": "g1", "c1": "g2", "c2": "g3"}
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        return run_fault_sequence(client, units, faults, x, wid, ref, quiet_s=0.5)


def test_2oo3_outvotes_a_stuck_gpu_then_goes_safe_on_a_bit_flip_of_a_second(
    tmp_path: Path,
) -> None:
    first, second = _run_mixed(tmp_path, "2oo3", [("g1", "stuck"), ("g2", "bitflip-c")])
    assert first.outcome == "released-correct" and first.policy == "2oo2"
    assert second.outcome.startswith("withheld") and second.mode == "SAFE"


def test_1oo3d_withholds_a_transient_flip_keeps_all_three_then_isolates_two_stuck_gpus(
    tmp_path: Path,
) -> None:
    flip, one, two = _run_mixed(tmp_path, "1oo3D",
                                [("g3", "bitflip-c"), ("g1", "stuck"), ("g2", "stuck")])
    assert flip.outcome.startswith("withheld") and flip.after == ("released-correct",)
    assert (flip.policy, flip.voting) == ("1oo3D", ("c0", "c1", "c2"))
    # A stuck bit may survive the first diagnostic pattern: then the next request is
    # withheld too, and a later self-test catches it. Never a wrong release.
    assert (one.policy, one.voting, one.after[-1]) == ("1oo2D", ("c1", "c2"), "released-correct")
    assert (two.policy, two.voting, two.after[-1]) == ("1oo1D", ("c2",), "released-correct")
    assert not any("wrong" in o for s in (flip, one, two) for o in (s.outcome, *s.after))


def test_1oo3d_on_two_units_withholds_a_bit_flip_of_either_unit(tmp_path: Path) -> None:
    """1oo3D with c1 and c2 on one unit (effective HFT 1): a flip of that unit corrupts
    two channels alike, a flip of the other unit one; both are withheld (the third channel
    disagrees), the self-tests pass (transient) and all three keep voting."""
    cfg = make_config(tmp_path, "1oo3D", extra=PERMANENT, injection=True)
    x, w = operands(23)
    ref = reference(x, w, cfg)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        steps = run_fault_sequence(client, {"c0": "g0", "c1": "g1", "c2": "g1"},
                                   [("g1", "bitflip-c"), ("g0", "bitflip-c")], x, wid, ref,
                                   quiet_s=0.5)
    assert [s.outcome.split(":")[0] for s in steps] == ["withheld", "withheld"]
    assert all(s.after == ("released-correct",) and s.policy == "1oo3D" for s in steps)
