"""What happens to a kept proposal, decided over plain facts (docs/design.md, Settlement).

The settler (`evolve.settler`) gathers the facts once, at the edge, into one `Facts`: the
target library's skills (each with why it may not change), the existing skill of the
proposal's name read afresh, the project decision, the branch rule, review mode and the cap.
`decide` then says what to do, a near-duplicate's redirect included, from those facts alone;
the settler does it and records its event. Nothing here touches a file, the network or a clock.

The library checks again under its lock when it writes: a decision is taken on facts a moment
old, and the write's own outcome is what is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from skilld.evolve._judge import (
    Failed,
    Invalid,
    Skip,
    Verdict,
    branch_hold,
    hold_reason,
    is_windows_fault,
    near_duplicate,
)
from skilld.llm import LLMError
from skilld.projects import ProjectDecision
from skilld.skills.document import SkillDoc, same_text


class Candidate(NamedTuple):
    """A kept proposal as the decision sees it."""

    doc: SkillDoc
    reason: str  # why the model proposed it
    branch: str | None  # the branch its session worked on (None: no repository, detached)
    #: Its text is merged into the current skill's already: it is written as it stands.
    merged: bool = False
    #: The near-duplicate it was redirected to (`near_duplicate`'s record), if any.
    near: dict[str, Any] | None = None


class Existing(NamedTuple):
    """The skill of the candidate's name in the target library."""

    doc: SkillDoc | None  # None: its file does not parse
    protection: str | None  # why it may not change (`Library.protection`), or None
    path: str
    sha256: str


class Facts(NamedTuple):
    """What the decision needs to know about the target library and the rules."""

    dialect: str  # the library's skill format, to compare texts as the agent reads them
    existing: Existing | None
    #: The library's other skills as the tick listed them: what a new skill may nearly
    #: duplicate, and what it then changes.
    others: Sequence[Existing]
    similarity_threshold: float
    managed: int  # skills skilld manages there, what the cap counts (needed for a new skill)
    max_managed: int
    review_mode: bool  # `evolve.publish = "review"`
    #: For a project skill: whether skilld may write into the project. None: a user skill.
    project: ProjectDecision | None = None
    project_branches: Sequence[str] = ()  # `evolve.project_branches`


class Write(NamedTuple):
    """Write the candidate (the library still says created, updated, unchanged or refused)."""

    candidate: Candidate


class MergeFirst(NamedTuple):
    """The proposal changes a skill whose current text the model has not seen: merge first."""

    current: SkillDoc
    proposed: SkillDoc


class Stage(NamedTuple):
    """A person must see it first."""

    reason: str


class Refuse(NamedTuple):
    """Nothing is written, for good."""

    kind: Literal["protected", "cap", "invalid"]
    reason: str
    raw: str = ""  # the reply a failed merge gave, for the event


class KeepCurrent(NamedTuple):
    """The merge found nothing to change in the current skill."""

    reason: str


class Wait(NamedTuple):
    """The merge needs an LLM that cannot answer now: the proposal stays kept."""

    error: LLMError


Decision = Write | MergeFirst | Stage | Refuse
MergeDecision = Write | KeepCurrent | Refuse | Wait


class _Redirect(NamedTuple):
    """A new skill nearly duplicates an existing one (`near_duplicate`'s record): it is a
    change of that one, decided again on its facts."""

    near: dict[str, Any]


class Plan(NamedTuple):
    """A decision and what it was taken on: the candidate (redirected to the skill it nearly
    duplicates, if it does) and the facts of the skill it changes."""

    candidate: Candidate
    facts: Facts
    decision: Decision


def decide(candidate: Candidate, facts: Facts) -> Plan:
    """What to do with `candidate` in the library `facts` describe. A new skill that nearly
    duplicates another is decided as a change of that one."""
    decision = _decision(candidate, facts)
    if isinstance(decision, _Redirect):
        candidate = redirected(candidate, decision.near)
        facts = _toward(facts, candidate.doc.name)
        decision = _decision(candidate, facts)
        assert not isinstance(decision, _Redirect)  # a redirected candidate is never redirected
    return Plan(candidate, facts, decision)


