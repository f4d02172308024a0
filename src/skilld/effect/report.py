"""`skilld effect`: each learned skill's exposures, recurrences and verdict, read from state.db.

A fixed number of queries, whatever the number of skills: the skills (provenance), their
versions (the events that wrote them, with each window), the failures of those windows, the
agent of each source session; then, for every source failure of every skill at once (a temp
table of *anchors*), its exposures and failures before and after, each an index range count
(`effect_runs_exposure`, `effect_failures_exposure`: the session's agent, repository and
start are on every row), and the few sessions that need a closer look (the source sessions,
the sessions that loaded a skill). `skilld.effect.measure` combines those and
`skilld.effect.verdict` judges; `skilld effect --json`, `skills show --json`
(`effect.outcome`), `/api/effect`, the panel, MCP `skill_view` and the daemon's events all
come from `effect_records`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from skilld.clock import utc_now
from skilld.digest import sha256_hex
from skilld.effect import failure_id
from skilld.effect.extract import COUNTED_SQL, utc_iso
from skilld.effect.holdout import off as holdout_off
from skilld.effect.holdout_store import holdout_objects
from skilld.effect.measure import (
    Anchor,
    AnchorCounts,
    Measured,
    Recurrence,
    SessionRun,
    SourceFailure,
    Version,
    anchors_of,
    combine,
    learned_failures,
    recurrences,
)
from skilld.effect.store import generation
from skilld.effect.verdict import Counts, Outcome, Pooled, judge, pool, with_holdout

#: The events that wrote a version of a skill from a window.
LEARNING_KINDS = ("created", "updated", "merged")
LEARNING_KINDS_SQL = "('created', 'updated', 'merged')"
#: The events that each wrote a version of a skill's text (`skilld.versions.VERSION_KINDS`).
VERSION_KINDS_SQL = "('created', 'updated', 'rolled_back')"
#: Up to this many skills, their versions are looked up by name.
FEW_SKILLS = 200

#: The evidence of a skill written by a person or an agent's tool, from no session window.
NO_WINDOW = "written from no session window (by hand or by a tool): nothing to measure"


#: state.db meta: the rows of the daemon's last measurement, with the stamp it was taken at.
MEASUREMENT_KEY = "effect_measurement"


class SkillEffect(NamedTuple):
    library: str
    name: str
    measured: Measured
    outcome: Outcome
    #: Where its failures came back (read only when asked for: `with_recurrences`).
    recurrences: list[Recurrence]
    #: Its holdout (DESIGN.md §14, `holdout_store.holdout_objects`); None: never held out.
    holdout: Mapping[str, Any] | None = None
    #: The number of the version on disk now (`skills show`'s `effect.versions`), None when
    #: the log holds none: a person's edit or a rollback is a version, and the row goes on.
    version: int | None = None

    def row(self) -> dict[str, Any]:
        """The row `skilld effect --json` prints (DESIGN.md §13)."""
        counts = self.measured.counts
        return {
            "library": self.library,
            "name": self.name,
            "since": self.measured.since,
            "version": self.version,
            "source_failures": [
                {
                    "id": failure_id(signature),
                    "signature": signature,
                    "class": cls,
                    "command": command,
                }
                for signature, cls, command in self.measured.source_failures
            ],
            "before": {"sessions": counts.before_sessions, "failures": counts.before_failures},
            "after": {
                "sessions": counts.after_sessions,
                "failures": counts.after_failures,
                "loaded_sessions": counts.loaded_sessions,
                "loaded_failures": counts.loaded_failures,
            },
            "verdict": self.outcome.verdict,
            "evidence": self.outcome.evidence,
            "holdout": dict(self.holdout) if self.holdout else holdout_off(),
        }


def instant(text: str | None) -> str | None:
    """An ISO time in the one form state.db compares as text (UTC, to the second, as events
    and the effect tables write it); None when unreadable."""
    if not text:
        return None
    if len(text) == 25 and text.endswith("+00:00") and text[10] == "T":
        return text  # the form state.db writes: nothing to convert
    return utc_iso(text)


def effect_records(
    conn: sqlite3.Connection,
    libraries: Sequence[str],
    *,
    min_exposures: int,
    names: Iterable[tuple[str, str]] | None = None,
    with_recurrences: bool = False,
) -> list[SkillEffect]:
    """Every learned skill of `libraries` (those state.db holds provenance for), by library
    and name, or only the (library, name) pairs in `names`; `with_recurrences` also lists
    where each skill's failures came back."""
    skills = _skills(conn, libraries)
    if names is not None:
        wanted = set(names)
        skills = {key: value for key, value in skills.items() if key in wanted}
    if not skills:
        return []
    versions = _versions(conn, skills)
    failures = _window_failures(conn, [v for vs in versions.values() for v in vs])
    facts = _session_facts(conn, sorted({v.session for vs in versions.values() for v in vs}))
    agents = {session: fact[0] for session, fact in facts.items()}
    keys = sorted(skills)
    anchors = {
        key: anchors_of(
            versions.get(key, []),
            [f for v in versions.get(key, []) for f in failures.get(v.session, ())],
            agents,
        )
        for key in keys
    }
    reads = _Reads(conn, anchors, versions, facts, with_recurrences=with_recurrences)
    numbers = _current_versions(conn, skills)
    holdouts = holdout_objects(conn, anchors, now=utc_now())
    records = []
    for key in keys:
        own = anchors[key]
        excluded = {v.session for v in versions.get(key, [])}
        counts, newest = combine(
            own,
            reads.counts.get(key, []),
            excluded=excluded,
            source_runs=reads.source_runs.get(key, []),
            loaded_runs=reads.loaded_runs.get(key, []),
            exposed_runs=reads.exposed_runs.get(key) if len(own) > 1 else None,
        )
        since = min((a.at for a in own), default=None) or min(
            (v.at for v in versions.get(key, [])), default=skills[key]
        )
        measured = Measured(since, [(a.signature, a.cls, a.command) for a in own], counts, newest)
        outcome = judge(counts, min_exposures, heads=[a.command for a in own])
        if key not in versions:
            outcome = outcome._replace(evidence=NO_WINDOW)
        came_back = (
            recurrences(
                own,
                reads.failed_runs[key],
                excluded=excluded,
                loaded={run.session for run in reads.loaded_runs.get(key, [])},
            )
            if key in reads.failed_runs
            else []
        )
        held = holdouts.get(key)
        if held is not None:
            outcome = with_holdout(outcome, held)
        records.append(
            SkillEffect(key[0], key[1], measured, outcome, came_back, held, numbers.get(key))
        )
    return records


