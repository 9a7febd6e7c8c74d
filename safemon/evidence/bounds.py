"""One-sided Clopper–Pearson lower confidence bounds for campaign counts. Pure, no I/O.

A campaign that detects `k` of `n` dangerous faults estimates the diagnostic coverage as k/n.
A safety case needs a figure the true coverage exceeds with stated confidence: the one-sided
Clopper–Pearson (exact binomial) lower bound p_L at confidence 1 − α is the p solving

    P(X ≥ k | n, p) = α,   X ~ Binomial(n, p),

equivalently the α quantile of Beta(k, n − k + 1). Edge cases: p_L = 0 for k = 0, and
p_L = α^(1/n) for k = n (the solution of p^n = α).

The binomial tail is the regularised incomplete beta function I_p(k, n − k + 1), evaluated
here by its continued fraction (modified Lentz) with log-gamma prefactors, and the quantile
is found by bisection on p to 1e-12 — no SciPy needed (it is not a dependency of safemon).
"""

from __future__ import annotations

import math

__all__ = ["DEFAULT_CONFIDENCE", "binomial_tail", "clopper_pearson_lower", "lower_bound_percent"]

#: The confidence of every bound safemon reports (one-sided).
DEFAULT_CONFIDENCE = 0.95

_EPS = 1e-15
_TINY = 1e-300


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (converges for x < (a+1)/(a+b+2))."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), a, b > 0, 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p).

    Raises:
        ValueError: n < 0, k outside 0..n, or p outside [0, 1].
    """
    _check_counts(k, n)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], not {p}")
    if k == 0:
        return 1.0
    return _betainc(float(k), float(n - k + 1), p)


def _check_counts(k: int, n: int) -> None:
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 ≤ successes ≤ trials, got {k} of {n}")


def clopper_pearson_lower(successes: int, trials: int, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """The one-sided Clopper–Pearson lower bound of a binomial proportion, as a fraction.

    Args:
        successes: detected faults k (0 ≤ k ≤ trials).
        trials: dangerous faults n (≥ 1).
        confidence: 1 − α, in (0, 1).

    Raises:
        ValueError: counts out of range, no trials, or a confidence outside (0, 1).
    """
    _check_counts(successes, trials)
    if trials == 0:
        raise ValueError("a bound needs at least one trial")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), not {confidence}")
    alpha = 1.0 - confidence
    if successes == 0:
        return 0.0
    if successes == trials:
        return float(alpha ** (1.0 / trials))
    lo, hi = 0.0, successes / trials  # the tail rises with p; at p = k/n it exceeds α
    while hi - lo > 1e-12:
        mid = 0.5 * (lo + hi)
        if binomial_tail(successes, trials, mid) < alpha:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def lower_bound_percent(successes: int, trials: int, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """`clopper_pearson_lower` in percent."""
    return 100.0 * clopper_pearson_lower(successes, trials, confidence)
