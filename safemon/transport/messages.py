"""One schema per message: the `meta` of every message safemon sends, typed.

Each message is a frozen dataclass naming its `kind` (and, where one kind carries several
messages, the discriminating meta key and value: `command` for `control`, `event` for
`event`, `job` for `request`). `to_meta()` builds the meta a sender puts on the wire;
`parse(meta)` is the one place a receiver reads it: it returns the typed message or raises
`MetaError` (an `InvalidInputError`) naming the key. Extra keys are ignored (the header model
already bounds meta); the channel link token `link` is the transport's
(`safemon.channels.link`), not part of any schema.

Types are strict: an int is not a bool, a float field accepts an int, `str | None` may be
absent. docs/PROTOCOL.md section 4 lists these schemas; `tests/transport/test_messages.py`
holds the document to them.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from safemon.errors import InvalidInputError
from safemon.transport.wire import Kind, Message, MetaValue

__all__ = [
    "SCHEMAS",
    "ChannelCommand",
    "ControlCommand",
    "ControlReply",
    "DeviceInput",
    "DeviceWork",
    "ErrorReply",
    "Heartbeat",
    "Hello",
    "IngressMessage",
    "MatmulRequest",
    "MetaError",
    "ModelRequest",
    "ModelWork",
    "PublishedEvent",
    "Register",
    "RegisterModel",
    "RegisterWeight",
    "Released",
    "Result",
    "ScrubReport",
    "WeightAck",
    "WorkRequest",
    "channel_message_of",
    "meta_keys",
    "parse_from_channel",
    "parse_ingress",
    "protocol_table",
    "schema_for",
]

M = TypeVar("M", bound="Schema")


class MetaError(InvalidInputError):
    """A message's meta does not fit its schema (a key missing or of the wrong type)."""


@dataclass(frozen=True)
class Schema:
    """Base of every message schema."""

    KIND: ClassVar[Kind]
    #: (meta key, value) that tells this message from the others of its kind, or None.
    TAG: ClassVar[tuple[str, str] | None] = None
    #: who sends it to whom (documentation: docs/PROTOCOL.md section 4).
    ROUTE: ClassVar[str] = ""

    def to_meta(self) -> dict[str, MetaValue]:
        """The meta to send: every field that is not None, plus the tag."""
        out: dict[str, MetaValue] = {}
        if self.TAG is not None:
            out[self.TAG[0]] = self.TAG[1]
        for name in _names(type(self)):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def parse(cls: type[M], meta: Mapping[str, MetaValue]) -> M:
        """The typed message in `meta`. Raises MetaError (the key and what was wrong)."""
        if cls.TAG is not None and meta.get(cls.TAG[0]) != cls.TAG[1]:
            raise MetaError(f"{cls.__name__}: {cls.TAG[0]} must be {cls.TAG[1]!r}")
        values: dict[str, Any] = {}
        for name, allowed, required, exact in _spec(cls):
            value = meta.get(name, _MISSING)
            if value is _MISSING:
                if required:
                    raise MetaError(f"{cls.__name__}: meta key {name!r} is missing")
                continue
            # A value of exactly an allowed type fits as it is (a float if it is finite):
            # the common case, decided without `_check`'s per-type tests (parse runs per
            # message).
            values[name] = (value if type(value) in exact or (
                isinstance(value, float) and float in allowed and math.isfinite(value))
                else _check(cls.__name__, name, value, allowed))
        return cls(**values)

    @classmethod
    def fields(cls) -> dict[str, str]:
        """Field name -> its wire type in words (for the protocol document)."""
        return {name: " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
                for name, allowed, _required, _exact in _spec(cls)}


_Spec = tuple[tuple[str, tuple[type, ...], bool, frozenset[type]], ...]
_SPECS: dict[str, _Spec] = {}
_NAMES: dict[type, tuple[str, ...]] = {}
_MISSING = object()


