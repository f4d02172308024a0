"""Hermes Agent sessions: the SQLite store `~/.hermes/state.db`.

Hermes keeps `sessions(id, parent_session_id, model_config, cwd, ...)` and
`messages(id INTEGER PRIMARY KEY AUTOINCREMENT, session_id, role, content, tool_call_id,
tool_calls (OpenAI JSON), tool_name, timestamp (epoch seconds), ...)`. Message ids only grow,
so a session's cursor is the last message id read: `{"last_id": int}`.

The session's working directory is `sessions.cwd` (newer schemas; older ones have none). A
missing or unreadable database keeps every cursor: when it comes back nothing is read twice.

The database belongs to Hermes: it is opened read-only (`mode=ro`, `PRAGMA query_only`), with a
short busy timeout, one connection per scan that is closed before the scan returns, and no
explicit transaction. An idle scan costs three small queries: the sessions list, the highest
message id, and the per-session maxima of the rows added since the previous scan.

Delegated subagent runs (a `_delegate_from` marker in `model_config`) are read only with
`include_subagents`. Rows Hermes never shows (`display_kind = 'hidden'`), system messages and
the prompts of Hermes's own background review are harness text and are dropped.
"""

from __future__ import annotations

import json
import os
import sqlite3
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skilld.transcripts._tailer import DEFAULT_MAX_LINE_BYTES
from skilld.transcripts.jsonl import chat_message
from skilld.transcripts.model import Cursor, Message, ScanResult, SessionRead

BUSY_TIMEOUT_SECONDS = 0.5
#: Openings of the prompts Hermes's background skill/memory review writes as user messages.
HARNESS_USER_PREFIXES = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)
DELEGATE_MARKER = "_delegate_from"
HIDDEN_DISPLAY_KIND = "hidden"
_REQUIRED_MESSAGE_COLUMNS = frozenset({"id", "session_id", "role", "content"})
_OPTIONAL_MESSAGE_COLUMNS = ("tool_call_id", "tool_calls", "tool_name", "timestamp", "display_kind")


@dataclass(frozen=True, slots=True)
class _SessionInfo:
    label: str | None = None
    subagent: bool = False
    cwd: str | None = None


@dataclass(slots=True)
class _MaxIdIndex:
    """Highest message id per session, kept between scans and extended incrementally."""

    database: tuple[int, int]  # (device, inode) of the file the ids belong to
    high_water: int = 0
    max_ids: dict[str, int] = field(default_factory=dict)


