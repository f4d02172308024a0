"""`skilld effect`: each learned skill's exposures, recurrences and verdict, read from state.db.

One query per table, whatever the number of skills: the skills (provenance), their versions
(the events that wrote them, with each window), the failures of those windows, the sessions
that ran each source command, where each source signature failed, and which sessions loaded
which skill. `skilld.effect.measure` counts over those rows and `skilld.effect.verdict`
judges the counts; `skilld effect --json`, `skills show --json` (`effect.outcome`),
`/api/effect`, the panel and the daemon's events all come from `effect_records`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from skilld.effect.measure import (
    History,
    Measured,
    SessionFacts,
    SourceFailure,
    Version,
    measure,
    source_failures,
)
from skilld.effect.verdict import Outcome, Pooled, judge, pool

#: The events that wrote a version of a skill from a window.
LEARNING_KINDS = ("created", "updated", "merged")

#: The evidence of a skill written by a person or an agent's tool, from no session window.
NO_WINDOW = "written from no session window (by hand or by a tool): nothing to measure"


class SkillEffect(NamedTuple):
    library: str
    name: str
    measured: Measured
    outcome: Outcome

    def row(self) -> dict[str, Any]:
        """The row `skilld effect --json` prints (DESIGN.md §13)."""
        counts = self.measured.counts
        return {
            "library": self.library,
            "name": self.name,
            "since": _seconds(self.measured.since),
            "source_failures": [
                {"signature": signature, "class": cls, "command": command}
                for signature, cls, command in self.measured.source_failures
            ],
            "before": {
                "sessions": counts.before_sessions,
                "exposures": counts.before_exposures,
                "failures": counts.before_failures,
            },
            "after": {
                "sessions": counts.after_sessions,
                "exposures": counts.after_exposures,
                "failures": counts.after_failures,
                "loaded_exposures": counts.loaded_exposures,
                "loaded_failures": counts.loaded_failures,
            },
            "verdict": self.outcome.verdict,
            "evidence": self.outcome.evidence,
        }


def instant(text: str | None) -> str | None:
    """An ISO time in one comparable form (UTC, microseconds); None when unreadable."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _seconds(text: str | None) -> str | None:
    """`instant`'s form back to whole seconds, as events and provenance print times."""
    if text is None:
        return None
    return datetime.fromisoformat(text).isoformat(timespec="seconds")


def effect_records(
    conn: sqlite3.Connection,
    libraries: Sequence[str],
    *,
    min_exposures: int,
    names: Iterable[tuple[str, str]] | None = None,
) -> list[SkillEffect]:
    """Every learned skill of `libraries` (those state.db holds provenance for), by library
    and name, or only the (library, name) pairs in `names`."""
    skills = _skills(conn, libraries)
    if names is not None:
        wanted = set(names)
        skills = {key: value for key, value in skills.items() if key in wanted}
    if not skills:
        return []
    versions = _versions(conn, skills)
    sessions = sorted({v.session for vs in versions.values() for v in vs})
    failures = _window_failures(conn, sessions)
    history = _history(conn, versions, failures, libraries)
    records = []
    for key in sorted(skills):
        own = versions.get(key, [])
        windows = [f for v in own for f in failures.get(v.session, ())]
        measured = measure(key[0], key[1], own, windows, history)
        outcome = judge(measured.counts, min_exposures)
        if not own:
            measured = measured._replace(since=skills[key])
            outcome = outcome._replace(evidence=NO_WINDOW)
        records.append(SkillEffect(key[0], key[1], measured, outcome))
    return records


def effect_rows(
    conn: sqlite3.Connection, libraries: Sequence[str], *, min_exposures: int
) -> list[dict[str, Any]]:
    """`skilld effect --json`: one row per learned skill."""
    return [record.row() for record in effect_records(conn, libraries, min_exposures=min_exposures)]


def pooled(records: Iterable[SkillEffect]) -> Pooled:
    """The library-level figure: failures per 100 exposures before and after, every skill
    learned from a failure pooled."""
    return pool(record.measured.counts for record in records)


