"""`safemon bench vote --runtime`: device-resident requests, digest-voted whole-model
requests and channel placements, each against a baseline measured in the same run.

Needs CuPy and a GPU. Per placement ("process": three channel processes; "stream": three
CUDA streams on threads of the daemon process; "inline": three CUDA streams driven by the
daemon's loop, every channel's device step queued before any is waited for), a 2oo3 daemon (`safemon run`, ipc://) is started and
this process acts as the app, passing CuPy arrays to `Client`:

- **matmul** at each size: round trip of `Client.matmul(cupy x)` (result back as a CuPy
  array on the same device). `overhead = round trip − kernel_seconds`, the latter being the
  slowest agreeing channel's busy time from the reply (the critical path: queuing, waiting
  for and checking its device step, its Python included).
- **model**: a `layers`-layer MLP (batch × hidden, fp32, gelu, biases) as one
  `Client.run(model_id, cupy x)`: one vote on the output digest and the per-layer digests.

Baselines, in this process, same run: the protected kernel called directly with its result
left on the device (`direct`), the whole protected forward (`model_direct`), three of them
back to back (`model_three_back_to_back`), the same on weights under ECC
(`model_three_back_to_back_ecc`: the channels keep their weights so, `WeightsConfig.ecc`, and
verify them with every use, which the first leaves out; the two are timed in alternation,
`_timed_interleaved`), three passes captured as CUDA graphs as the channels run them and
launched back to back (`model_three_graphs`: what the three channels' GPU work takes when
they share the GPU serially; the forwards above are queued from Python, which at 64×4096
takes longer than their kernels) and side by side on three streams, as inline channels run
them (`model_three_graphs_concurrent`), and the unprotected forward with `cupy.matmul`
(`model_cupy_matmul`).

Faults: after the timed runs, `bitflip-c` is injected into one channel and `fault_requests`
requests of each kind are checked bit for bit against the fault-free output; the count of
wrong outputs released is recorded (it must be 0). CUDA MPS is not measured: starting its
control daemon changes how the lent GPU is shared, which this benchmark does not do (the
evidence records whether one ran, `mps_state`).

`runtime_markdown` renders the evidence and ends with issue 16's targets, each figure
against its limit (`safemon.bench.targets`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from safemon.bench.placement_label import placement_label
from safemon.bench.targets import targets_markdown
from safemon.bench.vote import VoteBenchSize, _bench_config, _stats, running_daemon
from safemon.errors import SafemonError

__all__ = ["DEFAULT_VARIANT_LABEL", "FORMAT", "PATHS", "ModelShape", "channel_variant",
           "run_runtime_bench", "runtime_markdown"]

FORMAT = "safemon.bench_runtime/2"

#: The evidence's `variant` when the channels ran the daemon's default variant.
DEFAULT_VARIANT_LABEL = "default (ones/T/fma)"

#: How device arrays reach the channels: "cuda-ipc" (the client's exported buffers,
#: digests over ZeroMQ: `safemon.device_io`) or "host" (copied through host memory, C and
#: ES as frames), both measured against the same daemon in one run.
PATHS = ("cuda-ipc", "host")

PLACEMENTS = ("process", "stream", "inline")
"""Channel placements the benchmark knows (`ChannelConfig.placement`)."""

Progress = Callable[[str], None]


class ModelShape:
    """The benchmarked MLP: `layers` layers of hidden × hidden, `batch` rows."""

    def __init__(self, batch: int = 64, hidden: int = 4096, layers: int = 4) -> None:
        self.batch, self.hidden, self.layers = batch, hidden, layers

    @property
    def label(self) -> str:
        return f"mlp{self.layers}x{self.hidden}/batch{self.batch}"


def _timed(fn: Callable[[], Any], n: int, warmup: int, sync: Callable[[], None]) -> list[float]:
    out: list[float] = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        fn()
        sync()
        t1 = time.perf_counter()
        if i >= warmup:
            out.append(t1 - t0)
    return out


def _timed_interleaved(fns: Sequence[Callable[[], Any]], n: int, warmup: int,
                       sync: Callable[[], None]) -> list[list[float]]:
    """`_timed` of several callables in alternation, one call of each per round, so that
    the host's drift (clocks, scheduling) reaches them alike and their ratio holds."""
    out: list[list[float]] = [[] for _ in fns]
    for i in range(warmup + n):
        for j, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            sync()
            t1 = time.perf_counter()
            if i >= warmup:
                out[j].append(t1 - t0)
    return out


