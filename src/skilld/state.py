"""`<state_dir>/state.db`: cursors, watermarks, provenance and the event log, in one SQLite file.

This module owns the schema. It is plain `sqlite3`: WAL so that the CLI reads while the daemon
writes, a busy timeout so that neither fails on contention, and `PRAGMA user_version` for the
schema version (migrations are additive; a newer schema refuses to start).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skilld.log import get_logger

SCHEMA_VERSION = 1

#: Event kinds (DESIGN.md §5.5 plus the library's own operations).
EVENT_KINDS = frozenset(
    {
        # evolution outcomes
        "created",
        "updated",
        "unchanged",
        "skipped",
        "invalid",
        "cap",
        "protected",
        "error",
        "redacted",
        "deferred",
        "staged",
        # library operations
        "written",
        "deleted",
        "pinned",
        "unpinned",
        "archived",
        "restored",
        "rolled_back",
        "approved",
        "rejected",
        "usage_corrupt",
        "warning",
        # curator
        "stale",
        "reactivated",
        "merged",
        "consolidation_refused",
    }
)

_MIGRATIONS: tuple[str, ...] = (
    # version 1
    """
    CREATE TABLE events (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        ts      TEXT NOT NULL,
        kind    TEXT NOT NULL,
        skill   TEXT,
        session TEXT,
        source  TEXT,
        reason  TEXT,
        detail  TEXT
    );
    CREATE INDEX events_kind ON events(kind, id);
    CREATE INDEX events_skill ON events(skill, id);
    CREATE INDEX events_ts ON events(ts);
    CREATE TABLE provenance (
        name           TEXT PRIMARY KEY,
        path           TEXT NOT NULL,
        sha256         TEXT NOT NULL,
        prev_sha256    TEXT,
        session        TEXT,
        first_message  INTEGER,
        last_message   INTEGER,
        model          TEXT,
        prompt_version TEXT,
        created_at     TEXT NOT NULL,
        updated_at     TEXT NOT NULL
    );
    CREATE TABLE sessions (
        key              TEXT PRIMARY KEY,
        source           TEXT NOT NULL,
        cursor           TEXT NOT NULL,
        reflected        INTEGER NOT NULL DEFAULT 0,
        pending          TEXT NOT NULL DEFAULT '[]',
        pending_count    INTEGER NOT NULL DEFAULT 0,
        pending_chars    INTEGER NOT NULL DEFAULT 0,
        last_reflect_at  REAL,
        attempts         INTEGER NOT NULL DEFAULT 0,
        hold             TEXT,
        label            TEXT,
        mtime            REAL,
        updated_at       REAL NOT NULL
    );
    CREATE INDEX sessions_pending ON sessions(pending_count) WHERE pending_count > 0;
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
)


class StateError(RuntimeError):
    """state.db cannot be used (newer schema, unreadable, locked by another daemon)."""


