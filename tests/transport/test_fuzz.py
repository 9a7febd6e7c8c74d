"""Hypothesis fuzzing: decode raises only Rejected, for any frames, and with the right reason."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safemon.transport import wire
from safemon.transport.wire import WIRE_DTYPES, Kind, Limits, Rejected, RejectReason, decode, encode

LIMITS = Limits(max_header_bytes=4096, max_frame_bytes=4096, max_total_bytes=16384, max_frames=4)
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
field_names = st.sampled_from(
    ["v", "epoch", "seq", "channel", "kind", "frames", "meta", "dtype", "shape", "crc32", "x"]
)
header_like = st.dictionaries(field_names, json_values, max_size=8)


def _only_rejected(frames: Any) -> None:
    """Both the guarded decode and the bare _decode raise nothing but Rejected."""
    for fn in (decode, wire._decode):
        with contextlib.suppress(Rejected):
            fn(frames, LIMITS)


@FAST
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_arbitrary_binary_frames_only_ever_raise_rejected(frames: list[bytes]) -> None:
    _only_rejected(frames)


@FAST
@given(header_like, st.lists(st.binary(max_size=32), max_size=3))
def test_arbitrary_json_headers_only_ever_raise_rejected(
    header: dict[str, Any], payload: list[bytes]
) -> None:
    _only_rejected([json.dumps(header).encode(), *payload])
    _only_rejected([json.dumps({**header, "v": 1}).encode(), *payload])


frame_specs = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from([*WIRE_DTYPES, "float16", "object", "", "O"])
        | st.text(max_size=20),
        "shape": st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=40),
        "crc32": st.integers(min_value=-1, max_value=2**33),
    }
)


@FAST
@given(st.lists(frame_specs, max_size=4), st.lists(st.binary(max_size=64), max_size=4))
def test_well_typed_headers_with_arbitrary_frame_specs_only_raise_rejected(
    specs: list[dict[str, Any]], payload: list[bytes]
) -> None:
    header = {
        "v": 1,
        "epoch": 0,
        "seq": 0,
        "channel": "",
        "kind": "result",
        "frames": specs,
        "meta": {},
    }
    _only_rejected([json.dumps(header).encode(), *payload])


arrays = st.builds(
    lambda name, shape, seed: (
        np.random.default_rng(seed)
        .integers(0, 256, size=int(np.prod(shape)) * WIRE_DTYPES[name].itemsize, dtype=np.uint8)
        .view(WIRE_DTYPES[name])
        .reshape(shape)
    ),
    st.sampled_from(sorted(WIRE_DTYPES)),
    st.lists(st.integers(0, 5), max_size=3).map(tuple),
    st.integers(0, 2**32),
)


def _message(arrs: list[np.ndarray]) -> list[bytes]:
    return [bytes(f) for f in encode(Kind.RESULT, epoch=2, seq=7, channel="c1", arrays=arrs)]


def _reason(frames: list[Any]) -> RejectReason:
    try:
        wire._decode(frames, LIMITS)
    except Rejected as rejected:
        return rejected.reason
    raise AssertionError("defective message was accepted")


@FAST
@given(st.lists(arrays, min_size=1, max_size=3), st.data())
def test_valid_messages_decode_and_each_mutation_gets_its_reason(
    arrs: list[np.ndarray], data: st.DataObject
) -> None:
    frames = _message(arrs)
    decoded = decode(frames, LIMITS)
    assert [a.tobytes() for a in decoded.arrays] == [a.tobytes() for a in arrs]

    i = data.draw(st.integers(1, len(frames) - 1), label="frame")
    if frames[i]:
        cut = data.draw(st.integers(1, len(frames[i])), label="cut")
        assert _reason([*frames[:i], frames[i][:-cut], *frames[i + 1 :]]) is RejectReason.SHAPE
        pos = data.draw(st.integers(0, len(frames[i]) - 1), label="pos")
        bit = data.draw(st.integers(0, 7), label="bit")
        flipped = bytearray(frames[i])
        flipped[pos] ^= 1 << bit
        assert _reason([*frames[:i], bytes(flipped), *frames[i + 1 :]]) is RejectReason.BAD_CRC
    assert _reason(frames[:i] + frames[i + 1 :]) is RejectReason.FRAME_COUNT
    assert _reason([*frames, b""]) is RejectReason.FRAME_COUNT
    hcut = data.draw(st.integers(1, len(frames[0])), label="header cut")
    assert _reason([frames[0][:-hcut], *frames[1:]]) is RejectReason.MALFORMED

    header = json.loads(frames[0])
    spec = header["frames"][i - 1]
    bad_dtype = data.draw(
        st.text(max_size=12).filter(lambda s: s not in WIRE_DTYPES), label="dtype"
    )
    header_d = json.loads(frames[0])
    header_d["frames"][i - 1]["dtype"] = bad_dtype
    assert _reason([json.dumps(header_d).encode(), *frames[1:]]) is RejectReason.DTYPE

    header_s = json.loads(frames[0])
    huge = data.draw(st.lists(st.integers(2**20, 2**64), min_size=2, max_size=4), label="huge")
    header_s["frames"][i - 1]["shape"] = huge
    assert _reason([json.dumps(header_s).encode(), *frames[1:]]) is RejectReason.OVERSIZED

    header_w = json.loads(frames[0])
    header_w["frames"][i - 1]["shape"] = [*spec["shape"], 2]  # twice the bytes (or 0 vs 0: skip)
    if len(frames[i]):
        assert _reason([json.dumps(header_w).encode(), *frames[1:]]) is RejectReason.SHAPE
