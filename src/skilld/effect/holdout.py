"""The switchback holdout's decisions (DESIGN.md §14), as pure functions over plain values.

Time is cut into blocks of `holdout_block_hours` starting at 04:00 local time (a night's
sessions stay in one block); on a share `holdout` of the blocks, drawn for each skill
separately, the skill is withheld from the agent. The draw is HMAC-SHA256 of (library, skill,
block start) keyed with a per-install secret: the same on every run of this install
(reproducible, so a restarted daemon withholds the same blocks), and not guessable from a
transcript or a skill file.

A session's arm is the skill's state at its first message; a session during which the state
changed is in neither arm. Per skill the arms are compared by the difference of their
recurrence rates (present minus withheld: below zero, the skill helps) with a 95% interval.

The interval is Newcombe's hybrid score interval (Newcombe 1998, method 10), built from the
two arms' Wilson score intervals. Why this one: it is closed-form (the daemon judges every
skill in holdout at each block, ten thousand of them in a large library, with no search), it is
defined when an arm has no failure or no success (Wald's is not: 0 of 9 gives a zero-width
interval), and its coverage stays close to 95% at the small counts a holdout has (a few dozen
withheld sessions), where Wald's falls well below. An exact interval (Chan-Zhang,
Agresti-Min) would need a search over the nuisance rate for every skill at every block, for
coverage that is no better in practice than Newcombe's at these counts.

A holdout is judged at every block, so its interval is looked at up to `holdout_max_days`
times: a 95% interval looked at sixty times excludes zero by chance for about 11% of skills
whose arms fail alike (simulated). The decision therefore waits until each arm has
`MIN_ARM_SESSIONS` sessions and takes the 99% interval (`DECISION_Z`): about 3% then, while a
skill whose withheld rate is three times its present rate, at two sessions a day, is still
decided within 60 days for about 86% of skills (tests/campaigns/test_holdout.py). The row
shows the 95% interval.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from collections.abc import Iterable, Sequence
from datetime import datetime, time, timedelta
from typing import Literal, NamedTuple

HoldoutState = Literal["running", "decided", "ended", "off"]
Arm = Literal["present", "withheld"]

#: The local hour blocks start at.
BLOCK_START_HOUR = 4
#: z of the interval the row shows (95%, two-sided).
Z95 = 1.959963984540054
#: z of the interval a decision takes (99%, two-sided): see the module docstring.
DECISION_Z = 2.5758293035489004
#: Sessions each arm needs before the holdout can be decided.
MIN_ARM_SESSIONS = 5
_DAY = timedelta(days=1)


def block_start(moment: datetime, hours: int) -> datetime:
    """The start of the block `moment` falls in (aware, local time). A day starts at 04:00
    local time and is cut into blocks of `hours` (1 to 24); the last block of a day ends at the
    next day's 04:00, whatever its length."""
    local = moment.astimezone()
    day = local.date()
    if local.time() < time(BLOCK_START_HOUR):
        day -= _DAY
    start = datetime.combine(day, time(BLOCK_START_HOUR)).astimezone()
    steps = int((local - start) / timedelta(hours=hours))
    return start + timedelta(hours=hours) * steps


def block_end(start: datetime, hours: int) -> datetime:
    """When the block starting at `start` ends: the next block's start."""
    local = start.astimezone()
    next_day = local.date() + (_DAY if local.time() >= time(BLOCK_START_HOUR) else timedelta())
    day_end = datetime.combine(next_day, time(BLOCK_START_HOUR)).astimezone()
    return min(start + timedelta(hours=hours), day_end)


def draw(secret: bytes, library: str, skill: str, start: datetime) -> float:
    """The skill's draw for the block at `start`, uniform in [0, 1)."""
    message = "\0".join((library, skill, start.isoformat(timespec="seconds"))).encode()
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    (value,) = struct.unpack(">Q", digest[:8])
    return value / 2.0**64


def is_withheld(secret: bytes, library: str, skill: str, start: datetime, share: float) -> bool:
    """Whether the skill is withheld during the block at `start`."""
    return share > 0 and draw(secret, library, skill, start) < share


def ineligible_reason(*, owner: str, pinned: bool, source_failures: int, team: bool) -> str | None:
    """Why a skill is never held out, or None when it may be: only a skill skilld wrote (not a
    person's, a hub's or a bundled one), with source failures to measure, not pinned, in a
    library without a team remote (a withheld file must not be committed)."""
    if owner != "managed":
        return f"owned by {owner}"
    if pinned:
        return "pinned"
    if not source_failures:
        return "no source failures"
    if team:
        return "team library"
    return None


class Span(NamedTuple):
    """A time the skill was withheld: [start, end); end None while it still is."""

    start: datetime
    end: datetime | None


class SessionSpan(NamedTuple):
    session: str
    first: datetime  # its first message
    last: datetime  # its last message seen
    failed: bool  # a source failure's signature failed in it


def arm_of(first: datetime, last: datetime, spans: Sequence[Span], *, now: datetime) -> Arm | None:
    """The skill's state at the session's first message; None when it changed during the
    session (a span started or ended after the first message, up to its last)."""
    arm: Arm = "present"
    for span in spans:
        end = span.end or now
        if span.start <= first < end:
            arm = "withheld"
        if first < span.start <= last or (span.end is not None and first < span.end <= last):
            return None
    return arm


