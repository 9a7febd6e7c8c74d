"""`safemon.seconds`: the one check of a value in seconds (used by the voter, scheduler and
controller)."""

from __future__ import annotations

import math

import pytest

from safemon.errors import InvalidInputError
from safemon.seconds import check_seconds, is_seconds, postponed


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


def test_postponed_moves_a_deadline_after_since_by_at_most_the_limit_and_never_past_until() -> None:
    assert postponed(10.0, 0.0, since=9.0, seconds=1.5, limit=2.0) == (11.5, 1.5)
    assert postponed(11.5, 1.5, since=11.0, seconds=1.5, limit=2.0) == (12.0, 2.0)
    assert postponed(12.0, 2.0, since=11.5, seconds=1.0, limit=2.0) == (12.0, 2.0)
    assert postponed(9.0, 0.0, since=9.0, seconds=1.0, limit=2.0) == (9.0, 0.0)  # not after since
    assert postponed(10.0, 0.0, since=9.0, seconds=1.5, limit=2.0, until=10.5) == (10.5, 0.5)


def test_seconds_text_is_readable_at_every_scale() -> None:
    from safemon.seconds import seconds_text

    assert [seconds_text(v) for v in (0.282548, 0.3, 1.0, 1000.0, 86400.0, 0.0004)] == [
        "0.283", "0.3", "1", "1000", "86400", "0.0004"]