def skill_anchors(
    conn: sqlite3.Connection, libraries: Sequence[str]
) -> dict[tuple[str, str], list[Anchor]]:
    """Each learned skill's source failures, as anchors, by (library, name): what the holdout
    counts its arms over (`skilld.effect.holdout_store.arm_counts`)."""
    skills = _skills(conn, libraries)
    versions = _versions(conn, skills) if skills else {}
    failures = _window_failures(conn, [v for vs in versions.values() for v in vs])
    facts = _session_facts(conn, sorted({v.session for vs in versions.values() for v in vs}))
    agents = {session: fact[0] for session, fact in facts.items()}
    return {
        key: anchors_of(
            versions.get(key, []),
            [f for v in versions.get(key, []) for f in failures.get(v.session, ())],
            agents,
        )
        for key in sorted(skills)
    }


def effect_rows(
    conn: sqlite3.Connection, libraries: Sequence[str], *, min_exposures: int
) -> list[dict[str, Any]]:
    """`skilld effect --json`: one row per learned skill."""
    return [record.row() for record in effect_records(conn, libraries, min_exposures=min_exposures)]


def measurement_stamp(conn: sqlite3.Connection, *, min_exposures: int) -> list[Any]:
    """Everything a measurement reads besides the effect tables' rows (whose writes bump their
    generation): the versions' events, the provenance of every learned skill, the threshold.
    Two measurements under one stamp give the same rows."""
    newest_version = conn.execute(
        f"SELECT MAX(id) FROM events WHERE kind IN ({','.join('?' * len(LEARNING_KINDS))})",
        LEARNING_KINDS,
    ).fetchone()[0]
    provenance = conn.execute(
        "SELECT library, name, created_at, session, first_message, last_message, git"
        " FROM provenance ORDER BY library, name"
    ).fetchall()
    digest = sha256_hex(repr([tuple(row) for row in provenance]).encode("utf-8"))
    # What `record.backfill_targets` settled of the versions written before targets were.
    backfilled = conn.execute("SELECT COUNT(*) FROM effect_targets").fetchone()[0]
    return [generation(conn), newest_version, digest, min_exposures, backfilled]


