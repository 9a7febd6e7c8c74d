"""Inline channels on a GPU (placement "inline", `safemon.channels.inline`): a `safemon run`
daemon in its own process drives three channels on CUDA streams from its loop, and this
process is the app. Device-resident requests (CuPy x through the client's CUDA IPC
buffers) and whole-model requests are released bit for bit as the NumPy reference
computes them; a bit flip in one channel is outvoted; ECC-protected weights are used as by
process channels. The daemon must be another process: CUDA IPC handles cannot be opened by
the process that exported them."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from safemon.bench.vote import _bench_config, running_daemon
from safemon.config import load_config
from safemon.models import Layer, reference_forward
from tests.runtime.helpers import reference, same_bits, wait_for

pytestmark = pytest.mark.gpu


@contextlib.contextmanager
def _inline_daemon(tmp_path: Path, variants: list[dict[str, Any]] | None = None,
                   placement: str = "inline",
                   extra: dict[str, dict[str, Any]] | None = None) -> Iterator[Any]:
    cfg = _bench_config(tmp_path, "ipc", "cupy", ["16x16x16"])
    for section, values in (extra or {}).items():  # merged into the bench config's sections
        cfg[section] = {**cfg.get(section, {}), **values}
    cfg["name"] = "t-inline"
    cfg["channels"] = [{"name": f"c{i}", "placement": placement,
                        "variant": (variants or [{}] * 3)[i]} for i in range(3)]
    cfg["testing"] = {"fault_injection": True}
    path = tmp_path / "inline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with running_daemon(path, tmp_path / "daemon.log", 240.0) as client:
        client.control_timeout_s = 30.0
        yield client, load_config(path, env={})


def _operands(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def test_device_requests_through_inline_channels_are_bit_exact(tmp_path: Path) -> None:
    """matmul at several shape classes and a two-layer model, CuPy x: the device path is
    used (no host fallback) and every output is the reference's, again and again."""
    import cupy as cp

    with _inline_daemon(tmp_path) as (client, cfg):
        for m, k, n, seed in ((80, 80, 80, 1), (1, 4096, 512, 2), (64, 1024, 256, 3),
                              (37, 91, 53, 4)):
            x, w = _operands(m, k, n, seed)
            wid = client.register_weight(w)
            want = reference(x, w, cfg)
            for _ in range(3):
                got = client.matmul(cp.asarray(x), wid, timeout=30.0)
                assert client.last_request_device, client.device_io_off_reason
                assert same_bits(got.get(), want), (m, k, n)
        x, w1 = _operands(64, 96, 40, 5)
        _, w2 = _operands(40, 40, 24, 6)
        b1 = np.random.default_rng(7).standard_normal(40).astype(np.float32)
        layers = [Layer(client.register_weight(w1), b1, "gelu"),
                  Layer(client.register_weight(w2))]
        mid = client.register_model(layers)
        want = reference_forward([w1, w2], layers, x)
        for _ in range(4):  # the second is captured as a graph, the third launches it
            out = client.run(mid, cp.asarray(x), timeout=30.0)
            assert client.last_request_device
            assert same_bits(out.get(), want)


def test_a_bit_flip_in_one_inline_channel_is_outvoted(tmp_path: Path) -> None:
    """`bitflip-c` into c1 before each of several requests (matmul and model): 2oo3 releases
    the reference's bits every time, and the daemon records c1's faults."""
    import cupy as cp

    with _inline_daemon(tmp_path) as (client, cfg):
        x, w = _operands(80, 80, 80, 8)
        wid = client.register_weight(w)
        mid = client.register_model([Layer(wid, None, "relu"), Layer(wid)])
        want = reference(x, w, cfg)
        want_model = reference_forward([w, w], [Layer(wid, None, "relu"), Layer(wid)], x)
        released = 0
        for i in range(6):
            with contextlib.suppress(Exception):
                client.inject("c1", "bitflip-c")
            if i % 2:
                got = client.run(mid, cp.asarray(x), timeout=30.0)
                assert same_bits(got.get(), want_model)
            else:
                got = client.matmul(cp.asarray(x), wid, timeout=30.0)
                assert same_bits(got.get(), want)
            released += 1
        assert released == 6
        assert wait_for(lambda: any(f["channel"] == "c1" for f in client.status()["faults"]), 10.0)


