"""Write a small Hermes Agent `state.db` holding one session, for examples/config.toml.

Hermes keeps its sessions in SQLite, a binary file, so the example is generated rather than
checked in. Usage:

    python examples/make_hermes_db.py                      # examples/transcripts/hermes/state.db
    python examples/make_hermes_db.py /tmp/hermes/state.db

An existing file at the target is replaced. The tables follow Hermes's schema (`sessions`,
`messages` with OpenAI-style `tool_calls` JSON), which is what skilld's `hermes` source reads.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

DEFAULT_TARGET = Path(__file__).resolve().parent / "transcripts" / "hermes" / "state.db"
SESSION_ID = "20250618_101500_b7e2c4"

SCHEMA = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, model TEXT, model_config TEXT,
    system_prompt TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, message_count INTEGER DEFAULT 0, title TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT, reasoning TEXT,
    active INTEGER NOT NULL DEFAULT 1, display_kind TEXT
);
CREATE INDEX idx_messages_session_id ON messages(session_id, id);
"""


def terminal_call(call_id: str, command: str) -> str:
    return json.dumps(
        [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "terminal", "arguments": json.dumps({"command": command})},
            }
        ]
    )


# (role, content, tool_call_id, tool_calls, tool_name)
MESSAGES: list[tuple[str, str, str | None, str | None, str | None]] = [
    ("system", "You are Hermes, an agent with terminal access on web-01.", None, None, None),
    (
        "user",
        "The site returns 502 Bad Gateway every few minutes since this morning. Find out why.",
        None,
        None,
        None,
    ),
    (
        "assistant",
        "A 502 from nginx means the upstream failed. I'll read nginx's error log first.",
        None,
        terminal_call("call_h1", "sudo tail -n 20 /var/log/nginx/error.log"),
        None,
    ),
    (
        "tool",
        "2025/06/18 09:58:11 [error] 812#812: *4411 upstream prematurely closed connection while "
        'reading response header from upstream, upstream: "http://127.0.0.1:8000/api/export"',
        "call_h1",
        None,
        "terminal",
    ),
    (
        "assistant",
        "The app server closes the connection on /api/export. Checking gunicorn's log.",
        None,
        terminal_call("call_h2", "journalctl -u gunicorn --since '1 hour ago' | grep -i timeout"),
        None,
    ),
    (
        "tool",
        "Jun 18 09:58:11 web-01 gunicorn[1290]: [CRITICAL] WORKER TIMEOUT (pid:20871)",
        "call_h2",
        None,
        "terminal",
    ),
    (
        "assistant",
        "Gunicorn kills workers after its default 30 s timeout while /api/export builds large "
        "CSV files, and nginx reports that as a 502. I'll raise gunicorn's timeout to match "
        "nginx's proxy_read_timeout (120 s) and reload both.",
        None,
        terminal_call(
            "call_h3",
            "sudo sed -i 's/--timeout 30/--timeout 120/' /etc/systemd/system/gunicorn.service && "
            "sudo systemctl daemon-reload && sudo systemctl restart gunicorn && "
            "grep proxy_read_timeout /etc/nginx/sites-enabled/app",
        ),
        None,
    ),
    ("tool", "    proxy_read_timeout 120s;", "call_h3", None, "terminal"),
    (
        "assistant",
        "Fixed: gunicorn now allows 120 s per request, the same as nginx's proxy_read_timeout, "
        "so long exports no longer get their worker killed (which nginx showed as a 502).",
        None,
        None,
        None,
    ),
    (
        "user",
        "Should the export stay synchronous?",
        None,
        None,
        None,
    ),
    (
        "assistant",
        "Not for long: a request that needs minutes ties up a worker. Move the export to a "
        "background job that writes the CSV to storage and returns a download link; keep the "
        "two timeouts aligned either way, since a mismatch always surfaces as a 502.",
        None,
        None,
        None,
    ),
]


def write_database(target: Path, *, now: float | None = None) -> Path:
    started = time.time() - 600 if now is None else now - 600
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in (
        target,
        target.with_name(target.name + "-wal"),
        target.with_name(target.name + "-shm"),
    ):
        stale.unlink(missing_ok=True)
    connection = sqlite3.connect(target)
    try:
        connection.executescript(SCHEMA)
        with connection:
            connection.execute(
                "INSERT INTO sessions (id, source, model, model_config, started_at, title) "
                "VALUES (?, 'cli', 'deepseek-chat', '{}', ?, '502s from nginx')",
                (SESSION_ID, started),
            )
            for offset, (role, content, call_id, tool_calls, tool_name) in enumerate(MESSAGES):
                connection.execute(
                    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, "
                    "tool_name, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        SESSION_ID,
                        role,
                        content,
                        call_id,
                        tool_calls,
                        tool_name,
                        started + offset * 20,
                    ),
                )
    finally:
        connection.close()
    return target


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: make_hermes_db.py [TARGET]", file=sys.stderr)
        return 2
    target = Path(argv[0]) if argv else DEFAULT_TARGET
    print(write_database(target))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