class HermesSource:
    kind = "hermes"

    def __init__(
        self,
        path: Path,
        *,
        glob: str | None = None,
        include_subagents: bool = False,
        tool_result_max_chars: int = 2000,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        # `glob` and `max_line_bytes` are file-source options without meaning for a database.
        del glob, max_line_bytes
        self.path = Path(path).expanduser()
        self.include_subagents = include_subagents
        self.tool_result_max_chars = tool_result_max_chars
        self._index: _MaxIdIndex | None = None

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        try:
            database = os.stat(self.path)
        except FileNotFoundError:
            # Not there now (moved away, a mount not there yet): no session has gone.
            return ScanResult(reads=[], seen=self._own(cursors))
        except OSError as error:
            return self._failed(cursors, error)
        try:
            connection = _connect_read_only(self.path)
        except (OSError, sqlite3.Error) as error:
            return self._failed(cursors, error)
        try:
            return self._scan(
                connection, (database.st_dev, database.st_ino), cursors, start_new_at_end_before
            )
        except sqlite3.Error as error:
            return self._failed(cursors, error)
        finally:
            connection.close()

    def _failed(self, cursors: Mapping[str, Cursor], error: Exception) -> ScanResult:
        # An unreadable database says nothing about which sessions still exist: keep cursors.
        return ScanResult(reads=[], seen=self._own(cursors), errors=[f"{self.path}: {error}"])

    def _own(self, cursors: Mapping[str, Cursor]) -> set[str]:
        return {key for key in cursors if key.startswith(f"{self.kind}:")}

    def _scan(
        self,
        connection: sqlite3.Connection,
        database: tuple[int, int],
        cursors: Mapping[str, Cursor],
        start_new_at_end_before: float | None,
    ) -> ScanResult:
        message_columns = _columns(connection, "messages")
        if not message_columns >= _REQUIRED_MESSAGE_COLUMNS:
            raise sqlite3.DatabaseError("no Hermes messages table")
        sessions = _sessions(connection)
        max_ids = self._max_ids(connection, database, set(sessions) if sessions else None)
        result = ScanResult(reads=[], seen=set())
        for session_id in sorted(set(sessions) | set(max_ids)):
            info = sessions.get(session_id, _SessionInfo())
            if info.subagent and not self.include_subagents:
                continue
            key = f"{self.kind}:{session_id}"
            result.seen.add(key)
            read = self._read_session(
                connection,
                message_columns,
                session_id,
                key,
                info,
                cursors.get(key),
                max_ids.get(session_id, 0),
                start_new_at_end_before,
            )
            if read is not None:
                result.reads.append(read)
        return result

    def _max_ids(
        self,
        connection: sqlite3.Connection,
        database: tuple[int, int],
        known_sessions: set[str] | None,
    ) -> dict[str, int]:
        (highest,) = connection.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()
        index = self._index
        if index is None or index.database != database or highest < index.high_water:
            index = _MaxIdIndex(database=database)
        if highest > index.high_water:
            rows = connection.execute(
                "SELECT session_id, MAX(id) FROM messages WHERE id > ? GROUP BY session_id",
                (index.high_water,),
            ).fetchall()
            for session_id, max_id in rows:
                if isinstance(session_id, str) and isinstance(max_id, int):
                    index.max_ids[session_id] = max_id
                    index.high_water = max(index.high_water, max_id)
        if known_sessions is not None:
            index.max_ids = {
                session_id: max_id
                for session_id, max_id in index.max_ids.items()
                if session_id in known_sessions
            }
        self._index = index
        return index.max_ids

    def _read_session(
        self,
        connection: sqlite3.Connection,
        message_columns: set[str],
        session_id: str,
        key: str,
        info: _SessionInfo,
        cursor: Cursor | None,
        max_id: int,
        start_new_at_end_before: float | None,
    ) -> SessionRead | None:
        stored = cursor.get("last_id") if cursor is not None else None
        last_id = stored if isinstance(stored, int) and not isinstance(stored, bool) else None
        valid_cursor = last_id is not None
        if last_id is not None:
            # Ids only grow: a maximum at or below the cursor means nothing new (rows may
            # have been deleted, never inserted below it).
            if max_id <= last_id:
                return None
            after = last_id
        else:
            if max_id == 0:
                return None
            after = 0
            if (
                cursor is None
                and start_new_at_end_before is not None
                and "timestamp" in message_columns
            ):
                last_time = _message_time(connection, max_id)
                if last_time is not None and last_time < start_new_at_end_before:
                    return SessionRead(
                        source=self.kind,
                        session=key,
                        messages=[],
                        cursor={"last_id": max_id},
                        mtime=last_time,
                        label=info.label,
                        cwd=info.cwd,
                    )
        # Column names come from the constants above, never from the database or the user.
        columns = ["id", "role", "content"] + [
            column if column in message_columns else f"NULL AS {column}"
            for column in _OPTIONAL_MESSAGE_COLUMNS
        ]
        rows = connection.execute(
            f"SELECT {', '.join(columns)} FROM messages "
            "WHERE session_id = ? AND id > ? ORDER BY id",
            (session_id, after),
        ).fetchall()
        if not rows:
            return None
        calls: dict[str, str] = {}
        messages = [message for row in rows if (message := self._message(row, calls)) is not None]
        last_row = rows[-1]
        last_time = last_row[6] if isinstance(last_row[6], int | float) else None
        return SessionRead(
            source=self.kind,
            session=key,
            messages=messages,
            cursor={"last_id": last_row[0]},
            reset=cursor is not None and not valid_cursor,
            mtime=float(last_time) if last_time is not None else None,
            label=info.label,
            cwd=info.cwd,
        )

    def _message(self, row: tuple[Any, ...], calls: dict[str, str]) -> Message | None:
        _, role, content, tool_call_id, tool_calls, tool_name, timestamp, display_kind = row
        if display_kind == HIDDEN_DISPLAY_KIND:
            return None
        if (
            role == "user"
            and isinstance(content, str)
            and content.lstrip().startswith(HARNESS_USER_PREFIXES)
        ):
            return None
        record = {
            "role": role,
            "content": _content(content),
            "tool_calls": _json(tool_calls),
            "tool_call_id": tool_call_id,
            "name": tool_name,
            "timestamp": timestamp,
        }
        return chat_message(record, calls, self.tool_result_max_chars)


def _connect_read_only(path: Path) -> sqlite3.Connection:
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    connection = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    connection.execute("PRAGMA query_only = ON")
    return connection


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}


def _sessions(connection: sqlite3.Connection) -> dict[str, _SessionInfo]:
    columns = _columns(connection, "sessions")
    if "id" not in columns:
        return {}
    # Column names come from this fixed list, never from the database.
    parent, model_config, cwd = (
        name if name in columns else "NULL" for name in ("parent_session_id", "model_config", "cwd")
    )
    sessions = {}
    for session_id, parent_id, config, directory in connection.execute(
        f"SELECT id, {parent}, {model_config}, {cwd} FROM sessions"
    ):
        if not isinstance(session_id, str):
            continue
        config_value = _json(config)
        delegated = isinstance(config_value, dict) and DELEGATE_MARKER in config_value
        if isinstance(parent_id, str) and parent_id:
            label = f"subagent of {parent_id}" if delegated else f"child of {parent_id}"
        else:
            label = None
        sessions[session_id] = _SessionInfo(
            label=label,
            subagent=delegated,
            cwd=directory if isinstance(directory, str) and directory else None,
        )
    return sessions


def _message_time(connection: sqlite3.Connection, message_id: int) -> float | None:
    row = connection.execute(
        "SELECT timestamp FROM messages WHERE id = ?", (message_id,)
    ).fetchone()
    if row is None or not isinstance(row[0], int | float):
        return None
    return float(row[0])


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _content(value: Any) -> Any:
    """Message content: text, or a JSON list of blocks stored as text (multimodal turns)."""
    if isinstance(value, str) and value.startswith("[{"):
        decoded = _json(value)
        if isinstance(decoded, list):
            return decoded
    return value
