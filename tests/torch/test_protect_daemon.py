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
    AutocastWarning,
    FoldedLinear,
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
    assert all(isinstance(model.mlp[i], nn.Identity) for i in (1, 3))
    assert all(isinstance(model.mlp[i], FoldedLinear) for i in (2, 4))
    assert model.mlp[0].folded == (model.mlp[2], model.mlp[4])
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


def _released(daemon: Daemon) -> float:
    v = daemon.registry.get_sample_value("safemon_requests_total", {"outcome": "released"})
    return v or 0.0


def test_a_transformer_encoder_layer_calls_its_protected_linears(
        running: tuple[Config, Daemon, Client]) -> None:
    """In eval mode PyTorch's fused fast path of nn.TransformerEncoderLayer reads linear1's
    and linear2's weights itself unless a child has a hook; the protected modules carry one,
    so both feed-forward layers go through safemon (two requests per call) and their
    outputs are the reference's. (An encoder layer given to protect as the model itself
    cannot be swapped whole, so its Linear layers are protected one by one and the report
    says why; in an nn.Sequential it is one request: tests/torch/test_encoder_daemon.py.)"""
    cfg, daemon, client = running
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    plain = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    plain.load_state_dict(layer.state_dict())
    protect(layer, client=client, verbose=False)
    assert report_of(layer).protected == ["linear1", "linear2"]
    assert "the model itself" in report_of(layer).entries[0].note
    x = torch.randn(2, 5, 16)
    before = _released(daemon)
    with torch.inference_mode():  # no test hook yet: a hook of its own turns the path off
        got, want = layer(x), plain(x)
    assert _released(daemon) - before == 2
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    seen = record(layer)
    with torch.inference_mode():
        layer(x)
    assert len(seen) == 2
    for module, inp, out in seen:
        assert same_bits(out.numpy(), reference_of(module, inp, cfg)), module.layer_name


class _Parallel(nn.Sequential):
    """A Sequential subclass that sums its branches: its children are not a chain."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum((m(x) for m in self), torch.zeros(()))


def test_a_sequential_subclass_is_not_folded(running: tuple[Config, Daemon, Client]) -> None:
    """Only nn.Sequential itself is a chain: in a subclass the Linear is protected alone and
    the ReLU beside it stays PyTorch's, so the model computes what it did."""
    _, _, client = running
    torch.manual_seed(4)
    model = nn.Sequential(_Parallel(nn.Linear(16, 16), nn.ReLU())).eval()
    plain = nn.Sequential(_Parallel(nn.Linear(16, 16), nn.ReLU())).eval()
    plain.load_state_dict(model.state_dict())
    protect(model, client=client, verbose=False)
    assert isinstance(model[0][0], ProtectedLinear) and type(model[0][1]) is nn.ReLU
    x = torch.randn(3, 16)
    with torch.inference_mode():
        assert torch.allclose(model(x), plain(x), rtol=1e-5, atol=1e-5)


def test_a_layer_held_at_two_places_is_left_alone_and_reported(
        running: tuple[Config, Daemon, Client]) -> None:
    """A Linear used twice (tied weights) is not swapped at one place only: it stays
    PyTorch's at both and the report says why."""
    _, _, client = running
    shared = nn.Linear(16, 16)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), shared, nn.ReLU(), shared).eval()
    protect(model, client=client, verbose=False)
    assert isinstance(model[0], ProtectedLinear)
    assert model[2] is shared and model[4] is shared
    report = report_of(model)
    why = {e.name: e.note for e in report.entries}
    assert "2" in report.unprotected and "several places" in why["2"]


def test_protect_keeps_eval_mode_and_refuses_training_mode(
        running: tuple[Config, Daemon, Client]) -> None:
    """Protected modules take the mode of the layers they replace; a model put in train()
    afterwards is refused even under no_grad (a folded Dropout would be skipped)."""
    _, daemon, client = running
    model = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4)).eval()
    protect(model, client=client, verbose=False)
    assert not model[0].training
    with torch.no_grad():
        model(torch.randn(2, 16))
    model.train()
    before = _released(daemon)
    with torch.no_grad(), pytest.raises(ValueError, match=r"training mode.*Dropout"):
        model(torch.randn(2, 16))
    assert _released(daemon) == before


def test_a_conv_with_an_empty_batch_gives_an_empty_output(
        running: tuple[Config, Daemon, Client]) -> None:
    """N = 0: the shape nn.Conv2d gives, nothing sent."""
    _, _, client = running
    conv = nn.Conv2d(2, 3, 3).eval()
    protected = ProtectedConv2d(conv, client, name="c").eval()
    with torch.inference_mode():
        assert protected(torch.randn(0, 2, 5, 5)).shape == conv(torch.randn(0, 2, 5, 5)).shape


