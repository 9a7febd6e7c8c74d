"""Multi-GPU deployments measured end to end (issues 18 and 21): round trips, throughput,
the effective HFT the daemon reports, and GPU-wide fault injection, per deployment.

Each `Deployment` starts a real daemon (`safemon run`, channel processes) from one of the
committed configs under configs/multigpu/ (with its GPUs or policy overridden where the
deployment says so, e.g. the single-channel baseline), and this process acts as the app on
`app_gpu`. Measured in the same run, for one shape (default 64×4096×4096, x (M, K) times a
resident W (K, N), float32):

- **Round trip** (one request in flight): send x from the host, receive the released C on
  the host (`host`), and then with C uploaded to the app's GPU (`to_app_gpu`): the path an
  app with host arrays pays today. p50 / p99 over `requests` requests after `warmup`.
- **Throughput**: `depth` requests kept in flight; released requests per second, as a
  ratio to the kernel (and the forward pass) called directly in this process on one GPU,
  unprotected and protected, measured in the same run (`direct`). The 1oo1D deployment
  (one channel through the daemon) is measured too, as a row of its own.
- **Whole model** (issue 16's benchmark): a 4-layer MLP, 4096 wide, batch 64, as one
  voted request (`Client.run`'s message): sequential round trips and throughput as above.
- **Peer copy**: the released C's size moved from each channel GPU to the app's GPU with
  `safemon.transport.peer_copy.copy_to_device` against the host round trip it replaces
  (`host_staged_copy`), and whether the pair has a direct P2P path.
- **Faults**: after the measurements, `safemon.channels.gpu_faults.run_fault_sequence`
  faults the deployment's GPUs one after the other (every channel on the GPU at once) and
  records what was released or withheld and how the daemon degraded. Deployments with
  faults run with `actions.restart: false`, so a channel that faults stays out (a GPU fault
  is permanent; an injected fault would not survive a restart).

Every released C is compared bit for bit with the first one of its deployment; a mismatch
or an unreleased request in the measurement phase raises (a benchmark never hides one).

`python -m safemon.bench.multigpu SET --json F --markdown F` runs the set "two"
(issue 18: GPUs 0 and 1, app on 0) or "three" (issue 21: channels on GPUs 1-3, app on 0).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from safemon.bench.vote import running_daemon
from safemon.errors import SafemonError
from safemon.transport import messages as msgs

__all__ = ["FORMAT", "SETS", "Deployment", "deployment_config", "main", "run_bench"]

FORMAT = "safemon.bench_multigpu/1"
CONFIGS = Path(__file__).resolve().parent.parent.parent / "configs" / "multigpu"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Deployment:
    """One deployment of a run.

    Attributes:
        label: what the tables call it.
        source: the config file it starts from (configs/multigpu/*.yaml).
        gpus: each channel's GPU, overriding the file's (same length as its channels,
            or 1 with `single`); None keeps the file's.
        single: keep only the first channel under 1oo1D (the unprotected-by-redundancy
            single-channel baseline).
        baseline: the single-channel deployment; the direct calls (the throughput
            baselines, `safemon.bench.multigpu_report`) run on its GPU.
        measure: measure round trips and throughput (False: faults only).
        faults: (fault kind, GPU index) pairs, applied one after the other, or None.
    """

    label: str
    source: str
    gpus: tuple[int, ...] | None = None
    single: bool = False
    baseline: bool = False
    measure: bool = True
    faults: tuple[tuple[str, int], ...] | None = None


def _two() -> tuple[Deployment, ...]:
    return (
        Deployment("1oo1D, one channel on GPU 0", "1oo2d-2gpu", (0,), single=True,
                   baseline=True),
        Deployment("1oo2D, both channels on GPU 0", "1oo2d-2gpu", (0, 0)),
        Deployment("1oo2D, one channel per GPU", "1oo2d-2gpu", faults=(("stuck", 1),)),
        Deployment("2oo3 over 2 GPUs (0, 1, 1)", "2oo3-2gpu", faults=(("stuck", 1),)),
        Deployment("1oo3D over 2 GPUs (0, 1, 1)", "hft2-2gpu",
                   faults=(("stuck", 0), ("stuck", 1))),
    )


def _three() -> tuple[Deployment, ...]:
    return (
        Deployment("1oo1D, one channel on GPU 1", "2oo3-3gpu", (1,), single=True,
                   baseline=True),
        # 2oo3: a stuck GPU is outvoted; a bit flip on a second GPU then goes SAFE.
        Deployment("2oo3, GPUs 1, 2, 3", "2oo3-3gpu",
                   faults=(("stuck", 1), ("bitflip-c", 2))),
        # 1oo3D: a transient flip is withheld and diagnosed (nobody isolated); then two
        # stuck GPUs are isolated one after the other (1oo2D, 1oo1D).
        Deployment("1oo3D, GPUs 1, 2, 3", "hft2-3gpu",
                   faults=(("bitflip-c", 3), ("stuck", 1), ("stuck", 2))),
    )


def _two_bitflip() -> tuple[Deployment, ...]:
    """GPU-wide bit flips (transient) on the 2-GPU deployments; faults only."""
    return (
        Deployment("1oo2D, one channel per GPU", "1oo2d-2gpu", measure=False,
                   faults=(("bitflip-c", 1), ("stuck", 1))),
        Deployment("2oo3 over 2 GPUs (0, 1, 1)", "2oo3-2gpu", measure=False,
                   faults=(("bitflip-c", 0), ("bitflip-c", 1))),
        Deployment("1oo3D over 2 GPUs (0, 1, 1)", "hft2-2gpu", measure=False,
                   faults=(("bitflip-c", 1), ("bitflip-c", 0))),
    )


#: The deployment sets: "two" and "two-bitflip" need 2 visible GPUs, "three" needs 4 (app
#: on GPU 0).
SETS: dict[str, Callable[[], tuple[Deployment, ...]]] = {
    "two": _two, "two-bitflip": _two_bitflip, "three": _three}


def deployment_config(d: Deployment, work: Path, slug: str, backend: str = "cupy"
                      ) -> dict[str, Any]:
    """The config dict `d` runs with: its source file, overridden as `d` says, with private
    ipc endpoints under `work`, an ephemeral metrics port, JSON logs and generous deadlines
    (the benchmark must not provoke faults itself). `backend` "numpy" (a smoke test of the
    harness on a machine without GPUs) puts every channel on the host CPU (gpu null).

    Raises:
        ValueError: `gpus` does not fit the channels.
    """
    data: dict[str, Any] = yaml.safe_load((CONFIGS / f"{d.source}.yaml").read_text())
    chans = data["channels"]
    if d.single:
        data["policy"] = "1oo1D"
        data.pop("degraded_policy", None)
        chans = data["channels"] = chans[:1]
    if d.gpus is not None:
        if len(d.gpus) != len(chans):
            raise ValueError(f"{d.label}: {len(d.gpus)} GPUs for {len(chans)} channels")
        for ch, g in zip(chans, d.gpus, strict=True):
            ch["gpu"] = g
    if backend == "numpy":
        data["backend"] = "numpy"
        for ch in chans:
            ch["gpu"] = None
    data["name"] = slug
    data["endpoints"] = {"runtime_dir": str(work / f"rt-{slug}"),
                         "ingress": "ipc://{runtime_dir}/in.sock",
                         "control": "ipc://{runtime_dir}/ctl.sock",
                         "events": "ipc://{runtime_dir}/ev.sock",
                         "channel_base": "ipc://{runtime_dir}/ch"}
    data["metrics"] = {"port": 0}
    # Admission prices an item at its work in whole tiles / min_channel_gflops; the CPU
    # default (0.025 GFLOP/s) would refuse a 64×4096×4096 product as 86 s of work. 100 GFLOP/s is far below what
    # any channel here sustains, so nothing is refused for cost and nothing is blamed.
    data["limits"] = {"min_channel_gflops": 100.0}
    data["logging"] = {"format": "json", "level": "warning"}
    data["timing"] = {"request_deadline_s": 10.0, "dti_s": 5.0, "selftest_deadline_s": 4.5,
                      "ftti_s": 20.0, "heartbeat_timeout_s": 5.0, "heartbeat_interval_s": 0.1,
                      "dti_jitter": 0.0}
    if d.faults is not None:
        data["testing"] = {"fault_injection": True}
        data["actions"] = {**data.get("actions", {}), "restart": False}
        data["timing"]["dti_s"] = 60.0  # no periodic self-test consumes a transient flip
        data["timing"]["ftti_s"] = 70.0
    return data


@contextlib.contextmanager
def _daemon(config_path: Path, log_path: Path, timeout_s: float) -> Iterator[Any]:
    """`bench.vote.running_daemon`, with the control timeout raised once every channel is UP
    (registering 64 MiB weights on every channel)."""
    with running_daemon(config_path, log_path, timeout_s) as client:
        client.control_timeout_s = 60.0
        yield client


def _stats(seconds: Sequence[float]) -> dict[str, float]:
    a = np.asarray(seconds, dtype=np.float64) * 1e6
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)),
            "min_us": float(a.min()), "n": int(a.size)}


def _round_trips(client: Any, raw: Any, x: npt.NDArray[np.float32], wid: str, cp: Any,
                 app_gpu: int, n: int, warmup: int) -> dict[str, Any]:
    host: list[float] = []
    to_app: list[float] = []
    first: npt.NDArray[np.float32] | None = None
    for i in range(warmup + n):
        t0 = time.perf_counter()
        seq = raw.send(x, wid)
        got, _ks, c = raw.recv()
        t1 = time.perf_counter()
        dc = None
        if cp is not None:
            with cp.cuda.Device(app_gpu):
                dc = cp.asarray(c)
                cp.cuda.get_current_stream().synchronize()
        t2 = time.perf_counter()
        if got != seq:
            raise SafemonError(f"reply for request {got}, expected {seq}")
        if first is None:
            first = np.array(c, copy=True)
        elif not np.array_equal(first.view(np.uint32), np.asarray(c).view(np.uint32)):
            raise SafemonError("the same request released two different results")
        del dc
        if i >= warmup:
            host.append(t1 - t0)
            to_app.append(t2 - t0)
    return {"host": _stats(host), "to_app_gpu": _stats(to_app)}


def _device_round_trips(client: Any, cp: Any, x: npt.NDArray[np.float32], wid: str,
                        app_gpu: int, n: int, warmup: int, ref: npt.NDArray[np.float32],
                        model: tuple[str, npt.NDArray[np.float32]] | None) -> dict[str, Any]:
    """Round trips of device-resident requests (issue 16's CUDA IPC path): x on the app's
    GPU in, the released C on the app's GPU out, no host round trip; the channels on other
    GPUs read x and write their slot peer to peer. Records which path the client took
    ("cuda-ipc", or "host" with the reason it fell back, e.g. under 1oo1D)."""
    out: dict[str, Any] = {}
    jobs: list[tuple[str, Callable[[Any], Any], npt.NDArray[np.float32], Any]] = [
        ("matmul", lambda dx: client.matmul(dx, wid, timeout=30.0), x, ref)]
    if model is not None:
        mid, mx = model
        jobs.append(("model", lambda dx: client.run(mid, dx, timeout=60.0), mx, None))
    for name, call, host_x, expect in jobs:
        with cp.cuda.Device(app_gpu):
            dx = cp.asarray(host_x)
            times: list[float] = []
            device = True
            first = None
            for i in range(warmup + n):
                t0 = time.perf_counter()
                got = call(dx)
                cp.cuda.get_current_stream().synchronize()
                t1 = time.perf_counter()
                device = device and client.last_request_device
                if int(got.device.id) != app_gpu:
                    raise SafemonError(f"the released result is on GPU {got.device.id}")
                bits = got.get()
                first = bits if first is None else first
                want = expect if expect is not None else first
                if not np.array_equal(bits.view(np.uint32), np.asarray(want).view(np.uint32)):
                    raise SafemonError(f"device-resident {name} released other bits")
                if i >= warmup:
                    times.append(t1 - t0)
        out[name] = {"round_trip": _stats(times),
                     "path": "cuda-ipc" if device else f"host ({client.device_io_off_reason})"}
    return out


def _throughput(send: Callable[[], int], recv: Callable[[], Any], n: int, depth: int) -> float:
    """Released requests per second with `depth` kept in flight (n requests)."""
    sent = done = 0
    t0 = time.perf_counter()
    while sent < min(depth, n):
        send()
        sent += 1
    while done < n:
        recv()
        done += 1
        if sent < n:
            send()
            sent += 1
    return n / (time.perf_counter() - t0)


def _send_model(raw: Any, x: npt.NDArray[np.float32], model_id: str) -> int:
    """A whole-model request (`Client.run`'s message) on `raw`'s socket; returns its seq."""
    from safemon.transport import Kind, encode, send_message

    raw._seq += 1
    send_message(raw._sock, encode(Kind.REQUEST, epoch=raw._epoch, seq=raw._seq,
                                   meta=msgs.ModelRequest(model_id=model_id,
                                                              deadline_ms=30000.0).to_meta(),
                                   arrays=(x,)))
    return int(raw._seq)


def _register_model(client: Any, dims: tuple[int, int, int]
                    ) -> tuple[str, npt.NDArray[np.float32]]:
    """Register the benchmark MLP (`dims` = (batch, hidden, layers)); (model id, its x)."""
    from safemon.bench.runtime import ModelShape, _model_operands
    from safemon.models import Layer

    layers, weights, x = _model_operands(ModelShape(*dims), np.random.default_rng(2027))
    ids = {k: client.register_weight(w) for k, w in weights.items()}
    mid = client.register_model([Layer(ids[ly.weight_id], ly.bias, ly.act)
                                 for ly in layers])
    return str(mid), x


def _model(client: Any, raw: Any, n: int, warmup: int, depth: int,
           dims: tuple[int, int, int]) -> dict[str, Any]:
    """The whole-model benchmark of `safemon.bench.runtime` (a 4-layer MLP,
    4096 wide, batch 64, gelu, biases, by default; `dims` = (batch, hidden, layers); one
    vote per forward pass): sequential round trips (host x in, host output back) and
    released requests per second at `depth`."""
    from safemon.bench.runtime import ModelShape

    shape = ModelShape(*dims)
    mid, x = _register_model(client, dims)
    rtt: list[float] = []
    first: npt.NDArray[np.float32] | None = None
    for i in range(warmup + n):
        t0 = time.perf_counter()
        seq = _send_model(raw, x, mid)
        got, _ks, out = raw.recv()
        t1 = time.perf_counter()
        if got != seq:
            raise SafemonError(f"reply for request {got}, expected {seq}")
        if first is None:
            first = np.array(out, copy=True)
        elif not np.array_equal(first.view(np.uint32), np.asarray(out).view(np.uint32)):
            raise SafemonError("the same model request released two different outputs")
        if i >= warmup:
            rtt.append(t1 - t0)
    assert first is not None
    per_s = _throughput(lambda: _send_model(raw, x, mid), raw.recv, n, depth)
    return {"label": shape.label, "round_trip": _stats(rtt), "per_s": per_s,
            "released_sha256": hashlib.sha256(first.tobytes()).hexdigest()}


def _peer_copies(cp: Any, gpus: Sequence[int], app_gpu: int, shape: tuple[int, int],
                 n: int) -> list[dict[str, Any]]:
    from safemon.transport.peer_copy import copy_to_device, host_staged_copy, peer_path

    out = []
    for g in sorted(set(gpus) - {app_gpu}):
        with cp.cuda.Device(g):
            src = cp.random.default_rng(1).standard_normal(shape, dtype=cp.float32)
        times: dict[str, list[float]] = {"peer": [], "host": []}
        for i in range(n + 5):
            for name, fn in (("peer", copy_to_device), ("host", host_staged_copy)):
                t0 = time.perf_counter()
                fn(src, app_gpu)
                t1 = time.perf_counter()
                if i >= 5:
                    times[name].append(t1 - t0)
        want = cp.asnumpy(src).tobytes()
        for fn in (copy_to_device, host_staged_copy):
            dst = fn(src, app_gpu)
            if dst.device.id != app_gpu or cp.asnumpy(dst).tobytes() != want:
                raise SafemonError(f"{fn.__name__} from GPU {g} to GPU {app_gpu} changed the data")
        peer, host = _stats(times["peer"]), _stats(times["host"])
        out.append({"from": g, "to": app_gpu, "path": peer_path(g, app_gpu),
                    "bytes": int(src.nbytes), "peer": peer, "host_staged": host,
                    "host_over_peer": host["p50_us"] / peer["p50_us"]})
    return out


def _direct(cp: Any, x: npt.NDArray[np.float32], w: npt.NDArray[np.float32], gpu: int,
            n: int, warmup: int, model_dims: tuple[int, int, int] | None) -> dict[str, Any]:
    """The kernel called in this process on `gpu` with host x in and host C out (what an
    app pays with no daemon and no redundancy): the unprotected kernel ("unprotected") and
    the channels' default variant (`VariantConfig()`, tile auto: "protected", its label under
    "protected_variant"); with `model_dims`, the whole MLP forward the same two ways
    (`cupy.matmul` + epilogue, and `safemon.models.run_model`). Requests per second =
    1 / p50."""
    from safemon.config import VariantConfig
    from safemon.kernels.api import run_variant

    out: dict[str, Any] = {"gpu": gpu, "protected_variant": default_variant_label()}
    with cp.cuda.Device(gpu):
        dw = cp.asarray(w)
        for name, vc in (("unprotected", VariantConfig(checksum=None, level=None)),
                         ("protected", VariantConfig())):
            variant = vc.to_variant(x.shape[0], w.shape[1], x.shape[1])
            times = []
            for i in range(warmup + n):
                t0 = time.perf_counter()
                c = run_variant(cp.asarray(x), dw, variant, "cupy").c.get()
                t1 = time.perf_counter()
                del c
                if i >= warmup:
                    times.append(t1 - t0)
            st = _stats(times)
            out[name] = {**st, "per_s": 1e6 / st["p50_us"]}
        if model_dims is not None:
            out.update(_direct_model(cp, model_dims, n, warmup))
    return out


def default_variant_label() -> str:
    """The channels' default variant as the reports name it, e.g. "ones/T fma"."""
    from safemon.config import VariantConfig

    vc = VariantConfig()
    return f"{vc.checksum}/{vc.level} {vc.mode}"


def _direct_model(cp: Any, dims: tuple[int, int, int], n: int, warmup: int) -> dict[str, Any]:
    from safemon.bench.runtime import ModelShape, _model_operands
    from safemon.config import VariantConfig
    from safemon.kernels.model_gpu import launch_epilogue
    from safemon.models import run_model

    layers, weights, x = _model_operands(ModelShape(*dims), np.random.default_rng(2027))
    dw = {k: cp.asarray(v) for k, v in weights.items()}
    biases = [None if ly.bias is None else cp.asarray(ly.bias) for ly in layers]

    def plain() -> Any:
        h = cp.asarray(x)
        for ly, b in zip(layers, biases, strict=True):
            h = cp.matmul(h, dw[ly.weight_id])
            launch_epilogue(h, b, ly.act)
        return h.get()

    def protected() -> Any:
        return run_model(layers, dw, cp.asarray(x), VariantConfig(), "cupy")

    out: dict[str, Any] = {}
    for name, fn in (("model unprotected (cupy.matmul)", plain), ("model protected", protected)):
        times = []
        for i in range(warmup + n):
            t0 = time.perf_counter()
            fn()
            cp.cuda.get_current_stream().synchronize()
            t1 = time.perf_counter()
            if i >= warmup:
                times.append(t1 - t0)
        st = _stats(times)
        out[name] = {**st, "per_s": 1e6 / st["p50_us"]}
    return out


def _devices(cp: Any) -> list[dict[str, Any]]:
    from safemon.gpu_identity import cuda_uuid

    rt = cp.cuda.runtime
    return [{"index": i, "name": rt.getDeviceProperties(i)["name"].decode(),
             "uuid": cuda_uuid(i)} for i in range(rt.getDeviceCount())]


def _run_one(d: Deployment, idx: int, work: Path, x: npt.NDArray[np.float32],
             w: npt.NDArray[np.float32], cp: Any, app_gpu: int, requests: int, warmup: int,
             depth: int, say: Progress, with_model: tuple[int, int, int] | None
             ) -> dict[str, Any]:
    from safemon.bench.vote import _RawRequester
    from safemon.channels.gpu_faults import hardware_from_status, run_fault_sequence

    data = deployment_config(d, work, f"mgpu-{idx}", "numpy" if cp is None else "cupy")
    path = work / f"mgpu-{idx}.yaml"
    path.write_text(yaml.safe_dump(data))
    gpus = [ch["gpu"] for ch in data["channels"]]
    say(f"[{d.label}] starting {data['policy']} on GPUs {gpus}")
    t_start = time.perf_counter()
    with _daemon(path, work / f"mgpu-{idx}.log", 300.0) as client:
        st = client.status()
        rec: dict[str, Any] = {
            "label": d.label, "config": f"configs/multigpu/{d.source}.yaml",
            "policy": data["policy"], "gpus": gpus, "baseline": d.baseline,
            "start_s": time.perf_counter() - t_start,
            "hft_declared": st["hft_declared"], "hft_effective": st["hft_effective"],
            "hft_hardware": st["hft_hardware"], "hft_reason": st["hft_reason"]}
        wid = client.register_weight(w)
        ref = client.matmul(x, wid, timeout=30.0)
        rec["released_sha256"] = hashlib.sha256(ref.tobytes()).hexdigest()
        if d.measure:
            raw = _RawRequester(client)
            try:
                say(f"[{d.label}] {requests} round trips, then {requests} with {depth} in flight")
                rec["round_trip"] = _round_trips(client, raw, x, wid, cp, app_gpu, requests, warmup)
                rec["per_s"] = _throughput(lambda: raw.send(x, wid), raw.recv, requests, depth)
                if with_model is not None and data["policy"] != "1oo1D":
                    # (the daemon refuses whole-model requests under 1oo1D)
                    say(f"[{d.label}] whole-model requests")
                    rec["model"] = _model(client, raw, requests, warmup, depth, with_model)
            finally:
                raw.close()
            if cp is not None:
                say(f"[{d.label}] device-resident round trips (x and C on GPU {app_gpu})")
                model = (None if with_model is None or data["policy"] == "1oo1D"
                         else _register_model(client, with_model))
                rec["device"] = _device_round_trips(client, cp, x, wid, app_gpu, requests,
                                                    warmup, ref, model)
        if d.faults is not None:
            hardware = hardware_from_status(st)
            planned = deployment_config(d, work, "plan")["channels"]  # the GPUs, on numpy too
            by_gpu = {ch["gpu"]: hardware[ch["name"]] for ch in planned}
            say(f"[{d.label}] GPU-wide faults {list(d.faults)}")
            steps = run_fault_sequence(client, hardware, [(by_gpu[g], k) for k, g in d.faults],
                                       x, wid, ref, timeout=30.0)
            rec["faults"] = [{"gpu": g, **dataclasses.asdict(s)}
                             for (_k, g), s in zip(d.faults, steps, strict=True)]
    return rec


def run_bench(deployments: Sequence[Deployment], *, shape: tuple[int, int, int] = (64, 4096, 4096),
              requests: int = 100, warmup: int = 10, depth: int = 8, app_gpu: int = 0,
              progress: Progress | None = None, work_dir: Path | None = None,
              backend: str = "cupy", model: bool | None = None,
              model_dims: tuple[int, int, int] = (64, 4096, 4),
              checkpoint: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run `deployments` (see the module docstring); returns the evidence dict.

    `backend` "numpy" runs the same harness with every channel on the host CPU and no app
    GPU (no peer copies, `to_app_gpu` = `host`): a smoke test of the harness, not evidence.
    `model` adds the whole-model benchmark to every measured deployment (None: with the
    CuPy backend only; a 4096-wide MLP is far too slow for the NumPy reference), an MLP of
    `model_dims` = (batch, hidden, layers).
    `checkpoint` is called with the evidence so far after each deployment (so a run cut
    short still leaves what it measured).

    Raises:
        SafemonError: a daemon did not come up, or a measured request was not released or
            released two different results.
        BackendUnavailableError: no CuPy / GPU.
    """
    from safemon.kernels.compiler import import_cupy

    say = progress or (lambda _s: None)
    cp = import_cupy() if backend == "cupy" else None
    model = cp is not None if model is None else model
    m, n, k = shape
    rng = np.random.default_rng(2026)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    ev: dict[str, Any] = {
        "format": FORMAT, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"node": platform.node(), "python": platform.python_version()},
        "backend": backend, "devices": _devices(cp) if cp is not None else [],
        "app_gpu": app_gpu, "shape": f"{m}x{n}x{k}",
        "requests": requests, "warmup": warmup, "depth": depth, "deployments": []}
    all_gpus = [dev["index"] for dev in ev["devices"]]
    say("peer copies of the released C to the app's GPU")
    ev["peer_copies"] = _peer_copies(cp, all_gpus, app_gpu, (m, n), requests) if cp else []
    if cp is not None and any(d.measure for d in deployments):
        base = next((d for d in deployments if d.baseline), None)
        gpu = (base.gpus or (app_gpu,))[0] if base is not None else app_gpu
        say(f"the kernel called directly on GPU {gpu}")
        ev["direct"] = _direct(cp, x, w, gpu, requests, warmup, model_dims if model else None)
    with tempfile.TemporaryDirectory(prefix="safemon-mgpu-") as tmp:
        work = Path(work_dir) if work_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for i, d in enumerate(deployments):
            ev["deployments"].append(_run_one(d, i, work, x, w, cp, app_gpu, requests, warmup,
                                              depth, say, model_dims if model else None))
            ev["same_product_everywhere"] = len({r["released_sha256"]
                                                 for r in ev["deployments"]}) == 1
            ev["same_model_output_everywhere"] = len({r["model"]["released_sha256"]
                                                      for r in ev["deployments"]
                                                      if "model" in r}) <= 1
            if checkpoint is not None:
                checkpoint(ev)
    return ev


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: run a set; exit 0 when done, 1 when the run failed (SafemonError)."""
    p = argparse.ArgumentParser(prog="python -m safemon.bench.multigpu")
    p.add_argument("set", choices=sorted(SETS))
    p.add_argument("--requests", type=int, default=100, help="timed requests per figure")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--app-gpu", type=int, default=0)
    p.add_argument("--json", dest="json_file", required=True)
    p.add_argument("--markdown", required=True)
    p.add_argument("--work-dir", default=None, help="keep configs and daemon logs here")
    p.add_argument("--shape", default="64x4096x4096", help="MxNxK (default: %(default)s)")
    p.add_argument("--backend", default="cupy", choices=("cupy", "numpy"),
                   help="numpy: smoke-test the harness without GPUs (not evidence)")
    a = p.parse_args(argv)
    from safemon.bench.multigpu_report import markdown

    def write(ev: dict[str, Any]) -> None:
        Path(a.json_file).write_text(json.dumps(ev, indent=1) + "\n")
        Path(a.markdown).write_text(markdown(ev))

    try:
        m, n, k = (int(v) for v in a.shape.split("x"))
        ev = run_bench(SETS[a.set](), shape=(m, n, k), requests=a.requests, warmup=a.warmup,
                       depth=a.depth,
                       app_gpu=a.app_gpu, progress=lambda s: print(s, flush=True),
                       work_dir=Path(a.work_dir) if a.work_dir else None, backend=a.backend,
                       checkpoint=write)
    except SafemonError as exc:
        print(f"multigpu bench failed: {exc}", file=sys.stderr)
        return 1
    write(ev)
    print(markdown(ev))
    return 0


if __name__ == "__main__":
    sys.exit(main())
