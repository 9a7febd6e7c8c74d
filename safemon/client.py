"""`safemon.Client`: what the inference application imports.

    client = Client("configs/hft2.yaml")         # or Client(): $SAFEMON_CONFIG or the default
    client.wait_ready(timeout=10.0)              # optional: until a voting set exists
    wid = client.register_weight(w)              # (K, N) float32, kept resident in every channel
    y = client.matmul(x, wid, timeout=0.25)      # (M, K) float32 -> (M, N) float32, voted

`matmul` returns only a C that the voter released, or raises: `SafeStateError` (latched
SAFE; an operator must `safemon reset`), `VoteTimeoutError` (no trustworthy result by the
deadline, or the daemon could not be reached in time), `DisagreementError` (channels
disagreed and the policy could not single one out), `InvalidInputError` (bad x / unknown
weight id; raised before anything is sent when it can be checked locally).

Reconnection: the sockets reconnect by themselves when the daemon restarts. Every request
carries a fresh sequence number (never reused in this client's life) and only a reply with
that number is accepted, so a stale result can never be returned; a request lost with the
old daemon times out. Weight ids are content addresses, so after a restart (the reply
header carries a new epoch; the new daemon does not know the id) the client re-registers
its own copy of the weight once and retries within the same timeout.

Operator calls over the control socket: `status()`, `reset()`, `inject(channel, fault)`,
`clear_faults(channel=None)`, `selftest()`; they raise `DaemonUnreachableError` when no
answer arrives in `control_timeout_s`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zmq

from safemon import errors
from safemon.config import Config, load_config
from safemon.errors import InvalidInputError, SafemonError, VoteTimeoutError
from safemon.transport import (
    CurveClientKeys,
    Kind,
    Limits,
    Message,
    encode,
    make_socket,
    recv_message,
    send_message,
)
from safemon.transport import messages as msgs
from safemon.transport.sockets import Context, Socket

__all__ = ["Client", "DaemonUnreachableError"]


class DaemonUnreachableError(SafemonError, ConnectionError):
    """No daemon answered on the control / ingress socket within the allowed time."""


_ERRORS: dict[str, type[SafemonError]] = {
    name: getattr(errors, name) for name in errors.__all__ if name != "SafemonError"
}


def _check_matrix(name: str, a: Any) -> npt.NDArray[np.float32]:
    if not isinstance(a, np.ndarray):
        raise InvalidInputError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise InvalidInputError(f"{name} must be float32, got {a.dtype} (safemon never converts)")
    if a.ndim != 2 or a.size == 0:
        raise InvalidInputError(f"{name} must be a non-empty 2-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise InvalidInputError(f"{name} contains NaN or infinity")
    return np.ascontiguousarray(a)


class Client:
    """A connection to one safemon daemon. Not thread-safe (one per thread).

    Args:
        config: a `Config`, a YAML path, or None: `$SAFEMON_CONFIG` or the embedded default.
            A path or None is loaded with the SAFEMON_* overrides of the environment,
            exactly as the daemon and the CLI load it.
        context: a zmq context; required for inproc:// endpoints (the daemon's own);
            None = a fresh one owned (and closed) by this client.
        control_timeout_s: bound on operator calls and weight registration.

    Raises:
        ConfigError: invalid configuration or unusable CURVE keys.
    """

    def __init__(
        self,
        config: Config | str | Path | None = None,
        *,
        context: Context | None = None,
        control_timeout_s: float = 2.0,
    ) -> None:
        if config is None:
            config = load_config(os.environ.get("SAFEMON_CONFIG") or None)
        elif not isinstance(config, Config):
            config = load_config(config)
        self.config = config
        self._own_ctx = context is None
        self.ctx: Context = zmq.Context() if context is None else context
        self.control_timeout_s = control_timeout_s
        self._limits = Limits()
        self._seq = 0
        self.epoch: int | None = None
        self._weights: dict[str, npt.NDArray[np.float32]] = {}
        self._ingress = self._connect(config.endpoints.ingress)
        self._control = self._connect(config.endpoints.control)

    def _connect(self, address: str) -> Socket:
        curve = None
        sec = self.config.security
        if sec.curve and not address.startswith("inproc://"):
            assert sec.keys_dir is not None
            curve = CurveClientKeys.from_files(sec.keys_dir / "client.key_secret",
                                               sec.keys_dir / "server.key")
        return make_socket(self.ctx, zmq.DEALER, address, bind=False, curve=curve)

    def close(self) -> None:
        """Close the sockets (and the context if this client made it)."""
        self._ingress.close(linger=0)
        self._control.close(linger=0)
        if self._own_ctx:
            self.ctx.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport

    def _call(self, sock: Socket, kind: Kind, meta: dict[str, Any],
              arrays: tuple[npt.NDArray[Any], ...], timeout_s: float) -> Message | None:
        """Send one message and wait for the reply with its seq; None on timeout."""
        self._seq += 1
        seq = self._seq
        frames = encode(kind, epoch=self.epoch or 0, seq=seq, meta=meta, arrays=arrays)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                send_message(sock, frames, flags=zmq.NOBLOCK)
                break
            except zmq.Again:  # not connected yet (daemon starting / restarting)
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.005)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            got = recv_message(sock, limits=self._limits, timeout_ms=int(remaining * 1000) + 1)
            if got is None:
                return None
            if got.message.seq != seq:
                continue  # a leftover answer to an earlier, timed-out call: never returned
            if self.epoch != got.message.epoch:
                self.epoch = got.message.epoch
            return got.message

    @staticmethod
    def _raise(msg: Message) -> None:
        try:
            err = msgs.ErrorReply.parse(msg.meta)
        except msgs.MetaError as exc:
            raise SafemonError(f"malformed error reply: {exc}") from None
        raise _ERRORS.get(err.error_type, SafemonError)(err.message or err.error_type)

    @staticmethod
    def _control_reply(msg: Message) -> msgs.ControlReply:
        try:
            return msgs.ControlReply.parse(msg.meta)
        except msgs.MetaError as exc:
            raise SafemonError(f"malformed reply: {exc}") from None

    # ------------------------------------------------------------------ data path

    def register_weight(self, w: npt.NDArray[np.float32]) -> str:
        """Make `w` ((K, N) float32, finite) resident in every channel; returns its id.

        Raises:
            InvalidInputError: bad array. DaemonUnreachableError: no answer in time.
        """
        w = _check_matrix("w", w)
        reply = self._call(self._ingress, Kind.CONTROL, msgs.RegisterWeight().to_meta(), (w,),
                           self.control_timeout_s)
        if reply is None:
            raise DaemonUnreachableError(
                f"no answer to register_weight on {self.config.endpoints.ingress} "
                f"within {self.control_timeout_s} s")
        if reply.kind is Kind.ERROR:
            self._raise(reply)
        wid = self._control_reply(reply).outcome
        self._weights[wid] = np.array(w, copy=True)
        return wid

    def matmul(self, x: npt.NDArray[np.float32], weight_id: str, *, timeout: float = 1.0
               ) -> npt.NDArray[np.float32]:
        """C = x·W for the registered weight, released by the voter.

        Args:
            x: (M, K) float32, finite. weight_id: from `register_weight`.
            timeout: seconds; also the request's deadline (capped by the daemon's).

        Raises:
            SafeStateError, VoteTimeoutError, DisagreementError, InvalidInputError.
        """
        x = _check_matrix("x", x)
        if not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidInputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        end = time.monotonic() + timeout
        for _attempt in range(2):
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            request = msgs.MatmulRequest(weight_id=weight_id, deadline_ms=remaining * 1000.0)
            reply = self._call(self._ingress, Kind.REQUEST, request.to_meta(), (x,),
                               remaining + 0.05)
            if reply is None:
                raise VoteTimeoutError(f"no answer from the daemon on "
                                       f"{self.config.endpoints.ingress} within {timeout} s")
            if (reply.kind is Kind.REPLY and self._control_reply(reply).ok
                    and len(reply.arrays) == 1):
                return np.array(reply.arrays[0], copy=True)
            err = msgs.ErrorReply.parse(reply.meta) if reply.kind is Kind.ERROR else None
            if err is not None and err.error_type == "UnknownWeightError":
                w = self._weights.get(weight_id)
                if w is None:
                    raise InvalidInputError(err.message)
                self.register_weight(w)  # a restarted daemon: same content, same id
                continue
            if reply.kind is Kind.ERROR:
                self._raise(reply)
            raise SafemonError(f"unexpected reply {reply.kind.value} {reply.meta}")
        raise VoteTimeoutError(f"no answer from the daemon on {self.config.endpoints.ingress} "
                               f"within {timeout} s")

    # ------------------------------------------------------------------ control

    def _command(self, command: str, args: str = "") -> Message:
        reply = self._call(self._control, Kind.CONTROL,
                           msgs.ControlCommand(command=command, args=args).to_meta(), (),
                           self.control_timeout_s)
        if reply is None:
            raise DaemonUnreachableError(
                f"no answer to {command!r} on {self.config.endpoints.control} "
                f"within {self.control_timeout_s} s")
        if reply.kind is Kind.ERROR:
            self._raise(reply)
        answer = self._control_reply(reply)
        if not answer.ok:
            raise InvalidInputError(answer.outcome)
        return reply

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Wait until the daemon answers and has a voting set (mode NORMAL or DEGRADED),
        at most `timeout` seconds; returns its status.

        Raises:
            SafeStateError: the daemon is in the latched SAFE state.
            DaemonUnreachableError: not ready within `timeout` (the text names the address
                and the last state seen).
        """
        end = time.monotonic() + timeout
        last = "no answer"
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise DaemonUnreachableError(
                    f"daemon on {self.config.endpoints.control} not ready within {timeout} s "
                    f"({last})")
            saved, self.control_timeout_s = self.control_timeout_s, min(self.control_timeout_s,
                                                                        remaining)
            try:
                st = self.status()
            except DaemonUnreachableError:
                st = None
            finally:
                self.control_timeout_s = saved
            if st is not None:
                if st["mode"] == "SAFE":
                    raise errors.SafeStateError(f"the daemon is in SAFE: {st.get('safe_reason')}")
                if st["mode"] in ("NORMAL", "DEGRADED"):
                    return st
                last = f"mode {st['mode']}"
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def status(self) -> dict[str, Any]:
        """The daemon's status: mode, policy, metrics_url, channels [{name, state}], ..."""
        reply = self._command("status")
        if len(reply.arrays) != 1:
            raise SafemonError("status reply without a body")
        out: dict[str, Any] = json.loads(bytes(reply.arrays[0]).decode())
        return out

    def reset(self) -> None:
        """Operator reset (leaves the latched SAFE state; re-admits isolated channels)."""
        self._command("reset")

    def inject(self, channel: str, fault: str) -> None:
        """Inject `fault` (see `safemon.channels.faults.FAULT_KINDS`) into `channel`."""
        self._command("inject", f"{channel}:{fault}")

    def clear_faults(self, channel: str | None = None) -> None:
        """Remove injected faults from `channel` (None: every channel)."""
        self._command("clear", channel or "")

    def selftest(self) -> None:
        """Ask for an immediate self-test of every running channel."""
        self._command("selftest")
