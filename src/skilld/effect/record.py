"""What the tick records about a session read for the effect measure, and what a window's
reflection is told about its failures' history (DESIGN.md §13).

Called by the tick inside its ingest transaction, for every read (reflected later or not), and
once per source by the backfill pass over history the tick itself never holds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from skilld.effect import store
from skilld.effect.extract import COUNTED_CLASSES, extract, utc_iso
from skilld.effect.targets import targeted_in_body
from skilld.effect.watch import Reach
from skilld.gitinfo import GitContext
from skilld.transcripts.model import Cursor, ScanResult, SessionRead

if TYPE_CHECKING:
    from skilld.state import StateDB

#: The source's scan again from other cursors (its binding's `scan`, by stored keys).
Rescan = Callable[[Mapping[str, Cursor]], Awaitable[ScanResult]]


def record_session_read(
    conn: sqlite3.Connection,
    read: SessionRead,
    library: str,
    first_seq: int,
    observed: GitContext | None,
    seen_at: str,
    batch: list[store.ReadRecord] | None = None,
) -> None:
    """Record the runs and failures of `read`, whose first message is the session's message
    `first_seq`, and the session's facts (its repository: as the transcript records it, else
    as the working directory's checkout shows it, and so is the branch of each failure the
    transcript does not give one; when it started: its first message's time,
    else `seen_at`, ISO UTC). With `batch`, the record is added to it for one
    `store.record_reads` of all a tick's reads."""
    if read.reset:
        store.forget_from(conn, read.session, first_seq)
    extraction = extract(read.messages, first_seq, cwd=read.cwd)
    first_ts = utc_iso(next((m.timestamp for m in read.messages if m.timestamp), None))
    facts = store.SessionFacts(
        read.session,
        read.source,
        library,
        _repository(read) or (observed.repository if observed is not None else None),
        first_ts or seen_at,
    )
    failures = extraction.failures
    if observed is not None and observed.branch is not None:
        # The transcript did not say which branch: the checkout does.
        failures = [f if f.branch else f._replace(branch=observed.branch) for f in failures]
    record = store.ReadRecord(facts, extraction.runs, failures)
    if batch is None:
        store.record_reads(conn, [record])
    else:
        batch.append(record)


class Recorder:
    """The effect rows of one source's reads in a tick: each read is extracted as the tick
    holds it, and all are written in one statement per table when the block that uses the
    recorder ends without an error (inside the caller's transaction). What they reach is
    added to `reach`."""

    def __init__(
        self,
        state: StateDB,
        library: str,
        observe: Callable[[str | None], GitContext | None],
        now: float,
        reach: Reach,
    ) -> None:
        self.state, self.library, self.observe, self.reach = state, library, observe, reach
        self.seen_at = _iso(now)
        self.batch: list[store.ReadRecord] = []

    def add(self, read: SessionRead, first_seq: int, cwd: str | None) -> None:
        """`read`, whose first message is the session's message `first_seq`; `cwd` is where
        the session worked when the read does not say. Inside the caller's transaction."""
        observed = self.observe(getattr(read, "cwd", None) or cwd)
        if read.reset:
            self.reach.known = False  # the failures of the replaced file are dropped
        conn = self.state.conn
        record_session_read(conn, read, self.library, first_seq, observed, self.seen_at, self.batch)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, error: type[BaseException] | None, *rest: object) -> None:
        if error is None:
            self.reach.record(self.state.conn, self.batch)
        self.batch = []

    async def history(
        self, rescan: Rescan, cursors: Mapping[str, Cursor], scan: ScanResult, first_look: bool
    ) -> None:
        """On a source's first look that saw its files (a failed look is no first look), the
        history the backfill window left at its end: see `record_history`."""
        if first_look and (scan.seen or not scan.errors):
            self.reach.known = False  # what history holds is not counted
            await record_history(self.state, rescan, self.library, cursors, scan, self.observe)


def record_session_loads(
    state: StateDB, loads: Mapping[tuple[str, str], set[str]], reach: Reach
) -> None:
    """The skills each (library, session) loaded, in one transaction; they are added to
    `reach`."""
    with state.transaction() as conn:
        for (library, session), names in loads.items():
            store.record_loads(conn, session, library, names)
            reach.skills.update((library, name) for name in names)


