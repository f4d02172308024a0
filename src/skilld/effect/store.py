"""The effect tables of state.db (DESIGN.md §13; their schema is migration `_V4` in state.py).

Plain sqlite3 connection in, values out; the caller owns the transaction. A session's messages
are numbered by the same absolute index the held messages and provenance windows use
(`pending.idx`, `first_message`..`last_message`), so a window selects its failures directly.
History read once by the backfill pass (sessions older than the backfill window, whose later
messages start at index 0) is numbered below zero: it never collides with a window.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from skilld.effect import failure_id
from skilld.effect.extract import (
    CLASSES,
    COUNTED_CLASSES,
    Failure,
    HeadRuns,
    ToolRun,
    combined,
    tally,
)

#: state.db meta: bumped by every write to the effect tables, so a measurement taken from them
#: can tell whether it still holds (`skilld.effect.report.measurement_stamp`).
GENERATION_KEY = "effect_generation"


def _changed(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, '1')"
        " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
        (GENERATION_KEY,),
    )


#: Binds where a value may be None. Python's sqlite3 looks for an adapter for every None it
#: binds (and fails to find one): a fifth of writing a tick's runs. '' is bound instead and
#: stored as NULL (no column holds an empty text).
_NULLABLE = "NULLIF(?, '')"


def _nullable(value: object) -> object:
    return "" if value is None else value


def _row_session(columns: tuple[str, str | None, str]) -> tuple[str, object, str]:
    """A session's (agent, repository, first message time), bound as a row's last columns."""
    source, repository, first_ts = columns
    return source, _nullable(repository), first_ts


def generation(conn: sqlite3.Connection) -> int:
    """How many writes the effect tables have had (0: none yet)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (GENERATION_KEY,)).fetchone()
    return int(row[0]) if row else 0


class SessionFacts(NamedTuple):
    session: str  # "<kind>:<id>"
    source: str  # the source kind (the agent)
    library: str | None
    repository: str | None  # normalised host/owner/repo
    first_ts: str  # ISO UTC of the session's first message (or when it was first seen)


class ReadRecord(NamedTuple):
    """What one read of a session showed."""

    facts: SessionFacts
    #: command head -> its runs in the read (`extract.tally`).
    runs: Mapping[str, HeadRuns]
    failures: Sequence[Failure]


def record_read(
    conn: sqlite3.Connection,
    facts: SessionFacts,
    runs: Sequence[ToolRun],
    failures: Sequence[Failure],
) -> None:
    """Record what one read of a session showed (see `record_reads`)."""
    record_reads(conn, [ReadRecord(facts, tally(runs), failures)])


