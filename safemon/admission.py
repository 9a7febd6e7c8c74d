"""Admission control at ingress: what the daemon accepts before any work is queued.

Pure functions of the config (`LimitsConfig`, `TimingConfig`) and the request: no sockets,
no clock. The daemon calls them for every request and weight registration and answers a
refusal with a typed error (never a fault, never SAFE: a client's load or input says
nothing about the hardware).

- `check_request`: per-request shape and size limits (`InvalidInputError`), and the
  bounded in-flight queue and work queued on a channel (`BusyError`).
- `max_queued_s` / `max_ahead_s`: how much priced work a self-test may wait behind within
  its own deadline, and in all (the rest extends its deadline, within the FTTI).
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

__all__ = ["Refusal", "budget_s", "check_request", "check_weight", "client_limits", "item_cost_s",
           "max_ahead_s", "max_queued_s", "padded_flops", "selftest_extension_s", "store_cost_s",
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
    transport before anything in it is looked at; `Limits.max_wire_part_bytes` of the
    result (the largest part, plus a margin for CURVE's encryption) is the client sockets'
    `MAXMSGSIZE`, so libzmq drops the connection of a peer that sends a larger part before
    it is buffered (docs/ROBUSTNESS.md)."""
    lim = config.limits
    biggest = max(lim.max_request_bytes, lim.max_weight_bytes)
    wire = Limits()
    return Limits(max_frame_bytes=min(biggest, wire.max_frame_bytes),
                  max_total_bytes=min(2 * biggest, wire.max_total_bytes))


def item_cost_s(config: Config, m: int, k: int, n: int) -> float:
    """Seconds a healthy channel may spend on one (M, K)·(K, N) work item:
    `limits.item_overhead_s + padded_flops / (limits.min_channel_gflops * 1e9)`
    (`padded_flops`). Raises ValueError for a non-positive dimension."""
    if min(m, k, n) < 1:
        raise ValueError(f"dimensions must be >= 1, got {m}x{k}x{n}")
    lim = config.limits
    return lim.item_overhead_s + padded_flops(config, m, k, n) / (lim.min_channel_gflops * 1e9)


def store_cost_s(config: Config, k: int, n: int) -> float:
    """Seconds a healthy channel may spend storing (checking, ECC encoding, uploading) or
    reading once a (K, N) weight: `limits.item_overhead_s + 2*8*K*N / (min_channel_gflops *
    1e9)`, the order of work of an 8-row product on it, unpadded (a store is no tiled
    product)."""
    lim = config.limits
    return lim.item_overhead_s + 2.0 * 8 * k * n / (lim.min_channel_gflops * 1e9)


def padded_flops(config: Config, m: int, k: int, n: int) -> float:
    """The floating-point work of one (M, K)·(K, N) item as the channels do it: 2·M'·K'·N',
    each dimension rounded up to a whole number of the tile a channel's variant picks for
    that shape (`VariantConfig.tile_for`: BM rows, BK of K, BN columns), the largest over
    the configured channels. The kernel and its NumPy reference compute whole tiles, so a
    4096×32×32 item on the 128×128 `large_k16` tile is 4× the work 2·M·K·N counts (the
    reference measured 0.020 GFLOP/s of 2·M·K·N there against 0.063 on the `small` tile, on
    one core of the 2-core development container, 2026-12-07)."""
    most = 0
    for ch in config.channels or ():
        t = ch.variant.tile_for(m, n, k)
        most = max(most, _whole(m, t.bm) * _whole(k, t.bk) * _whole(n, t.bn))
    return 2.0 * (most or m * k * n)


