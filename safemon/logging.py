"""Structured logging for every safemon process (structlog).

`configure_logging` sets one processor chain for the process:

- JSON lines in production (one object per event: `timestamp` ISO-8601 UTC, `level`,
  `event`, then `role`, `pid`, and the bound context `epoch`, `seq`, `channel`, `mode`
  when present, then anything else), so journald/Loki can index them;
- a readable console renderer when a person watches a terminal.

Context is bound the structlog way, either on a logger (`log.bind(channel="ch0")`) or for
the current task/thread with `structlog.contextvars.bind_contextvars(epoch=3, seq=17)`;
both are merged here. `ProcessInfo` is a plain structlog processor, usable on its own.

Events are named in snake_case (`log.info("vote_released", ...)`); values go in keys, not
in the event string, so they stay searchable.
"""

from __future__ import annotations

import logging as _stdlib_logging
import os
import sys
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from safemon.errors import ConfigError

__all__ = [
    "CONTEXT_KEYS",
    "LEVELS",
    "ProcessInfo",
    "configure_logging",
    "order_keys",
]

LogFormat = Literal["auto", "json", "console"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

LEVELS: dict[str, int] = {
    "debug": _stdlib_logging.DEBUG,
    "info": _stdlib_logging.INFO,
    "warning": _stdlib_logging.WARNING,
    "error": _stdlib_logging.ERROR,
    "critical": _stdlib_logging.CRITICAL,
}
#: The request/channel context every role binds when it has it.
CONTEXT_KEYS: tuple[str, ...] = ("epoch", "seq", "channel", "mode")
_FIRST_KEYS: tuple[str, ...] = ("timestamp", "level", "event", "role", "pid", *CONTEXT_KEYS)


class ProcessInfo:
    """Processor adding `pid` (read at each event, so it is right after a spawn) and, when
    given, the process `role` ("daemon", "channel", "client", ...). Values already bound
    in the event win."""

    def __init__(self, role: str | None = None) -> None:
        self.role = role

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if self.role is not None:
            event_dict.setdefault("role", self.role)
        event_dict.setdefault("pid", os.getpid())
        return event_dict


def order_keys(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Processor putting timestamp, level, event, role, pid and the context keys first,
    so JSON lines read the same way every time; the other keys keep their order."""
    ordered: dict[str, Any] = {k: event_dict[k] for k in _FIRST_KEYS if k in event_dict}
    ordered.update((k, v) for k, v in event_dict.items() if k not in ordered)
    return ordered


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # closed or detached stream
        return False


def configure_logging(
    fmt: LogFormat = "auto",
    level: LogLevel = "info",
    *,
    role: str | None = None,
    stream: TextIO | None = None,
) -> None:
    """Configure structlog for this process (call once per process, after spawn).

    Args:
        fmt: "json", "console", or "auto" (console when the output stream, by default
            `sys.stderr`, is a TTY; JSON otherwise).
        level: the lowest level emitted.
        role: the process role added to each event by `ProcessInfo`.
        stream: where to write; None = `sys.stderr` (stdout is left to the application).

    Raises:
        ConfigError: unknown `fmt` or `level`.
    """
    if fmt not in ("auto", "json", "console"):
        raise ConfigError(f"logging.format: must be auto, json or console, got {fmt!r}")
    if level not in LEVELS:
        raise ConfigError(f"logging.level: must be one of {', '.join(LEVELS)}, got {level!r}")
    out = sys.stderr if stream is None else stream
    console = fmt == "console" or (fmt == "auto" and _is_tty(out))

    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        ProcessInfo(role),
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        structlog.processors.StackInfoRenderer(),
    ]
    if console:
        processors.append(structlog.dev.ConsoleRenderer(colors=_is_tty(out)))
    else:
        processors += [
            structlog.processors.format_exc_info,
            order_keys,
            structlog.processors.JSONRenderer(),
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        # Not cached: a logger created at import time must follow a later configure call
        # (the CLI configures after parsing arguments). The level filter stays cheap.
        cache_logger_on_first_use=False,
    )
