"""Sessions (`sessions`, `pending`): each source's cursor, each session's watermark and the
messages it holds until they are reflected."""

import json
import sqlite3
from typing import Any, NamedTuple

from skilld.state.db import Database


class Held(NamedTuple):
    """What a session has read but not reflected, summarised so that the gates never decode
    it: messages `start .. start + size` (absolute indexes in the session)."""

    start: int = 0  # the watermark: messages before it were reflected
    size: int = 0
    chars: int = 0
    #: Just after the last message that finishes a turn (absolute), or None.
    finished_end: int | None = None
    #: user + assistant messages held, and those before `finished_end`; -1: not summarised.
    conversational: int = 0
    conversational_finished: int = 0
    last_append_at: float | None = None

    @property
    def end(self) -> int:
        return self.start + self.size


class SessionState:
    """A session's row: where its source stopped and what it holds. The daemon changes it in
    place as a tick reads and reflects, then saves it (`save_session`)."""

    __slots__ = (
        "attempts", "cursor", "cwd", "held", "key", "label", "last_reflect_at", "mtime", "source"
    )  # fmt: skip

    def __init__(
        self,
        key: str,
        source: str,
        cursor: dict[str, Any],
        held: Held,
        last_reflect_at: float | None,
        attempts: int,
        label: str | None,
        mtime: float | None,
        cwd: str | None = None,
    ) -> None:
        self.key = key
        self.source = source
        self.cursor = cursor
        self.held = held
        self.last_reflect_at = last_reflect_at
        self.attempts = attempts
        self.label = label
        self.mtime = mtime
        self.cwd = cwd

    def __repr__(self) -> str:
        return f"SessionState({self.key!r}, held={self.held!r}, attempts={self.attempts})"


class SessionTable(Database):
    def cursors(self, source: str) -> dict[str, dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT key, cursor FROM sessions WHERE source = ?", (source,)
        ).fetchall()
        return {row["key"]: json.loads(row["cursor"]) for row in rows}

    def session(self, key: str) -> SessionState | None:
        row = self.conn.execute("SELECT * FROM sessions WHERE key = ?", (key,)).fetchone()
        return _session(row) if row else None

    def session_source(self, key: str) -> str | None:
        """The id of the source whose session is stored under `key`, if any."""
        row = self.conn.execute("SELECT source FROM sessions WHERE key = ?", (key,)).fetchone()
        return row["source"] if row else None

    def sessions_with_pending(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT key FROM sessions WHERE pending_count > 0 ORDER BY COALESCE(mtime, 0), key"
        ).fetchall()
        return [row["key"] for row in rows]

    def save_session(self, state: SessionState) -> None:
        """Store a session's cursor, watermark and summary (its held messages are rows of their
        own: `append_held`, `drop_held`)."""
        held = state.held
        with self.transaction():
            self.conn.execute(
                """
                INSERT INTO sessions(key, source, cursor, reflected, pending_count,
                                     pending_chars, finished_end, conversational,
                                     conversational_finished, last_append_at, last_reflect_at,
                                     attempts, label, mtime, cwd, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(key) DO UPDATE SET
                    source = excluded.source, cursor = excluded.cursor,
                    reflected = excluded.reflected, pending_count = excluded.pending_count,
                    pending_chars = excluded.pending_chars,
                    finished_end = excluded.finished_end,
                    conversational = excluded.conversational,
                    conversational_finished = excluded.conversational_finished,
                    last_append_at = excluded.last_append_at,
                    last_reflect_at = excluded.last_reflect_at, attempts = excluded.attempts,
                    label = excluded.label, mtime = excluded.mtime, cwd = excluded.cwd,
                    updated_at = excluded.updated_at
                """,
                (
                    state.key,
                    state.source,
                    json.dumps(state.cursor),
                    held.start,
                    held.size,
                    held.chars,
                    held.finished_end,
                    held.conversational,
                    held.conversational_finished,
                    held.last_append_at,
                    state.last_reflect_at,
                    state.attempts,
                    state.label,
                    state.mtime,
                    state.cwd,
                    self._clock(),
                ),
            )

    def append_held(self, key: str, first_index: int, messages: list[dict[str, Any]]) -> None:
        with self.transaction():
            self.conn.executemany(
                "INSERT OR REPLACE INTO pending(session, idx, message) VALUES (?, ?, ?)",
                [
                    (key, first_index + offset, json.dumps(message, ensure_ascii=False))
                    for offset, message in enumerate(messages)
                ],
            )

    def held_messages(self, key: str, start: int, end: int) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT message FROM pending WHERE session = ? AND idx >= ? AND idx < ? ORDER BY idx",
            (key, start, end),
        ).fetchall()
        return [json.loads(row["message"]) for row in rows]

    def drop_held(self, key: str, before: int | None = None) -> None:
        """Forget held messages below index `before` (all of them when None)."""
        with self.transaction():
            if before is None:
                self.conn.execute("DELETE FROM pending WHERE session = ?", (key,))
            else:
                self.conn.execute(
                    "DELETE FROM pending WHERE session = ? AND idx < ?", (key, before)
                )

    def forget_sessions(self, source: str, keys: set[str]) -> list[str]:
        """Forget these sessions of `source` (no longer seen) unless they hold pending content.

        Returns the keys forgotten."""
        ordered = sorted(keys)
        gone: list[str] = []
        for start in range(0, len(ordered), 500):  # well under SQLite's variable limit
            batch = ordered[start : start + 500]
            rows = self.conn.execute(
                "SELECT key FROM sessions WHERE source = ? AND pending_count = 0"
                f" AND key IN ({','.join('?' * len(batch))})",
                (source, *batch),
            ).fetchall()
            gone.extend(row["key"] for row in rows)
        if gone:
            with self.transaction():
                self.conn.executemany("DELETE FROM sessions WHERE key = ?", [(k,) for k in gone])
                self.conn.executemany("DELETE FROM pending WHERE session = ?", [(k,) for k in gone])
        return gone

    def session_stats(self) -> dict[str, int]:
        row = self.conn.execute(
            "SELECT COUNT(*) AS tracked,"
            " COALESCE(SUM(pending_count > 0), 0) AS deferred,"
            " COALESCE(SUM(pending_count), 0) AS pending_messages,"
            " COALESCE(SUM(pending_chars), 0) AS pending_chars FROM sessions"
        ).fetchone()
        return dict(row)


def _session(row: sqlite3.Row) -> SessionState:
    return SessionState(
        key=row["key"],
        source=row["source"],
        cursor=json.loads(row["cursor"]),
        held=Held(
            start=row["reflected"],
            size=row["pending_count"],
            chars=row["pending_chars"],
            finished_end=row["finished_end"],
            conversational=row["conversational"],
            conversational_finished=row["conversational_finished"],
            last_append_at=row["last_append_at"],
        ),
        last_reflect_at=row["last_reflect_at"],
        attempts=row["attempts"],
        label=row["label"],
        mtime=row["mtime"],
        cwd=row["cwd"],
    )
