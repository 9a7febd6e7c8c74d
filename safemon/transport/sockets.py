"""ZeroMQ sockets for safemon, picked by address scheme, with every option set on purpose.

``make_socket(ctx, zmq.DEALER, "ipc:///run/user/1000/safemon/ingress", bind=False)`` is the one
way safemon code makes a socket. The scheme decides the rules:

* ``inproc://`` — channels as CUDA streams in one process, and tests. No security needed (same
  process); CURVE is refused as meaningless.
* ``ipc://`` — processes on one host. The socket file's parent directory is created with mode
  0700 and a directory that group or others can access is refused, so only this user can
  connect. Abstract-namespace names (``ipc://@...``) are refused: they have no permissions.
* ``tcp://`` — across hosts. CURVE is mandatory: a bind socket needs :class:`CurveServerKeys`
  (and a :class:`~safemon.transport.auth.ZapAuthenticator` in the same context, or every
  handshake fails), a connect socket needs :class:`CurveClientKeys` including the server's
  public key. Without keys the factory refuses.

Contexts: the factory never creates, caches or shares a ``zmq.Context``. Each process creates its
own ``zmq.Context()`` after it starts (channel processes are spawned, never forked, and a
context must not cross a fork) and passes it in; closing it is the caller's job.

:func:`send_message` / :func:`recv_message` move :mod:`~safemon.transport.wire` messages with
bounded waits and count every dropped message by reason.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import zmq

from safemon.errors import ConfigError
from safemon.transport.auth import ZAP_DOMAIN
from safemon.transport.keys import KeyPair, KeyPermissionError, load_keypair, load_public
from safemon.transport.wire import (
    Limits,
    Message,
    RejectCounter,
    Rejected,
    RejectReason,
    StalenessFilter,
    decode,
)

__all__ = [
    "LOOPBACK_ANY_PORT",
    "CurveClientKeys",
    "CurveServerKeys",
    "Received",
    "SocketOptions",
    "bind_random_loopback",
    "ensure_private_dir",
    "make_socket",
    "recv_message",
    "send_message",
    "spin_until",
]

LOOPBACK_ANY_PORT: Final = "tcp://127.0.0.1:*"
_SUN_PATH_MAX: Final = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux
_SCHEMES: Final = ("inproc", "ipc", "tcp")

Socket = zmq.Socket[bytes]
Context = zmq.Context[zmq.Socket[bytes]]


@dataclass(frozen=True, slots=True)
class SocketOptions:
    """Every socket option safemon sets, with why (times in ms, sizes in bytes/messages).

    linger_ms = 0: on close, unsent messages are dropped at once. A shutdown must never hang on
        a dead peer, and every message in flight is tied to an epoch that ends with the process.
    sndhwm = rcvhwm = 64 (messages per peer): a request carries up to two 256 MiB operands, so
        the queue is bounded in bytes (64 x max message) and back-pressure reaches the sender
        early instead of the daemon buffering a backlog that would miss its deadlines anyway.
    max_msg_size = Limits().max_frame_bytes (256 MiB): libzmq drops the *connection* of a peer
        that sends a larger part, before allocating it (tcp/ipc only; inproc has no decoder and
        relies on ``decode``'s Limits). Per part: a message of many parts under it is still
        buffered whole. The daemon's client sockets set ``max_wire_part_bytes`` of the limits they
        decode with (`safemon.admission.client_limits`).
    sndtimeo_ms = rcvtimeo_ms = 1000: no send or receive blocks forever (a full HWM raises
        ``zmq.Again``); the helpers poll with their own bounded waits in any case.
    heartbeat_ivl_ms = 1000, heartbeat_timeout_ms = 3000, heartbeat_ttl_ms = 3000 (tcp/ipc):
        ZMTP PINGs find a half-open connection (cable pulled, host frozen) in ≤ 3 s so the
        socket reconnects; this is transport liveness, separate from safemon's own
        ``heartbeat`` messages, which report channel health.
    handshake_ivl_ms = 5000 (tcp/ipc): a peer that does not finish the (CURVE) handshake in 5 s
        is dropped, bounding what a stalled or hostile connection can hold.
    reconnect_ivl_ms = 100, reconnect_ivl_max_ms = 2000: a restarted daemon/channel is found
        within 0.1 s, backing off to 2 s so a dead peer is not hammered.
    immediate = True (connect side): messages are queued only to peers whose connection is
        complete, so a request is never parked for a channel that is down; the send fails
        (``zmq.Again``) and the shell can count that channel as failed.
    router_mandatory = True (ROUTER): sending to an unknown identity raises instead of silently
        dropping; every request is answered exactly once, so a lost reply must be visible.
    """

    linger_ms: int = 0
    sndhwm: int = 64
    rcvhwm: int = 64
    max_msg_size: int = Limits().max_frame_bytes
    sndtimeo_ms: int = 1000
    rcvtimeo_ms: int = 1000
    heartbeat_ivl_ms: int = 1000
    heartbeat_timeout_ms: int = 3000
    heartbeat_ttl_ms: int = 3000
    handshake_ivl_ms: int = 5000
    reconnect_ivl_ms: int = 100
    reconnect_ivl_max_ms: int = 2000
    immediate: bool = True
    router_mandatory: bool = True


@dataclass(frozen=True, slots=True)
class CurveServerKeys:
    """The bind side's CURVE key pair (Z85, 40 bytes each)."""

    public: bytes
    secret: bytes

    @classmethod
    def from_file(cls, secret_file: str | os.PathLike[str]) -> CurveServerKeys:
        """Load from a ``*.key_secret`` file (refused unless mode 0600 or stricter)."""
        pair = load_keypair(secret_file)
        return cls(public=pair.public, secret=pair.secret)

    def __repr__(self) -> str:
        return f"CurveServerKeys(public={self.public!r}, secret=<hidden>)"


@dataclass(frozen=True, slots=True)
class CurveClientKeys:
    """The connect side's CURVE key pair plus the server's public key it pins (Z85)."""

    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def from_files(
        cls, secret_file: str | os.PathLike[str], server_public_file: str | os.PathLike[str]
    ) -> CurveClientKeys:
        """Load the client's ``*.key_secret`` and the server's ``*.key``."""
        pair: KeyPair = load_keypair(secret_file)
        return cls(
            public=pair.public, secret=pair.secret, server_public=load_public(server_public_file)
        )

    def __repr__(self) -> str:
        return f"CurveClientKeys(public={self.public!r}, server_public={self.server_public!r}, secret=<hidden>)"


def _scheme(address: str) -> tuple[str, str]:
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in _SCHEMES:
        raise ConfigError(
            f"address {address!r}: scheme must be one of {', '.join(s + '://' for s in _SCHEMES)}"
        )
    if not rest:
        raise ConfigError(f"address {address!r} has nothing after the scheme")
    return scheme, rest


def ensure_private_dir(directory: str | os.PathLike[str]) -> Path:
    """Create ``directory`` with mode 0700 if missing; refuse one that is not private.

    Raises:
        KeyPermissionError: it is group/world accessible, not owned by this user, or not a
            directory (a symlink is followed, and its target is judged).
    """
    path = Path(directory)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise KeyPermissionError(f"ipc runtime path {path} is not a directory")
    if st.st_mode & 0o077:
        raise KeyPermissionError(
            f"ipc runtime directory {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be "
            "private to its owner (chmod 700)"
        )
    if st.st_uid != os.geteuid():
        raise KeyPermissionError(
            f"ipc runtime directory {path} is owned by uid {st.st_uid}, not us"
        )
    return path


def _check_ipc(rest: str) -> None:
    if rest.startswith("@"):
        raise ConfigError("abstract ipc names (ipc://@...) have no access control; use a path")
    if len(os.fsencode(rest)) > _SUN_PATH_MAX:
        raise ConfigError(f"ipc path {rest!r} is longer than {_SUN_PATH_MAX} bytes (sun_path)")
    ensure_private_dir(Path(rest).parent)


def make_socket(
    ctx: Context,
    socket_type: int,
    address: str,
    *,
    bind: bool,
    curve: CurveServerKeys | CurveClientKeys | None = None,
    options: SocketOptions | None = None,
) -> Socket:
    """Create a socket of ``socket_type`` on ``ctx``, set :class:`SocketOptions`, bind or connect.

    Args:
        ctx: the calling process's own context (never a global or inherited one).
        socket_type: ``zmq.PAIR``, ``zmq.DEALER``, ``zmq.ROUTER``, ``zmq.PUSH``, ``zmq.PULL``, ...
        address: ``inproc://name``, ``ipc:///path``, ``tcp://host:port`` (port ``*`` = any).
        bind: bind (True) or connect (False).
        curve: server keys for a bind socket, client keys for a connect socket; required for
            tcp, optional for ipc, refused for inproc.
        options: defaults to ``SocketOptions()``.

    Raises:
        ConfigError: unknown scheme, tcp without the right keys, curve on inproc, bad ipc path.
        KeyPermissionError: the ipc directory is not private.
        zmq.ZMQError: libzmq refused the bind/connect (e.g. address in use); the socket is closed.
    """
    opts = options or SocketOptions()
    scheme, rest = _scheme(address)
    if scheme == "tcp":
        wanted = CurveServerKeys if bind else CurveClientKeys
        if not isinstance(curve, wanted):
            raise ConfigError(
                f"tcp:// requires CURVE: a {'bind' if bind else 'connect'} socket needs "
                f"{wanted.__name__}, got {type(curve).__name__}"
            )
    elif scheme == "inproc" and curve is not None:
        raise ConfigError("CURVE on inproc:// is meaningless (same process); pass curve=None")
    elif scheme == "ipc":
        _check_ipc(rest)
        if curve is not None and not isinstance(
            curve, CurveServerKeys if bind else CurveClientKeys
        ):
            raise ConfigError(
                f"ipc {'bind' if bind else 'connect'} socket given the wrong CURVE key kind"
            )

    sock: Socket = ctx.socket(socket_type)
    try:
        sock.setsockopt(zmq.LINGER, opts.linger_ms)
        sock.setsockopt(zmq.SNDHWM, opts.sndhwm)
        sock.setsockopt(zmq.RCVHWM, opts.rcvhwm)
        sock.setsockopt(zmq.MAXMSGSIZE, opts.max_msg_size)
        sock.setsockopt(zmq.SNDTIMEO, opts.sndtimeo_ms)
        sock.setsockopt(zmq.RCVTIMEO, opts.rcvtimeo_ms)
        if scheme != "inproc":  # ZMTP heartbeats/handshakes exist only on stream transports
            sock.setsockopt(zmq.HEARTBEAT_IVL, opts.heartbeat_ivl_ms)
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, opts.heartbeat_timeout_ms)
            sock.setsockopt(zmq.HEARTBEAT_TTL, opts.heartbeat_ttl_ms)
            sock.setsockopt(zmq.HANDSHAKE_IVL, opts.handshake_ivl_ms)
            sock.setsockopt(zmq.RECONNECT_IVL, opts.reconnect_ivl_ms)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, opts.reconnect_ivl_max_ms)
        if not bind and opts.immediate:
            sock.setsockopt(zmq.IMMEDIATE, 1)
        if socket_type == zmq.ROUTER and opts.router_mandatory:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if isinstance(curve, CurveServerKeys):
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
            sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
            # A CURVE server with no ZAP domain and no handler accepts any client key (fail
            # open). With a domain set, libzmq 4.3 asks ZAP and fails the handshake when no
            # handler is bound; ENFORCE_DOMAIN states that strict RFC 27 rule explicitly so it
            # does not hinge on version defaults. test_curve_server_without_authenticator_*.
            sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        elif isinstance(curve, CurveClientKeys):
            sock.setsockopt(zmq.CURVE_SERVERKEY, curve.server_public)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
        if bind:
            sock.bind(address)
        else:
            sock.connect(address)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