def measurement(
    rows: list[dict[str, Any]],
    last_exposures: list[str | None],
    libraries: Sequence[str],
    stamp: list[Any],
) -> dict[str, Any]:
    """What the daemon keeps of a measurement of every library (`MEASUREMENT_KEY`): each
    skill's row and when it was last exposed (for the overview's week)."""
    return {
        "stamp": stamp,
        "libraries": list(libraries),
        "rows": rows,
        "last_exposures": last_exposures,
    }


class Kept(NamedTuple):
    rows: list[dict[str, Any]]
    last_exposures: list[str | None]


def kept_measurement(
    conn: sqlite3.Connection, libraries: Sequence[str], *, min_exposures: int
) -> Kept | None:
    """The rows of `libraries` from the daemon's last measurement, when nothing it read has
    changed since (its stamp is today's); None otherwise. The daemon measures after every
    tick that reads sessions, so a command over a large library does not measure again."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (MEASUREMENT_KEY,)).fetchone()
    if row is None:
        return None
    kept = json.loads(row[0])
    if not set(libraries) <= set(kept.get("libraries", ())):
        return None
    if kept.get("stamp") != measurement_stamp(conn, min_exposures=min_exposures):
        return None
    wanted = set(libraries)
    pairs = [
        (r, last)
        for r, last in zip(kept["rows"], kept.get("last_exposures", ()), strict=False)
        if r["library"] in wanted
    ]
    return Kept([r for r, _ in pairs], [last for _, last in pairs])


def pooled(records: Iterable[SkillEffect]) -> Pooled:
    """The library-level figure: failures per 100 exposures before and after, every skill
    learned from a failure pooled."""
    return pool(record.measured.counts for record in records)


def covering_skills(
    conn: sqlite3.Connection, libraries: Sequence[str] | None
) -> dict[str, list[tuple[str, str]]]:
    """signature -> the (library, name) of each skill of `libraries` (None: of every library
    state.db knows, project libraries too) that targets it (a version's source window showed
    it, of a counted class, and the version names it: skilld.effect.targets)."""
    if libraries is None:
        libraries = [row[0] for row in conn.execute("SELECT DISTINCT library FROM provenance")]
    return _covered_by(conn, _skills(conn, libraries))


def skills_covering(
    conn: sqlite3.Connection, signature: str, sessions: Iterable[str]
) -> list[tuple[str, str]]:
    """What `covering_skills` says of `signature`, which failed, of a counted class, in
    `sessions` (every one of them): only a skill learned in one of those can target it, so
    only those are read (`skilld failures show` of one failure does
    not read ten thousand skills)."""
    candidates = skills_learned_in(conn, sessions)
    if not candidates:
        return []
    libraries = sorted({library for library, _ in candidates})
    skills = {key: at for key, at in _skills(conn, libraries).items() if key in candidates}
    return _covered_by(conn, skills).get(signature, [])


def _covered_by(
    conn: sqlite3.Connection, skills: Mapping[tuple[str, str], str | None]
) -> dict[str, list[tuple[str, str]]]:
    """signature -> the (library, name) of each of `skills` that targets it."""
    versions = _versions(conn, skills)
    failures = _window_failures(conn, [v for vs in versions.values() for v in vs])
    covered: dict[str, list[tuple[str, str]]] = {}
    for key in sorted(versions):
        own = versions[key]
        windows = [f for v in own for f in failures.get(v.session, ())]
        for _, failure in learned_failures(own, windows):
            covered.setdefault(failure.signature, []).append(key)
    return covered


def uncovered_recurring(
    conn: sqlite3.Connection,
    libraries: Sequence[str],
    *,
    since: str | None = None,
    covered: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """Recurring failures no skill covers: each counted signature (real/hook/masked) that failed
    in two or more sessions of one repository (or of no known repository), with no skill of
    `libraries` learned from it; with `since` (ISO), only those that failed again since then. Most
    sessions first. `covered`: the signatures the skills were learned from, when the caller
    has measured them (the `source_failures` of `skilld effect`'s rows)."""
    covered = set(covering_skills(conn, libraries) if covered is None else covered)
    cutoff = instant(since)
    # Each row carries its session's agent, repository and start (`store.record_reads`), so a
    # signature is grouped without a join; with `since`, only the (signature, agent,
    # repository) triples that failed since are read, each an index range.
    pairs = None
    if cutoff is not None:
        pairs = conn.execute(
            "SELECT signature, source, repository FROM effect_failures"
            f" INDEXED BY effect_failures_recent WHERE ts >= ? AND class IN {COUNTED_SQL} UNION"
            " SELECT signature, source, repository FROM effect_failures"
            " INDEXED BY effect_failures_recent"
            f" WHERE ts IS NULL AND session_ts >= ? AND class IN {COUNTED_SQL}",
            (cutoff, cutoff),
        ).fetchall()
    rows = conn.execute(
        "SELECT f.signature, f.repository, COUNT(DISTINCT f.session), COUNT(*),"
        " MIN(f.tool), MIN(f.command), MIN(f.error), MAX(COALESCE(f.ts, f.session_ts))"
        + (
            " FROM json_each(?) AS p JOIN effect_failures AS f"
            " ON f.signature = json_extract(p.value, '$[0]')"
            " AND f.source = json_extract(p.value, '$[1]')"
            " AND f.repository IS json_extract(p.value, '$[2]')"
            if pairs is not None
            else " FROM effect_failures AS f"
        )
        + f" WHERE f.class IN {COUNTED_SQL}"
        " GROUP BY f.signature, f.repository HAVING COUNT(DISTINCT f.session) >= 2",
        () if pairs is None else (json.dumps([list(pair) for pair in pairs]),),
    ).fetchall()
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
                "last_seen": last_seen,
            }
        )
    found.sort(key=lambda row: (-row["sessions"], row["signature"], row["repository"] or ""))
    return found


