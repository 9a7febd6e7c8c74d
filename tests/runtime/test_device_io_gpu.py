"""Device-resident requests through a real daemon on a GPU (docs/PROTOCOL.md section 11):
x and the outputs move through the client's CUDA IPC buffers, only digests cross ZeroMQ,
and every released output is bit-exact with the NumPy reference. Channels run as separate
processes (CUDA IPC handles cannot be opened by the process that exported them)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from safemon.arrays import device_view
from safemon.errors import InvalidInputError
from safemon.models import Layer, reference_forward
from safemon.transport import messages as msgs
from safemon.transport.wire import Kind
from tests.runtime.helpers import make_config, reference, same_bits, system, wait_for

pytestmark = pytest.mark.gpu

GENEROUS = {"request_deadline_s": 10.0, "dti_s": 5.0, "selftest_deadline_s": 4.5,
            "ftti_s": 20.0, "heartbeat_timeout_s": 5.0, "heartbeat_interval_s": 0.1}


def _cp() -> Any:
    import cupy

    return cupy


def _config(tmp_path: Path, placement: str = "process", injection: bool = False) -> Any:
    return make_config(tmp_path, "2oo3", placement=placement, transport="ipc",
                       extra={"backend": "cupy", "timing": GENEROUS}, injection=injection)


def _operands(m: int = 64, k: int = 96, n: int = 40, seed: int = 3) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32),
            rng.standard_normal((n, 24)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def test_cupy_and_torch_requests_go_through_the_ipc_buffers_bit_exact(tmp_path: Path) -> None:
    """matmul and a two-layer model with CuPy x (and torch x where torch is installed) use
    the device path and release the reference's bits; repeated requests reuse the buffers."""
    cp = _cp()
    cfg = _config(tmp_path)
    x, w1, w2, b1 = _operands()
    with system(cfg) as (_daemon, client):
        wid1, wid2 = client.register_weight(w1), client.register_weight(w2)
        for _ in range(3):
            got = client.matmul(cp.asarray(x), wid1, timeout=10.0)
            assert client.last_request_device, client.device_io_off_reason
            assert isinstance(got, cp.ndarray) and same_bits(got.get(), reference(x, w1, cfg))
        layers = [Layer(wid1, b1, "gelu"), Layer(wid2)]
        mid = client.register_model(layers)
        out = client.run(mid, cp.asarray(x), timeout=10.0)
        assert client.last_request_device
        assert same_bits(out.get(), reference_forward([w1, w2], layers, x))
        bigger = np.concatenate([x] * 40)  # 2560 rows: the buffers grow (new handles)
        got = client.matmul(cp.asarray(bigger), wid1, timeout=10.0)
        assert client.last_request_device and same_bits(got.get(), reference(bigger, w1, cfg))
        torch = pytest.importorskip("torch")
        t = client.run(mid, torch.from_numpy(x).to("cuda:0"), timeout=10.0)
        assert client.last_request_device
        assert isinstance(t, torch.Tensor) and t.device.type == "cuda"
        assert same_bits(t.cpu().numpy(), out.get())


def test_threads_sharing_one_client_each_get_their_own_device_result(tmp_path: Path) -> None:
    """Four threads share one client and send CuPy x through its CUDA IPC buffers (process
    channels): the calls take turns (`Client`'s lock, staging to take), and each thread
    gets its own input's product, bit for bit, as a CuPy array."""
    import threading

    cp = _cp()
    cfg = _config(tmp_path)
    _, w1, _, _ = _operands()
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w1)
        failures: list[str] = []
        start = threading.Barrier(4)

        def work(t: int) -> None:
            rng = np.random.default_rng(200 + t)
            start.wait()
            try:
                for i in range(10):
                    x = rng.standard_normal((16 + t, w1.shape[0])).astype(np.float32)
                    got = client.matmul(cp.asarray(x), wid, timeout=20.0)
                    if not (isinstance(got, cp.ndarray)
                            and same_bits(got.get(), reference(x, w1, cfg))):
                        failures.append(f"thread {t} call {i}: not its own product")
            except Exception as exc:
                failures.append(f"thread {t}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(180)
        assert not any(th.is_alive() for th in threads) and failures == []
        assert client.last_request_device, client.device_io_off_reason


def test_a_faulty_channel_is_outvoted_on_digests(tmp_path: Path) -> None:
    """A bit flip injected into c1's C: 2oo3 releases the majority's slot, the reference's
    bits, and c1 is the minority."""
    cp = _cp()
    cfg = _config(tmp_path, injection=True)
    x, w1, _w2, _b1 = _operands(seed=4)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w1)
        client.inject("c1", "bitflip-c")
        got = client.matmul(cp.asarray(x), wid, timeout=10.0)
        assert client.last_request_device and same_bits(got.get(), reference(x, w1, cfg))
        assert wait_for(lambda: any(f["channel"] == "c1" for f in client.status()["faults"]), 10.0)


