"""Hardware fault tolerance (HFT) as IEC 61508-2 (7.4.4.1.1) defines it. Pure; no I/O.

"A hardware fault tolerance of N means that N + 1 is the minimum number of faults that
could cause a loss of the safety function." safemon's safety function is: never release
a wrong product. Withholding a result (a typed error, or the latched SAFE state) is the
safe reaction, so a fault that only stops releases is not a loss of the safety function.

Declared HFT of a voter policy
-----------------------------
A request is released when `Policy.quorum` (Q) channel results agree bit for bit (C, and
ES for channels of one variant). A wrong product is released only when Q faulty channels
return the *same* wrong result, so Q faults are needed and the declared HFT is Q − 1.
In IEC 61508's MooN notation M counts the channels that must be healthy for the safety
function to be performed; here a wrong quorum is impossible while N − Q + 1 channels are
healthy, so M = N − Q + 1 and HFT = N − M = Q − 1. The suffix D marks diagnostics that
decide, after a mismatch, which channel to take out and so let the rest continue.

| policy | N | released when   | Q | IEC 61508 architecture | HFT |
|--------|---|-----------------|---|------------------------|-----|
| 1oo1D  | 1 | the checks pass | 1 | 1oo1D                  | 0   |
| 2oo2   | 2 | both agree      | 2 | 1oo2                   | 1   |
| 1oo2D  | 2 | both agree      | 2 | 1oo2D                  | 1   |
| 2oo3   | 3 | any two agree   | 2 | 2oo3                   | 1   |
| 1oo3D  | 3 | all three agree | 3 | 1oo3D                  | 2   |

safemon's policy names count agreeing channels, as railway "2-out-of-2" systems do. For
every policy but one that count and IEC's M give the same name; the exception is `2oo2`:
it releases only when both channels agree and goes SAFE on any mismatch, so either channel
alone withholds a wrong product. In IEC 61508 terms that is a 1oo2 architecture, HFT 1,
not the IEC 2oo2 (which needs both channels to act and has HFT 0). The name is kept for
compatibility; `ARCHITECTURE` gives the IEC name. Availability is another matter: a single
fault stops a 2oo2 deployment (SAFE), while 1oo2D, 2oo3 and 1oo3D continue, degraded.

Effective HFT of a deployment
-----------------------------
HFT counts independent faults. Channels on one piece of hardware share its faults: one
fault of a GPU (a stuck SM, a bad memory bank) can corrupt every channel on it *alike*,
because they run the same kernel on the same input; diverse tile configurations make
that less likely but do not make the hardware independent. So the effective HFT counts
pieces of hardware: it is (the fewest pieces whose faults together reach Q voting
channels) − 1, never more than the declared HFT. Every channel on one GPU: effective
HFT 0 against faults of that GPU, whatever the policy. Hardware is identified per
channel by `channel_hardware`: with the NumPy backend every channel runs on the host's
CPU (one piece); with CuPy each channel runs on its configured GPU, `gpu: null` being the
default device 0, and the daemon names that GPU by the UUID the device reports at start
(`safemon.gpu_identity`), so the figure counts physical GPUs, not configured indices.
A MIG instance reports its own MIG UUID: MIG instances of one GPU would count as separate
units although they share the GPU's memory, power and clocks, so do not give a deployment
its HFT from MIG instances of one GPU (not detected).

What neither figure covers (both are about channel faults only): the host (CPU, memory,
power, PCIe) and the daemon process (ingress, the voter, the controller) are common to
every channel of a deployment, and an input corrupted before it is replicated reaches
every channel alike. Those need their own measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from safemon.errors import InvalidInputError
from safemon.kernels.backend import Backend
from safemon.states import Policy

if TYPE_CHECKING:
    from safemon.config import Config

__all__ = [
    "ARCHITECTURE",
    "HOST_CPU",
    "HftAssessment",
    "assess",
    "channel_hardware",
    "declared_hft",
    "gpu_unit",
]

#: The IEC 61508 MooN(D) architecture each policy implements (see the module docstring).
ARCHITECTURE: Final[Mapping[Policy, str]] = {
    Policy.ONE_OO_ONE_D: "1oo1D",
    Policy.TWO_OO_TWO: "1oo2",
    Policy.ONE_OO_TWO_D: "1oo2D",
    Policy.TWO_OO_THREE: "2oo3",
    Policy.ONE_OO_THREE_D: "1oo3D",
}

#: The hardware unit of every channel of the NumPy backend.
HOST_CPU: Final = "host-cpu"


def gpu_unit(index: int | None) -> str:
    """The hardware unit of a CuPy channel on CUDA device `index` (None = default, 0)."""
    return f"gpu{0 if index is None else index}"


def declared_hft(policy: Policy) -> int:
    """The HFT `policy` declares: N − M in IEC 61508's MooN, equal to `policy.quorum` − 1.

    Raises:
        InvalidInputError: `policy` is not a `Policy`.
    """
    if not isinstance(policy, Policy):
        raise InvalidInputError(f"policy must be a Policy, got {policy!r}")
    n = policy.channels
    m = n - policy.quorum + 1  # healthy channels that make a wrong quorum impossible
    return n - m


@dataclass(frozen=True, slots=True)
class HftAssessment:
    """What a deployment declares and what its hardware earns now.

    Attributes:
        declared: HFT of the configured policy (`declared_hft`).
        effective: HFT of the voting set now, under the policy in effect, counting each
            piece of hardware once (0 <= effective <= declared).
        reason: one or more sentences saying why `effective` is what it is.
        units: (hardware unit, the voting channels on it), largest group first.
    """

    declared: int
    effective: int
    reason: str
    units: tuple[tuple[str, tuple[str, ...]], ...]


def assess(configured: Policy, voting: Policy, hardware: Mapping[str, str]) -> HftAssessment:
    """The declared and effective HFT of a voting set.

    Args:
        configured: the policy of the configuration (fixes `declared`).
        voting: the policy the voter uses now (the configured one, or a degradation).
        hardware: each voting channel's name -> its hardware unit (`channel_hardware`);
            exactly `voting.channels` entries.

    Raises:
        InvalidInputError: a policy that is not a `Policy`; a voting set of the wrong
            size; an empty channel or unit name.
    """
    declared = declared_hft(configured)
    if not isinstance(voting, Policy):
        raise InvalidInputError(f"voting policy must be a Policy, got {voting!r}")
    if len(hardware) != voting.channels:
        raise InvalidInputError(
            f"{voting.value} votes with {voting.channels} channel(s), got {len(hardware)}"
        )
    if not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in hardware.items()):
        raise InvalidInputError(f"channel and hardware names must be non-empty: {hardware!r}")
    groups: dict[str, list[str]] = {}
    for channel, unit in hardware.items():
        groups.setdefault(unit, []).append(channel)
    units = tuple(
        (u, tuple(chs)) for u, chs in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))
    )
    # Greedy over the largest groups gives the fewest units whose faults reach a quorum.
    reached, needed = 0, 0
    for _, chs in units:
        reached += len(chs)
        needed += 1
        if reached >= voting.quorum:
            break
    effective = min(declared, needed - 1)
    return HftAssessment(declared, effective, _reason(configured, voting, units, effective), units)


def _reason(
    configured: Policy,
    voting: Policy,
    units: tuple[tuple[str, tuple[str, ...]], ...],
    effective: int,
) -> str:
    q = voting.quorum
    parts: list[str] = []
    if voting is not configured:
        parts.append(
            f"Degraded: voting under {voting.value} (HFT {declared_hft(voting)}) instead of "
            f"{configured.value} (HFT {declared_hft(configured)})."
        )
    shared = [(u, chs) for u, chs in units if len(chs) > 1]
    if not shared:
        parts.append(
            f"Each of the {len(units)} voting channel(s) runs on its own hardware "
            f"({', '.join(u for u, _ in units)}); {voting.value} releases a wrong result only "
            f"when {q} faulty channel(s) return it alike, so it takes {q} independent fault(s)."
        )
    for u, chs in shared:
        alike = "every voting channel" if len(units) == 1 else f"{len(chs)} voting channels"
        parts.append(f"Channels {', '.join(chs)} share {u}: one fault of {u} can corrupt {alike} alike.")
    if shared:
        biggest_unit, biggest = units[0]
        if len(biggest) >= q:
            parts.append(
                f"{voting.value} releases once {q} agree, so the effective HFT against faults "
                f"of {biggest_unit} is 0."
            )
        else:
            parts.append(
                f"{voting.value} releases once {q} agree: faults of {effective + 1} pieces of "
                f"hardware can reach that, so the effective HFT is {effective}."
            )
    parts.append(
        "Not counted: the host (CPU, memory, power, PCIe) and the daemon process (voter) "
        "are common to every channel."
    )
    return " ".join(parts)


def channel_hardware(
    config: Config, backend: str, uuids: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Each configured channel's name -> its hardware unit, in config order.

    Args:
        config: the deployment.
        backend: the backend in use, "numpy" or "cupy" (after "auto" is resolved).
        uuids: channel name -> the UUID its GPU reported (`gpu_identity.channel_devices`),
            CuPy backend only. A channel with a non-empty UUID is identified by it, so two
            device indices that resolve to one physical GPU count as one unit; a channel
            left out (or with "") falls back to its index (`gpu_unit`).

    Raises:
        InvalidInputError: another backend (the hardware is not known before it is resolved).
    """
    resolved = Backend.parse(backend)
    if not resolved.resolved:
        raise InvalidInputError(f"backend must be 'numpy' or 'cupy' (resolved), got {backend!r}")
    known = {} if uuids is None or not resolved.on_device else uuids
    return {
        ch.name: (known.get(ch.name) or gpu_unit(ch.gpu)) if resolved.on_device else HOST_CPU
        for ch in config.channels or ()
    }