def channel_variant(label: str) -> dict[str, Any]:
    """The `VariantConfig` fields of a label "CHECKSUM/LEVEL/MODE" ("ones/M/fma") or
    "unprotected/MODE"; "" is the daemon's default variant.

    Raises:
        ValueError: not of that form.
    """
    from safemon.config import VariantConfig

    if not label:
        return {}
    parts = label.split("/")
    if parts[0] == "unprotected" and len(parts) == 2:
        fields: dict[str, Any] = {"checksum": None, "level": None, "mode": parts[1]}
    elif len(parts) == 3:
        fields = {"checksum": parts[0], "level": parts[1], "mode": parts[2]}
    else:
        raise ValueError(f"variant {label!r}: expected CHECKSUM/LEVEL/MODE or unprotected/MODE")
    VariantConfig(**fields)  # ConfigError (a ValueError) for an unknown one
    return fields


def _baselines(cp: Any, sizes: Sequence[VoteBenchSize], ops: dict[str, Any], model: ModelShape,
               mops: Any, warmup: int, model_requests: int, say: Progress,
               variant: dict[str, Any]) -> dict[str, Any]:
    from safemon.config import VariantConfig, WeightsConfig
    from safemon.kernels.api import run_variant
    from safemon.kernels.model_gpu import launch_epilogue
    from safemon.models import run_model

    vc = VariantConfig(**variant)
    sync = cp.cuda.get_current_stream().synchronize
    out: dict[str, Any] = {"direct": {}}
    for s in sizes:
        x, w = (cp.asarray(a) for a in ops[s.label])
        v = vc.to_variant(s.m, s.n, s.k)
        say(f"baseline: direct protected kernel {s.label}")
        call = functools.partial(run_variant, x, w, v, "cupy")
        out["direct"][s.label] = _stats(_timed(call, s.requests, warmup, sync))
    layers, weights, x_host = mops
    dw = {k: cp.asarray(w) for k, w in weights.items()}
    dx = cp.asarray(x_host)
    say(f"baseline: protected forward {model.label}")

    def one() -> Any:
        return run_model(layers, dw, dx, vc, "cupy")

    out["model_direct"] = _stats(_timed(one, model_requests, warmup, sync))
    weights_config = WeightsConfig()  # what the benchmark's daemon keeps: `weights` unset
    if not weights_config.ecc:
        out["model_three_back_to_back"] = _stats(_timed(lambda: [one() for _ in range(3)],
                                                        model_requests, warmup, sync))
    else:
        # The channels keep their weights under ECC and verify them with every use, so their
        # kernels include the checks: the same three forwards on protected weights too, in
        # alternation with the plain ones (host-bound, these drift by tens of percent
        # between rounds; alternation keeps their ratio).
        from safemon.ecc import ProtectedArray
        from safemon.kernels.backend import Backend

        pw = {k: ProtectedArray.from_host(w, name=k, word_bits=weights_config.word_bits,
                                          backend=Backend.CUPY) for k, w in weights.items()}
        say(f"baseline: three protected forwards, plain and ECC weights in turn {model.label}")
        plain3, ecc3 = _timed_interleaved(
            [lambda: [one() for _ in range(3)],
             lambda: [run_model(layers, pw, dx, vc, "cupy") for _ in range(3)]],
            model_requests, warmup, sync)
        out["model_three_back_to_back"] = _stats(plain3)
        out["model_three_back_to_back_ecc"] = _stats(ecc3)
    say(f"baseline: three channels' captured passes, back to back and side by side {model.label}")
    kept = pw if weights_config.ecc else dw  # the weights as the channels keep them
    serial, side_by_side = _three_captured_passes(cp, layers, kept, dx, vc, model_requests,
                                                  warmup)
    out["model_three_graphs"] = _stats(serial)
    out["model_three_graphs_concurrent"] = _stats(side_by_side)
    biases = [cp.asarray(ly.bias) if ly.bias is not None else None for ly in layers]

    def plain() -> None:
        h = dx
        for ly, b in zip(layers, biases, strict=True):
            h = cp.matmul(h, dw[ly.weight_id])
            launch_epilogue(h, b, ly.act)

    say(f"baseline: unprotected forward with cupy.matmul {model.label}")
    out["model_cupy_matmul"] = _stats(_timed(plain, model_requests, warmup, sync))
    return out


