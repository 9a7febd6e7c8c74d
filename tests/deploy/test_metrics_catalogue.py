"""The metric catalogue the deploy checks use (`promql.SAFEMON_METRICS`) is exactly what
`safemon.metrics.Metrics` exports: same names, types and label names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from safemon.config import default_config
from safemon.metrics import Metrics
from tests.deploy.promql import SAFEMON_METRICS, series_names

#: prometheus_client's family type -> the catalogue's (Info is a gauge of value 1 on the wire).
_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "info": "gauge"}


def test_catalogue_matches_the_exported_metrics() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(default_config(), registry)
    for ch in metrics.channels:  # no sample until a GPU self-test
        metrics.set_sm_coverage(ch, 1.0)
    metrics.count_diverging_layer(0)  # no sample until a whole-model vote disagrees
    known = series_names()
    exported: dict[str, tuple[str, set[str]]] = {}
    for family in registry.collect():
        for sample in family.samples:
            assert not sample.name.endswith("_created"), "Metrics turns _created off"
            assert sample.name in known, f"exported but not in the catalogue: {sample.name}"
            metric = known[sample.name]
            labels = exported.setdefault(metric, (_TYPES[family.type], set()))[1]
            labels.update(set(sample.labels) - {"le"})
    missing = set(SAFEMON_METRICS) - set(exported)
    assert set(exported) <= set(SAFEMON_METRICS) and not missing, missing
    for metric, (kind, declared) in SAFEMON_METRICS.items():
        assert exported[metric][0] == kind, metric
        # Metrics() pre-initialises every other label combination, so each has samples.
        assert exported[metric][1] == declared, metric
