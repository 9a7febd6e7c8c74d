"""CURVE key files: written private, loaded only when private, never overwritten."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import zmq.auth

from safemon.errors import ConfigError
from safemon.transport.keys import (
    KeyPermissionError,
    generate_keys,
    keys_generate,
    load_keypair,
    load_public,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_generate_writes_pairs_with_safe_modes(tmp_path: Path) -> None:
    files = keys_generate(tmp_path / "keys")
    names = [p.relative_to(tmp_path / "keys").as_posix() for p in files]
    assert names == [
        "server.key",
        "server.key_secret",
        "client.key",
        "client.key_secret",
        "allowed_clients/client.key",
    ]
    assert mode(tmp_path / "keys") == 0o700
    assert mode(tmp_path / "keys" / "allowed_clients") == 0o700
    for p in files:
        assert mode(p) == (0o600 if p.name.endswith("_secret") else 0o644), p
    client = load_keypair(files[3])
    assert load_public(files[2]) == client.public == load_public(files[4])
    assert client.public != load_public(files[0])
    assert "secret=<hidden>" in repr(client) and client.secret.decode() not in repr(client)


def test_files_are_readable_by_pyzmq_too(tmp_path: Path) -> None:
    pairs = generate_keys(tmp_path, ["node"])
    public_file, secret_file = pairs["node"]
    pub, sec = zmq.auth.load_certificate(secret_file)
    pair = load_keypair(secret_file)
    assert (pub, sec) == (pair.public, pair.secret)
    assert zmq.auth.load_certificate(public_file) == (pair.public, None)


def test_existing_keys_are_never_overwritten(tmp_path: Path) -> None:
    generate_keys(tmp_path, ["server"])
    before = (tmp_path / "server.key_secret").read_bytes()
    with pytest.raises(ConfigError, match="already exists"):
        generate_keys(tmp_path, ["server"])
    assert (tmp_path / "server.key_secret").read_bytes() == before


@pytest.mark.parametrize("bad_mode", [0o644, 0o640, 0o604, 0o660])
def test_secret_file_readable_by_others_is_refused(tmp_path: Path, bad_mode: int) -> None:
    _, secret = generate_keys(tmp_path, ["server"])["server"]
    secret.chmod(bad_mode)
    with pytest.raises(KeyPermissionError, match=f"{secret}.*{bad_mode:04o}"):
        load_keypair(secret)
    with pytest.raises(KeyPermissionError):
        load_public(secret)  # the secret file is judged even when only its public half is read
    secret.chmod(0o400)
    assert load_keypair(secret).secret


def test_key_directory_open_to_others_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(KeyPermissionError, match="0755"):
        generate_keys(shared)


def test_malformed_or_missing_key_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open"):
        load_keypair(tmp_path / "nope.key_secret")
    bad = tmp_path / "bad.key"
    bad.write_text('curve\n    public-key = "tooshort"\n')
    with pytest.raises(ConfigError, match="Z85"):
        load_public(bad)
    public_only = tmp_path / "p.key_secret"
    public_file, _ = generate_keys(tmp_path, ["x"])["x"]
    public_only.write_text(public_file.read_text())
    public_only.chmod(0o600)
    with pytest.raises(ConfigError, match="both"):
        load_keypair(public_only)
    with pytest.raises(ConfigError, match="plain file name"):
        generate_keys(tmp_path, ["../evil"])