def covering_skills(
    conn: sqlite3.Connection, libraries: Sequence[str]
) -> dict[str, list[tuple[str, str]]]:
    """signature -> the (library, name) of each skill learned from it (its version's source
    window showed it resolved, real or hook)."""
    skills = _skills(conn, libraries)
    versions = _versions(conn, skills)
    failures = _window_failures(conn, sorted({v.session for vs in versions.values() for v in vs}))
    covered: dict[str, list[tuple[str, str]]] = {}
    for key in sorted(versions):
        own = versions[key]
        windows = [f for v in own for f in failures.get(v.session, ())]
        for _, failure in source_failures(own, windows):
            covered.setdefault(failure.signature, []).append(key)
    return covered


def uncovered_recurring(
    conn: sqlite3.Connection, libraries: Sequence[str], *, since: str | None = None
) -> list[dict[str, Any]]:
    """Recurring failures no skill covers: each real/hook signature that failed in two or more
    sessions of one repository (or of no known repository), with no skill of `libraries`
    learned from it; with `since` (ISO), only those that failed again since then. Most
    sessions first."""
    covered = covering_skills(conn, libraries)
    rows = conn.execute(
        "SELECT f.signature, s.repository, COUNT(DISTINCT f.session), COUNT(*),"
        " MIN(f.tool), MIN(f.command), MIN(f.error), MAX(COALESCE(f.ts, s.first_ts))"
        " FROM effect_failures AS f JOIN effect_sessions AS s ON s.session = f.session"
        " WHERE f.class IN ('real', 'hook')"
        " GROUP BY f.signature, s.repository HAVING COUNT(DISTINCT f.session) >= 2"
    ).fetchall()
    cutoff = instant(since)
    found = []
    for signature, repository, sessions, occurrences, tool, command, error, last in rows:
        if signature in covered:
            continue
        last_seen = instant(last)
        if cutoff is not None and (last_seen is None or last_seen < cutoff):
            continue
        found.append(
            {
                "signature": signature,
                "repository": repository,
                "tool": tool,
                "command": command,
                "error": error,
                "sessions": sessions,
                "occurrences": occurrences,
                "last_seen": _seconds(last_seen),
            }
        )
    found.sort(key=lambda row: (-row["sessions"], row["signature"], row["repository"] or ""))
    return found


def stopped_recurring(records: Iterable[SkillEffect], *, since: str) -> list[SkillEffect]:
    """Skills whose failure had happened before them and has not come back since, with an
    exposure since `since` (ISO): the failures that stopped recurring."""
    cutoff = instant(since) or since
    return [
        record
        for record in records
        if record.measured.counts.before_failures > 0
        and record.measured.counts.after_failures == 0
        and record.measured.last_exposure is not None
        and record.measured.last_exposure >= cutoff
    ]


def _json_list(values: Iterable[str]) -> str:
    return json.dumps(list(values))


def _skills(
    conn: sqlite3.Connection, libraries: Sequence[str]
) -> dict[tuple[str, str], str | None]:
    """(library, name) -> when its provenance was created, for every skill skilld learned."""
    rows = conn.execute(
        "SELECT library, name, created_at FROM provenance"
        " WHERE library IN (SELECT value FROM json_each(?))",
        (_json_list(libraries),),
    )
    return {(library, name): instant(created) for library, name, created in rows.fetchall()}