def _spec(cls: type[Schema]) -> _Spec:
    """Per field of `cls`: its name, the types it allows, whether it is required, and the
    types a value may have exactly to fit without `_check` (the allowed ones but float,
    whose values `_check` also tests for finiteness). Computed once per schema: resolving
    annotations is slow, and parse runs per message."""
    spec = _SPECS.get(cls.__qualname__)
    if spec is None:
        hints = typing.get_type_hints(cls)
        # A schema's own fields first, then the shared keyword-only ones (DeviceInput,
        # DeviceWork), which dataclasses would list first.
        ordered = sorted(dataclasses.fields(cls), key=lambda f: f.kw_only is True)
        spec = tuple((f.name, allowed, f.default is dataclasses.MISSING,
                      frozenset(t for t in allowed if t is not float))
                     for f in ordered for allowed in (_allowed(hints[f.name]),))
        _SPECS[cls.__qualname__] = spec
    return spec


def _names(cls: type[Schema]) -> tuple[str, ...]:
    """The field names of `cls` in `dataclasses.fields` order (cached: to_meta runs per
    message)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _allowed(tp: Any) -> tuple[type, ...]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return tuple(t for arg in typing.get_args(tp) for t in _allowed(arg))
    return (type(None),) if tp is type(None) else (tp,)


def _check(owner: str, key: str, value: object, allowed: tuple[type, ...]) -> object:
    ok = any(_fits(value, t) for t in allowed)
    if not ok:
        want = " or ".join(t.__name__ for t in allowed)
        raise MetaError(f"{owner}: meta key {key!r} must be {want}, got {value!r:.60}")
    if float in allowed and int not in allowed and isinstance(value, int):
        return float(value)  # an int where a float is meant (JSON has one number type)
    return value


def _fits(value: object, t: type) -> bool:
    if t is type(None):
        return value is None
    if t is bool:
        return isinstance(value, bool)
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if t is float:
        return (isinstance(value, float) and math.isfinite(value)) or (
            isinstance(value, int) and not isinstance(value, bool))
    return isinstance(value, t)


# ---------------------------------------------------------------- device-resident fields


@dataclass(frozen=True, kw_only=True)
class DeviceInput(Schema):
    """The optional meta keys of a device-resident request (docs/PROTOCOL.md section 11):
    it sends no frame; x is in the client's exported input buffer `x_ipc` (x_rows × x_cols
    float32, digest `x_digest`), and every channel writes its output into slot i of
    `out_ipc`, at byte i × `out_slot_bytes` (the allocation's fixed slot stride, at least
    the output's size; i the channel's position in the deployment)."""

    x_ipc: str | None = None
    x_rows: int | None = None
    x_cols: int | None = None
    x_digest: str | None = None
    out_ipc: str | None = None
    out_slot_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class DeviceWork(Schema):
    """The optional meta keys of device-resident work: read x from `x_ipc`, check that the
    x read has the client's digest `x_digest`, write the output at byte `out_offset` of
    `out_ipc`, answer digests only."""

    x_ipc: str | None = None
    x_rows: int | None = None
    x_cols: int | None = None
    x_digest: str | None = None
    out_ipc: str | None = None
    out_offset: int | None = None


# ---------------------------------------------------------------- client <-> daemon (ingress)


@dataclass(frozen=True)
class Hello(Schema):
    """A liveness probe on ingress; answered `ControlReply(ok=True, outcome="hello")` with the
    largest frame and message the daemon admits from a client (`max_frame_bytes`,
    `max_total_bytes`)."""

    KIND = Kind.CONTROL
    TAG = ("command", "hello")
    ROUTE = "client → daemon (ingress)"


@dataclass(frozen=True)
class RegisterWeight(Schema):
    """One frame: the weight W (K, N) float32, finite. Answered `ControlReply` with
    `outcome` = the weight id, once every running channel holds it. `client`: the sender's
    key (at most `MAX_CLIENT_KEY` characters; `Client` sends a random one per object), whom
    `limits.max_client_weight_bytes` counts the weight against; without it, the
    connection."""

    KIND = Kind.CONTROL
    TAG = ("command", "register_weight")
    ROUTE = "client → daemon (ingress)"
    args: str | None = None
    client: str | None = None


@dataclass(frozen=True)
class MatmulRequest(DeviceInput):
    """One frame: x (M, K) float32, finite; x · W of the registered `weight_id`.
    `deadline_ms`: the client's own deadline (ms from receipt); anything but a positive
    finite number means none. Answered `Released` or `ErrorReply`."""

    KIND = Kind.REQUEST
    ROUTE = "client → daemon (ingress)"
    weight_id: str
    deadline_ms: float | None = None


@dataclass(frozen=True)
class RegisterModel(Schema):
    """Two frames: the layer spec and the biases (`safemon.models.encode_model`). Answered
    `ControlReply` with `outcome` = the model id, or `ErrorReply` naming the layer at fault
    (docs/PROTOCOL.md section 10)."""

    KIND = Kind.CONTROL
    TAG = ("command", "register_model")
    ROUTE = "client → daemon (ingress)"
    args: str | None = None


@dataclass(frozen=True)
class ModelRequest(DeviceInput):
    """One frame: x (M, K_0) float32, finite; the whole forward pass of the registered
    `model_id`. `deadline_ms` as in `MatmulRequest`. Answered `Released` or `ErrorReply`."""

    KIND = Kind.REQUEST
    TAG = ("job", "model")
    ROUTE = "client → daemon (ingress)"
    model_id: str
    deadline_ms: float | None = None


@dataclass(frozen=True)
class Released(Schema):
    """One frame: the released C (M, N) float32. A device-resident request gets no frame:
    `slot` names the output slot to take and `digest` the voted digest of its bytes."""

    KIND = Kind.REPLY
    ROUTE = "daemon → client"
    ok: bool
    outcome: str
    kernel_seconds: float | None = None
    vote_seconds: float | None = None
    slot: int | None = None
    digest: str | None = None


@dataclass(frozen=True)
class ControlReply(Schema):
    """The answer to a control message (`status` adds one uint8 frame: JSON). The answer to
    `Hello` also says what the daemon's transport admits in one client message (bytes): the
    largest payload frame and the largest sum of them (`safemon.admission.client_limits`);
    a client that sends more has its connection dropped, unanswered."""

    KIND = Kind.REPLY
    ROUTE = "daemon → client or operator"
    ok: bool
    outcome: str
    max_frame_bytes: int | None = None
    max_total_bytes: int | None = None


@dataclass(frozen=True)
class ErrorReply(Schema):
    """A typed error: `error_type` names the safemon error class the client raises."""

    KIND = Kind.ERROR
    ROUTE = "daemon → client or operator"
    error_type: str
    message: str


# ---------------------------------------------------------------- operator -> daemon (control)


@dataclass(frozen=True)
class ControlCommand(Schema):
    """An operator command: `status`, `reset`, `selftest`, `inject` (args
    `<channel>:<fault>`), `clear` (args `<channel>` or empty). Answered `ControlReply`."""

    KIND = Kind.CONTROL
    ROUTE = "operator → daemon (control)"
    command: str
    args: str | None = None


# ---------------------------------------------------------------- daemon <-> channel


@dataclass(frozen=True)
class WorkRequest(DeviceWork):
    """Two frames for a self-test (A, B), one (x) for live work on weight `weight_id`."""

    KIND = Kind.REQUEST
    ROUTE = "daemon → channel"
    job: str
    weight_id: str
    deadline_ms: float
    test_id: int | None = None


@dataclass(frozen=True)
class ModelWork(DeviceWork):
    """Three frames for a whole-model job: x, the layer spec and the biases of `model_id`.
    Answered `Result(job="model")` with two frames: the output and the uint64 digest frame."""

    KIND = Kind.REQUEST
    TAG = ("job", "model")
    ROUTE = "daemon → channel"
    model_id: str
    deadline_ms: float


@dataclass(frozen=True)
class ChannelCommand(Schema):
    """`weight` (args: its id; one frame W), `drop_weight` (args: the id of an evicted
    weight), `scrub`, `inject` (args: the fault), `clear`, `link` (learn the daemon's
    routing id), `stop`."""

    KIND = Kind.CONTROL
    ROUTE = "daemon → channel"
    command: str
    args: str | None = None


@dataclass(frozen=True)
class Register(Schema):
    """A channel incarnation is up."""

    KIND = Kind.REGISTER
    ROUTE = "channel → daemon"
    variant: str
    pid: int
    device: int
    incarnation: int


@dataclass(frozen=True)
class Heartbeat(Schema):
    """Application-level liveness, with the channel's weight ECC counts."""

    KIND = Kind.HEARTBEAT
    ROUTE = "channel → daemon"
    state: str
    uptime_s: float
    incarnation: int
    ecc_corrected: int | None = None
    ecc_uncorrectable: int | None = None


