"""Real sockets: round trips over inproc, ipc and CURVE tcp; refusals; fail-closed authentication."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from safemon.errors import ConfigError
from safemon.transport.auth import ZapAuthenticator
from safemon.transport.keys import KeyPermissionError, generate_keys, keys_generate
from safemon.transport.sockets import (
    CurveClientKeys,
    CurveServerKeys,
    SocketOptions,
    bind_random_loopback,
    make_socket,
    recv_message,
    send_message,
)
from safemon.transport.wire import (
    Kind,
    Limits,
    RejectCounter,
    RejectReason,
    StalenessFilter,
    encode,
)

LIMITS = Limits()
WAIT_MS = 2000  # bound for messages that must arrive
SILENCE_MS = 400  # how long "nothing arrives" is watched


class TrackingContext(zmq.Context):  # type: ignore[type-arg]
    """A context that keeps every socket it made, so teardown closes them all (linger=0)."""

    made: list[zmq.Socket[bytes]]

    def socket(self, *args: Any, **kwargs: Any) -> zmq.Socket[bytes]:
        sock: zmq.Socket[bytes] = super().socket(*args, **kwargs)
        self.made.append(sock)
        return sock


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context = TrackingContext()
    context.made = []
    yield context
    for sock in context.made:
        sock.close(linger=0)
    context.term()


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("keys") / "k"
    keys_generate(directory)
    return directory


def server_keys(keydir: Path) -> CurveServerKeys:
    return CurveServerKeys.from_file(keydir / "server.key_secret")


def client_keys(keydir: Path) -> CurveClientKeys:
    return CurveClientKeys.from_files(keydir / "client.key_secret", keydir / "server.key")


def payload(seq: int) -> list[bytes | memoryview]:
    a = np.arange(80 * 80, dtype=np.float32).reshape(80, 80) + seq
    return encode(
        Kind.REQUEST,
        epoch=1,
        seq=seq,
        meta={"weight_id": "w", "deadline_ms": 50},
        arrays=[a, a.T.copy()],
    )


def check(msg_seq: int, received: object) -> None:
    assert received is not None
    message = received.message  # type: ignore[attr-defined]
    assert message.seq == msg_seq and message.meta["weight_id"] == "w"
    np.testing.assert_array_equal(
        message.arrays[0], np.arange(6400, dtype=np.float32).reshape(80, 80) + msg_seq
    )


def dealer_router_round_trip(server: zmq.Socket[bytes], client: zmq.Socket[bytes]) -> None:
    send_message(client, payload(1))
    got = recv_message(server, limits=LIMITS, timeout_ms=WAIT_MS)
    check(1, got)
    assert got is not None and got.identity
    reply = encode(
        Kind.RESULT,
        epoch=1,
        seq=1,
        channel="c0",
        meta={"ok": True},
        arrays=[np.ones(3, np.float64)],
    )
    send_message(server, reply, identity=got.identity)
    back = recv_message(client, limits=LIMITS, timeout_ms=WAIT_MS)
    assert back is not None and back.identity is None and back.message.meta == {"ok": True}


def test_pair_round_trip_over_inproc(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    a = make_socket(ctx, zmq.PAIR, "inproc://pair-test", bind=True)
    b = make_socket(ctx, zmq.PAIR, "inproc://pair-test", bind=False)
    send_message(b, payload(3))
    check(3, recv_message(a, limits=LIMITS, timeout_ms=WAIT_MS))
    assert a.getsockopt(zmq.LINGER) == 0 and b.getsockopt(zmq.IMMEDIATE) == 1


def test_dealer_router_round_trip_over_inproc(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    server = make_socket(ctx, zmq.ROUTER, "inproc://dr-test", bind=True)
    client = make_socket(ctx, zmq.DEALER, "inproc://dr-test", bind=False)
    dealer_router_round_trip(server, client)
    with pytest.raises(zmq.ZMQError):  # unknown identity: loud, never a silent drop
        send_message(server, payload(2), identity=b"nobody", flags=zmq.NOBLOCK)


def test_dealer_router_round_trip_over_ipc_in_private_dir(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    run = tmp_path / "run" / "safemon"
    address = f"ipc://{run}/ingress"
    server = make_socket(ctx, zmq.ROUTER, address, bind=True)
    assert (run.stat().st_mode & 0o777) == 0o700
    client = make_socket(ctx, zmq.DEALER, address, bind=False)
    dealer_router_round_trip(server, client)
    opts = SocketOptions()
    assert server.getsockopt(zmq.HEARTBEAT_IVL) == opts.heartbeat_ivl_ms
    assert server.getsockopt(zmq.MAXMSGSIZE) == opts.max_msg_size
    assert server.getsockopt(zmq.SNDHWM) == opts.sndhwm


def test_ipc_dir_open_to_others_is_refused(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(KeyPermissionError, match="0755"):
        make_socket(ctx, zmq.ROUTER, f"ipc://{shared}/sock", bind=True)
    assert not (shared / "sock").exists()
    with pytest.raises(ConfigError, match="abstract"):
        make_socket(ctx, zmq.ROUTER, "ipc://@safemon", bind=True)
    with pytest.raises(ConfigError, match="longer than"):
        make_socket(ctx, zmq.ROUTER, f"ipc://{tmp_path}/{'x' * 120}", bind=True)


def test_unknown_schemes_and_misplaced_curve_are_refused(
    ctx: zmq.Context[zmq.Socket[bytes]], keydir: Path
) -> None:
    for address in ("udp://127.0.0.1:5", "pgm://eth0;239.1.1.1:5555", "127.0.0.1:5555", "tcp://"):
        with pytest.raises(ConfigError):
            make_socket(ctx, zmq.DEALER, address, bind=False, curve=client_keys(keydir))
    with pytest.raises(ConfigError, match="inproc"):
        make_socket(ctx, zmq.PAIR, "inproc://x", bind=True, curve=server_keys(keydir))


def test_tcp_without_keys_or_with_the_wrong_kind_is_refused(
    ctx: zmq.Context[zmq.Socket[bytes]], keydir: Path
) -> None:
    with pytest.raises(ConfigError, match="CurveServerKeys"):
        make_socket(ctx, zmq.ROUTER, "tcp://127.0.0.1:*", bind=True)
    with pytest.raises(ConfigError, match="CurveClientKeys"):
        make_socket(ctx, zmq.DEALER, "tcp://127.0.0.1:5555", bind=False)
    with pytest.raises(ConfigError, match="CurveServerKeys"):
        make_socket(ctx, zmq.ROUTER, "tcp://127.0.0.1:*", bind=True, curve=client_keys(keydir))


def test_curve_round_trip_over_tcp_loopback(
    ctx: zmq.Context[zmq.Socket[bytes]], keydir: Path
) -> None:
    with ZapAuthenticator(ctx, keydir / "allowed_clients") as auth:
        server, endpoint = bind_random_loopback(ctx, zmq.ROUTER, curve=server_keys(keydir))
        assert endpoint.startswith("tcp://127.0.0.1:") and not endpoint.endswith("*")
        client = make_socket(ctx, zmq.DEALER, endpoint, bind=False, curve=client_keys(keydir))
        dealer_router_round_trip(server, client)
        assert auth.accepted == 1


def test_received_messages_carry_the_authenticated_client_key(
    ctx: zmq.Context[zmq.Socket[bytes]], keydir: Path
) -> None:
    with ZapAuthenticator(ctx, keydir / "allowed_clients"):
        server, endpoint = bind_random_loopback(ctx, zmq.ROUTER, curve=server_keys(keydir))
        keys = client_keys(keydir)
        client = make_socket(ctx, zmq.DEALER, endpoint, bind=False, curve=keys)
        send_message(client, payload(4))
        got = recv_message(server, limits=LIMITS, timeout_ms=WAIT_MS)
        assert got is not None and got.user_id == keys.public.decode()


def raw_dealer(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, curve: CurveClientKeys | None
) -> zmq.Socket[bytes]:
    """An attacker's socket, made without the factory (which would refuse it)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, curve.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
    sock.connect(endpoint)
    # Queued (IMMEDIATE is off on purpose), unless the server refused the handshake before
    # the send and libzmq dropped the pipe: then the attacker's message is not even queued
    # (zmq.Again, seen once in a clean-clone CI run on the 2-core machine).
    with contextlib.suppress(zmq.Again):
        sock.send_multipart(payload(9), flags=zmq.NOBLOCK)
    return sock


