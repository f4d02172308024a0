"""Logging: every event is a log line too, and no line carries a secret, however it got there."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from structlog.testing import capture_logs

from skilld.log import configure_logging, get_logger
from skilld.state import StateDB

SECRET = "ghp_" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"


def test_each_event_is_a_log_line_with_its_fields(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as state, capture_logs() as logs:
        state.add_event(
            "created", library="claude", skill="fix-build", session="s1", detail={"version": 2}
        )
        state.add_event("error", reason="the LLM is down", detail={"kind": "server"})
    assert logs == [
        {
            "event": "created",
            "log_level": "info",
            "library": "claude",
            "skill": "fix-build",
            "session": "s1",
            "version": 2,
        },
        {"event": "error", "log_level": "error", "reason": "the LLM is down", "kind": "server"},
    ]


def test_a_detail_key_named_like_a_column_is_kept_beside_it(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as state, capture_logs() as logs:
        state.add_event("archived", skill="a", reason="old", detail={"reason": "x", "event": "y"})
    assert logs[0]["reason"] == "old"
    assert (logs[0]["detail_reason"], logs[0]["detail_event"]) == ("x", "y")


def test_no_log_line_carries_a_secret_even_in_an_exception() -> None:
    """Events are redacted where they are made; the redaction step in the chain is the
    defence in depth for a `repr(exc)` or a traceback nobody thought to redact."""
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    log = get_logger("skilld.test")
    try:
        raise RuntimeError(f"push failed: https://x-access-token:{SECRET}@github.com/team/skills")
    except RuntimeError as exc:
        log.error("sync_failed", error=repr(exc), exc_info=True)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["sync_failed"]
    assert SECRET not in stream.getvalue()
    assert "[REDACTED:" in lines[0]["error"] and "[REDACTED:" in lines[0]["exception"]


def logged_in_a_new_process(level: str, *lines: tuple[str, str]) -> tuple[list[bool], list[str]]:
    """Log `lines` ((method, event) pairs) at `level` in a new interpreter: whether structlog
    was loaded before the first line and after each, and the events written."""
    probe = (
        "import sys; from skilld.log import configure_logging, get_logger\n"
        f"configure_logging('json', {level!r}); log = get_logger('x')\n"
        "print('structlog' in sys.modules)\n"
        f"for method, event in {lines!r}:\n"
        "    getattr(log, method)(event); print('structlog' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded = [word == "True" for word in result.stdout.split()]
    return loaded, [json.loads(line)["event"] for line in result.stderr.splitlines()]


def test_logging_loads_on_the_first_line_logged() -> None:
    """A one-shot command configures logging and logs nothing: structlog never loads."""
    assert logged_in_a_new_process("info", ("info", "hello")) == ([False, True], ["hello"])


def test_a_line_below_the_level_does_not_load_structlog() -> None:
    """A one-shot command logs at warning: the info line of an event it records is dropped
    without loading structlog, and a warning still loads it and is written."""
    lines = (("info", "dropped"), ("debug", "dropped"), ("warning", "kept"))
    assert logged_in_a_new_process("warning", *lines) == ([False, False, False, True], ["kept"])
