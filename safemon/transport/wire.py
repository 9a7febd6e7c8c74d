"""The safemon wire format: a validated JSON header plus raw, zero-copy payload frames.

A message is a ZeroMQ multipart message ``[header, payload_0, ..., payload_{n-1}]``:

* ``header`` is UTF-8 JSON validated by :class:`Header` (pydantic v2, strict, ``extra="forbid"``).
  It declares, for every payload frame, its dtype, its shape and the zlib CRC-32 of its bytes.
* each ``payload_i`` is the raw C-order, little-endian buffer of one NumPy array.

This module is sans-IO: it turns arrays into frames (:func:`encode`) and frames into read-only
arrays (:func:`decode`), and holds the pure anti-replay rule (:class:`StalenessFilter`) and the
rejection bookkeeping (:class:`RejectCounter`). It never touches a socket. The full specification
is docs/PROTOCOL.md. No pickle is used or accepted anywhere: the only decoders are ``json`` and
``np.frombuffer`` with an allow-listed dtype.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from safemon.errors import InvalidInputError, SafemonError

__all__ = [
    "MAX_META_KEYS",
    "MAX_META_KEY_CHARS",
    "MAX_META_STR_CHARS",
    "MAX_NDIM",
    "MAX_SEQ",
    "PROTOCOL_VERSION",
    "WIRE_DTYPES",
    "FrameSpec",
    "Header",
    "Kind",
    "Limits",
    "LocalHeader",
    "Message",
    "MetaValue",
    "RejectCounter",
    "RejectReason",
    "Rejected",
    "StalenessFilter",
    "decode",
    "encode",
]

PROTOCOL_VERSION: Final = 1
"""The header field ``v`` this code writes and the only one it accepts."""

MAX_SEQ: Final = 2**63 - 1
"""Upper bound of ``epoch`` and ``seq``: they fit an int64 so any language can hold them."""

MAX_NDIM: Final = 32
"""Most dimensions a payload array may declare (NumPy allows 64; nothing in safemon needs >3)."""

_INTP_MAX: Final = int(np.iinfo(np.intp).max)
"""The largest byte count NumPy can give one array (`np.intp`)."""

MAX_META_KEYS: Final = 32
MAX_META_KEY_CHARS: Final = 64
MAX_META_STR_CHARS: Final = 1024
"""Bounds of ``meta``: it carries a few scalars (weight id, deadline, error text), never data."""

MAX_CHANNEL_CHARS: Final = 64

# Payload dtypes by wire name. Little-endian is the wire byte order, so a big-endian host would
# still decode correctly; encode refuses a big-endian array instead of swapping it silently.
WIRE_DTYPES: Final[Mapping[str, np.dtype[Any]]] = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "uint8": np.dtype("<u1"),
    "uint32": np.dtype("<u4"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "uint64": np.dtype("<u8"),
}


class Kind(StrEnum):
    """What a message is; the header field ``kind``."""

    REQUEST = "request"  # daemon -> channel: run one protected MMM (or a self-test job)
    RESULT = "result"  # channel -> daemon: C (and ES) for one request seq
    HEARTBEAT = "heartbeat"  # channel -> daemon: application-level liveness
    CONTROL = "control"  # daemon <-> operator/channel: a command (reset, stop, isolate, ...)
    REPLY = "reply"  # daemon -> client: the released C; or the answer to a control
    ERROR = "error"  # any -> any: a typed error instead of a reply/result
    REGISTER = "register"  # channel -> daemon: "I am channel X, ready"
    EVENT = "event"  # any -> daemon: something worth logging/counting (ECC correction, ...)


MetaValue = str | int | float | bool | None


class RejectReason(StrEnum):
    """Why a message was dropped; the label of ``safemon_messages_rejected_total{reason}``."""

    MALFORMED = "malformed"  # not a buffer, bad UTF-8/JSON, header fails the model
    VERSION = "version"  # header ``v`` is not PROTOCOL_VERSION
    FRAME_COUNT = "frame_count"  # no header, too many frames, or count != len(header.frames)
    DTYPE = "dtype"  # a declared dtype is not in WIRE_DTYPES
    SHAPE = "shape"  # bad shape, or shape x itemsize != frame length
    OVERSIZED = "oversized"  # header, a frame, or the total over Limits
    BAD_CRC = "bad_crc"  # a frame's CRC-32 differs from the declared one
    STALE = "stale"  # wrong epoch, replayed or too old seq
    UNAUTHENTICATED = "unauthenticated"  # arrived without a CURVE-authenticated peer identity
    FOREIGN = "foreign"  # on a channel link, not from that link's own daemon / incarnation
    HANDLER_ERROR = "handler_error"  # accepted, but handling it raised (answered InternalError)
    ZAP_DENIED = "zap_denied"  # a CURVE handshake the ZAP handler refused


class Rejected(SafemonError):
    """A received message was dropped. The receiver counts it by ``reason`` and carries on.

    Attributes:
        reason: the :class:`RejectReason`.
        detail: a short human-readable explanation (at most 300 characters; never payload data).
    """

    def __init__(self, reason: RejectReason, detail: str) -> None:
        self.reason = RejectReason(reason)
        self.detail = detail if len(detail) <= 300 else detail[:297] + "..."
        super().__init__(f"message rejected ({self.reason.value}): {self.detail}")


@dataclass(frozen=True, slots=True)
class Limits:
    """Size limits a receiver enforces before it trusts anything in a message (bytes/counts).

    The defaults fit the largest workload safemon is sized for: an 8192² float32 matrix is
    256 MiB, and a request carries two operands. libzmq's ``MAXMSGSIZE`` applies per message
    part: a socket that receives with these limits sets it to ``max_wire_part_bytes`` (see
    ``SocketOptions``); nothing in libzmq bounds the number of parts.
    """

    max_header_bytes: int = 64 * 1024
    max_frame_bytes: int = 256 * 1024 * 1024
    max_total_bytes: int = 1024 * 1024 * 1024
    max_frames: int = 16  # payload frames, the header not counted

    def __post_init__(self) -> None:
        for name in ("max_header_bytes", "max_frame_bytes", "max_total_bytes", "max_frames"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"Limits.{name} must be a positive int, got {value!r}")

    @property
    def max_part_bytes(self) -> int:
        """The largest single message part these limits admit (the header or one payload
        frame, bytes)."""
        return max(self.max_header_bytes, self.max_frame_bytes)

    @property
    def max_wire_part_bytes(self) -> int:
        """The value for a receiving socket's per-part ``MAXMSGSIZE``, above which libzmq
        drops the sender's connection before it buffers the part: `max_part_bytes` plus
        `WIRE_PART_MARGIN`, because libzmq measures the part as it arrives, which under
        CURVE is the encrypted frame (33 bytes longer with libzmq 4.3.5). `decode` still
        holds every part to the exact limits."""
        return self.max_part_bytes + WIRE_PART_MARGIN


#: Bytes a part may grow on the wire over what it carries (CURVE's box and nonce: 33 with
#: libzmq 4.3.5), with room to spare; see `Limits.max_wire_part_bytes`.
WIRE_PART_MARGIN = 4096


# --- header model -------------------------------------------------------------------------

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
_Count = Annotated[int, Field(ge=0, le=MAX_SEQ)]


class FrameSpec(BaseModel):
    """One payload frame's declaration: wire dtype name, shape (elements per axis), CRC-32.

    ``dtype`` and ``shape`` are only type-checked here; :func:`decode` checks them against the
    allow-list and the frame length so that they are rejected with the reasons ``dtype`` and
    ``shape`` rather than ``malformed``.
    """

    model_config = _STRICT

    dtype: Annotated[str, Field(max_length=16)]
    shape: tuple[int, ...]
    crc32: Annotated[int, Field(ge=0, le=0xFFFFFFFF)]


class Header(BaseModel):
    """The JSON header, frame 0 of every message.

    Fields:
        v: protocol version (PROTOCOL_VERSION).
        epoch: the daemon's start epoch (int >= 0); changes when the daemon restarts.
        seq: sequence number (int >= 0); see docs/PROTOCOL.md "Staleness" for whose counter.
        channel: the sending/addressed channel's short name; "" for the daemon or client.
        kind: a :class:`Kind`.
        frames: one :class:`FrameSpec` per payload frame, in order.
        meta: at most MAX_META_KEYS keys of at most MAX_META_KEY_CHARS characters, each mapping
            to a str (at most MAX_META_STR_CHARS), int, finite float, bool or None.
    """

    model_config = _STRICT

    v: int
    epoch: _Count
    seq: _Count
    channel: Annotated[str, Field(max_length=MAX_CHANNEL_CHARS, pattern=r"^[A-Za-z0-9_.\-]*$")]
    kind: Kind
    frames: tuple[FrameSpec, ...] = ()
    meta: dict[str, MetaValue] = Field(default_factory=dict)

    @field_validator("meta")
    @classmethod
    def _bounded_meta(cls, meta: dict[str, MetaValue]) -> dict[str, MetaValue]:
        if len(meta) > MAX_META_KEYS:
            raise ValueError(f"meta has {len(meta)} keys, at most {MAX_META_KEYS} allowed")
        for key, value in meta.items():
            if not 0 < len(key) <= MAX_META_KEY_CHARS:
                raise ValueError(f"meta key length must be 1..{MAX_META_KEY_CHARS}")
            if isinstance(value, str) and len(value) > MAX_META_STR_CHARS:
                raise ValueError(f"meta[{key!r}] longer than {MAX_META_STR_CHARS} characters")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"meta[{key!r}] is not a finite float")
        return meta


@dataclass(frozen=True, slots=True)
class LocalHeader:
    """The fields of a :class:`Header` for a message that never crosses the wire: one that
    safemon's own code hands to its own code in one process (inline channels,
    ``safemon.channels.inline``). Built without validation, which costs a pydantic model
    several microseconds per message; what is sent is still checked against its schema."""

    v: int
    epoch: int
    seq: int
    channel: str
    kind: Kind
    frames: tuple[FrameSpec, ...]
    meta: dict[str, MetaValue]


@dataclass(frozen=True, slots=True)
class Message:
    """A decoded message: its header (validated, for every message that came over a socket;
    a `LocalHeader` for one handed over in the process) and one read-only array per payload
    frame.

    The arrays are views of the received buffers (``np.frombuffer``, no copy), so they stay
    valid as long as the message object lives; they are marked read-only. ``parsed`` is the
    typed meta (a ``safemon.transport.messages`` schema) when the sender in this process
    already parsed it (inline channels), so that the receiver need not parse it again; None
    for everything that came over a socket.
    """

    header: Header | LocalHeader
    arrays: list[npt.NDArray[Any]] = field(default_factory=list)
    parsed: object | None = None

    @property
    def kind(self) -> Kind:
        return self.header.kind

    @property
    def epoch(self) -> int:
        return self.header.epoch

    @property
    def seq(self) -> int:
        return self.header.seq

    @property
    def channel(self) -> str:
        return self.header.channel

    @property
    def meta(self) -> dict[str, MetaValue]:
        return self.header.meta


# --- encode ---------------------------------------------------------------------------------


def _wire_name(array: npt.NDArray[Any], index: int) -> str:
    for name, dtype in WIRE_DTYPES.items():
        if array.dtype == dtype:
            return name
    raise InvalidInputError(
        f"array {index} has dtype {array.dtype.str!r}; the wire allows only little-endian "
        f"{', '.join(WIRE_DTYPES)} (convert explicitly before sending)"
    )


def encode(
    kind: Kind | str,
    *,
    epoch: int,
    seq: int,
    channel: str = "",
    meta: Mapping[str, MetaValue] | None = None,
    arrays: Sequence[npt.NDArray[Any]] = (),
    limits: Limits | None = None,
) -> list[bytes | memoryview]:
    """Build the frames of one message: ``[header_json, buffer_0, ...]``.

    Each payload frame is a ``memoryview`` of the array's own memory (zero-copy); the caller must
    not modify an array until the socket has sent it (pyzmq ``copy=False`` keeps a reference).

    Args:
        kind: a :class:`Kind` or its string value.
        epoch, seq: ints in 0..MAX_SEQ.
        channel: short channel name ([A-Za-z0-9_.-], at most 64 characters); "" for daemon/client.
        meta: kind-specific scalars (one schema per message: `safemon.transport.messages`).
        arrays: C-contiguous ``np.ndarray`` of a WIRE_DTYPES dtype, any shape (0-d and empty too).
        limits: if given, also refuse a message that a receiver with these limits would reject.

    Raises:
        InvalidInputError: a non-array, a dtype outside the allow-list (or big-endian), a
            non-C-contiguous array (never copied silently), an invalid header field, or a
            message over ``limits``.
    """
    try:
        kind = Kind(kind)
    except ValueError:
        raise InvalidInputError(f"unknown message kind {kind!r}") from None
    specs: list[FrameSpec] = []
    buffers: list[memoryview] = []
    for i, array in enumerate(arrays):
        if not isinstance(array, np.ndarray) or isinstance(array, np.ma.MaskedArray):
            raise InvalidInputError(f"array {i} is {type(array).__name__}, not a numpy.ndarray")
        name = _wire_name(array, i)
        if not array.flags.c_contiguous:
            raise InvalidInputError(
                f"array {i} (shape {array.shape}) is not C-contiguous; the wire sends buffers "
                "zero-copy, so pass np.ascontiguousarray(a) explicitly if a copy is intended"
            )
        # reshape(-1) of a C-contiguous array is a view; the uint8 view makes a flat byte buffer
        # that also works for 0-d and empty arrays (memoryview.cast refuses zero-length shapes).
        buffer = array.reshape(-1).view(np.uint8).data
        specs.append(
            FrameSpec(
                dtype=name, shape=tuple(int(d) for d in array.shape), crc32=zlib.crc32(buffer)
            )
        )
        buffers.append(buffer)
    try:
        header = Header(
            v=PROTOCOL_VERSION,
            epoch=epoch,
            seq=seq,
            channel=channel,
            kind=kind,
            frames=tuple(specs),
            meta=dict(meta or {}),
        )
    except ValidationError as exc:
        raise InvalidInputError(f"invalid message header: {exc}") from None
    header_bytes = header.model_dump_json().encode("utf-8")
    if limits is not None:
        _check_sizes(len(header_bytes), [b.nbytes for b in buffers], limits, InvalidInputError)
    return [header_bytes, *buffers]


def _check_sizes(
    header_len: int,
    frame_lens: Sequence[int],
    limits: Limits,
    error: Callable[[str], Exception],
) -> None:
    if len(frame_lens) > limits.max_frames:
        raise error(f"{len(frame_lens)} payload frames, at most {limits.max_frames}")
    if header_len > limits.max_header_bytes:
        raise error(f"header is {header_len} bytes, at most {limits.max_header_bytes}")
    total = header_len
    for i, n in enumerate(frame_lens):
        if n > limits.max_frame_bytes:
            raise error(f"frame {i} is {n} bytes, at most {limits.max_frame_bytes}")
        total += n
    if total > limits.max_total_bytes:
        raise error(f"message is {total} bytes, at most {limits.max_total_bytes}")


# --- decode ---------------------------------------------------------------------------------


def _as_bytes_view(frame: object, index: int) -> memoryview:
    """A flat, contiguous ``'B'`` view of a received frame, without copying."""
    # zmq.Frame (copy=False receive) exposes its memory as ``.buffer``; bytes/bytearray/memoryview
    # are used as they are. Anything else is not a wire frame.
    source = getattr(frame, "buffer", frame)
    try:
        view = memoryview(source)  # type: ignore[arg-type]
    except TypeError:
        raise Rejected(
            RejectReason.MALFORMED, f"frame {index} is {type(frame).__name__}, not a buffer"
        ) from None
    if view.format == "B" and view.ndim == 1 and view.c_contiguous:
        return view
    if not view.c_contiguous:
        raise Rejected(RejectReason.MALFORMED, f"frame {index} is not a contiguous buffer")
    if view.nbytes == 0:
        return memoryview(b"")
    return view.cast("B")


def _reject_constant(name: str) -> None:
    raise ValueError(f"JSON constant {name} is not allowed")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # in C; a duplicate shows as a shorter dict, then is named
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise ValueError(f"duplicate JSON key {key!r}")
            seen.add(key)
    return out


#: The header's JSON parser, built once (`json.loads` with hooks builds one per call).
_HEADER_JSON: Final = json.JSONDecoder(
    object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant
)


def _parse_header(raw: memoryview) -> Header:
    try:
        text = bytes(raw).decode("utf-8")
        # A first, plain parse so that the version is judged before the model: a v2 header may
        # have fields v1 does not know, and must read as "version", not "malformed". Duplicate
        # keys and NaN/Infinity are refused so that no two parsers can read one header two ways.
        probe = _HEADER_JSON.decode(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Rejected(RejectReason.MALFORMED, f"header is not valid JSON: {exc}") from None
    if not isinstance(probe, dict):
        raise Rejected(RejectReason.MALFORMED, "header is not a JSON object")
    version = probe.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise Rejected(RejectReason.MALFORMED, "header has no integer 'v'")
    if version != PROTOCOL_VERSION:
        raise Rejected(
            RejectReason.VERSION, f"protocol version {version}, expected {PROTOCOL_VERSION}"
        )
    try:
        return Header.model_validate_json(text)
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "?"
        what = errors[0]["msg"] if errors else str(exc)
        raise Rejected(RejectReason.MALFORMED, f"header invalid at {where}: {what}") from None


def _decode(frames: Sequence[object], limits: Limits) -> Message:
    """The decoder proper; :func:`decode` adds only a last-resort guard around it."""
    try:
        count = len(frames)
    except TypeError:
        raise Rejected(RejectReason.MALFORMED, "frames is not a sequence") from None
    if isinstance(frames, (bytes, bytearray, memoryview, str)):
        raise Rejected(RejectReason.MALFORMED, "frames must be a list of frames, not one buffer")
    if count == 0:
        raise Rejected(RejectReason.FRAME_COUNT, "empty message: no header frame")
    if count - 1 > limits.max_frames:
        raise Rejected(
            RejectReason.FRAME_COUNT, f"{count - 1} payload frames, at most {limits.max_frames}"
        )
    views = [_as_bytes_view(f, i) for i, f in enumerate(frames)]
    header_view, payload = views[0], views[1:]
    # Sizes are checked before the header is parsed, so no oversized input is ever parsed.
    _check_sizes(
        header_view.nbytes,
        [v.nbytes for v in payload],
        limits,
        lambda detail: Rejected(RejectReason.OVERSIZED, detail),
    )
    header = _parse_header(header_view)
    if len(header.frames) != len(payload):
        raise Rejected(
            RejectReason.FRAME_COUNT,
            f"header declares {len(header.frames)} payload frames, message has {len(payload)}",
        )
    arrays: list[npt.NDArray[Any]] = []
    for i, (spec, view) in enumerate(zip(header.frames, payload, strict=True)):
        dtype = WIRE_DTYPES.get(spec.dtype)
        if dtype is None:
            raise Rejected(RejectReason.DTYPE, f"frame {i}: dtype {spec.dtype!r} not allowed")
        if len(spec.shape) > MAX_NDIM:
            raise Rejected(RejectReason.SHAPE, f"frame {i}: {len(spec.shape)} dims > {MAX_NDIM}")
        if any(d < 0 for d in spec.shape):
            raise Rejected(RejectReason.SHAPE, f"frame {i}: negative dimension in {spec.shape}")
        declared = dtype.itemsize
        for d in spec.shape:  # Python ints: a huge declared shape cannot overflow
            declared *= d
        if declared > limits.max_frame_bytes:
            raise Rejected(
                RejectReason.OVERSIZED,
                f"frame {i}: declared {declared} bytes, at most {limits.max_frame_bytes}",
            )
        # NumPy refuses a shape whose nonzero dimensions span more bytes than an intp can
        # count, even when another dimension is 0 and the array is empty ([0, 2**61]).
        if math.prod(max(d, 1) for d in spec.shape) * dtype.itemsize > _INTP_MAX:
            raise Rejected(RejectReason.SHAPE, f"frame {i}: shape {spec.shape} is not representable")
        if declared != view.nbytes:
            raise Rejected(
                RejectReason.SHAPE,
                f"frame {i}: shape {spec.shape} x {spec.dtype} is {declared} bytes, "
                f"frame has {view.nbytes}",
            )
        if zlib.crc32(view) != spec.crc32:
            raise Rejected(RejectReason.BAD_CRC, f"frame {i}: CRC-32 mismatch")
        array = np.frombuffer(view, dtype=dtype).reshape(spec.shape)
        array.flags.writeable = False
        arrays.append(array)
    return Message(header=header, arrays=arrays)


def decode(frames: Sequence[object], limits: Limits) -> Message:
    """Validate and decode one received multipart message.

    Args:
        frames: the multipart message as received: bytes, bytearray, memoryview or ``zmq.Frame``
            (from ``recv_multipart(copy=False)``), header first. Routing envelopes (ROUTER
            identities) must already be stripped.
        limits: the receiver's :class:`Limits`.

    Returns:
        A :class:`Message` whose arrays are read-only views of the frames (no copy).

    Raises:
        Rejected: for any problem whatsoever, with a :class:`RejectReason`; this function raises
            nothing else for any input, so a receiver loop cannot die on a bad message. The
            checks run cheapest-first: frame count, sizes, header JSON, version, header model,
            frame count vs header, then per frame dtype, shape, declared size, CRC.
    """
    try:
        return _decode(frames, limits)
    except Rejected:
        raise
    except Exception as exc:  # last-resort guard: the fuzz tests exercise _decode without it
        raise Rejected(
            RejectReason.MALFORMED, f"undecodable message ({type(exc).__name__}: {exc})"
        ) from exc


# --- staleness ------------------------------------------------------------------------------

WINDOWED_KINDS: Final = frozenset({Kind.RESULT, Kind.REPLY, Kind.ERROR})


class StalenessFilter:
    """Sans-IO anti-replay rule for one receiver, per daemon epoch.

    A message is accepted only if ``header.epoch == self.epoch`` and its seq is fresh for its
    stream ``(channel, kind)``:

    * monotonic kinds (request, heartbeat, control, register, event): ``seq`` must be strictly
      greater than the last accepted seq of the stream. Each sender numbers these from its own
      counter, and one ZeroMQ connection keeps order, so anything else is a replay or a leftover.
    * windowed kinds (result, reply, error — :data:`WINDOWED_KINDS`): ``seq`` is the seq of the
      *request* answered, and answers may legitimately complete out of order (deadlines differ,
      self-tests interleave). ``seq`` must not have been accepted before on the stream and must
      be within ``window`` of the highest accepted one (the IPsec anti-replay window, RFC 4303
      §3.4.3): a duplicate or a too-old seq is stale.

    Whether the seq answers a request that is still outstanding is the voter's business, not this
    filter's. At most ``max_streams`` streams are tracked; a message of a new stream beyond that
    cannot be proven fresh and is rejected as stale. :meth:`reset` starts a new epoch.
    """

    def __init__(self, epoch: int, *, window: int = 1024, max_streams: int = 1024) -> None:
        if window < 1 or max_streams < 1:
            raise InvalidInputError("window and max_streams must be >= 1")
        self._window = window
        self._max_streams = max_streams
        self._epoch = epoch
        self._highest: dict[tuple[str, Kind], int] = {}
        self._seen: dict[tuple[str, Kind], int] = {}  # bit i set: seq (highest - i) accepted

    @property
    def epoch(self) -> int:
        """The epoch currently accepted."""
        return self._epoch

    def reset(self, epoch: int) -> None:
        """Accept ``epoch`` from now on and forget every stream's history."""
        self._epoch = epoch
        self._highest.clear()
        self._seen.clear()

    def check(self, header: Header | LocalHeader) -> None:
        """Accept ``header`` (and record its seq) or raise ``Rejected(stale)``; nothing recorded then."""
        if header.epoch != self._epoch:
            raise Rejected(
                RejectReason.STALE, f"epoch {header.epoch}, current epoch is {self._epoch}"
            )
        stream = (header.channel, header.kind)
        seq = header.seq
        highest = self._highest.get(stream)
        if highest is None:
            if len(self._highest) >= self._max_streams:
                raise Rejected(
                    RejectReason.STALE, f"more than {self._max_streams} streams to track"
                )
            self._highest[stream] = seq
            self._seen[stream] = 1
            return
        if seq > highest:
            shift = seq - highest
            mask = (1 << self._window) - 1
            self._seen[stream] = (
                ((self._seen[stream] << shift) | 1) & mask if shift < self._window else 1
            )
            self._highest[stream] = seq
            return
        if header.kind not in WINDOWED_KINDS:
            raise Rejected(
                RejectReason.STALE,
                f"{header.kind.value} seq {seq} from {header.channel!r} not after {highest}",
            )
        offset = highest - seq
        if offset >= self._window:
            raise Rejected(
                RejectReason.STALE, f"{header.kind.value} seq {seq} older than window of {highest}"
            )
        if (self._seen[stream] >> offset) & 1:
            raise Rejected(
                RejectReason.STALE,
                f"{header.kind.value} seq {seq} from {header.channel!r} replayed",
            )
        self._seen[stream] |= 1 << offset


# --- reject counting ------------------------------------------------------------------------


class RejectCounter:
    """Counts dropped messages by reason; optionally forwards each drop to a hook.

    The hook is how the metrics layer increments ``safemon_messages_rejected_total{reason}``
    (e.g. ``hook=lambda r: counter.labels(reason=r.value).inc()``). A hook that raises is not
    shielded: a broken metrics hook is a bug to see, not to hide.
    """

    def __init__(self, hook: Callable[[RejectReason], None] | None = None) -> None:
        self._counts: dict[RejectReason, int] = dict.fromkeys(RejectReason, 0)
        self._hook = hook

    def record(self, rejected: Rejected | RejectReason) -> None:
        """Count one dropped message."""
        reason = rejected.reason if isinstance(rejected, Rejected) else RejectReason(rejected)
        self._counts[reason] += 1
        if self._hook is not None:
            self._hook(reason)

    def __getitem__(self, reason: RejectReason | str) -> int:
        return self._counts[RejectReason(reason)]

    @property
    def counts(self) -> dict[RejectReason, int]:
        """A copy of the counts, every reason present (0 if never seen)."""
        return dict(self._counts)

    @property
    def total(self) -> int:
        return sum(self._counts.values())
