"""HFT as IEC 61508 defines it: the table per policy, that the voter really tolerates the
declared number of faulty channels (and not one more), and the effective-HFT rule that
counts channels on one piece of hardware once."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safemon.config import load_config
from safemon.errors import InvalidInputError
from safemon.hft import ARCHITECTURE, HOST_CPU, assess, channel_hardware, declared_hft
from safemon.patterns.voter import ChannelResult, Release, Submit, Voter
from safemon.states import Policy

XDG = {"XDG_RUNTIME_DIR": "/run/user/1000"}

#: The issue's table (N − M for MooN), with 2oo2 read as what it does: it releases only when
#: both agree, so it is IEC 61508's 1oo2 (see safemon.hft).
EXPECTED = {
    Policy.ONE_OO_ONE_D: ("1oo1D", 0),
    Policy.TWO_OO_TWO: ("1oo2", 1),
    Policy.ONE_OO_TWO_D: ("1oo2D", 1),
    Policy.TWO_OO_THREE: ("2oo3", 1),
    Policy.ONE_OO_THREE_D: ("1oo3D", 2),
}


def test_every_policy_declares_its_iec_61508_hft() -> None:
    assert set(EXPECTED) == set(Policy)
    for policy, (architecture, hft) in EXPECTED.items():
        assert ARCHITECTURE[policy] == architecture
        assert declared_hft(policy) == policy.hft == hft
        n, m = int(architecture[3]), int(architecture[0])
        assert policy.channels == n and n - m == hft, policy


def test_declared_hft_refuses_a_non_policy() -> None:
    with pytest.raises(InvalidInputError, match="Policy"):
        declared_hft("2oo3")  # type: ignore[arg-type]


def _released_wrong(policy: Policy, faulty: set[str], order: tuple[str, ...]) -> bool:
    """Whether the voter releases a faulty channel's result when the `faulty` channels all
    return the same wrong C (with a matching ES) and the others the right one."""
    voter = Voter()
    voters = tuple(f"c{i}" for i in range(policy.channels))
    voter.handle(Submit(1, 0.0, 10.0, voters, policy))
    released: list[Release] = []
    for t, ch in enumerate(order, start=1):
        wrong = ch in faulty
        ev = ChannelResult(1, ch, float(t) * 0.1, True, b"bad" if wrong else b"good",
                           b"es-bad" if wrong else b"es-good", "v")
        released += [d for d in voter.handle(ev) if isinstance(d, Release)]
    return any(r.channel in faulty for r in released)


@pytest.mark.parametrize("policy", list(Policy))
def test_the_voter_tolerates_exactly_the_declared_number_of_faulty_channels(
    policy: Policy,
) -> None:
    """HFT N: no N faulty channels release a wrong product, whatever the arrival order;
    N + 1 faulty channels returning the same wrong result can (the HFT is not understated)."""
    hft = declared_hft(policy)
    voters = [f"c{i}" for i in range(policy.channels)]
    for order in itertools.permutations(voters):
        for faulty in itertools.combinations(voters, hft):
            assert not _released_wrong(policy, set(faulty), order), (policy, faulty, order)
    assert any(
        _released_wrong(policy, set(faulty), order)
        for order in itertools.permutations(voters)
        for faulty in itertools.combinations(voters, hft + 1)
    ), policy


# ------------------------------------------------------------------ the effective HFT


@pytest.mark.parametrize("policy", list(Policy))
def test_channels_on_separate_gpus_earn_the_declared_hft(policy: Policy) -> None:
    hardware = {f"c{i}": f"gpu{i}" for i in range(policy.channels)}
    a = assess(policy, policy, hardware)
    assert a.effective == a.declared == declared_hft(policy)
    assert "own hardware" in a.reason


@pytest.mark.parametrize("policy", list(Policy))
def test_channels_on_one_gpu_give_effective_hft_0_against_that_gpu(policy: Policy) -> None:
    hardware = {f"c{i}": "gpu0" for i in range(policy.channels)}
    a = assess(policy, policy, hardware)
    assert a.effective == 0
    assert a.units == (("gpu0", tuple(hardware)),)
    if policy.channels > 1:
        assert "effective HFT against faults of gpu0 is 0" in a.reason


@pytest.mark.parametrize(
    ("policy", "effective"), [(Policy.ONE_OO_THREE_D, 1), (Policy.TWO_OO_THREE, 0)]
)
def test_two_channels_sharing_a_gpu_count_once(policy: Policy, effective: int) -> None:
    """1oo3D on gpu0, gpu0, gpu1: faults of two GPUs reach its quorum of three (HFT 1);
    2oo3 on the same: one gpu0 fault already reaches its quorum of two (HFT 0)."""
    a = assess(policy, policy, {"a": "gpu0", "b": "gpu0", "c": "gpu1"})
    assert (a.declared, a.effective) == (declared_hft(policy), effective)
    assert a.units == (("gpu0", ("a", "b")), ("gpu1", ("c",)))
    assert "a, b share gpu0" in a.reason


def test_a_degraded_voting_set_has_the_hft_of_the_policy_in_effect() -> None:
    a = assess(Policy.ONE_OO_THREE_D, Policy.ONE_OO_TWO_D, {"a": "gpu0", "c": "gpu2"})
    assert (a.declared, a.effective) == (2, 1)
    assert a.reason.startswith("Degraded: voting under 1oo2D (HFT 1) instead of 1oo3D (HFT 2).")


def test_the_reason_names_what_no_figure_covers() -> None:
    a = assess(Policy.TWO_OO_THREE, Policy.TWO_OO_THREE, {"a": "g0", "b": "g1", "c": "g2"})
    assert "Not counted: the host" in a.reason and "voter" in a.reason


def _brute_force(quorum: int, hardware: dict[str, str]) -> int:
    """The fewest units whose channels reach the quorum, minus one (an independent oracle)."""
    units = sorted(set(hardware.values()))
    for k in range(1, len(units) + 1):
        for chosen in itertools.combinations(units, k):
            if sum(1 for u in hardware.values() if u in chosen) >= quorum:
                return k - 1
    raise AssertionError("unreachable: all units together hold every channel")


@given(
    policy=st.sampled_from(list(Policy)),
    units=st.lists(st.sampled_from(["gpu0", "gpu1", "gpu2", HOST_CPU]), min_size=3, max_size=3),
)
def test_effective_hft_is_the_fewest_hardware_faults_that_reach_a_quorum(
    policy: Policy, units: list[str]
) -> None:
    hardware = {f"c{i}": units[i] for i in range(policy.channels)}
    a = assess(policy, policy, hardware)
    assert a.effective == _brute_force(policy.quorum, hardware)
    assert 0 <= a.effective <= a.declared
    assert sorted(ch for _, chs in a.units for ch in chs) == sorted(hardware)


def test_assess_refuses_a_voting_set_that_does_not_fit_the_policy() -> None:
    with pytest.raises(InvalidInputError, match="3 channel"):
        assess(Policy.ONE_OO_THREE_D, Policy.ONE_OO_THREE_D, {"a": "gpu0", "b": "gpu1"})
    with pytest.raises(InvalidInputError, match="non-empty"):
        assess(Policy.ONE_OO_TWO_D, Policy.ONE_OO_TWO_D, {"a": "gpu0", "b": ""})
    with pytest.raises(InvalidInputError, match="Policy"):
        assess(Policy.ONE_OO_TWO_D, "1oo2D", {"a": "gpu0", "b": "gpu1"})  # type: ignore[arg-type]


# ------------------------------------------------------------- hardware of a config


def test_numpy_channels_all_run_on_the_host_cpu() -> None:
    c = load_config(env={**XDG, "SAFEMON_BACKEND": "numpy"})
    hw = channel_hardware(c, "numpy")
    assert hw == {"ch0": HOST_CPU, "ch1": HOST_CPU, "ch2": HOST_CPU}
    assert assess(c.policy, c.policy, hw).effective == 0


def test_cupy_channels_run_on_their_gpu_and_null_is_device_0() -> None:
    c = load_config(env={**XDG, "SAFEMON_CHANNELS": "[{name: a}, {name: b, gpu: 0}, {name: c, gpu: 3}]"})
    assert channel_hardware(c, "cupy") == {"a": "gpu0", "b": "gpu0", "c": "gpu3"}


def test_the_hft2_example_earns_hft_2_and_the_2oo3_example_earns_0_on_one_device() -> None:
    configs = Path(__file__).resolve().parent.parent / "configs"
    hft2 = load_config(configs / "hft2.yaml", env=XDG)
    a = assess(hft2.policy, hft2.policy, channel_hardware(hft2, "cupy"))
    assert (a.declared, a.effective) == (2, 2)
    two = load_config(configs / "2oo3.yaml", env=XDG)
    for backend in ("numpy", "cupy"):
        a = assess(two.policy, two.policy, channel_hardware(two, backend))
        assert (a.declared, a.effective) == (1, 0)


def test_the_hardware_of_an_unresolved_backend_is_not_guessed() -> None:
    with pytest.raises(InvalidInputError, match="resolved"):
        channel_hardware(load_config(env=XDG), "auto")


# ------------------------------------------------------------- physical GPUs (UUIDs)

_UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
_UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


def test_channels_are_named_by_their_gpus_uuid_when_the_daemon_read_it() -> None:
    c = load_config(env={**XDG, "SAFEMON_CHANNELS": "[{name: a, gpu: 0}, {name: b, gpu: 1}, {name: c, gpu: 2}]"})
    hw = channel_hardware(c, "cupy", {"a": _UUID_A, "b": _UUID_B, "c": ""})
    assert hw == {"a": _UUID_A, "b": _UUID_B, "c": "gpu2"}


def test_two_indices_that_resolve_to_one_gpu_count_as_one_piece_of_hardware() -> None:
    """Configured on GPUs 0 and 1, but both indices report the same UUID (one physical GPU):
    1oo2D earns no HFT against that GPU's faults, although the indices differ."""
    c = load_config(env={**XDG, "SAFEMON_POLICY": "1oo2D",
                         "SAFEMON_CHANNELS": "[{name: a, gpu: 0}, {name: b, gpu: 1}]"})
    by_index = channel_hardware(c, "cupy")
    assert assess(c.policy, c.policy, by_index).effective == 1
    same = channel_hardware(c, "cupy", {"a": _UUID_A, "b": _UUID_A})
    a = assess(c.policy, c.policy, same)
    assert (a.declared, a.effective) == (1, 0)
    assert f"share {_UUID_A}" in a.reason