def test_unauthenticated_clients_get_nothing_through(
    ctx: zmq.Context[zmq.Socket[bytes]], keydir: Path, tmp_path: Path
) -> None:
    stranger = generate_keys(tmp_path / "stranger", ["client"])["client"][1]
    with ZapAuthenticator(ctx, keydir / "allowed_clients") as auth:
        server, endpoint = bind_random_loopback(ctx, zmq.ROUTER, curve=server_keys(keydir))
        counter = RejectCounter()
        raw_dealer(ctx, endpoint, None)  # no CURVE at all
        raw_dealer(ctx, endpoint, CurveClientKeys.from_files(stranger, keydir / "server.key"))
        assert recv_message(server, limits=LIMITS, timeout_ms=SILENCE_MS, counter=counter) is None
        assert counter.total == 0  # nothing even reached the decoder
        assert auth.denied >= 1 and auth.accepted == 0
        # The server was listening all along: the allowed client gets through at once.
        client = make_socket(ctx, zmq.DEALER, endpoint, bind=False, curve=client_keys(keydir))
        send_message(client, payload(1))
        check(1, recv_message(server, limits=LIMITS, timeout_ms=WAIT_MS))


def test_curve_server_without_authenticator_fails_closed(
    ctx: zmq.Context[zmq.Socket[bytes]], keydir: Path
) -> None:
    server, endpoint = bind_random_loopback(ctx, zmq.ROUTER, curve=server_keys(keydir))
    raw_dealer(ctx, endpoint, client_keys(keydir))  # even the right keys: no ZAP handler, no entry
    assert recv_message(server, limits=LIMITS, timeout_ms=SILENCE_MS) is None


