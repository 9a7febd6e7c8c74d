"""Admission control at ingress: what the daemon accepts before any work is queued.

Pure functions of the config (`LimitsConfig`, `TimingConfig`) and the request: no sockets,
no clock. The daemon calls them for every request and weight registration and answers a
refusal with a typed error (never a fault, never SAFE: a client's load or input says
nothing about the hardware).

- `check_request`: per-request shape and size limits (`InvalidInputError`), and the
  bounded in-flight queue (`BusyError`).
- `check_weight`: per-weight size, and the count / byte budget of registered weights.
- `work_budget_s`: how long a channel may take for one work item; the only deadline a
  channel is judged by (a client's shorter timeout ends the client's wait, not the
  channel's budget).
- `client_limits`: the transport's size limits on a client's message, derived from the
  largest request and weight admitted (the daemon decodes with them and sets its client
  sockets' `MAXMSGSIZE` from them; `Client` encodes with them).
"""

from __future__ import annotations

from dataclasses import dataclass

from safemon.config import Config
from safemon.transport.wire import Limits

__all__ = ["Refusal", "check_request", "check_weight", "client_limits", "item_cost_s",
           "max_queued_s",
           "work_budget_s"]

#: float32 only on the data path.
_ITEMSIZE = 4


@dataclass(frozen=True)
class Refusal:
    """Why a request or weight was refused: `error_type` (a `safemon.errors` class name
    the client raises) and a bounded message (it quotes sizes, never request content)."""

    error_type: str
    message: str
    outcome: str  # the `safemon_requests_total{outcome}` label


def client_limits(config: Config) -> Limits:
    """The transport's limits on one client message: no payload frame larger than the
    biggest request x or weight admitted (`limits.max_request_bytes`,
    `limits.max_weight_bytes`), no message larger than twice that, and the transport's own
    bounds where they are lower (16 payload frames, a 64 KiB header). Under the default
    limits: 64 MiB per frame, 128 MiB per message. A message over them is refused by the
    transport before anything in it is looked at; `Limits.max_part_bytes` of the result is
    the client sockets' `MAXMSGSIZE`, so libzmq drops the connection of a peer that sends a
    larger part before it is buffered (docs/ROBUSTNESS.md)."""
    lim = config.limits
    biggest = max(lim.max_request_bytes, lim.max_weight_bytes)
    wire = Limits()
    return Limits(max_frame_bytes=min(biggest, wire.max_frame_bytes),
                  max_total_bytes=min(2 * biggest, wire.max_total_bytes))


def item_cost_s(config: Config, m: int, k: int, n: int) -> float:
    """Seconds a healthy channel may spend on one (M, K)·(K, N) work item:
    `limits.item_overhead_s + 2*M*K*N / (limits.min_channel_gflops * 1e9)`.
    Raises ValueError for a non-positive dimension."""
    if min(m, k, n) < 1:
        raise ValueError(f"dimensions must be >= 1, got {m}x{k}x{n}")
    flops = 2.0 * m * k * n
    lim = config.limits
    return lim.item_overhead_s + flops / (lim.min_channel_gflops * 1e9)


def work_budget_s(config: Config, m: int, k: int, n: int, queued_s: float = 0.0) -> float:
    """Seconds a healthy channel may take to answer one (M, K)·(K, N) work item that finds
    `queued_s` seconds of work (item costs) queued ahead of it on the channel:
    `timing.request_deadline_s + queued_s + item_cost_s(...)`. The configured deadline
    covers transport and a self-test or scrub interleaved ahead of it."""
    return config.timing.request_deadline_s + queued_s + item_cost_s(config, m, k, n)


def max_queued_s(config: Config) -> float:
    """The most work (seconds of item cost) admitted onto one channel's queue: half the
    self-test deadline, so a self-test queued behind it still meets its deadline."""
    return config.timing.selftest_deadline_s / 2.0


def check_request(config: Config, shape: tuple[int, ...], n: int, in_flight: int,
                  queued_s: float = 0.0) -> Refusal | None:
    """Refusal for a request with x of `shape` against a weight with `n` columns while
    `in_flight` requests are open and the busiest voting channel has `queued_s` seconds of
    work queued, or None to admit it."""
    lim = config.limits
    if len(shape) == 2 and max(shape[0], shape[1], n) > lim.max_dim:
        return Refusal("InvalidInputError",
                       f"x is {shape[0]}x{shape[1]} with a weight of {n} columns: a dimension "
                       f"exceeds limits.max_dim ({lim.max_dim})", "invalid_input")
    size = _ITEMSIZE
    for d in shape:
        size *= d
    if size > lim.max_request_bytes:
        return Refusal("InvalidInputError",
                       f"x is {size} bytes, over limits.max_request_bytes ({lim.max_request_bytes})",
                       "invalid_input")
    if in_flight >= lim.max_in_flight:
        return Refusal("BusyError",
                       f"{in_flight} requests in flight (limits.max_in_flight): retry later",
                       "busy")
    if len(shape) == 2 and shape[0] >= 1 and shape[1] >= 1 and n >= 1:
        cost = item_cost_s(config, shape[0], shape[1], n)
        if queued_s > 0.0 and queued_s + cost > max_queued_s(config):
            return Refusal("BusyError",
                           f"{queued_s:.3f} s of work already queued on a channel (at most "
                           f"{max_queued_s(config):.3f} s, half timing.selftest_deadline_s): "
                           "retry later", "busy")
    return None


def check_weight(config: Config, shape: tuple[int, ...], count: int, total_bytes: int) -> Refusal | None:
    """Refusal for a new weight of `shape` when `count` weights of `total_bytes` bytes are
    registered, or None to accept it."""
    lim = config.limits
    size = _ITEMSIZE
    for d in shape:
        size *= d
    if len(shape) == 2 and max(shape) > lim.max_dim:
        return Refusal("InvalidInputError",
                       f"the weight is {shape[0]}x{shape[1]}: a dimension exceeds "
                       f"limits.max_dim ({lim.max_dim})", "invalid_input")
    if size > lim.max_weight_bytes:
        return Refusal("InvalidInputError",
                       f"the weight is {size} bytes, over limits.max_weight_bytes "
                       f"({lim.max_weight_bytes})", "invalid_input")
    if count >= lim.max_weights:
        return Refusal("WeightBudgetError",
                       f"{count} weights registered: limits.max_weights reached", "invalid_input")
    if total_bytes + size > lim.max_weight_total_bytes:
        return Refusal("WeightBudgetError",
                       f"registering {size} bytes would exceed limits.max_weight_total_bytes "
                       f"({lim.max_weight_total_bytes}; {total_bytes} in use)", "invalid_input")
    return None
