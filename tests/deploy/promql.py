"""PromQL used by the deployment artefacts, and the metric catalogue it may refer to.

`all_promql_expressions()` returns every expression from the Grafana dashboard and the Prometheus
alert rules, ready to send to a real Prometheus: Grafana template variables are replaced by
concrete values (`GRAFANA_SUBSTITUTIONS`), because Prometheus itself does not know them.
`metric_names(expr)` extracts the series names an expression selects (a regex scan, not a full
parser: it is exact for the expression shapes the dashboard and the rules use, and it errs on the
side of reporting a word as a metric name, so a misspelt name cannot slip through).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
DEPLOY_DIR: Final = REPO_ROOT / "deploy"
DASHBOARD_PATH: Final = DEPLOY_DIR / "grafana" / "dashboards" / "safemon.json"
ALERTS_PATH: Final = DEPLOY_DIR / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG_PATH: Final = DEPLOY_DIR / "prometheus" / "prometheus.yml"

MetricType = Literal["counter", "gauge", "histogram"]

#: Labels of every per-channel metric: dcgm-exporter's `gpu` and `UUID` beside `channel`.
_CH: Final = frozenset({"channel", "gpu", "UUID"})

#: Every metric safemon exports (`safemon/metrics.py`): name -> (type, label names).
#: Counter names include their `_total` suffix, as they appear in the exposition.
SAFEMON_METRICS: Final[Mapping[str, tuple[MetricType, frozenset[str]]]] = {
    "safemon_requests_total": ("counter", frozenset({"outcome"})),
    "safemon_votes_total": ("counter", frozenset({"policy", "outcome"})),
    "safemon_channel_disagreements_total": ("counter", _CH),
    "safemon_channel_up": ("gauge", _CH),
    "safemon_channel_info": ("gauge", _CH | {"placement", "variant"}),
    "safemon_selftests_total": ("counter", _CH | {"result"}),
    "safemon_selftest_duration_seconds": ("histogram", frozenset()),
    "safemon_selftest_sm_coverage_ratio": ("gauge", _CH),
    "safemon_dti_overruns_total": ("counter", _CH),
    "safemon_mode": ("gauge", frozenset({"mode"})),
    "safemon_ecc_corrected_total": ("counter", frozenset({"buffer"})),
    "safemon_ecc_uncorrectable_total": ("counter", frozenset({"buffer"})),
    "safemon_vote_latency_seconds": ("histogram", frozenset()),
    "safemon_kernel_seconds": ("histogram", _CH),
    "safemon_messages_rejected_total": ("counter", frozenset({"reason"})),
    "safemon_fault_reaction_seconds": ("histogram", frozenset({"kind"})),
    "safemon_fault_detection_seconds": ("histogram", frozenset({"kind"})),
    "safemon_ftti_seconds": ("gauge", frozenset()),
    "safemon_hft": ("gauge", frozenset({"kind"})),
    "safemon_build_info": (
        "gauge", frozenset({"deployment", "version", "python", "backend"})
    ),
    "safemon_fault_injection_enabled": ("gauge", frozenset()),
    "safemon_cuda_mps_found": ("gauge", frozenset()),
    "safemon_fault_classes_total": ("counter", frozenset({"kind", "class"})),
    "safemon_evictions_total": ("counter", frozenset({"what"})),
    "safemon_loop_away_seconds_total": ("counter", frozenset()),
    "safemon_model_diverging_layer_total": ("counter", frozenset({"layer"})),
}

#: Series of other exporters the dashboard joins with: `up` (Prometheus's own per target)
#: and dcgm-exporter's, with the labels it attaches (names as dcgm-exporter spells them).
_DCGM: Final = frozenset({"gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id"})
EXTERNAL_METRICS: Final[Mapping[str, frozenset[str]]] = {
    "up": frozenset(),
    "DCGM_FI_DEV_GPU_UTIL": _DCGM,
    "DCGM_FI_DEV_XID_ERRORS": _DCGM | {"err_code", "err_msg"},
}

#: Labels Prometheus attaches to every scraped series (target labels), usable in any selector.
TARGET_LABELS: Final = frozenset({"instance", "job", "namespace", "pod", "service"})

#: Concrete values for the Grafana variables the dashboard uses. `$__rate_interval` must cover
#: at least four scrapes; the end-to-end test scrapes every 1 s, production every 5 s.
GRAFANA_SUBSTITUTIONS: Final[Mapping[str, str]] = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "job": "safemon.*",
    "deployment": ".*",
    "uuid": ".*",
}


def series_names() -> dict[str, str]:
    """Map every series name PromQL may select to the safemon metric it belongs to.

    A histogram `h` is selectable only as `h_bucket`, `h_sum` and `h_count` (Prometheus stores
    no bare `h` series); counters and gauges by their own name.
    """
    names: dict[str, str] = {}
    for metric, (kind, _labels) in SAFEMON_METRICS.items():
        if kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                names[metric + suffix] = metric
        else:
            names[metric] = metric
    return names


# --- expressions ---------------------------------------------------------------------------------

_GRAFANA_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


def substitute_grafana_variables(expr: str) -> str:
    """Replace Grafana template variables (`$x`, `${x}`, `${x:fmt}`, `[[x]]`) by their
    `GRAFANA_SUBSTITUTIONS` values.

    Raises:
        ValueError: the expression uses a variable with no substitution (it could not be sent to
            Prometheus as is, and guessing a value would hide the mistake).
    """

    def replace(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group is not None)
        try:
            return GRAFANA_SUBSTITUTIONS[name]
        except KeyError:
            raise ValueError(f"unknown Grafana variable {match.group(0)!r} in {expr!r}") from None

    return _GRAFANA_VAR.sub(replace, expr)


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested (collapsed) panels included; rows themselves are skipped."""
    for panel in panels:
        if panel.get("type") == "row":
            yield from iter_panels(panel.get("panels", []))
        else:
            yield panel