@dataclass(frozen=True)
class Result(Schema):
    """C, then ES; a GPU self-test adds the SM id of every block (uint32) and `sm_count`.
    `ok=False` carries `error` and no frames. Device-resident work answers one uint64
    frame of digests (docs/PROTOCOL.md section 11), or `input_error` and no frame when the
    client's buffers could not be read (voted on like a result, never a channel fault).
    Live and model work answer `input_invalid` and no frame when a product's input held
    NaN or infinity (the request's x, or a hidden activation that overflowed float32):
    voted on like a result, and when it is what the vote releases, the client gets
    `InvalidInputError` and no channel is faulted."""

    KIND = Kind.RESULT
    ROUTE = "channel → daemon"
    job: str
    ok: bool
    variant: str = ""
    kernel_seconds: float | None = None
    test_id: int | None = None
    sm_count: int | None = None
    error: str | None = None
    input_error: str | None = None
    input_invalid: str | None = None


@dataclass(frozen=True)
class WeightAck(Schema):
    """The acknowledgement of `ChannelCommand(command="weight")`; `ok=False`: refused
    (its content does not match its id)."""

    KIND = Kind.EVENT
    TAG = ("event", "weight")
    ROUTE = "channel → daemon"
    weight_id: str
    ok: bool


@dataclass(frozen=True)
class ScrubReport(Schema):
    """The counts of one weight scrub."""

    KIND = Kind.EVENT
    TAG = ("event", "scrub")
    ROUTE = "channel → daemon"
    buffer: str
    corrected: int
    uncorrectable: int
    count: int