def test_weights_changed_after_protect_are_refused(
        running: tuple[Config, Daemon, Client]) -> None:
    """The daemon computes with the weights registered at protect time: after an in-place
    write or a load_state_dict the next call raises instead of using the old weights; a
    move with .to() is not a change."""
    _, daemon, client = running
    model = nn.Sequential(nn.Linear(16, 4)).eval()
    protect(model, client=client, verbose=False)
    x = torch.randn(2, 16)
    model.to("cpu")
    with torch.no_grad():
        model(x)
        state = model.state_dict()
        state["0.weight"] = state["0.weight"] * 2
        model.load_state_dict(state)
    before = _released(daemon)
    with torch.no_grad(), pytest.raises(ValueError, match=r"layer '0'.*changed after protect"):
        model(x)
    fresh = nn.Sequential(nn.Linear(16, 4)).eval()
    protect(fresh, client=client, verbose=False)
    with torch.no_grad():
        fresh[0].bias.add_(1.0)
        with pytest.raises(ValueError, match=r"changed after protect"):
            fresh(x)
    assigned = protect(nn.Sequential(nn.Linear(16, 4)).eval(), client=client, verbose=False)
    state = {k: v * 2 for k, v in assigned.state_dict().items()}
    assigned.load_state_dict(state, assign=True)  # replaces the buffers: no in-place write
    with torch.no_grad(), pytest.raises(ValueError, match=r"changed after protect"):
        assigned(x)
    assert _released(daemon) == before


def test_a_protected_model_cannot_be_copied(running: tuple[Config, Daemon, Client]) -> None:
    """deepcopy and pickling (torch.save of the module) raise a TypeError that says what to
    do, instead of a copy bound to the original's runner."""
    import copy
    import io

    _, _, client = running
    model = protect(nn.Sequential(nn.Linear(16, 4)).eval(), client=client, verbose=False)
    with pytest.raises(TypeError, match=r"cannot be copied or pickled.*state_dict"):
        copy.deepcopy(model)
    with pytest.raises(TypeError, match=r"cannot be copied or pickled"):
        torch.save(model, io.BytesIO())


def test_a_closed_client_is_a_safemon_error(running: tuple[Config, Daemon, Client]) -> None:
    """A protected model whose client was closed raises SafemonError saying so."""
    cfg, daemon, _ = running
    own = Client(cfg, context=daemon.ctx)
    model = protect(nn.Sequential(nn.Linear(16, 4)).eval(), client=own, verbose=False)
    own.close()
    with torch.no_grad(), pytest.raises(SafemonError, match=r"Client is closed"):
        model(torch.randn(2, 16))


def test_state_dict_keys_and_values_are_the_unprotected_models(
        running: tuple[Config, Daemon, Client]) -> None:
    """A protected model's state_dict has the unprotected model's keys and values (a
    Sequential's later Linears keep theirs at their own places), so it loads strictly into
    a fresh unprotected model, which then computes what the original did."""
    _, _, client = running
    original = make_model()
    want = original.state_dict()
    model = protect(make_model(), client=client, verbose=False)
    got = model.state_dict()
    assert list(got) == list(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    fresh = Net().eval()
    fresh.load_state_dict(got, strict=True)
    x = inputs()
    with torch.inference_mode():
        assert torch.equal(fresh(x), original(x))


def test_a_write_to_a_folded_layer_is_refused(running: tuple[Config, Daemon, Client]) -> None:
    """An in-place write to the MLP's second Linear (held by its FoldedLinear) makes the
    next call raise, naming that layer, before the MLP's request is sent (the conv before
    it still sends its own)."""
    _, daemon, client = running
    model = protect(make_model(), client=client, verbose=False)
    x = inputs()
    with torch.inference_mode():
        model(x)
    with torch.no_grad():
        model.mlp[2].weight.mul_(2.0)
    before = _released(daemon)
    with torch.no_grad(), pytest.raises(ValueError, match=r"layer 'mlp.2'.*changed after"):
        model(x)
    assert _released(daemon) == before + 1


def test_protecting_a_protected_model_again_is_refused_and_changes_nothing(
        running: tuple[Config, Daemon, Client]) -> None:
    _, _, client = running
    model = protect(make_model(), client=client, verbose=False)
    layers = list(model.modules())
    with pytest.raises(ValueError, match=r"already protected: 'conv.0', 'mlp.0'.*Fix"):
        protect(model, client=client, verbose=False)
    assert list(model.modules()) == layers


def test_an_unbatched_conv_input_gives_the_unbatched_output(
        running: tuple[Config, Daemon, Client]) -> None:
    """(C, H, W) in, (O, Ho, Wo) out, as nn.Conv2d does, bit-exact with the reference."""
    cfg, _, client = running
    torch.manual_seed(3)
    conv = nn.Conv2d(2, 3, 3, padding=1).eval()
    protected = ProtectedConv2d(conv, client, name="c").eval()
    x = torch.randn(2, 6, 6)
    with torch.inference_mode():
        got = protected(x)
        batched = protected(x.unsqueeze(0))
        assert got.shape == conv(x).shape == (3, 6, 6)
    assert torch.equal(got, batched[0])
    assert same_bits(got.numpy(), reference_of(protected, x, cfg))
    with torch.inference_mode(), pytest.raises(ValueError, match=r"layer 'c' expects"):
        protected(torch.randn(3, 6, 6))


def test_autocast_warns_once_and_computes_in_float32(
        running: tuple[Config, Daemon, Client]) -> None:
    """Under torch.autocast a float32 input is computed in float32 (same bits as without),
    with an AutocastWarning naming the layer."""
    _, _, client = running
    model = protect(nn.Sequential(nn.Linear(16, 4)).eval(), client=client, verbose=False)
    x = torch.randn(2, 16)
    with torch.inference_mode():
        plain = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16), \
                pytest.warns(AutocastWarning, match=r"layer '0'.*float32"):
            under = model(x)
    assert under.dtype == torch.float32 and torch.equal(under, plain)