def _decision(candidate: Candidate, facts: Facts) -> Decision | _Redirect:
    """`decide`'s rules, up to a redirect."""
    held = _held(candidate, facts)
    if held is not None and facts.existing is not None and facts.existing.protection is not None:
        # A person could never approve it: say why once, instead of staging it.
        return Refuse("protected", f"{facts.existing.protection}: not staged for review ({held})")
    if held is not None:
        if _changes_nothing(candidate, facts) and (facts.project is None or facts.project.allowed):
            # A person would be asked to approve nothing: the write answers `unchanged`.
            return Write(candidate)
        return Stage(held)
    existing = facts.existing
    if existing is None:
        if not candidate.merged and candidate.near is None:
            docs = (other.doc for other in facts.others if other.doc is not None)
            near = near_duplicate(candidate.doc, docs, facts.similarity_threshold)
            if near is not None:
                return _Redirect(near)
        if facts.managed >= facts.max_managed:
            return Refuse(
                "cap",
                f"the cap of {facts.max_managed} managed skills is reached; creation refused",
            )
        return Write(candidate)
    if existing.protection is not None:
        return Refuse("protected", existing.protection)
    if (
        existing.doc is not None
        and not candidate.merged
        and not same_text(existing.doc, candidate.doc, facts.dialect)
    ):
        return MergeFirst(existing.doc, candidate.doc)
    return Write(candidate)


def _toward(facts: Facts, name: str) -> Facts:
    """`facts` for a change of the listed skill `name` (one a candidate nearly duplicates)."""
    existing = next((o for o in facts.others if o.doc is not None and o.doc.name == name), None)
    return facts._replace(existing=existing)


def _changes_nothing(candidate: Candidate, facts: Facts) -> bool:
    """The candidate says what the existing skill says, as its agent reads it."""
    existing = facts.existing
    return (
        existing is not None
        and existing.doc is not None
        and same_text(existing.doc, candidate.doc, facts.dialect)
    )


def _held(candidate: Candidate, facts: Facts) -> str | None:
    """Why a person must approve the candidate first: a project skilld may not write into
    (whatever else holds it), risky content or review mode, a branch project skills may not
    be learned on."""
    if facts.project is not None and not facts.project.allowed:
        return facts.project.reason
    held = hold_reason(candidate.doc, review_mode=facts.review_mode)
    if held is None and facts.project is not None:
        held = branch_hold(candidate.branch, facts.project_branches)
    return held


def redirected(candidate: Candidate, near: dict[str, Any]) -> Candidate:
    """The candidate as a change of the skill it nearly duplicates."""
    return candidate._replace(doc=candidate.doc._replace(name=near["near_duplicate_of"]), near=near)


def after_merge(candidate: Candidate, verdict: Verdict) -> MergeDecision:
    """What the merge's reply makes of the candidate. A service fault waits; a fault of the
    request itself (it says the window is the problem) refuses, like a reply that breaks the
    contract."""
    if isinstance(verdict, Failed):
        if not is_windows_fault(verdict.error):
            return Wait(verdict.error)
        return Refuse("invalid", f"merge failed: {verdict.error}")
    if isinstance(verdict, Skip):
        return KeepCurrent(verdict.reason)
    if isinstance(verdict, Invalid):
        return Refuse("invalid", f"merge failed: {verdict.reason}", verdict.raw)
    merged = verdict.doc._replace(name=candidate.doc.name)
    return Write(
        candidate._replace(doc=merged, reason=verdict.reason or candidate.reason, merged=True)
    )


def candidate_of(body: Mapping[str, Any], branch: str | None) -> Candidate:
    """A kept proposal's body (`Evolver._keep`) as a candidate; `branch`: its session's."""
    return Candidate(
        SkillDoc(
            name=body["name"],
            description=body["description"],
            when_to_use=body.get("when_to_use"),
            body=body["content"],
        ),
        body["reason"],
        branch,
        bool(body.get("merged")),
        body.get("near"),
    )


def body_of(candidate: Candidate, body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` (a kept proposal's) with the candidate's text, reason, merge and redirect."""
    doc = candidate.doc
    return {
        **body,
        "name": doc.name,
        "description": doc.description,
        "when_to_use": doc.when_to_use,
        "content": doc.body,
        "reason": candidate.reason,
        "merged": candidate.merged,
        **({"near": candidate.near} if candidate.near else {}),
    }
