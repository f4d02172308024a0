"""The holdout's tables in state.db, its per-install secret, and its arms counted from the
effect tables (DESIGN.md §14; decisions in `skilld.effect.holdout`).

`holdout_skills`: one row per skill that entered a holdout: its state, when it started and
stopped, and where it is while withheld (`withheld`, relative to its skills dir, and `home`,
where it goes back to), with an *intent* (`moving`: "withhold" or "restore") committed before a
move and cleared in the transaction that records it, so a process killed between the two
leaves a record of what it was doing (`skilld.curator.holdout.repair`).
`holdout_spans`: each time a skill was withheld, [start, end).

The tables are created on first use (`ensure`), not by a state.db migration: a state.db that
never held a skill out has none of them, and an older skilld opening a newer state.db sees
nothing it does not know.

Plain sqlite3 connection in, values out; the caller owns the transaction.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple, Protocol

from skilld.effect.extract import COUNTED_CLASSES
from skilld.effect.holdout import (
    ArmCounts,
    HoldoutState,
    SessionSpan,
    Span,
    arms,
    holdout_object,
    off,
)
from skilld.effect.store import GENERATION_KEY

#: The secret the block draws are keyed with, in the state dir (0600).
SECRET_FILE = "holdout.key"

_SCHEMA = """
    CREATE TABLE IF NOT EXISTS holdout_skills (
        library  TEXT NOT NULL,
        name     TEXT NOT NULL,
        state    TEXT NOT NULL,
        started  TEXT NOT NULL,
        stopped  TEXT,
        withheld TEXT,
        home     TEXT,
        until    TEXT,
        moving   TEXT,
        PRIMARY KEY (library, name)
    );
    CREATE INDEX IF NOT EXISTS holdout_skills_moving ON holdout_skills(library)
        WHERE moving IS NOT NULL;
    CREATE TABLE IF NOT EXISTS holdout_spans (
        library TEXT NOT NULL,
        name    TEXT NOT NULL,
        start   TEXT NOT NULL,
        end     TEXT,
        PRIMARY KEY (library, name, start)
    ) WITHOUT ROWID;
"""


def ensure(conn: sqlite3.Connection) -> None:
    """Create the holdout's tables when they do not exist yet."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def has_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'holdout_skills'"
    ).fetchone()
    return row is not None


def load_secret(state_dir: Path) -> bytes:
    """The install's secret, created (0600, 32 random bytes as hex) on first use. It is
    written aside and linked into place, so a process reading it never sees half of it, and
    two processes creating it at once agree on the first one linked."""
    path = state_dir / SECRET_FILE
    if not os.path.lexists(path):
        aside = state_dir / f".{SECRET_FILE}.{os.getpid()}"
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as created:
            created.write(secrets.token_hex(32).encode())
            created.flush()
            os.fsync(created.fileno())
        try:
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
        finally:
            os.unlink(aside)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as existing:
        data = existing.read(256).strip()
    if len(data) < 32:
        raise OSError(f"{path}: the holdout secret is unreadable; remove it to make a new one")
    return data


def iso(moment: datetime) -> str:
    """The one text form the holdout's times are stored in (UTC, to the second)."""
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def parse(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class HeldSkill(NamedTuple):
    library: str
    name: str
    state: HoldoutState
    started: datetime
    stopped: datetime | None
    withheld: str | None  # relative to the skills dir, while withheld
    home: str | None  # where it goes back to
    until: datetime | None  # the end of the block it is withheld for
    moving: str | None  # "withhold" | "restore": a move in flight


def held_skills(
    conn: sqlite3.Connection, library: str | None = None, names: Iterable[str] | None = None
) -> dict[str, HeldSkill]:
    """The skills of `library` (or of every library, keyed "library/name") that entered a
    holdout; only those of `names`, when given."""
    if not has_tables(conn):
        return {}
    sql = "SELECT library, name, state, started, stopped, withheld, home, until, moving"
    sql += " FROM holdout_skills"
    if library is None:
        rows = conn.execute(sql + " ORDER BY library, name")
    elif names is None:
        rows = conn.execute(sql + " WHERE library = ?", (library,))
    else:
        rows = conn.execute(
            sql + " WHERE library = ? AND name IN (SELECT value FROM json_each(?))",
            (library, json.dumps(sorted(names))),
        )
    found = {}
    for lib, name, state, started, stopped, withheld, home, until, moving in rows.fetchall():
        key = name if library is not None else f"{lib}/{name}"
        found[key] = HeldSkill(
            lib, name, state, parse(started), parse(stopped) if stopped else None,
            withheld, home, parse(until) if until else None, moving,
        )  # fmt: skip
    return found


def in_flight(conn: sqlite3.Connection, library: str) -> list[HeldSkill]:
    """The skills of `library` with a move in flight (what a killed process left): the one
    read of a tick inside a block whose pass has run."""
    if not has_tables(conn):
        return []
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM holdout_skills INDEXED BY holdout_skills_moving"
            " WHERE library = ? AND moving IS NOT NULL",
            (library,),
        ).fetchall()
    ]
    if not names:
        return []
    held = held_skills(conn, library)
    return [held[name] for name in names if name in held]


