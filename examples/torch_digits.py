"""A real PyTorch model protected by safemon: a small CNN, a transformer-style block and an
`nn.TransformerEncoderLayer` model on scikit-learn's digits, through a 2oo3 daemon with
faults injected into one channel.

    pip install -e '.[torch]'
    python examples/torch_digits.py                     # CPU: NumPy backend
    python examples/torch_digits.py --device cuda       # GPU: the CuPy backend
    python examples/torch_digits.py --layer-bench 4096  # + one 64×4096×4096 layer timed
    python examples/torch_digits.py --models encoder    # one model (cnn, transformer, encoder)

The models: "cnn" (two convolutions and a two-layer head), "transformer" (one pre-norm block
written by hand: its projections and feed-forward are nn.Linear modules, its attention
scores, softmax and norms PyTorch's, 5 requests per forward) and "encoder" (an
nn.Sequential of Flatten, Linear(64, 8·64), Unflatten to 8 tokens, one pre-norm
nn.TransformerEncoderLayer, Flatten and Linear(8·64, 10): ONE whole-model request per
forward, in which the channels also compute the layer norms, the attention scores and
softmax and the residual adds, voted with the rest).

What it does, for each model:
1. trains it in a few seconds (Adam, cross-entropy) on 70 % of the 1,797 digits;
2. starts a safemon daemon in a child process (the embedded 2oo3 default, or --config)
   and protects the trained model with `safemon.torch.protect` (printing what it protected);
3. clean: accuracy and per-batch latency (p50/p99, batch --batch) of the plain PyTorch
   model and of the protected one, interleaved on the same inputs and device;
4. faults: before every batch a permanent stuck-at fault ("stuck": bit 30 of every element
   of every product) is injected into channel 1 (when it is up again after being outvoted
   and restarted). Reported: the protected model's accuracy, the batches refused with a
   typed error, and the wrong outputs released: every protected module's output is checked
   against `reference_forward` on its input (bit for bit) — this must be 0;
5. unprotected with faults: the plain model with the same stuck-at bit forced on the output
   of every Linear/Conv2d layer, i.e. what the application gets from the faulty GPU alone.

The report (JSON) goes to --out; a table goes to stdout.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from safemon.client import Client
from safemon.config import load_config
from safemon.demo.runner import _daemon, demo_config
from safemon.errors import SafemonError
from safemon.torch import (
    ProtectedConv2d,
    ProtectedEncoderLayer,
    ProtectedLinear,
    ProtectedSequence,
    protect,
    report_of,
)

#: Timing overrides for the CPU variant (see `main`).
CPU_TIMING = {"SAFEMON_TIMING__REQUEST_DEADLINE_S": "3.0",
              "SAFEMON_TIMING__DTI_S": "5.0",
              "SAFEMON_TIMING__SELFTEST_DEADLINE_S": "4.0",
              "SAFEMON_TIMING__HEARTBEAT_TIMEOUT_S": "5.0",
              "SAFEMON_TIMING__FTTI_S": "10.0"}
#: Timing overrides for the GPU variant: the first request of a new model shape may wait for
#: kernel compiles in every channel at once; the default 0.25 s budget would call that a
#: deadline miss of every channel (SAFE). A bound, not a wait: latency is unchanged.
GPU_TIMING = {"SAFEMON_TIMING__REQUEST_DEADLINE_S": "5.0",
              "SAFEMON_TIMING__SELFTEST_DEADLINE_S": "0.5"}
PROTECTED = (ProtectedLinear, ProtectedSequence, ProtectedConv2d, ProtectedEncoderLayer)
FAULTY_CHANNEL_INDEX = 1


class SmallCNN(nn.Module):
    """Two 3×3 convolutions and a two-layer head on 8×8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(), nn.AvgPool2d(2), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(32 * 16, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x))
        return out


def encoder_model(d: int = 64, heads: int = 4) -> nn.Sequential:
    """The 8 rows of a digit as 8 tokens of d (Flatten, Linear(64, 8·d), Unflatten), one
    pre-norm nn.TransformerEncoderLayer (feed-forward 4·d, ReLU, no dropout) and a linear
    head over the 8 tokens flattened: `safemon.torch.protect` folds the whole Sequential
    after the first Flatten into one request. ReLU rather than tanh-GELU: in eval mode
    PyTorch's fused encoder path computes an nn.GELU(approximate="tanh") as the exact (erf)
    GELU, so the plain model would not compute what it was trained with."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 8 * d), nn.Unflatten(1, (8, d)),
        nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="relu",
                                   batch_first=True, norm_first=True),
        nn.Flatten(), nn.Linear(8 * d, 10))


class TransformerBlock(nn.Module):
    """One pre-norm transformer block over the 8 rows of a digit (8 tokens of 8 pixels):
    token embedding, fused QKV projection, scaled-dot-product attention, output
    projection, and a GELU feed-forward as an nn.Sequential (one whole-model request)."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Linear(8, d)
        self.pos = nn.Parameter(torch.zeros(8, d))
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d, d))
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.reshape(x.shape[0], 8, 8)) + self.pos
        b, t, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).reshape(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2))  # scores: not protected
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        h = h + self.ffn(self.norm2(h))
        out: torch.Tensor = self.head(h.mean(dim=1))
        return out


