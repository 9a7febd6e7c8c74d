"""The `safemon::forward` operator as PyTorch sees it: registered, with a fake
implementation, traced as one node by torch.export and torch.compile.

These tests give the operator a runner that is a plain float64 product (no daemon): they
test the operator's plumbing, not protection (tests/torch/test_protect_daemon.py does)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from safemon.torch import op  # noqa: E402

W = torch.arange(12, dtype=torch.float32).reshape(4, 3) / 7


def plain_product(x: torch.Tensor) -> torch.Tensor:
    return (x.double() @ W.double()).float()


KEY = op.register_runner(plain_product, "test")


class UsesOp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = torch.ops.safemon.forward(x, KEY, 3)
        return torch.relu(y) + 1


def test_operator_is_registered_under_the_safemon_namespace() -> None:
    """torch.ops.safemon.forward exists and calls the runner named by its key."""
    x = torch.randn(5, 4)
    assert torch.equal(torch.ops.safemon.forward(x, KEY, 3), plain_product(x))


def test_fake_implementation_gives_shape_without_computing() -> None:
    """Under FakeTensorMode the operator returns an (M, N) float32 fake, runner not called."""
    calls: list[int] = []

    def counting(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return plain_product(x)

    key = op.register_runner(counting, "count")
    with FakeTensorMode():
        out = torch.ops.safemon.forward(torch.empty(7, 4), key, 3)
    assert tuple(out.shape) == (7, 3) and out.dtype == torch.float32 and calls == []


def test_opcheck_passes() -> None:
    """torch.library.opcheck: schema, fake implementation and dispatch agree."""
    torch.library.opcheck(op.forward, (torch.randn(3, 4), KEY, 3),
                          test_utils=("test_schema", "test_faketensor"))


def test_export_keeps_one_safemon_node() -> None:
    """torch.export traces the operator as one call_function node (not its internals)."""
    ep = torch.export.export(UsesOp(), (torch.randn(2, 4),))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.safemon.forward.default in targets


def test_compile_fullgraph_runs_and_matches_eager() -> None:
    """torch.compile(fullgraph=True) has no graph break on the operator and gives the
    eager result."""
    model = UsesOp()
    x = torch.randn(6, 4)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), model(x))


def test_dead_runner_key_is_a_key_error() -> None:
    """A key whose module is gone raises KeyError naming the key."""
    with pytest.raises(KeyError, match="nope#0"):
        op.runner_for("nope#0")


def test_runner_returning_a_wrong_shape_is_an_error() -> None:
    """A runner that returns the wrong shape is caught, never passed on."""
    def bad(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(1, 1)

    key = op.register_runner(bad, "bad")
    with pytest.raises(RuntimeError, match="expected float32"):
        torch.ops.safemon.forward(torch.randn(2, 4), key, 3)


def shaped_product(x: torch.Tensor) -> torch.Tensor:
    """A runner of `forward_shaped`: (..., 4) → (..., 3), the leading dims flattened."""
    return plain_product(x.reshape(-1, 4)).reshape(*x.shape[:-1], 3)


SHAPED_KEY = op.register_runner(shaped_product, "shaped")


def test_forward_shaped_runs_the_runner_on_the_whole_shape() -> None:
    """torch.ops.safemon.forward_shaped hands x in its own shape to the runner and checks
    the shape it returns; its fake gives out_shape without calling it; opcheck passes."""
    x = torch.randn(2, 5, 4)
    assert torch.equal(torch.ops.safemon.forward_shaped(x, SHAPED_KEY, [2, 5, 3]),
                       shaped_product(x))
    with pytest.raises(RuntimeError, match=r"expected float32 \(2, 5, 2\)"):
        torch.ops.safemon.forward_shaped(x, SHAPED_KEY, [2, 5, 2])
    with FakeTensorMode():
        out = torch.ops.safemon.forward_shaped(torch.empty(7, 1, 4), "nobody#0", [7, 1, 3])
    assert tuple(out.shape) == (7, 1, 3)
    torch.library.opcheck(op.forward_shaped, (x, SHAPED_KEY, [2, 5, 3]),
                          test_utils=("test_schema", "test_faketensor"))