async def record_history(
    state: StateDB,
    rescan: Rescan,
    library: str,
    cursors: Mapping[str, Cursor],
    scan: ScanResult,
    observe: Callable[[str | None], GitContext | None],
) -> None:
    """On a source's first look: the sessions `scan` started at their end (older than the
    backfill window) are read again from their start, once, for the effect tables only:
    recorded, never held, never reflected. Their messages are numbered below zero, before
    those the tick will hold from index 0."""
    skipped = {read.session for read in scan.reads if not read.messages}
    if not skipped:
        return
    known = {key: cursor for key, cursor in cursors.items() if key not in skipped}
    history = await rescan(known)
    batch: list[store.ReadRecord] = []
    with state.transaction() as conn:
        for read in history.reads:
            if read.session in skipped and read.messages:
                record_session_read(
                    conn,
                    read._replace(reset=False),
                    library,
                    -len(read.messages),
                    observe(read.cwd),
                    _iso(read.mtime if read.mtime is not None else 0.0),
                    batch,
                )
        store.record_reads(conn, batch)


class Window(Protocol):
    """A window of a session, as the tick reflects it."""

    @property
    def session(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def git(self) -> GitContext | None: ...
    @property
    def first_message(self) -> int: ...
    @property
    def last_message(self) -> int: ...


def window_history(conn: sqlite3.Connection, window: Window) -> list[tuple[int, str]]:
    """(earlier sessions, signature) for each counted failure (real, hook, masked) the window
    shows that also failed in earlier sessions of the same agent (and repository, when known)."""
    session, source, git = window.session, window.source, window.git
    first_message, last_message = window.first_message, window.last_message
    repository = git.repository if git is not None else None
    seen: set[str] = set()
    history: list[tuple[int, str]] = []
    for failure in store.window_failures(conn, session, first_message, last_message):
        if failure.cls not in COUNTED_CLASSES or failure.signature in seen:
            continue
        seen.add(failure.signature)
        count = store.recurrences(conn, failure.signature, repository, source, session)
        if count:
            history.append((count, failure.signature))
    return history


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")


def _repository(read: SessionRead) -> str | None:
    for message in reversed(read.messages):
        if message.git is not None and message.git.repository:
            return message.git.repository
    return None


#: state.db meta: the id of the first learning event `backfill_targets` has not settled.
TARGETS_FROM_KEY = "effect_targets_from"


def backfill_targets(state: StateDB, body_of: Callable[[str, str], str | None]) -> int:
    """Work out what each version written before targets were recorded targets, once: the
    counted failures of its window, resolved there (what such a version was credited with
    before), whose command head the skill's body names (`body_of(library, name)`: the text
    on disk; None when its library is not at hand now, to be tried again). Kept in
    `effect_targets` by the version's event id; how many were settled."""
    conn = state.conn
    start = int(state.get_meta(TARGETS_FROM_KEY, 0) or 0)
    rows = conn.execute(
        "SELECT id, library, skill, session, json_extract(detail, '$.messages[0]'),"
        " json_extract(detail, '$.messages[1]') FROM events"
        " WHERE id >= ? AND kind IN ('created', 'updated', 'merged') AND skill IS NOT NULL"
        " AND json_type(detail, '$.messages[0]') = 'integer'"
        " AND json_type(detail, '$.messages[1]') = 'integer'"
        " AND json_type(detail, '$.targets') IS NULL"
        " AND NOT EXISTS (SELECT 1 FROM effect_targets AS t WHERE t.event = events.id)"
        " ORDER BY id",
        (start,),
    ).fetchall()
    newest = conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]
    settled: list[tuple[int, str]] = []
    waiting: int | None = None
    for event, library, name, session, first, last in rows:
        body = body_of(library, name)
        if body is None:
            waiting = event if waiting is None else waiting
            continue
        shown = [
            (failure.signature, failure.command)
            for failure in store.window_failures(conn, session, first, last)
            if failure.cls in COUNTED_CLASSES and failure.resolved
        ]
        settled.append((event, json.dumps(targeted_in_body(shown, body))))
    with state.transaction():
        conn.executemany("INSERT OR IGNORE INTO effect_targets VALUES (?, ?)", settled)
        state.set_meta(TARGETS_FROM_KEY, waiting if waiting is not None else newest + 1)
    return len(settled)
