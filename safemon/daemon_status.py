"""The daemon's operator views: the `status` reply, the /healthz and /readyz report, and the
HFT figures, assembled from the runtime core (mode, channel states, voting set, requests,
weights), the supervisor (processes) and the shell (endpoints, recent reactions).

Read-only; `status` and `health` are also called from other threads (the metrics HTTP
thread, tests), so every read is of one attribute or a tuple replaced whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from safemon.channels.supervisor import Supervisor
from safemon.health import HealthReport
from safemon.health import assess as assess_health
from safemon.hft import HftAssessment, assess, channel_hardware
from safemon.states import ChannelState, Mode, Policy

if TYPE_CHECKING:
    from safemon.daemon import Daemon

__all__ = ["health", "hft", "operator_status", "process_state"]


def operator_status(d: Daemon) -> dict[str, Any]:
    """The operator view: mode, policies, voting set, channels, endpoints."""
    sup, core = d.supervisor, d.core
    c = core.controller if core is not None else None
    now = d.clock()
    return {
        "name": d.config.name,
        "epoch": d.epoch,
        # STARTING until a voting set first exists (and again after a reset from SAFE).
        "mode": core.status_mode() if core is not None else "STARTING",
        "safe_reason": core.safe_reason if core is not None else None,
        "fault_injection": d.injection_enabled,
        "policy": Policy(d.config.policy).value,
        "effective_policy": (c.policy if c is not None else Policy(d.config.policy)).value,
        "voting": list(c.voting) if c is not None else [],
        "backend": d.backend,
        "metrics_url": d.metrics_url,
        "sockets": d.sockets(),
        # `state` is the controller's (frozen while SAFE is latched: a channel restarted
        # then stays RESTARTING until a reset); `process` is what the supervisor sees now,
        # so a channel lost in SAFE does not pass for healthy (`process_state`).
        "channels": [
            {"name": n,
             "state": (c.channel_state(n) if c is not None else ChannelState.STARTING).value,
             "incarnation": sup.incarnation(n) if sup is not None else -1,
             "process": process_state(sup, n, now) if sup is not None else "not started",
             "sm_coverage": core.scheduler.sm_coverage(n) if core is not None else None}
            for n in d.config.channel_names
        ],
        "weights": len(core.weights) if core is not None else 0,
        # The last faults that led to a reaction, oldest first (age in seconds).
        "faults": [{**{k: v for k, v in f.items() if k != "at"},
                    "age_s": round(d.clock() - f["at"], 3)} for f in list(d.fault_history)],
        "in_flight": core.in_flight if core is not None else 0,
        "unexplained_mismatches": c.unexplained_mismatches if c is not None else 0,
        **_hft_status(d),
    }


def health(d: Daemon) -> HealthReport:
    """What /healthz and /readyz answer (read-only; called on the HTTP thread)."""
    loop_at = d.loop_at
    c = d.controller
    return assess_health(mode=c.mode if c is not None else Mode.NORMAL,
                         voting=c.voting if c is not None else (),
                         formed=d.ready.is_set(),
                         loop_age_s=None if loop_at is None else d.clock() - loop_at)


def hft(d: Daemon) -> HftAssessment:
    """Declared and effective HFT (`safemon.hft`) of the voting set now; while none
    votes (starting, SAFE), of the configured set under the configured policy."""
    if d.core is None:
        hardware = channel_hardware(d.config, d.backend)
        configured = Policy(d.config.policy)
        return assess(configured, configured, hardware)
    return d.core.hft()


def _hft_status(d: Daemon) -> dict[str, Any]:
    a = hft(d)
    voting = d.controller.voting if d.controller is not None else ()
    note = "" if voting else "No voting set now: figures for the configured set. "
    return {"hft_declared": a.declared, "hft_effective": a.effective,
            "hft_reason": note + a.reason,
            "hft_hardware": {u: list(chs) for u, chs in a.units}}


def process_state(sup: Supervisor, channel: str, now: float) -> str:
    """What the supervisor sees of `channel`'s process at `now`: running (registered,
    watched), starting (not registered yet), restarting (a restart is pending), or, once
    nothing is planned for it (`Supervisor.lost`: reported lost while nothing restarts it,
    as in SAFE, or isolated):
    - stopped: stopped on purpose (isolated, or shutting down);
    - exited: its process exited;
    - silent: its process runs but has not been heard within the heartbeat timeout
      (hung, or busy past its work's deadline);
    - alive, not watched: its process runs and is heard, but it was reported lost and is
      watched (and used) again only once an operator reset restarts it.

    Until 2026-12-07 all four were "lost", so a channel that had been busy past its
    deadline in SAFE read as lost while its process ran and answered."""
    if sup.registered(channel):
        return "running"
    if sup.awaiting_registration(channel):
        return "starting"
    if not sup.lost(channel):
        return "restarting"
    if not sup.has_process(channel):
        return "stopped"
    if not sup.process_alive(channel):
        return "exited"
    heard = sup.last_heard(channel)
    if heard is None or now - heard > sup.config.timing.heartbeat_timeout_s:
        return "silent"
    return "alive, not watched"
