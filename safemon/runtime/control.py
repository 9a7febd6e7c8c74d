"""The operator's commands on the control socket: `status`, `reset`, `inject`, `clear`,
`selftest` (docs/PROTOCOL.md). The reply to `status` is built by the shell, which adds what
only it knows (processes, endpoints, the faults it carried out); everything else is judged
here."""

from __future__ import annotations

from safemon.patterns import controller as ctl
from safemon.runtime import effects as fx
from safemon.runtime.roles import Roles
from safemon.runtime.support import MAX_QUOTE, quote
from safemon.transport.wire import Kind, Message

__all__ = ["ControlCommands"]


class ControlCommands(Roles):
    """`Roles` plus the operator's commands."""

    def _on_control(self, identity: bytes, msg: Message, now: float) -> None:
        command = msg.meta.get("command")
        args = msg.meta.get("args")
        args = args if isinstance(args, str) else ""
        ok, outcome = True, quote(command) if not isinstance(command, str) else command[:MAX_QUOTE]
        if command == "status":
            self._emit(fx.ReplyStatus(identity, msg.seq, self._sid))
            return
        if command == "reset":
            self._controller(ctl.Reset(now))
        elif command in ("inject", "clear"):
            ok, outcome = self._inject_or_clear(str(command), args, now, outcome)
        elif command == "selftest":
            # At most one self-test in flight per channel: a flood of these commands must
            # not queue self-tests behind each other until they overrun (that would be a
            # fault caused by a client).
            limit = self.config.timing.selftest_deadline_s
            busy = {t.channel for t in self._tests.values() if now - t.started < limit}
            for ch in self.config.channel_names:
                if ch not in busy:
                    self._run_now(ch, now)
        else:
            ok, outcome = False, f"unknown command {quote(command)}"
        self._reply("control", identity, Kind.REPLY, msg.seq, {"ok": ok, "outcome": outcome})

    def _inject_or_clear(self, command: str, args: str, now: float,
                         outcome: str) -> tuple[bool, str]:
        """`inject <channel>:<fault>` / `clear [<channel>]` (fault injection for tests)."""
        ch, _, kind = args.partition(":")
        targets = self.config.channel_names if (command == "clear" and not ch) else (ch,)
        if command == "inject" and not self.config.testing.fault_injection:
            return False, ("fault injection is disabled (set testing.fault_injection: "
                           "true in a test configuration)")
        if any(t not in self.config.channel_names for t in targets):
            return False, f"unknown channel {quote(ch)}"
        ok = True
        for t in targets:
            if command == "inject":
                from safemon.channels.faults import FAULT_KINDS

                if kind not in FAULT_KINDS:
                    ok, outcome = False, f"unknown fault {quote(kind)}; known: {', '.join(FAULT_KINDS)}"
                    break
                if t not in self._injected_at or t in self._injected_expiry:
                    self._injected_at[t] = now  # a new fault (the last was cleared)
                self._injected_expiry.pop(t, None)
                self._send(t, Kind.CONTROL, self.next_seq(), {"command": "inject", "args": kind})
            else:
                # What the fault did before the clear (a request it swallowed, a result it
                # corrupted) is still detected within the detection bounds: keep its
                # occurrence time that long, no longer.
                if t in self._injected_at:
                    self._injected_expiry[t] = now + self._detection_bound()
                self._send(t, Kind.CONTROL, self.next_seq(), {"command": "clear"})
        self._log("warning", "control_" + command, target=quote(args))
        return ok, outcome

    def _detection_bound(self) -> float:
        """The longest a fault's consequence can take to be detected (seconds)."""
        t = self.config.timing
        return max(t.request_deadline_s, t.heartbeat_timeout_s, t.dti_s + t.selftest_deadline_s)
