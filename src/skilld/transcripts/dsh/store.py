"""DSH's opt-in SQLite persistence: the same events in one database file, read read-only.

Table `events` (session_id, seq, type, time, data, surface_op) and, when present, `sessions` for
the headers (id, session_key, parent_session, origin, incarnation, cwd). A session's cursor is
the last seq consumed and the highest seq it had; a new `incarnation` means the session was
rewritten and is read again from its start.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skilld.transcripts.dsh.digest import (
    KIND,
    NOISE_EVENT_TYPES,
    OPEN_TURN_RELEASE_SECONDS,
    Digest,
    Digester,
    PositionedEvent,
    SessionHeader,
    TurnState,
    int_or_none,
)
from skilld.transcripts.dsh.frames import ZSTD_MAGIC, decompress_bounded
from skilld.transcripts.model import Cursor, ScanResult, SessionRead

_SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class _DbCursor:
    seq: int  # last event consumed
    last: int  # highest seq the session had when read (nothing new while it stays so)
    incarnation: str | None
    held: bool
    state: TurnState

    @classmethod
    def parse(cls, raw: Cursor | None) -> _DbCursor | None:
        """The cursor, or None when it is missing or not one this source wrote."""
        if raw is None:
            return None
        seq, last, incarnation = (
            int_or_none(raw.get("seq")),
            int_or_none(raw.get("last")),
            raw.get("incarnation"),
        )
        if seq is None or last is None or not (incarnation is None or isinstance(incarnation, str)):
            return None
        return cls(seq, last, incarnation, raw.get("held") is True, TurnState.from_cursor(raw))


@dataclass(frozen=True, slots=True)
class _DbSession:
    row_id: Any  # events.session_id as stored (text id, or integer row id in newer schemas)
    header: SessionHeader
    incarnation: str | None


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _database_sessions(connection: sqlite3.Connection) -> list[_DbSession]:
    tables = {
        row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if "events" not in tables:
        raise sqlite3.DatabaseError("no events table: not a DSH session database")
    if "sessions" not in tables:
        rows = connection.execute("SELECT DISTINCT session_id FROM events")
        return [_DbSession(row[0], SessionHeader(str(row[0])), None) for row in rows]
    columns = {row[1] for row in connection.execute("PRAGMA table_info(sessions)")}
    # Column names come from this fixed list, never from the database.
    optional = ("session_key", "parent_session", "origin", "incarnation", "cwd")
    selected = ["id", *(name for name in optional if name in columns)]
    sessions = []
    for row in connection.execute(f"SELECT {', '.join(selected)} FROM sessions"):
        values = dict(zip(selected, row, strict=True))
        session_key = values.get("session_key")
        parent = values.get("parent_session")
        incarnation = values.get("incarnation")
        cwd = values.get("cwd")
        sessions.append(
            _DbSession(
                values["id"],
                SessionHeader(
                    id=str(session_key if session_key is not None else values["id"]),
                    parent=str(parent) if parent is not None else None,
                    subagent=values.get("origin") == "subagent",
                    cwd=cwd if isinstance(cwd, str) and cwd else None,
                ),
                str(incarnation) if incarnation is not None else None,
            )
        )
    return sessions


def _surface_op(value: Any) -> Any:
    """The stored surface_op column as the event field: "append", a replace object, or None."""
    if isinstance(value, str) and value[:1] in ('"', "{"):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _row_data(value: Any, max_line_bytes: int) -> Any:
    """events.data: JSON text, or a BLOB holding JSON (zstd-compressed when large)."""
    if isinstance(value, str):
        if len(value) > max_line_bytes:
            raise ValueError("payload larger than max_line_bytes")
        return json.loads(value)
    if isinstance(value, bytes | memoryview):
        blob = bytes(value)
        if blob.startswith(ZSTD_MAGIC):
            blob = decompress_bounded(blob, max_line_bytes)
        elif len(blob) > max_line_bytes:
            raise ValueError("payload larger than max_line_bytes")
        return json.loads(blob)
    raise ValueError("events.data is neither text nor a blob")


class SessionStore:
    """The sessions of one DSH SQLite store."""

    def __init__(
        self,
        path: Path,
        *,
        include_subagents: bool,
        tool_result_max_chars: int,
        max_line_bytes: int,
    ) -> None:
        self.path = path
        self.include_subagents = include_subagents
        self.tool_result_max_chars = tool_result_max_chars
        self.max_line_bytes = max_line_bytes

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None, now: float
    ) -> ScanResult:
        result = ScanResult(reads=[], seen=set())
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        try:
            with closing(
                sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SECONDS)
            ) as connection:
                for session in _database_sessions(connection):
                    key = session.header.key
                    if session.header.subagent and not self.include_subagents:
                        continue
                    if key in result.seen:
                        result.errors.append(f"{self.path}: session {key} twice; one read")
                        continue
                    result.seen.add(key)
                    try:
                        read = self._read_session(
                            connection, session, cursors.get(key), start_new_at_end_before, now
                        )
                    except sqlite3.Error as exc:
                        result.errors.append(f"{self.path}: session {session.header.id}: {exc}")
                        continue
                    if read is not None:
                        result.reads.append(read)
        except sqlite3.Error as exc:
            result.errors.append(f"{self.path}: {exc}")
            # A locked or briefly unreadable store must not make every session look gone.
            result.seen.update(cursors)
        return result

    def _read_session(
        self,
        connection: sqlite3.Connection,
        session: _DbSession,
        raw_cursor: Cursor | None,
        start_new_at_end_before: float | None,
        now: float,
    ) -> SessionRead | None:
        header = session.header
        last = connection.execute(
            "SELECT seq, time FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
            (session.row_id,),
        ).fetchone()
        last_seq, last_time = (last[0], last[1]) if last else (-1, None)
        mtime = last_time / 1000 if isinstance(last_time, int | float) else None
        idle = mtime is None or now - mtime >= OPEN_TURN_RELEASE_SECONDS
        cursor = _DbCursor.parse(raw_cursor)
        continues = (
            cursor is not None
            and cursor.last <= last_seq
            and cursor.incarnation == session.incarnation
        )
        if cursor is not None and continues:
            if cursor.last == last_seq and not (cursor.held and idle):
                return None
            after_seq, state = cursor.seq, cursor.state
        else:
            cutoff = start_new_at_end_before
            if raw_cursor is None and cutoff is not None and mtime is not None and mtime < cutoff:
                return SessionRead(
                    source=KIND,
                    session=header.key,
                    messages=[],
                    cursor=_database_cursor(last_seq, last_seq, session, TurnState(), held=False),
                    mtime=mtime,
                    label=header.label,
                    cwd=header.cwd,
                )
            after_seq, state = -1, TurnState()
        digest, skipped = self._digest_events(connection, session, after_seq, state, idle=idle)
        new_cursor = _database_cursor(
            digest.last_seq, last_seq, session, digest.state, held=digest.hold is not None
        )
        reset = raw_cursor is not None and not continues
        if not (digest.messages or reset or skipped or new_cursor != raw_cursor):
            return None
        return SessionRead(
            source=KIND,
            session=header.key,
            messages=digest.messages,
            cursor=new_cursor,
            skipped_lines=skipped,
            reset=reset,
            mtime=mtime,
            label=header.label,
            cwd=header.cwd,
        )

    def _digest_events(
        self,
        connection: sqlite3.Connection,
        session: _DbSession,
        after_seq: int,
        state: TurnState,
        *,
        idle: bool,
    ) -> tuple[Digest, int]:
        """The session's messages after `after_seq`, and how many events could not be read."""
        digester = Digester(
            state=state, after_seq=after_seq, tool_result_max_chars=self.tool_result_max_chars
        )
        skipped = 0
        rows = connection.execute(
            "SELECT seq, type, time, data, surface_op FROM events"
            " WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session.row_id, after_seq),
        )
        for seq, event_type, event_time, data, surface_op in rows:
            if event_type in NOISE_EVENT_TYPES:
                continue
            try:
                record = {
                    "type": event_type,
                    "seq": seq,
                    "time": event_time,
                    "data": _row_data(data, self.max_line_bytes),
                }
            except (ValueError, RecursionError):
                skipped += 1
                continue
            if surface_op is not None:
                record["surfaceOp"] = _surface_op(surface_op)
            digester.add(PositionedEvent(record, seq, seq))
        digest = digester.finish(hold_open_turn=not idle)
        return digest, skipped


def _database_cursor(
    seq: int, last: int, session: _DbSession, state: TurnState, *, held: bool
) -> dict[str, Any]:
    return {
        "seq": seq,
        "last": last,
        "incarnation": session.incarnation,
        "held": held,
        "subagent": session.header.subagent,
        **state.to_cursor(),
    }
