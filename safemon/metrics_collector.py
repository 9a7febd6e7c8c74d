"""Metrics read at scrape time: a collector over the runtime core's state (STYLE.md item 18).

`safemon_mode`, `safemon_channel_up` and `safemon_hft` are facts about *now*: the
safe-state controller's mode and channel states, and the HFT of the voting set now.
`safemon_votes_total` is counted once, by the voter (`Voter.votes()`). A running daemon
does not push them: `attach_runtime(metrics, state)` replaces the pushed families of
`Metrics` in its registry with `RuntimeStateCollector`, which reads `state` at each
scrape, as prometheus_client's own platform and process collectors do. Names, HELP texts,
types and labels are the same as the gauges' (`safemon.metrics`), so dashboards, alert rules
and the metric catalogue see no difference. The other counters and histograms count events
the shell or core observes and stay in `Metrics`; `selftest_sm_coverage_ratio` is the figure of the last self-test result and
stays pushed there.

Scrapes run on the HTTP thread while the loop thread changes the state: every read here
is of one attribute or a tuple replaced whole, never an iteration over a dict in flux.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from safemon.metrics import (
    CHANNEL_LABELS,
    HELP_CHANNEL_UP,
    HELP_HFT,
    HELP_MODE,
    HELP_VOTES,
    PREFIX,
    VOTE_OUTCOMES,
    Metrics,
)
from safemon.states import ChannelState, Mode, Policy

__all__ = ["RuntimeState", "RuntimeStateCollector", "attach_runtime"]


class RuntimeState(Protocol):
    """What the collector reads (`safemon.runtime.RuntimeCore` provides it)."""

    def current_mode(self) -> Mode: ...
    def channel_state(self, channel: str) -> ChannelState: ...
    def hft_figures(self) -> tuple[int, int]: ...
    def vote_counts(self) -> Mapping[tuple[Policy, str], int]: ...


class RuntimeStateCollector(Collector):
    """Yields `safemon_mode{mode}`, `safemon_channel_up{channel,gpu,UUID}`,
    `safemon_hft{kind}` and `safemon_votes_total{policy,outcome}` (the voter's own counts)
    from `state` at each scrape.

    Args:
        state: the runtime state to read.
        channel_labels: per configured channel, its `CHANNEL_LABELS` values.
        policies: the policies whose vote counts are exported (the config's chain).
    """

    def __init__(self, state: RuntimeState, channel_labels: dict[str, dict[str, str]],
                 policies: tuple[Policy, ...]) -> None:
        self._state = state
        self._labels = channel_labels
        self._policies = policies

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(f"{PREFIX}_mode", HELP_MODE, labels=["mode"])
        yield GaugeMetricFamily(f"{PREFIX}_channel_up", HELP_CHANNEL_UP, labels=list(CHANNEL_LABELS))
        yield GaugeMetricFamily(f"{PREFIX}_hft", HELP_HFT, labels=["kind"])
        yield CounterMetricFamily(f"{PREFIX}_votes", HELP_VOTES, labels=["policy", "outcome"])

    def collect(self) -> Iterator[Metric]:
        mode = self._state.current_mode()
        fam = GaugeMetricFamily(f"{PREFIX}_mode", HELP_MODE, labels=["mode"])
        for m in Mode:
            fam.add_metric([m.value], 1.0 if m is mode else 0.0)
        yield fam
        up = GaugeMetricFamily(f"{PREFIX}_channel_up", HELP_CHANNEL_UP, labels=list(CHANNEL_LABELS))
        for channel, labels in self._labels.items():
            state = self._state.channel_state(channel)
            up.add_metric([labels[k] for k in CHANNEL_LABELS],
                          1.0 if state is ChannelState.UP else 0.0)
        yield up
        declared, effective = self._state.hft_figures()
        hft = GaugeMetricFamily(f"{PREFIX}_hft", HELP_HFT, labels=["kind"])
        hft.add_metric(["declared"], float(declared))
        hft.add_metric(["effective"], float(effective))
        yield hft
        counts = self._state.vote_counts()
        votes = CounterMetricFamily(f"{PREFIX}_votes", HELP_VOTES, labels=["policy", "outcome"])
        for p in self._policies:
            for o in VOTE_OUTCOMES:
                votes.add_metric([p.value, o], float(counts.get((p, o), 0)))
        yield votes


def attach_runtime(metrics: Metrics, state: RuntimeState) -> RuntimeStateCollector:
    """Make `metrics`' registry read mode, channel states and HFT from `state` at scrape
    time: the pushed gauges are unregistered and the collector registered in their place."""
    for pushed in (metrics.mode, metrics.channel_up, metrics.hft, metrics.votes):
        metrics.registry.unregister(pushed)
    collector = RuntimeStateCollector(
        state, {ch: metrics.channel_labels(ch) for ch in metrics.channels}, metrics.policies)
    metrics.registry.register(collector)
    return collector