def _three_captured_passes(cp: Any, layers: Sequence[Any], weights: dict[str, Any], x: Any,
                           variant: Any, n: int, warmup: int,
                           priorities: Sequence[int] | None = None,
                           two_done: list[float] | None = None
                           ) -> tuple[list[float], list[float]]:
    """Seconds (wall) of three forward passes as the channels' device steps run them, back
    to back and side by side: each pass, its copy of x and its digests and read-backs
    included, captured as a CUDA graph the way a channel with `graphs` on captures it
    (`safemon.channels.step_graphs`, `safemon.models.forward.queue_pass`: the copy of x, the
    layers, the copy of the output into a slot, the digests), on `weights` as the channels
    keep them (under ECC by default, checked with every use), each with its own page-locked
    read-back rows. Per round, in alternating order: the three graphs launched
    one after another on one stream and waited for once (the first list), and each on its
    own stream, as inline channels run them, waited for together (the second). What the
    host does after the wait runs outside the timed spans: each pass's `finish` (its status
    blocks) and a comparison of its digest frame (output, per-layer ES and outputs, x) with
    the one the first pass gave when run by hand, which every pass must match.

    The first is issue 16's "time the three channels' kernels take back to back": the
    uncaptured forwards (`run_model`) queue their kernels from Python, and at 64×4096
    that queuing, not the GPU, sets their pace.

    `priorities`: the three side-by-side streams' CUDA priorities (None: CUDA's default for
    all three), as `safemon.channels.stream_priority` gives inline channels. `two_done`: a
    list to which each timed side-by-side round appends the seconds until the first two
    passes were done (their streams are waited for first), which is when a 2oo3 quorum of
    inline channels could be answered.

    Raises:
        SafemonError: a pass whose checks failed or whose digests differ.
        UncorrectableError: a weight that fails its ECC check.
    """
    from safemon.channels.step_graphs import StepGraphs
    from safemon.kernels.pinned import lane
    from safemon.models.forward import device_biases, output_columns, queue_pass

    graphs = StepGraphs(capacity=3)
    steps, streams = [], []
    want: Any = None  # the digest frame every pass must give (the first pass by hand)
    for i in range(3):
        stream = (cp.cuda.Stream(non_blocking=True) if priorities is None
                  else cp.cuda.Stream(non_blocking=True, priority=priorities[i]))
        streams.append(stream)
        with stream, lane(("bench-graph", i)):
            biases = device_biases(layers)  # uploaded on the pass's stream, as a channel does
            # the channel's slot in the client's output buffer, which the pass copies into
            slot = cp.empty((x.shape[0], output_columns(layers, weights)), dtype=cp.float32)

            def queue(biases: list[Any] = biases, slot: Any = slot) -> Any:
                xc = cp.empty(x.shape, dtype=cp.float32)
                xc[...] = x  # a channel's copy of x out of the client's buffer
                return queue_pass(layers, weights, xc, variant, biases, out_into=slot,
                                  extra_digests=[xc])

            first = queue().finish()  # by hand first: kernels compiled and loaded
            if first is None:
                raise SafemonError("a baseline pass recomputed a layer (ECC correction)")
            if want is None:
                want = first.digest_frame()
            elif not np.array_equal(first.digest_frame(), want):
                raise SafemonError("the baseline's passes disagree with each other")
            steps.append(graphs.capture(i, stream, queue, keep=(biases, slot)))
    one = cp.cuda.Stream(non_blocking=True)
    out: tuple[list[float], list[float]] = ([], [])
    for r in range(warmup + n):
        for kind in ((0, 1) if r % 2 == 0 else (1, 0)):
            on = [one] * 3 if kind == 0 else streams
            t0 = time.perf_counter()
            for step, stream in zip(steps, on, strict=True):
                step.launch(stream)
            on[0].synchronize()
            on[1].synchronize()
            t_two = time.perf_counter()
            on[2].synchronize()
            t1 = time.perf_counter()
            if kind == 1 and two_done is not None and r >= warmup:
                two_done.append(t_two - t0)
            for i, step in enumerate(steps):
                with lane(("bench-graph", i)):
                    res = step.outputs.finish()
                if res is None or not np.array_equal(res.digest_frame(), want):
                    raise SafemonError("a captured baseline pass failed its checks or gave "
                                       "other digests than the pass run by hand")
            if r >= warmup:
                out[kind].append(t1 - t0)
    return out


