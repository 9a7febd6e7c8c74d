"""GPU-wide fault injection: one fault on every channel of one GPU at once (issues 18, 21).

A fault of a GPU (a stuck SM, a bad memory bank, a bad clock) reaches every channel that
runs on it, and alike, since they run the same kernel on the same input. This module
simulates that through the existing opt-in fault-injection path (`testing.fault_injection`
and the daemon's `inject` command, `safemon.channels.faults`): the same fault KIND is armed
on every channel of one hardware unit before the next request is sent. Each inject command
is answered by the daemon only after it has forwarded the fault to the channel, and a
channel handles its messages in order, so every fault is armed before that request reaches
any channel.

What a unit is comes from the daemon itself: its status's `hft_hardware` (unit -> voting
channels, `safemon.hft`), read while every channel votes; on the CuPy backend a unit is the
GPU's UUID. Tests on the NumPy backend pass a faked mapping (every NumPy channel runs on
the host CPU).

`run_fault_sequence` applies GPU-wide faults one unit after the other and records what the
deployment did with each: released the right product, released a wrong one, or withheld
it (a typed error), and the mode and voting set once it settled. What it does not model:
a restarted channel on a faulty GPU would fail again, but an injected fault does not
survive a restart; run it with `actions.restart: false` (a channel that faults is isolated
at once) to model a GPU that stays broken.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from safemon.channels.faults import FAULT_KINDS
from safemon.errors import InvalidInputError, SafemonError

__all__ = [
    "FaultStep",
    "FaultTarget",
    "channels_on",
    "hardware_from_status",
    "inject_on_unit",
    "run_fault_sequence",
]

#: The data faults that make sense GPU-wide: a permanent stuck bit and a transient bit flip.
GPU_FAULT_KINDS = ("stuck", "bitflip-c")
#: Requests sent after each fault's first one, at most (see `FaultStep.after`).
MAX_AFTER = 4


class FaultTarget(Protocol):
    """What `inject_on_unit` needs of `safemon.client.Client`."""

    def inject(self, channel: str, fault: str) -> None: ...

    def status(self) -> dict[str, Any]: ...

    def matmul(self, x: npt.NDArray[np.float32], weight_id: str, *,
               timeout: float = 1.0) -> npt.NDArray[np.float32]: ...


def hardware_from_status(status: Mapping[str, Any]) -> dict[str, str]:
    """channel -> hardware unit, from a daemon status's `hft_hardware` (unit -> channels).

    Read it while every configured channel votes; a channel out of the vote is missing.

    Raises:
        InvalidInputError: `hft_hardware` is missing or not a unit -> channel-list mapping.
    """
    table = status.get("hft_hardware")
    if not isinstance(table, Mapping):
        raise InvalidInputError(f"status has no hft_hardware mapping: {table!r}")
    out: dict[str, str] = {}
    for unit, channels in table.items():
        if not isinstance(unit, str) or not isinstance(channels, list | tuple):
            raise InvalidInputError(f"hft_hardware entry {unit!r}: {channels!r}")
        for ch in channels:
            out[str(ch)] = unit
    return out


def channels_on(hardware: Mapping[str, str], unit: str) -> tuple[str, ...]:
    """The channels on `unit`, in the mapping's order.

    Raises:
        InvalidInputError: no channel runs on `unit` (a typo must not inject nothing).
    """
    chans = tuple(ch for ch, u in hardware.items() if u == unit)
    if not chans:
        known = ", ".join(sorted(set(hardware.values()))) or "none"
        raise InvalidInputError(f"no channel runs on {unit!r}; units: {known}")
    return chans


def inject_on_unit(target: FaultTarget, hardware: Mapping[str, str], unit: str,
                   kind: str) -> tuple[str, ...]:
    """Arm fault `kind` on every channel of `unit`; returns those channels.

    Raises:
        InvalidInputError: unknown unit or a kind outside `FAULT_KINDS`.
        SafemonError: from the daemon (injection disabled, unknown channel).
    """
    if kind not in FAULT_KINDS:
        raise InvalidInputError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
    chans = channels_on(hardware, unit)
    for ch in chans:
        target.inject(ch, kind)
    return chans


@dataclass(frozen=True)
class FaultStep:
    """What one GPU-wide fault did.

    Attributes:
        unit: the hardware unit faulted; channels: its channels; kind: the fault.
        outcome: "released-correct", "released-wrong" or "withheld: <ErrorType>" for the
            first request after the fault was armed.
        after: the outcomes of the requests sent next, each once the daemon settled: up to
            `MAX_AFTER`, stopping at the first released one or at SAFE. A diagnostic
            self-test can miss a stuck bit (a pattern whose products already have that bit
            at the stuck value), so the channel may take another request to be caught.
        mode, policy, voting: the daemon's mode, effective policy and voting set once it
            settled after the last of those requests.
        hft_effective: the effective HFT the daemon reported then.
    """

    unit: str
    channels: tuple[str, ...]
    kind: str
    outcome: str
    after: tuple[str, ...]
    mode: str
    policy: str
    voting: tuple[str, ...]
    hft_effective: int


def _outcome(target: FaultTarget, x: npt.NDArray[np.float32], weight_id: str,
             reference: npt.NDArray[np.float32], timeout: float) -> str:
    try:
        got = target.matmul(x, weight_id, timeout=timeout)
    except SafemonError as exc:
        return f"withheld: {type(exc).__name__}"
    same = np.array_equal(np.asarray(got).view(np.uint32), reference.view(np.uint32))
    return "released-correct" if same else "released-wrong"


def _settle(target: FaultTarget, quiet_s: float, timeout_s: float,
            clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """The daemon's status once mode, policy, voting set and channel states have not changed
    for `quiet_s` (or after `timeout_s`, whichever is first)."""
    end = clock() + timeout_s
    last: tuple[Any, ...] | None = None
    since = clock()
    while True:
        st = target.status()
        key = (st["mode"], st["effective_policy"], tuple(st["voting"]),
               tuple(c["state"] for c in st["channels"]))
        if key != last:
            last, since = key, clock()
        elif clock() - since >= quiet_s or clock() >= end:
            return st
        time.sleep(0.05)


def run_fault_sequence(
    target: FaultTarget,
    hardware: Mapping[str, str],
    faults: Sequence[tuple[str, str]],
    x: npt.NDArray[np.float32],
    weight_id: str,
    reference: npt.NDArray[np.float32],
    *,
    timeout: float = 30.0,
    quiet_s: float = 1.5,
) -> list[FaultStep]:
    """Apply GPU-wide `faults` one after the other, one request after each.

    Args:
        target: a connected client of a daemon with `testing.fault_injection` on.
        hardware: channel -> unit (`hardware_from_status`, or faked on the NumPy backend).
        faults: (unit, kind) in order; kind one of `GPU_FAULT_KINDS`.
        x, weight_id, reference: a request and its bit-exact clean product.
        timeout: seconds per request and per settling.
        quiet_s: seconds without a state change that count as settled.

    Raises:
        InvalidInputError: unknown unit or kind.
    """
    for unit, kind in faults:
        if kind not in GPU_FAULT_KINDS:
            raise InvalidInputError(f"GPU-wide faults are {', '.join(GPU_FAULT_KINDS)}, got {kind!r}")
        channels_on(hardware, unit)  # every unit is checked before the first injection
    steps = []
    for unit, kind in faults:
        chans = inject_on_unit(target, hardware, unit, kind)
        outcome = _outcome(target, x, weight_id, reference, timeout)
        st = _settle(target, quiet_s, timeout)
        after: list[str] = []
        while st["mode"] != "SAFE" and len(after) < MAX_AFTER:
            after.append(_outcome(target, x, weight_id, reference, timeout))
            st = _settle(target, quiet_s, timeout)
            if after[-1].startswith("released"):
                break
        steps.append(FaultStep(unit, chans, kind, outcome, tuple(after), st["mode"],
                               st["effective_policy"], tuple(st["voting"]),
                               int(st["hft_effective"])))
    return steps
