"""`safemon.Client`: what the inference application imports.

    client = Client("configs/hft2.yaml")         # or Client(): $SAFEMON_CONFIG or the default
    client.wait_ready(timeout=10.0)              # optional: until a voting set exists
    wid = client.register_weight(w)              # (K, N) float32, kept resident in every channel
    y = client.matmul(x, wid, timeout=0.25)      # (M, K) float32 -> (M, N) float32, voted
    mid = client.register_model([Layer(w1, b1, "gelu"), Layer(w2)])  # safemon.models
    out = client.run(mid, x, timeout=0.5)        # the whole forward pass, one vote

`x` may be a NumPy array, a CuPy array, a torch tensor (CPU or CUDA), or any array that
speaks DLPack or `__cuda_array_interface__`; the result comes back as the same kind on the
same device (another library's array as CuPy or NumPy: `safemon.arrays`). On an ipc://
ingress a CUDA x of a weight or model this client registered goes through this client's
CUDA IPC buffers and only digests cross ZeroMQ (`safemon.device_io`, docs/PROTOCOL.md
section 11); otherwise (CuPy not installed included), or when the daemon answers
`DeviceInputError`, it is staged through host memory.

`matmul` returns only a C that the voter released, or raises: `SafeStateError` (latched
SAFE; an operator must `safemon reset`), `VoteTimeoutError` (no trustworthy result by the
deadline, or the daemon could not be reached in time), `DisagreementError` (channels
disagreed and the policy could not single one out), `InvalidInputError` (bad x / unknown
weight id; raised before anything is sent when it can be checked locally).

Evictions: a daemon whose weight budget is full evicts the least recently used weights and
models (`safemon.eviction`); a request on one of this client's then finds it unknown, and
the client registers its own copy again and retries, as after a restart (below).

Reconnection: the sockets reconnect by themselves when the daemon restarts. Every request
carries a fresh sequence number (never reused in this client's life) and only a reply with
that number is accepted, so a stale result can never be returned; a request lost with the
old daemon times out. Weight ids are content addresses, so after a restart (the reply
header carries a new epoch; the new daemon does not know the id) the client re-registers
its own copy of the weight once and retries within the same timeout.

Operator calls over the control socket: `status()`, `reset()`, `inject(channel, fault)`,
`clear_faults(channel=None)`, `selftest()`; they raise `DaemonUnreachableError` when no
answer arrives in `control_timeout_s`.

Threads: one `Client` may be shared by several threads. Its calls take turns (a lock held
for the whole call: a request's staging, its round trip and the take of its output), so each
thread gets its own reply, never another's; the `last_*` attributes describe the last call
that ended, whichever thread made it. For requests in parallel, give each thread its own
`Client`.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt
import zmq

from safemon import admission, errors
from safemon.arrays import array_library, as_host, device_view
from safemon.config import Config, load_config
from safemon.device_io import ExchangeBuffers, StagedRequest
from safemon.errors import (
    DaemonSilentError,
    DaemonUnreachableError,
    DeviceInputError,
    InvalidInputError,
    ModelUnavailableError,
    SafemonError,
    UnknownWeightError,
    VoteTimeoutError,
    WeightBudgetError,
)
from safemon.models.activations import Activation, epilogue
from safemon.models.layers import (
    Layer,
    ModelShape,
    Step,
    encode_model,
    validate_layers,
    weight_ids,
)
from safemon.models.ops import op_reference
from safemon.seconds import seconds_text
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

#: A message with a frame larger than this (bytes) is sent only after the Client has asked
#: the daemon what it admits (`hello`), once: a daemon whose limits are lower than this
#: client's config drops a larger part's connection unanswered.
ASK_LIMITS_BYTES = 64 * 1024


REPLY_MARGIN_S = 0.05
"""A voted request's deadline, as sent to the daemon, is this much (seconds) shorter than
what is left of the caller's timeout (at most `REPLY_MARGIN_FRACTION` of it), so that the
daemon's answer at its deadline (a `VoteTimeoutError`) still reaches the caller in time."""

REPLY_MARGIN_FRACTION = 0.1

