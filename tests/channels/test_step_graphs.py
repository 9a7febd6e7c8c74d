"""`StepGraphs` bookkeeping without a GPU (a fake CuPy): capture on the second sight of a
key, least recently used graphs dropped at capacity, allocations drawn from the step's own
pool during the capture, and a failed capture ended and not kept."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from safemon.channels import step_graphs
from safemon.channels.step_graphs import StepGraphs


class _Stream:
    def __init__(self) -> None:
        self.capturing = False
        self.launched: list[Any] = []

    def begin_capture(self, mode: Any = None) -> None:
        assert not self.capturing
        self.capturing = True

    def end_capture(self) -> Any:
        assert self.capturing
        self.capturing = False
        stream = self

        class Graph:
            def launch(self, s: Any) -> None:
                stream.launched.append(self)
        return Graph()


class _FakeCupy:
    allocator: Any = None

    class cuda:  # mirrors cupy.cuda
        class runtime:
            streamCaptureModeRelaxed = 2

        class MemoryPool:
            def malloc(self, n: int) -> bytes:
                return bytes(n)

        @staticmethod
        @contextlib.contextmanager
        def using_allocator(alloc: Any) -> Iterator[None]:
            _FakeCupy.allocator = alloc
            try:
                yield
            finally:
                _FakeCupy.allocator = None


@pytest.fixture(autouse=True)
def _fake_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    import safemon.kernels.compiler as compiler

    monkeypatch.setattr(compiler, "import_cupy", lambda: _FakeCupy)


def test_a_key_is_captured_on_its_second_sight_and_launched_after() -> None:
    graphs, stream = StepGraphs(capacity=2), _Stream()
    allocators: list[Any] = []

    def queue() -> str:
        allocators.append(_FakeCupy.allocator)
        return "handles"

    assert graphs.get("a") is None and not graphs.seen_before("a")
    assert graphs.seen_before("a")  # second sight: the caller captures now
    step = graphs.capture("a", stream, queue)
    assert not stream.capturing and graphs.get("a") is step and graphs.captured == 1
    assert allocators == [step.pool.malloc]  # the step's own pool while capturing
    assert _FakeCupy.allocator is None  # and only then
    assert step.launch(stream) == "handles" and stream.launched == [step.graph]


def test_the_least_recently_used_graph_is_dropped_at_capacity() -> None:
    graphs, stream = StepGraphs(capacity=2), _Stream()
    for key in ("a", "b"):
        graphs.capture(key, stream, lambda: None)
    assert graphs.get("a") is not None  # "a" is now the most recently used
    graphs.capture("c", stream, lambda: None)
    assert len(graphs) == 2 and graphs.get("b") is None
    assert graphs.get("a") is not None and graphs.get("c") is not None
    graphs.clear()
    assert len(graphs) == 0 and not graphs.seen_before("a")


def test_a_dropped_weights_steps_and_sightings_are_forgotten() -> None:
    """`drop_holding(w)`: every step that keeps `w` goes, and so do the keys naming it by
    id (a later object may get that id); the other steps stay."""
    graphs, stream = StepGraphs(capacity=4), _Stream()
    w, other = object(), object()
    k1, k2, k3 = ("product", id(w), 1), ("model", id(w), 2), ("product", id(other), 1)
    graphs.capture(k1, stream, lambda: None, keep=(w,))
    graphs.capture(k2, stream, lambda: None, keep=(other, w))
    graphs.capture(k3, stream, lambda: None, keep=(other,))
    graphs.seen_before(("product", id(w), 9))  # a sighting only
    assert graphs.drop_holding(w) == 2
    assert len(graphs) == 1 and graphs.get(k3) is not None
    assert graphs.get(k1) is None and graphs.get(k2) is None
    assert not graphs.seen_before(("product", id(w), 9))  # forgotten: a first sight again


def test_a_failed_capture_is_ended_and_not_kept() -> None:
    graphs, stream = StepGraphs(), _Stream()

    def queue() -> None:
        raise ValueError("bad shape")

    with pytest.raises(ValueError, match="bad shape"):
        graphs.capture("a", stream, queue)
    assert not stream.capturing and graphs.get("a") is None and graphs.captured == 0
    # never tried again: the caller queues this key by hand from now on
    assert not graphs.seen_before("a") and not graphs.seen_before("a")


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        StepGraphs(capacity=0)
    assert step_graphs.DEFAULT_CAPACITY >= 1


def test_only_small_steps_are_worth_a_graph() -> None:
    """Steps with large activations are queued by hand (a graph would keep their buffers)."""
    assert step_graphs.worth_a_graph(64, [4096, 4096, 4096, 4096, 4096])  # the 4-layer MLP
    assert step_graphs.worth_a_graph(80, [80, 80])
    assert step_graphs.worth_a_graph(1024, [64, 1024])
    assert not step_graphs.worth_a_graph(4096, [4096, 4096])  # 4096³
    assert not step_graphs.worth_a_graph(0, [16])
