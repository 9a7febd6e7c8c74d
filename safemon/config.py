"""The deployment configuration: pydantic models, YAML loading and environment overrides.

One `Config` describes one daemon and its channels. It is built in three layers, later
layers winning:

1. the embedded default (the model defaults: 2oo3 with three process channels, NumPy/auto
   backend, variant ones/T/fma/auto, ipc:// in a private runtime dir, metrics on
   127.0.0.1:17650 (`DEFAULT_METRICS_PORT`), DTI 1 s);
2. a YAML file (`load_config(path)`); keys it leaves out keep their defaults, unknown keys
   are refused;
3. environment variables `SAFEMON_<SECTION>__<FIELD>=<value>`: a double underscore nests
   (`SAFEMON_METRICS__PORT=9500`), a number addresses a list item
   (`SAFEMON_CHANNELS__1__GPU=1`), a single name sets a top-level field
   (`SAFEMON_POLICY=2oo2`). Values are parsed as YAML (`9500` is an int, `null` is None,
   `[16x16x16, 32x32x32]` a list), then validated like the file.

Every model forbids unknown keys, and integer, float and bool fields are strict (a quoted
"9500" or a `1` for a bool is refused, not converted). Any problem raises
`safemon.errors.ConfigError` whose message lists each bad field as a dotted path with the
reason, e.g. `timing.ftti_s: must be >= ...`.

Derived values are resolved at load time and stored, so `Config.model_dump()` round-trips
through `Config.model_validate` to an equal object:
- `channels: null` (the default) becomes `Policy(policy).channels` process channels
  `ch0, ch1, ...` with the default variant;
- `degraded_policy: null` becomes the voter table's choice (2oo3 → 2oo2, the stricter of
  its two options; 1oo2D → 1oo1D; 1oo3D → 1oo2D; none for 1oo1D and 2oo2);
- `endpoints.runtime_dir: null` becomes `$XDG_RUNTIME_DIR/safemon-<name>`, or
  `/tmp/safemon-<uid>-<name>` without XDG_RUNTIME_DIR;
- the placeholders `{runtime_dir}` and `{name}` in endpoint addresses are substituted.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from safemon.dims import Dims, parse_key
from safemon.errors import ConfigError
from safemon.kernels.backend import Backend
from safemon.kernels.catalog import (
    TILES,
    TileConfig,
    Variant,
    make_variant,
    variant_for_shape,
    variant_with_tile,
)
from safemon.patterns.controller import restart_problems
from safemon.patterns.scheduler import timing_problems
from safemon.states import Policy

__all__ = [
    "DEFAULT_METRICS_PORT",
    "ENV_PREFIX",
    "ENV_RESERVED",
    "ActionsConfig",
    "ChannelConfig",
    "ClassificationConfig",
    "Config",
    "EndpointsConfig",
    "LimitsConfig",
    "LoggingConfig",
    "MetricsConfig",
    "PatternsConfig",
    "RestartConfig",
    "SecurityConfig",
    "TestingConfig",
    "TimingConfig",
    "VariantConfig",
    "WeightsConfig",
    "default_config",
    "load_config",
]

ENV_PREFIX = "SAFEMON_"
#: The metrics (and /healthz, /readyz) port. Prometheus's list of exporter default ports has
#: 9100-9999 fully taken (9400 is dcgm-exporter, 9464 OpenTelemetry's Prometheus exporter,
#: safemon's earlier default); 10000 and up is where that list continues and where the
#: kubelet (10250, 10255), kube-proxy (10249, 10256) and the control plane (10257, 10259)
#: listen; 15000-15099 is Istio's (15090 its metrics); 30000-32767 are NodePorts; 32768 and
#: up is Linux's ephemeral range. 17650 is in none of these (deploy/README.md, "Ports").
DEFAULT_METRICS_PORT = 17650
#: SAFEMON_* variables that are not configuration overrides (so they are not refused as
#: unknown fields). SAFEMON_CONFIG is the path of the config file, for every command and
#: every deployment artefact (never a config *name*).
ENV_RESERVED: frozenset[str] = frozenset({"SAFEMON_CONFIG"})

#: Names end up in file names, socket paths and Prometheus label values: keep them tame.
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,31}$"
#: sockaddr_un.sun_path holds 108 bytes on Linux including the terminating NUL; ZeroMQ
#: refuses longer ipc:// paths at bind time, which is too late to find out.
IPC_PATH_MAX_BYTES = 107
#: Self-test patterns run on every channel every DTI; a typo like 16384x16384x16384 would
#: turn the diagnosis into the main load, so each dimension is capped.
MAX_PATTERN_DIM = 4096
_PLACEHOLDER_RE = re.compile(r"\{[^{}]*\}")
_HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)

Name = Annotated[str, Field(pattern=NAME_PATTERN)]
PositiveSeconds = Annotated[StrictFloat, Field(gt=0.0)]


class _FieldProblems(ValueError):
    """Raised by cross-field validators: several (relative dotted path, reason) pairs.

    Pydantic would report a plain ValueError from a model validator at the model's own
    location; carrying the paths lets `load_config` name the exact field to change.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p}: {r}" for p, r in problems))


