"""A protected PyTorch model through a real in-process 2oo3 daemon (NumPy backend):
every protected output equals the safemon reference bit for bit, one request per group,
faults in one channel never release a wrong output, torch.compile runs it."""

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
from safemon.errors import SafemonError  # noqa: E402
from safemon.torch import (  # noqa: E402
    ProtectedConv2d,
    ProtectedLinear,
    ProtectedSequence,
    protect,
    report_of,
)

from ..runtime.helpers import make_config, same_bits, system  # noqa: E402

Protected = (ProtectedLinear, ProtectedSequence, ProtectedConv2d)


class Net(nn.Module):
    """A small CNN head and an MLP: a conv (+ReLU), pooling, a 3-layer Sequential."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
        self.pool = nn.AvgPool2d(2)
        self.mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32),
                                 nn.GELU(approximate="tanh"), nn.Linear(32, 10))
        self.norm = nn.LayerNorm(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(self.conv(x)).flatten(1)
        out: torch.Tensor = self.norm(self.mlp(h))
        return out


def make_model(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net().eval()


def inputs(seed: int = 1, n: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g)


#: Looser than the runtime tests' 0.2 s DTI: torch's first calls in this process (lazy
#: initialisation, hold the GIL for a while on 2 cores) must not look like a silent channel.
TIMING = {"request_deadline_s": 2.0, "dti_s": 1.0, "selftest_deadline_s": 0.5,
          "heartbeat_interval_s": 0.1, "heartbeat_timeout_s": 3.0, "ftti_s": 10.0}


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Config, Daemon, Client]]:
    with torch.inference_mode():  # torch's one-time set-up before the daemon's clocks run
        make_model()(inputs())
    cfg = make_config(tmp_path, "2oo3", injection=True, extra={"timing": TIMING})
    with system(cfg) as (daemon, client):
        yield cfg, daemon, client


def reference_of(module: Any, x: torch.Tensor, cfg: Config) -> np.ndarray[Any, Any]:
    """What `module` must output for input x: reference_forward on its layers (NumPy)."""
    assert cfg.channels is not None
    out: np.ndarray[Any, Any] = module.reference(x, cfg.channels[0].variant)
    return out


def record(model: nn.Module) -> list[tuple[nn.Module, torch.Tensor, torch.Tensor]]:
    """Hook every protected module; the list fills with (module, input, output) per call."""
    seen: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
    for m in model.modules():
        if isinstance(m, Protected):
            m.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0], out)))
    return seen


def test_protect_swaps_the_right_layers(running: tuple[Config, Daemon, Client]) -> None:
    """conv+ReLU → ProtectedConv2d, the MLP → one ProtectedSequence (ReLU/GELU folded to
    Identity), pooling and LayerNorm untouched."""
    _, _, client = running
    model = protect(make_model(), client=client, verbose=False)
    assert isinstance(model.conv[0], ProtectedConv2d) and isinstance(model.conv[1], nn.Identity)
    assert isinstance(model.mlp[0], ProtectedSequence)
    assert all(isinstance(model.mlp[i], nn.Identity) for i in range(1, 5))
    assert type(model.norm) is nn.LayerNorm and type(model.pool) is nn.AvgPool2d
    report = report_of(model)
    assert report.protected == ["conv.0", "mlp.0", "mlp.2", "mlp.4"]
    assert report.unprotected == ["pool", "norm"] and report.requests == 2


def test_protected_outputs_equal_the_reference_bit_for_bit(
        running: tuple[Config, Daemon, Client]) -> None:
    """Every protected module's output is reference_forward on its input, bit for bit, and
    the model's output stays close to the unprotected PyTorch model's."""
    cfg, _, client = running
    plain = make_model()
    model = protect(make_model(), client=client, verbose=False)
    seen = record(model)
    x = inputs()
    with torch.inference_mode():
        got, want = model(x), plain(x)
    assert len(seen) == 2
    for module, inp, out in seen:
        assert same_bits(out.numpy(), reference_of(module, inp, cfg)), module.layer_name
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def test_one_request_per_group(running: tuple[Config, Daemon, Client]) -> None:
    """One forward sends exactly report.requests requests (the 3-layer MLP is one)."""
    _, daemon, client = running
    model = protect(make_model(), client=client, verbose=False)

    def released() -> float:
        v = daemon.registry.get_sample_value("safemon_requests_total", {"outcome": "released"})
        return v or 0.0

    before = released()
    with torch.no_grad():
        model(inputs())
    assert released() - before == report_of(model).requests == 2


def test_fault_in_one_channel_never_releases_a_wrong_output(
        running: tuple[Config, Daemon, Client]) -> None:
    """With a corrupting fault injected into one of three channels, every output that is
    released equals the reference; a refusal is a typed SafemonError."""
    cfg, _, client = running
    model = protect(make_model(), client=client, verbose=False)
    seen = record(model)
    client.inject("c0", "bitflip-c")
    released = 0
    for seed in range(6):
        try:
            with torch.inference_mode():
                model(inputs(seed))
        except SafemonError:
            continue
    for module, inp, out in seen:
        assert same_bits(out.numpy(), reference_of(module, inp, cfg)), module.layer_name
        released += 1
    assert released > 0


def test_forward_errors_name_the_layer(running: tuple[Config, Daemon, Client]) -> None:
    """fp16 input → TypeError, train() with autograd → ValueError, requires_grad →
    ValueError; each names the first protected layer."""
    _, _, client = running
    model = protect(make_model(), client=client, verbose=False)
    with pytest.raises(TypeError, match=r"layer 'conv\.0'.*float32"):
        model(inputs().half())
    model.train()
    with pytest.raises(ValueError, match=r"layer 'conv\.0'.*training mode"):
        model(inputs())
    model.eval()
    with pytest.raises(ValueError, match=r"layer 'conv\.0'.*requires grad"):
        model(inputs().requires_grad_())


def test_torch_compile_runs_a_protected_model(running: tuple[Config, Daemon, Client]) -> None:
    """torch.compile (aot_eager, full graph: the operator is one node) gives the eager
    protected output bit for bit."""
    _, _, client = running
    model = protect(make_model(), client=client, verbose=False)
    x = inputs()
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert same_bits(compiled.numpy(), eager.numpy())


def test_protect_prints_the_report(running: tuple[Config, Daemon, Client],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """protect() prints what it protected and what it left to PyTorch."""
    _, _, client = running
    protect(make_model(), client=client)
    out = capsys.readouterr().out
    assert "4 layers protected in 2 request(s)" in out and "NOT protected" in out