@pytest.mark.parametrize("placement", ["inline", "process"])
def test_a_device_model_whose_hidden_layer_overflows_is_invalid_input(tmp_path: Path,
                                                                      placement: str) -> None:
    """A CuPy x through the device path, layer 0 of 3e38-valued weights: every channel's
    layer 1 finds infinity in its input (the kernels' finite check, read after the one
    wait), the client gets InvalidInputError naming layer 1, no channel is faulted, and the
    next device request is bit-exact (before 2026-12-06 every channel answered an error and
    the daemon went SAFE)."""
    import cupy as cp

    from safemon.errors import InvalidInputError

    with _inline_daemon(tmp_path, placement=placement) as (client, cfg):
        big = np.full((64, 128), 3e38, dtype=np.float32)
        eye = np.eye(128, dtype=np.float32)
        mid = client.register_model([Layer(client.register_weight(big)),
                                     Layer(client.register_weight(eye))])
        for _ in range(3):
            with pytest.raises(InvalidInputError, match=r"layer 1.*overflow float32"):
                client.run(mid, cp.ones((4, 64), dtype=cp.float32), timeout=30.0)
        st = client.status()
        assert st["mode"] == "NORMAL" and not st["faults"], st
        x, w = _operands(16, 64, 32, 5)
        wid = client.register_weight(w)
        got = client.matmul(cp.asarray(x), wid, timeout=30.0)
        assert client.last_request_device and same_bits(got.get(), reference(x, w, cfg))


def test_diverse_inline_channels_agree(tmp_path: Path) -> None:
    """Diverse channels, as configs/hft2.yaml has them (ones/T on the `small`, `large` and
    automatic tiles), on inline channels release the same bits as the reference."""
    import cupy as cp

    variants = [{"tile": "small"}, {"tile": "large"}, {"tile": "auto"}]
    with _inline_daemon(tmp_path, variants) as (client, cfg):
        x, w = _operands(64, 512, 256, 9)
        wid = client.register_weight(w)
        want = reference(x, w, cfg)
        for _ in range(3):
            got = client.matmul(cp.asarray(x), wid, timeout=30.0)
            assert client.last_request_device and same_bits(got.get(), want)
        st = client.status()
        assert st["mode"] == "NORMAL", st


#: A `sitecustomize` for the daemon's process (its variables are not named SAFEMON_*, which the
#: config would read as overrides): with INLINE_TEST_HOLD_C2_S set, inline channel
#: c2 queues nothing for a device-resident request when its round launches, and when its
#: finish resumes it (after c0 and c1 answered, so after the quorum reply went out) it sleeps
#: that long before it imports the client's buffers, reads x and writes its slot. Each
#: resumption after the sleep appends its time.monotonic() to INLINE_TEST_HOLD_LOG.
_HOLD_C2 = """
import os, sys, time
_hold = os.environ.get("INLINE_TEST_HOLD_C2_S")
if _hold:
    from safemon.channels import inline as _inline
    _real = _inline._InlineWorker._request_steps

    def _held(self, msg, _real=_real, _s=float(_hold)):
        if self.name == "c2" and "x_ipc" in msg.meta:
            yield
            time.sleep(_s)
            with open(os.environ["INLINE_TEST_HOLD_LOG"], "a") as f:
                f.write(f"{time.monotonic()}\\n")
        return (yield from _real(self, msg))

    _inline._InlineWorker._request_steps = _held
_here = os.path.dirname(os.path.abspath(__file__))
for _d in sys.path:  # then the sitecustomize this one shadows, if any
    _c = os.path.join(_d, "sitecustomize.py")
    if os.path.abspath(_d or ".") != _here and os.path.isfile(_c):
        exec(compile(open(_c).read(), _c, "exec"), {"__name__": "sitecustomize", "__file__": _c})
        break
"""


