"""After a tick has recorded what sessions ran and where they failed: which learned skills
changed verdict (`verdict_changed`), where a skill's failure came back (`failure_recurred`),
and which skills the next window that shows their failure offers for revision.

`observe` reads and decides, `record` writes the events and what the next tick compares
with (state.db meta), in one transaction.

Measuring every skill costs what the library and its history hold (1.3 s at 10,000 skills
and 1,000,000 failures), and a tick that reads sessions changes few skills: those
whose command heads its sessions ran, whose signatures failed, or which they loaded. So a
tick keeps a `Reach` of what it wrote, and `observe` measures only the skills it reaches,
keeping the last measurement's rows for the rest, when that measurement saw everything but
this tick's writes; otherwise (another writer, a replaced file, a new skill) every skill.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from skilld.effect import store
from skilld.effect.extract import COUNTED_CLASSES, COUNTED_SQL
from skilld.effect.report import (
    MEASUREMENT_KEY,
    SkillEffect,
    effect_records,
    measurement,
    measurement_stamp,
    skills_learned_in,
)
from skilld.effect.verdict import revision
from skilld.state import StateDB

#: state.db meta: each learned skill's last verdict ("library/name" -> verdict).
VERDICTS_KEY = "effect_verdicts"
#: state.db meta: the skills to offer for revision, by the signature of their failure.
REVISE_KEY = "effect_revise"
#: state.db meta: the newest effect_failures id already looked at.
SEEN_KEY = "effect_seen_failure"


class Change(NamedTuple):
    library: str
    name: str
    before: str
    after: str
    evidence: str


class Recurred(NamedTuple):
    library: str
    name: str
    signature: str
    session: str
    loaded: bool
    verdict: str


class Observation(NamedTuple):
    changes: list[Change]
    recurred: list[Recurred]
    verdicts: dict[str, str]
    revise: dict[str, list[dict[str, str]]]
    seen: int
    #: Every skill's row, for the commands to print while it still holds.
    measurement: dict[str, Any]


class Reach:
    """What a tick's writes to the effect tables can have changed: the command heads its
    sessions ran, the signatures that failed, the skills loaded, and the sessions whose earlier
    rows changed (their agent, repository or start; a failure resolved), which reach every
    command and signature of theirs and every skill learned in them. `known` turns False when
    a write reached further (a replaced file's failures dropped, history read on a first
    look): then every skill is measured."""

    def __init__(self, generation: int) -> None:
        #: The tables' write generation before the tick wrote to them.
        self.generation = generation
        self.commands: set[str] = set()
        self.signatures: set[str] = set()
        self.skills: set[tuple[str, str]] = set()
        self.sessions: set[str] = set()
        self.known = True

    def record(self, conn: sqlite3.Connection, reads: Sequence[store.ReadRecord]) -> None:
        """Write `reads` (`store.record_reads`) and note what they reach."""
        self.sessions |= store.record_reads(conn, reads)
        for read in reads:
            self.commands.update(read.runs)
            self.signatures.update(failure.signature for failure in read.failures)

    def widen(self, conn: sqlite3.Connection) -> None:
        """Add what the sessions whose earlier rows changed reach (read back from the tables,
        after the tick's writes)."""
        if self.sessions:
            commands, signatures = store.session_heads(conn, self.sessions)
            self.commands |= commands
            self.signatures |= signatures
            self.skills |= skills_learned_in(conn, self.sessions)
            self.sessions = set()

    def reaches(self, row: Mapping[str, Any]) -> bool:
        """Whether these writes can have changed a skill's measured `row`."""
        if (row["library"], row["name"]) in self.skills:
            return True
        return any(
            failure["command"] in self.commands or failure["signature"] in self.signatures
            for failure in row["source_failures"]
        )


def _key(library: str, name: str) -> str:
    return f"{library}/{name}"


def verdict_changes(previous: Mapping[str, str], records: Iterable[SkillEffect]) -> list[Change]:
    """The skills whose verdict differs from the one last recorded (a skill seen for the
    first time has no change: its first verdict is where it starts)."""
    changes = []
    for record in records:
        before = previous.get(_key(record.library, record.name))
        if before is not None and before != record.outcome.verdict:
            changes.append(
                Change(
                    record.library,
                    record.name,
                    before,
                    record.outcome.verdict,
                    record.outcome.evidence,
                )
            )
    return changes


def revisable(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """signature -> the skills learned from it that a window showing it offers for revision
    (`verdict.revision`: its routing or its content), with their verdict and evidence, from
    their measured rows."""
    offers: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        kind = revision(row["verdict"], row["after"]["loaded_failures"])
        if kind is None:
            continue
        for failure in row["source_failures"]:
            offers.setdefault(failure["signature"], []).append(
                {
                    "library": row["library"],
                    "name": row["name"],
                    "verdict": row["verdict"],
                    "evidence": row["evidence"],
                    "revision": kind,
                    # Where the failure came back: where it was loaded (content) or not.
                    "loaded": "yes" if kind == "content" else "no",
                }
            )
    return offers


def observe(
    state: StateDB, libraries: Sequence[str], *, min_exposures: int, reach: Reach | None = None
) -> Observation:
    """What the effect tables say now against what the last look recorded. With the `reach`
    of the writes since that look (a tick's), only the skills they reach are measured again."""
    conn = state.conn
    seen = int(state.get_meta(SEEN_KEY, 0) or 0)
    newest = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM effect_failures").fetchone()[0])
    fresh = {
        (signature, session)
        for signature, session in conn.execute(
            "SELECT signature, session FROM effect_failures"
            f" WHERE id > ? AND class IN {COUNTED_SQL}",
            (seen,),
        ).fetchall()
    }
    # Taken before the measurement: a change while it runs makes the stamp stale, not wrong.
    stamp = measurement_stamp(conn, min_exposures=min_exposures)
    kept = _kept(state, libraries, stamp, reach)
    if kept is None:
        records = effect_records(conn, libraries, min_exposures=min_exposures)
        rows = [record.row() for record in records]
        last_exposures = [record.measured.last_exposure for record in records]
    else:
        assert reach is not None
        reach.widen(conn)
        rows, last_exposures = kept
        reached = {
            (row["library"], row["name"]): index
            for index, row in enumerate(rows)
            if reach.reaches(row)
        }
        records = effect_records(conn, libraries, min_exposures=min_exposures, names=reached)
        for record in records:
            index = reached[(record.library, record.name)]
            rows[index], last_exposures[index] = record.row(), record.measured.last_exposure
    signatures = {signature for signature, _ in fresh}
    touched = [
        (row["library"], row["name"])
        for row in rows
        if any(failure["signature"] in signatures for failure in row["source_failures"])
    ]
    recurred = []
    if touched:
        for record in effect_records(
            conn, libraries, min_exposures=min_exposures, names=touched, with_recurrences=True
        ):
            recurred += [
                Recurred(
                    record.library,
                    record.name,
                    r.signature,
                    r.session,
                    r.loaded,
                    record.outcome.verdict,
                )
                for r in record.recurrences
                if (r.signature, r.session) in fresh
            ]
    previous: dict[str, str] = state.get_meta(VERDICTS_KEY, {}) or {}
    return Observation(
        changes=verdict_changes(previous, records),
        recurred=recurred,
        verdicts={_key(row["library"], row["name"]): row["verdict"] for row in rows},
        revise=revisable(rows),
        seen=newest,
        measurement=measurement(rows, last_exposures, libraries, stamp),
    )


def _kept(
    state: StateDB, libraries: Sequence[str], stamp: list[Any], reach: Reach | None
) -> tuple[list[dict[str, Any]], list[str | None]] | None:
    """The last measurement's rows and last exposures when they differ from today's only by
    what `reach` says was written since: taken of the same libraries, under the same stamp but
    for the effect tables' generation, which was the one `reach` started from."""
    if reach is None or not reach.known:
        return None
    kept = state.get_meta(MEASUREMENT_KEY, None)
    if not isinstance(kept, dict) or kept.get("libraries") != list(libraries):
        return None
    before = kept.get("stamp")
    if not isinstance(before, list) or before[1:] != stamp[1:] or before[:1] != [reach.generation]:
        return None
    return list(kept["rows"]), list(kept["last_exposures"])


def record(state: StateDB, observation: Observation) -> None:
    """The observation's events, and what the next look compares with."""
    with state.transaction():
        for recurred in observation.recurred:
            where = "where it was loaded" if recurred.loaded else "where it was not loaded"
            state.add_event(
                "failure_recurred",
                library=recurred.library,
                skill=recurred.name,
                session=recurred.session,
                reason=f"{recurred.signature} failed again, {where}",
                detail={
                    "signature": recurred.signature,
                    "loaded": recurred.loaded,
                    "verdict": recurred.verdict,
                },
            )
        for change in observation.changes:
            state.add_event(
                "verdict_changed",
                library=change.library,
                skill=change.name,
                reason=change.evidence,
                detail={"from": change.before, "to": change.after},
            )
        state.set_meta(VERDICTS_KEY, observation.verdicts)
        state.set_meta(REVISE_KEY, observation.revise)
        state.set_meta(SEEN_KEY, observation.seen)
        state.set_meta(MEASUREMENT_KEY, observation.measurement)


def revision_offers(
    state: StateDB, library: str, signatures: Iterable[str]
) -> list[dict[str, Any]]:
    """The skills of `library` a window showing `signatures` offers for revision, each once,
    with the signatures of its that the window shows."""
    revise: dict[str, list[dict[str, str]]] = state.get_meta(REVISE_KEY, {}) or {}
    offers: dict[str, dict[str, Any]] = {}
    for signature in signatures:
        for offer in revise.get(signature, []):
            if offer.get("library") == library:
                entry = offers.setdefault(offer["name"], {**offer, "signatures": []})
                entry["signatures"].append(signature)
    return [offers[name] for name in sorted(offers)]


def window_offers(
    state: StateDB, library: str, session: str, first_message: int, last_message: int
) -> list[dict[str, Any]]:
    """The skills of `library` that the window (the session's messages first..last) offers
    for revision: those learned from a counted failure (real, hook, masked) the window shows
    again."""
    signatures = {
        failure.signature
        for failure in store.window_failures(state.conn, session, first_message, last_message)
        if failure.cls in COUNTED_CLASSES
    }
    return revision_offers(state, library, sorted(signatures))
