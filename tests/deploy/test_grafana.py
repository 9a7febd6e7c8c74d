"""The Grafana dashboard and its provisioning: the JSON parses, every panel queries the
provisioned Prometheus, and the panels the operators need are there."""

from __future__ import annotations

from typing import Any

import yaml

from tests.deploy.promql import DEPLOY_DIR, iter_panels, load_dashboard

PROVISIONING = DEPLOY_DIR / "grafana" / "provisioning"
DS_VARIABLE = "${DS_PROMETHEUS}"


def _datasource_file() -> dict[str, Any]:
    (ds,) = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert isinstance(ds, dict)
    return ds


def _panels() -> list[dict[str, Any]]:
    return list(iter_panels(load_dashboard()["panels"]))


def test_dashboard_is_recent_schema_with_unique_panel_ids() -> None:
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in _panels()]
    assert len(ids) == len(set(ids))


def test_every_panel_has_a_datasource_and_a_target_with_expr() -> None:
    uid = _datasource_file()["uid"]
    for panel in _panels():
        assert panel["datasource"]["type"] == "prometheus", panel["title"]
        assert panel["datasource"]["uid"] in {DS_VARIABLE, uid}, panel["title"]
        targets = panel.get("targets", [])
        assert targets, panel["title"]
        assert all(t.get("expr", "").strip() for t in targets), panel["title"]
        assert all(
            t.get("datasource", panel["datasource"])["uid"] in {DS_VARIABLE, uid} for t in targets
        )


def test_datasource_variable_defaults_to_the_provisioned_datasource() -> None:
    ds = _datasource_file()
    assert ds["type"] == "prometheus"
    (var,) = [v for v in load_dashboard()["templating"]["list"] if v["name"] == "DS_PROMETHEUS"]
    assert var["type"] == "datasource" and var["query"] == "prometheus"
    assert var["current"]["value"] == ds["uid"]


def test_required_panels_and_their_queries() -> None:
    by_title = {p["title"]: [t["expr"] for t in p["targets"]] for p in _panels()}
    required = {
        "Current mode": ["safemon_mode"],
        "Votes by outcome (rate)": ["rate(safemon_votes_total"],
        "Disagreements per channel": ["safemon_channel_disagreements_total"],
        "Channel up": ["safemon_channel_up"],
        "Self-tests pass / fail": ["safemon_selftests_total"],
        "DTI overruns": ["safemon_dti_overruns_total"],
        "Vote latency p50 / p99": ["histogram_quantile(0.5,", "histogram_quantile(0.99,"],
        "Kernel time per channel p50": ["histogram_quantile(0.5,", "safemon_kernel_seconds_bucket"],
        "ECC corrected / uncorrectable": [
            "safemon_ecc_corrected_total",
            "safemon_ecc_uncorrectable_total",
        ],
        "Fault reaction (FRTI) and detection (FDTI) times": [
            "safemon_fault_reaction_seconds_bucket", "safemon_fault_detection_seconds_bucket"],
        "Rejected messages by reason": ["safemon_messages_rejected_total"],
    }
    for title, fragments in required.items():
        assert title in by_title, f"missing panel {title!r}"
        joined = " ".join(by_title[title])
        for fragment in fragments:
            assert fragment in joined, f"{title!r} lacks {fragment!r}"
    kernel = " ".join(by_title["Kernel time per channel p50"])
    assert "by (le, channel)" in kernel, "per-channel quantiles must keep the channel label"


def test_dashboard_provider_points_where_compose_mounts_the_dashboards() -> None:
    (provider,) = yaml.safe_load((PROVISIONING / "dashboards" / "safemon.yml").read_text())[
        "providers"
    ]
    assert provider["type"] == "file"
    compose = yaml.safe_load((DEPLOY_DIR / "docker" / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"../grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert "../grafana/provisioning/datasources:/etc/grafana/provisioning/datasources:ro" in mounts
    assert "../grafana/provisioning/dashboards:/etc/grafana/provisioning/dashboards:ro" in mounts
    # The datasource URL is interpolated from the environment compose sets.
    url_var = _datasource_file()["url"].strip("${}")
    assert compose["services"]["grafana"]["environment"][url_var].startswith("http://")


def test_dashboard_selects_by_job_and_deployment_never_by_instance() -> None:
    """`instance` changes with every pod restart: no variable and no selector may use it."""
    dashboard = load_dashboard()
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"job", "deployment"} <= names and "instance" not in names
    for panel in _panels():
        for target in panel["targets"]:
            expr = target["expr"]
            assert "instance=~" not in expr and "$instance" not in expr, panel["title"]
            if "safemon_" in expr:
                assert '$job' in expr and 'deployment=~"$deployment"' in expr, panel["title"]


def test_per_gpu_view_groups_by_uuid_and_joins_dcgm() -> None:
    by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in _panels()}
    per_gpu = [t for t, e in by_title.items() if "by (UUID" in e or "by (le, UUID" in e]
    assert len(per_gpu) >= 3, per_gpu
    dcgm = by_title["GPU utilisation and XID errors (dcgm-exporter)"]
    assert "DCGM_FI_DEV_GPU_UTIL" in dcgm and "on (UUID)" in dcgm
