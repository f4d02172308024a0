"""The lifecycle pass: collect the values, let `lifecycle.plan_pass` decide, carry it out.

Linear in the number of skills: one discovery (hashes only, no frontmatter parsing), one read of
the usage sidecar, one provenance query, the file moves, then every usage change of the pass in
one short sidecar transaction (the lock Hermes shares is never held across a file move or a
SQLite commit), then the pass's events in one SQLite transaction.

The curator's own `disable-model-invocation` rewrites are not activity: they are written with
`activity=False`, so disabling a stale skill does not make it look fresh and reactivate it at the
next pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from skilld.app import App
from skilld.curator._lifecycle import LiveSkill, Thresholds, Transition, plan_pass
from skilld.effect.holdout_store import spans as holdout_spans
from skilld.errors import LibraryError, Protected
from skilld.fsutil import UnsafePath
from skilld.routing import DEFAULT_LIBRARY
from skilld.skills.document import SkillParseError, parse_skill
from skilld.skills.library import Library, SkillEntry
from skilld.skills.outcomes import Origin, Unchanged, Written
from skilld.skills.usage import Record, format_timestamp, new_record, parse_timestamp

CURATOR = Origin(source="curator")
#: state.db meta: when the last pass ran (ISO-8601), and which skills the curator disabled.
#: A name stays on that list while its skill is away (archived by hand or by a merge), so that
#: the first pass after a restore shows it to the model again.
LAST_RUN_KEY = "curator_last_run"
DISABLED_KEY = "curator_disabled"


@dataclass
class Failure:
    name: str
    action: str
    reason: str


@dataclass
class LifecycleReport:
    now: datetime
    dry_run: bool
    skills_seen: int
    managed: int
    library: str = ""
    transitions: list[Transition] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    enabled: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    #: Skills whose verdict is `worse` (skilld effect), with the evidence: reported for a
    #: person to judge, never moved for it.
    worse: list[dict[str, str]] = field(default_factory=list)
    #: Why the pass moved nothing: the usage sidecar it judges by was refused (a link, not
    #: a regular file); no record read is not no use.
    refused: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "library": self.library,
            "now": self.now.isoformat(timespec="seconds"),
            "dry_run": self.dry_run,
            "skills_seen": self.skills_seen,
            "managed": self.managed,
            "transitions": [
                {
                    **asdict(t),
                    "anchor": t.anchor.isoformat(timespec="seconds"),
                }
                for t in self.transitions
            ],
            "disabled_model_invocation": self.disabled,
            "enabled_model_invocation": self.enabled,
            "failures": [asdict(f) for f in self.failures],
            "worse": self.worse,
            "refused": self.refused,
        }


def _effect_of(app: App, library: Library) -> tuple[dict[str, datetime], list[dict[str, str]]]:
    """The newest exposure of each `helps` skill, and the `worse` skills with their evidence
    (skilld.effect: one read for the library)."""
    from skilld.effect.report import effect_records

    exposed: dict[str, datetime] = {}
    worse: list[dict[str, str]] = []
    app.backfill_targets()
    for record in effect_records(
        app.state.conn, [library.name], min_exposures=app.config.effect.min_exposures
    ):
        verdict, last = record.outcome.verdict, parse_timestamp(record.measured.last_exposure)
        if verdict == "helps" and last is not None:
            exposed[record.name] = last
        elif verdict == "worse":
            worse.append({"name": record.name, "evidence": record.outcome.evidence})
    return exposed, worse


def read_last_run(app: App) -> datetime | None:
    return parse_timestamp(app.state.get_meta(LAST_RUN_KEY))


def write_last_run(app: App, moment: datetime) -> None:
    app.state.set_meta(LAST_RUN_KEY, moment.astimezone(UTC).isoformat(timespec="seconds"))


def run_lifecycle(
    app: App, library: Library, *, now: datetime, dry_run: bool = False
) -> LifecycleReport:
    """One pass over every live skill of `library`; with `dry_run`, the plan only.

    The usage sidecar's lock (Hermes takes the same one) is held only while its records are
    read-modified-written, never across a file move or a SQLite commit.
    """
    curator = app.config.curator
    thresholds = Thresholds.from_days(curator.stale_after_days, curator.archive_after_days)
    entries = [e for e in library.entries(parse=False) if not e.broken]
    managed = {e.name: e for e in entries if e.owner == "managed"}
    disabled_key = _disabled_key(library)
    disabled = set(app.state.get_meta(disabled_key, []))
    report = LifecycleReport(now, dry_run, len(entries), len(managed), library=library.name)
    anchors = _CreationAnchors(app, library, managed)
    try:
        records = library.usage_records()
    except UnsafePath as refused:
        report.refused = f"usage not read: {refused}"
        return report
    exposed, report.worse = _effect_of(app, library)
    withheld = holdout_spans(app.state.conn, library.name)
    candidates = [
        LiveSkill(
            e.name, e.owner, record, anchors.created_at(e.name, record), exposed.get(e.name),
            tuple(withheld.get(e.name, ())),
        )
        for e in entries
        for record in (records.get(e.name),)
    ]  # fmt: skip
    plan = plan_pass(
        candidates,
        now,
        thresholds,
        disabled=disabled,
        disable_stale=curator.disable_stale,
        dialect=library.dialect,
    )
    if dry_run:
        report.transitions, report.disabled, report.enabled = (
            plan.transitions,
            plan.disable,
            plan.enable,
        )
        return report

    # Each change below checks the skill's pin in `records`, the sidecar as this pass read it:
    # one read for the pass, not one per skill (a pin made during the pass counts at the next).
    for name in plan.enable:
        if _set_invocation(library, managed[name], False, report, records):
            disabled.discard(name)
            report.enabled.append(name)
    for name in plan.disable:
        if _set_invocation(library, managed[name], True, report, records):
            disabled.add(name)
            report.disabled.append(name)
    archived = [
        t
        for t in plan.transitions
        if t.kind == "archived" and _archive(library, t, report, records)
    ]
    marked = [t for t in plan.transitions if t.kind != "archived"]
    _update_records(library, archived, marked, now, anchors)
    _record_pass(app, library, marked, disabled_key, disabled)
    done = {id(transition) for transition in [*archived, *marked]}
    # In the plan's order, so a person's run prints what its dry run printed.
    report.transitions = [t for t in plan.transitions if id(t) in done]
    return report


class _CreationAnchors:
    """When a managed skill whose usage record is lost (or has no creation time) was created:
    provenance is the last anchor of its age, looked up for those few only, once each."""

    def __init__(self, app: App, library: Library, managed: Mapping[str, SkillEntry]) -> None:
        self.app = app
        self.library = library
        self.managed = managed
        self._found: dict[str, datetime | None] = {}

    def created_at(self, name: str, record: Record | None) -> datetime | None:
        if name not in self.managed or (record is not None and record.get("created_at")):
            return None
        if name not in self._found:
            provenance = self.app.state.provenance(self.library.name, name)
            self._found[name] = parse_timestamp(provenance.created_at) if provenance else None
        return self._found[name]


def _update_records(
    library: Library,
    archived: list[Transition],
    marked: list[Transition],
    now: datetime,
    anchors: _CreationAnchors,
) -> None:
    """Every usage change of the pass, in one short sidecar transaction."""
    with library.usage.transaction() as current:
        for transition in archived:
            if (record := current.get(transition.name)) is not None:
                record["state"] = "archived"
                record["archived_at"] = format_timestamp(now)
        for transition in marked:
            record = current.get(transition.name)
            if record is None:  # a managed skill without a record (a lost sidecar) keeps its age
                anchor = anchors.created_at(transition.name, None) or now
                record = current[transition.name] = new_record(anchor, created_by="agent")
            record["state"] = transition.to_state
            if transition.to_state == "active":
                record["archived_at"] = None
            if transition.refresh_anchor:
                record["last_viewed_at"] = format_timestamp(now)


def _record_pass(
    app: App, library: Library, marked: list[Transition], disabled_key: str, disabled: set[str]
) -> None:
    """The pass's events and the skills it leaves disabled, in one SQLite transaction."""
    with app.state.transaction():
        for transition in marked:
            app.state.add_event(
                transition.kind,
                library=library.name,
                skill=transition.name,
                source=CURATOR.source,
                reason=transition.reason,
                detail={
                    "from": transition.from_state,
                    "to": transition.to_state,
                    "anchor": transition.anchor.isoformat(timespec="seconds"),
                    "age_days": transition.age_days,
                },
            )
        app.state.set_meta(disabled_key, sorted(disabled))


