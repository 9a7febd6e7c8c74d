"""The typed errors safemon raises. Every public failure is one of these.

The hierarchy is shallow on purpose: an application catches `SafemonError` to handle
everything, or one subclass to handle one reaction (retry on `VoteTimeoutError`, stop and
alert on `SafeStateError`, fix the caller on `InvalidInputError`).
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "BusyError",
    "CompileError",
    "ConfigError",
    "DaemonSilentError",
    "DaemonUnreachableError",
    "DeviceInputError",
    "DisagreementError",
    "InvalidInputError",
    "KernelCheckError",
    "ModelUnavailableError",
    "NonFiniteOperandError",
    "PatternError",
    "SafeStateError",
    "SafemonError",
    "ShuttingDownError",
    "UncorrectableError",
    "UnknownWeightError",
    "VoteTimeoutError",
    "WeightBudgetError",
]


class SafemonError(Exception):
    """Base class of every error safemon raises on purpose."""


class InvalidInputError(SafemonError, ValueError):
    """An input was rejected before any computation (dtype, shape, layout, non-finite values)."""


class NonFiniteOperandError(InvalidInputError):
    """A product's operand held NaN or infinity (the kernels' finite check). `operand` is
    "a" (the input: the request's x, or a whole-model request's hidden activation, which
    overflowed float32 in the layer before) or "b" (the weight). `layer` is the layer of a
    whole-model request whose product found it, else None."""

    def __init__(self, message: str, *, operand: str, layer: int | None = None) -> None:
        super().__init__(message)
        self.operand = operand
        self.layer = layer


class UnknownWeightError(InvalidInputError):
    """A weight id the daemon does not hold: never registered there, or registered before
    the daemon restarted. `Client` then registers its own copy again (same content, same
    id) and retries once."""


class DeviceInputError(InvalidInputError):
    """The channels could not read a device-resident request's CUDA IPC buffers (a foreign,
    stale or undersized handle, or a daemon on another host), or the request cannot be
    served through them under the effective policy (1oo1D checks C against x on the host).
    Nothing was released; `Client` then sends the same request through host memory."""


class BackendUnavailableError(SafemonError, RuntimeError):
    """The requested compute backend cannot be used here (e.g. `cupy` without a CUDA device)."""


class CompileError(SafemonError, RuntimeError):
    """A CUDA kernel failed to compile; the message carries the NVRTC log."""


class SafeStateError(SafemonError, RuntimeError):
    """The system is in the latched SAFE state and releases no output until an operator reset."""


class VoteTimeoutError(SafemonError, TimeoutError):
    """No trustworthy result could be formed before the request's deadline."""


class DaemonUnreachableError(SafemonError, ConnectionError):
    """No daemon answered on the control / ingress socket within the allowed time."""


class DaemonSilentError(VoteTimeoutError, DaemonUnreachableError):
    """A voted request got no answer at all within its timeout: not a result, not the
    daemon's own `VoteTimeoutError` (which it sends when the channels are late). The daemon
    is not running, not reachable at the ingress address, or its loop is stalled. It is
    both a `VoteTimeoutError` (what such a call raised until 2026-12-07) and a
    `DaemonUnreachableError` (what a control call raises in the same case)."""


class ModelUnavailableError(VoteTimeoutError):
    """A whole-model request cannot be voted under the effective policy: under 1oo1D (as
    configured, or degraded to) the per-request check sees no intermediate layer. Nothing
    ran. `Client(per_layer_fallback=True)` then sends the layers one by one instead."""


class DisagreementError(SafemonError, RuntimeError):
    """The channels disagreed and the policy could not single out a trustworthy result."""


class BusyError(SafemonError, RuntimeError):
    """The daemon has `limits.max_in_flight` requests open; retry later. Not a fault."""


class ShuttingDownError(SafemonError, RuntimeError):
    """The daemon is stopping: the request was not (or no longer) voted on."""


class WeightBudgetError(SafemonError, RuntimeError):
    """Registering the weight would exceed `limits.max_weights` or
    `limits.max_weight_total_bytes`."""


class ConfigError(SafemonError, ValueError):
    """A configuration file or override is invalid; the message names each bad field."""


class PatternError(SafemonError, RuntimeError):
    """A golden pattern is missing, tampered with, or does not match its manifest."""


class KernelCheckError(SafemonError, RuntimeError):
    """An in-kernel check of the product failed; nothing may be released.

    Attributes:
        check: which check failed: "rmt" (replica lanes disagreed; C and ES of the tile are
            poison) or "abft" (a row or column checksum of a C tile is off by more than the
            rounding bound).
        tile: the lowest failed linear tile id, or None when unknown.
    """

    def __init__(self, check: str, tile: int | None) -> None:
        self.check = check
        self.tile = tile
        where = f"tile {tile}" if tile is not None else "an unknown tile"
        super().__init__(f"in-kernel {check} check failed in {where}; the result is not released")


class UncorrectableError(SafemonError, RuntimeError):
    """An ECC check found errors it cannot correct.

    Attributes:
        buffer: the name of the protected buffer.
        words: indices of the uncorrectable words (into the buffer viewed as code words).
    """

    def __init__(self, buffer: str, words: list[int] | tuple[int, ...]) -> None:
        self.buffer = buffer
        self.words = tuple(int(w) for w in words)
        shown = ", ".join(str(w) for w in self.words[:16])
        more = f" (+{len(self.words) - 16} more)" if len(self.words) > 16 else ""
        super().__init__(
            f"uncorrectable ECC error in buffer {buffer!r} at word(s) {shown}{more}"
        )