def _run_placement(placement: str, work: Path, sizes: Sequence[VoteBenchSize],
                   ops: dict[str, Any], mops: Any, warmup: int, model_requests: int,
                   fault_requests: int, say: Progress, paths: Sequence[str],
                   variant: dict[str, Any]) -> dict[str, Any]:
    import cupy as cp

    from safemon.models import Layer

    cfg = _bench_config(work, "ipc", "cupy", [s.label for s in sizes if s.m * s.n <= 2**18][:1]
                        or ["16x16x16"])
    cfg["name"] = f"bench-rt-{placement}"
    cfg["endpoints"]["runtime_dir"] = str(work / f"rt-{placement}")
    cfg["channels"] = [{"name": f"c{i}", "placement": placement, "variant": variant}
                       for i in range(3)]
    cfg["testing"] = {"fault_injection": True}
    # Item costs at 100 GFLOP/s (the CPU default 0.05 prices a 4096-wide layer at 43 s, so a
    # model request queued behind the slowest channel's previous one would be refused).
    cfg["limits"] = {"min_channel_gflops": 100.0}
    cfg_path = work / f"bench-{placement}.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    res: dict[str, Any] = {"placement": placement, "runs": [], "faults": {}}
    say(f"starting a 2oo3 cupy daemon, {placement} channels")
    with running_daemon(cfg_path, work / f"daemon-{placement}.log", 240.0) as client:
        client.control_timeout_s = 60.0
        # As loaded (the environment's SAFEMON_TIMING__SPIN_S included): the client spins
        # whatever the placement; the daemon (and channel processes) not with stream channels.
        res["client_spin_s"] = client.config.timing.spin_s
        res["spin_s"] = client.config.timing.spin_s if placement != "stream" else 0.0
        clean: dict[str, Any] = {}
        wids = {s.label: client.register_weight(ops[s.label][1]) for s in sizes}
        layers, weights, x_host = mops
        ids = {k: client.register_weight(w) for k, w in weights.items()}
        mid = client.register_model([Layer(ids[ly.weight_id], ly.bias, ly.act) for ly in layers])
        for path in paths:
            client.device_io = path == "cuda-ipc"
            for s in [*sizes, None]:
                label = "model" if s is None else s.label
                dx = cp.asarray(x_host if s is None else ops[s.label][0])
                n = model_requests if s is None else s.requests
                say(f"{placement} {label}: {n} device-resident round trips, {path}")
                rtt, ks, on_device = [], [], True
                for i in range(warmup + n):
                    t0 = time.perf_counter()
                    c = (client.run(mid, dx, timeout=60.0) if s is None
                         else client.matmul(dx, wids[label], timeout=30.0))
                    t1 = time.perf_counter()
                    if i >= warmup:
                        rtt.append(t1 - t0)
                        ks.append(client.last_kernel_seconds or 0.0)
                        on_device = on_device and client.last_request_device
                got = c.get()
                if label in clean and not np.array_equal(got.view(np.uint32),
                                                         clean[label].view(np.uint32)):
                    raise SafemonError(f"{placement} {label}: {path} released other bits than "
                                       f"{paths[0]}")
                clean[label] = got
                if path == "cuda-ipc" and not on_device:
                    raise SafemonError(f"{placement} {label}: requests fell back to host memory "
                                       f"({client.device_io_off_reason})")
                res["runs"].append({
                    "path": path, "request": label, "round_trip": _stats(rtt),
                    "kernel": _stats(ks),
                    "overhead": _stats([max(0.0, r - k) for r, k in zip(rtt, ks, strict=True)])})
        client.device_io = "cuda-ipc" in paths
        say(f"{placement}: bitflip-c injected into c1, {fault_requests} requests per kind")
        for label in [*wids, "model"]:
            wrong = errors = released = 0
            why: dict[str, str] = {}  # error type -> its first message
            for _ in range(fault_requests):
                with contextlib.suppress(SafemonError):  # c1 may be restarting or isolated
                    client.inject("c1", "bitflip-c")
                try:
                    got = (client.run(mid, dx, timeout=60.0) if label == "model" else
                           client.matmul(cp.asarray(ops[label][0]), wids[label], timeout=30.0))
                except SafemonError as exc:
                    errors += 1
                    why.setdefault(type(exc).__name__, str(exc)[:300])
                    continue
                released += 1
                wrong += int(not np.array_equal(got.get().view(np.uint32),
                                                clean[label].view(np.uint32)))
            res["faults"][label] = {"injected": fault_requests, "released": released,
                                    "errors": errors, "wrong_released": wrong,
                                    "error_types": why}
            with contextlib.suppress(SafemonError):
                client.clear_faults()
    return res


