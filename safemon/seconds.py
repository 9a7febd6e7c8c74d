"""Durations and instants in seconds: the one check every core and the client use.

A value in seconds is a finite `int` or `float`. `bool` is refused although it is an `int`:
`True` seconds is a bug, not one second. NaN and infinities are refused: a NaN deadline
compares false with everything and would silently disable the check it feeds. Pure.
"""

from __future__ import annotations

import math
from typing import TypeGuard

from safemon.errors import InvalidInputError

__all__ = ["check_seconds", "is_seconds", "postponed", "seconds_text"]


def is_seconds(value: object) -> TypeGuard[float]:
    """True for a finite int or float that is not a bool (narrows `value` for type checkers)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def seconds_text(value: float) -> str:
    """`value` seconds for a message: at most three decimals, no trailing zeros, no
    exponent ("0.283", "0.3", "86400"); below a millisecond as `{:g}` ("0.0004")."""
    if abs(value) < 0.001:
        return f"{value:g}"
    return f"{value:.3f}".rstrip("0").rstrip(".")


def check_seconds(name: str, value: object) -> float:
    """`value` as a float when `is_seconds(value)`.

    Raises:
        InvalidInputError: "<name> must be a finite number of seconds, got <value>".
    """
    if not is_seconds(value):
        raise InvalidInputError(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)


def postponed(deadline: float, moved: float, *, since: float, seconds: float, limit: float,
              until: float | None = None) -> tuple[float, float]:
    """A deadline after a shell read nothing for `seconds` after `since`: `(deadline, moved)`
    with the deadline `seconds` later when it lies after `since`, but moved no more than
    `limit` in all (`moved` counts what earlier postponements added) and never past `until`;
    unchanged otherwise. The one rule of every `Postpone` (`safemon.loop_attention`)."""
    step = min(seconds, limit - moved)
    if deadline <= since or step <= 0:
        return deadline, moved
    later = deadline + step if until is None else max(deadline, min(deadline + step, until))
    return later, moved + (later - deadline)
