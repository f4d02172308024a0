"""After a tick has recorded what sessions ran and where they failed: which learned skills
changed verdict (`verdict_changed`), where a skill's failure came back (`failure_recurred`),
and which skills the next window that shows their failure offers for revision.

`observe` reads and decides, `record` writes the events and what the next tick compares
with (state.db meta), in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from skilld.effect.measure import COUNTED_CLASSES
from skilld.effect.report import (
    MEASUREMENT_KEY,
    SkillEffect,
    effect_records,
    measurement,
    measurement_stamp,
)
from skilld.effect.store import window_failures
from skilld.effect.verdict import needs_revision
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


def revisable(records: Iterable[SkillEffect]) -> dict[str, list[dict[str, str]]]:
    """signature -> the skills learned from it that a window showing it offers for revision
    (`verdict.needs_revision`), with their verdict and evidence."""
    offers: dict[str, list[dict[str, str]]] = {}
    for record in records:
        outcome, counts = record.outcome, record.measured.counts
        if not needs_revision(outcome.verdict, counts.loaded_failures):
            continue
        for signature, _, _ in record.measured.source_failures:
            offers.setdefault(signature, []).append(
                {
                    "library": record.library,
                    "name": record.name,
                    "verdict": outcome.verdict,
                    "evidence": outcome.evidence,
                    "loaded": "yes" if counts.loaded_failures else "no",
                }
            )
    return offers


def observe(state: StateDB, libraries: Sequence[str], *, min_exposures: int) -> Observation:
    """What the effect tables say now against what the last look recorded."""
    conn = state.conn
    seen = int(state.get_meta(SEEN_KEY, 0) or 0)
    newest = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM effect_failures").fetchone()[0])
    fresh = {
        (signature, session)
        for signature, session in conn.execute(
            "SELECT signature, session FROM effect_failures"
            " WHERE id > ? AND class IN ('real', 'hook')",
            (seen,),
        ).fetchall()
    }
    # Taken before the measurement: a change while it runs makes the stamp stale, not wrong.
    stamp = measurement_stamp(conn, min_exposures=min_exposures)
    records = effect_records(conn, libraries, min_exposures=min_exposures)
    signatures = {signature for signature, _ in fresh}
    touched = [
        (record.library, record.name)
        for record in records
        if any(signature in signatures for signature, _, _ in record.measured.source_failures)
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
        verdicts={_key(r.library, r.name): r.outcome.verdict for r in records},
        revise=revisable(records),
        seen=newest,
        measurement=measurement(records, libraries, stamp),
    )


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
    for revision: those learned from a real or hook failure the window shows again."""
    signatures = {
        failure.signature
        for failure in window_failures(state.conn, session, first_message, last_message)
        if failure.cls in COUNTED_CLASSES
    }
    return revision_offers(state, library, sorted(signatures))
