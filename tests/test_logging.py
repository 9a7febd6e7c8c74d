"""Structured logging: the process-info processor, JSON lines, console output, format choice."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import structlog
from structlog.testing import capture_logs

from safemon.errors import ConfigError
from safemon.logging import ProcessInfo, configure_logging, order_keys
from safemon.states import Mode


class TTY(io.StringIO):
    """A text stream that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


# ------------------------------------------------------------------ the processor


def test_process_info_adds_role_and_pid() -> None:
    with capture_logs(processors=[ProcessInfo("channel")]) as logs:
        structlog.get_logger().info("selftest_passed", channel="ch1")
    assert logs == [
        {
            "event": "selftest_passed",
            "channel": "ch1",
            "role": "channel",
            "pid": os.getpid(),
            "log_level": "info",
        }
    ]


def test_process_info_without_role_adds_only_pid() -> None:
    with capture_logs(processors=[ProcessInfo()]) as logs:
        structlog.get_logger().warning("x")
    assert "role" not in logs[0]
    assert logs[0]["pid"] == os.getpid()


def test_process_info_keeps_an_explicitly_bound_role() -> None:
    with capture_logs(processors=[ProcessInfo("daemon")]) as logs:
        structlog.get_logger().bind(role="scheduler").info("tick")
    assert logs[0]["role"] == "scheduler"


def test_order_keys_puts_the_known_keys_first() -> None:
    out = order_keys(
        None, "info", {"n": 1, "seq": 2, "event": "e", "timestamp": "t", "level": "info"}
    )
    assert list(out) == ["timestamp", "level", "event", "seq", "n"]


def test_bound_context_reaches_the_event_after_configure() -> None:
    configure_logging("json", stream=io.StringIO())
    with capture_logs() as logs:
        structlog.get_logger().bind(epoch=2, seq=9, channel="ch0", mode=Mode.DEGRADED).info(
            "vote_released"
        )
    assert logs[0]["event"] == "vote_released"
    assert (logs[0]["epoch"], logs[0]["seq"], logs[0]["channel"], logs[0]["mode"]) == (
        2,
        9,
        "ch0",
        Mode.DEGRADED,
    )


# ------------------------------------------------------------------ JSON


def test_json_lines_carry_timestamp_level_event_role_and_context() -> None:
    out = io.StringIO()
    configure_logging("json", "info", role="daemon", stream=out)
    structlog.contextvars.bind_contextvars(epoch=3, seq=17)
    log = structlog.get_logger().bind(channel="ch2", mode=Mode.SAFE)
    log.info("safe_state_entered", reason="disagreement")
    log.debug("not_emitted_at_info")
    (line,) = json_lines(out)
    assert list(line)[:9] == [
        "timestamp",
        "level",
        "event",
        "role",
        "pid",
        "epoch",
        "seq",
        "channel",
        "mode",
    ]
    assert line["level"] == "info"
    assert line["event"] == "safe_state_entered"
    assert (line["role"], line["pid"]) == ("daemon", os.getpid())
    assert (line["epoch"], line["seq"], line["channel"], line["mode"]) == (3, 17, "ch2", "SAFE")
    assert line["reason"] == "disagreement"
    ts = str(line["timestamp"])
    assert ts.endswith("Z")
    when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    assert when.tzinfo is not None and when.utcoffset() == UTC.utcoffset(None)
    assert abs((datetime.now(UTC) - when).total_seconds()) < 3600


def test_json_omits_absent_context_keys() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    structlog.get_logger().info("started")
    (line,) = json_lines(out)
    assert not {"epoch", "seq", "channel", "mode", "role"} & set(line)


def test_json_level_filter_and_exception_rendering() -> None:
    out = io.StringIO()
    configure_logging("json", "debug", stream=out)
    log = structlog.get_logger()
    log.debug("detail")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("crashed")
    first, second = json_lines(out)
    assert first["level"] == "debug"
    assert second["level"] == "error"
    assert "RuntimeError: boom" in str(second["exception"])


# ------------------------------------------------------------------ console and auto


def test_console_output_is_readable_not_json() -> None:
    out = io.StringIO()
    configure_logging("console", stream=out)
    structlog.get_logger().warning("heartbeat_lost", channel="ch1")
    text = out.getvalue()
    assert "heartbeat_lost" in text and "channel=ch1" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert "\x1b[" not in text  # no colour codes into a non-terminal


def test_auto_is_console_on_a_tty_and_json_otherwise() -> None:
    tty = TTY()
    configure_logging("auto", stream=tty)
    structlog.get_logger().info("hello")
    assert not tty.getvalue().startswith("{")
    pipe = io.StringIO()
    configure_logging("auto", stream=pipe)
    structlog.get_logger().info("hello")
    assert json_lines(pipe)[0]["event"] == "hello"


def test_auto_defaults_to_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    configure_logging()
    structlog.get_logger().info("to_stderr")
    assert json_lines(err)[0]["event"] == "to_stderr"


@pytest.mark.parametrize(("fmt", "level"), [("xml", "info"), ("json", "verbose"), ("json", "INFO")])
def test_bad_format_or_level_is_a_config_error(fmt: str, level: str) -> None:
    with pytest.raises(ConfigError, match="logging"):
        configure_logging(fmt, level)  # type: ignore[arg-type]