class ArmCounts(NamedTuple):
    sessions: int = 0
    failures: int = 0

    @property
    def rate(self) -> float | None:
        return self.failures / self.sessions if self.sessions else None


def arms(
    sessions: Iterable[SessionSpan], spans: Sequence[Span], *, now: datetime
) -> tuple[ArmCounts, ArmCounts]:
    """(present, withheld) over `sessions` (those that ran a source failure's command head,
    while the holdout ran)."""
    counts = {"present": [0, 0], "withheld": [0, 0]}
    for session in sessions:
        arm = arm_of(session.first, session.last, spans, now=now)
        if arm is not None:
            counts[arm][0] += 1
            counts[arm][1] += session.failed
    return ArmCounts(*counts["present"]), ArmCounts(*counts["withheld"])


def wilson(failures: int, sessions: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a rate."""
    if sessions == 0:
        return 0.0, 1.0
    p = failures / sessions
    z2 = z * z
    centre = p + z2 / (2 * sessions)
    spread = z * math.sqrt(p * (1 - p) / sessions + z2 / (4 * sessions * sessions))
    denominator = 1 + z2 / sessions
    return max(0.0, (centre - spread) / denominator), min(1.0, (centre + spread) / denominator)


def newcombe(
    present: ArmCounts, withheld: ArmCounts, z: float = Z95
) -> tuple[float, float, float] | None:
    """The present rate minus the withheld rate, with Newcombe's hybrid score interval (method
    10): (difference, low, high); None while an arm has no session."""
    if not present.sessions or not withheld.sessions:
        return None
    p1, p2 = present.failures / present.sessions, withheld.failures / withheld.sessions
    l1, u1 = wilson(present.failures, present.sessions, z)
    l2, u2 = wilson(withheld.failures, withheld.sessions, z)
    difference = p1 - p2
    low = difference - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = difference + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return difference, max(-1.0, low), min(1.0, high)


def decided(present: ArmCounts, withheld: ArmCounts) -> bool:
    """Whether the holdout is decided: each arm has its sessions and the decision's interval
    excludes zero (either way: a skill that makes its failure worse is decided too)."""
    if min(present.sessions, withheld.sessions) < MIN_ARM_SESSIONS:
        return False
    found = newcombe(present, withheld, DECISION_Z)
    return found is not None and (found[2] < 0 or found[1] > 0)


def next_state(
    state: HoldoutState,
    present: ArmCounts,
    withheld: ArmCounts,
    *,
    started: datetime,
    now: datetime,
    max_days: float,
) -> HoldoutState:
    """A running holdout becomes `decided` when its interval excludes zero, `ended` after
    `max_days`; any other state stays."""
    if state != "running":
        return state
    if decided(present, withheld):
        return "decided"
    if now - started >= timedelta(days=max_days):
        return "ended"
    return "running"


def holdout_object(
    state: HoldoutState, present: ArmCounts, withheld: ArmCounts
) -> dict[str, object]:
    """The `holdout` object of an effect row (DESIGN.md §14)."""
    found = newcombe(present, withheld)
    return {
        "state": state,
        "present": {"sessions": present.sessions, "failures": present.failures},
        "withheld": {"sessions": withheld.sessions, "failures": withheld.failures},
        "difference": None if found is None else round(found[0], 4),
        "ci95": None if found is None else [round(found[1], 4), round(found[2], 4)],
    }


class Prevented(NamedTuple):
    """The library figure: failures prevented per 100 sessions over the skills in holdout."""

    skills: int
    present: ArmCounts
    withheld: ArmCounts
    per_100: float | None  # the withheld rate minus the present rate, per 100 sessions
    ci95: tuple[float, float] | None


def prevented(arms_of_skills: Iterable[tuple[ArmCounts, ArmCounts]]) -> Prevented:
    """The arms of every skill in holdout pooled (each session counted in its skill's arm),
    with Newcombe's 95% interval, turned round: above zero, the skills prevent failures."""
    skills, totals = 0, [0, 0, 0, 0]
    for present, withheld in arms_of_skills:
        skills += 1
        totals[0] += present.sessions
        totals[1] += present.failures
        totals[2] += withheld.sessions
        totals[3] += withheld.failures
    pooled_present, pooled_withheld = ArmCounts(*totals[:2]), ArmCounts(*totals[2:])
    found = newcombe(pooled_present, pooled_withheld)
    if found is None:
        return Prevented(skills, pooled_present, pooled_withheld, None, None)
    difference, low, high = found
    per_100 = round(-100 * difference, 1)
    return Prevented(
        skills,
        pooled_present,
        pooled_withheld,
        per_100,
        (round(-100 * high, 1), round(-100 * low, 1)),
    )


def off() -> dict[str, object]:
    """The `holdout` object of a skill never held out."""
    return holdout_object("off", ArmCounts(), ArmCounts())


def withheld_time(spans: Iterable[Span], since: datetime, now: datetime) -> timedelta:
    """How long the skill was withheld after `since`: a withheld day is no unused day, so the
    curator does not count it toward staleness."""
    total = timedelta()
    for span in spans:
        start, end = max(span.start, since), min(span.end or now, now)
        if end > start:
            total += end - start
    return total