#: The models `--models` may name, in the default order.
MAKERS: dict[str, Callable[[], nn.Module]] = {
    "cnn": SmallCNN, "transformer": TransformerBlock, "encoder": encoder_model}


def load_digits_split(device: torch.device) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test): images (N, 1, 8, 8) float32 in [0, 1]."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(data.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    cut = int(0.7 * len(y))
    tr, te = perm[:cut], perm[cut:]
    return tuple(t.to(device) for t in (x[tr], y[tr], x[te], y[te]))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int) -> float:
    """Adam on cross-entropy, batch 64; returns the seconds it took."""
    t0 = time.perf_counter()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(64):
            opt.zero_grad()
            F.cross_entropy(model(x[idx.to(x.device)]), y[idx.to(x.device)]).backward()
            opt.step()
    model.eval()
    return time.perf_counter() - t0


def batches(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def stuck_outputs(model: nn.Module) -> Iterator[None]:
    """The faulty channel's stuck-at fault applied to the plain model: bit 30 of every
    element of every Linear/Conv2d output forced to the complement of its value in
    element 0 (as `safemon.channels.faults.force_stuck` does to a channel's C)."""

    def hook(_m: nn.Module, _args: Any, out: torch.Tensor) -> torch.Tensor:
        bits = out.contiguous().view(torch.int32)
        mask = 1 << 30
        if int(bits.reshape(-1)[0]) & mask:
            return (bits & ~mask).view(torch.float32)
        return (bits | mask).view(torch.float32)

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if type(m) in (nn.Linear, nn.Conv2d)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def checked_outputs(model: nn.Module, variant: Any, counts: dict[str, int]) -> Iterator[None]:
    """Count every released output of a protected module and the ones that differ from
    `reference_forward` on the same input (bit for bit): counts['released'/'wrong']."""

    def hook(m: Any, args: Any, out: torch.Tensor) -> None:
        ref = m.reference(args[0], variant)
        got = out.detach().to("cpu").numpy()
        counts["released"] += 1
        if got.shape != ref.shape or not np.array_equal(got.view(np.uint32), ref.view(np.uint32)):
            counts["wrong"] += 1

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, PROTECTED)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def percentiles_ms(seconds: list[float]) -> dict[str, float]:
    p50, p99 = np.percentile(np.asarray(seconds) * 1e3, [50, 99])
    return {"p50": float(p50), "p99": float(p99)}


def accuracy(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor,
             size: int) -> float:
    correct = 0
    with torch.inference_mode():
        for sl in batches(len(y), size):
            correct += int((fn(x[sl]).argmax(1) == y[sl]).sum())
    return correct / len(y)


def timed(plain: nn.Module, protected: nn.Module, x: torch.Tensor, reps: int,
          device: torch.device) -> dict[str, Any]:
    """Interleaved per-batch latency of the plain and the protected model on the same batch."""
    times: dict[str, list[float]] = {"pytorch": [], "safemon": []}
    with torch.inference_mode():
        for i in range(reps + 5):
            for name, model in (("pytorch", plain), ("safemon", protected)):
                sync(device)
                t0 = time.perf_counter()
                model(x)
                sync(device)
                if i >= 5:  # warm-up left out
                    times[name].append(time.perf_counter() - t0)
    out: dict[str, Any] = {k: percentiles_ms(v) for k, v in times.items()}
    out["ratio_p50"] = out["safemon"]["p50"] / out["pytorch"]["p50"]
    out["batch"], out["reps"] = int(x.shape[0]), reps
    return out