def test_bad_and_stale_messages_are_counted_and_dropped(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    server = make_socket(ctx, zmq.PAIR, "inproc://counted", bind=True)
    client = make_socket(ctx, zmq.PAIR, "inproc://counted", bind=False)
    counter = RejectCounter()
    staleness = StalenessFilter(epoch=1)
    client.send_multipart([b"not json"])
    send_message(client, payload(5))
    send_message(client, payload(5))  # replay
    client.send_multipart([b""] * 40)
    send_message(client, payload(6))
    got = [
        recv_message(
            server, limits=LIMITS, timeout_ms=WAIT_MS, counter=counter, staleness=staleness
        )
        for _ in range(2)
    ]
    assert [g.message.seq for g in got if g is not None] == [5, 6]
    assert counter[RejectReason.MALFORMED] == 1
    assert counter[RejectReason.STALE] == 1
    assert counter[RejectReason.FRAME_COUNT] == 1


def test_no_unbounded_receive_is_offered(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    sock = make_socket(ctx, zmq.PAIR, "inproc://bounded", bind=True)
    with pytest.raises(ValueError):
        recv_message(sock, limits=LIMITS, timeout_ms=-1)
    assert sock.getsockopt(zmq.RCVTIMEO) == SocketOptions().rcvtimeo_ms > 0
    assert recv_message(sock, limits=LIMITS, timeout_ms=0) is None


def test_queued_messages_are_taken_without_waiting_and_a_late_one_is_waited_for(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """timeout 0 takes every message already queued (the daemon drains a readable socket
    that way) and then answers None; a positive timeout waits for a message sent later,
    including after a rejected one."""
    import threading

    server = make_socket(ctx, zmq.ROUTER, "inproc://queued", bind=True)
    client = make_socket(ctx, zmq.DEALER, "inproc://queued", bind=False)
    for seq in (1, 2, 3):
        send_message(client, payload(seq))
    assert wait_readable(server)
    got = [recv_message(server, limits=LIMITS, timeout_ms=0) for _ in range(4)]
    assert [g.message.seq if g is not None else None for g in got] == [1, 2, 3, None]
    late = threading.Timer(0.2, lambda: (client.send_multipart([b"not json"]),
                                         send_message(client, payload(4))))
    late.start()
    counter = RejectCounter()
    try:
        check(4, recv_message(server, limits=LIMITS, timeout_ms=WAIT_MS, counter=counter))
    finally:
        late.join()
    assert counter[RejectReason.MALFORMED] == 1


def wait_readable(sock: zmq.Socket[bytes]) -> bool:
    return bool(sock.poll(WAIT_MS, zmq.POLLIN))


def test_factory_uses_only_the_context_it_is_given(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    sock = make_socket(ctx, zmq.PAIR, "inproc://mine", bind=True)
    assert sock.context is ctx
    assert os.getpid() > 0  # a fresh context per process is the caller's rule (see module doc)