def test_bad_device_requests_are_refused_and_fault_no_channel(tmp_path: Path) -> None:
    """A foreign handle (64 random bytes), an out_slot_bytes larger than the client's
    buffer and an x_digest that is not the buffer's x (each channel's own check):
    DeviceInputError for the sender, every channel stays UP and the next request is
    released. A non-finite x is refused in the client before anything is sent."""
    cp = _cp()
    cfg = _config(tmp_path)
    x, w1, _w2, _b1 = _operands(seed=5)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w1)
        client.matmul(cp.asarray(x), wid, timeout=10.0)  # the client's buffers exist now
        staged = client._exchange.stage(cp.asarray(x), w1.shape[1])  # type: ignore[union-attr]
        foreign = dict(staged.meta(), x_ipc=os.urandom(64).hex())
        too_far = dict(staged.meta(), x_rows=4096)  # 1.5 MiB of x from a 1 MiB buffer
        too_far["out_slot_bytes"] = too_far["x_rows"] * w1.shape[1] * 4
        # x in the buffer is not what the client digested: every channel says so itself
        changed = dict(staged.meta(), x_digest=f"{int(staged.x_digest, 16) ^ 1:016x}")
        for meta, needle in ((foreign, "cannot open"), (too_far, ""),
                             (changed, "changed before it was read")):
            reply = client._call(client._ingress, Kind.REQUEST,
                                 msgs.MatmulRequest(weight_id=wid, deadline_ms=5000.0, **meta).to_meta(),
                                 (), 10.0)
            assert reply is not None and reply.kind is Kind.ERROR
            assert reply.meta["error_type"] == "DeviceInputError", reply.meta
            assert needle in str(reply.meta["message"]), reply.meta
        bad = cp.asarray(x)
        bad[0, 0] = cp.nan
        with pytest.raises(InvalidInputError, match="NaN"):
            client.matmul(bad, wid, timeout=10.0)
        got = client.matmul(cp.asarray(x), wid, timeout=10.0)
        assert client.last_request_device and same_bits(got.get(), reference(x, w1, cfg))
        assert daemon.core is not None and daemon.core.controller.mode.value == "NORMAL"


def test_in_one_process_the_client_falls_back_to_host_memory(tmp_path: Path) -> None:
    """Stream channels live in the client's own process, where its handles cannot be
    opened: every channel answers input_error alike, the client gets DeviceInputError,
    resends through host memory (same bits) and keeps device I/O off; no channel fault."""
    cp = _cp()
    cfg = _config(tmp_path, placement="stream")
    x, w1, _w2, _b1 = _operands(seed=6)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w1)
        got = client.matmul(cp.asarray(x), wid, timeout=10.0)
        assert same_bits(got.get(), reference(x, w1, cfg))
        assert not client.last_request_device and not client.device_io
        assert "could not read" in str(client.device_io_off_reason)
        assert daemon.core is not None and daemon.core.controller.mode.value == "NORMAL"