def test_uuids_are_ignored_on_the_numpy_backend() -> None:
    c = load_config(env={**XDG, "SAFEMON_BACKEND": "numpy"})
    assert set(channel_hardware(c, "numpy", {"ch0": _UUID_A}).values()) == {HOST_CPU}


@pytest.mark.parametrize(("name", "declared", "effective"), [
    ("1oo2d-2gpu", 1, 1), ("2oo3-2gpu", 1, 0), ("hft2-2gpu", 2, 1),
    ("2oo3-3gpu", 1, 1), ("hft2-3gpu", 2, 2),
])
def test_the_multi_gpu_configs_earn_what_their_comments_say(
    name: str, declared: int, effective: int,
) -> None:
    """With one distinct (faked) UUID per configured index, as on a machine with that many
    GPUs; tests/runtime/test_multigpu.py checks the same with the UUIDs real GPUs report."""
    path = Path(__file__).resolve().parent.parent / "configs" / "multigpu" / f"{name}.yaml"
    c = load_config(path, env=XDG)
    assert c.channels is not None
    uuids = {ch.name: f"GPU-fake-{ch.gpu}" for ch in c.channels}
    a = assess(c.policy, c.policy, channel_hardware(c, "cupy", uuids))
    assert (a.declared, a.effective) == (declared, effective)