def start(conn: sqlite3.Connection, library: str, name: str, at: datetime) -> HeldSkill:
    conn.execute(
        "INSERT OR IGNORE INTO holdout_skills(library, name, state, started)"
        " VALUES (?, ?, 'running', ?)",
        (library, name, iso(at)),
    )
    touched(conn)
    return HeldSkill(library, name, "running", at, None, None, None, None, None)


def set_state(
    conn: sqlite3.Connection, library: str, name: str, state: HoldoutState, at: datetime
) -> None:
    conn.execute(
        "UPDATE holdout_skills SET state = ?, stopped = ? WHERE library = ? AND name = ?",
        (state, iso(at), library, name),
    )
    touched(conn)


def intend(
    conn: sqlite3.Connection, library: str, name: str, move: str, home: str | None = None
) -> None:
    """Record the move about to happen (committed by the caller before it moves anything);
    a withholding records where the skill lives (`home`) too."""
    conn.execute(
        "UPDATE holdout_skills SET moving = ?, home = COALESCE(?, home)"
        " WHERE library = ? AND name = ?",
        (move, home, library, name),
    )


def mark_withheld(
    conn: sqlite3.Connection,
    library: str,
    name: str,
    *,
    withheld: str,
    home: str,
    until: datetime,
    at: datetime,
) -> None:
    conn.execute(
        "UPDATE holdout_skills SET withheld = ?, home = ?, until = ?, moving = NULL"
        " WHERE library = ? AND name = ?",
        (withheld, home, iso(until), library, name),
    )
    conn.execute(
        "INSERT OR IGNORE INTO holdout_spans(library, name, start) VALUES (?, ?, ?)",
        (library, name, iso(at)),
    )
    touched(conn)


def mark_present(conn: sqlite3.Connection, library: str, name: str, at: datetime) -> None:
    conn.execute(
        "UPDATE holdout_skills SET withheld = NULL, until = NULL, moving = NULL"
        " WHERE library = ? AND name = ?",
        (library, name),
    )
    conn.execute(
        "UPDATE holdout_spans SET end = ? WHERE library = ? AND name = ? AND end IS NULL",
        (iso(at), library, name),
    )
    touched(conn)


def clear_intent(conn: sqlite3.Connection, library: str, name: str) -> None:
    conn.execute(
        "UPDATE holdout_skills SET moving = NULL WHERE library = ? AND name = ?", (library, name)
    )


def spans(
    conn: sqlite3.Connection, library: str, names: Iterable[str] | None = None
) -> dict[str, list[Span]]:
    """Each skill's withheld spans in `library` (only those of `names`, when given), oldest
    first."""
    if not has_tables(conn):
        return {}
    found: dict[str, list[Span]] = {}
    sql = "SELECT name, start, end FROM holdout_spans WHERE library = ?"
    params: tuple[str, ...] = (library,)
    if names is not None:
        sql += " AND name IN (SELECT value FROM json_each(?))"
        params = (library, json.dumps(sorted(names)))
    for name, begin, end in conn.execute(sql + " ORDER BY name, start", params).fetchall():
        found.setdefault(name, []).append(Span(parse(begin), parse(end) if end else None))
    return found


class Targeted(Protocol):
    """A source failure as the effect report's anchors carry it (`measure.Anchor`)."""

    @property
    def signature(self) -> str: ...
    @property
    def command(self) -> str: ...
    @property
    def source(self) -> str: ...  # the agent
    @property
    def repository(self) -> str | None: ...  # None: every repository of the agent


