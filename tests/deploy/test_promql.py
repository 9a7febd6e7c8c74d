"""Every PromQL expression in the dashboard and the alert rules refers only to metrics safemon
exports (`safemon/metrics.py`; plus `up` and dcgm-exporter's series it joins with), with labels
they have; and every metric is shown somewhere."""

from __future__ import annotations

import pytest

from tests.deploy.promql import (
    SAFEMON_METRICS,
    all_promql_expressions,
    dashboard_expressions,
    metric_names,
    rule_expressions,
    series_names,
    substitute_grafana_variables,
    unknown_references,
)


def test_metric_names_finds_selectors_and_skips_functions_keywords_and_labels() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, channel) (rate(safemon_kernel_seconds_bucket"
        '{channel=~"ch.*"}[5m] offset 1h))) > 0.5 and on(job) up unless {__name__="x_total"}'
    )
    assert metric_names(expr) == {"safemon_kernel_seconds_bucket", "up", "x_total"}


def test_metric_names_handles_trailing_grouping_and_bool() -> None:
    assert metric_names("sum(safemon_mode) by (mode) == bool 1") == {"safemon_mode"}


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("rate(safmon_requests_total[5m])", "'safmon_requests_total' is not a safemon series"),
        (
            "safemon_vote_latency_seconds > 1",
            "'safemon_vote_latency_seconds' is not a safemon series",
        ),
        ("safemon_requests > 1", "'safemon_requests' is not a safemon series"),
        ('safemon_mode{modes="SAFE"} == 1', "'safemon_mode' has no label 'modes'"),
    ],
)
def test_unknown_references_reports_typos_bare_histograms_and_bad_labels(
    expr: str, problem: str
) -> None:
    assert problem in unknown_references(expr)


def test_all_expressions_cover_dashboard_and_rules() -> None:
    exprs = all_promql_expressions()
    assert len(exprs) == len(dashboard_expressions()) + len(rule_expressions())
    assert len(rule_expressions()) >= 6
    assert all("$" not in e for e in exprs), "Grafana variables must be substituted"


@pytest.mark.parametrize("expr", all_promql_expressions())
def test_expression_refers_only_to_safemon_metrics(expr: str) -> None:
    assert metric_names(expr), f"no metric selected by {expr!r}"
    assert unknown_references(expr) == []


def test_every_exported_metric_is_on_the_dashboard() -> None:
    known = series_names()
    shown = {known[n] for e in dashboard_expressions() for n in metric_names(e) if n in known}
    assert shown == set(SAFEMON_METRICS)


def test_substitution_rejects_unknown_grafana_variables() -> None:
    assert substitute_grafana_variables("rate(x[$__rate_interval])") == "rate(x[1m])"
    assert substitute_grafana_variables('x{job=~"${job}"}') == 'x{job=~"safemon.*"}'
    with pytest.raises(ValueError, match="nope"):
        substitute_grafana_variables("rate(x[$nope])")
