"""Offline schema validation of Kubernetes manifests.

Core kinds are checked with `kubernetes-validate` (PyPI; it ships the Kubernetes OpenAPI
schemas of each release) in strict mode, so an unknown or misspelt field is an error. The
prometheus-operator kinds (ServiceMonitor, PodMonitor, PrometheusRule) are checked with
`jsonschema` against the CRDs' `openAPIV3Schema`, vendored in `schemas/` (see its README),
made strict the same way: every object that lists its properties admits no others.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any, Final

import jsonschema
import kubernetes_validate

SCHEMAS: Final = Path(__file__).resolve().parent / "schemas"
#: Validated against the oldest Kubernetes the chart supports (native sidecars) and the newest
#: kubernetes-validate knows.
K8S_VERSIONS: Final = ("1.29.0", "1.37.0")
OPERATOR_GROUP: Final = "monitoring.coreos.com/"
OPERATOR_KINDS: Final = frozenset({"ServiceMonitor", "PodMonitor", "PrometheusRule"})


def _strict(schema: Any) -> Any:
    """A copy of `schema` in which every object with `properties` forbids other keys, unless
    it says otherwise (additionalProperties or x-kubernetes-preserve-unknown-fields)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def operator_schema(kind: str) -> dict[str, Any]:
    """The strict schema of a prometheus-operator `kind` (v1)."""
    path = SCHEMAS / f"monitoring.coreos.com_v1_{kind.lower()}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw.pop("$comment", None)
    # metadata is `type: object` in a CRD; the API server checks it, so do the basics here.
    schema: dict[str, Any] = _strict(copy.deepcopy(raw))
    schema["properties"]["metadata"] = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                       "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                       "annotations": {"type": "object",
                                       "additionalProperties": {"type": "string"}}},
        "additionalProperties": False,
    }
    schema["required"] = sorted({*schema.get("required", []), "spec", "metadata"})
    return schema


def problems(doc: dict[str, Any]) -> list[str]:
    """Every schema violation of one manifest, as readable lines (empty when valid)."""
    kind = doc.get("kind", "?")
    name = doc.get("metadata", {}).get("name", "?")
    where = f"{kind}/{name}"
    if str(doc.get("apiVersion", "")).startswith(OPERATOR_GROUP):
        if kind not in OPERATOR_KINDS or doc["apiVersion"] != OPERATOR_GROUP + "v1":
            return [f"{where}: no vendored schema for {doc['apiVersion']} {kind}"]
        validator = jsonschema.Draft7Validator(operator_schema(kind))
        return [f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(doc)]
    out = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(map(str, getattr(exc, "path", ())))
            out.append(f"{where} (Kubernetes {version}): {path}: {getattr(exc, 'message', exc)}")
    return out
