"""safemon.transport: wire format, ZeroMQ sockets picked by URI scheme, CURVE keys and ZAP auth.

* :mod:`.wire` — sans-IO message format (JSON header + zero-copy frames), decode that only ever
  raises ``Rejected``, staleness filter, reject counter.
* :mod:`.sockets` — ``make_socket`` (inproc/ipc/tcp rules, ``SocketOptions``), bounded
  ``recv_message``/``send_message``.
* :mod:`.keys` — CURVE key files with safe permissions (``keys_generate`` for the CLI).
* :mod:`.auth` — ``ZapAuthenticator``, fail-closed ZAP handler.

The spec is docs/PROTOCOL.md. No pickle anywhere.
"""

from safemon.transport.auth import ZAP_DOMAIN, ZapAuthenticator, load_allowed_keys, zap_reply
from safemon.transport.keys import (
    KeyPair,
    KeyPermissionError,
    generate_keys,
    keys_generate,
    load_keypair,
    load_public,
)
from safemon.transport.sockets import (
    CurveClientKeys,
    CurveServerKeys,
    Received,
    SocketOptions,
    bind_random_loopback,
    ensure_private_dir,
    make_socket,
    recv_message,
    send_message,
)
from safemon.transport.wire import (
    PROTOCOL_VERSION,
    FrameSpec,
    Header,
    Kind,
    Limits,
    Message,
    RejectCounter,
    Rejected,
    RejectReason,
    StalenessFilter,
    decode,
    encode,
)

__all__ = [
    "PROTOCOL_VERSION",
    "ZAP_DOMAIN",
    "CurveClientKeys",
    "CurveServerKeys",
    "FrameSpec",
    "Header",
    "KeyPair",
    "KeyPermissionError",
    "Kind",
    "Limits",
    "Message",
    "Received",
    "RejectCounter",
    "RejectReason",
    "Rejected",
    "SocketOptions",
    "StalenessFilter",
    "ZapAuthenticator",
    "bind_random_loopback",
    "decode",
    "encode",
    "ensure_private_dir",
    "generate_keys",
    "keys_generate",
    "load_allowed_keys",
    "load_keypair",
    "load_public",
    "make_socket",
    "recv_message",
    "send_message",
    "zap_reply",
]