def record_reads(conn: sqlite3.Connection, reads: Sequence[ReadRecord]) -> set[str]:
    """Record what reads of sessions showed, and resolve each session's earlier failures that
    a successful run of its read answers. Idempotent per (session, seq) for failures; a run is
    counted each time it is recorded. One statement per table for all the reads: a tick
    records every read it makes, and a statement costs more than the rows it writes.

    Each run and failure row carries its session's agent, repository and first message time
    as effect_sessions holds them after these reads (the rows of earlier reads are brought in
    step when those change), so the effect report counts exposures by index alone.

    Returns the sessions whose rows of earlier reads the writes changed: their agent,
    repository or start, or a failure an earlier read recorded, now resolved."""
    if not reads:
        return set()
    _changed(conn)
    sessions = sorted({read.facts.session for read in reads})
    before = _session_columns(conn, sessions)
    conn.executemany(
        "INSERT INTO effect_sessions(session, source, library, repository, first_ts)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT(session) DO UPDATE SET"
        " library = COALESCE(excluded.library, library),"
        " repository = COALESCE(excluded.repository, repository),"
        " first_ts = MIN(first_ts, excluded.first_ts)",
        [read.facts for read in reads],
    )
    current = _session_columns(conn, sessions)
    changed = [(*current[key], key) for key, value in before.items() if current[key] != value]
    for table in ("effect_runs", "effect_failures"):
        conn.executemany(
            f"UPDATE {table} SET source = ?, repository = ?, session_ts = ? WHERE session = ?",
            changed,
        )
    merged: dict[tuple[str, str], HeadRuns] = {}
    for read in reads:  # one session may be read twice in a tick
        for command, runs in read.runs.items():
            key = (read.facts.session, command)
            merged[key] = combined(merged[key], runs) if key in merged else runs
    last_ok = {key: runs.last_ok for key, runs in merged.items() if runs.last_ok is not None}
    first_seq: dict[str, int] = {}
    for (session, _), runs in merged.items():
        first_seq[session] = min(runs.first_seq, first_seq.get(session, runs.first_seq))
    if merged:
        conn.executemany(
            "INSERT INTO effect_runs(session, command, ok, failed, first_ts, source,"
            f" repository, session_ts) VALUES (?, ?, ?, ?, {_NULLABLE}, ?, {_NULLABLE}, ?)"
            " ON CONFLICT(session, command) DO UPDATE SET"
            " ok = ok + excluded.ok, failed = failed + excluded.failed,"
            " first_ts = COALESCE(MIN(first_ts, excluded.first_ts), first_ts, excluded.first_ts)",
            [
                (
                    *key,
                    runs.ok,
                    runs.failed,
                    _nullable(runs.first_ts),
                    *_row_session(current[key[0]]),
                )
                for key, runs in merged.items()
            ],
        )
    failures = [
        (read.facts.session, f.seq, _nullable(f.ts), f.tool, f.command, f.error, f.signature,
         f.cls, _nullable(f.exit_code), int(f.resolved), *_row_session(current[read.facts.session]),
         _failure_id(f.signature), _nullable(f.call_id), f.run, f.line, _nullable(f.branch))
        for read in reads
        for f in read.failures
    ]  # fmt: skip
    if failures:
        # A call an earlier read recorded, replayed (the same id failing the same way at a
        # later message): one occurrence, as within a read (`extract`).
        conn.executemany(
            "INSERT OR IGNORE INTO effect_failures(session, seq, ts, tool, command, error,"
            " signature, class, exit_code, resolved, source, repository, session_ts,"
            " failure_id, call_id, run, line, branch)"
            " SELECT ?1, ?2, NULLIF(?3, ''), ?4, ?5, ?6, ?7, ?8, NULLIF(?9, ''), ?10, ?11,"
            " NULLIF(?12, ''), ?13, ?14, NULLIF(?15, ''), NULLIF(?16, ''), NULLIF(?17, ''),"
            " NULLIF(?18, '')"
            " WHERE ?15 = '' OR NOT EXISTS (SELECT 1 FROM effect_failures WHERE session = ?1"
            " AND call_id = ?15 AND signature = ?7 AND seq <> ?2)",
            failures,
        )
    return {session for *_, session in changed} | _resolve_earlier(conn, first_seq, last_ok)


def _session_columns(
    conn: sqlite3.Connection, sessions: Sequence[str]
) -> dict[str, tuple[str, str | None, str]]:
    """session -> (agent, repository, first message time) as effect_sessions holds them."""
    rows = conn.execute(
        "SELECT session, source, repository, first_ts FROM effect_sessions"
        " WHERE session IN (SELECT value FROM json_each(?))",
        (json.dumps(list(sessions)),),
    )
    return {session: (source, repo, ts) for session, source, repo, ts in rows.fetchall()}


def _resolve_earlier(
    conn: sqlite3.Connection, first_seq: dict[str, int], last_ok: dict[tuple[str, str], int]
) -> set[str]:
    """Resolve the failures of earlier reads that a success of these reads resolves (a read's
    own are resolved by `extract`); the sessions they belong to."""
    if not last_ok:
        return set()
    pending = conn.execute(
        "SELECT DISTINCT session, command, seq FROM effect_failures WHERE resolved = 0"
        " AND session IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted({session for session, _ in last_ok})),),
    ).fetchall()
    resolved = [
        (session, command, last_ok[(session, command)])
        for session, command, seq in pending
        if seq < first_seq[session] and (session, command) in last_ok
    ]
    conn.executemany(
        "UPDATE effect_failures SET resolved = 1"
        " WHERE session = ? AND command = ? AND seq < ? AND resolved = 0",
        sorted(set(resolved)),
    )
    return {session for session, _, _ in resolved}


def forget_from(conn: sqlite3.Connection, session: str, seq: int) -> None:
    """Drop a session's failures from `seq` on: its file was replaced and is read again."""
    _changed(conn)
    conn.execute("DELETE FROM effect_failures WHERE session = ? AND seq >= ?", (session, seq))


