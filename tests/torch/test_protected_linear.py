"""`safemon.torch.ProtectedLinear` built by hand, and CPU torch tensors passed straight to
`Client.matmul` / `Client.run`, through a real in-process 2oo3 daemon (NumPy backend).

The reference is built from the nn.Linear itself (weightᵀ, bias, activation) with
`safemon.models.reference_forward`, not from the module's own copy, so a layer registered
wrongly (transposed, bias dropped, wrong activation) differs from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from safemon.client import Client  # noqa: E402
from safemon.config import Config  # noqa: E402
from safemon.daemon import Daemon  # noqa: E402
from safemon.models import Layer, reference_forward  # noqa: E402
from safemon.torch import ProtectedLinear  # noqa: E402

from ..runtime.helpers import make_config, same_bits, system  # noqa: E402
from .test_protect_daemon import TIMING  # noqa: E402

Running = tuple[Config, Daemon, Client]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One daemon for the module: nothing here changes its state (no faults injected)."""
    with torch.inference_mode():  # torch's one-time set-up before the daemon's clocks run
        nn.Linear(4, 3)(torch.zeros(2, 4))
    cfg = make_config(tmp_path_factory.mktemp("pl"), "2oo3", extra={"timing": TIMING})
    with system(cfg) as (daemon, client):
        yield cfg, daemon, client


def linear(k: int, n: int, *, bias: bool, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=bias)