def _model_operands(model: ModelShape, rng: np.random.Generator) -> Any:
    from safemon.models import Layer

    scale = np.float32(1.0 / np.sqrt(model.hidden))
    weights = {f"w{i}": (rng.standard_normal((model.hidden, model.hidden), dtype=np.float32) * scale)
               for i in range(model.layers)}
    layers = [Layer(f"w{i}", rng.standard_normal(model.hidden, dtype=np.float32) * np.float32(0.1),
                    "gelu") for i in range(model.layers)]
    x = rng.standard_normal((model.batch, model.hidden), dtype=np.float32)
    return layers, weights, x


def run_runtime_bench(*, sizes: Sequence[VoteBenchSize], model: ModelShape | None = None,
                      placements: Sequence[str] = ("process", "stream"), warmup: int = 10,
                      model_requests: int = 30, fault_requests: int = 5,
                      progress: Progress | None = None, work_dir: Path | None = None,
                      paths: Sequence[str] = PATHS, variant: str = "") -> dict[str, Any]:
    """Run the benchmark (see the module docstring); returns the evidence dict.

    Raises:
        BackendUnavailableError: no CuPy / GPU. ValueError: an unknown placement.
        SafemonError: a daemon that did not come up, or a request not released in the timed
            part (a benchmark never hides a failed request).
    """
    from safemon.kernels.compiler import import_cupy

    cp = import_cupy()
    say = progress or (lambda _s: None)
    for p in placements:
        if p not in PLACEMENTS:
            raise ValueError(f"unknown placement {p!r}; known: {', '.join(PLACEMENTS)}")
    for p in paths:
        if p not in PATHS:
            raise ValueError(f"unknown path {p!r}; known: {', '.join(PATHS)}")
    fields = channel_variant(variant)
    model = model or ModelShape()
    rng = np.random.default_rng(2026)
    ops = {s.label: (rng.standard_normal((s.m, s.k), dtype=np.float32),
                     rng.standard_normal((s.k, s.n), dtype=np.float32)) for s in sizes}
    mops = _model_operands(model, rng)
    ev: dict[str, Any] = {
        "format": FORMAT,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"machine": platform.machine(), "python": platform.python_version(),
                 "cpus": os.cpu_count(), "node": platform.node()},
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "policy": "2oo3", "transport": "ipc", "model": model.label, "warmup": warmup,
        "paths": list(paths),
        "variant": variant or DEFAULT_VARIANT_LABEL,
        "mps": mps_state(),
    }
    ev["baselines"] = _baselines(cp, sizes, ops, model, mops, warmup, model_requests, say, fields)
    ev["placements"] = []
    with tempfile.TemporaryDirectory(prefix="safemon-bench-rt-") as tmp:
        work = Path(work_dir) if work_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for p in placements:
            try:
                ev["placements"].append(_run_placement(p, work, sizes, ops, mops, warmup,
                                                       model_requests, fault_requests, say,
                                                       paths, fields))
            except SafemonError as exc:  # recorded, never hidden: the report names it
                say(f"{p}: failed: {exc}")
                ev.setdefault("failed", {})[p] = str(exc)
    if not ev["placements"]:
        raise SafemonError(f"every placement failed: {ev.get('failed')}")
    return ev


