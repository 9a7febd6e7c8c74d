"""Clopper–Pearson lower bounds against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from safemon.evidence.bounds import binomial_tail, clopper_pearson_lower, lower_bound_percent


def test_all_detected_bound_is_alpha_to_the_one_over_n() -> None:
    """k = n: p^n = α, so p_L = 0.05^(1/n) (n = 1 → 0.05; n = 299 → just above 0.99)."""
    assert clopper_pearson_lower(1, 1) == pytest.approx(0.05)
    assert clopper_pearson_lower(3, 3) == pytest.approx(0.05 ** (1 / 3))
    assert clopper_pearson_lower(299, 299) > 0.99 > clopper_pearson_lower(298, 298)


def test_none_detected_bound_is_zero() -> None:
    assert clopper_pearson_lower(0, 10) == 0.0


def test_one_of_two_solves_one_minus_q_squared() -> None:
    """k = 1, n = 2: P(X ≥ 1) = 1 − (1 − p)² = 0.05 → p = 1 − √0.95."""
    assert clopper_pearson_lower(1, 2) == pytest.approx(1 - math.sqrt(0.95), abs=1e-10)


def test_n_minus_one_of_n_solves_the_two_term_tail() -> None:
    """k = n − 1, n = 3: p³ + 3p²(1 − p) = 0.05, i.e. 3p² − 2p³ = 0.05, solved by hand below."""
    p = clopper_pearson_lower(2, 3)
    assert 3 * p**2 - 2 * p**3 == pytest.approx(0.05, abs=1e-10)
    assert p == pytest.approx(0.135350, abs=1e-6)


def test_large_campaign_bound_sits_below_the_estimate_by_about_two_sigma() -> None:
    """9,990 of 10,000: the bound lies below 99.9 % and above the normal approximation's 1.7σ."""
    p = lower_bound_percent(9990, 10000)
    assert 99.83 < p < 99.9


def test_binomial_tail_matches_a_direct_sum() -> None:
    n, k, p = 20, 15, 0.7
    direct = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
    assert binomial_tail(k, n, p) == pytest.approx(direct, rel=1e-12)


def test_bad_counts_raise() -> None:
    with pytest.raises(ValueError):
        clopper_pearson_lower(3, 2)
    with pytest.raises(ValueError):
        clopper_pearson_lower(0, 0)
    with pytest.raises(ValueError):
        clopper_pearson_lower(1, 2, confidence=1.0)