def has_stopped(row: Mapping[str, Any], last_exposure: str | None, *, since: str) -> bool:
    """Whether the skill of `row` (as `skilld effect --json` prints it), last exposed at
    `last_exposure`, ended a failure that recurred before it: its verdict is a decided `helps`
    (a failure that merely has not come back yet is no evidence), the failure had happened
    before the skill, has not come back since, and the skill was exposed since `since` (ISO)."""
    cutoff = instant(since) or since
    return (
        row["verdict"] == "helps"
        and row["before"]["failures"] > 0
        and row["after"]["failures"] == 0
        and last_exposure is not None
        and last_exposure >= cutoff
    )


def row_counts(row: Mapping[str, Any]) -> Counts:
    """The counts of a row as `skilld effect --json` prints it (for `pool`)."""
    before, after = row["before"], row["after"]
    return Counts(
        len(row["source_failures"]),
        before["sessions"],
        before["failures"],
        after["sessions"],
        after["failures"],
        after["loaded_sessions"],
        after["loaded_failures"],
    )


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


def windowed_skills(conn: sqlite3.Connection, libraries: Sequence[str]) -> list[tuple[str, str]]:
    """The (library, name) of every skill of `libraries` with a version learned from a window
    (what `_versions` finds), sorted."""
    rows = conn.execute(
        "SELECT library, skill FROM events INDEXED BY events_learned"
        f" WHERE kind IN {LEARNING_KINDS_SQL} AND json_type(detail, '$.messages[0]') = 'integer'"
        " AND library IN (SELECT value FROM json_each(?)) AND skill IS NOT NULL"
        " UNION SELECT library, name FROM provenance"
        " WHERE library IN (SELECT value FROM json_each(?)) AND session IS NOT NULL"
        " AND first_message IS NOT NULL AND last_message IS NOT NULL",
        (_json_list(libraries), _json_list(libraries)),
    ).fetchall()
    return sorted((library, name) for library, name in rows)


def skills_learned_in(conn: sqlite3.Connection, sessions: Iterable[str]) -> set[tuple[str, str]]:
    """The (library, name) of every skill with a version learned from a window of one of
    `sessions` (what `_versions` finds)."""
    wanted = _json_list(sorted(sessions))
    rows = conn.execute(
        "SELECT library, skill FROM events INDEXED BY events_learned"
        f" WHERE kind IN {LEARNING_KINDS_SQL} AND json_type(detail, '$.messages[0]') = 'integer'"
        " AND session IN (SELECT value FROM json_each(?)) AND skill IS NOT NULL"
        " UNION SELECT library, name FROM provenance"
        " WHERE session IN (SELECT value FROM json_each(?))",
        (wanted, wanted),
    ).fetchall()
    return {(library, name) for library, name in rows}