def arm_counts(
    conn: sqlite3.Connection,
    failures: Sequence[Targeted],
    skill_spans: Sequence[Span],
    *,
    started: datetime,
    stopped: datetime | None,
    now: datetime,
) -> tuple[ArmCounts, ArmCounts]:
    """(present, withheld): the sessions, while the holdout ran, that ran a source failure's
    command head (of its agent, and repository when known), and among them those in which one
    of their source failures' signatures failed again (a counted class)."""
    low, high = iso(started), iso(stopped or now)
    first: dict[str, str] = {}
    failed: set[str] = set()
    classes = ", ".join("?" for _ in COUNTED_CLASSES)
    for failure in failures:
        repository = " AND repository = ?" if failure.repository is not None else ""
        params: list[object] = [failure.command, failure.source]
        params += [failure.repository] if failure.repository is not None else []
        rows = conn.execute(
            "SELECT session, session_ts FROM effect_runs WHERE command = ? AND source = ?"
            f"{repository} AND session_ts >= ? AND session_ts <= ?",
            [*params, low, high],
        ).fetchall()
        ran = {session: ts for session, ts in rows}
        first.update(ran)
        signature_params: list[object] = [failure.signature, failure.source]
        signature_params += [failure.repository] if failure.repository is not None else []
        for (session,) in conn.execute(
            "SELECT DISTINCT session FROM effect_failures"
            f" WHERE signature = ? AND source = ?{repository} AND class IN ({classes})"
            " AND session_ts >= ? AND session_ts <= ?",
            [*signature_params, *COUNTED_CLASSES, low, high],
        ).fetchall():
            if session in ran:
                failed.add(session)
    last = _last_seen(conn, first)
    sessions = [
        SessionSpan(session, parse(ts), max(parse(ts), last.get(session, parse(ts))),
                    session in failed)
        for session, ts in first.items()
    ]  # fmt: skip
    return arms(sessions, skill_spans, now=now)


def _last_seen(conn: sqlite3.Connection, sessions: Iterable[str]) -> dict[str, datetime]:
    """The latest time each session was seen doing something (its last command's first run,
    its last failure): the end of a session as the effect tables know it."""
    wanted = json.dumps(sorted(sessions))
    found: dict[str, datetime] = {}
    for session, moment in conn.execute(
        "SELECT session, MAX(at) FROM (SELECT session, first_ts AS at FROM effect_runs"
        " WHERE session IN (SELECT value FROM json_each(?)) UNION ALL SELECT session, ts"
        " FROM effect_failures WHERE session IN (SELECT value FROM json_each(?)))"
        " WHERE at IS NOT NULL GROUP BY session",
        (wanted, wanted),
    ).fetchall():
        with contextlib.suppress(ValueError):
            found[session] = parse(moment)
    return found


def holdout_objects(
    conn: sqlite3.Connection,
    anchors: Mapping[tuple[str, str], Sequence[Targeted]],
    *,
    now: datetime,
) -> dict[tuple[str, str], dict[str, object]]:
    """The `holdout` object (DESIGN.md §14) of each skill of `anchors` ((library, name) -> its
    source failures, as the effect report's anchors carry them) that entered a holdout; a
    skill left out never did (`off`). The held skills and spans are read once per library."""
    if not has_tables(conn):
        return {}
    found: dict[tuple[str, str], dict[str, object]] = {}
    for library in sorted({library for library, _ in anchors}):
        names = [name for owner, name in anchors if owner == library]
        held = held_skills(conn, library, names)
        if not held:
            continue
        library_spans = spans(conn, library, list(held))
        for name, skill in held.items():
            failures = anchors.get((library, name))
            if failures is None:
                continue
            present, withheld = arm_counts(
                conn, failures, library_spans.get(name, []), started=skill.started,
                stopped=skill.stopped, now=now,
            )  # fmt: skip
            found[(library, name)] = holdout_object(skill.state, present, withheld)
    return found


def holdout_for(
    conn: sqlite3.Connection,
    library: str,
    name: str,
    failures: Sequence[Targeted],
    *,
    now: datetime,
) -> dict[str, object]:
    """The `holdout` object of one skill (`holdout_objects`): `off` when it never entered a
    holdout. `failures`: its source failures."""
    found = holdout_objects(conn, {(library, name): failures}, now=now)
    return found.get((library, name)) or off()


def touched(conn: sqlite3.Connection) -> None:
    """A move or a holdout's new state changes the `holdout` objects of the effect rows: the
    effect tables' generation is bumped, as their own writes bump it, so that rows kept from
    an earlier measurement are measured again."""
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, '1')"
        " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
        (GENERATION_KEY,),
    )
