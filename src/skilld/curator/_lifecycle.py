"""The curator's lifecycle decisions (docs/design.md), as pure functions over plain values.

A managed, unpinned skill ages from its anchor: the newest real activity (`latest_activity_at`
of its usage record), else the record's `created_at`, else the `created_at` of its provenance.
Older than `stale_after` it becomes `stale`; older than `archive_after` it is archived; a stale
skill whose anchor is fresh again (new activity) becomes `active`. A skill whose record says
`archived` while its file is back in the skills dir was put back by hand or by another tool: it
is active again, and its anchor is refreshed as a restore would, so that the next pass does not
archive it straight back.

Nothing here reads a file or a clock: the I/O pass (`skilld.curator.passes`) collects the
values, calls `plan_pass`, and carries the plan out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from skilld.effect.holdout import Span, withheld_time
from skilld.skills.usage import latest_activity_at, parse_timestamp

TransitionKind = Literal["stale", "reactivated", "archived"]

#: Dialects whose frontmatter can carry `disable-model-invocation`.
DISABLE_DIALECTS = frozenset({"dsh", "claude"})
_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Thresholds:
    stale_after: timedelta
    archive_after: timedelta

    @classmethod
    def from_days(cls, stale_after_days: float, archive_after_days: float) -> Thresholds:
        return cls(timedelta(days=stale_after_days), timedelta(days=archive_after_days))


@dataclass(frozen=True, slots=True)
class LiveSkill:
    """One live skill as the pass sees it: who owns it and what its usage record says."""

    name: str
    owner: str
    record: Mapping[str, Any] | None
    provenance_created_at: datetime | None = None
    #: For a skill whose verdict is `helps` (skilld.effect): the start of the newest session
    #: that ran its command since it was learned. Its failure is not coming back: that is
    #: activity, however rarely the skill itself is loaded.
    exposed_at: datetime | None = None
    #: When the holdout withheld it (skilld.effect.holdout): a withheld day is no unused day,
    #: so that time after the anchor does not count toward its age.
    withheld: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class Transition:
    name: str
    #: Also the kind of the event that records it.
    kind: TransitionKind
    from_state: str
    to_state: Literal["active", "stale", "archived"]
    anchor: datetime
    age_days: float
    reason: str
    #: Set when the skill came back from the archive without a restore: touch its anchor.
    refresh_anchor: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    transitions: list[Transition] = field(default_factory=list)
    #: Skills to rewrite with `disable-model-invocation: true` / without it.
    disable: list[str] = field(default_factory=list)
    enable: list[str] = field(default_factory=list)


def is_curatable(candidate: LiveSkill) -> bool:
    """Only skills skilld wrote, and that nobody pinned, move automatically."""
    record = candidate.record or {}
    return candidate.owner == "managed" and record.get("pinned") is not True


def anchor_of(
    record: Mapping[str, Any] | None,
    provenance_created_at: datetime | None,
    exposed_at: datetime | None = None,
) -> datetime | None:
    """The newest real activity, else when the record (or the provenance) was created; a
    `helps` skill's newest exposure counts when it is newer."""
    moment = None
    if record:
        moment = latest_activity_at(record) or parse_timestamp(record.get("created_at"))
    if moment is None:
        moment = provenance_created_at
    if exposed_at is not None and (moment is None or exposed_at > moment):
        return exposed_at
    return moment


def state_of(record: Mapping[str, Any] | None) -> str:
    state = (record or {}).get("state")
    return state if state in ("stale", "archived") else "active"


def decide(candidate: LiveSkill, now: datetime, thresholds: Thresholds) -> Transition | None:
    """The one transition `candidate` makes at `now`, or None."""
    if not is_curatable(candidate):
        return None
    anchor = anchor_of(candidate.record, candidate.provenance_created_at, candidate.exposed_at)
    if anchor is None:
        return None
    state = state_of(candidate.record)
    age = now - anchor - withheld_time(candidate.withheld, anchor, now)
    age_days = round(age / _DAY, 2)
    if state == "archived":
        return Transition(
            candidate.name,
            "reactivated",
            state,
            "active",
            anchor,
            age_days,
            "back in the skills dir without a restore; anchor refreshed",
            refresh_anchor=True,
        )
    if age > thresholds.archive_after:
        reason = (
            f"no activity for {age_days:g} days (archive after {_days(thresholds.archive_after)})"
        )
        return Transition(candidate.name, "archived", state, "archived", anchor, age_days, reason)
    if age > thresholds.stale_after:
        if state == "stale":
            return None
        reason = f"no activity for {age_days:g} days (stale after {_days(thresholds.stale_after)})"
        return Transition(candidate.name, "stale", state, "stale", anchor, age_days, reason)
    if state == "stale":
        return Transition(
            candidate.name, "reactivated", state, "active", anchor, age_days, "new activity"
        )
    return None


def plan_pass(
    candidates: Iterable[LiveSkill],
    now: datetime,
    thresholds: Thresholds,
    *,
    disabled: Collection[str] = (),
    disable_stale: bool = False,
    dialect: str = "dsh",
) -> Plan:
    """Every transition of this pass, and the `disable-model-invocation` rewrites it implies.

    `disabled` names the skills the curator has rewritten as not model-invocable. A skill is
    wanted disabled when `disable_stale` is on, the dialect can say so, and it stays stale.
    Whatever differs from that is rewritten, so turning the option off, a reactivation, or an
    archive (the archive keeps a usable skill, ready for a restore) all enable it again.
    """
    plan = Plan()
    for candidate in candidates:
        transition = decide(candidate, now, thresholds)
        if transition is not None:
            plan.transitions.append(transition)
        if not is_curatable(candidate):
            continue
        state = transition.to_state if transition else state_of(candidate.record)
        wanted = disable_stale and dialect in DISABLE_DIALECTS and state == "stale"
        if wanted and candidate.name not in disabled:
            plan.disable.append(candidate.name)
        elif not wanted and candidate.name in disabled:
            plan.enable.append(candidate.name)
    return plan


def _days(span: timedelta) -> str:
    return f"{span / _DAY:g} days"
