"""`<state_dir>/state.db`: the connection, the schema and its migrations, and the meta values.

Plain `sqlite3`: WAL so that the CLI reads while the daemon writes, a busy timeout so that
neither fails on contention, and `PRAGMA user_version` for the schema version (migrations are
additive; a newer schema refuses to start). Each table family is read and written by a module
of its own beside this one; `skilld.state.StateDB` is made of them.
"""

import contextlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from skilld.errors import StateError
from skilld.fsutil import PRIVATE_FILE_MODE, private_dir

#: How long a writer waits for another's lock before giving up (seconds).
BUSY_TIMEOUT_SECONDS = 30

SCHEMA_VERSION = 6

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

# Version 4: what the transcripts show about each skill's effect (DESIGN.md §13; written and
# read by skilld.effect.store): sessions, the command heads they ran, failing tool calls, and
# the skills each session loaded.
_V4 = """
    CREATE TABLE IF NOT EXISTS effect_sessions (
        session    TEXT PRIMARY KEY,
        source     TEXT NOT NULL,
        library    TEXT,
        repository TEXT,
        first_ts   TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS effect_runs (
        session  TEXT NOT NULL,
        command  TEXT NOT NULL,
        ok       INTEGER NOT NULL DEFAULT 0,
        failed   INTEGER NOT NULL DEFAULT 0,
        first_ts TEXT,
        -- the session's agent, repository and first message (effect_sessions), on each row
        -- so that a skill's exposures are one index range count (skilld.effect.report)
        source     TEXT NOT NULL DEFAULT '',
        repository TEXT,
        session_ts TEXT,
        PRIMARY KEY (session, command)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS effect_runs_exposure
        ON effect_runs(command, source, repository, session_ts);
    CREATE TABLE IF NOT EXISTS effect_failures (
        id        INTEGER PRIMARY KEY,
        session   TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        ts        TEXT,
        tool      TEXT NOT NULL,
        command   TEXT NOT NULL,
        signature TEXT NOT NULL,
        error     TEXT NOT NULL,
        class     TEXT NOT NULL,
        exit_code INTEGER,
        resolved  INTEGER NOT NULL DEFAULT 0,
        source     TEXT NOT NULL DEFAULT '',
        repository TEXT,
        session_ts TEXT,
        UNIQUE (session, seq)
    );
    CREATE INDEX IF NOT EXISTS effect_failures_exposure
        ON effect_failures(signature, source, repository, session_ts, class, session);
    CREATE INDEX IF NOT EXISTS effect_failures_signature ON effect_failures(signature, session);
    -- What failed since a day (the overview's week), its time unknown: its session's start.
    CREATE INDEX IF NOT EXISTS effect_failures_recent ON effect_failures(ts, session_ts);
    -- The versions learned from a window (skilld.effect.report reads them with these very
    -- terms): a few among a log of every decision.
    CREATE INDEX IF NOT EXISTS events_learned ON events(library, skill, id)
        WHERE kind IN ('created', 'updated', 'merged')
        AND json_type(detail, '$.messages[0]') = 'integer';
    CREATE TABLE IF NOT EXISTS effect_loads (
        session TEXT NOT NULL,
        library TEXT NOT NULL,
        name    TEXT NOT NULL,
        PRIMARY KEY (session, library, name)
    ) WITHOUT ROWID;
"""

# Version 5: where each failure happened (DESIGN.md §13 "Occurrences"): the agent's own id of
# the call, the command as run, the error line as read and the branch, on each row, and the
# failure's stable id (`skilld.effect.failure_id` of its signature) that `skilld failures show`
# looks its occurrences up by. Rows recorded before keep no command, line or call id.
_V5 = """
    ALTER TABLE effect_failures ADD COLUMN failure_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE effect_failures ADD COLUMN call_id TEXT;
    ALTER TABLE effect_failures ADD COLUMN run TEXT;
    ALTER TABLE effect_failures ADD COLUMN line TEXT;
    ALTER TABLE effect_failures ADD COLUMN branch TEXT;
    UPDATE effect_failures SET failure_id = skilld_failure_id(signature);
    -- A failure's occurrences, oldest first (skilld.effect.store.failure_occurrences).
    CREATE INDEX IF NOT EXISTS effect_failures_id
        ON effect_failures(failure_id, COALESCE(ts, session_ts), session, seq);
"""

# Version 6: what each version written before targets were recorded targets (DESIGN.md §13,
# "What a skill targets"): a version's event carries its `targets` since; for an older one,
# `skilld.effect.record.backfill_targets` works them out once from the skill's body and keeps
# them here, by the event's id (the log itself is never rewritten).
_V6 = """
    CREATE TABLE IF NOT EXISTS effect_targets (
        event   INTEGER PRIMARY KEY,
        targets TEXT NOT NULL
    );
"""

_MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6)


_ADD_COLUMN = re.compile(r"\s*ALTER TABLE (\w+) ADD COLUMN (\w+)", re.IGNORECASE)


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


class Database:
    """The connection to state.db: its schema, migrations, transactions and meta values.
    The tables are read and written by the classes `StateDB` is made of (`skilld.state`)."""

    def __init__(self, path: Path, *, clock: Any = time.time) -> None:
        self.path = path
        self._clock = clock
        private_dir(path.parent)
        # SQLite gives the -wal and -shm files the database's own mode: 0600 from the start.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
        try:
            self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        except sqlite3.Error as exc:
            raise StateError(f"cannot open {path}: {exc}") from None
        self.conn.row_factory = sqlite3.Row
        self._depth = 0
        try:
            # `timeout` above is SQLite's busy timeout already: no PRAGMA busy_timeout.
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
        # What a migration computes that SQL has no function for (imported here: a one-shot
        # command opens a migrated file and loads none of it).
        from skilld.effect import failure_id

        self.conn.create_function("skilld_failure_id", 1, failure_id, deterministic=True)
        with self.transaction():
            version = self._schema_version()
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _statements(_MIGRATIONS[target - 1]):
                    if not self._has_column_added_by(statement):
                        self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version = {target}")
        if version > SCHEMA_VERSION:
            self.conn.close()
            raise StateError(
                f"{self.path} has schema version {version}, newer than this skilld "
                f"understands ({SCHEMA_VERSION}); upgrade skilld"
            )

    def _has_column_added_by(self, statement: str) -> bool:
        """Whether `statement` adds a column its table has already: a file whose version was
        set back (by hand, or by a test) runs the migrations again, and SQLite has no `ADD
        COLUMN IF NOT EXISTS`."""
        added = _ADD_COLUMN.match(statement)
        if added is None:
            return False
        table, column = added.groups()
        columns = self.conn.execute(f"PRAGMA table_info({table})").fetchall()
        return any(row[1] == column for row in columns)

    def _schema_version(self) -> int:
        version: int = self.conn.execute("PRAGMA user_version").fetchone()[0]
        return version

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
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