def rand(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def expected(lin: nn.Linear, x: torch.Tensor, activation: str, cfg: Config) -> np.ndarray[Any, Any]:
    """act(x · Wᵀ + b) from `reference_forward`, built from `lin` itself; shape (..., N)."""
    assert cfg.channels is not None
    w = np.ascontiguousarray(lin.weight.detach().numpy().T)
    b = None if lin.bias is None else lin.bias.detach().numpy().copy()
    x2d = np.ascontiguousarray(x.reshape(-1, lin.in_features).numpy())
    out = reference_forward([w], [Layer("w", b, activation)], x2d,
                            variant=cfg.channels[0].variant)
    return out.reshape(*x.shape[:-1], lin.out_features)


def released(daemon: Daemon) -> float:
    v = daemon.registry.get_sample_value("safemon_requests_total", {"outcome": "released"})
    return v or 0.0


@pytest.mark.parametrize(("bias", "activation"), [
    (True, "identity"), (False, "identity"), (True, "relu"), (False, "gelu")])
def test_output_is_the_reference_bit_for_bit(running: Running, bias: bool, activation: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """ProtectedLinear(linear) on a 2-D and a 3-D input returns a float32 CPU tensor of shape
    (..., out_features) equal to reference_forward of the Linear's own weightᵀ, bias and
    activation, bit for bit; one request per call."""
    cfg, daemon, client = running
    lin = linear(24, 10, bias=bias)
    layer = ProtectedLinear(lin, client, name="fc", activation=activation, timeout=2.0).eval()
    assert (layer.bias is None) is (not bias)
    sent: list[str] = []  # which client call carried each request (the real one runs)

    def spy(how: str) -> Any:
        real = getattr(client, how)

        def call(*args: Any, **kwargs: Any) -> Any:
            sent.append(how)
            return real(*args, **kwargs)
        return call

    for how in ("matmul", "run"):
        monkeypatch.setattr(client, how, spy(how))
    for x in (rand(7, 24), rand(2, 3, 24, seed=2)):
        before = released(daemon)
        with torch.inference_mode():
            y = layer(x)
        assert released(daemon) - before == 1
        # a bare product (no bias, identity) goes as a product request, the rest as a model
        assert sent == ["matmul" if not bias and activation == "identity" else "run"]
        sent.clear()
        assert isinstance(y, torch.Tensor) and y.device.type == "cpu"
        assert y.dtype == torch.float32 and tuple(y.shape) == (*x.shape[:-1], 10)
        assert same_bits(y.numpy(), expected(lin, x, activation, cfg))


def test_output_is_close_to_pytorch(running: Running) -> None:
    """The released output of act(x·Wᵀ+b) stays within float32 rounding of PyTorch's."""
    _, _, client = running
    lin = linear(32, 16, bias=True, seed=3)
    layer = ProtectedLinear(lin, client, activation="relu", timeout=2.0).eval()
    x = rand(9, 32, seed=4)
    with torch.no_grad():
        got, want = layer(x), torch.relu(lin(x))
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_eval_mode_with_grad_enabled_is_accepted(running: Running) -> None:
    """After eval(), an input that does not require grad is computed even with autograd on
    (only a training-mode call or an input requiring grad is refused)."""
    cfg, _, client = running
    lin = linear(8, 4, bias=True)
    layer = ProtectedLinear(lin, client, timeout=2.0).eval()
    x = rand(3, 8)
    assert torch.is_grad_enabled()
    assert same_bits(layer(x).numpy(), expected(lin, x, "identity", cfg))


def test_a_layer_built_from_an_eval_mode_linear_starts_in_eval_mode(running: Running) -> None:
    """ProtectedLinear takes the mode of the Linear it replaces: built from `linear.eval()` it
    computes at once (the example's layer bench built it so, and was refused as training);
    built from a Linear in training mode it starts in training mode."""
    cfg, _, client = running
    lin = linear(8, 4, bias=True).eval()
    layer = ProtectedLinear(lin, client, timeout=2.0)
    assert not layer.training
    x = rand(3, 8)
    with torch.inference_mode():
        assert same_bits(layer(x).numpy(), expected(lin, x, "identity", cfg))
    assert ProtectedLinear(linear(8, 4, bias=True).train(), client, timeout=2.0).training


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_non_fp32_input_is_refused_before_a_request(running: Running,
                                                    dtype: torch.dtype) -> None:
    """A half/bf16/double input raises TypeError naming the layer and x.float(); nothing is
    sent."""
    _, daemon, client = running
    layer = ProtectedLinear(linear(8, 4, bias=True), client, name="fc", timeout=2.0).eval()
    before = released(daemon)
    with torch.inference_mode(), pytest.raises(
            TypeError, match=r"layer 'fc' got a torch\.\w+ input.*float32.*x\.float\(\)"):
        layer(rand(3, 8).to(dtype))
    assert released(daemon) == before


def test_gradients_are_refused_before_a_request(running: Running) -> None:
    """An input that requires grad, and a call in training mode with autograd on, raise
    ValueError naming the layer and the fix (eval, no_grad); nothing is sent."""
    _, daemon, client = running
    layer = ProtectedLinear(linear(8, 4, bias=False), client, name="fc", timeout=2.0)
    before = released(daemon)
    with pytest.raises(ValueError, match=r"layer 'fc' got a call in training mode.*model\.eval\(\)"):
        layer(rand(3, 8))  # a fresh module is in training mode, like any nn.Module
    layer.eval()
    with pytest.raises(ValueError, match=r"layer 'fc' got an input that requires grad.*no_grad"):
        layer(rand(3, 8).requires_grad_())
    assert released(daemon) == before


def test_fp16_weights_are_refused_at_construction(running: Running) -> None:
    """A half-precision Linear raises TypeError naming model.float() before registering."""
    _, _, client = running
    with pytest.raises(TypeError, match=r"layer 'fc' has torch\.float16 weights.*model\.float\(\)"):
        ProtectedLinear(linear(8, 4, bias=True).half(), client, name="fc")


def test_client_matmul_takes_a_cpu_tensor(running: Running) -> None:
    """Client.matmul(torch CPU tensor) returns a float32 torch CPU tensor whose bits equal
    the NumPy path's result (and the reference's)."""
    cfg, _, client = running
    w = rand(16, 12, seed=5).numpy()
    wid = client.register_weight(w)
    x = rand(6, 16, seed=6)
    got = client.matmul(x, wid, timeout=2.0)
    want = client.matmul(x.numpy().copy(), wid, timeout=2.0)
    assert isinstance(want, np.ndarray)
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
    assert got.dtype == torch.float32 and not got.requires_grad
    assert same_bits(got.numpy(), want)
    assert cfg.channels is not None
    ref = reference_forward([w], [Layer(wid)], x.numpy(), variant=cfg.channels[0].variant)
    assert same_bits(want, ref)


def test_client_run_takes_a_cpu_tensor(running: Running) -> None:
    """Client.run of a two-layer model (bias, relu) on a torch CPU tensor returns a torch
    CPU tensor equal bit for bit to the NumPy path's result; the input is left unchanged."""
    _, _, client = running
    w0, w1 = rand(16, 12, seed=7).numpy(), rand(12, 5, seed=8).numpy()
    b0 = rand(12, seed=9).numpy()
    layers = [Layer(client.register_weight(w0), b0, "relu"), Layer(client.register_weight(w1))]
    mid = client.register_model(layers)
    x = rand(4, 16, seed=10)
    x_before = x.clone()
    got = client.run(mid, x, timeout=2.0)
    want = client.run(mid, x.numpy().copy(), timeout=2.0)
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
    assert isinstance(want, np.ndarray) and tuple(got.shape) == (4, 5)
    assert same_bits(got.numpy(), want)
    assert torch.equal(x, x_before)


def test_under_1oo1d_a_bare_product_is_served_and_a_layer_with_bias_is_refused(
        tmp_path: Path) -> None:
    """Under 1oo1D the daemon refuses whole-model requests (ModelUnavailableError); a
    bias-free identity layer is a product request, which 1oo1D checks per request
    (ABFT), so it is served with the reference's bits, while a layer with a bias is still
    refused (unless the client falls back per layer)."""
    from safemon.errors import ModelUnavailableError

    cfg = make_config(tmp_path, "1oo1D", extra={"timing": TIMING})
    with system(cfg) as (_daemon, client):
        bare, biased = linear(12, 5, bias=False), linear(12, 5, bias=True, seed=5)
        x = rand(4, 12)
        with torch.inference_mode():
            got = ProtectedLinear(bare, client, name="bare", timeout=2.0).eval()(x)
            assert same_bits(got.numpy(), expected(bare, x, "identity", cfg))
            with pytest.raises(ModelUnavailableError):
                ProtectedLinear(biased, client, name="biased", timeout=2.0).eval()(x)