REPLY_GRACE_S = 0.05
"""How long (seconds) past its timeout a caller still waits for the daemon's answer before
raising `VoteTimeoutError` "no answer from the daemon" itself."""


REGISTER_RETRY_S = 0.01
"""How long (seconds) the client first waits before sending a registration again that the
daemon answered `BusyError` (a voting channel is due its periodic self-test first); the
pause doubles with each refusal, up to 16 times this."""

MAX_TIMEOUT_S = 86_400.0
"""The longest timeout (seconds) a request may be given: a day. Longer would overflow the
deadline arithmetic of the transport (milliseconds in a C int)."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_at_a_time(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a public `Client` method under the client's lock (module docstring, "Threads").

    The lock is re-entrant: `run` may call `register_model` and `matmul`, which take it too.
    """
    @functools.wraps(method)
    def locked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        client = args[0]
        assert isinstance(client, Client)
        with client._lock:
            return method(*args, **kwargs)
    return locked


def _check_timeout(timeout: Any) -> None:
    """Raise `InvalidInputError` unless `timeout` is a finite number of seconds in
    (0, MAX_TIMEOUT_S] (not a bool)."""
    if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_TIMEOUT_S):
        raise InvalidInputError(
            f"timeout must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout!r}")


def _check_id(name: str, value: Any, made_by: str) -> None:
    """Raise `InvalidInputError` unless `value` is a string (an id from `made_by`)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be the string {made_by} returned, got "
                                f"{type(value).__name__} {value!r}")


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
    """A connection to one safemon daemon. Threads may share it; their calls take turns
    (module docstring, "Threads").

    Args:
        config: a `Config`, a YAML path, or None: `$SAFEMON_CONFIG` or the embedded default.
            A path or None is loaded with the SAFEMON_* overrides of the environment,
            exactly as the daemon and the CLI load it.
        context: a zmq context; required for inproc:// endpoints (the daemon's own);
            None = a fresh one owned (and closed) by this client.
        control_timeout_s: bound on operator calls and weight registration.
        device_io: send CUDA inputs through the CUDA IPC buffers (`safemon.device_io`)
            instead of host memory, when the ingress is ipc:// (same host). If the daemon
            answers `DeviceInputError` (its channels compute on the host, the effective
            policy is 1oo1D, or they cannot open this process's handles) the request is
            sent again through host memory and device I/O stays off for this client.
        per_layer_fallback: `run` sends a model layer by layer when the daemon cannot
            vote it as a whole (`ModelUnavailableError`, under an effective 1oo1D); see
            `run` for what that changes. Off by default: the caller opts in.

    Raises:
        ConfigError: invalid configuration or unusable CURVE keys.
    """

    def __init__(
        self,
        config: Config | str | Path | None = None,
        *,
        context: Context | None = None,
        control_timeout_s: float = 2.0,
        per_layer_fallback: bool = False,
        device_io: bool = True,
    ) -> None:
        if config is None:
            config = load_config(os.environ.get("SAFEMON_CONFIG") or None)
        elif not isinstance(config, Config):
            config = load_config(config)
        self.config = config
        #: Held by every public call, for its whole length (`_one_at_a_time`).
        self._lock = threading.RLock()
        #: While a request registers its evicted weight or model again: the request's end
        #: (monotonic s), which bounds those registrations' waits (`_request`, `_register`).
        self._register_until: float | None = None
        self._own_ctx = context is None
        self.ctx: Context = zmq.Context() if context is None else context
        self.control_timeout_s = control_timeout_s
        self.per_layer_fallback = per_layer_fallback
        #: Whether the last `run` went layer by layer (`per_layer_fallback`).
        self.last_run_per_layer = False
        self._limits = Limits()  # replies: a product can be as large as the transport admits
        #: What the daemon's transport admits from a client (`admission.client_limits`): its
        #: client sockets drop the connection of a peer sending a larger part, unanswered.
        #: From this client's config until the daemon says (`_learn_daemon_limits`).
        self._send_limits = admission.client_limits(config)
        #: Whether the daemon has said what it admits (`hello`), which `_send_limits` then
        #: counts: asked before the first message with a frame over `ASK_LIMITS_BYTES`.
        self._daemon_said = False
        self._seq = 0
        #: Set by `close`: the sockets are gone, every later call raises `SafemonError`.
        self.closed = False
        self.epoch: int | None = None
        self._weights: dict[str, npt.NDArray[np.float32]] = {}
        #: registered models by id: their steps and shape (`validate_layers`)
        self._models: dict[str, tuple[tuple[Step, ...], ModelShape]] = {}
        #: This object's key in `register_weight` (random): whom the daemon's per-client
        #: quota (`limits.max_client_weight_bytes`) counts its weights against.
        self._key = secrets.token_hex(16)
        #: `kernel_seconds` of the last released result: the slowest agreeing channel's
        #: compute time (s), i.e. the kernel time on the release's critical path.
        self.last_kernel_seconds: float | None = None
        self._devices = frozenset(ch.gpu or 0 for ch in config.channels or ())
        #: Device-resident requests (CUDA IPC buffers, docs/PROTOCOL.md section 11): only on
        #: an ipc:// ingress (the daemon is on this host); off once the daemon refused them.
        self.device_io = device_io and config.endpoints.ingress.startswith("ipc://")
        #: Why device-resident requests were turned off for this client (None: they are on
        #: or were never on); `last_request_device` whether the last request used them.
        self.device_io_off_reason: str | None = None
        self.last_request_device = False
        self._exchange: ExchangeBuffers | None = None
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

    @_one_at_a_time
    def close(self) -> None:
        """Close the sockets (and the context if this client made it); later calls raise
        `SafemonError`."""
        self.closed = True
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
        """Send one message and wait for the reply with its seq; None on timeout.

        Raises:
            SafemonError: the client was closed.
        """
        if self.closed:
            raise SafemonError("this safemon Client is closed: make a new Client to talk to "
                               "the daemon")
        if (not self._daemon_said and sock is self._ingress
                and any(a.nbytes > ASK_LIMITS_BYTES for a in arrays)):
            self._learn_daemon_limits(timeout_s)
        self._seq += 1
        seq = self._seq
        # With the receiver's limits: a message the daemon's transport would refuse, or drop
        # unanswered, is refused here, with the sizes named, instead of timing out.
        try:
            frames = encode(kind, epoch=self.epoch or 0, seq=seq, meta=meta, arrays=arrays,
                            limits=self._send_limits)
        except InvalidInputError as exc:
            if not self._daemon_said:
                raise
            raise InvalidInputError(
                f"{exc} (this client sends at most {self._send_limits.max_frame_bytes} bytes "
                f"per frame and {self._send_limits.max_total_bytes} per message: the lower of "
                "its config's and the daemon's limits.max_request_bytes / max_weight_bytes)"
            ) from None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                send_message(sock, frames, flags=zmq.NOBLOCK)
                break
            except zmq.Again:  # not connected yet (daemon starting / restarting)
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.005)
        spin = self.config.timing.spin_s
        spin_to = time.monotonic() + spin if spin > 0 else 0.0  # TimingConfig.spin_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            got = recv_message(sock, limits=self._limits, timeout_ms=int(remaining * 1000) + 1,
                               spin_to=spin_to)
            if got is None:
                return None
            if got.message.seq != seq:
                continue  # a leftover answer to an earlier, timed-out call: never returned
            if self.epoch != got.message.epoch:
                self.epoch = got.message.epoch
            return got.message

    def _learn_daemon_limits(self, timeout_s: float) -> None:
        """Ask the daemon what it admits in one message (`hello`) and send no more than the
        lower of that and this config's limits from now on. A daemon that does not answer in
        `timeout_s`, or does not say, leaves this config's limits in force (asked again
        before the next large message)."""
        reply = self._call(self._ingress, Kind.CONTROL, msgs.Hello().to_meta(), (), timeout_s)
        if reply is None or reply.kind is not Kind.REPLY:
            return
        answer = self._control_reply(reply)
        self._daemon_said = True
        if (answer.max_frame_bytes is None or answer.max_total_bytes is None
                or min(answer.max_frame_bytes, answer.max_total_bytes) < 1):
            return  # a daemon from before it said: this config's limits, as before
        own = self._send_limits
        self._send_limits = Limits(
            max_header_bytes=own.max_header_bytes, max_frames=own.max_frames,
            max_frame_bytes=min(own.max_frame_bytes, answer.max_frame_bytes),
            max_total_bytes=min(own.max_total_bytes, answer.max_total_bytes))

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

    @_one_at_a_time
    def register_weight(self, w: npt.NDArray[np.float32]) -> str:
        """Make `w` ((K, N) float32, finite) resident in every channel; returns its id.
        Waits `control_timeout_s` plus the channels' time to store w (`_storing_s`: seconds
        per MiB on a CPU backend's budget).

        Raises:
            InvalidInputError: bad array. DaemonUnreachableError: no answer in time.
            BusyError: a voting channel was due its periodic self-test for the whole wait
                (the daemon registers nothing new until it has passed one).
        """
        w = _check_matrix("w", w)
        wid = self._register(msgs.RegisterWeight(client=self._key), (w,), self._storing_s(w))
        self._weights[wid] = np.array(w, copy=True)
        return wid

    def _storing_s(self, w: npt.NDArray[np.float32]) -> float:
        """How long the daemon may take to answer `register_weight(w)` beyond the transport:
        it answers once every channel has stored w, each within its acknowledgement budget
        (`admission.work_budget_s` of an 8-row item on w, priced at the config's
        `limits.min_channel_gflops`), and inline channels store one after another. Until
        2026-12-06 the client waited `control_timeout_s` (2 s) alone, and a 64 MiB weight,
        which three inline channels on an H100 took 1.3-1.9 s to store, timed out as
        "unreachable" (evidence/h100-2026-12-06-stop55/, call 3)."""
        k, n = int(w.shape[0]), int(w.shape[1])
        return len(self.config.channel_names) * admission.work_budget_s(self.config, 8, k, n)

    def _register(self, message: msgs.RegisterWeight | msgs.RegisterModel,
                  arrays: tuple[npt.NDArray[Any], ...], extra_s: float = 0.0) -> str:
        """Send a registration on ingress; returns the reply's `outcome` (the new id).
        It waits `control_timeout_s` plus `extra_s` (the channels' storing, `_storing_s`).

        Raises:
            DaemonUnreachableError: no answer in that time; the daemon's typed error (e.g.
                InvalidInputError, WeightBudgetError) when it refuses.
        """
        wait_s = self.control_timeout_s + extra_s
        end = time.monotonic() + wait_s
        capped = self._register_until is not None and self._register_until < end
        if capped:
            assert self._register_until is not None
            end = self._register_until
        pause = REGISTER_RETRY_S
        while True:
            reply = self._call(self._ingress, Kind.CONTROL, message.to_meta(), arrays,
                               max(end - time.monotonic(), 1e-3))
            if reply is None and capped:
                raise VoteTimeoutError(
                    "the request's weight or model was not registered with the daemon (evicted "
                    "or lost in a restart), and registering it again did not finish within the "
                    "request's timeout; the daemon goes on storing it: retry the request")
            if reply is None:
                raise DaemonUnreachableError(
                    f"no answer to {message.TAG[1] if message.TAG else 'register'} on "
                    f"{self.config.endpoints.ingress} within {wait_s:.3g} s")
            # BusyError: a voting channel is due its self-test first (RuntimeCore); sent
            # again after a pause that doubles up to 16 times REGISTER_RETRY_S
            if (reply.kind is not Kind.ERROR or reply.meta.get("error_type") != "BusyError"
                    or time.monotonic() + pause >= end):
                break
            time.sleep(pause)
            pause = min(2 * pause, 16 * REGISTER_RETRY_S)
        if reply.kind is Kind.ERROR:
            self._raise(reply)
        return self._control_reply(reply).outcome

    @_one_at_a_time
    def matmul(self, x: Any, weight_id: str, *, timeout: float = 1.0) -> Any:
        """C = x·W for the registered weight, released by the voter.

        Args:
            x: (M, K) float32, finite: NumPy, or C-contiguous CuPy / torch (CPU or CUDA,
                on a device the channels use), or another DLPack or CUDA-array-interface
                producer (`safemon.arrays`). weight_id: from `register_weight`.
            timeout: seconds. The request's deadline at the daemon (capped by its own
                budget) is this less `REPLY_MARGIN_S`; the call returns or raises within
                timeout + `REPLY_GRACE_S`.

        Returns:
            (M, N) float32 of the same kind and on the same device as `x`. A CUDA `x` goes
            through the CUDA IPC buffers (`device_io`) when this client registered the
            weight; `last_request_device` says whether it did.

        Raises:
            SafeStateError, VoteTimeoutError, DisagreementError (also: the released
            device output does not match the voted digest), InvalidInputError.
        """
        _check_id("weight_id", weight_id, "register_weight")
        _check_timeout(timeout)
        w = self._weights.get(weight_id)
        end = time.monotonic() + timeout
        self.last_request_device = False
        if w is not None:
            done = self._device_request(
                lambda ms, st: msgs.MatmulRequest(weight_id=weight_id, deadline_ms=ms, **st),
                x, int(w.shape[1]), timeout, functools.partial(self._reregister_weight, weight_id))
            if done is not None:
                return done
        host, kind = as_host("x", x, self._devices)
        out = self._request(
            lambda ms: msgs.MatmulRequest(weight_id=weight_id, deadline_ms=ms), (host,),
            self._left(end), functools.partial(self._reregister_weight, weight_id))
        return kind.restore(out)

    @_one_at_a_time
    def register_model(self, layers: Sequence[Step]) -> str:
        """Register the ordered steps `layers` as one model; returns its id (a content
        address). Each step is a `Layer` (a weight this client registered, an optional bias
        and an activation) or one of `safemon.models.ops` (layer norm, attention, residual
        save and add, reshape), which every channel computes too.

        Raises:
            InvalidInputError: no layers, an unregistered weight, a bias of the wrong
                length, or shapes that do not chain (the message names the step index;
                `safemon.models.validate_layers`).
            DaemonUnreachableError: no answer in time.
            WeightBudgetError: the model's weights do not fit the daemon's budget together.
        """
        shape = validate_layers(layers, {wid: w.shape for wid, w in self._weights.items()})
        spec, biases = encode_model(layers)
        try:
            mid = self._register(msgs.RegisterModel(), (spec, biases))
        except UnknownWeightError:  # a restarted daemon: this client's weights, sent again
            wids = list(dict.fromkeys(weight_ids(layers)))
            for wid in wids:
                self.register_weight(self._weights[wid])
            try:
                mid = self._register(msgs.RegisterModel(), (spec, biases))
            except UnknownWeightError as exc:  # each weight evicted the ones before it
                mib = sum(self._weights[w].nbytes for w in wids) / 2**20
                raise WeightBudgetError(
                    f"the model's {len(wids)} weights ({mib:.1f} MiB) do not fit the daemon's "
                    "weight budget together (limits.max_weights / max_weight_total_bytes), or "
                    "other clients' registrations evicted them meanwhile: each was evicted "
                    f"before the model could be registered ({exc})") from None
        self._models[mid] = (tuple(layers), shape)
        return mid

    @_one_at_a_time
    def run(self, model_id: str, x: Any, *, timeout: float = 1.0) -> Any:
        """The whole forward pass of model `model_id` on `x`, voted once on its output and
        per-layer digests; the first diverging layer is named in a DisagreementError.

        With `per_layer_fallback` (constructor), a request the daemon cannot vote as a whole
        (`ModelUnavailableError`: the effective policy is 1oo1D) is sent again layer by
        layer: each product through `matmul` (checked by 1oo1D's per-request test), each
        bias and activation, and each step that is not a product (`safemon.models.ops`),
        in this process. The output is the same bits; what differs is that the epilogues
        and those steps then run once, on this host, outside the channels.
        `last_run_per_layer` says which way the last call went.

        Args:
            x: (M, K_0) float32, finite, of any kind `matmul` accepts.
            timeout: seconds, for the whole forward pass (the fallback included).

        Returns:
            (M, N_out) float32 of the same kind and on the same device as `x`.

        Raises:
            SafeStateError, VoteTimeoutError, DisagreementError, InvalidInputError (also
            for a model id this client never registered and the daemon does not know, and
            for M rows that give a reshape or an attention step no whole rows or sequences),
            ModelUnavailableError (a VoteTimeoutError) without `per_layer_fallback`.
        """
        _check_id("model_id", model_id, "register_model")
        _check_timeout(timeout)
        end = time.monotonic() + timeout
        self.last_run_per_layer = False
        self.last_request_device = False
        known = self._models.get(model_id)
        if known is not None:
            shape = known[1]
            x_shape: tuple[int, ...] = tuple(getattr(x, "shape", ()))
            if len(x_shape) == 2 and x_shape[0]:  # other shapes: refused as x below
                shape.check_rows(int(x_shape[0]))
            # (under 1oo1D the daemon answers DeviceInputError: host memory, then per layer)
            n_out = shape.n_out
            done = self._device_request(
                lambda ms, st: msgs.ModelRequest(model_id=model_id, deadline_ms=ms, **st),
                x, n_out, timeout, functools.partial(self._reregister_model, model_id))
            if done is not None:
                return done
        host, kind = as_host("x", x, self._devices)
        try:
            out = self._request(
                lambda ms: msgs.ModelRequest(model_id=model_id, deadline_ms=ms), (host,),
                self._left(end), functools.partial(self._reregister_model, model_id))
        except ModelUnavailableError:
            known = self._models.get(model_id)
            if not self.per_layer_fallback or known is None:
                raise
            self.last_run_per_layer = True
            out = host
            stack: list[Any] = []
            for layer in known[0]:
                if not isinstance(layer, Layer):  # computed here, once, as the epilogues
                    out = op_reference(layer, out, stack)
                    continue
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise VoteTimeoutError(
                        f"the per-layer forward pass of model {model_id} did not finish "
                        f"within {timeout} s") from None
                c = self.matmul(out, layer.weight_id, timeout=remaining)
                out = epilogue(c, layer.bias, Activation(layer.activation))
        return kind.restore(out)

    @staticmethod
    def _left(end: float) -> float:
        """Seconds left until monotonic `end` (at least a microsecond)."""
        return max(end - time.monotonic(), 1e-6)

    def _device_request(self, make_request: Callable[[float, dict[str, Any]],
                                                      msgs.MatmulRequest | msgs.ModelRequest],
                        x: Any, n_out: int, timeout: float,
                        reregister: Callable[[Message], None]) -> Any:
        """Send `x` (a CUDA array: CuPy, torch, or another producer, `safemon.arrays`) as a
        device-resident request and return the released output as the same kind on the same
        device (another producer's as CuPy); None when this request must go through host
        memory instead (device I/O off, x not on a GPU, CuPy not installed, or the daemon
        answered `DeviceInputError`; the last two also turn device I/O off)."""
        self.last_request_device = False
        library = array_library("x", x)
        if (not self.device_io or library in ("numpy", "host")
                or (library == "torch" and x.device.type != "cuda")):
            return None
        try:
            import cupy  # noqa: F401  (the IPC buffers are CuPy's)
        except ImportError:  # a torch tensor then goes through host memory
            self.device_io = False
            self.device_io_off_reason = "CuPy is not installed: CUDA arrays go through host memory"
            return None
        xs = device_view("x", x, self._devices)
        if self._exchange is None:
            self._exchange = ExchangeBuffers(len(self.config.channel_names))
        staged = self._exchange.stage(xs, n_out)
        device = int(xs.device.id)
        try:
            out = self._request(lambda ms: make_request(ms, staged.meta()), (), timeout,
                                reregister, take=functools.partial(self._take, device, staged))
        except DeviceInputError as exc:
            self.device_io = False
            self.device_io_off_reason = str(exc)
            return None
        self.last_request_device = True
        if library == "torch":
            from torch.utils.dlpack import from_dlpack

            return from_dlpack(out)
        return out

    def _take(self, device: int, staged: StagedRequest, reply: Message) -> Any:
        """The released output of a device-resident request's reply (None: malformed)."""
        answer = msgs.Released.parse(reply.meta)
        if reply.arrays or answer.slot is None or answer.digest is None:
            return None
        assert self._exchange is not None
        return self._exchange.take(device, staged, answer.slot, answer.digest)

    def _reregister_weight(self, weight_id: str, reply: Message) -> None:
        w = self._weights.get(weight_id)
        if w is None:
            raise InvalidInputError(str(reply.meta.get("message")))
        self.register_weight(w)  # a restarted daemon: same content, same id

    def _reregister_model(self, model_id: str, reply: Message) -> None:
        known = self._models.get(model_id)
        if known is None:
            raise InvalidInputError(str(reply.meta.get("message")))
        for wid in dict.fromkeys(weight_ids(known[0])):
            self._reregister_weight(wid, reply)
        self.register_model(known[0])

    def _request(self, make_request: Callable[[float], msgs.MatmulRequest | msgs.ModelRequest],
                 arrays: tuple[npt.NDArray[Any], ...],
                 timeout: float, reregister: Callable[[Message], None],
                 take: Callable[[Message], Any] | None = None) -> Any:
        """Send one voted request; on an Unknown{Weight,Model}Error (a restarted daemon)
        call `reregister` once and retry within the same timeout. `take` turns a released
        reply into the result (None: malformed); by default its one frame, copied.
        `timeout` was checked by the public call (`_check_timeout`)."""
        end = time.monotonic() + timeout
        for _attempt in range(2):
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            # The daemon is asked to answer a margin before the client stops waiting, and
            # the client waits a grace past it: its loop and the transport take time too.
            margin = min(REPLY_MARGIN_S, REPLY_MARGIN_FRACTION * remaining)
            reply = self._call(self._ingress, Kind.REQUEST,
                               make_request((remaining - margin) * 1000.0).to_meta(), arrays,
                               remaining + REPLY_GRACE_S)
            if reply is None:
                raise DaemonSilentError(f"no answer from the daemon on "
                                        f"{self.config.endpoints.ingress} within {seconds_text(timeout)} s "
                                        "(is it running? `safemon status`)")
            if reply.kind is Kind.REPLY and self._control_reply(reply).ok:
                out = (take(reply) if take is not None
                       else np.array(reply.arrays[0], copy=True) if len(reply.arrays) == 1
                       else None)
                if out is not None:
                    ks = reply.meta.get("kernel_seconds")
                    self.last_kernel_seconds = float(ks) if isinstance(ks, int | float) else None
                    return out
            err = msgs.ErrorReply.parse(reply.meta) if reply.kind is Kind.ERROR else None
            if err is not None and err.error_type in ("UnknownWeightError", "UnknownModelError"):
                self._register_until = end  # within this request's timeout (`_register`)
                try:
                    reregister(reply)
                finally:
                    self._register_until = None
                continue
            if reply.kind is Kind.ERROR:
                self._raise(reply)
            raise SafemonError(f"unexpected reply {reply.kind.value} {reply.meta}")
        raise VoteTimeoutError(f"no answer from the daemon on {self.config.endpoints.ingress} "
                               f"within {seconds_text(timeout)} s")

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

    @_one_at_a_time
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

    @_one_at_a_time
    def status(self) -> dict[str, Any]:
        """The daemon's status: mode, policy, metrics_url, channels [{name, state}], ..."""
        reply = self._command("status")
        if len(reply.arrays) != 1:
            raise SafemonError("status reply without a body")
        out: dict[str, Any] = json.loads(bytes(reply.arrays[0]).decode())
        return out

    @_one_at_a_time
    def reset(self) -> None:
        """Operator reset (leaves the latched SAFE state; re-admits isolated channels)."""
        self._command("reset")

    @_one_at_a_time
    def inject(self, channel: str, fault: str) -> None:
        """Inject `fault` (see `safemon.channels.faults.FAULT_KINDS`) into `channel`."""
        self._command("inject", f"{channel}:{fault}")

    @_one_at_a_time
    def clear_faults(self, channel: str | None = None) -> None:
        """Remove injected faults from `channel` (None: every channel)."""
        self._command("clear", channel or "")

    @_one_at_a_time
    def selftest(self) -> None:
        """Ask for an immediate self-test of every running channel."""
        self._command("selftest")
