"""Logging, configured in one place: JSON lines when stderr is not a terminal, a readable console
otherwise, and every line passed through redaction before it is written.

structlog (and the redaction patterns) load on the first line actually logged, not at import:
a one-shot command an agent's hook runs on every tool call logs nothing and must not pay for
them. `configure_logging` only records the settings until then.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import Any

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_METHOD_LEVELS = {**_LEVELS, "exception": 40, "critical": 50}

#: The settings of the last `configure_logging` call not yet applied to structlog.
_pending: tuple[str, str, Any] | None = None
_applied = False


def configure_logging(fmt: str = "auto", level: str = "info", *, stream: Any = None) -> None:
    """Logs go to stderr so that stdout stays clean for command output (`--json`)."""
    global _pending
    _pending = (fmt, level, stream)
    if _applied or "structlog" in sys.modules:
        _apply()


def _apply() -> None:
    global _pending, _applied
    if _pending is None:
        return
    import structlog

    fmt, level, stream = _pending
    _pending, _applied = None, True
    stream = sys.stderr if stream is None else stream
    use_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, 20)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def redact_secrets(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """A structlog processor: every string in the line (a `repr(exc)`, a traceback, a path a
    secret was pasted into) goes through redaction. Events are redacted where they are made;
    this is the defence in depth for what nobody thought to redact."""
    from skilld.redact import redact

    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value).text
    return event


class _Logger:
    """A structlog logger, made on first use."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._logger is None:
            if _filtered_before_loading(attribute):
                return _drop
            import structlog

            _apply()
            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attribute)


def _filtered_before_loading(method: str) -> bool:
    """Whether a line logged with `method` is below the configured level while structlog is
    not loaded yet: a one-shot command logs at warning, and the info line of each event it
    records would load structlog (and asyncio, through it) only to drop that line."""
    if _applied or _pending is None:
        return False
    rank = _METHOD_LEVELS.get(method)
    return rank is not None and rank < _LEVELS.get(_pending[1], 20)


def _drop(*_args: Any, **_fields: Any) -> None:
    return None


def get_logger(name: str = "skilld") -> Any:
    return _Logger(name)