def bind_random_loopback(
    ctx: Context,
    socket_type: int,
    *,
    curve: CurveServerKeys,
    options: SocketOptions | None = None,
) -> tuple[Socket, str]:
    """Bind to ``tcp://127.0.0.1:*`` (a free port) and return the socket and its real endpoint.

    The endpoint is read back from ``ZMQ_LAST_ENDPOINT`` (e.g. ``tcp://127.0.0.1:41234``), so
    tests never race for a hard-coded port.
    """
    sock = make_socket(ctx, socket_type, LOOPBACK_ANY_PORT, bind=True, curve=curve, options=options)
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    assert isinstance(endpoint, bytes)
    return sock, endpoint.decode("ascii")


@dataclass(frozen=True, slots=True)
class Received:
    """A message accepted by :func:`recv_message`.

    identity: the ROUTER routing id of the sender (None on other socket types).
    user_id: the peer's ZAP user id (its Z85 CURVE public key) on a CURVE server, else None.
    """

    message: Message
    identity: bytes | None = None
    user_id: str | None = None


def send_message(
    sock: Socket,
    frames: list[bytes | memoryview],
    *,
    identity: bytes | None = None,
    flags: int = 0,
    copy: bool = False,
) -> None:
    """Send the frames from ``wire.encode``; on a ROUTER, ``identity`` first.

    Zero-copy by default (ZeroMQ reads the arrays' own memory); ``copy=True`` makes ZeroMQ
    copy every frame first, which only `safemon bench vote` uses, to measure what zero-copy
    saves.

    Raises:
        zmq.Again: HWM reached or no connected peer (IMMEDIATE) within SNDTIMEO.
        zmq.ZMQError: e.g. EHOSTUNREACH for an unknown ROUTER identity (ROUTER_MANDATORY).
    """
    parts: list[bytes | memoryview] = [identity, *frames] if identity is not None else frames
    sock.send_multipart(parts, flags=flags, copy=copy)