@dataclass(frozen=True)
class PublishedEvent(Schema):
    """On the events PUB socket; one uint8 frame: the JSON of the controller's event."""

    KIND = Kind.EVENT
    ROUTE = "daemon → subscribers (events)"
    event: str


#: The longest `RegisterWeight.client` key the daemon accepts (characters).
MAX_CLIENT_KEY = 64

#: Every schema, in the order docs/PROTOCOL.md lists them.
SCHEMAS: tuple[type[Schema], ...] = (
    Hello, RegisterWeight, MatmulRequest, RegisterModel, ModelRequest, Released, ControlReply,
    ErrorReply, ControlCommand, WorkRequest, ModelWork, ChannelCommand, Register, Heartbeat, Result, WeightAck, ScrubReport,
    PublishedEvent,
)


def meta_keys() -> dict[Kind, frozenset[str]]:
    """Per kind, every meta key a schema of that kind uses (tags included)."""
    out: dict[Kind, set[str]] = {k: set() for k in Kind}
    for s in SCHEMAS:
        out[s.KIND] |= set(s.fields())
        if s.TAG is not None:
            out[s.KIND].add(s.TAG[0])
    return {k: frozenset(v) for k, v in out.items()}


def protocol_table() -> str:
    """The markdown table of docs/PROTOCOL.md section 4, generated from `SCHEMAS`."""
    rows = ["| message | kind | tag | route | meta keys |", "|---|---|---|---|---|"]
    for s in SCHEMAS:
        tag = f"`{s.TAG[0]}=\"{s.TAG[1]}\"`" if s.TAG is not None else ""
        defaults = {f.name for f in dataclasses.fields(s) if f.default is not dataclasses.MISSING}
        keys = ", ".join(f"`{k}` ({t}{', optional' if k in defaults else ''})"
                         for k, t in s.fields().items()) or "none"
        rows.append(f"| `{s.__name__}` | `{s.KIND.value}` | {tag} | {s.ROUTE} | {keys} |")
    return "\n".join(rows)