def utc_now_iso(now: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    ts: str
    kind: str
    skill: str | None
    session: str | None
    source: str | None
    reason: str | None
    detail: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "skill": self.skill,
            "session": self.session,
            "source": self.source,
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Provenance:
    name: str
    path: str
    sha256: str
    prev_sha256: str | None
    session: str | None
    first_message: int | None
    last_message: int | None
    model: str | None
    prompt_version: str | None
    created_at: str
    updated_at: str


@dataclass(slots=True)
class SessionState:
    key: str
    source: str
    cursor: dict[str, Any]
    reflected: int  # messages already reflected (the watermark)
    pending: list[dict[str, Any]]  # messages read but not yet reflected, oldest first
    last_reflect_at: float | None
    attempts: int
    label: str | None
    mtime: float | None
    hold: str | None = None  # e.g. "cap": wait for room before reflecting again


class StateDB:
    def __init__(self, path: Path, *, clock: Any = time.time) -> None:
        self.path = path
        self._clock = clock
        self._log = get_logger("skilld.events")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise StateError(f"cannot open {path}: {exc}") from None
        self.conn.row_factory = sqlite3.Row
        self._depth = 0
        try:
            self.conn.execute("PRAGMA busy_timeout = 30000")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise StateError(f"{path} is not a usable state database: {exc}") from None

    # -- lifecycle ---------------------------------------------------------------------------

    def _migrate(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            self.conn.close()
            raise StateError(
                f"{self.path} has schema version {version}, newer than this skilld "
                f"understands ({SCHEMA_VERSION}); upgrade skilld"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            # One script, one transaction: a crash mid-migration leaves the old version.
            script = _MIGRATIONS[target - 1]
            self.conn.executescript(
                f"BEGIN IMMEDIATE; {script} PRAGMA user_version = {target}; COMMIT;"
            )

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> StateDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; nested uses join the outer one."""
        if self._depth:
            self._depth += 1
            try:
                yield self.conn
            finally:
                self._depth -= 1
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")
        finally:
            self._depth = 0

    # -- events ------------------------------------------------------------------------------

    def add_event(
        self,
        kind: str,
        *,
        skill: str | None = None,
        session: str | None = None,
        source: str | None = None,
        reason: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        ts = utc_now_iso(self._clock())
        detail_json = json.dumps(dict(detail or {}), ensure_ascii=False, default=str)
        with self.transaction():
            cursor = self.conn.execute(
                "INSERT INTO events(ts, kind, skill, session, source, reason, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ts, kind, skill, session, source, reason, detail_json),
            )
        level = "error" if kind in ("error", "usage_corrupt") else "info"
        fields = {"skill": skill, "session": session, "source": source, "reason": reason}
        line = {k: v for k, v in fields.items() if v is not None}
        for key, value in (detail or {}).items():
            # A detail key may repeat a column's name (or structlog's "event"): keep both.
            line[f"detail_{key}" if key in fields or key == "event" else key] = value
        getattr(self._log, level)(kind, **line)
        return int(cursor.lastrowid or 0)

    def events(
        self,
        *,
        kinds: tuple[str, ...] = (),
        skill: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        after_id: int = 0,
    ) -> list[Event]:
        """Newest last. `limit` keeps the newest `limit` matching events."""
        clauses, params = ["id > ?"], [after_id]
        if kinds:
            clauses.append(f"kind IN ({','.join('?' * len(kinds))})")
            params.extend(kinds)
        if skill is not None:
            clauses.append("skill = ?")
            params.append(skill)
        if since is not None:
            clauses.append("ts >= ?")
            params.append(since)
        sql = f"SELECT * FROM events WHERE {' AND '.join(clauses)} ORDER BY id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self.conn.execute(sql, params).fetchall()
        return [_event(row) for row in reversed(rows)]

    # -- provenance --------------------------------------------------------------------------

    def provenance(self, name: str) -> Provenance | None:
        row = self.conn.execute("SELECT * FROM provenance WHERE name = ?", (name,)).fetchone()
        return Provenance(**dict(row)) if row else None

    def all_provenance(self) -> dict[str, Provenance]:
        rows = self.conn.execute("SELECT * FROM provenance").fetchall()
        return {row["name"]: Provenance(**dict(row)) for row in rows}

    def put_provenance(
        self,
        name: str,
        *,
        path: str,
        sha256: str,
        prev_sha256: str | None = None,
        session: str | None = None,
        first_message: int | None = None,
        last_message: int | None = None,
        model: str | None = None,
        prompt_version: str | None = None,
    ) -> None:
        now = utc_now_iso(self._clock())
        with self.transaction():
            self.conn.execute(
                """
                INSERT INTO provenance(name, path, sha256, prev_sha256, session, first_message,
                                       last_message, model, prompt_version, created_at,
                                       updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(name) DO UPDATE SET
                    path = excluded.path, sha256 = excluded.sha256,
                    prev_sha256 = excluded.prev_sha256,
                    session = COALESCE(excluded.session, provenance.session),
                    first_message = COALESCE(excluded.first_message, provenance.first_message),
                    last_message = COALESCE(excluded.last_message, provenance.last_message),
                    model = COALESCE(excluded.model, provenance.model),
                    prompt_version = COALESCE(excluded.prompt_version, provenance.prompt_version),
                    updated_at = excluded.updated_at
                """,
                (
                    name,
                    path,
                    sha256,
                    prev_sha256,
                    session,
                    first_message,
                    last_message,
                    model,
                    prompt_version,
                    now,
                    now,
                ),
            )

    def drop_provenance(self, name: str) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM provenance WHERE name = ?", (name,))

    # -- sessions ----------------------------------------------------------------------------

    def cursors(self, source: str) -> dict[str, dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT key, cursor FROM sessions WHERE source = ?", (source,)
        ).fetchall()
        return {row["key"]: json.loads(row["cursor"]) for row in rows}

    def session(self, key: str) -> SessionState | None:
        row = self.conn.execute("SELECT * FROM sessions WHERE key = ?", (key,)).fetchone()
        return _session(row) if row else None

    def sessions_with_pending(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT key FROM sessions WHERE pending_count > 0 ORDER BY COALESCE(mtime, 0), key"
        ).fetchall()
        return [row["key"] for row in rows]

    def save_session(self, state: SessionState) -> None:
        pending_json = json.dumps(state.pending, ensure_ascii=False)
        pending_chars = sum(len(m.get("text", "")) for m in state.pending)
        with self.transaction():
            self.conn.execute(
                """
                INSERT INTO sessions(key, source, cursor, reflected, pending, pending_count,
                                     pending_chars, last_reflect_at, attempts, hold, label,
                                     mtime, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(key) DO UPDATE SET
                    source = excluded.source, cursor = excluded.cursor,
                    reflected = excluded.reflected, pending = excluded.pending,
                    pending_count = excluded.pending_count,
                    pending_chars = excluded.pending_chars,
                    last_reflect_at = excluded.last_reflect_at, attempts = excluded.attempts,
                    hold = excluded.hold, label = excluded.label, mtime = excluded.mtime,
                    updated_at = excluded.updated_at
                """,
                (
                    state.key,
                    state.source,
                    json.dumps(state.cursor),
                    state.reflected,
                    pending_json,
                    len(state.pending),
                    pending_chars,
                    state.last_reflect_at,
                    state.attempts,
                    state.hold,
                    state.label,
                    state.mtime,
                    self._clock(),
                ),
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
        return gone

    def session_stats(self) -> dict[str, int]:
        row = self.conn.execute(
            "SELECT COUNT(*) AS tracked,"
            " COALESCE(SUM(pending_count > 0), 0) AS deferred,"
            " COALESCE(SUM(pending_count), 0) AS pending_messages,"
            " COALESCE(SUM(pending_chars), 0) AS pending_chars FROM sessions"
        ).fetchone()
        return dict(row)

    # -- meta --------------------------------------------------------------------------------

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction():
            self.conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value, default=str)),
            )


def _event(row: sqlite3.Row) -> Event:
    detail = json.loads(row["detail"]) if row["detail"] else {}
    return Event(
        id=row["id"],
        ts=row["ts"],
        kind=row["kind"],
        skill=row["skill"],
        session=row["session"],
        source=row["source"],
        reason=row["reason"],
        detail=detail,
    )


def _session(row: sqlite3.Row) -> SessionState:
    return SessionState(
        key=row["key"],
        source=row["source"],
        cursor=json.loads(row["cursor"]),
        reflected=row["reflected"],
        pending=json.loads(row["pending"]),
        last_reflect_at=row["last_reflect_at"],
        attempts=row["attempts"],
        label=row["label"],
        mtime=row["mtime"],
        hold=row["hold"],
    )


class DaemonLock:
    """One daemon per state dir: an OS lock on `<state_dir>/daemon.lock` holding the pid."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "daemon.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateError(f"another skilld daemon (pid {holder}) holds {self.path}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DaemonLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