def wait_all_up(client: Client, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            st = client.status()
            if st["mode"] == "NORMAL" and all(c["state"] == "UP" for c in st["channels"]):
                return True
        except SafemonError:
            pass
        time.sleep(0.2)
    return False


def faulty_pass(model: nn.Module, client: Client, channel: str, x: torch.Tensor,
                y: torch.Tensor, size: int, variant: Any) -> dict[str, Any]:
    """The protected model with the stuck-at fault kept injected into `channel`."""
    counts = {"released": 0, "wrong": 0}
    injected = refused = correct = 0
    # Why batches were refused (error type and message, counted), so that a run whose
    # refusals were not expected says what the daemon answered.
    reasons: collections.Counter[str] = collections.Counter()
    with torch.inference_mode(), checked_outputs(model, variant, counts):
        for sl in batches(len(y), size):
            try:
                client.inject(channel, "stuck")
                injected += 1
            except SafemonError:
                pass  # outvoted earlier: restarting or isolated, nothing to inject into
            try:
                correct += int((model(x[sl]).argmax(1) == y[sl]).sum())
            except SafemonError as exc:
                refused += len(y[sl])
                reasons[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1
    client.clear_faults()
    with contextlib.suppress(SafemonError):
        # The operator's step: re-admit a channel isolated after too many restarts (and
        # leave SAFE, were it entered), so that the next model starts from NORMAL.
        client.reset()
    return {"accuracy": correct / len(y), "samples_refused": refused,
            "faults_injected": injected, "protected_outputs_released": counts["released"],
            "wrong_outputs_released": counts["wrong"],
            "refusals": [{"reason": r, "batches": n} for r, n in reasons.most_common(5)]}


def evaluate(name: str, model: nn.Module, client: Client, config: Any, data: tuple[Any, ...],
             args: argparse.Namespace) -> dict[str, Any]:
    x_tr, y_tr, x_te, y_te = data
    seconds = train(model, x_tr, y_tr, args.epochs)
    print(f"[{name}] trained in {seconds:.1f} s", flush=True)
    protected = protect(copy.deepcopy(model), client=client, timeout=args.timeout)
    device = x_te.device
    res: dict[str, Any] = {"train_s": seconds, "requests_per_forward":
                           report_of(protected).requests,
                           "protected_layers": report_of(protected).protected,
                           "redundant_steps": report_of(protected).redundant,
                           "unprotected_modules": report_of(protected).unprotected}
    with torch.inference_mode():  # first requests of each shape (kernel compiles), untimed
        protected(x_te[:args.batch])
    res["accuracy_clean_pytorch"] = accuracy(model, x_te, y_te, args.batch)
    res["accuracy_clean_protected"] = accuracy(protected, x_te, y_te, args.batch)
    res["latency_ms"] = timed(model, protected, x_te[:args.batch], args.reps, device)
    # how the last request went: the client's CUDA IPC buffers, or host memory
    res["device_path"] = "cuda-ipc" if client.last_request_device else "host"
    channel = config.channel_names[FAULTY_CHANNEL_INDEX]
    res["faults"] = faulty_pass(protected, client, channel, x_te, y_te, args.batch,
                                config.channels[0].variant)
    res["faults"]["channel"] = channel
    with stuck_outputs(model):
        res["accuracy_unprotected_with_faults"] = accuracy(model, x_te, y_te, args.batch)
    res["daemon_ready_after_faults"] = wait_all_up(client)
    print(f"[{name}] {json.dumps(res)}", flush=True)
    return res


def layer_bench(client: Client, n: int, device: torch.device, reps: int,
                timeout: float) -> dict[str, Any]:
    """One protected n×n Linear (no bias) at batch 64 against the same product through the
    client (`run` on the same model and `matmul`, with CuPy arrays on a GPU, NumPy on the
    CPU) and against plain PyTorch; interleaved, medians over `reps`."""
    torch.manual_seed(0)
    linear = nn.Linear(n, n, bias=False).to(device).eval()
    layer = ProtectedLinear(linear, client, name="bench", timeout=timeout)
    x = torch.randn(64, n, device=device)
    if device.type == "cuda":
        import cupy

        arr: Any = cupy.from_dlpack(x)
    else:
        arr = x.numpy()
    wid, mid = layer.binding.layers[0].weight_id, layer.binding.model_id
    calls: dict[str, Callable[[], Any]] = {
        "pytorch": lambda: linear(x),
        "protected_layer": lambda: layer(x),
        "client_run": lambda: client.run(mid, arr, timeout=timeout),
        "client_matmul": lambda: client.matmul(arr, wid, timeout=timeout),
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    with torch.inference_mode():
        for i in range(reps + 3):
            for name, call in calls.items():
                sync(device)
                t0 = time.perf_counter()
                call()
                sync(device)
                if i >= 3:
                    times[name].append(time.perf_counter() - t0)
    out: dict[str, Any] = {k: percentiles_ms(v) for k, v in times.items()}
    base = out["protected_layer"]["p50"]
    out["ratio_p50_protected_vs_client_run"] = base / out["client_run"]["p50"]
    out["ratio_p50_protected_vs_client_matmul"] = base / out["client_matmul"]["p50"]
    out["ratio_p50_protected_vs_pytorch"] = base / out["pytorch"]["p50"]
    out["shape"], out["reps"] = [64, n, n], reps
    out["device_path"] = "cuda-ipc" if client.last_request_device else "host"
    return out


def table(report: dict[str, Any]) -> str:
    lines = [f"safemon.torch example on {report['device']} ({report['date']})"]
    for name, r in report["models"].items():
        lat, f = r["latency_ms"], r["faults"]
        lines += [
            f"{name}: {len(r['protected_layers'])} layers protected, "
            + (f"{len(r['redundant_steps'])} steps protected by redundancy, "
               if r.get("redundant_steps") else "")
            + f"{r['requests_per_forward']} requests per forward",
            f"  accuracy clean PyTorch {r['accuracy_clean_pytorch']:.4f} | protected (clean) "
            f"{r['accuracy_clean_protected']:.4f} | protected, faults in {f['channel']} "
            f"{f['accuracy']:.4f} ({f['samples_refused']} samples refused) | unprotected "
            f"with faults {r['accuracy_unprotected_with_faults']:.4f}",
            f"  latency batch {lat['batch']}: PyTorch p50 {lat['pytorch']['p50']:.3f} ms "
            f"p99 {lat['pytorch']['p99']:.3f} | safemon p50 {lat['safemon']['p50']:.3f} ms "
            f"p99 {lat['safemon']['p99']:.3f} | ratio p50 {lat['ratio_p50']:.2f}x | path "
            f"{r.get('device_path', '?')}",
            f"  wrong outputs released: {f['wrong_outputs_released']} of "
            f"{f['protected_outputs_released']} protected outputs checked bit for bit"]
        lines += [f"  refused ({x['batches']} batches): {x['reason']}" for x in f.get("refusals", [])]
    if "layer_bench" in report:
        b = report["layer_bench"]
        lines.append(
            f"layer {b['shape']}: protected p50 {b['protected_layer']['p50']:.3f} ms, client.run "
            f"{b['client_run']['p50']:.3f}, client.matmul {b['client_matmul']['p50']:.3f}, "
            f"PyTorch {b['pytorch']['p50']:.3f}; protected/client.run "
            f"{b['ratio_p50_protected_vs_client_run']:.3f}x, protected/client.matmul "
            f"{b['ratio_p50_protected_vs_client_matmul']:.3f}x; path {b.get('device_path', '?')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--config", default=None, help="daemon configuration (default: the "
                        "embedded 2oo3 default; fault injection is switched on)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=None,
                        help="samples per batch (default 64 on cuda, 16 on the CPU, where "
                        "the NumPy kernels emulate every GPU thread's signature)")
    parser.add_argument("--reps", type=int, default=30, help="timed batches per model")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
    parser.add_argument("--models", default="cnn,transformer,encoder",
                        help="comma-separated, in this order (default: all of "
                        "cnn,transformer,encoder)")
    parser.add_argument("--layer-bench", type=int, default=0, metavar="N",
                        help="also time one protected 64×N×N layer (0: skip)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="daemon sockets and log (daemon.log) here (default: a temp dir)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MAKERS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: choose from "
                     f"{', '.join(MAKERS)}")
    device = torch.device(args.device)
    if args.batch is None:
        args.batch = 64 if device.type == "cuda" else 16
    torch.manual_seed(0)
    data = load_digits_split(device)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="safemon-torch-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o700)  # the ipc sockets live here
    config, env, notes = demo_config(args.config, run_dir)
    overrides = GPU_TIMING if device.type == "cuda" else CPU_TIMING
    if device.type == "cpu":
        # On a small CPU, torch's threads and the NumPy channels share the cores: one torch
        # thread, and a heartbeat timeout that a busy core does not trip on healthy channels;
        # the NumPy kernels (per-thread signatures emulated) need seconds for a CNN batch.
        torch.set_num_threads(1)
        notes.append("CPU: torch.set_num_threads(1)")
    env.update(overrides)
    config = load_config(args.config, env=env)
    notes.append("timing overrides: " + ", ".join(
        f"{k.removeprefix('SAFEMON_TIMING__').lower()} = {v} s" for k, v in overrides.items()))
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()})",
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
        "policy": config.policy.value, "backend": config.backend, "notes": notes,
        "models": {}}
    with Client(config) as client, _daemon(args.config, env, client, run_dir / "daemon.log",
                                           120.0):
        for name in args.models.split(","):
            if not wait_all_up(client):
                raise SystemExit(f"the daemon did not recover before {name} (log in {run_dir})")
            try:
                report["models"][name] = evaluate(name, MAKERS[name]().to(device), client,
                                                  config, data, args)
            except SafemonError as exc:  # reported, not hidden: the run then exits 1
                report.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
        if args.layer_bench:
            wait_all_up(client)
            try:
                report["layer_bench"] = layer_bench(client, args.layer_bench, device,
                                                    args.reps, args.timeout)
            except SafemonError as exc:
                report.setdefault("errors", {})["layer_bench"] = f"{type(exc).__name__}: {exc}"
    print(table(report))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    wrong = sum(r["faults"]["wrong_outputs_released"] for r in report["models"].values())
    for name, err in report.get("errors", {}).items():
        print(f"{name}: FAILED {err}")
    return 1 if wrong or report.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
