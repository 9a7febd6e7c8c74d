"""The NumPy references of a GPU test module's bit-exact cases, computed where they are fast.

`case_references` backs a session fixture that maps a case index to its reference (C bytes,
ES bytes). In one pytest process it computes every case the session selected, in a pool of
spawned processes (one per core but one), each of which also compiles the case's kernel into
CuPy's disk cache: the module's tests then only launch. Under pytest-xdist each worker runs
its share of the tests and has a session of its own, so a pool per worker would compute every
case once per worker; there the mapping computes (and compiles) a case when its test first
asks for it, and the workers share the work.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np
import pytest

Reference = tuple[bytes, bytes]


class _OnDemand(Mapping[int, Reference]):
    """Case index → reference, each computed on first access and kept."""

    def __init__(self, cases: Sequence[Any], compute: Callable[[Any], Reference]) -> None:
        self._cases = cases
        self._compute = compute
        self._done: dict[int, Reference] = {}

    def __getitem__(self, index: int) -> Reference:
        if not isinstance(index, int) or not 0 <= index < len(self._cases):
            raise KeyError(index)
        if index not in self._done:
            self._done[index] = self._compute(self._cases[index])
        return self._done[index]

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self._cases)))

    def __len__(self) -> int:
        return len(self._cases)


def case_references(request: pytest.FixtureRequest, cases: Sequence[Any], test_name: str,
                    compute: Callable[[Any], Reference]) -> Mapping[int, Reference]:
    """The references of `cases` (each `((m, n, k), variant)`) for the test `test_name`,
    parametrized by `index`. `compute` must be a module-level function (it is sent to spawned
    processes) returning (C bytes, ES bytes)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return _OnDemand(cases, compute)
    # Only the cases this session runs (`-k` may select a few), big ones first.
    wanted = {item.callspec.params["index"] for item in request.session.items  # type: ignore[attr-defined]
              if getattr(item, "originalname", "") == test_name}
    order = sorted(wanted, key=lambda i: -np.prod(cases[i][0]))
    if not order:
        return {}
    workers = max(1, min(15, (os.cpu_count() or 2) - 1))
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        results = pool.map(compute, [cases[i] for i in order], chunksize=1)
        return dict(zip(order, results, strict=True))