def test_a_client_killed_mid_request_leaves_the_daemon_serving(tmp_path: Path) -> None:
    """A second process stages a request over CUDA IPC and dies before the answer: the
    channels stay UP, nothing leaks into the next client's results, and that client's
    requests are released bit-exact."""
    cp = _cp()
    cfg = _config(tmp_path)
    x, w1, _w2, _b1 = _operands(seed=7)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w1)
        path = tmp_path / "w.npy"
        np.save(path, w1)
        cfg_json = tmp_path / "config.json"
        cfg_json.write_text(cfg.model_dump_json())
        script = textwrap.dedent(f"""
            import os, numpy as np, cupy as cp
            from pathlib import Path
            from safemon.client import Client
            from safemon.config import Config
            c = Client(Config.model_validate_json(Path({str(cfg_json)!r}).read_text()))
            wid = c.register_weight(np.load({str(path)!r}))
            x = cp.asarray(np.ones((512, {w1.shape[0]}), np.float32))
            from safemon.device_io import ExchangeBuffers
            from safemon.transport import messages as msgs
            from safemon.transport.wire import Kind, encode
            ex = ExchangeBuffers(3)
            st = ex.stage(x, {w1.shape[1]})
            meta = msgs.MatmulRequest(weight_id=wid, deadline_ms=5000.0, **st.meta()).to_meta()
            c._ingress.send_multipart(encode(Kind.REQUEST, epoch=0, seq=1, channel="", meta=meta))
            os._exit(9)
        """)
        done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2],
                              timeout=120, capture_output=True, text=True)
        assert done.returncode == 9, done.stderr[-2000:]
        for _ in range(3):
            got = client.matmul(cp.asarray(x), wid, timeout=10.0)
            assert client.last_request_device and same_bits(got.get(), reference(x, w1, cfg))
        assert daemon.core is not None and daemon.core.controller.mode.value == "NORMAL"


def test_channels_with_the_row_abft_check_release_clean_and_refuse_overflowed(
        tmp_path: Path) -> None:
    """Process channels on the GPU running `abft: rows` on their ECC weights (the vectors made
    once per weight): CuPy requests release the reference's bits, again and again; an input
    that overflows C is refused by the check (channels without ABFT agree on the infinite C).
    Every channel failing its check is a fault of each, so 2oo3 goes to SAFE, as the policy
    says for faults of two channels."""
    from safemon.errors import SafemonError, SafeStateError

    cp = _cp()
    channels = [{"name": f"c{i}", "placement": "process", "variant": {"abft": "rows"}}
                for i in range(3)]
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"backend": "cupy", "timing": GENEROUS, "channels": channels})
    assert cfg.weights.ecc
    x, w1, _w2, _b1 = _operands(m=64, k=256, n=384)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w1)
        for _ in range(3):
            got = client.matmul(cp.asarray(x), wid, timeout=10.0)
            assert same_bits(got.get(), reference(x, w1, cfg))
        with pytest.raises(SafemonError, match="abft"):
            client.matmul(cp.asarray(np.full_like(x, 3e38)), wid, timeout=10.0)
        with pytest.raises(SafeStateError):
            client.matmul(cp.asarray(x), wid, timeout=10.0)


class _CudaInterfaceOnly:
    """A CUDA array of a library safemon does not know, through `__cuda_array_interface__`."""

    def __init__(self, a: Any) -> None:
        self._a = a  # keeps the memory alive
        self.__cuda_array_interface__ = a.__cuda_array_interface__


class _DLPackOnly:
    """A CUDA array of a library safemon does not know, through DLPack only."""

    def __init__(self, a: Any) -> None:
        self._a = a

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._a.__dlpack_device__()  # type: ignore[no-any-return]


def test_stagings_take_the_input_buffers_in_turn_and_leave_the_previous_x_in_place() -> None:
    """Consecutive requests stage x into `INPUT_BUFFERS` buffers in turn: a channel that has
    not yet read the previous request's x when the client stages the next one still finds
    it (a 2oo3 release does not wait for the third channel)."""
    from safemon.device_io import INPUT_BUFFERS, ExchangeBuffers

    cp = _cp()
    assert INPUT_BUFFERS == 2
    ex = ExchangeBuffers(3)
    xs = [cp.full((8, 16), float(i + 1), dtype=cp.float32) for i in range(3)]
    staged = [ex.stage(x, 4) for x in xs]
    assert staged[0].x_ipc != staged[1].x_ipc and staged[2].x_ipc == staged[0].x_ipc
    assert len({s.out_ipc for s in staged}) == 1
    second = ex._inputs[1][0].memory  # the buffer of staged[1], after x 3 was staged
    view = cp.ndarray((8, 16), cp.float32, cp.cuda.MemoryPointer(second, 0))
    assert bool((view == 2.0).all())


