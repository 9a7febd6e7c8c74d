"""CURVE key files: generate them with safe permissions, load them only if they are private.

Files use the ZeroMQ certificate format that ``zmq.auth.load_certificate`` also reads::

    NAME.key          public key only, mode 0644 (safe to copy to peers)
    NAME.key_secret   public + secret key, mode 0600 (never leaves its host)

:func:`keys_generate` (what ``safemon keys generate DIR`` calls) writes a server and a client
pair into DIR (mode 0700) and copies the client's *public* key into ``DIR/allowed_clients/``,
the directory a CURVE server's authenticator (:mod:`safemon.transport.auth`) trusts.
Secret files are created with ``O_EXCL`` and mode 0600 from the start (no window in which they
are world-readable) and existing keys are never overwritten.
"""

from __future__ import annotations

import datetime as _dt
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import zmq
from zmq.utils import z85

from safemon.errors import ConfigError

__all__ = [
    "ALLOWED_CLIENTS_DIR",
    "KeyPair",
    "KeyPermissionError",
    "generate_keys",
    "keys_generate",
    "load_keypair",
    "load_public",
]

ALLOWED_CLIENTS_DIR: Final = "allowed_clients"
PUBLIC_SUFFIX: Final = ".key"
SECRET_SUFFIX: Final = ".key_secret"


class KeyPermissionError(ConfigError):
    """A secret key file (or key directory) is readable by group or others; it is not used."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A CURVE key pair as Z85 text (40 ASCII bytes each), as libzmq's socket options take it."""

    public: bytes
    secret: bytes

    def __repr__(self) -> str:  # never print a secret key into a log
        return f"KeyPair(public={self.public!r}, secret=<hidden>)"


def _write_new(path: Path, text: str, mode: int) -> None:
    """Create ``path`` with ``mode`` atomically-exclusively; refuse to overwrite anything."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise ConfigError(f"{path} already exists; refusing to overwrite a key file") from None
    try:
        os.fchmod(fd, mode)  # the umask may have removed bits we want (0644 for public files)
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _cert_text(name: str, public: bytes, secret: bytes | None) -> str:
    kind = "Secret" if secret is not None else "Public"
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [
        f"#   ****  Generated on {when} by safemon  ****",
        f"#   ZeroMQ CURVE **{kind}** Certificate for {name!r}",
    ]
    if secret is not None:
        lines.append("#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.")
    lines += ["", "metadata", "curve", f'    public-key = "{public.decode("ascii")}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def _private_dir(directory: Path) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = directory.stat()
    if st.st_mode & 0o077:
        raise KeyPermissionError(
            f"key directory {directory} has mode {stat.S_IMODE(st.st_mode):04o}; it must not be "
            "accessible to group or others (chmod 700)"
        )
    return directory


def generate_keys(
    directory: str | os.PathLike[str], names: Iterable[str] = ("server", "client")
) -> dict[str, tuple[Path, Path]]:
    """Write one CURVE key pair per name into ``directory`` (created 0700 if missing).

    Returns:
        ``{name: (public_file, secret_file)}``; public files are 0644, secret files 0600.

    Raises:
        ConfigError: a key file already exists, or a name is not a plain file name.
        KeyPermissionError: ``directory`` exists and is group/world accessible.
    """
    directory = _private_dir(Path(directory))
    out: dict[str, tuple[Path, Path]] = {}
    for name in names:
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"key name {name!r} must be a plain file name")
        public, secret = zmq.curve_keypair()
        public_file = directory / f"{name}{PUBLIC_SUFFIX}"
        secret_file = directory / f"{name}{SECRET_SUFFIX}"
        _write_new(secret_file, _cert_text(name, public, secret), 0o600)
        _write_new(public_file, _cert_text(name, public, None), 0o644)
        out[name] = (public_file, secret_file)
    return out


def keys_generate(directory: str | os.PathLike[str]) -> list[Path]:
    """``safemon keys generate DIR``: server + client pairs and ``DIR/allowed_clients/client.key``.

    Returns:
        Every file written, in order: server public, server secret, client public, client
        secret, allowed client public.

    Raises:
        ConfigError / KeyPermissionError: as :func:`generate_keys`.
    """
    pairs = generate_keys(directory, ("server", "client"))
    allowed = _private_dir(Path(directory) / ALLOWED_CLIENTS_DIR)
    client_public = pairs["client"][0]
    allowed_file = allowed / client_public.name
    _write_new(allowed_file, client_public.read_text(encoding="ascii"), 0o644)
    return [*pairs["server"], *pairs["client"], allowed_file]


def _parse(path: Path, text: str) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    for line in text.splitlines():
        stripped = line.strip()
        for field in ("public-key", "secret-key"):
            if stripped.startswith(field):
                _, sep, value = stripped.partition("=")
                if not sep:
                    raise ConfigError(f"{path}: malformed line for {field}")
                keys[field] = _check_z85(path, field, value.strip().strip('"').encode("ascii"))
    return keys


def _check_z85(path: Path, field: str, key: bytes) -> bytes:
    try:
        raw = z85.decode(key)
    except (ValueError, KeyError, TypeError):
        raw = b""
    if len(key) != 40 or len(raw) != 32:
        raise ConfigError(f"{path}: {field} is not a 40-character Z85 CURVE key")
    return key


def load_keypair(path: str | os.PathLike[str]) -> KeyPair:
    """Load a public+secret pair from a ``*.key_secret`` file.

    The mode is checked on the opened file descriptor (no check-then-open race).

    Raises:
        KeyPermissionError: the file is readable/writable by group or others (e.g. 0644) or is
            not a regular file; the message names the file and its mode.
        ConfigError: the file is missing, or has no valid public-key/secret-key.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"cannot open secret key file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise KeyPermissionError(f"secret key file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise KeyPermissionError(
                f"secret key file {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be "
                "readable by its owner only (chmod 600) and is refused"
            )
        text = handle.read(64 * 1024)
    keys = _parse(path, text)
    if "secret-key" not in keys or "public-key" not in keys:
        raise ConfigError(f"{path} does not contain both a public-key and a secret-key")
    return KeyPair(public=keys["public-key"], secret=keys["secret-key"])


def load_public(path: str | os.PathLike[str]) -> bytes:
    """Load the Z85 public key (40 bytes) from a ``*.key`` or ``*.key_secret`` file.

    A secret file is held to :func:`load_keypair`'s permission rule even when only its public
    half is wanted, so that a leaked secret file is noticed wherever it is read.

    Raises:
        ConfigError: missing file or no valid public-key. KeyPermissionError: as load_keypair.
    """
    path = Path(path)
    if path.name.endswith(SECRET_SUFFIX):
        return load_keypair(path).public
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read public key file {path}: {exc.strerror}") from None
    keys = _parse(path, text)
    if "public-key" not in keys:
        raise ConfigError(f"{path} does not contain a public-key")
    if "secret-key" in keys:
        raise KeyPermissionError(f"{path} is named as a public key file but holds a secret key")
    return keys["public-key"]