def record_loads(
    conn: sqlite3.Connection, session: str, library: str, names: Iterable[str]
) -> None:
    """The session loaded these skills of `library`."""
    rows = [(session, library, name) for name in names]
    if not rows:
        return
    _changed(conn)
    conn.executemany(
        "INSERT OR IGNORE INTO effect_loads(session, library, name) VALUES (?, ?, ?)", rows
    )


def session_heads(conn: sqlite3.Connection, sessions: Iterable[str]) -> tuple[set[str], set[str]]:
    """The command heads `sessions` ran and the signatures that failed in them."""
    wanted = (json.dumps(sorted(sessions)),)
    commands = conn.execute(
        "SELECT DISTINCT command FROM effect_runs"
        " WHERE session IN (SELECT value FROM json_each(?))",
        wanted,
    ).fetchall()
    signatures = conn.execute(
        "SELECT DISTINCT signature FROM effect_failures"
        " WHERE session IN (SELECT value FROM json_each(?))",
        wanted,
    ).fetchall()
    return {row[0] for row in commands}, {row[0] for row in signatures}


def window_failures(
    conn: sqlite3.Connection, session: str, first_seq: int, last_seq: int
) -> list[Failure]:
    """The failures a session's messages `first_seq..last_seq` showed, in order."""
    rows = conn.execute(
        "SELECT seq, ts, tool, command, error, signature, class, exit_code, resolved, call_id,"
        " COALESCE(run, ''), COALESCE(line, ''), branch"
        " FROM effect_failures WHERE session = ? AND seq BETWEEN ? AND ? ORDER BY seq",
        (session, first_seq, last_seq),
    ).fetchall()
    return [
        Failure(
            row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], bool(row[8]),
            row[9], row[10], row[11], row[12],
        )
        for row in rows
    ]  # fmt: skip


def recurrences(
    conn: sqlite3.Connection,
    signature: str,
    repository: str | None,
    source: str,
    exclude_session: str,
) -> int:
    """In how many other sessions of the same agent (and repository, when known) that began
    no later than `exclude_session` the signature failed as `real` or `hook`."""
    sql = (
        "SELECT COUNT(DISTINCT f.session) FROM effect_failures AS f"
        " JOIN effect_sessions AS s ON s.session = f.session"
        " WHERE f.signature = ? AND f.session != ? AND s.source = ?"
        f" AND f.class IN ({', '.join('?' for _ in COUNTED_CLASSES)})"
        " AND s.first_ts <= COALESCE("
        "  (SELECT first_ts FROM effect_sessions WHERE session = ?), s.first_ts)"
    )
    params: list[Any] = [signature, exclude_session, source, *COUNTED_CLASSES, exclude_session]
    if repository is not None:
        sql += " AND s.repository = ?"
        params.append(repository)
    count: int = conn.execute(sql, params).fetchone()[0]
    return count


#: A tick signs the same failures read after read.
_failure_id = functools.lru_cache(maxsize=4096)(failure_id)
#: What `skilld failures show` takes for an id rather than a signature.
_FAILURE_ID = re.compile(r"[0-9a-f]{12}")


def failure_rows(
    conn: sqlite3.Connection,
    *,
    since: str | None = None,
    repository: str | None = None,
    recurring: bool = False,
    covered: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    verdicts: Mapping[tuple[str, str], str] | None = None,
) -> list[dict[str, Any]]:
    """`skilld failures --json`: one entry per signature, most widespread first.

    `since`: only occurrences at or after this ISO time; `repository`: only occurrences in a
    repository matching this glob; `recurring`: only signatures seen in two sessions or more;
    `covered`: signature -> the (library, name) of the skills that target it
    (`skilld.effect.report.covering_skills`), each with its verdict from `verdicts` (None:
    not measured).
    """
    covered, verdicts = covered or {}, verdicts or {}
    sql = (
        "SELECT f.signature, f.tool, f.command, f.error, f.class, f.session,"
        " COALESCE(f.ts, s.first_ts) AS at, s.repository"
        " FROM effect_failures AS f LEFT JOIN effect_sessions AS s ON s.session = f.session"
    )
    params: list[Any] = []
    if since is not None:
        sql += " WHERE COALESCE(f.ts, s.first_ts) >= ?"
        params.append(since)
    grouped: dict[str, _Group] = {}
    for row in conn.execute(sql, params):
        if repository is not None and not fnmatch.fnmatchcase(row[7] or "", repository):
            continue
        group = grouped.get(row[0])
        if group is None:
            group = grouped[row[0]] = _Group(row[1], row[2], row[3])
        group.add(row[4], row[5], row[6], row[7])
    entries = [
        group.entry(
            signature,
            [
                {"library": library, "name": name, "verdict": verdicts.get((library, name))}
                for library, name in covered.get(signature, ())
            ],
        )
        for signature, group in grouped.items()
        if not recurring or len(group.sessions) >= 2
    ]
    entries.sort(key=lambda e: (-e["sessions"], -e["occurrences"], e["last_seen"] or ""))
    return entries