def test_a_smaller_output_keeps_the_allocations_slot_stride_and_take_reads_its_slot() -> None:
    """The torch example's CNN failed on the H100 (docs/ROBUSTNESS.md, 'A late channel
    wrote over a released slot'): a large request and then a small one in the same output
    allocation must share one slot stride, so a channel still writing the large output stays
    in its own slot. `take` reads the small output's (rows, cols) at that stride."""
    from safemon.device_io import ExchangeBuffers, digest_hex
    from safemon.kernels.model_gpu import copy_digest

    cp = _cp()
    ex = ExchangeBuffers(3)
    big = ex.stage(cp.ones((4096, 64), cp.float32), 32)  # a 512 KiB output a slot
    small = ex.stage(cp.ones((64, 64), cp.float32), 10)
    assert big.out_ipc == small.out_ipc and big.out_slot_bytes == small.out_slot_bytes
    assert small.out_slot_bytes >= 4096 * 32 * 4
    memory = ex._outputs[0].memory
    want = cp.arange(64 * 10, dtype=cp.float32).reshape(64, 10)
    cp.ndarray((64, 10), cp.float32,
               cp.cuda.MemoryPointer(memory, 2 * small.out_slot_bytes))[...] = want
    digest, _nonfinite = copy_digest(want, cp.empty_like(want))
    got = ex.take(0, small, 2, digest_hex(digest))
    assert got.shape == (64, 10) and bool((got == want).all())


def test_foreign_cuda_arrays_go_through_the_ipc_buffers_and_bad_ones_are_refused(
        tmp_path: Path) -> None:
    """Arrays that speak only `__cuda_array_interface__` or DLPack take the device path and
    come back as CuPy arrays with the reference's bits. A float64, a non-contiguous and a
    wrong-device array (CuPy and torch) are refused in the client before anything is sent."""
    cp = _cp()
    cfg = _config(tmp_path)
    x, w1, _w2, _b1 = _operands(seed=8)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w1)
        want = reference(x, w1, cfg)
        for wrap in (_CudaInterfaceOnly, _DLPackOnly):
            got = client.matmul(wrap(cp.asarray(x)), wid, timeout=10.0)
            assert client.last_request_device, client.device_io_off_reason
            assert isinstance(got, cp.ndarray) and same_bits(got.get(), want)
        bad = [(cp.asarray(x, dtype=cp.float64), "float32"),
               (cp.asarray(np.asfortranarray(x)), "C-contiguous"),
               (_CudaInterfaceOnly(cp.asarray(np.asfortranarray(x))), "C-contiguous")]
        if importlib.util.find_spec("torch") is not None:
            import torch

            t = torch.from_numpy(x).to("cuda:0")
            bad += [(t.double(), "float32"), (t.t().contiguous().t(), "contiguous")]
        for arr, needle in bad:
            with pytest.raises(InvalidInputError, match=needle):
                client.matmul(arr, wid, timeout=10.0)
        with pytest.raises(InvalidInputError, match="cuda:5"):
            device_view("x", cp.asarray(x), devices={5})  # the client passes its channels' GPUs
        got = client.matmul(cp.asarray(x), wid, timeout=10.0)  # still served afterwards
        assert client.last_request_device and same_bits(got.get(), want)


