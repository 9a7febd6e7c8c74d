"""ZAP decisions (pure) and the authenticator's start/stop rules; sockets are in test_sockets."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq
from zmq.utils import z85

from safemon.errors import ConfigError
from safemon.transport.auth import ZAP_DOMAIN, ZapAuthenticator, load_allowed_keys, zap_reply
from safemon.transport.keys import KeyPermissionError, keys_generate, load_public

PUB, _ = zmq.curve_keypair()
RAW = z85.decode(PUB)
ALLOWED = frozenset({PUB})


def request(
    mechanism: bytes = b"CURVE", creds: list[bytes] | None = None, **over: bytes
) -> list[bytes]:
    parts = {
        "version": b"1.0",
        "id": b"7",
        "domain": ZAP_DOMAIN.encode(),
        "address": b"127.0.0.1",
        "routing": b"",
    }
    parts.update(over)
    return [
        parts["version"],
        parts["id"],
        parts["domain"],
        parts["address"],
        parts["routing"],
        mechanism,
        *(creds if creds is not None else [RAW]),
    ]


def test_allowed_curve_key_is_accepted_with_its_key_as_user_id() -> None:
    assert zap_reply(request(), ALLOWED) == [b"1.0", b"7", b"200", b"OK", PUB, b""]


@pytest.mark.parametrize(
    "req",
    [
        request(creds=[z85.decode(zmq.curve_keypair()[0])]),  # unknown key
        request(mechanism=b"NULL", creds=[]),
        request(mechanism=b"PLAIN", creds=[b"user", b"pass"]),
        request(domain=b"other"),
        request(domain=b""),
        request(version=b"2.0"),
        request(creds=[]),
        request(creds=[RAW, RAW]),
        request(creds=[RAW[:31]]),
        [b"1.0", b"7"],
        [],
    ],
)
def test_everything_else_is_denied(req: list[bytes]) -> None:
    reply = zap_reply(req, ALLOWED)
    assert len(reply) == 6 and reply[2] == b"400" and reply[4] == b""


def test_empty_allow_list_denies_everyone() -> None:
    assert zap_reply(request(), frozenset())[2] == b"400"


def test_allowed_dir_must_exist_and_not_be_writable_by_others(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_allowed_keys(tmp_path / "missing")
    keys_generate(tmp_path / "k")
    allowed = tmp_path / "k" / "allowed_clients"
    assert load_allowed_keys(allowed) == {load_public(tmp_path / "k" / "client.key")}
    allowed.chmod(0o777)
    with pytest.raises(KeyPermissionError):
        load_allowed_keys(allowed)


def test_authenticator_refuses_to_start_without_its_directory_and_twice_per_context(
    tmp_path: Path,
) -> None:
    keys_generate(tmp_path / "k")
    ctx = zmq.Context()
    try:
        with pytest.raises(ConfigError):
            ZapAuthenticator(ctx, tmp_path / "missing").start()
        with ZapAuthenticator(ctx, tmp_path / "k" / "allowed_clients") as auth:
            assert len(auth.allowed_keys) == 1
            with pytest.raises(ConfigError, match="another ZAP handler"):
                ZapAuthenticator(ctx, tmp_path / "k" / "allowed_clients").start()
        # after stop() the endpoint is free again
        with ZapAuthenticator(ctx, tmp_path / "k" / "allowed_clients"):
            pass
    finally:
        ctx.term()


def test_authenticator_can_restart_at_once_in_the_same_context(tmp_path: Path) -> None:
    """stop() frees the ZAP name synchronously (close() alone leaves that to the reaper)."""
    keys_generate(tmp_path / "k")
    ctx = zmq.Context()
    try:
        for _ in range(300):
            with ZapAuthenticator(ctx, tmp_path / "k" / "allowed_clients"):
                pass
    finally:
        ctx.term()
