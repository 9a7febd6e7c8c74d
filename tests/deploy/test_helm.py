"""The Helm chart, rendered offline by a real `helm`: it lints, every rendered manifest of both
modes passes the Kubernetes and prometheus-operator schemas, the config it renders is one the
daemon accepts, its rules pass promtool, and the static manifests of deploy/k8s are its output.

Behaviour checked on the rendered manifests (no cluster here, so these stand in for one):
- node mode: the DaemonSet takes no GPU from the device plugin, CURVE keys come from a Secret,
  and applications reach the tcp:// ingress through a node-local Service;
- sidecar mode: safemon is a native sidecar (init container, restartPolicy Always) holding the
  pod's one GPU and sharing the ipc:// socket directory with the app;
- both: probes are httpGet /readyz and /healthz on the metrics port.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from safemon.config import load_config
from tests.deploy.conftest import PrometheusTools
from tests.deploy.k8s_schema import problems
from tests.deploy.promql import ALERTS_PATH, DASHBOARD_PATH, DEPLOY_DIR

CHART = DEPLOY_DIR / "helm" / "safemon"
MODES = ("node", "sidecar")
RENDER_SCRIPT = DEPLOY_DIR / "helm" / "render-static.sh"


def render(helm: Path, mode: str, *sets: str, release: str = "safemon") -> list[dict[str, Any]]:
    """`helm template` of the chart in namespace safemon; the documents, in order."""
    args = [str(helm), "template", release, str(CHART), "--namespace", "safemon",
            "--set", f"mode={mode}"]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (workload,) = [d for d in docs if d["kind"] in ("DaemonSet", "Deployment")]
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def safemon_container(spec: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in [*spec.get("initContainers", []), *spec["containers"]]
            if c["name"] == "safemon"]
    return c


def test_chart_lints(helm: Path) -> None:
    proc = subprocess.run([str(helm), "lint", "--strict", str(CHART)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("mode", MODES)
def test_every_rendered_manifest_passes_its_schema(helm: Path, mode: str) -> None:
    docs = render(helm, mode)
    kinds = {d["kind"] for d in docs}
    assert {"ConfigMap", "PrometheusRule"} <= kinds
    assert ("ServiceMonitor" if mode == "node" else "PodMonitor") in kinds
    for doc in docs:
        assert problems(doc) == []


def test_schema_check_catches_misspelt_fields(helm: Path) -> None:
    """Guards the test above: the validators are strict, for core and operator kinds alike."""
    docs = render(helm, "node")
    ds, sm = one(docs, "DaemonSet"), one(docs, "ServiceMonitor")
    ds["spec"]["template"]["spec"]["containers"][0]["imagePullPolciy"] = "Always"
    sm["spec"]["endpoints"][0]["intervall"] = "5s"
    assert any("imagePullPolciy" in p for p in problems(ds))
    assert any("intervall" in p for p in problems(sm))


@pytest.mark.parametrize("mode", MODES)
def test_rendered_config_is_valid_for_the_daemon(helm: Path, mode: str, tmp_path: Path) -> None:
    config_map = one(render(helm, mode), "ConfigMap", "-config")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"], encoding="utf-8")
    config = load_config(path, env={})
    assert (config.metrics.host, config.metrics.port) == ("0.0.0.0", 17650)
    # A subdirectory of the emptyDir: the daemon refuses a socket dir it does not own (0700).
    assert str(config.endpoints.runtime_dir) == "/run/safemon/sock"
    spec = pod_spec(render(helm, mode))
    env = {e["name"]: e["value"] for e in safemon_container(spec)["env"]}
    assert env["SAFEMON_ENDPOINTS__RUNTIME_DIR"] == "/run/safemon/sock"  # beats the image's
    if mode == "node":
        assert config.endpoints.ingress == "tcp://0.0.0.0:17660"
        assert config.security.curve and str(config.security.keys_dir) == "/run/safemon-keys/curve"
    else:
        assert config.endpoints.ingress.startswith("ipc:///run/safemon/sock/")


def test_config_values_reach_the_daemon(helm: Path, tmp_path: Path) -> None:
    config_map = one(render(helm, "node", "config.policy=2oo2", "config.degraded_policy=null",
                            "config.name=gpu-a"),
                     "ConfigMap", "-config")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"], encoding="utf-8")
    config = load_config(path, env={})
    assert (config.name, config.policy.value) == ("gpu-a", "2oo2")


@pytest.mark.parametrize("mode", MODES)
def test_probes_use_the_health_endpoints(helm: Path, mode: str) -> None:
    c = safemon_container(pod_spec(render(helm, mode)))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == 17650
    for probe, path in (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"),
                        ("livenessProbe", "/healthz")):
        assert c[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe


def test_node_daemonset_takes_no_gpu_from_the_apps(helm: Path) -> None:
    docs = render(helm, "node")
    spec = pod_spec(docs)
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        for part in ("requests", "limits"):
            assert not any("gpu" in k for k in c.get("resources", {}).get(part, {})), c["name"]
    env = {e["name"]: e["value"] for e in safemon_container(spec)["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and spec["runtimeClassName"] == "nvidia"


def test_node_ingress_is_a_node_local_service_with_keys_from_a_secret(helm: Path) -> None:
    docs = render(helm, "node")
    service = one(docs, "Service")
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["ingress"]["port"] == 17660 and ports["ingress"]["targetPort"] == "ingress"
    spec = pod_spec(docs)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["curve-secret"]["secret"]["secretName"] == "safemon-curve-keys"
    (keys,) = spec["initContainers"]
    assert 'install -d -m 0700 "$k" "$k/allowed_clients"' in keys["command"][-1]
    mounts = {m["mountPath"]: m for m in safemon_container(spec)["volumeMounts"]}
    assert mounts["/run/safemon-keys"]["readOnly"] is True


def test_sidecar_is_native_holds_the_gpu_and_shares_the_socket_dir(helm: Path) -> None:
    spec = pod_spec(render(helm, "sidecar"))
    sidecar = safemon_container(spec)
    assert sidecar in spec["initContainers"] and sidecar["restartPolicy"] == "Always"
    assert sidecar["resources"]["limits"]["nvidia.com/gpu"] == 1
    (app,) = spec["containers"]
    assert "nvidia.com/gpu" not in app["resources"].get("limits", {})
    run = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}["/run/safemon"]
    assert {m["mountPath"]: m["name"] for m in app["volumeMounts"]}["/run/safemon"] == run
    assert {v["name"]: v for v in spec["volumes"]}[run]["emptyDir"]["medium"] == "Memory"


@pytest.mark.parametrize(("mode", "job"), [("node", "safemon"), ("sidecar", "safemon/safemon")])
def test_prometheus_rule_passes_promtool_with_the_release_job(
    helm: Path, prometheus_tools: PrometheusTools, tmp_path: Path, mode: str, job: str
) -> None:
    rule = one(render(helm, mode), "PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}), encoding="utf-8")
    proc = subprocess.run([str(prometheus_tools.promtool), "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    source = yaml.safe_load(ALERTS_PATH.read_text(encoding="utf-8"))
    assert len(exprs) == sum(len(g["rules"]) for g in source["groups"])
    assert f'absent(up{{job="{job}"}})' in exprs
    assert not any('job="safemon"' in e for e in exprs) or job == "safemon"


def test_toggles_remove_the_operator_objects_and_the_dashboard(helm: Path) -> None:
    docs = render(helm, "node", "serviceMonitor.enabled=false", "prometheusRule.enabled=false",
                  "dashboard.enabled=false")
    assert {d["kind"] for d in docs} == {"ConfigMap", "Service", "DaemonSet"}


def test_dashboard_configmap_is_the_repository_dashboard(helm: Path) -> None:
    cm = one(render(helm, "node"), "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(cm["data"]["safemon.json"])
    assert shipped == json.loads(DASHBOARD_PATH.read_text(encoding="utf-8"))


@pytest.mark.parametrize("mode", MODES)
def test_static_manifests_are_the_chart_rendered(helm: Path, mode: str) -> None:
    committed = [d for d in yaml.safe_load_all(
        (DEPLOY_DIR / "k8s" / mode / "safemon.yaml").read_text(encoding="utf-8")) if d]
    assert committed == render(helm, mode), f"stale: run {RENDER_SCRIPT.name} {helm}"


def test_key_copy_script_yields_keys_the_daemon_accepts(helm: Path, tmp_path: Path) -> None:
    """The node init container's script, run here on keys from `safemon keys generate` laid
    out as the Secret mounts them (0644 files in a shared directory, as a Secret volume with
    fsGroup may show them), produces a key dir the daemon's loaders accept."""
    from safemon.transport import CurveClientKeys, CurveServerKeys, keys_generate
    from safemon.transport.auth import load_allowed_keys

    generated = tmp_path / "generated"
    keys_generate(generated)
    secret = tmp_path / "secret"
    secret.mkdir()
    for name in ("server.key_secret", "server.key", "client.key_secret", "client.key"):
        (secret / name).write_bytes((generated / name).read_bytes())
    (secret / "allowed_clients_client.key").write_bytes(
        (generated / "allowed_clients" / "client.key").read_bytes())
    for f in secret.iterdir():
        f.chmod(0o644)  # looser than the loader accepts: the script must tighten it
    (keys,) = pod_spec(render(helm, "node"))["initContainers"]
    script = keys["command"][-1].replace("/run/safemon-keys", str(tmp_path / "run-keys"))
    script = script.replace("/secret/", f"{secret}/")
    proc = subprocess.run(["/bin/sh", "-ec", script], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    k = tmp_path / "run-keys" / "curve"
    CurveServerKeys.from_file(k / "server.key_secret")
    CurveClientKeys.from_files(k / "client.key_secret", k / "server.key")
    assert len(load_allowed_keys(k / "allowed_clients")) == 1
