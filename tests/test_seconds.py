"""`safemon.seconds`: the one check of a value in seconds (used by the voter, scheduler and
controller)."""

from __future__ import annotations

import math

import pytest

from safemon.errors import InvalidInputError
from safemon.seconds import check_seconds, is_seconds


@pytest.mark.parametrize("value", [0, 1, -2, 0.25, 1e9])
def test_finite_ints_and_floats_are_seconds(value: float) -> None:
    assert is_seconds(value)
    assert check_seconds("now", value) == float(value)
    assert type(check_seconds("now", value)) is float


@pytest.mark.parametrize("value", [True, False, math.nan, math.inf, -math.inf, "1", None, [1]])
def test_bools_non_finite_and_non_numbers_are_refused_with_the_name(value: object) -> None:
    assert not is_seconds(value)
    with pytest.raises(InvalidInputError, match="deadline must be a finite number of seconds"):
        check_seconds("deadline", value)