def _whole(d: int, tile: int) -> int:
    """`d` rounded up to a multiple of `tile`."""
    return -(-d // tile) * tile


def budget_s(config: Config, cost_s: float, queued_s: float = 0.0) -> float:
    """Seconds a healthy channel may take to answer work of `cost_s` seconds (item costs:
    one product's, or a whole model's) that finds `queued_s` seconds of work queued ahead of
    it on the channel: `timing.request_deadline_s + queued_s + cost_s`. The configured
    deadline covers transport and a self-test or scrub interleaved ahead of it."""
    return config.timing.request_deadline_s + queued_s + cost_s


def work_budget_s(config: Config, m: int, k: int, n: int, queued_s: float = 0.0) -> float:
    """`budget_s` of one (M, K)·(K, N) work item (`item_cost_s`)."""
    return budget_s(config, item_cost_s(config, m, k, n), queued_s)


def max_queued_s(config: Config) -> float:
    """Seconds of priced work a self-test may wait behind within its own deadline: half
    `timing.selftest_deadline_s` (the other half is the test's)."""
    return config.timing.selftest_deadline_s / 2.0


def max_ahead_s(config: Config) -> float:
    """The most priced work (seconds of item costs) admitted onto one channel's queue, a
    lone request's included: `max_queued_s` plus the slack the timing leaves a self-test,
    `min(ftti_s - dti_s, (1 - dti_jitter) * dti_s) - selftest_deadline_s` (at least 0). A
    self-test sent behind more than `max_queued_s` of work has its deadline extended by the
    excess (`selftest_extension_s`), so its verdict still comes within the FTTI (a latent
    fault's detection time stays <= dti_s + its extended deadline <= ftti_s) and, when
    `selftest_deadline_s` itself allows it, before the channel's next periodic test can be
    due (the scheduler's jitter may bring that to (1 - dti_jitter) * dti_s)."""
    t = config.timing
    slack = min(t.ftti_s - t.dti_s, (1.0 - t.dti_jitter) * t.dti_s) - t.selftest_deadline_s
    return max_queued_s(config) + max(0.0, slack)


def selftest_extension_s(config: Config, ahead_s: float) -> float:
    """Seconds by which a self-test's deadline is extended when it is sent behind
    `ahead_s` seconds of priced work: the part beyond `max_queued_s`, which its own
    deadline does not allow for. At most `max_ahead_s - max_queued_s` for the work
    admission lets onto a queue."""
    return max(0.0, ahead_s - max_queued_s(config))


def check_request(config: Config, shape: tuple[int, ...], n: int, in_flight: int,
                  queued_s: float = 0.0, cost_s: float | None = None) -> Refusal | None:
    """Refusal for a request with x of `shape` against a weight with `n` columns while
    `in_flight` requests are open and the busiest voting channel has `queued_s` seconds of
    work queued, or None to admit it. `cost_s` is the request's own priced work (a whole
    model's: the sum of its layers'); None prices one (M, K)·(K, N) item.

    A request whose own work is priced over `max_ahead_s` is refused whatever the queue
    (`InvalidInputError`: it would hold a self-test past the FTTI); one that does not fit
    beside the work queued is refused with `BusyError` (retry later)."""
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
    if cost_s is None and len(shape) == 2 and shape[0] >= 1 and shape[1] >= 1 and n >= 1:
        cost_s = item_cost_s(config, shape[0], shape[1], n)
    if cost_s is not None:
        most = max_ahead_s(config)
        if cost_s > most:
            return Refusal("InvalidInputError",
                           f"the request's work is priced at {cost_s:.3f} s (at "
                           f"limits.min_channel_gflops {lim.min_channel_gflops:g} GFLOP/s plus "
                           f"{lim.item_overhead_s:g} s of "
                           f"limits.item_overhead_s per product), over the {most:.3f} s a "
                           "self-test may wait behind work within the timing's FTTI: send "
                           "smaller requests (a model: fewer layers), or set "
                           "limits.min_channel_gflops and item_overhead_s to what the channels "
                           "sustain, or lengthen timing.ftti_s", "invalid_input")
        if queued_s + cost_s > most:
            return Refusal("BusyError",
                           f"{queued_s:.3f} s of work already queued on a channel (at most "
                           f"{most:.3f} s with this request's {cost_s:.3f} s): retry later",
                           "busy")
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