def test_a_stale_handle_of_a_dead_client_is_a_device_input_error(tmp_path: Path) -> None:
    """Handles exported by a process that has exited (its memory freed): the channels cannot
    open them, the sender gets DeviceInputError, and no channel is faulted."""
    cp = _cp()
    cfg = _config(tmp_path)
    x, w1, _w2, _b1 = _operands(seed=9)
    script = textwrap.dedent(f"""
        import json, numpy as np, cupy as cp
        from safemon.device_io import ExchangeBuffers
        ex = ExchangeBuffers(3)
        st = ex.stage(cp.asarray(np.ones(({x.shape[0]}, {x.shape[1]}), np.float32)), {w1.shape[1]})
        print(json.dumps(st.meta()))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2],
                          timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    stale = json.loads(done.stdout.strip().splitlines()[-1])
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w1)
        reply = client._call(client._ingress, Kind.REQUEST,
                             msgs.MatmulRequest(weight_id=wid, deadline_ms=5000.0, **stale).to_meta(),
                             (), 10.0)
        assert reply is not None and reply.kind is Kind.ERROR
        assert reply.meta["error_type"] == "DeviceInputError", reply.meta
        got = client.matmul(cp.asarray(x), wid, timeout=10.0)
        assert client.last_request_device and same_bits(got.get(), reference(x, w1, cfg))
        assert daemon.core is not None and daemon.core.controller.mode.value == "NORMAL"


@pytest.mark.gpu_alone  # it reads the whole device's free memory: nothing may allocate beside it
def test_a_dying_clients_buffers_are_freed_once_the_channels_close_its_imports(
        tmp_path: Path) -> None:
    """A client process stages a 512 MiB x, sends the request and dies. The channel
    processes opened its buffers; the driver keeps a dead client's exported memory only
    while an import holds it. Each channel closes imports unused for `IMPORT_IDLE_S` (30 s)
    on its heartbeat, after which the device's free memory has grown back by at least the
    size of x: nothing of the dead client is kept."""
    from safemon.device_io import IMPORT_IDLE_S

    cp = _cp()
    # The default limits refuse an x over 4 MiB or 8192 rows before any channel sees it.
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"backend": "cupy", "timing": GENEROUS,
                             "limits": {"max_request_bytes": 2**30, "max_dim": 16384}})
    rows, k, n = 16384, 8192, 40
    w = np.random.default_rng(10).standard_normal((k, n)).astype(np.float32)
    with system(cfg) as (_daemon, client):
        client.register_weight(w)
        path = tmp_path / "w.npy"
        np.save(path, w)
        cfg_json = tmp_path / "config.json"
        cfg_json.write_text(cfg.model_dump_json())
        script = textwrap.dedent(f"""
            import os, numpy as np, cupy as cp
            from pathlib import Path
            from safemon.client import Client
            from safemon.config import Config
            from safemon.device_io import ExchangeBuffers
            from safemon.transport import messages as msgs
            from safemon.transport.wire import Kind, decode, encode, Limits
            c = Client(Config.model_validate_json(Path({str(cfg_json)!r}).read_text()))
            wid = c.register_weight(np.load({str(path)!r}))
            ex = ExchangeBuffers(3)  # kept: its buffers live as long as it does
            st = ex.stage(cp.ones(({rows}, {k}), np.float32), {n})
            meta = msgs.MatmulRequest(weight_id=wid, deadline_ms=20000.0, **st.meta()).to_meta()
            c._ingress.send_multipart(encode(Kind.REQUEST, epoch=0, seq=1, channel="", meta=meta))
            if c._ingress.poll(20000):  # the channels have read x and written their slots
                m = decode(c._ingress.recv_multipart(), Limits())
                print(m.meta, flush=True)
                print(m.kind.value, flush=True)
            os._exit(9)
        """)
        done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2],
                              timeout=180, capture_output=True, text=True)
        assert done.returncode == 9, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1:] == ["reply"], done.stdout[-600:]
        # The dead process's own memory is returned as the driver tears it down: wait until
        # free memory is steady (the channels' imports, unused for less than 30 s, are open).
        readings = [cp.cuda.runtime.memGetInfo()[0]]
        for _ in range(20):
            time.sleep(0.5)
            readings.append(cp.cuda.runtime.memGetInfo()[0])
            if abs(readings[-1] - readings[-2]) < 2**20:
                break
        held = readings[-1]
        def came_back() -> int:
            return int(cp.cuda.runtime.memGetInfo()[0] - held)

        assert wait_for(lambda: came_back() >= rows * k * 4, IMPORT_IDLE_S + 30.0), \
            f"{came_back()} bytes came back; x alone is {rows * k * 4}"
        print(f"{came_back()} bytes came back; x alone is {rows * k * 4}")  # (pytest -rP)