def _disabled_key(library: Library) -> str:
    """The meta key of the skills the curator disabled in `library` (the unqualified key is
    the single library's, as before libraries existed)."""
    return DISABLED_KEY if library.name == DEFAULT_LIBRARY else f"{DISABLED_KEY}:{library.name}"


def _archive(
    library: Library, transition: Transition, report: LifecycleReport, records: Mapping[str, Record]
) -> bool:
    try:
        library.archive(
            transition.name,
            CURATOR,
            reason=transition.reason,
            detail={
                "from": transition.from_state,
                "anchor": transition.anchor.isoformat(timespec="seconds"),
                "age_days": transition.age_days,
            },
            mark_usage=False,
            records=records,
        )
    except (LibraryError, OSError) as exc:
        _fail(library, report, transition.name, "archive", exc)
        return False
    return True


def _set_invocation(
    library: Library,
    entry: SkillEntry,
    disabled: bool,
    report: LifecycleReport,
    records: Mapping[str, Record],
) -> bool:
    """Rewrite `entry` with or without `disable-model-invocation`, through the library. The
    curator's own rewrite is no activity: it is not counted as a patch, so that disabling a
    stale skill does not make it look fresh."""
    try:
        doc = parse_skill(entry.content(), dialect=library.form)
    except (LibraryError, SkillParseError) as exc:
        _fail(library, report, entry.name, "rewrite", exc)
        return False
    reason = "stale: hidden from the model" if disabled else "no longer stale: shown to the model"
    outcome = library.write(
        doc._replace(disable_model_invocation=disabled), CURATOR, activity=False, records=records
    )
    library.commit(outcome, CURATOR, detail={"curator": reason})
    if isinstance(outcome, Written | Unchanged):
        return True
    report.failures.append(Failure(entry.name, "rewrite", outcome.reason))
    return False


def _fail(
    library: Library, report: LifecycleReport, name: str, action: str, exc: Exception
) -> None:
    report.failures.append(Failure(name, action, str(exc)))
    if not isinstance(exc, Protected):  # the library logged a refusal as `protected` already
        library.state.add_event(
            "error",
            library=library.name,
            skill=name,
            source=CURATOR.source,
            reason=f"curator could not {action}: {exc}",
        )
