"""The message schemas (`safemon.transport.messages`) and docs/PROTOCOL.md agree: the
document's table is the one the schemas generate, every documented example parses with its
schema and round-trips, and parsing is strict and typed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from safemon.transport import Kind
from safemon.transport.messages import (
    SCHEMAS,
    Heartbeat,
    MatmulRequest,
    MetaError,
    Result,
    WeightAck,
    meta_keys,
    protocol_table,
    schema_for,
)
from safemon.transport.wire import Header

DOC = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_the_documented_table_is_generated_from_the_schemas() -> None:
    """Section 4's table is exactly `protocol_table()`: a schema change without the
    document (or the reverse) fails here."""
    text = _doc()
    m = re.search(r"<!-- schemas:begin -->\n(.*?)\n<!-- schemas:end -->", text, re.S)
    assert m is not None, "PROTOCOL.md lost its schema table markers"
    assert m.group(1).strip() == protocol_table()


def _examples() -> list[dict[str, Any]]:
    section = _doc().split("### 4.1", 1)[1].split("## 5.", 1)[0]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)\n```", section, re.S)]


def test_every_documented_example_is_a_valid_header_whose_meta_round_trips() -> None:
    """Each JSON example of section 4.1 passes the header model, its meta parses with the
    schema of its kind and tag, and `to_meta()` gives the documented meta back."""
    examples = _examples()
    assert len(examples) >= 7
    for ex in examples:
        Header.model_validate_json(json.dumps(ex))
        route = "client" if ex["kind"] == "request" else ""
        got = schema_for(Kind(ex["kind"]), ex["meta"], route).parse(ex["meta"]).to_meta()
        assert got.keys() == ex["meta"].keys()
        for key, value in ex["meta"].items():  # an int example of a float key reads as a float
            assert got[key] == value and type(got[key]) in (type(value), float)


def test_every_schema_appears_in_the_document() -> None:
    text = _doc()
    for s in SCHEMAS:
        assert f"`{s.__name__}`" in text


def test_meta_keys_per_kind_cover_what_the_roles_send() -> None:
    """The keys the worker and daemon put on the wire are in the schemas of their kind."""
    keys = meta_keys()
    assert {"incarnation", "ecc_corrected", "ecc_uncorrectable"} <= keys[Kind.HEARTBEAT]
    assert {"weight_id", "ok", "corrected", "uncorrectable", "event"} <= keys[Kind.EVENT]
    assert {"test_id", "sm_count", "error"} <= keys[Kind.RESULT]


@pytest.mark.parametrize(("schema", "meta", "key"), [
    (Heartbeat, {"state": "UP", "uptime_s": 1.0, "incarnation": True}, "incarnation"),
    (MatmulRequest, {"deadline_ms": 5.0}, "weight_id"),
    (Result, {"job": "live", "ok": "yes"}, "ok"),
    (Result, {"job": "live", "ok": True, "kernel_seconds": float("nan")}, "kernel_seconds"),
    (WeightAck, {"event": "scrub", "weight_id": "w", "ok": True}, "event"),
])
def test_a_meta_that_does_not_fit_its_schema_is_a_typed_error_naming_the_key(
        schema: Any, meta: dict[str, Any], key: str) -> None:
    with pytest.raises(MetaError, match=key):
        schema.parse(meta)


def test_an_int_is_accepted_where_a_float_is_meant_and_extra_keys_are_ignored() -> None:
    r = Result.parse({"job": "live", "ok": True, "kernel_seconds": 1, "link": "abc"})
    assert r.kernel_seconds == 1.0 and isinstance(r.kernel_seconds, float)