#: ZMQ_POLLIN as a plain int (`zmq.POLLIN` is an enum flag: `&` with it builds an enum).
_POLLIN = int(zmq.POLLIN)


def _is_curve_server(sock: Socket) -> bool:
    return bool(sock.getsockopt(zmq.MECHANISM) == zmq.CURVE and sock.getsockopt(zmq.CURVE_SERVER))


def spin_until(ready: Callable[[], bool], until: float) -> bool:
    """Call `ready()` without sleeping until it returns True (then True) or the monotonic
    clock passes `until` (then False). The busy-wait of `TimingConfig.spin_s`."""
    while time.monotonic() < until:
        if ready():
            return True
    return False


def recv_message(
    sock: Socket,
    *,
    limits: Limits,
    timeout_ms: int,
    counter: RejectCounter | None = None,
    staleness: StalenessFilter | None = None,
    copy: bool = False,
    on_reject: Callable[[bytes | None, Rejected, Sequence[zmq.Frame]], None] | None = None,
    spin_to: float = 0.0,
) -> Received | None:
    """Receive the next acceptable message within ``timeout_ms`` (a bounded wait, always).

    Arrays are views of ZeroMQ's own message buffers (zero-copy). ``copy=True`` copies each
    frame out first, as a copying receiver would; only `safemon bench vote` uses it, and it is
    refused on a CURVE server (the copies lose the frames' ZAP user id).

    Each received message is decoded (:func:`~safemon.transport.wire.decode`), checked for
    authentication on a CURVE server (the ZAP user id must be present), and, if ``staleness``
    is given, filtered by it. A message that fails is counted in ``counter`` by reason and
    dropped, and waiting continues until the deadline.

    ``on_reject(identity, rejected, frames)``, if given, also sees each dropped message (the
    sender's routing id on a ROUTER, else None; the frames after the routing id), so that a
    server can log it and answer the sender with a typed error when the header is readable.

    ``spin_to`` (a `time.monotonic()` instant; 0: none) makes an empty queue be polled
    without sleeping until then (or the deadline, whichever is first) before the blocking
    wait: a process woken from a blocking wait costs more than the hop (`TimingConfig.spin_s`).

    Returns:
        The first accepted message, or None if none was accepted before the deadline.
    """
    if timeout_ms < 0:
        raise ValueError("timeout_ms must be >= 0 (unbounded waits are not offered)")
    deadline = time.monotonic() + timeout_ms / 1000.0
    authenticated = _is_curve_server(sock) if copy else None
    if authenticated:
        raise ValueError("copy=True is not offered on a CURVE server socket")
    routed = None
    while True:
        # ZMQ_EVENTS first: a message already queued (the common case in a busy loop, and
        # every call with timeout 0 after a poll said "readable") is taken without building
        # a poller; only an empty queue waits in `poll`.
        if not int(sock.getsockopt(zmq.EVENTS)) & _POLLIN and not (
            spin_to > 0.0
            and spin_until(lambda: bool(int(sock.getsockopt(zmq.EVENTS)) & _POLLIN),
                           min(spin_to, deadline))
        ):
            remaining_ms = max(0, round((deadline - time.monotonic()) * 1000))
            if remaining_ms == 0 or not sock.poll(remaining_ms, zmq.POLLIN):
                return None
        try:
            frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:  # readable a moment ago, not now: wait again within the deadline
            if time.monotonic() >= deadline:
                return None
            continue
        if routed is None:  # asked once per call, and only when a message came
            routed = sock.type == zmq.ROUTER  # pyzmq keeps the type: no getsockopt
            if authenticated is None:
                authenticated = _is_curve_server(sock)
        if copy:
            frames = [zmq.Frame(f.bytes) for f in frames]
        try:
            identity: bytes | None = None
            if routed:
                if len(frames) < 2:
                    raise Rejected(RejectReason.FRAME_COUNT, "routed message without a body")
                identity = frames[0].bytes
                frames = frames[1:]
            user_id: str | None = None
            if authenticated:
                try:
                    prop = frames[0].get("User-Id")
                except zmq.ZMQError:
                    prop = None
                user_id = prop if isinstance(prop, str) else None
                if not user_id:
                    raise Rejected(RejectReason.UNAUTHENTICATED, "no ZAP user id on a CURVE server")
            message = decode(frames, limits)
            if staleness is not None:
                staleness.check(message.header)
        except Rejected as rejected:
            if counter is not None:
                counter.record(rejected)
            if on_reject is not None:
                on_reject(identity, rejected, frames)
            if time.monotonic() >= deadline:
                return None
            continue
        return Received(message=message, identity=identity, user_id=user_id)
