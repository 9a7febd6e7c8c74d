"""The GPU modules' reference fixture helper (`tests.kernels.case_references`) on the CPU."""

from __future__ import annotations

import pytest

from tests.kernels.case_references import case_references

CASES = [((2, 3, 4), "a"), ((5, 6, 7), "b")]
calls: list[str] = []


def _compute(case: tuple[tuple[int, int, int], str]) -> tuple[bytes, bytes]:
    calls.append(case[1])
    return case[1].encode(), bytes(case[0])


def test_under_xdist_each_case_is_computed_when_first_asked_for_and_kept(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    calls.clear()
    refs = case_references(request, CASES, "test_nothing", _compute)
    assert calls == [] and len(refs) == 2 and list(refs) == [0, 1]
    assert refs[1] == (b"b", bytes((5, 6, 7)))
    assert refs[1] == (b"b", bytes((5, 6, 7)))
    assert calls == ["b"]
    assert 2 not in refs and refs.get(-1) is None and calls == ["b"]


def test_without_xdist_only_the_selected_cases_are_computed(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    # No test of this session is named so: nothing is selected, nothing computed.
    assert case_references(request, CASES, "test_nothing", _compute) == {}
