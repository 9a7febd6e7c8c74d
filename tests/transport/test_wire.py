"""wire.encode/decode: round trips, encode refusals, and decode's reasons for each defect."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from safemon.errors import InvalidInputError
from safemon.transport.wire import (
    MAX_META_KEYS,
    PROTOCOL_VERSION,
    WIRE_DTYPES,
    Kind,
    Limits,
    MetaValue,
    RejectCounter,
    Rejected,
    RejectReason,
    decode,
    encode,
)

SHAPES = [(), (0,), (1,), (7,), (2, 3), (0, 5), (5, 0), (2, 3, 4)]
LIMITS = Limits()


def _sample(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)  # arbitrary bit patterns, NaNs included


def _reason(frames: list[Any], limits: Limits = LIMITS) -> RejectReason:
    with pytest.raises(Rejected) as info:
        decode(frames, limits)
    return info.value.reason


def _header(frames: list[Any]) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(bytes(frames[0]))
    return header


def _with_header(frames: list[Any], header: dict[str, Any]) -> list[Any]:
    return [json.dumps(header).encode(), *frames[1:]]


@pytest.mark.parametrize("name", sorted(WIRE_DTYPES))
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_every_dtype_and_shape_is_bit_exact(name: str, shape: tuple[int, ...]) -> None:
    array = _sample(WIRE_DTYPES[name], shape)
    frames = encode(Kind.RESULT, epoch=3, seq=9, channel="ch0", meta={"ok": True}, arrays=[array])
    message = decode([bytes(f) for f in frames], LIMITS)
    (out,) = message.arrays
    assert out.dtype == WIRE_DTYPES[name] and out.shape == shape
    assert out.tobytes() == array.tobytes()  # bitwise, so NaN payloads compare too
    assert not out.flags.writeable
    assert (message.kind, message.epoch, message.seq, message.channel) == (Kind.RESULT, 3, 9, "ch0")
    assert message.meta == {"ok": True}


def test_encode_and_decode_are_zero_copy() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    frames = encode("request", epoch=0, seq=0, arrays=[array])
    assert np.shares_memory(np.frombuffer(frames[1], dtype=np.uint8), array)
    decoded = decode(frames, LIMITS).arrays[0]
    assert np.shares_memory(decoded, array)


def test_meta_scalars_of_every_allowed_type_round_trip() -> None:
    meta: dict[str, MetaValue] = {
        "weight_id": "w1",
        "deadline_ms": 250,
        "kernel_seconds": 1.5e-4,
        "ok": False,
        "x": None,
    }
    frames = encode(Kind.REQUEST, epoch=1, seq=1, meta=meta)
    assert decode(frames, LIMITS).meta == meta


@pytest.mark.parametrize(
    ("array", "fragment"),
    [
        (np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2], "C-contiguous"),
        (np.asfortranarray(np.ones((3, 4), np.float32)), "C-contiguous"),
        (np.ones(3, dtype=">f4"), "little-endian"),
        (np.ones(3, dtype=np.float16), "<f2"),
        (np.ones(3, dtype=bool), "|b1"),
        (np.ma.masked_array(np.ones(3, np.float32)), "MaskedArray"),
    ],
)
def test_encode_refuses_arrays_it_would_have_to_convert(array: Any, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        encode(Kind.REQUEST, epoch=0, seq=0, arrays=[array])


def test_encode_refuses_non_arrays() -> None:
    with pytest.raises(InvalidInputError, match=r"not a numpy\.ndarray"):
        encode(Kind.REQUEST, epoch=0, seq=0, arrays=[[1.0, 2.0]])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epoch": -1, "seq": 0},
        {"epoch": 0, "seq": 2**63},
        {"epoch": 0, "seq": 0, "channel": "bad name!"},
        {"epoch": 0, "seq": 0, "channel": "c" * 65},
        {"epoch": 0, "seq": 0, "meta": {f"k{i}": i for i in range(MAX_META_KEYS + 1)}},
        {"epoch": 0, "seq": 0, "meta": {"message": "x" * 1025}},
        {"epoch": 0, "seq": 0, "meta": {"kernel_seconds": float("nan")}},
        {"epoch": 0, "seq": 0, "meta": {"nested": [1, 2]}},
        {"epoch": True, "seq": 0},
    ],
)
def test_encode_refuses_invalid_header_fields(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        encode(Kind.CONTROL, **kwargs)


def test_encode_refuses_unknown_kind_and_respects_limits() -> None:
    with pytest.raises(InvalidInputError, match="unknown message kind"):
        encode("pickle", epoch=0, seq=0)
    with pytest.raises(InvalidInputError, match="at most 8"):
        encode(
            Kind.RESULT,
            epoch=0,
            seq=0,
            arrays=[np.zeros(3, np.float32)],
            limits=Limits(max_frame_bytes=8),
        )


def _valid() -> list[Any]:
    return encode(
        Kind.RESULT,
        epoch=1,
        seq=5,
        channel="a",
        arrays=[np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.uint32)],
    )


def test_each_defect_is_rejected_with_its_reason() -> None:
    good = _valid()
    header = _header(good)
    assert decode(good, LIMITS).header.seq == 5

    assert _reason([]) is RejectReason.FRAME_COUNT
    assert _reason(good[:2]) is RejectReason.FRAME_COUNT  # header declares 2 frames, 1 sent
    assert _reason([*good, b"extra"]) is RejectReason.FRAME_COUNT
    assert _reason([*good, *[b""] * 20]) is RejectReason.FRAME_COUNT  # over max_frames
    assert _reason([b"\xff\xfe", *good[1:]]) is RejectReason.MALFORMED
    assert _reason([b"[1, 2]", *good[1:]]) is RejectReason.MALFORMED
    assert _reason([bytes(good[0])[:-1], *good[1:]]) is RejectReason.MALFORMED
    assert _reason([object(), *good[1:]]) is RejectReason.MALFORMED
    assert _reason(b"not a list") is RejectReason.MALFORMED  # type: ignore[arg-type]

    def mutated(**changes: Any) -> list[Any]:
        return _with_header(good, {**header, **changes})

    assert _reason(mutated(v=PROTOCOL_VERSION + 1, extra_v2_field=1)) is RejectReason.VERSION
    assert _reason(mutated(v="1")) is RejectReason.MALFORMED
    assert _reason(mutated(epoch=-1)) is RejectReason.MALFORMED
    assert _reason(mutated(seq=1.0)) is RejectReason.MALFORMED  # strict: no float -> int coercion
    assert _reason(mutated(kind="pickle")) is RejectReason.MALFORMED
    assert _reason(mutated(surprise=True)) is RejectReason.MALFORMED  # extra="forbid"
    assert _reason(mutated(meta={"k": [1]})) is RejectReason.MALFORMED
    dup = bytes(good[0]).replace(b'"seq":5', b'"seq":5,"seq":6')
    assert _reason([dup, *good[1:]]) is RejectReason.MALFORMED
    nan = bytes(good[0]).replace(b'"meta":{}', b'"meta":{"x":NaN}')
    assert nan != bytes(good[0]) and _reason([nan, *good[1:]]) is RejectReason.MALFORMED

    def frame0(**changes: Any) -> list[Any]:
        frames = [dict(f) for f in header["frames"]]
        frames[0].update(changes)
        return mutated(frames=frames)

    assert _reason(frame0(dtype="float16")) is RejectReason.DTYPE
    assert _reason(frame0(dtype="object")) is RejectReason.DTYPE
    assert _reason(frame0(shape=[3, 3])) is RejectReason.SHAPE
    assert _reason(frame0(shape=[-2, -3])) is RejectReason.SHAPE
    assert _reason(frame0(shape=[1] * 40)) is RejectReason.SHAPE
    assert _reason(frame0(shape=[2**62, 2**62, 2**62])) is RejectReason.OVERSIZED
    assert _reason(frame0(crc32=(header["frames"][0]["crc32"] + 1) % 2**32)) is RejectReason.BAD_CRC
    assert _reason(frame0(crc32=2**32)) is RejectReason.MALFORMED

    truncated = [good[0], bytes(good[1])[:-4], good[2]]
    assert _reason(truncated) is RejectReason.SHAPE
    flipped = bytearray(good[1])
    flipped[3] ^= 0x01
    assert _reason([good[0], bytes(flipped), good[2]]) is RejectReason.BAD_CRC


def test_size_limits_are_enforced_before_parsing() -> None:
    good = _valid()
    assert _reason(good, Limits(max_header_bytes=10)) is RejectReason.OVERSIZED
    assert _reason(good, Limits(max_frame_bytes=16)) is RejectReason.OVERSIZED
    assert _reason(good, Limits(max_total_bytes=100)) is RejectReason.OVERSIZED
    assert _reason(good, Limits(max_frames=1)) is RejectReason.FRAME_COUNT
    # Garbage that is too big is refused as oversized without being parsed.
    assert _reason([b"\x00" * 70_000]) is RejectReason.OVERSIZED


def test_limits_refuse_nonsense_values() -> None:
    with pytest.raises(InvalidInputError):
        Limits(max_frames=0)
    with pytest.raises(InvalidInputError):
        Limits(max_total_bytes=True)


def test_an_empty_frame_whose_other_dimensions_numpy_cannot_count_is_rejected() -> None:
    """[0, 2**61] declares 0 bytes, but NumPy cannot make an array of that shape (its
    nonzero dimensions overflow an intp): SHAPE, not a raw ValueError (found by the fuzz
    test). A plain empty frame ([0, 5]) still decodes."""
    header = _header(_valid())
    header["frames"] = [{"dtype": "float32", "shape": [0, 2**61], "crc32": 0}]
    frames = [json.dumps(header).encode(), b""]
    assert _reason(frames) is RejectReason.SHAPE
    header["frames"][0]["shape"] = [0, 5]
    assert decode([json.dumps(header).encode(), b""], LIMITS).arrays[0].shape == (0, 5)


def test_reject_counter_counts_by_reason_and_calls_hook() -> None:
    seen: list[RejectReason] = []
    counter = RejectCounter(hook=seen.append)
    for frames in ([], [b"{"], _valid()[:2]):
        try:
            decode(frames, LIMITS)
        except Rejected as rejected:
            counter.record(rejected)
    counter.record(RejectReason.STALE)
    assert counter[RejectReason.FRAME_COUNT] == 2
    assert counter["malformed"] == 1 and counter[RejectReason.STALE] == 1
    assert counter[RejectReason.BAD_CRC] == 0 and counter.total == 4
    assert seen == [
        RejectReason.FRAME_COUNT,
        RejectReason.MALFORMED,
        RejectReason.FRAME_COUNT,
        RejectReason.STALE,
    ]


def test_rejected_detail_is_bounded() -> None:
    assert len(Rejected(RejectReason.MALFORMED, "x" * 10_000).detail) == 300


def test_no_pickle_in_the_transport_package() -> None:
    import pathlib

    import safemon.transport as pkg

    for path in pathlib.Path(pkg.__file__).parent.glob("*.py"):
        text = path.read_text()
        for banned in ("import pickle", "pyobj", "marshal", "allow_pickle=True"):
            assert banned not in text, f"{path.name} mentions {banned}"
