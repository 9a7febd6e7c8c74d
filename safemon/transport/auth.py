"""ZAP authentication for CURVE servers that fails closed.

:class:`ZapAuthenticator` answers ZeroMQ's authentication requests (ZAP, RFC 27) for one
``zmq.Context``: it binds ``inproc://zeromq.zap.01`` in that context and accepts a connecting
peer only if *all* of these hold; anything else is denied:

* the request is well formed and of ZAP version 1.0;
* the server socket's ZAP domain is ours (``safemon``; ``make_socket`` sets it);
* the mechanism is CURVE (NULL and PLAIN peers are always denied);
* the client's long-term public key is one of the ``*.key`` files in the allowed-clients directory.

Failing closed also covers the cases around it: the authenticator refuses to start without a
readable, private allowed-clients directory; CURVE server sockets made by ``make_socket`` set
a ZAP domain and ``ZMQ_ZAP_ENFORCE_DOMAIN``, so if no authenticator runs in the context every
handshake fails (libzmq's default for a CURVE server without a domain is to accept any key); an
error inside the decision denies.

The decision is the pure function :func:`zap_reply` (sans-IO, tested without sockets); the class
is only the thread that moves frames between it and the ZAP socket.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

import structlog
import zmq
from zmq.utils import z85

from safemon.errors import ConfigError
from safemon.log_sampling import sampled
from safemon.transport.keys import PUBLIC_SUFFIX, KeyPermissionError, load_public

_log = structlog.get_logger("safemon.zap")

__all__ = [
    "ZAP_DOMAIN",
    "ZAP_ENDPOINT",
    "ZapAuthenticator",
    "load_allowed_keys",
    "zap_reply",
]

ZAP_ENDPOINT: Final = "inproc://zeromq.zap.01"
ZAP_DOMAIN: Final = "safemon"
_ZAP_VERSION: Final = b"1.0"


def load_allowed_keys(directory: str | os.PathLike[str]) -> frozenset[bytes]:
    """The Z85 public keys (40 bytes each) of every ``*.key`` file in ``directory``.

    Raises:
        ConfigError: the directory is missing or a key file is invalid (one bad file refuses
            the whole set rather than silently trusting a partial list).
        KeyPermissionError: the directory is writable by group or others (anyone who can add
            a file could let themselves in).
    """
    path = Path(directory)
    try:
        st = path.stat()
    except OSError as exc:
        raise ConfigError(f"allowed-clients directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"allowed-clients path {path} is not a directory")
    if st.st_mode & 0o022:
        raise KeyPermissionError(
            f"allowed-clients directory {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must "
            "not be writable by group or others"
        )
    return frozenset(load_public(p) for p in sorted(path.glob(f"*{PUBLIC_SUFFIX}")))


def zap_reply(
    request: Sequence[bytes], allowed: Collection[bytes], domain: str = ZAP_DOMAIN
) -> list[bytes]:
    """Decide one ZAP request; return the 6-frame ZAP reply (pure, never raises).

    Args:
        request: the frames of a ZAP request: version, request id, domain, address, routing id,
            mechanism, credentials...
        allowed: Z85 public keys of allowed clients.
        domain: the only ZAP domain accepted.

    Returns:
        ``[b"1.0", request_id, status, text, user_id, b""]`` where status is ``b"200"`` only for
        an allowed CURVE key (user_id is then that key in Z85), ``b"400"`` otherwise.
    """
    request_id = request[1] if len(request) > 1 else b""

    def deny(why: bytes) -> list[bytes]:
        return [_ZAP_VERSION, request_id, b"400", why, b"", b""]

    if len(request) < 6:
        return deny(b"malformed ZAP request")
    version, _, req_domain, _address, _routing_id, mechanism = request[:6]
    credentials = request[6:]
    if version != _ZAP_VERSION:
        return deny(b"unsupported ZAP version")
    if req_domain != domain.encode("utf-8"):
        return deny(b"unknown domain")
    if mechanism != b"CURVE":
        return deny(b"only CURVE is accepted")
    if len(credentials) != 1 or len(credentials[0]) != 32:
        return deny(b"malformed CURVE credentials")
    key = z85.encode(credentials[0])
    if key not in allowed:
        return deny(b"client key not allowed")
    return [_ZAP_VERSION, request_id, b"200", b"OK", key, b""]


class ZapAuthenticator:
    """A ZAP handler thread for one context; a context manager (``with ZapAuthenticator(...)``).

    Args:
        context: the process's own ``zmq.Context``; the authenticator serves every socket of it.
        allowed_dir: directory of allowed client ``*.key`` files (see ``keys.keys_generate``).
        domain: ZAP domain to accept (the one ``make_socket`` sets on CURVE servers).

    Start it before the CURVE server socket accepts connections. :meth:`reload` re-reads the
    directory (e.g. on SIGHUP); ``accepted``/``denied`` count decisions for metrics and tests.

    Raises (from :meth:`start`):
        ConfigError / KeyPermissionError: the allowed-clients directory is unusable.
        ConfigError: another ZAP handler is already bound in this context.
    """

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        allowed_dir: str | os.PathLike[str],
        *,
        domain: str = ZAP_DOMAIN,
    ) -> None:
        self._context = context
        self._allowed_dir = Path(allowed_dir)
        self._domain = domain
        self._allowed: frozenset[bytes] = frozenset()
        self._socket: zmq.Socket[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None  # (read, write) ends of the pipe stop() writes
        self._lock = threading.Lock()
        self.accepted = 0
        self.denied = 0

    @property
    def allowed_keys(self) -> frozenset[bytes]:
        """The Z85 public keys currently accepted."""
        return self._allowed

    def reload(self) -> None:
        """Re-read the allowed-clients directory; on error the previous set stays in force."""
        self._allowed = load_allowed_keys(self._allowed_dir)

    def start(self) -> None:
        """Load the allowed keys, bind the ZAP endpoint and start answering requests."""
        if self._thread is not None:
            raise RuntimeError("ZapAuthenticator already started")
        self.reload()
        socket = self._context.socket(zmq.REP)
        socket.setsockopt(zmq.LINGER, 0)
        try:
            socket.bind(ZAP_ENDPOINT)
        except zmq.ZMQError as exc:
            socket.close(linger=0)
            raise ConfigError(
                f"cannot bind {ZAP_ENDPOINT} ({exc}); is another ZAP handler running in this context?"
            ) from None
        self._socket = socket
        self._wake = os.pipe()
        # The socket is handed to the thread here and touched by no other thread until stop()
        # has joined it (ZeroMQ sockets are not thread-safe; Thread.start is a memory barrier).
        self._thread = threading.Thread(target=self._run, name="safemon-zap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        socket, wake = self._socket, self._wake
        assert socket is not None and wake is not None
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(wake[0], zmq.POLLIN)  # readable once stop() has written: the end
        while True:
            ready = dict(poller.poll())
            if wake[0] in ready:
                return
            if socket not in ready:
                continue
            request = socket.recv_multipart(zmq.NOBLOCK)
            try:
                reply = zap_reply(request, self._allowed, self._domain)
            except Exception:  # zap_reply does not raise; if it ever did, deny (fail closed)
                reply = [
                    _ZAP_VERSION,
                    request[1] if len(request) > 1 else b"",
                    b"500",
                    b"internal error",
                    b"",
                    b"",
                ]
            with self._lock:
                if reply[2] == b"200":
                    self.accepted += 1
                else:
                    self.denied += 1
                    n = self.denied
                    if sampled(n):  # the first ten, then every power of two
                        _log.warning("zap_denied", status=reply[2].decode(errors="replace"),
                                     reason=reply[3][:80].decode(errors="replace"), count=n)
            socket.send_multipart(reply)

    def stop(self) -> None:
        """Stop answering (new handshakes then fail) and release the ZAP endpoint. Idempotent."""
        if self._thread is None:
            return
        assert self._wake is not None
        os.write(self._wake[1], b"x")
        self._thread.join()
        self._thread = None
        for fd in self._wake:
            os.close(fd)
        self._wake = None
        if self._socket is not None:
            # Unbind first: an inproc unbind releases the name at once, whereas close() leaves
            # that to ZeroMQ's reaper thread, so a start() right after could still see it taken.
            with contextlib.suppress(zmq.ZMQError):
                self._socket.unbind(ZAP_ENDPOINT)
            self._socket.close(linger=0)
            self._socket = None

    def __enter__(self) -> ZapAuthenticator:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
