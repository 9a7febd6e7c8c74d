"""Scrape-time metrics (`safemon.metrics_collector`): mode, channel_up and hft are read from
the runtime state at each scrape, with the same names, HELP, types and labels as the gauges
they replace."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from safemon.config import default_config
from safemon.metrics import Metrics
from safemon.metrics_collector import attach_runtime
from safemon.states import ChannelState, Mode, Policy


@dataclass
class State:
    """A runtime state the test sets (a `RuntimeState`)."""

    mode: Mode = Mode.NORMAL
    states: dict[str, ChannelState] = field(default_factory=dict)
    hft: tuple[int, int] = (1, 0)
    votes: dict[tuple[Policy, str], int] = field(default_factory=dict)

    def current_mode(self) -> Mode:
        return self.mode

    def channel_state(self, channel: str) -> ChannelState:
        return self.states.get(channel, ChannelState.STARTING)

    def hft_figures(self) -> tuple[int, int]:
        return self.hft

    def vote_counts(self) -> Mapping[tuple[Policy, str], int]:
        return self.votes


def _families(registry: CollectorRegistry) -> dict[str, tuple[str, str, frozenset[str]]]:
    return {f.name: (f.type, f.documentation, frozenset(k for s in f.samples for k in s.labels))
            for f in registry.collect()}


def test_a_scrape_reads_the_state_of_that_moment_without_any_push() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(default_config(), registry)
    state = State()
    attach_runtime(metrics, state)
    ch = metrics.channels[0]
    labels = metrics.channel_labels(ch)
    assert registry.get_sample_value("safemon_mode", {"mode": "NORMAL"}) == 1.0
    assert registry.get_sample_value("safemon_channel_up", labels) == 0.0
    state.mode, state.states[ch], state.hft = Mode.SAFE, ChannelState.UP, (1, 1)
    assert registry.get_sample_value("safemon_mode", {"mode": "SAFE"}) == 1.0
    assert registry.get_sample_value("safemon_mode", {"mode": "NORMAL"}) == 0.0
    assert registry.get_sample_value("safemon_channel_up", labels) == 1.0
    assert registry.get_sample_value("safemon_hft", {"kind": "effective"}) == 1.0


def test_votes_are_the_voters_own_count_and_latency_is_still_observed() -> None:
    """votes_total is read from the voter's count (never counted again by the shell);
    observe_vote_latency feeds only the latency histogram."""
    registry = CollectorRegistry()
    metrics = Metrics(default_config(), registry)
    state = State()
    attach_runtime(metrics, state)
    labels = {"policy": "2oo3", "outcome": "released"}
    assert registry.get_sample_value("safemon_votes_total", labels) == 0.0
    state.votes[(Policy.TWO_OO_THREE, "released")] = 3
    metrics.observe_vote_latency(0.001)
    assert registry.get_sample_value("safemon_votes_total", labels) == 3.0
    assert registry.get_sample_value("safemon_vote_latency_seconds_count") == 1.0


def test_the_collector_exports_what_the_gauges_did() -> None:
    """Same family names, types, HELP texts and label names before and after attaching."""
    pushed = CollectorRegistry()
    Metrics(default_config(), pushed)
    before = _families(pushed)
    registry = CollectorRegistry()
    attach_runtime(Metrics(default_config(), registry), State())
    after = _families(registry)
    assert after == before
