"""The Kubernetes manifests: they parse, and the DaemonSet runs the self-test preflight on every
GPU node as a non-root, read-only container whose metrics the Service and ServiceMonitor reach."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from safemon.config import load_config
from tests.deploy.promql import DEPLOY_DIR

K8S = DEPLOY_DIR / "k8s"
CONFIG_PATH = "/etc/safemon/config.yaml"


def _documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        with path.open(encoding="utf-8") as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d is not None)
    return docs


def _one(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _documents() if d["kind"] == kind]
    return doc


def test_every_manifest_parses_and_has_kind_and_api_version() -> None:
    docs = _documents()
    assert {d["kind"] for d in docs} >= {"DaemonSet", "ConfigMap", "Service", "ServiceMonitor"}
    assert all(d.get("apiVersion") for d in docs)
    assert _one("ServiceMonitor")["apiVersion"] == "monitoring.coreos.com/v1"


def test_daemonset_runs_selftest_preflight_then_daemon_on_gpu_nodes() -> None:
    pod = _one("DaemonSet")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"] == ["safemon", "selftest", "--config", CONFIG_PATH]
    (main,) = pod["containers"]
    assert main["command"] == ["safemon", "run", "--config", CONFIG_PATH]
    for container in (init, main):
        assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/etc/safemon"]["readOnly"] is True
    assert pod["nodeSelector"]
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0


def test_config_volume_is_the_configmap_with_config_yaml() -> None:
    pod = _one("DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    configmap = _one("ConfigMap")
    assert volumes["config"]["configMap"]["name"] == configmap["metadata"]["name"]
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    # 127.0.0.1 would make the metrics unreachable for the Service (see configmap.yaml).
    assert config["metrics"]["host"] != "127.0.0.1"
    assert config["metrics"]["port"] == 9464


def test_configmap_config_is_valid_for_the_daemon(tmp_path: Path) -> None:
    """The embedded config passes safemon's own loader (no SAFEMON_* overrides applied)."""
    path = tmp_path / "config.yaml"
    path.write_text(_one("ConfigMap")["data"]["config.yaml"], encoding="utf-8")
    config = load_config(path, env={})
    assert config.metrics.host == "0.0.0.0" and config.metrics.port == 9464
    # The runtime dir is the pod's writable emptyDir mounted at /run/safemon.
    assert str(config.endpoints.runtime_dir) == "/run/safemon"
    (main,) = _one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert "/run/safemon" in {m["mountPath"] for m in main["volumeMounts"]}


def test_service_and_servicemonitor_reach_the_metrics_port() -> None:
    ds = _one("DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    service = _one("Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    assert port["port"] == 9464
    monitor = _one("ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [port["name"]]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomization_builds() -> None:
    proc = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(proc.stdout) if d}
    assert {"DaemonSet", "ConfigMap", "Service", "ServiceMonitor", "Namespace"} <= kinds