def _raise_if(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise _FieldProblems(problems)


#: The scheduler's and the controller's field names -> this file's (their rules, our names).
_SCHEDULER_NAMES = {"dti": "dti_s", "selftest_deadline": "selftest_deadline_s",
                    "jitter": "dti_jitter", "scrub_interval": "scrub_interval_s"}
_CONTROLLER_NAMES = {"restart_window": "window_s", "backoff_initial": "backoff_initial_s",
                     "backoff_factor": "backoff_factor", "backoff_max": "backoff_max_s"}


class _Model(BaseModel):
    # allow_inf_nan=False: YAML's `.inf`/`.nan` would silently disable a deadline check.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_default=True)


class VariantConfig(_Model):
    """The protected-kernel variant of one channel (see `safemon.kernels.catalog`).

    `checksum` None means the unprotected kernel; `tile` "auto" picks `auto_tile(M, N, K, level)`
    per request (with `rmt` "warp", `catalog.RMT_WARP_TILES` in place of its 256-thread
    tiles), and the split-K factor is always `auto_split(M, N, K, tile)`: pure
    functions of the shape, so replicas agree. `rmt` "warp" runs the
    intra-warp RMT build, "block" the inter-block one (docs/RMT.md): same C and ES, replica
    mismatch is a channel fault;
    `abft` true adds the ABFT check of every C tile's row and column sums, "rows" the check of
    its row sums alone on B's tile-row sums, which an ECC-protected weight computes once
    (docs/RMT.md, "ABFT"); a failure is a channel fault too.

    The default, ones/T/fma, is what `safemon select` picks on the committed H100 evidence for
    SIL 3 at HFT 0 (and SIL 4 at HFT 1): every DC lower bound ≥ 99 % (input flips and the
    three in-kernel campaigns at 80³; the worst, in-kernel transient, 99.54 %), at 1.09× the
    unprotected kernel at 80³, 1.01–1.06× at the inference shapes and 1.11–1.12× at 1024³ and
    4096³, where level T runs 16-wide k-tiles (`catalog.t_level_variant`;
    evidence/h100-2026-11-25-ktile/; 1.20–1.26× before, 1.33× before `large` read Aᵀ). Until
    2026-11-24 it was ones/I/exact: a fold at every MAC (99.91 %) and two instructions per
    MAC, 3.2–3.3× ones/T/fma's kernel time at 64×4096×4096, 256×1024×4096 and 4096³ and
    1.5–1.6× at 80³ and 1×4096×4096 (evidence/h100-2026-11-24-default/). Both meet every band a deployment of safemon can need; a
    degraded deployment (down to 1oo1D, HFT 0) keeps the band of SIL 3.
    """

    checksum: str | None = "ones"
    level: str | None = "T"
    mode: Literal["exact", "fma"] = "fma"
    tile: str = "auto"
    rmt: Literal["none", "warp", "block"] = "none"
    abft: StrictBool | Literal["rows"] = False

    @model_validator(mode="after")
    def _check_catalog(self) -> Self:
        if self.tile != "auto" and self.tile not in TILES:
            raise _FieldProblems(
                [("tile", f"unknown tile {self.tile!r}; known: auto, {', '.join(TILES)}")]
            )
        if self.checksum is None and self.level is not None:
            # make_variant would ignore the level; an unprotected kernel folds nothing.
            raise _FieldProblems(
                [("level", f"must be null when checksum is null (unprotected), got {self.level!r}")]
            )
        try:
            # The tile does not interact with the other parts, so "auto" is checked as "small".
            make_variant(
                self.checksum, self.level, self.mode, "small" if self.tile == "auto" else self.tile
            )
        except ValueError as exc:
            field = "level" if "level" in str(exc) else "checksum"
            raise _FieldProblems([(field, str(exc))]) from None
        return self

    def tile_for(self, m: int, n: int, k: int) -> TileConfig:
        """The tile this channel runs for an (M, K)·(K, N) product (resolves "auto"; intra-warp
        RMT runs `catalog.RMT_WARP_TILES` in place of the 256-thread tiles)."""
        return self.to_variant(m, n, k).tile

    def to_variant(self, m: int, n: int, k: int) -> Variant:
        """The catalog `Variant` this channel runs for an (M, K)·(K, N) product: tile
        "auto" resolved by `auto_tile(M, N, K, level)`, the split by `auto_split(M, N, K, tile)` (the
        tile and split `protected_matmul` picks for the same shape, so that a channel runs
        the kernel issue 14 tuned for it; C depends on the split, ES's shape too). A named
        tile cuts K as the automatic choice does (`variant_with_tile`), so that channels of
        diverse tiles compute the same C."""
        auto = variant_for_shape(m, n, k, self.checksum, self.level, self.mode, None, None,
                                 self.rmt, self.abft)
        return auto if self.tile == "auto" else variant_with_tile(auto, self.tile, k)


class ChannelConfig(_Model):
    """One redundant channel.

    placement "process": its own OS process (spawned; optionally pinned to GPU `gpu`).
    placement "stream": a CUDA stream inside the daemon process; such channels share the
    daemon's process (a crash takes all of them down, which the safety case must accept)
    and are always reached over `inproc://`, whatever `endpoints.channel_base` says.
    placement "inline": a CUDA stream driven by the daemon's own loop thread, with no socket
    and no thread of its own; the daemon queues every inline channel's device work before
    it waits on any (`safemon.channels.inline`). Same shared process as "stream".
    """

    name: Name
    placement: Literal["process", "stream", "inline"] = "process"
    gpu: Annotated[StrictInt, Field(ge=0)] | None = None
    variant: VariantConfig = Field(default_factory=VariantConfig)
    #: On a GPU, record a device-resident product that repeats (same weight, shape and
    #: client buffers) as a CUDA graph the second time and launch the graph from then on
    #: (`safemon.channels.step_graphs`); false queues every kernel by hand each time.
    graphs: StrictBool = True


class WeightsConfig(_Model):
    """Resident weights: `ecc` keeps them SEC-DED protected on the GPU (docs/ECC.md)."""

    ecc: StrictBool = True
    word_bits: Literal[32, 64] = 32


class TimingConfig(_Model):
    """Deadlines and periods, all in seconds.

    request_deadline_s: the fixed part of a channel's budget for one work item (transport,
        a self-test or scrub interleaved ahead of it); the budget adds the item's own cost
        and the work queued ahead of it (`LimitsConfig`). A channel later than its budget
        counts as failed for that request; a client's shorter timeout only ends its wait.
    dti_s: diagnostic test interval; every channel runs a golden self-test at least once
        per DTI.
    selftest_deadline_s: a self-test result later than this counts as a failed self-test.
    dti_jitter: fraction in [0, 0.5] by which the scheduler may *shorten* a period (to
        de-synchronise channels); it never lengthens it, so the DTI bound holds.
    scrub_interval_s: period of the ECC scrubber over resident weights; None = off. Each
        scrub patrols for at most min(heartbeat_interval_s, selftest_deadline_s / 4) and the
        next resumes there: large host (NumPy) weights take several periods (docs/ECC.md).
    heartbeat_interval_s / heartbeat_timeout_s: channel liveness; a channel silent for the
        timeout is treated as failed.
    ftti_s: fault-tolerant time interval of the protected function.
    drain_timeout_s: on shutdown, how long in-flight requests may take to finish.
    spin_s: busy-wait window. Before a blocking wait, the client awaiting a reply, the daemon's
        loop and each channel's loop poll their sockets without sleeping for up to this long
        after their last message (the client: after sending its request). This trades CPU time
        for the latency of waking an idle process, which on the H100 host costs more than the
        hop itself (docs/RUNTIME.md, "Waiting"). The daemon's window restarts after client
        messages and channel results, not after heartbeats. With any stream channel the
        daemon and its channels do not spin (they share one interpreter); a client always
        does. 0 (the default) never spins.
    """

    request_deadline_s: PositiveSeconds = 0.25
    # dti_s, selftest_deadline_s and scrub_interval_s follow the scheduler's rules
    # (`scheduler.timing_problems`, checked below); dti_jitter is a stricter deployment bound.
    dti_s: StrictFloat = 1.0
    selftest_deadline_s: StrictFloat = 0.2
    dti_jitter: Annotated[StrictFloat, Field(ge=0.0, le=0.5)] = 0.1
    scrub_interval_s: StrictFloat | None = 10.0
    heartbeat_interval_s: PositiveSeconds = 0.1
    heartbeat_timeout_s: PositiveSeconds = 0.5
    ftti_s: PositiveSeconds = 2.0
    drain_timeout_s: PositiveSeconds = 5.0
    spin_s: Annotated[StrictFloat, Field(ge=0.0, le=1.0)] = 0.0

    @model_validator(mode="after")
    def _check_intervals(self) -> Self:
        problems = timing_problems(
            self.dti_s, self.selftest_deadline_s, self.dti_jitter, self.scrub_interval_s,
            names=_SCHEDULER_NAMES,
        )
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            problems.append(
                (
                    "heartbeat_timeout_s",
                    f"must be > heartbeat_interval_s ({self.heartbeat_interval_s} s), got {self.heartbeat_timeout_s} s",
                )
            )
        # Worst case for a latent fault: it strikes just after a self-test passed. The next
        # self-test starts at most dti_s later (jitter only shortens periods) and its verdict
        # is due at most selftest_deadline_s after that (a late verdict is a failure), so the
        # fault detection time FDTI <= dti_s + selftest_deadline_s. (A test sent behind long
        # work has its deadline extended, never past ftti_s: `admission.max_ahead_s`.)
        # FDTI + FRTI <= FTTI is required; FRTI is measured at run time
        # (safemon_fault_reaction_seconds), so the
        # configuration can only refuse intervals that are already too long without it.
        if self.dti_s + self.selftest_deadline_s > self.ftti_s:
            problems.append(
                (
                    "ftti_s",
                    f"must be >= dti_s + selftest_deadline_s ({self.dti_s + self.selftest_deadline_s:g} s, "
                    f"the worst-case detection time of a latent fault), got {self.ftti_s} s",
                )
            )
        # A crashed or hung channel is only detected by the heartbeat timeout: same bound.
        if self.heartbeat_timeout_s > self.ftti_s:
            problems.append(
                (
                    "heartbeat_timeout_s",
                    f"must be <= ftti_s ({self.ftti_s} s): it bounds the detection time of a dead channel",
                )
            )
        _raise_if(problems)
        return self


class RestartConfig(_Model):
    """Channel restart budget: at most `max_restarts` within a sliding `window_s`, with
    exponential backoff `backoff_initial_s * backoff_factor**k`, capped at `backoff_max_s`.
    Past the budget the channel is isolated."""

    max_restarts: Annotated[StrictInt, Field(ge=0, le=1000)] = 3
    # The budget follows the controller's rules (`controller.restart_problems`, checked
    # below); backoff_factor <= 10 is a stricter deployment bound.
    window_s: StrictFloat = 60.0
    backoff_initial_s: StrictFloat = 0.1
    backoff_factor: Annotated[StrictFloat, Field(le=10.0)] = 2.0
    backoff_max_s: StrictFloat = 10.0

    @model_validator(mode="after")
    def _check_backoff(self) -> Self:
        problems = restart_problems(
            self.window_s, self.backoff_initial_s, self.backoff_factor, self.backoff_max_s,
            names=_CONTROLLER_NAMES,
        )
        if problems:
            raise _FieldProblems(problems)
        return self


#: `limits.min_channel_gflops` when the config leaves it unset (a GPU backend raises it to
#: `GPU_MIN_CHANNEL_GFLOPS`), in GFLOP/s of padded work (`safemon.admission.padded_flops`).
#: Checked with `scripts/price_check.py` (three processes running the NumPy reference at once
#: on the 2-core development container, 176 shapes: M 1-4096, K 32-4096, N 10-1024, up to
#: 128 MFLOP). On 2026-12-07 at 10:24 (evidence/cpu-2026-12-07-stop64/pricing/) 0.05 held:
#: none of the 155 shapes it admits overran its budget (`admission.work_budget_s`), the
#: closest at 0.84. Four hours later the same container ran the reference 1.3-1.7x slower
#: (evidence/cpu-2026-12-07-stop66/pricing/): at 0.05 three admitted shapes overran (up to
#: 1.14x), and a real embedded-default daemon faulted a channel on an admitted 4096x32x32
#: product in 7 of 12 runs. 0.025 admits 142 of the shapes, the same 142 as 0.03 and 0.035
#: on that grid, with the closest at 0.76 of its budget on the slow day. Priced at 2*M*K*N
#: instead (as until 2026-12-07), 10 of 163 admitted shapes overran at 0.05, and a user trial
#: had found one 4096x32x32 request latching the embedded default in SAFE.
CPU_MIN_CHANNEL_GFLOPS = 0.025


class LimitsConfig(_Model):
    """Admission control and resource budgets, checked at ingress before any work is queued
    (docs/ROBUSTNESS.md). A request or weight over a limit gets `InvalidInputError`; a
    request that finds `max_in_flight` requests open gets `BusyError`. Neither is a fault.

    max_in_flight: client requests open at once (admitted, not yet answered).
    max_request_bytes: size of a request's x (M * K * 4 bytes).
    max_dim: largest M, K or N of a request or weight.
    max_weight_bytes: size of one weight (K * N * 4 bytes).
    max_weights / max_weight_total_bytes: how many weights, and how many bytes of them,
        may be registered at once (every channel keeps each one resident). A new weight
        that does not fit evicts the least recently used ones that no request in flight
        uses (`safemon.eviction`; their clients register them again when they need them).
    max_client_weight_bytes: a quota per client (None, the default: no quota). A weight
        counts against each client that registered it: its bytes, and at least
        `max_weight_total_bytes / max_weights`. A client whose weights would exceed the
        quota gives up its own least recently used ones first, and weights no client holds
        are evicted before any other (`safemon.eviction`); size the quotas so that those of
        all clients fit `max_weight_total_bytes` together. A client is a `Client` object
        (its `client` key in `register_weight`), or the connection for one that sends no
        key. A single weight over the quota is refused (`WeightBudgetError`). Between
        `max_weight_total_bytes / max_weights` and `max_weight_total_bytes`.
    max_model_total_bytes: bytes of registered models the daemon holds (`register_model`:
        each model's spec and bias frames, kept in the daemon's memory to send with every
        request; at most `model_registry.MAX_MODELS` models besides). A new model that does
        not fit evicts the least recently used models that no request in flight uses, as a
        weight does; a single model over it is refused (`InvalidInputError`). The default,
        256 MiB (a quarter of the default weight budget), holds about 1,000 models of 16
        layers 4096 wide with a bias each (256 KiB of biases and a spec of about 2 KiB), or
        31 of the largest a model can be (256 layers 8192 wide: 8 MiB of biases).
    min_channel_gflops / item_overhead_s: the slowest throughput (GFLOP/s of the work
        the channels do: 2·M·K·N with each dimension rounded up to whole tiles,
        `safemon.admission.padded_flops`) a healthy channel must sustain, and the fixed time
        it may take per work item. When the config does not set min_channel_gflops, it is
        `CPU_MIN_CHANNEL_GFLOPS` (0.025: the NumPy reference with three channels sharing
        two cores, checked shape by shape) and, on a GPU backend, `GPU_MIN_CHANNEL_GFLOPS`
        (`with_backend_limits`). A work
        item costs `item_overhead_s + padded_flops / (min_channel_gflops * 1e9)` seconds
        (`safemon.admission.item_cost_s`). Its channel budget is `timing.request_deadline_s`
        plus the cost of everything queued on the channel ahead of it and its own
        (`work_budget_s`); only a channel that misses that budget is blamed. The work queued
        on a channel, a lone request's included, is bounded by `admission.max_ahead_s`:
        half of `timing.selftest_deadline_s`, which a self-test's own deadline allows for,
        plus `min(ftti_s - dti_s, (1 - dti_jitter) * dti_s) - selftest_deadline_s` (at
        least 0), by which the deadline of a self-test sent behind more work is extended. A request that does not
        fit beside the work queued is refused with BusyError, and one priced over the bound
        alone with InvalidInputError: overload is refused, never turned into a fault.
    max_connections: client connections the ingress and control sockets accept (each holds
        a file descriptor); the systemd unit's LimitNOFILE must exceed it.
    """

    max_in_flight: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = 256
    max_request_bytes: Annotated[StrictInt, Field(ge=4)] = 4 * 1024 * 1024
    max_dim: Annotated[StrictInt, Field(ge=1, le=65536)] = 8192
    max_weight_bytes: Annotated[StrictInt, Field(ge=4)] = 64 * 1024 * 1024
    max_weights: Annotated[StrictInt, Field(ge=1)] = 256
    max_weight_total_bytes: Annotated[StrictInt, Field(ge=4)] = 1024 * 1024 * 1024
    max_client_weight_bytes: Annotated[StrictInt, Field(ge=4)] | None = None
    max_model_total_bytes: Annotated[StrictInt, Field(ge=1)] = 256 * 1024 * 1024
    min_channel_gflops: Annotated[StrictFloat, Field(gt=0.0)] = CPU_MIN_CHANNEL_GFLOPS
    item_overhead_s: Annotated[StrictFloat, Field(gt=0.0, le=1.0)] = 0.005
    max_connections: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = 512

    @property
    def least_weight_charge(self) -> int:
        """What one weight counts at least against a client's quota (bytes): its share of
        the count budget, `max_weight_total_bytes / max_weights` rounded up."""
        return -(-self.max_weight_total_bytes // self.max_weights)

    @model_validator(mode="after")
    def _quota_within_the_budget(self) -> LimitsConfig:
        quota = self.max_client_weight_bytes
        least = self.least_weight_charge
        if quota is not None and not least <= quota <= self.max_weight_total_bytes:
            raise ValueError(
                f"limits.max_client_weight_bytes ({quota}) must lie between "
                f"max_weight_total_bytes / max_weights ({least}: what one weight counts at "
                f"least) and max_weight_total_bytes ({self.max_weight_total_bytes})")
        return self


#: `limits.min_channel_gflops` on a GPU backend when the config leaves it unset. The
#: slowest catalog variant, crc32c/I, ran at 360-420 GFLOP/s at 64×4096×4096, 256×1024×4096
#: and 4096³ on the H100 (evidence/h100-2026-11-23-kernel/, "The remaining issue-14
#: variants"); at small shapes, where every variant is slower (about 30 GFLOP/s at
#: 1×4096×4096: 1.1 ms), `item_overhead_s` (5 ms) covers the item. Until 2026-11-24 a GPU
#: daemon kept the CPU floor of then, 0.05, which priced a 64×4096×4096 item at 43 s, so one
#: item still queued on a straggling channel made the next request a BusyError (the torch
#: example's layer benchmark, evidence/h100-2026-11-24-rmt-block/).
GPU_MIN_CHANNEL_GFLOPS = 100.0


def with_backend_limits(config: Config, on_device: bool) -> Config:
    """`config`, with `limits.min_channel_gflops` set to `GPU_MIN_CHANNEL_GFLOPS` when the
    backend runs on a GPU (`on_device`) and the config did not set it; otherwise `config`
    itself."""
    if not on_device or "min_channel_gflops" in config.limits.model_fields_set:
        return config
    limits = config.limits.model_copy(update={"min_channel_gflops": GPU_MIN_CHANNEL_GFLOPS})
    return config.model_copy(update={"limits": limits})


class ClassificationConfig(_Model):
    """Fault classification (`safemon.fault_classes`). retests: self-tests run after a 2oo3
    channel's self-test failure or disagreement, before the reaction; a fault that shows
    again is permanent, else transient (0 = no retest: every fault is unclassified)."""

    retests: Annotated[StrictInt, Field(ge=0, le=10)] = 2


class TestingConfig(_Model):
    """Test-only switches, off in production. fault_injection: accept `safemon inject`
    (control command `inject`); when on, `status`, the metric `safemon_fault_injection_enabled`
    and the start-up log say so."""

    fault_injection: StrictBool = False


class ActionsConfig(_Model):
    """What the safe-state controller does on fault events.

    hook: a command line (split with `shlex`, run without a shell) started on each event
    with the event as JSON on stdin; None = no hook.
    """

    restart: StrictBool = True
    isolate: StrictBool = True
    notify: StrictBool = True
    hook: str | None = None

    @field_validator("hook")
    @classmethod
    def _check_hook(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            argv = shlex.split(v)
        except ValueError as exc:
            raise ValueError(f"not a valid command line: {exc}") from None
        if not argv:
            raise ValueError("must not be empty (use null for no hook)")
        return v


_SCHEMES = ("ipc://", "inproc://", "tcp://")


def _parse_tcp(address: str) -> tuple[str, int] | str:
    """(host, port) of a tcp:// address, or a reason string if it is not one."""
    rest = address[len("tcp://") :]
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        return "tcp:// address needs host:port"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"tcp:// port must be 1..65535, got {port!r}"
    return host, int(port)


def _address_problem(address: str, suffix: str = "") -> str | None:
    """A reason why a *resolved* endpoint address is unusable, or None.

    `suffix` is the longest text appended to an ipc:// path at run time (the per-channel
    part of `channel_base`), counted against the Unix socket path limit.
    """
    if not address.startswith(_SCHEMES):
        return f"must start with one of {', '.join(_SCHEMES)}, got {address!r}"
    if _PLACEHOLDER_RE.search(address):
        return f"unknown placeholder in {address!r}; known: {{runtime_dir}}, {{name}}"
    if address.startswith("ipc://"):
        path = address[len("ipc://") :]
        if not path.startswith("/"):
            return f"ipc:// path must be absolute, got {path!r}"
        size = len((path + suffix).encode())
        if size > IPC_PATH_MAX_BYTES:
            shown = f"{path + suffix!r}" if suffix else f"{path!r}"
            return (
                f"ipc:// socket path {shown} is {size} bytes; Unix sockets allow "
                f"{IPC_PATH_MAX_BYTES}: use a shorter runtime_dir"
            )
    elif address.startswith("inproc://"):
        if len(address) == len("inproc://"):
            return "inproc:// needs a name"
    else:
        parsed = _parse_tcp(address)
        if isinstance(parsed, str):
            return parsed
    return None


class EndpointsConfig(_Model):
    """Socket addresses. Each is `ipc://`, `inproc://` or `tcp://`; `{runtime_dir}` and
    `{name}` are substituted at load time.

    ingress: where clients send requests (ROUTER). control: operator commands (reset,
    status). events: the PUB socket of state/fault events. channel_base: the prefix of the
    per-channel addresses, see `Config.channel_address`.
    """

    runtime_dir: Path | None = None
    ingress: str = "ipc://{runtime_dir}/ingress.sock"
    control: str = "ipc://{runtime_dir}/control.sock"
    events: str = "ipc://{runtime_dir}/events.sock"
    channel_base: str = "ipc://{runtime_dir}/channel"

    @field_validator("ingress", "control", "events", "channel_base")
    @classmethod
    def _check_scheme(cls, v: str) -> str:
        if not v.startswith(_SCHEMES):
            raise ValueError(f"must start with one of {', '.join(_SCHEMES)}")
        return v

    @field_validator("runtime_dir")
    @classmethod
    def _check_runtime_dir(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_absolute():
            raise ValueError(f"must be an absolute path, got {str(v)!r}")
        return v

    def addresses(self) -> dict[str, str]:
        """The four address fields by name."""
        return {
            "ingress": self.ingress,
            "control": self.control,
            "events": self.events,
            "channel_base": self.channel_base,
        }


class SecurityConfig(_Model):
    """CURVE authentication. Required (curve=true and keys_dir set) when any endpoint is
    tcp://, because a network peer could otherwise inject results into the vote."""

    curve: StrictBool = False
    keys_dir: Path | None = None

    @model_validator(mode="after")
    def _check_keys(self) -> Self:
        if self.curve and self.keys_dir is None:
            raise _FieldProblems([("keys_dir", "required when curve is true")])
        return self


def _check_host(v: str) -> str:
    try:
        ipaddress.ip_address(v)
    except ValueError:
        if not _HOSTNAME_RE.match(v):
            raise ValueError(f"not an IP address or host name: {v!r}") from None
    return v


class MetricsConfig(_Model):
    """The Prometheus endpoint. port 0 lets the OS pick a free port (tests).
    tls_cert and tls_key: PEM files; both or neither."""

    host: str = "127.0.0.1"
    port: Annotated[StrictInt, Field(ge=0, le=65535)] = DEFAULT_METRICS_PORT
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @field_validator("host")
    @classmethod
    def _check_host_field(cls, v: str) -> str:
        return _check_host(v)

    @model_validator(mode="after")
    def _check_tls(self) -> Self:
        if (self.tls_cert is None) != (self.tls_key is None):
            missing = "tls_key" if self.tls_key is None else "tls_cert"
            raise _FieldProblems([(missing, "tls_cert and tls_key must be given together")])
        return self


class PatternsConfig(_Model):
    """Golden patterns for self-tests. dir None = the package's built-in patterns.
    dims: the "MxNxK" shapes each self-test runs.
    cover: the device-covering shape (`safemon.patterns.sm_coverage.cover_dims`: ≥ 2 blocks
    on every SM of the channel's GPU). None (the default): on when the SM count is known, i.e.
    on a GPU backend, and then it replaces the default `dims` (dims named in the config are
    kept beside it); False: never."""

    dir: Path | None = None
    dims: list[str] = Field(default_factory=lambda: ["16x16x16"], min_length=1)
    cover: bool | None = None

    def covers(self, sm_count: int | None) -> bool:
        """Whether the device-covering shape is used for a device with `sm_count` SMs."""
        return sm_count is not None and self.cover is not False

    @field_validator("dims")
    @classmethod
    def _check_dims(cls, v: list[str]) -> list[str]:
        bad = []
        for i, d in enumerate(v):
            try:
                dims = parse_key(d)
            except ValueError:
                bad.append(f"[{i}] {d!r} is not 'MxNxK' with positive integers")
                continue
            if max(dims) > MAX_PATTERN_DIM:
                bad.append(f"[{i}] {d!r} has a dimension above {MAX_PATTERN_DIM}")
        if len(set(v)) != len(v):
            bad.append("duplicate shapes")
        if bad:
            raise ValueError("; ".join(bad))
        return v

    def shapes(self) -> list[Dims]:
        """`dims` as `Dims`, (M, N, K) tuples."""
        return [parse_key(d) for d in self.dims]


class LoggingConfig(_Model):
    """format "auto" = console on a TTY, JSON otherwise (see `safemon.logging`)."""

    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error", "critical"] = "info"


#: The voter table's degradation options (README.md, "Deployments (HFT)").
_DEGRADED_OPTIONS: dict[Policy, tuple[Policy, ...]] = {
    Policy.ONE_OO_ONE_D: (),
    Policy.TWO_OO_TWO: (),
    Policy.ONE_OO_TWO_D: (Policy.ONE_OO_ONE_D,),
    Policy.TWO_OO_THREE: (Policy.TWO_OO_TWO, Policy.ONE_OO_TWO_D),
    Policy.ONE_OO_THREE_D: (Policy.ONE_OO_TWO_D,),
}
#: Policies that may end up as 1oo1D, which relies on per-request signature checks.
_DEGRADES_TO_1OO1D = frozenset({Policy.ONE_OO_ONE_D, Policy.ONE_OO_TWO_D, Policy.ONE_OO_THREE_D})


class Config(_Model):
    """One deployment. Build it with `load_config` or `default_config`; treat it as read-only.

    name: deployment name ([a-z0-9-], used in the runtime dir and logs).
    policy: the voter policy; fixes the number of channels.
    degraded_policy: what the voter falls back to when a channel is lost (2oo3: "2oo2" or
        "1oo2D"; 1oo2D: "1oo1D"; 1oo3D: "1oo2D"; others: none, they go to SAFE).
    backend: a `Backend`; in YAML and the environment "numpy" (reference, CPU), "cupy" (GPU)
        or "auto" (cupy when a device is usable).
    """

    name: Name = "safemon"
    policy: Policy = Policy.TWO_OO_THREE
    degraded_policy: Policy | None = None
    backend: Backend = Backend.AUTO
    channels: list[ChannelConfig] | None = None
    weights: WeightsConfig = Field(default_factory=WeightsConfig)
    timing: TimingConfig = Field(default_factory=TimingConfig)
    restart: RestartConfig = Field(default_factory=RestartConfig)
    actions: ActionsConfig = Field(default_factory=ActionsConfig)
    endpoints: EndpointsConfig = Field(default_factory=EndpointsConfig)
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    patterns: PatternsConfig = Field(default_factory=PatternsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    testing: TestingConfig = Field(default_factory=TestingConfig)
    classification: ClassificationConfig = Field(default_factory=ClassificationConfig)

    @model_validator(mode="after")
    def _resolve_and_check(self, info: ValidationInfo) -> Self:
        problems: list[tuple[str, str]] = []
        policy = Policy(self.policy)

        if self.channels is None:
            self.channels = [ChannelConfig(name=f"ch{i}") for i in range(policy.channels)]
        options = _DEGRADED_OPTIONS[policy]
        if self.degraded_policy is None:
            self.degraded_policy = options[0] if options else None
        elif self.degraded_policy not in options:
            allowed = " or ".join(repr(p.value) for p in options) if options else "null"
            problems.append(
                (
                    "degraded_policy",
                    f"{policy.value} can only degrade to {allowed}, got {self.degraded_policy.value!r}",
                )
            )

        if len(self.channels) != policy.channels:
            problems.append(
                (
                    "channels",
                    f"policy {policy.value} needs {policy.channels} channel(s), got {len(self.channels)}",
                )
            )
        seen: dict[str, int] = {}
        for i, ch in enumerate(self.channels):
            if ch.name in seen:
                problems.append(
                    (
                        f"channels.{i}.name",
                        f"duplicate channel name {ch.name!r} (also channels.{seen[ch.name]})",
                    )
                )
            seen.setdefault(ch.name, i)
            if self.backend is Backend.NUMPY and ch.gpu is not None:
                problems.append(
                    (f"channels.{i}.gpu", "must be null when backend is numpy (no GPU is used)")
                )
            if ch.variant.checksum is None and policy in _DEGRADES_TO_1OO1D:
                problems.append(
                    (
                        f"channels.{i}.variant.checksum",
                        f"{policy.value} relies on per-request signature checks; an unprotected kernel is not allowed",
                    )
                )

        if self.actions.restart and self.restart.max_restarts == 0:
            problems.append(
                (
                    "restart.max_restarts",
                    "must be >= 1 when actions.restart is true (or set actions.restart: false)",
                )
            )
        if self.timing.scrub_interval_s is not None and not self.weights.ecc:
            problems.append(
                (
                    "timing.scrub_interval_s",
                    "must be null when weights.ecc is false (nothing to scrub)",
                )
            )

        self._resolve_endpoints(info, problems)
        self._check_channel_addresses(problems)
        inline = [(i, ch.gpu) for i, ch in enumerate(self.channels or ()) if ch.placement == "inline"]
        if len({gpu for _i, gpu in inline}) > 1:
            # The daemon's loop thread drives every inline channel, and a CUDA stream can be
            # used only while its own device is the thread's current one.
            problems.append((f"channels.{inline[-1][0]}.gpu",
                             "inline channels must all use the same GPU (the daemon's loop "
                             "drives them on one thread); use process channels across GPUs"))

        tcp = [k for k, a in self.endpoints.addresses().items() if a.startswith("tcp://")]
        if tcp and not self.security.curve:
            problems.append(
                (
                    "security.curve",
                    f"must be true (with keys_dir) because endpoints {', '.join(tcp)} use tcp://",
                )
            )
        _raise_if(problems)
        return self

    def _resolve_endpoints(self, info: ValidationInfo, problems: list[tuple[str, str]]) -> None:
        ep = self.endpoints
        if ep.runtime_dir is None:
            env = info.context.get("env") if isinstance(info.context, Mapping) else None
            ep.runtime_dir = _default_runtime_dir(self.name, os.environ if env is None else env)
        substitutions = {"{runtime_dir}": str(ep.runtime_dir), "{name}": self.name}
        resolved: dict[str, str] = {}
        for field, address in ep.addresses().items():
            for key, value in substitutions.items():
                address = address.replace(key, value)
            suffix = ""
            if field == "channel_base" and self.channels:
                # The longest per-channel socket path is the one that must fit.
                suffix = max((f"-{ch.name}.sock" for ch in self.channels), key=len)
            why = _address_problem(address, suffix)
            if why is not None:
                problems.append((f"endpoints.{field}", why))
            setattr(ep, field, address)
            resolved[field] = address
        seen: dict[str, str] = {}
        for field, address in resolved.items():
            if address in seen:
                problems.append(
                    (f"endpoints.{field}", f"same address as endpoints.{seen[address]}")
                )
            seen.setdefault(address, field)

    def _check_channel_addresses(self, problems: list[tuple[str, str]]) -> None:
        base = self.endpoints.channel_base
        if not base.startswith("tcp://") or self.channels is None:
            return
        if any(ch.placement == "process" for ch in self.channels):
            # A channel process binds its address and the daemon connects to it, so over
            # tcp:// any host on the network could connect, read the weights and answer
            # in a channel's place; channel links are local only (ipc:// or inproc://).
            problems.append(
                ("endpoints.channel_base",
                 "tcp:// is not supported for channel links (process channels are local: "
                 "use ipc:// or inproc://)")
            )
            return
        parsed = _parse_tcp(base)
        if isinstance(parsed, tuple) and parsed[1] + len(self.channels) - 1 > 65535:
            problems.append(
                ("endpoints.channel_base", "tcp:// port + number of channels exceeds 65535")
            )

    def channel_address(self, name: str, incarnation: int | None = None) -> str:
        """The address channel `name` binds and the daemon connects to.

        stream channels: `inproc://safemon-<deployment>-<channel>` (they live in the daemon),
        with `-<incarnation>` appended when `incarnation` is given: a thread that ignores
        its stop flag cannot be killed, so each incarnation binds a fresh name.
        ipc:// base: `<base>-<channel>.sock`; inproc:// base: `<base>-<channel>`;
        tcp://host:port base: `tcp://host:<port + channel index>`.

        Raises:
            KeyError: no channel has that name.
        """
        assert self.channels is not None  # resolved by validation
        index = {ch.name: i for i, ch in enumerate(self.channels)}
        if name not in index:
            raise KeyError(f"no channel named {name!r}")
        i = index[name]
        ch = self.channels[i]
        base = self.endpoints.channel_base
        if ch.placement == "stream":
            tail = "" if incarnation is None else f"-{incarnation}"
            return f"inproc://safemon-{self.name}-{name}{tail}"
        if base.startswith("ipc://"):
            return f"{base}-{name}.sock"
        if base.startswith("inproc://"):
            return f"{base}-{name}"
        parsed = _parse_tcp(base)
        assert isinstance(parsed, tuple)  # validated at load
        return f"tcp://{parsed[0]}:{parsed[1] + i}"

    @property
    def channel_names(self) -> tuple[str, ...]:
        """The configured channel names, in config order."""
        return tuple(ch.name for ch in self.channels or ())

    def policy_chain(self) -> tuple[Policy, ...]:
        """Every policy the voter may run: `policy`, then each successive degradation
        (e.g. 2oo3 → 1oo2D → 1oo1D). The metrics use it to pre-create label values."""
        chain = [Policy(self.policy)]
        nxt = self.degraded_policy
        while nxt is not None and nxt not in chain:
            chain.append(nxt)
            opts = _DEGRADED_OPTIONS[nxt]
            nxt = opts[0] if opts else None
        return tuple(chain)


def _default_runtime_dir(name: str, env: Mapping[str, str]) -> Path:
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / f"safemon-{name}"
    # /tmp is shared: the uid in the name keeps users apart (the daemon creates it 0700).
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path("/tmp") / f"safemon-{uid}-{name}"


def _env_overrides(env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Nested override dict from SAFEMON_* variables, plus problems (as message lines)."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    top_fields = set(Config.model_fields)
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var in ENV_RESERVED:
            continue
        parts = var[len(ENV_PREFIX) :].lower().split("__")
        if any(not p for p in parts):
            problems.append(f"{var}: empty path segment")
            continue
        if parts[0] not in top_fields:
            problems.append(
                f"{var}: {parts[0]!r} is not a configuration field (known: {', '.join(sorted(top_fields))})"
            )
            continue
        try:
            value = yaml.safe_load(env[var]) if env[var] != "" else None
        except yaml.YAMLError as exc:
            problems.append(f"{var}: value is not valid YAML: {exc}")
            continue
        out = _set_path(out, parts, value)
    return out, problems


def _set_path(tree: dict[str, Any], parts: list[str], value: Any) -> dict[str, Any]:
    node: Any = tree
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key: str | int = int(part) if part.isdigit() else part
        if last:
            node[key] = value
        else:
            node = node.setdefault(key, {})
    return tree


def _merge(base: Any, override: Any, path: str = "") -> Any:
    """Deep-merge `override` into `base`. A dict with integer keys patches a list by index.

    Raises:
        ConfigError: an index override for a list that is not set, or out of its range.
    """
    indexed = (
        isinstance(override, dict) and bool(override) and all(isinstance(k, int) for k in override)
    )
    if indexed and not isinstance(base, list):
        raise ConfigError(
            "invalid configuration:\n"
            f"  - {path}: SAFEMON_* overrides index into this list, but it is not a list in the "
            "configuration (set the whole list instead, e.g. SAFEMON_CHANNELS='[{name: a}, ...]')"
        )
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            sub = f"{path}.{k}".lstrip(".")
            if k in base:
                out[k] = _merge(base[k], v, sub)
            else:
                # Still recurse: an index override below a missing list must be refused.
                out[k] = _merge({}, v, sub) if isinstance(v, dict) else v
        return out
    if indexed:
        out_list = list(base)
        for k, v in override.items():
            if not 0 <= k < len(out_list):
                raise ConfigError(
                    "invalid configuration:\n"
                    f"  - {path}.{k}: SAFEMON_* override index {k} is out of range "
                    f"(the list has {len(out_list)} items)"
                )
            out_list[k] = _merge(out_list[k], v, f"{path}.{k}")
        return out_list
    return override


def _dotted(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _format_errors(exc: ValidationError) -> list[str]:
    lines: list[str] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _FieldProblems):
            prefix = f"{_dotted(loc)}." if loc else ""
            lines.extend(f"{prefix}{p}: {r}" for p, r in cause.problems)
            continue
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not a configuration field)"
        elif err["type"] not in ("missing",):
            msg = f"{msg} (got {_short(err.get('input'))})"
        lines.append(f"{_dotted(loc)}: {msg}")
    return lines


def _validate(data: Mapping[str, Any], env: Mapping[str, str], source: str) -> Config:
    overrides, problems = _env_overrides(env)
    if problems:
        raise ConfigError(
            f"invalid configuration ({source}):\n" + "\n".join(f"  - {p}" for p in problems)
        )
    merged = _merge(dict(data), overrides) if overrides else dict(data)
    try:
        return Config.model_validate(merged, context={"env": env})
    except ValidationError as exc:
        lines = _format_errors(exc)
        where = f"{source} + SAFEMON_* environment" if overrides else source
        raise ConfigError(
            f"invalid configuration ({where}):\n" + "\n".join(f"  - {line}" for line in lines)
        ) from None


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load, override and validate a configuration.

    Args:
        path: a YAML file; None = the embedded default.
        env: the environment for SAFEMON_* overrides and XDG_RUNTIME_DIR; None = os.environ.

    Raises:
        ConfigError: unreadable file, invalid YAML, a top level that is not a mapping, an
            unknown SAFEMON_* variable, or any invalid field; the message lists each
            problem on its own line as `dotted.path: reason`. Checks that relate fields of
            different sections (channel count, tcp:// needs CURVE, ...) run once every
            section is valid on its own, so they show up after the field errors are fixed.
    """
    env = os.environ if env is None else env
    if path is None:
        return _validate({}, env, "embedded default")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {str(p)!r}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration {str(p)!r} is not valid YAML: {exc}") from None
    if data is None:
        data = {}  # an empty file means "all defaults", like an empty mapping
    if not isinstance(data, dict):
        raise ConfigError(
            f"invalid configuration ({p}):\n  - <root>: must be a mapping of sections, got {type(data).__name__}"
        )
    return _validate(data, env, str(p))


def default_config() -> Config:
    """The embedded default, without SAFEMON_* overrides (XDG_RUNTIME_DIR still applies)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return _validate({}, {} if xdg is None else {"XDG_RUNTIME_DIR": xdg}, "embedded default")