def _versions(
    conn: sqlite3.Connection, skills: Mapping[tuple[str, str], str | None]
) -> dict[tuple[str, str], list[Version]]:
    """Each skill's versions with a source window, oldest first: the events that wrote them,
    else (a skill written before events named windows) its provenance row."""
    libraries = sorted({library for library, _ in skills})
    rows = conn.execute(
        "SELECT library, skill, ts, session,"
        " json_extract(detail, '$.messages[0]'), json_extract(detail, '$.messages[1]'),"
        " json_extract(detail, '$.git.repository')"
        f" FROM events WHERE kind IN ({','.join('?' * len(LEARNING_KINDS))})"
        " AND library IN (SELECT value FROM json_each(?)) ORDER BY id",
        (*LEARNING_KINDS, _json_list(libraries)),
    )
    versions: dict[tuple[str, str], list[Version]] = {}
    for library, name, ts, session, first, last, repository in rows.fetchall():
        key = (library, name)
        at = instant(ts)
        if key not in skills or at is None or not session:
            continue
        if not isinstance(first, int) or not isinstance(last, int):
            continue
        versions.setdefault(key, []).append(
            Version(at, session, first, last, repository if isinstance(repository, str) else None)
        )
    missing = [key for key in skills if key not in versions]
    if missing:
        rows = conn.execute(
            "SELECT library, name, session, first_message, last_message, created_at,"
            " json_extract(git, '$.repository') FROM provenance"
            " WHERE library IN (SELECT value FROM json_each(?)) AND session IS NOT NULL"
            " AND first_message IS NOT NULL AND last_message IS NOT NULL",
            (_json_list(sorted({library for library, _ in missing})),),
        )
        wanted = set(missing)
        for library, name, session, first, last, created, repository in rows.fetchall():
            at = instant(created)
            if (library, name) in wanted and at is not None:
                versions[(library, name)] = [Version(at, session, first, last, repository)]
    return versions


def _window_failures(
    conn: sqlite3.Connection, sessions: Sequence[str]
) -> dict[str, list[SourceFailure]]:
    """The counted failures (real/hook, resolved) of every session a skill was learned in;
    the measure keeps those inside each version's window."""
    rows = conn.execute(
        "SELECT session, seq, signature, class, command, resolved FROM effect_failures"
        " WHERE session IN (SELECT value FROM json_each(?))"
        " AND class IN ('real', 'hook') AND resolved = 1",
        (_json_list(sessions),),
    )
    failures: dict[str, list[SourceFailure]] = {}
    for session, seq, signature, cls, command, resolved in rows.fetchall():
        failure = SourceFailure(session, seq, signature, cls, command, bool(resolved))
        failures.setdefault(session, []).append(failure)
    return failures


def _history(
    conn: sqlite3.Connection,
    versions: Mapping[tuple[str, str], list[Version]],
    failures: Mapping[str, list[SourceFailure]],
    libraries: Sequence[str],
) -> History:
    """The sessions that ran a source command, where each source signature failed, and what
    each session loaded: one query each."""
    commands = sorted({f.command for rows in failures.values() for f in rows})
    signatures = sorted({f.signature for rows in failures.values() for f in rows})
    sources = sorted({v.session for rows in versions.values() for v in rows})
    sessions: dict[str, SessionFacts] = {}
    runs: list[tuple[str, str]] = []
    rows = conn.execute(
        "SELECT r.session, r.command, s.source, s.repository, s.first_ts"
        " FROM effect_runs AS r JOIN effect_sessions AS s ON s.session = r.session"
        " WHERE r.command IN (SELECT value FROM json_each(?))",
        (_json_list(commands),),
    )
    for session, command, source, repository, first_ts in rows.fetchall():
        if session not in sessions:
            at = instant(first_ts)
            if at is None:
                continue
            sessions[session] = SessionFacts(source, repository, at)
        runs.append((session, command))
    rows = conn.execute(
        "SELECT session, source, repository, first_ts FROM effect_sessions"
        " WHERE session IN (SELECT value FROM json_each(?))",
        (_json_list(sources),),
    )
    for session, source, repository, first_ts in rows.fetchall():
        at = instant(first_ts)
        if session not in sessions and at is not None:
            sessions[session] = SessionFacts(source, repository, at)
    failed = conn.execute(
        "SELECT DISTINCT signature, session FROM effect_failures"
        " WHERE signature IN (SELECT value FROM json_each(?)) AND class IN ('real', 'hook')",
        (_json_list(signatures),),
    ).fetchall()
    loads = conn.execute(
        "SELECT library, name, session FROM effect_loads"
        " WHERE library IN (SELECT value FROM json_each(?))",
        (_json_list(libraries),),
    ).fetchall()
    return History(sessions, runs, failed, loads)
