"""nn.TransformerEncoderLayer models protected through a real in-process 2oo3 daemon (NumPy
backend): the released output equals `reference_forward` bit for bit, one request per
forward; a fault in one channel never releases a wrong output.

The expected steps are written here from the PyTorch modules themselves (each Linear's
weightᵀ and bias, the layer norms' parameters, the documented order of the encoder layer's
steps), not taken from the protected module, so a mapping that registered a weight wrongly,
dropped a bias or put a step out of order differs from them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from safemon.client import Client  # noqa: E402
from safemon.config import Config  # noqa: E402
from safemon.daemon import Daemon  # noqa: E402
from safemon.errors import SafemonError  # noqa: E402
from safemon.models import Layer, reference_forward  # noqa: E402
from safemon.models.layers import Step  # noqa: E402
from safemon.models.ops import (  # noqa: E402
    AddResidual,
    Attention,
    LayerNorm,
    Reshape,
    SaveResidual,
)
from safemon.torch import ProtectedEncoderLayer, ProtectedSequence, protect, report_of  # noqa: E402

from ..runtime.helpers import make_config, same_bits, system  # noqa: E402
from .test_encoder import act_name, digits_encoder, encoder, pytorch_eval  # noqa: E402
from .test_protect_daemon import TIMING  # noqa: E402

F32 = npt.NDArray[np.float32]
Running = tuple[Config, Daemon, Client]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One daemon for the module's fault-free tests."""
    with torch.inference_mode():  # torch's one-time set-up before the daemon's clocks run
        digits_encoder()(torch.zeros(2, 1, 8, 8))
    cfg = make_config(tmp_path_factory.mktemp("enc"), "2oo3", extra={"timing": TIMING})
    with system(cfg) as (daemon, client):
        yield cfg, daemon, client


def released(daemon: Daemon) -> float:
    v = daemon.registry.get_sample_value("safemon_requests_total", {"outcome": "released"})
    return v or 0.0


class Expected:
    """Steps and weights (in product order) written from PyTorch modules."""

    def __init__(self) -> None:
        self.weights: list[F32] = []
        self.steps: list[Step] = []

    def dense(self, weight: torch.Tensor, bias: torch.Tensor | None,
              act: str = "identity") -> None:
        self.weights.append(np.ascontiguousarray(weight.detach().numpy().T))
        b = None if bias is None else bias.detach().numpy().copy()
        self.steps.append(Layer(f"w{len(self.weights)}", b, act))

    def norm(self, ln: nn.LayerNorm) -> None:
        gamma = ln.weight.detach().numpy().copy()
        beta = np.zeros_like(gamma) if ln.bias is None else ln.bias.detach().numpy().copy()
        self.steps.append(LayerNorm(gamma, beta, ln.eps))

    def encoder(self, layer: nn.TransformerEncoderLayer, tokens: int, act: str,
                causal: bool = False) -> None:
        attn = layer.self_attn
        heads = int(attn.num_heads)

        def block() -> None:
            self.dense(attn.in_proj_weight, attn.in_proj_bias)
            self.steps.append(Attention(heads, tokens, causal))
            self.dense(attn.out_proj.weight, attn.out_proj.bias)

        def ffn() -> None:
            self.dense(layer.linear1.weight, layer.linear1.bias, act)
            self.dense(layer.linear2.weight, layer.linear2.bias)

        if layer.norm_first:
            self.steps += [SaveResidual()]
            self.norm(layer.norm1)
            block()
            self.steps += [AddResidual(), SaveResidual()]
            self.norm(layer.norm2)
            ffn()
            self.steps.append(AddResidual())
        else:
            self.steps.append(SaveResidual())
            block()
            self.steps.append(AddResidual())
            self.norm(layer.norm1)
            self.steps.append(SaveResidual())
            ffn()
            self.steps.append(AddResidual())
            self.norm(layer.norm2)

    def forward(self, x: F32, cfg: Config) -> F32:
        assert cfg.channels is not None
        out: F32 = reference_forward(self.weights, self.steps, x,
                                     variant=cfg.channels[0].variant)
        return out


def digits_expected(model: nn.Sequential, d: int) -> Expected:
    e = Expected()
    e.dense(model[1].weight, model[1].bias)
    e.steps.append(Reshape(d))
    e.encoder(model[3], 8, "relu")
    e.steps.append(Reshape(8 * d))
    e.dense(model[5].weight, model[5].bias)
    return e


