"""The `running_prometheus` helper, against a real Prometheus: it becomes ready, scrapes itself
and the given target every second, loads the alert rules, and every dashboard and alert
expression evaluates without a PromQL error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.conftest import PrometheusTools
from tests.deploy.prometheus_server import (
    free_port,
    instant_query,
    running_prometheus,
    wait_for_query,
)
from tests.deploy.promql import (
    ALERTS_PATH,
    all_promql_expressions,
    metric_names,
    rule_expressions,
)


@pytest.fixture(scope="module")
def prometheus_url(
    prometheus_tools: PrometheusTools, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One Prometheus for this module; its `safemon` target is a port nobody listens on."""
    dead_target = f"127.0.0.1:{free_port()}"
    with running_prometheus(
        dead_target,
        tmp_path_factory.mktemp("prometheus"),
        rule_files=[ALERTS_PATH],
        binary=prometheus_tools.prometheus,
    ) as url:
        yield url


def test_self_scrape_is_up(prometheus_url: str) -> None:
    result = wait_for_query(prometheus_url, 'up{job="prometheus"}')
    assert [r["value"][1] for r in result] == ["1"]


def test_unreachable_target_is_scraped_and_down(prometheus_url: str) -> None:
    result = wait_for_query(prometheus_url, 'up{job="safemon"}')
    assert [r["value"][1] for r in result] == ["0"]


def test_query_errors_are_raised(prometheus_url: str) -> None:
    with pytest.raises(RuntimeError, match="bad_data"):
        instant_query(prometheus_url, "rate(up[5m]")


def test_alert_rules_are_loaded(prometheus_url: str) -> None:
    # The rule manager's own gauge, exported through the self-scrape: rules per group.
    result = wait_for_query(prometheus_url, "sum(prometheus_rule_group_rules)")
    assert result[0]["value"][1] == str(len(rule_expressions()))


@pytest.mark.parametrize("expr", all_promql_expressions())
def test_every_expression_evaluates(prometheus_url: str, expr: str) -> None:
    """No safemon series exist here, so results are empty, except the monitor-down rule over
    `up`, which holds for the dead target; the point is that Prometheus's own parser and type
    checker accept each expression (instant_query raises otherwise)."""
    result = instant_query(prometheus_url, expr)
    if metric_names(expr) == {"up"} and "absent(" not in expr:
        assert [r["metric"]["job"] for r in result] == ["safemon"], result
    else:
        assert result == []


def test_rejects_a_target_that_is_not_host_port(tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match="host:port"),
        running_prometheus("http://x/metrics", tmp_path),
    ):
        pass


def test_missing_binary_is_reported(tmp_path: Path) -> None:
    with (
        pytest.raises(FileNotFoundError),
        running_prometheus("127.0.0.1:1", tmp_path, binary=tmp_path / "no-such-prometheus"),
    ):
        pass