@pytest.mark.parametrize("hold_c2_s", [0.0, 0.5])
def test_clients_that_exit_right_after_their_reply_leave_the_inline_daemon_serving(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold_c2_s: float) -> None:
    """Inline channels answer a 2oo3 request once two agree, before the third channel's
    wait: a client that exits at once can end while that channel still reads its x and
    writes its slot over CUDA IPC, in the daemon's own CUDA context (shared by every inline
    channel). Six client processes each send a 4-layer model request and `os._exit` the
    moment the reply is in; then the daemon is still NORMAL with every channel UP, and a
    request of this process is released bit for bit. Without a hold the third channel's
    work has usually ended before a client can exit; with `hold_c2_s` the daemon holds c2
    back (`_HOLD_C2`) until after each client has exited, which the test checks."""
    import subprocess
    import sys
    import textwrap
    import time

    import cupy as cp

    hold_log = tmp_path / "hold.log"
    if hold_c2_s:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(_HOLD_C2)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            [str(site), os.environ.get("PYTHONPATH", ""), str(Path(__file__).parents[2])]))
        monkeypatch.setenv("INLINE_TEST_HOLD_C2_S", str(hold_c2_s))
        monkeypatch.setenv("INLINE_TEST_HOLD_LOG", str(hold_log))
    exits: list[float] = []
    with _inline_daemon(tmp_path) as (client, _cfg):
        rng = np.random.default_rng(11)
        w = (rng.standard_normal((1024, 1024)) / 32).astype(np.float32)
        b = rng.standard_normal(1024).astype(np.float32)
        np.save(tmp_path / "w.npy", w)
        np.save(tmp_path / "b.npy", b)
        script = textwrap.dedent(f"""
            import os, numpy as np, cupy as cp
            from safemon.client import Client
            from safemon.models import Layer
            c = Client({str(tmp_path / "inline.yaml")!r}, control_timeout_s=30.0)
            w, b = np.load({str(tmp_path / "w.npy")!r}), np.load({str(tmp_path / "b.npy")!r})
            mid = c.register_model([Layer(c.register_weight(w), b, "gelu")] * 4)
            x = cp.asarray(np.ones((64, 1024), np.float32))
            c.run(mid, x, timeout=30.0)
            assert c.last_request_device, c.device_io_off_reason
            os._exit(0)  # at once: the third channel may still be using this process's buffers
        """)
        for _ in range(6):
            done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2],
                                  timeout=120, capture_output=True, text=True)
            exits.append(time.monotonic())
            assert done.returncode == 0, done.stderr[-2000:]
        layers = [Layer(client.register_weight(w), b, "gelu")] * 4
        mid = client.register_model(layers)
        x = rng.standard_normal((64, 1024)).astype(np.float32)
        want = reference_forward([w] * 4, layers, x)
        for _ in range(3):
            assert same_bits(client.run(mid, cp.asarray(x), timeout=30.0).get(), want)
            assert client.last_request_device
        st = client.status()
        assert st["mode"] == "NORMAL" and not st["faults"], st
        assert [c["state"] for c in st["channels"]] == ["UP"] * 3, st
    if hold_c2_s:  # c2 touched each client's buffers only after that client had exited
        resumed = [float(t) for t in hold_log.read_text().split()]
        assert len(resumed) >= len(exits)
        assert all(r > e for r, e in zip(resumed, exits, strict=False)), (resumed, exits)


def test_an_evicted_weight_is_dropped_with_its_graphs_and_comes_back_bit_exact(
        tmp_path: Path) -> None:
    """A budget of one weight on the GPU: the second weight evicts the first, whose captured
    step graphs the inline channels drop with it (`weight_dropped` held=True in each); the
    first is then registered again by the client on its next request and computed, through
    fresh graphs, bit for bit as before. No channel is faulted."""
    import cupy as cp

    cfg_path = tmp_path / "budget"
    cfg_path.mkdir()
    with _inline_daemon(cfg_path, extra={"limits": {"max_weights": 1},
                                         "logging": {"level": "info"}}) as (client, cfg):
        x1, w1 = _operands(80, 80, 80, 11)
        x2, w2 = _operands(64, 80, 48, 12)
        id1 = client.register_weight(w1)
        for _ in range(5):  # captured on the third and fourth requests (two input buffers)
            assert same_bits(client.matmul(cp.asarray(x1), id1, timeout=30.0).get(),
                             reference(x1, w1, cfg))
        id2 = client.register_weight(w2)  # evicts w1
        for _ in range(5):
            assert same_bits(client.matmul(cp.asarray(x2), id2, timeout=30.0).get(),
                             reference(x2, w2, cfg))
        for _ in range(5):  # w1 again: registered again by the client, evicting w2
            assert same_bits(client.matmul(cp.asarray(x1), id1, timeout=30.0).get(),
                             reference(x1, w1, cfg))
            assert client.last_request_device
        st = client.status()
        assert st["mode"] == "NORMAL" and not st["faults"], st
    log = (cfg_path / "daemon.log").read_text(encoding="utf-8", errors="replace")
    dropped = [json.loads(line) for line in log.splitlines() if '"weight_dropped"' in line]
    first = [d for d in dropped if d["weight_id"] == id1[:64]][:3]
    assert len(first) == 3 and all(d["held"] and d["graphs"] >= 1 for d in first), dropped
    assert sum(d["held"] for d in dropped) >= 6, dropped  # w2 went when w1 came back


