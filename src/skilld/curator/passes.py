"""The lifecycle pass: collect the values, let `lifecycle.plan_pass` decide, carry it out.

Linear in the number of skills: one discovery (hashes only, no frontmatter parsing), one read of
the usage sidecar, one provenance query, and every usage change of the pass in one
`UsageStore` transaction, which is also where the library's own usage updates (archive states,
the patch bump of a rewrite) land: the sidecar is written once, at the end.

The curator's own `disable-model-invocation` rewrites are not activity: the patch bump that
`Library.write` records for them is taken back inside the same transaction, so that disabling a
stale skill does not make it look fresh and reactivate it at the next pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from skilld.app import App
from skilld.curator.lifecycle import Candidate, Plan, Thresholds, Transition, plan_pass
from skilld.skills.document import SkillParseError, parse_skill
from skilld.skills.library import LibraryError, Origin, Protected, SkillEntry
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
    transitions: list[Transition] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    enabled: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
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
        }


def read_last_run(app: App) -> datetime | None:
    return parse_timestamp(app.state.get_meta(LAST_RUN_KEY))


def write_last_run(app: App, moment: datetime) -> None:
    app.state.set_meta(LAST_RUN_KEY, moment.astimezone(UTC).isoformat(timespec="seconds"))


def run_lifecycle(app: App, *, now: datetime, dry_run: bool = False) -> LifecycleReport:
    """One pass over every live skill; with `dry_run`, the plan only (nothing changes)."""
    curator = app.config.curator
    thresholds = Thresholds.from_days(curator.stale_after_days, curator.archive_after_days)
    entries = [
        e for e in app.library.discover(parse=False) if e.root == app.library.root and not e.broken
    ]
    managed = {e.name: e for e in entries if e.owner == "managed"}
    disabled = set(app.state.get_meta(DISABLED_KEY, []))
    report = LifecycleReport(now, dry_run, len(entries), len(managed))
    created: dict[str, datetime | None] = {}

    def created_at(name: str, record: Record | None) -> datetime | None:
        # Provenance is the last anchor, for a managed skill whose usage record is lost: looked
        # up for those few only.
        if name in managed and (record is None or not record.get("created_at")):
            if name not in created:
                provenance = app.state.provenance(name)
                created[name] = parse_timestamp(provenance.created_at) if provenance else None
            return created[name]
        return None

    def plan_for(records: dict[str, Record]) -> Plan:
        candidates = (
            Candidate(e.name, e.owner, record, created_at(e.name, record))
            for e in entries
            for record in (records.get(e.name),)
        )
        return plan_pass(
            candidates,
            now,
            thresholds,
            disabled=disabled,
            disable_stale=curator.disable_stale,
            dialect=app.config.skills.dialect,
        )

    if dry_run:
        plan = plan_for(app.usage.read())
        report.transitions, report.disabled, report.enabled = (
            plan.transitions,
            plan.disable,
            plan.enable,
        )
        return report

    recorded: list[Transition] = []
    with app.usage.transaction() as records:
        plan = plan_for(records)

        def record_of(name: str) -> Record:
            # A managed skill without a record (a lost sidecar) gets one that keeps its age.
            if name not in records:
                records[name] = new_record(created_at(name, None) or now, created_by="agent")
            return records[name]

        for name in plan.enable:
            if _set_invocation(app, managed[name], record_of(name), False, report):
                disabled.discard(name)
                report.enabled.append(name)
        for name in plan.disable:
            if _set_invocation(app, managed[name], record_of(name), True, report):
                disabled.add(name)
                report.disabled.append(name)
        for transition in plan.transitions:
            if transition.kind == "archived":
                if _archive(app, transition, report):
                    recorded.append(transition)
                continue
            record = record_of(transition.name)
            record["state"] = transition.to_state
            if transition.to_state == "active":
                record["archived_at"] = None
            if transition.refresh_anchor:
                record["last_viewed_at"] = format_timestamp(now)
            recorded.append(transition)
    with app.state.transaction():
        for transition in recorded:
            if transition.kind != "archived":  # Library.archive recorded its own event
                app.state.add_event(
                    transition.kind,
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
        app.state.set_meta(DISABLED_KEY, sorted(disabled))
    report.transitions = recorded
    return report


def _archive(app: App, transition: Transition, report: LifecycleReport) -> bool:
    try:
        app.library.archive(
            transition.name,
            CURATOR,
            reason=transition.reason,
            detail={
                "from": transition.from_state,
                "anchor": transition.anchor.isoformat(timespec="seconds"),
                "age_days": transition.age_days,
            },
        )
    except (LibraryError, OSError) as exc:
        _fail(app, report, transition.name, "archive", exc)
        return False
    return True


def _set_invocation(
    app: App, entry: SkillEntry, record: Record, disabled: bool, report: LifecycleReport
) -> bool:
    """Rewrite `entry` with or without `disable-model-invocation`, through the library.

    `record` is the skill's usage record inside the pass's transaction, where the write's patch
    bump lands and is taken back.
    """
    try:
        doc = parse_skill(entry.path.read_bytes(), dialect=app.config.skills.dialect)
    except (OSError, SkillParseError) as exc:
        _fail(app, report, entry.name, "rewrite", exc)
        return False
    before = {key: record.get(key) for key in ("patch_count", "last_patched_at")}
    reason = "stale: hidden from the model" if disabled else "no longer stale: shown to the model"
    try:
        app.library.write(
            replace(doc, disable_model_invocation=disabled), CURATOR, detail={"curator": reason}
        )
    except (LibraryError, OSError) as exc:
        _fail(app, report, entry.name, "rewrite", exc)
        return False
    record.update(before)
    return True


def _fail(app: App, report: LifecycleReport, name: str, action: str, exc: Exception) -> None:
    report.failures.append(Failure(name, action, str(exc)))
    if not isinstance(exc, Protected):  # the library logged a refusal as `protected` already
        app.state.add_event(
            "error", skill=name, source=CURATOR.source, reason=f"curator could not {action}: {exc}"
        )
