"""`<state_dir>/state.db`: cursors, watermarks, provenance and the event log, in one SQLite file.

This module owns the schema. It is plain `sqlite3`: WAL so that the CLI reads while the daemon
writes, a busy timeout so that neither fails on contention, and `PRAGMA user_version` for the
schema version (migrations are additive; a newer schema refuses to start).
"""

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from skilld.errors import StateError
from skilld.log import get_logger

#: How long a writer waits for another's lock before giving up (seconds).
BUSY_TIMEOUT_SECONDS = 30

SCHEMA_VERSION = 3

#: Event kinds (docs/design.md plus the library's own operations).
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
        # the daemon
        "agent_found",
        # curator
        "stale",
        "reactivated",
        "merged",
        "consolidation_refused",
        # team libraries
        "conflict",
        "synced",
        # an action taken through the web panel (what, on which skill)
        "web",
        "sync_refused",
    }
)

_V1 = """
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
"""

# Version 2: libraries (provenance per library, events name theirs), held messages one row
# each (an append costs what it adds, not the whole backlog), judged proposals kept until
# written, and which sessions used which skill.
_V2 = """
    CREATE TABLE provenance_v2 (
        library        TEXT NOT NULL,
        name           TEXT NOT NULL,
        path           TEXT NOT NULL,
        sha256         TEXT NOT NULL,
        prev_sha256    TEXT,
        session        TEXT,
        first_message  INTEGER,
        last_message   INTEGER,
        model          TEXT,
        prompt_version TEXT,
        created_at     TEXT NOT NULL,
        updated_at     TEXT NOT NULL,
        PRIMARY KEY (library, name)
    );
    INSERT INTO provenance_v2
        SELECT '', name, path, sha256, prev_sha256, session, first_message, last_message,
               model, prompt_version, created_at, updated_at
        FROM provenance;
    DROP TABLE provenance;
    ALTER TABLE provenance_v2 RENAME TO provenance;
    ALTER TABLE events ADD COLUMN library TEXT;
    CREATE INDEX events_library ON events(library, id);
    ALTER TABLE sessions ADD COLUMN cwd TEXT;
    ALTER TABLE sessions ADD COLUMN last_append_at REAL;
    ALTER TABLE sessions ADD COLUMN finished_end INTEGER;
    ALTER TABLE sessions ADD COLUMN conversational INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN conversational_finished INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE pending (
        session TEXT NOT NULL,
        idx     INTEGER NOT NULL,
        message TEXT NOT NULL,
        PRIMARY KEY (session, idx)
    ) WITHOUT ROWID;
    INSERT INTO pending
        SELECT s.key, s.reflected + CAST(j.key AS INTEGER), j.value
        FROM sessions AS s, json_each(s.pending) AS j;
    -- -1: not summarised yet; the supervisor summarises such a session from its rows once.
    UPDATE sessions SET pending = '[]', hold = NULL, last_append_at = updated_at,
                        conversational = -1;
    CREATE TABLE proposals (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        library       TEXT NOT NULL,
        session       TEXT,
        source        TEXT,
        first_message INTEGER,
        last_message  INTEGER,
        body          TEXT NOT NULL,
        status        TEXT NOT NULL,
        note          TEXT,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL
    );
    CREATE TABLE skill_uses (
        library TEXT NOT NULL,
        name    TEXT NOT NULL,
        session TEXT NOT NULL,
        uses    INTEGER NOT NULL,
        last_at TEXT NOT NULL,
        PRIMARY KEY (library, name, session)
    ) WITHOUT ROWID;
"""

# Version 3: where the current version of a skill was learned (gitinfo.GitContext as JSON).
_V3 = """
    ALTER TABLE provenance ADD COLUMN git TEXT;
"""

_MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)