def test_an_encoder_model_through_inline_channels_is_bit_exact(tmp_path: Path) -> None:
    """A transformer encoder model (layer norms, attention, residuals, reshapes between
    the products; `tests/models/test_model_steps.encoder_model`) as device-resident
    requests, four times (the step is captured as a graph and launched), and as a host
    request: every output is `reference_forward`'s bits; a bit flip in c0 is outvoted."""
    import cupy as cp

    from safemon.models import Step
    from tests.models.test_model_steps import encoder_model, weights

    with _inline_daemon(tmp_path) as (client, _cfg):
        w = weights(11)
        ids = {k: client.register_weight(a) for k, a in w.items()}
        rng = np.random.default_rng(12)
        bias = {k: rng.standard_normal(w[k].shape[1]).astype(np.float32) for k in ("qkv", "f1")}
        named = encoder_model(bias)
        steps: list[Step] = [Layer(ids[s.weight_id], s.bias, s.act) if isinstance(s, Layer)
                             else s for s in named]
        mid = client.register_model(steps)
        x = rng.standard_normal((64, 6)).astype(np.float32)
        want = reference_forward([w[s.weight_id] for s in named if isinstance(s, Layer)],
                                 steps, x)
        for _ in range(4):
            out = client.run(mid, cp.asarray(x), timeout=30.0)
            assert client.last_request_device, client.device_io_off_reason
            assert same_bits(out.get(), want)
        assert same_bits(client.run(mid, x, timeout=30.0), want)
        client.inject("c0", "bitflip-c")
        assert same_bits(client.run(mid, cp.asarray(x), timeout=30.0).get(), want)
        assert wait_for(lambda: any(f.get("channel") == "c0" and "first diverging layer 0"
                                    in f.get("detail", "") for f in client.status()["faults"]),
                        20.0)


@pytest.mark.parametrize("causal", [False, True])
def test_a_long_sequence_exact_gelu_encoder_through_inline_channels_is_bit_exact(
        tmp_path: Path, causal: bool) -> None:
    """An encoder layer over sequences longer than the attention kernel keeps scores for
    (`STORED_TOKENS`: it recomputes them) with the exact (erf) GELU, its attention causal
    or not, as device-resident requests (the second one launched as a captured graph):
    `reference_forward`'s bits."""
    import cupy as cp

    from safemon.models import AddResidual, Attention, LayerNorm, SaveResidual, Step
    from safemon.models.ops import STORED_TOKENS

    tokens, heads, d = STORED_TOKENS + 36, 2, 16
    rng = np.random.default_rng(21)

    def norm() -> LayerNorm:
        return LayerNorm(rng.standard_normal(d).astype(np.float32),
                         rng.standard_normal(d).astype(np.float32))

    w = {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
         for k, s in {"qkv": (d, 3 * d), "o": (d, d), "f1": (d, 4 * d), "f2": (4 * d, d)}.items()}
    with _inline_daemon(tmp_path) as (client, _cfg):
        ids = {k: client.register_weight(a) for k, a in w.items()}
        steps: list[Step] = [
            SaveResidual(), norm(), Layer(ids["qkv"]), Attention(heads, tokens, causal),
            Layer(ids["o"]), AddResidual(), SaveResidual(), norm(),
            Layer(ids["f1"], rng.standard_normal(4 * d).astype(np.float32), "gelu_erf"),
            Layer(ids["f2"]), AddResidual()]
        mid = client.register_model(steps)
        x = rng.standard_normal((2 * tokens, d)).astype(np.float32)
        want = reference_forward([w[k] for k in ("qkv", "o", "f1", "f2")], steps, x)
        for _ in range(3):
            out = client.run(mid, cp.asarray(x), timeout=30.0)
            assert client.last_request_device, client.device_io_off_reason
            assert same_bits(out.get(), want)