def mps_state(env: Mapping[str, str] | None = None) -> str:
    """"on" when a CUDA MPS control daemon listens where this process's CUDA clients would
    find it (its `control` pipe in `CUDA_MPS_PIPE_DIRECTORY`, default /tmp/nvidia-mps), so
    that the daemon and channels this benchmark starts run under MPS; else "off"."""
    env = os.environ if env is None else env
    pipe_dir = Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    return "on" if (pipe_dir / "control").exists() else "off"


def _us(v: float) -> str:
    return f"{v:,.0f}"


def runtime_markdown(ev: dict[str, Any]) -> str:
    """The evidence as Markdown (µs; ratios against this run's baselines)."""
    b = ev["baselines"]
    lines = [f"Device {ev['device']}, {ev['when']}, CUDA MPS {ev.get('mps', 'not recorded')}, "
             f"2oo3 over {ev['transport']}, channel "
             f"variant {ev.get('variant', 'default')}; paths: "
             f"{', '.join(ev['paths'])} (cuda-ipc: x and outputs in the client's CUDA IPC "
             "buffers, digests over ZeroMQ; host: arrays copied through host memory).",
             "", "| placement | path | request | round trip p50 / p99 (µs) | channel busy p50 | "
             "overhead p50 / p99 | ratio p50 vs baseline | baseline |",
             "|---|---|---|---|---|---|---|---|"]
    for pl in ev["placements"]:
        for r in pl["runs"]:
            where = placement_label(pl)
            head = (f"| {where} | {r['path']} | {r['request']} | "
                    f"{_us(r['round_trip']['p50_us'])} / {_us(r['round_trip']['p99_us'])} | "
                    f"{_us(r['kernel']['p50_us'])} | ")
            if r["request"] != "model":
                d = b["direct"][r["request"]]
                lines.append(head + f"{_us(r['overhead']['p50_us'])} / {_us(r['overhead']['p99_us'])} | "
                             f"{r['round_trip']['p50_us'] / d['p50_us']:.2f}× | direct kernel "
                             f"{_us(d['p50_us'])} |")
                continue
            for name, key in (("3 forwards back to back", "model_three_back_to_back"),
                              ("3 forwards back to back on ECC weights, as the channels run them",
                               "model_three_back_to_back_ecc"),
                              ("3 channels' captured passes back to back (their GPU work)",
                               "model_three_graphs"),
                              ("3 channels' captured passes side by side, one stream each",
                               "model_three_graphs_concurrent"),
                              ("cupy.matmul forward", "model_cupy_matmul")):
                if key in b:  # evidence before 2026-11-25 has no ECC baseline
                    lines.append(head + f"— | {r['round_trip']['p50_us'] / b[key]['p50_us']:.2f}× | "
                                 f"{name} {_us(b[key]['p50_us'])} |")
    lines += ["", "Channel busy: the slowest agreeing channel's `kernel_seconds`, the time it "
              "spent queuing its device step, waiting for it and checking it (its Python "
              "included, the other channels' turns not). Overhead is the round trip less "
              "that, so it leaves out the channels' own host work; the ratio to the direct "
              "kernel leaves out nothing." + (
                  " The captured-pass baselines are the three channels' GPU work alone "
                  "(`_three_captured_passes`); the forwards back to back are queued from "
                  "Python, which at these shapes sets their pace."
                  if "model_three_graphs" in b else ""),
              "", "Faults (bitflip-c injected into c1 before each request):", "",
              "| placement | request | injected | released | errors | wrong released |",
              "|---|---|---|---|---|---|"]
    for pl in ev["placements"]:
        for label, f in pl["faults"].items():
            lines.append(f"| {pl['placement']} | {label} | {f['injected']} | {f['released']} | "
                         f"{f['errors']} | {f['wrong_released']} |")
    lines += [f"\nErrors under faults, {pl['placement']} {label}: {kind}: {text}"
              for pl in ev["placements"] for label, f in pl["faults"].items()
              for kind, text in f.get("error_types", {}).items()]
    lines += [f"\nFailed: {p}: {e}" for p, e in ev.get("failed", {}).items()]
    targets = targets_markdown(ev)
    return "\n".join(lines) + "\n" + (f"\n{targets}" if targets else "")