def _versions(
    conn: sqlite3.Connection, skills: Mapping[tuple[str, str], str | None]
) -> dict[tuple[str, str], list[Version]]:
    """Each skill's versions with a source window, oldest first: the events that wrote them,
    else (a skill written before events named windows) its provenance row."""
    libraries = sorted({library for library, _ in skills})
    # A few skills (a skill's page, a page of the table) are looked up by name.
    few = len(skills) <= FEW_SKILLS
    rows = conn.execute(
        "SELECT library, skill, ts, session,"
        " json_extract(detail, '$.messages[0]'), json_extract(detail, '$.messages[1]'),"
        " json_extract(detail, '$.git.repository'),"
        " COALESCE(json_extract(detail, '$.targets'),"
        " (SELECT targets FROM effect_targets WHERE event = events.id))"
        # Only a version learned from a window has one to measure from: these two terms are
        # the partial index `events_learned`'s (state/db.py), written as it has them.
        f" FROM events INDEXED BY events_learned WHERE kind IN {LEARNING_KINDS_SQL}"
        " AND json_type(detail, '$.messages[0]') = 'integer'"
        " AND library IN (SELECT value FROM json_each(?))"
        + (" AND skill IN (SELECT value FROM json_each(?))" if few else "")
        + " AND session <> '' AND json_type(detail, '$.messages[1]') = 'integer' ORDER BY id",
        (
            _json_list(libraries),
            *([_json_list(sorted({name for _, name in skills}))] if few else []),
        ),
    )
    versions: dict[tuple[str, str], list[Version]] = {}
    for library, name, ts, session, first, last, repository, targets in rows.fetchall():
        key = (library, name)
        if key not in skills:
            continue
        at = instant(ts)
        if at is None:
            continue
        repository = repository if isinstance(repository, str) else None
        versions.setdefault(key, []).append(
            Version(at, session, first, last, repository, _targets(targets))
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
                # Written before events named windows: nothing says what it targets.
                versions[(library, name)] = [Version(at, session, first, last, repository, None)]
    return versions


def _current_versions(
    conn: sqlite3.Connection, skills: Mapping[tuple[str, str], str | None]
) -> dict[tuple[str, str], int]:
    """(library, name) -> the number of its newest version (`skilld.versions`: each write of
    its text is one, a person's edit and a rollback too)."""
    few = len(skills) <= FEW_SKILLS
    names = sorted({name for _, name in skills})
    rows = conn.execute(
        "SELECT library, skill, COUNT(*) FROM events"
        f" WHERE kind IN {VERSION_KINDS_SQL} AND skill IS NOT NULL"
        + (" AND skill IN (SELECT value FROM json_each(?))" if few else "")
        + " GROUP BY library, skill",
        (_json_list(names),) if few else (),
    ).fetchall()
    return {(library, name): count for library, name, count in rows if (library, name) in skills}


def _targets(text: str | None) -> tuple[str, ...] | None:
    """A version's targets as its event (or `effect_targets`) holds them, as JSON."""
    if text is None:
        return None
    value = json.loads(text)
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list) else ()


def _window_failures(
    conn: sqlite3.Connection, versions: Sequence[Version]
) -> dict[str, list[SourceFailure]]:
    """The counted failures (real/hook/masked) inside the versions' windows, by session."""
    windows = sorted({(v.session, v.first_message, v.last_message) for v in versions})
    rows = conn.execute(
        "SELECT f.session, f.seq, f.signature, f.class, f.command, f.resolved"
        " FROM json_each(?) AS w JOIN effect_failures AS f"
        " ON f.session = json_extract(w.value, '$[0]')"
        " AND f.seq BETWEEN json_extract(w.value, '$[1]') AND json_extract(w.value, '$[2]')"
        f" WHERE f.class IN {COUNTED_SQL}",
        (json.dumps(windows),),
    )
    failures: dict[str, list[SourceFailure]] = {}
    for session, seq, signature, cls, command, resolved in rows.fetchall():
        failure = SourceFailure(session, seq, signature, cls, command, bool(resolved))
        failures.setdefault(session, []).append(failure)
    return failures