def load_dashboard(path: Path = DASHBOARD_PATH) -> dict[str, Any]:
    """The dashboard JSON as a dict. Raises `json.JSONDecodeError` if it does not parse."""
    with path.open(encoding="utf-8") as f:
        dashboard: dict[str, Any] = json.load(f)
    return dashboard


def dashboard_expressions(path: Path = DASHBOARD_PATH, *, substitute: bool = True) -> list[str]:
    """Every target `expr` of every panel, in panel order; Grafana variables substituted unless
    `substitute` is false. Raises `ValueError` for an unknown variable (see above)."""
    exprs = [
        str(target["expr"])
        for panel in iter_panels(load_dashboard(path).get("panels", []))
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    return [substitute_grafana_variables(e) for e in exprs] if substitute else exprs


def rule_expressions(path: Path = ALERTS_PATH) -> list[str]:
    """Every `expr` of every rule (alerting and recording) in a Prometheus rules file."""
    with path.open(encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    return [str(rule["expr"]) for group in rules["groups"] for rule in group["rules"]]


def all_promql_expressions() -> list[str]:
    """Every PromQL expression of the dashboard and the alert rules, dashboard first, each ready
    to be sent to Prometheus's query API (Grafana variables substituted)."""
    return dashboard_expressions() + rule_expressions()


# --- metric names --------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NUMBER = re.compile(r"(?<![\w:])\d[\w.]*")
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}")
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([^"]*)"')
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")

#: PromQL words that are not metric names when not followed by "(": binary and set operators,
#: modifiers, aggregation operators (which may be followed by `by (...)`) and literals.
_KEYWORDS: Final = frozenset(
    {
        "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
        "group_left", "group_right", "inf", "nan", "atan2",
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile",
    }
)  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric (series) names an expression selects.

    Everything that is not a selector is removed first: string literals, label matchers, range
    and subquery brackets, grouping label lists, numbers; then every remaining word that is not a
    function call (followed by "(") or a PromQL keyword is a metric name.
    """
    # `{__name__="x"}` selects x too; a regex name matcher (`=~`) is left to promtool.
    names: set[str] = set(_NAME_MATCHER.findall(expr))
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("{}", text)
    text = _RANGE.sub("[]", text)
    text = _GROUPING.sub(r"\1", text)
    text = _NUMBER.sub(" ", text)
    for match in _WORD.finditer(text):
        word = match.group(0)
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function call or an aggregation: sum(...), rate(...)
        if word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def selector_labels(expr: str) -> dict[str, set[str]]:
    """Label names each `metric{...}` selector of the expression matches on, by metric name."""
    labels: dict[str, set[str]] = {}
    for match in _SELECTOR.finditer(_STRING.sub('""', expr)):
        labels.setdefault(match.group(1), set()).update(_MATCHER_LABEL.findall(match.group(2)))
    return labels


def unknown_references(expr: str) -> list[str]:
    """Human-readable problems with the metrics an expression refers to; empty when it only
    selects safemon series that exist, with labels those series have."""
    known = series_names()
    problems = [
        f"{name!r} is not a safemon series"
        for name in sorted(metric_names(expr))
        if name not in known and name not in EXTERNAL_METRICS
    ]
    for name, used in sorted(selector_labels(expr).items()):
        if name in EXTERNAL_METRICS:
            allowed = EXTERNAL_METRICS[name] | TARGET_LABELS
        elif name in known:
            allowed = SAFEMON_METRICS[known[name]][1] | TARGET_LABELS
        else:
            continue  # already reported above
        problems.extend(f"{name!r} has no label {label!r}" for label in sorted(used - allowed))
    return problems
