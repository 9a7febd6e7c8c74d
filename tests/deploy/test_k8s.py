"""The static Kubernetes manifests (deploy/k8s/node, deploy/k8s/sidecar): each kustomization
builds offline with `kubectl kustomize`, every object it yields passes the Kubernetes and
prometheus-operator schemas, and the namespace admits only "restricted" pods. That the files
are the chart's output is checked in test_helm.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.k8s_schema import problems
from tests.deploy.promql import DEPLOY_DIR

K8S = DEPLOY_DIR / "k8s"


def build(kubectl: Path, mode: str) -> list[dict[str, Any]]:
    proc = subprocess.run([str(kubectl), "kustomize", str(K8S / mode)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.mark.parametrize("mode", ["node", "sidecar"])
def test_kustomization_builds_and_every_object_is_valid(kubectl: Path, mode: str) -> None:
    docs = build(kubectl, mode)
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "PrometheusRule"} <= kinds
    assert ("DaemonSet" if mode == "node" else "Deployment") in kinds
    for doc in docs:
        assert problems(doc) == []
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "safemon", doc["kind"]


@pytest.mark.parametrize("mode", ["node", "sidecar"])
def test_namespace_enforces_the_restricted_pod_security_standard(kubectl: Path, mode: str) -> None:
    (ns,) = [d for d in build(kubectl, mode) if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (workload,) = [d for d in build(kubectl, mode) if d["kind"] in ("DaemonSet", "Deployment")]
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
        assert sc["readOnlyRootFilesystem"] is True