def _session_facts(
    conn: sqlite3.Connection, sessions: Sequence[str]
) -> dict[str, tuple[str, str | None, str]]:
    """session -> (agent, repository, first message time), for the sessions state.db
    recorded."""
    rows = conn.execute(
        "SELECT session, source, repository, first_ts FROM effect_sessions"
        " WHERE session IN (SELECT value FROM json_each(?))",
        (_json_list(sessions),),
    )
    return {
        session: (source, repository, instant(ts) or "")
        for session, source, repository, ts in rows.fetchall()
    }


#: The columns a `SessionRun` is read from (after its anchor's id).
_RUN = "r.session, r.source, r.repository, r.session_ts"
#: Whether the anchor's signature failed (a counted class) in the run's session.
_FAILED = (
    "EXISTS (SELECT 1 FROM effect_failures AS f WHERE f.session = r.session"
    f" AND f.signature = a.signature AND f.class IN {COUNTED_SQL})"
)


class _Reads:
    """Every anchor of every skill in a temp table, and what the indexes say of them."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        anchors: Mapping[tuple[str, str], list[Anchor]],
        versions: Mapping[tuple[str, str], list[Version]],
        facts: Mapping[str, tuple[str, str | None, str]],
        *,
        with_recurrences: bool,
    ) -> None:
        self.conn = conn
        self._keys: list[tuple[tuple[str, str], int]] = []  # anchor id -> (skill, index)
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS effect_anchor (id INTEGER PRIMARY KEY,"
            " library TEXT, name TEXT, signature TEXT, command TEXT, source TEXT,"
            " repository TEXT, at TEXT, several INTEGER)"
        )
        conn.execute(
            "CREATE INDEX IF NOT EXISTS temp.effect_anchor_skill ON effect_anchor(library, name)"
        )
        conn.execute("DELETE FROM temp.effect_anchor")
        rows = []
        for key, own in anchors.items():
            for index, anchor in enumerate(own):
                fields = (anchor.signature, anchor.command, anchor.source, anchor.repository)
                rows.append((len(self._keys), *key, *fields, anchor.at, len(own) > 1))
                self._keys.append((key, index))
        conn.executemany("INSERT INTO temp.effect_anchor VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        self.counts = self._counts(anchors)
        # The session an anchor was learned from ran its command and failed there; the other
        # source sessions of a skill with several versions are read.
        self.source_runs: dict[tuple[str, str], list[SessionRun]] = {}
        probes = []
        for anchor_id, (key, index) in enumerate(self._keys):
            learned_in = anchors[key][index].session
            source, repository, first_ts = facts[learned_in]
            run = SessionRun(index, learned_in, source, repository, first_ts, True)
            self.source_runs.setdefault(key, []).append(run)
            others = sorted({v.session for v in versions.get(key, [])} - {learned_in})
            probes += [(anchor_id, session) for session in others]
        probed = self._runs(
            "SELECT json_extract(p.value, '$[0]'), " + _RUN + ", " + _FAILED +
            " FROM json_each(?) AS p"
            " JOIN temp.effect_anchor AS a ON a.id = json_extract(p.value, '$[0]')"
            " JOIN effect_runs AS r ON r.session = json_extract(p.value, '$[1]')"
            " AND r.command = a.command",
            (json.dumps(probes),),
        )  # fmt: skip
        for key, runs in probed.items():
            self.source_runs[key] += runs
        # Every exposure of a skill learned from several failures (a session counts once),
        # and, when asked for, where each failure came back.
        self.exposed_runs: dict[tuple[str, str], list[SessionRun]] = {}
        if any(len(own) > 1 for own in anchors.values()):
            self.exposed_runs = self._grouped(
                "SELECT a.id, " + _RUN + ", " + _FAILED + " FROM temp.effect_anchor AS a"
                " CROSS JOIN effect_runs AS r ON r.command = a.command AND r.source = a.source"
                " AND {repository} WHERE a.several",
                "r",
            )  # fmt: skip
        self.failed_runs: dict[tuple[str, str], list[SessionRun]] = {}
        if with_recurrences:
            self.failed_runs = self._grouped(
                "SELECT a.id, f.session, f.source, f.repository, f.session_ts, 1"
                " FROM temp.effect_anchor AS a CROSS JOIN effect_failures AS f"
                " ON f.signature = a.signature AND f.source = a.source AND {repository}"
                f" WHERE f.session_ts > a.at AND f.class IN {COUNTED_SQL}",
                "f",
            )  # fmt: skip

    def _grouped(self, sql: str, table: str) -> dict[tuple[str, str], list[SessionRun]]:
        """`sql` run once for the anchors with a repository (its `{repository}` the range of
        their repository) and once for those without (every repository of the agent)."""
        found: dict[tuple[str, str], list[SessionRun]] = {}
        for known in (True, False):
            where = f"{table}.repository = a.repository" if known else "1"
            anchors = f"a.repository IS {'NOT NULL' if known else 'NULL'}"
            query = sql.format(repository=where)
            query += f" AND {anchors}" if " WHERE " in query else f" WHERE {anchors}"
            for key, runs in self._runs(query).items():
                found.setdefault(key, []).extend(runs)
        return found

    def _counts(
        self, anchors: Mapping[tuple[str, str], list[Anchor]]
    ) -> dict[tuple[str, str], list[AnchorCounts]]:
        """Each anchor's exposures before and after it, one pass over its range of the exposure
        index; its failures before and after, one pass over its range of the failure index (a
        session that failed twice counts once); and the after-exposures of the sessions that
        loaded its skill, read from the loads in their order (each a lookup of the session's
        run of the command), cheaper than a lookup in the loads for every exposure."""
        counts = {key: [AnchorCounts()] * len(own) for key, own in anchors.items()}
        self.loaded_runs = self._grouped(
            "SELECT a.id, " + _RUN + ", " + _FAILED +
            " FROM effect_loads AS l CROSS JOIN temp.effect_anchor AS a"
            " ON a.library = l.library AND a.name = l.name"
            " CROSS JOIN effect_runs AS r ON r.session = l.session AND r.command = a.command"
            " AND r.source = a.source AND {repository} WHERE r.session_ts > a.at",
            "r",
        )  # fmt: skip
        for known in (True, False):
            # A known repository narrows every range; an unknown one spans the agent's runs.
            where = "{t}.repository = a.repository" if known else "1"
            anchors_of_kind = f"a.repository IS {'NOT NULL' if known else 'NULL'}"
            rows = self.conn.execute(
                "SELECT a.id,"
                " COUNT(r.session_ts < a.at OR NULL), COUNT(r.session_ts > a.at OR NULL),"
                " MAX(r.session_ts)"
                " FROM temp.effect_anchor AS a LEFT JOIN effect_runs AS r"
                f" ON r.command = a.command AND r.source = a.source AND {where.format(t='r')}"
                f" WHERE {anchors_of_kind} GROUP BY a.id"
            )  # fmt: skip
            for anchor_id, before, after, newest in rows:
                key, index = self._keys[anchor_id]
                newest = newest if newest is not None and newest > anchors[key][index].at else None
                counts[key][index] = AnchorCounts(before, 0, after, 0, newest)
            rows = self.conn.execute(
                "SELECT a.id, COUNT(DISTINCT CASE WHEN f.session_ts < a.at THEN f.session END),"
                " COUNT(DISTINCT CASE WHEN f.session_ts > a.at THEN f.session END)"
                " FROM temp.effect_anchor AS a JOIN effect_failures AS f"
                " ON f.signature = a.signature AND f.source = a.source"
                f" AND {where.format(t='f')} AND f.class IN {COUNTED_SQL}"
                f" WHERE {anchors_of_kind} GROUP BY a.id"
            )  # fmt: skip
            for anchor_id, failed_before, failed_after in rows:
                key, index = self._keys[anchor_id]
                counts[key][index] = counts[key][index]._replace(
                    before_failures=failed_before, after_failures=failed_after
                )
        return counts

    def _runs(
        self, sql: str, params: Sequence[Any] = ()
    ) -> dict[tuple[str, str], list[SessionRun]]:
        found: dict[tuple[str, str], list[SessionRun]] = {}
        for anchor_id, session, source, repository, session_ts, failed in self.conn.execute(
            sql, params
        ).fetchall():
            key, index = self._keys[anchor_id]
            run = SessionRun(
                index, session, source, repository, instant(session_ts) or "", bool(failed)
            )
            found.setdefault(key, []).append(run)
        return found
