"""What the tick records about a session read for the effect measure, and what a window's
reflection is told about its failures' history (DESIGN.md §13).

Called by the tick inside its ingest transaction, for every read (reflected later or not), and
once per source by the backfill pass over history the tick itself never holds.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from skilld.effect import store
from skilld.effect.extract import COUNTED_CLASSES, extract, utc_iso
from skilld.gitinfo import GitContext
from skilld.transcripts.model import SessionRead


def record_session_read(
    conn: sqlite3.Connection,
    read: SessionRead,
    *,
    library: str,
    first_seq: int,
    observed: GitContext | None,
    now: float,
    batch: list[store.ReadRecord] | None = None,
) -> None:
    """Record the runs and failures of `read`, whose first message is the session's message
    `first_seq`, and the session's facts (its repository: as the transcript records it, else
    as the working directory's checkout shows it). With `batch`, the record is added to it
    for one `store.record_reads` of all a tick's reads."""
    if read.reset:
        store.forget_from(conn, read.session, first_seq)
    extraction = extract(read.messages, first_seq, cwd=read.cwd)
    first_ts = utc_iso(next((m.timestamp for m in read.messages if m.timestamp), None))
    facts = store.SessionFacts(
        read.session,
        read.source,
        library,
        _repository(read) or (observed.repository if observed is not None else None),
        first_ts or datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
    )
    record = store.ReadRecord(facts, extraction.runs, extraction.failures)
    if batch is None:
        store.record_reads(conn, [record])
    else:
        batch.append(record)


def record_backfill(
    conn: sqlite3.Connection, read: SessionRead, *, library: str, observed: GitContext | None
) -> None:
    """Record a session's history the tick started at its end (older than the backfill
    window): numbered below zero, before the messages the tick will hold from index 0."""
    if read.messages:
        record_session_read(
            conn,
            read._replace(reset=False),
            library=library,
            first_seq=-len(read.messages),
            observed=observed,
            now=read.mtime if read.mtime is not None else 0.0,
        )


def window_history(
    conn: sqlite3.Connection,
    *,
    session: str,
    source: str,
    repository: str | None,
    first_message: int,
    last_message: int,
) -> list[tuple[int, str]]:
    """(earlier sessions, signature) for each real or hook failure the window shows that also
    failed in earlier sessions of the same agent (and repository, when known)."""
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


def _repository(read: SessionRead) -> str | None:
    for message in reversed(read.messages):
        if message.git is not None and message.git.repository:
            return message.git.repository
    return None