class _Group:
    __slots__ = ("classes", "command", "error", "first", "last", "repositories", "sessions", "tool")

    def __init__(self, tool: str, command: str, error: str) -> None:
        self.tool, self.command, self.error = tool, command, error
        self.classes: dict[str, int] = {}
        self.sessions: set[str] = set()
        self.repositories: set[str] = set()
        self.first: str | None = None
        self.last: str | None = None

    def add(self, cls: str, session: str, at: str | None, repository: str | None) -> None:
        self.classes[cls] = self.classes.get(cls, 0) + 1
        self.sessions.add(session)
        if repository:
            self.repositories.add(repository)
        if at is not None:
            self.first = at if self.first is None or at < self.first else self.first
            self.last = at if self.last is None or at > self.last else self.last

    def entry(self, signature: str, skills: list[dict[str, str | None]]) -> dict[str, Any]:
        return {
            "id": _failure_id(signature),
            "signature": signature,
            "tool": self.tool,
            "command": self.command,
            "error": self.error,
            "class": _dominant(self.classes),
            "sessions": len(self.sessions),
            "occurrences": sum(self.classes.values()),
            "first_seen": self.first,
            "last_seen": self.last,
            "repositories": sorted(self.repositories),
            "skills": skills,
        }


#: An occurrence as `skilld failures show --json` gives it: the columns `failure_occurrences`
#: selects, in this order.
OCCURRENCE_KEYS = (
    "session", "source", "at", "message", "call_id", "command", "error", "class", "resolved",
    "repository", "branch",
)  # fmt: skip


def failure_occurrences(conn: sqlite3.Connection, key: str) -> dict[str, Any] | None:
    """`skilld failures show ID|SIGNATURE --json`: the failure's row (as `failure_rows` gives
    it, its `skills` left to the caller: `skilld.effect.report.skills_covering`) and its
    occurrences, oldest first; None when no failure has that id or signature.

    One range of `effect_failures_id`, in its order (no sort), reading the session's
    repository and start from the row itself (`record_reads` keeps them in step): a failure
    seen ten thousand times is listed in tens of milliseconds."""
    wanted = key if _FAILURE_ID.fullmatch(key) else _failure_id(key)
    found = conn.execute(
        "SELECT signature, tool, command, error FROM effect_failures"
        " INDEXED BY effect_failures_id WHERE failure_id = ? LIMIT 1",
        (wanted,),
    ).fetchone()
    if found is None:
        return None
    signature, tool, command, error = found
    rows = conn.execute(
        "SELECT session, source, COALESCE(ts, session_ts), seq, call_id, run, line, class,"
        " resolved, repository, branch FROM effect_failures INDEXED BY effect_failures_id"
        " WHERE failure_id = ? ORDER BY COALESCE(ts, session_ts), session, seq",
        (wanted,),
    ).fetchall()
    occurrences = [dict(zip(OCCURRENCE_KEYS, row, strict=True)) for row in rows]
    for occurrence in occurrences:
        occurrence["resolved"] = bool(occurrence["resolved"])
    group = _Group(tool, command, error)
    group.classes = dict(Counter(o["class"] for o in occurrences))
    group.sessions = {o["session"] for o in occurrences}
    group.repositories = {o["repository"] for o in occurrences if o["repository"]}
    times = [o["at"] for o in occurrences if o["at"] is not None]
    group.first, group.last = (times[0], times[-1]) if times else (None, None)
    return {**group.entry(signature, []), "occurrences": occurrences}


def _dominant(classes: dict[str, int]) -> str:
    """The class a signature mostly has; a cascade only when it is never anything else."""
    ranked = {cls: n for cls, n in classes.items() if cls != "cascade"} or classes
    order = {cls: index for index, cls in enumerate(CLASSES)}
    return min(ranked, key=lambda cls: (-ranked[cls], order.get(cls, len(order))))