def _statements(script: str) -> Iterator[str]:
    """A migration script's statements one by one: `executescript` would commit the
    transaction they must run in."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""


def utc_now_iso(now: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.isoformat(timespec="seconds")


class Event(NamedTuple):
    id: int
    ts: str
    kind: str
    skill: str | None
    session: str | None
    source: str | None
    reason: str | None
    detail: dict[str, Any]
    library: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "library": self.library,
            "skill": self.skill,
            "session": self.session,
            "source": self.source,
            "reason": self.reason,
            "detail": self.detail,
        }


class Provenance(NamedTuple):
    library: str
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
    #: The git context (JSON) of the window that wrote the current version; None when unknown
    #: or written by hand.
    git: str | None = None


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


class KeptProposal(NamedTuple):
    """A judged proposal waiting to be written (room under the cap, a write fault fixed)."""

    id: int
    library: str
    session: str | None
    source: str | None
    first_message: int | None
    last_message: int | None
    body: dict[str, Any]
    status: str  # "new", "cap", "failed"
    note: str | None
    created_at: float


class StateDB:
    def __init__(self, path: Path, *, clock: Any = time.time) -> None:
        self.path = path
        self._clock = clock
        self._log = get_logger("skilld.events")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        except sqlite3.Error as exc:
            raise StateError(f"cannot open {path}: {exc}") from None
        self.conn.row_factory = sqlite3.Row
        self._depth = 0
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_SECONDS * 1000}")
            self._use_wal()
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise StateError(f"{path} is not a usable state database: {exc}") from None

    # -- lifecycle ---------------------------------------------------------------------------

    def _use_wal(self) -> None:
        """Put the file in WAL mode, which it keeps: only its first opener converts it.

        Converting needs the file to itself, and SQLite answers "busy" at once instead of
        running the busy handler: processes that open a new state.db together (a few CLI
        commands, the daemon) would fail. The conversion is retried within the busy timeout.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
        while True:
            try:
                if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self.conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(0.005)

    def _migrate(self) -> None:
        if self._schema_version() == SCHEMA_VERSION:
            return
        # Several processes may open a new (or older) file at once (the daemon, an agent's
        # hooks, an MCP server): the version is read again under the write lock, so that only
        # the first migrates. One transaction: a crash mid-migration leaves the old version.
        with self.transaction():
            version = self._schema_version()
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _statements(_MIGRATIONS[target - 1]):
                    self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version = {target}")
        if version > SCHEMA_VERSION:
            self.conn.close()
            raise StateError(
                f"{self.path} has schema version {version}, newer than this skilld "
                f"understands ({SCHEMA_VERSION}); upgrade skilld"
            )

    def _schema_version(self) -> int:
        version: int = self.conn.execute("PRAGMA user_version").fetchone()[0]
        return version

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "StateDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; nested uses join the outer one.

        A failed COMMIT (the disk is full, the database is locked past the busy timeout) rolls
        back, so the connection never stays inside a transaction nobody will finish.
        """
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
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        finally:
            self._depth = 0

    # -- events ------------------------------------------------------------------------------

    def add_event(
        self,
        kind: str,
        *,
        library: str | None = None,
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
                "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (ts, kind, library, skill, session, source, reason, detail_json),
            )
        level = (
            "error" if kind in ("error", "usage_corrupt", "conflict", "sync_refused") else "info"
        )
        fields = {
            "library": library,
            "skill": skill,
            "session": session,
            "source": source,
            "reason": reason,
        }
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
        library: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        after_id: int = 0,
        before_id: int | None = None,
    ) -> list[Event]:
        """Newest last. `limit` keeps the newest `limit` matching events (those before
        `before_id`, when given: a page of a log read newest first)."""
        clauses: list[str] = ["id > ?"]
        params: list[Any] = [after_id]
        if before_id is not None:
            clauses.append("id < ?")
            params.append(before_id)
        # A skill names few events: with one given, only its index is used (a unary `+` keeps
        # SQLite from walking a library's or a kind's events instead, 1,000x slower at 1M).
        unindexed = "+" if skill is not None else ""
        if kinds:
            clauses.append(f"{unindexed}kind IN ({','.join('?' * len(kinds))})")
            params.extend(kinds)
        if skill is not None:
            clauses.append("skill = ?")
            params.append(skill)
        if library is not None:
            clauses.append(f"{unindexed}library = ?")
            params.append(library)
        if since is not None:
            clauses.append("ts >= ?")
            params.append(since)
        sql = f"SELECT * FROM events WHERE {' AND '.join(clauses)} ORDER BY id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self.conn.execute(sql, params).fetchall()
        return [_event(row) for row in reversed(rows)]

    # -- provenance --------------------------------------------------------------------------

    def provenance(self, library: str, name: str) -> Provenance | None:
        row = self.conn.execute(
            "SELECT * FROM provenance WHERE library = ? AND name = ?", (library, name)
        ).fetchone()
        return Provenance(**dict(row)) if row else None

    def all_provenance(self, library: str) -> dict[str, Provenance]:
        # The columns named in the record's order, so each row becomes one without a dict
        # (listing 10,000 skills reads 10,000 rows).
        rows = self.conn.execute(
            f"SELECT {', '.join(Provenance._fields)} FROM provenance WHERE library = ?",
            (library,),
        )
        return {row[1]: Provenance._make(row) for row in rows.fetchall()}

    def adopt_provenance(
        self, library: str, root: Path, orphans: Iterable[str]
    ) -> list[tuple[str, str]]:
        """Give the rows of libraries no longer configured (`orphans`; '' for rows written
        before libraries existed) to `library` when its root holds their file: a library
        renamed, or a `[skills] dir` replaced by the agent's own library over the same folder,
        keeps knowing which skills are skilld's. Returns (old library, name) of each."""
        prefix = str(root).rstrip("/") + "/"
        adopted: list[tuple[str, str]] = []
        for orphan in orphans:
            rows = self.conn.execute(
                "SELECT name, path FROM provenance WHERE library = ?", (orphan,)
            ).fetchall()
            adopted += [(orphan, row["name"]) for row in rows if row["path"].startswith(prefix)]
        if adopted:
            with self.transaction():
                self.conn.executemany(
                    "UPDATE OR IGNORE provenance SET library = ? WHERE library = ? AND name = ?",
                    [(library, orphan, name) for orphan, name in adopted],
                )
        return adopted

    def library_names(self) -> list[str]:
        """Every library skilld has written into (provenance names it; '' is the library of
        the rows written before libraries existed)."""
        rows = self.conn.execute("SELECT DISTINCT library FROM provenance")
        return sorted(row["library"] for row in rows.fetchall())

    def put_provenance(
        self,
        library: str,
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
        git: Mapping[str, Any] | None = None,
    ) -> None:
        now = utc_now_iso(self._clock())
        with self.transaction():
            self.conn.execute(
                """
                INSERT INTO provenance(library, name, path, sha256, prev_sha256, session,
                                       first_message, last_message, model, prompt_version,
                                       created_at, updated_at, git)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(library, name) DO UPDATE SET
                    path = excluded.path, sha256 = excluded.sha256,
                    prev_sha256 = excluded.prev_sha256,
                    session = COALESCE(excluded.session, provenance.session),
                    first_message = COALESCE(excluded.first_message, provenance.first_message),
                    last_message = COALESCE(excluded.last_message, provenance.last_message),
                    model = COALESCE(excluded.model, provenance.model),
                    prompt_version = COALESCE(excluded.prompt_version, provenance.prompt_version),
                    updated_at = excluded.updated_at, git = excluded.git
                """,
                (
                    library,
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
                    json.dumps(dict(git), separators=(",", ":")) if git is not None else None,
                ),
            )

    def settle_provenance(self, library: str, name: str, sha256: str) -> None:
        """The file now holds `sha256` for good: forget the hash it replaced. A no-op when a
        later write has recorded another hash meanwhile."""
        with self.transaction():
            self.conn.execute(
                "UPDATE provenance SET prev_sha256 = NULL"
                " WHERE library = ? AND name = ? AND sha256 = ?",
                (library, name, sha256),
            )

    def move_provenance(self, library: str, name: str, path: str) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE provenance SET path = ? WHERE library = ? AND name = ?",
                (path, library, name),
            )

    def drop_provenance(self, library: str, name: str) -> None:
        with self.transaction():
            self.conn.execute(
                "DELETE FROM provenance WHERE library = ? AND name = ?", (library, name)
            )

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

    # -- kept proposals ----------------------------------------------------------------------

    def keep_proposal(
        self,
        library: str,
        body: Mapping[str, Any],
        *,
        session: str | None,
        source: str | None,
        first_message: int | None,
        last_message: int | None,
    ) -> int:
        now = self._clock()
        with self.transaction():
            cursor = self.conn.execute(
                "INSERT INTO proposals(library, session, source, first_message, last_message,"
                " body, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'new', ?, ?)",
                (
                    library,
                    session,
                    source,
                    first_message,
                    last_message,
                    json.dumps(dict(body), ensure_ascii=False),
                    now,
                    now,
                ),
            )
        return int(cursor.lastrowid or 0)

    def kept_proposals(self, library: str | None = None) -> list[KeptProposal]:
        sql, params = "SELECT * FROM proposals", []
        if library is not None:
            sql, params = sql + " WHERE library = ?", [library]
        rows = self.conn.execute(sql + " ORDER BY id", params).fetchall()
        return [_proposal(row) for row in rows]

    def update_proposal(
        self,
        proposal_id: int,
        *,
        status: str,
        note: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE proposals SET status = ?, note = ?, updated_at = ?,"
                " body = COALESCE(?, body) WHERE id = ?",
                (
                    status,
                    note,
                    self._clock(),
                    json.dumps(dict(body), ensure_ascii=False) if body is not None else None,
                    proposal_id,
                ),
            )

    def drop_proposal(self, proposal_id: int) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM proposals WHERE id = ?", (proposal_id,))

    def proposal_counts(self) -> dict[str, dict[str, int]]:
        """library -> status -> how many proposals wait."""
        counts: dict[str, dict[str, int]] = {}
        rows = self.conn.execute(
            "SELECT library, status, COUNT(*) AS n FROM proposals GROUP BY library, status"
        )
        for row in rows.fetchall():
            counts.setdefault(row["library"], {})[row["status"]] = row["n"]
        return counts

    # -- which sessions used a skill ---------------------------------------------------------

    def record_uses(self, library: str, uses: Mapping[tuple[str, str], int], at: str) -> None:
        """Add `count` uses of skill `name` by `session` for each ((name, session), count)."""
        with self.transaction():
            self.conn.executemany(
                "INSERT INTO skill_uses(library, name, session, uses, last_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(library, name, session) DO UPDATE SET"
                " uses = uses + excluded.uses, last_at = excluded.last_at",
                [(library, name, session, n, at) for (name, session), n in uses.items()],
            )

    def skill_sessions(self, library: str, name: str) -> list[tuple[str, int, str]]:
        """(session, uses, last use) for every session that used the skill, newest first."""
        rows = self.conn.execute(
            "SELECT session, uses, last_at FROM skill_uses WHERE library = ? AND name = ?"
            " ORDER BY last_at DESC",
            (library, name),
        ).fetchall()
        return [(row["session"], row["uses"], row["last_at"]) for row in rows]

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
        library=row["library"],
    )


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


def _proposal(row: sqlite3.Row) -> KeptProposal:
    return KeptProposal(
        id=row["id"],
        library=row["library"],
        session=row["session"],
        source=row["source"],
        first_message=row["first_message"],
        last_message=row["last_message"],
        body=json.loads(row["body"]),
        status=row["status"],
        note=row["note"],
        created_at=row["created_at"],
    )


def process_alive(pid: object) -> bool:
    """Whether `pid` names a running process (a daemon's, recorded in meta `daemon`)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


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

    def __enter__(self) -> "DaemonLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