def test_the_digits_sequential_is_one_request_bit_for_bit(running: Running) -> None:
    """Flatten, Linear, Unflatten, pre-norm encoder layer, Flatten, Linear: one forward
    sends ONE request, released bit for bit as reference_forward computes the steps written
    from the modules, and within 1e-4 of PyTorch's own output."""
    cfg, daemon, client = running
    plain, model = digits_encoder(16, seed=7), digits_encoder(16, seed=7)
    want = digits_expected(plain, 16)
    protect(model, client=client, verbose=False)
    assert isinstance(model[1], ProtectedSequence) and report_of(model).requests == 1
    for seed, n in ((1, 5), (2, 3)):
        x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
        before = released(daemon)
        with torch.inference_mode():
            got = model(x)
        assert released(daemon) - before == 1
        assert same_bits(got.numpy(), want.forward(x.flatten(1).numpy(), cfg))
        assert same_bits(got.numpy(), model[1].reference(x.flatten(1), cfg.channels[0].variant))
        assert torch.allclose(got, pytorch_eval(plain, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("norm_first", "act", "bias"), [
    (False, nn.GELU(approximate="tanh"), False), (True, "relu", True), (True, "gelu", True)])
def test_a_lone_encoder_layer_for_three_sequence_lengths(running: Running, norm_first: bool,
                                                         act: Any, bias: bool) -> None:
    """A ProtectedEncoderLayer (post-norm tanh-GELU without bias, pre-norm ReLU or exact GELU
    with bias) on sequences of 5, 3 and 80 tokens (longer than the GPU kernel keeps scores
    for, `STORED_TOKENS`): one request each, released bit for bit as the steps written from
    the layer compute them, and within 1e-4 of PyTorch."""
    cfg, daemon, client = running
    layer = encoder(16, 4, seed=8, norm_first=norm_first, activation=act, bias=bias)
    protected = ProtectedEncoderLayer(layer, client, name="enc", timeout=2.0)
    for t in (5, 3, 80):
        x = torch.randn(2, t, 16, generator=torch.Generator().manual_seed(t))
        want = Expected()
        want.encoder(layer, t, act_name(act))
        before = released(daemon)
        with torch.inference_mode():
            got = protected(x)
        assert released(daemon) - before == 1
        ref = want.forward(x.reshape(-1, 16).numpy(), cfg).reshape(2, t, 16)
        assert same_bits(got.numpy(), ref)
        assert torch.allclose(got, pytorch_eval(layer, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tokens", [6, 80])
def test_a_causal_encoder_layer_through_the_daemon(running: Running, tokens: int) -> None:
    """Called with PyTorch's causal mask, a ProtectedEncoderLayer is one causal request:
    released bit for bit as the causal steps compute it, within 1e-4 of PyTorch's masked
    layer; the next call without the mask is the other model."""
    cfg, daemon, client = running
    layer = encoder(16, 4, seed=12, norm_first=True, activation="gelu")
    protected = ProtectedEncoderLayer(layer, client, name="enc", timeout=2.0)
    x = torch.randn(2, tokens, 16, generator=torch.Generator().manual_seed(13))
    mask = nn.Transformer.generate_square_subsequent_mask(tokens)
    want = Expected()
    want.encoder(layer, tokens, "gelu_erf", causal=True)
    before = released(daemon)
    with torch.inference_mode():
        got = protected(x, src_mask=mask, is_causal=True)
        plain = protected(x)
    assert released(daemon) - before == 2
    ref = want.forward(x.reshape(-1, 16).numpy(), cfg).reshape(2, tokens, 16)
    assert same_bits(got.numpy(), ref)
    with torch.inference_mode():
        assert torch.allclose(got, layer(x, src_mask=mask, is_causal=True), rtol=1e-4,
                              atol=1e-4)
    assert not torch.equal(got, plain)


def test_a_mask_is_refused_before_a_request(running: Running) -> None:
    """A call with a mask raises ValueError naming the layer; nothing is released."""
    _, daemon, client = running
    protected = ProtectedEncoderLayer(encoder(16, 2), client, name="enc", timeout=2.0)
    before = released(daemon)
    with torch.inference_mode(), pytest.raises(ValueError, match=r"'enc'.*masks are not"):
        protected(torch.randn(1, 4, 16), src_key_padding_mask=torch.zeros(1, 4, dtype=torch.bool))
    assert released(daemon) == before


def test_a_fault_in_one_channel_never_releases_a_wrong_output(tmp_path: Path) -> None:
    """With a corrupting fault injected into one of three channels, every output released
    equals the reference (the fault is in the products; the vote covers every step)."""
    with torch.inference_mode():
        digits_encoder()(torch.zeros(2, 1, 8, 8))
    cfg = make_config(tmp_path, "2oo3", injection=True, extra={"timing": TIMING})
    with system(cfg) as (_daemon, client):
        plain, model = digits_encoder(16, seed=9), digits_encoder(16, seed=9)
        want = digits_expected(plain, 16)
        protect(model, client=client, verbose=False)
        client.inject("c0", "bitflip-c")
        good = 0
        for seed in range(4):
            x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
            try:
                with torch.inference_mode():
                    got = model(x)
            except SafemonError:
                continue
            assert same_bits(got.numpy(), want.forward(x.flatten(1).numpy(), cfg))
            good += 1
        assert good > 0


@pytest.mark.gpu
def test_on_cuda_through_channel_processes_with_a_fault(tmp_path: Path) -> None:
    """On the CuPy backend with channel processes on an ipc:// ingress: the digits
    Sequential's one request takes the CUDA IPC path, returns a CUDA tensor whose bits equal
    the steps written from the modules (NumPy, on the host), and a bit flip injected into one
    channel is outvoted: the faulted pass releases the clean pass's bits."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    plain, model = digits_encoder(16, seed=10), digits_encoder(16, seed=10)
    want = digits_expected(plain, 16)
    model = model.cuda()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(11))
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"backend": "cupy", "timing": TIMING}, injection=True)
    with system(cfg) as (_daemon, client):
        protect(model, client=client, verbose=False)
        with torch.inference_mode():
            clean = model(x.cuda())
            on_device = client.last_request_device
            client.inject("c1", "bitflip-c")
            faulty = model(x.cuda())
    assert clean.is_cuda and on_device, "the request went through host memory"
    assert same_bits(clean.cpu().numpy(), want.forward(x.flatten(1).numpy(), cfg))
    assert same_bits(faulty.cpu().numpy(), clean.cpu().numpy())


@pytest.mark.gpu
def test_a_causal_long_sequence_layer_on_cuda(tmp_path: Path) -> None:
    """On the CuPy backend (inline channels, so the cupy build of ops.cu runs in the
    daemon): a ProtectedEncoderLayer on CUDA, exact GELU, called over 80 tokens (past the
    kernel's kept scores) with PyTorch's causal mask on the GPU: one request over CUDA IPC,
    whose bits equal the causal steps written from the layer (NumPy, on the host), and
    within 1e-4 of PyTorch's own masked layer on the GPU."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    tokens = 80
    layer = encoder(16, 4, seed=14, norm_first=True, activation="gelu")
    want = Expected()
    want.encoder(layer, tokens, "gelu_erf", causal=True)
    layer = layer.cuda()
    x = torch.randn(2, tokens, 16, generator=torch.Generator().manual_seed(15))
    mask = nn.Transformer.generate_square_subsequent_mask(tokens, device="cuda")
    cfg = make_config(tmp_path, "2oo3", placement="inline", transport="ipc",
                      extra={"backend": "cupy", "timing": TIMING})
    with torch.inference_mode():
        theirs = layer(x.cuda(), src_mask=mask, is_causal=True)
    with system(cfg) as (_daemon, client):
        protected = ProtectedEncoderLayer(layer, client, name="enc", timeout=30.0)
        with torch.inference_mode():
            got = protected(x.cuda(), src_mask=mask, is_causal=True)
            on_device = client.last_request_device
    assert got.is_cuda and on_device, "the request went through host memory"
    ref = want.forward(x.reshape(-1, 16).numpy(), cfg).reshape(2, tokens, 16)
    assert same_bits(got.cpu().numpy(), ref)
    assert torch.allclose(got, theirs, rtol=1e-4, atol=1e-4)