def schema_for(kind: Kind, meta: Mapping[str, MetaValue], route: str = "") -> type[Schema]:
    """The schema of a message of `kind` with `meta` (its tag decides between several, then
    the one that names every key of `meta`, then the first that parses it); `route` (a prefix
    of `Schema.ROUTE`, e.g. "daemon → channel") narrows it further.

    Raises:
        MetaError: no schema fits.
    """
    fits = [s for s in SCHEMAS if s.KIND is kind and s.ROUTE.startswith(route)
            and (s.TAG is None or meta.get(s.TAG[0]) == s.TAG[1])]
    tagged = [s for s in fits if s.TAG is not None]
    parsed: list[type[Schema]] = []
    for s in tagged + [s for s in fits if s.TAG is None]:
        try:
            s.parse(meta)
        except MetaError:
            continue
        if set(meta) <= {*_names(s), *(s.TAG[:1] if s.TAG else ())}:
            return s
        parsed.append(s)
    if parsed:
        return parsed[0]
    raise MetaError(f"no message schema of kind {kind.value!r} fits meta keys {sorted(meta)}")


#: What a client may send on the daemon's ingress socket.
IngressMessage = Hello | RegisterWeight | RegisterModel | MatmulRequest | ModelRequest


def parse_ingress(kind: Kind, meta: Mapping[str, MetaValue]) -> IngressMessage:
    """A client's message on the daemon's ingress socket. Raises MetaError."""
    if kind is Kind.CONTROL and meta.get("command") == "hello":
        return Hello.parse(meta)
    if kind is Kind.CONTROL and meta.get("command") == "register_weight":
        return RegisterWeight.parse(meta)
    if kind is Kind.CONTROL and meta.get("command") == "register_model":
        return RegisterModel.parse(meta)
    if kind is Kind.REQUEST and meta.get("job") == "model":
        return ModelRequest.parse(meta)
    if kind is Kind.REQUEST:
        return MatmulRequest.parse(meta)
    raise MetaError(f"unexpected message kind {kind.value!r} on ingress")


_FROM_CHANNEL = (Register, Heartbeat, Result, WeightAck, ScrubReport)


def channel_message_of(msg: Message) -> Register | Heartbeat | Result | WeightAck | ScrubReport:
    """The typed meta of channel message `msg`: the one its sender in this process already
    parsed (an inline channel's `Message.parsed`), else `parse_from_channel`'s. Raises
    MetaError."""
    parsed = msg.parsed
    if isinstance(parsed, _FROM_CHANNEL):
        return parsed
    return parse_from_channel(msg.kind, msg.meta)


def parse_from_channel(kind: Kind, meta: Mapping[str, MetaValue]
                       ) -> Register | Heartbeat | Result | WeightAck | ScrubReport:
    """A channel's message to the daemon. Raises MetaError."""
    if kind is Kind.REGISTER:
        return Register.parse(meta)
    if kind is Kind.HEARTBEAT:
        return Heartbeat.parse(meta)
    if kind is Kind.RESULT:
        return Result.parse(meta)
    if kind is Kind.EVENT and meta.get("event") == "weight":
        return WeightAck.parse(meta)
    if kind is Kind.EVENT and meta.get("event") == "scrub":
        return ScrubReport.parse(meta)
    raise MetaError(f"no channel message of kind {kind.value!r} with these meta keys: {sorted(meta)}")
