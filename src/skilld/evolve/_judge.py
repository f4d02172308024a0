"""Judging a model's reply, as pure functions over plain values: what it proposes, whether it
is valid for the library, whether it duplicates a skill, whether a person must see it first,
and whose fault a failed call was.

Nothing here touches a file, the network or a clock; the supervisor acts on the verdicts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from skilld.evolve._similar import closest
from skilld.evolve.contract import RAW_REPLY_LIMIT, Decline, Proposal, Violation, parse_reply
from skilld.evolve.safety import download_hold
from skilld.llm import LLMError
from skilld.redact import Redaction, merge_counts, redact
from skilld.skills.document import InvalidSkill, SkillDoc, validate_skill
from skilld.skills.names import InvalidName, apply_prefix


@dataclass(frozen=True, slots=True)
class Propose:
    doc: SkillDoc
    reason: str
    scope: str = "user"
    #: The window's failures (`F<n>` ids) the model says the skill is meant to end.
    ends: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str


@dataclass(frozen=True, slots=True)
class Invalid:
    reason: str
    raw: str


@dataclass(frozen=True, slots=True)
class Failed:
    error: LLMError


Verdict = Propose | Skip | Invalid | Failed


@dataclass(frozen=True, slots=True)
class Rules:
    """What a proposal must satisfy to be written into a library."""

    dialect: str
    max_content_chars: int
    name_prefix: str = ""


@dataclass(frozen=True, slots=True)
class Judged:
    """A verdict whose every text from the model (a proposal's fields and reason, a decline's
    reason, a broken reply and what was wrong with it) is redacted."""

    verdict: Propose | Skip | Invalid
    #: Secrets found in the reply (kind -> count), replaced before anything is kept.
    redactions: dict[str, int]


#: How far past `RAW_REPLY_LIMIT` a broken reply is redacted before it is cut: a secret the cut
#: goes through is still seen whole.
_RAW_REDACTION_SLACK = 1024
_MARKER_START = "[REDACTED:"


def _kept_raw(text: str) -> Redaction:
    """A broken reply as an event keeps it: redacted, then cut to `RAW_REPLY_LIMIT` (never
    through a marker)."""
    redaction = redact(text[: RAW_REPLY_LIMIT + _RAW_REDACTION_SLACK])
    kept = redaction.text[:RAW_REPLY_LIMIT]
    opened = kept.rfind(_MARKER_START)
    if opened >= 0 and "]" not in kept[opened:]:
        kept = kept[:opened]
    return Redaction(kept, redaction.counts)


def _invalid(reason: str, raw: str) -> Judged:
    redactions = (redact(reason), _kept_raw(raw))
    return Judged(
        Invalid(redactions[0].text, redactions[1].text),
        merge_counts(*(r.counts for r in redactions)),
    )


def judge_reply(
    text: str | None,
    *,
    finish_reason: str | None,
    refusal: str | None,
    rules: Rules,
    existing: Iterable[str] = (),
    failure_ids: Collection[str] | None = None,
) -> Judged:
    """Parse, redact, name and validate a reply. `existing` names the skills the model was
    shown: a proposal for one of them keeps its name, a new one gets the library's prefix.
    `failure_ids`: the `F<n>` ids of the window's failure lines, the only ones `ends` names
    (None: a merge, whose `ends` is not asked for)."""
    parsed = parse_reply(
        text, finish_reason=finish_reason, refusal=refusal, failure_ids=failure_ids
    )
    if isinstance(parsed, Violation):
        return _invalid(parsed.reason, text or "")
    if isinstance(parsed, Decline):
        reason = redact(parsed.reason)
        return Judged(Skip(reason.text), dict(reason.counts))
    return judge_proposal(parsed, rules=rules, existing=existing, raw=text or "")


def judge_proposal(
    proposal: Proposal, *, rules: Rules, existing: Iterable[str], raw: str
) -> Judged:
    fields = (proposal.description, proposal.when_to_use, proposal.content, proposal.reason)
    redactions = [redact(text) for text in fields]
    description, when_to_use, content, reason = (r.text for r in redactions)
    name = proposal.name
    try:
        if name not in set(existing):
            name = apply_prefix(name, rules.name_prefix or None, dialect=rules.dialect)
        doc = SkillDoc(
            name=name, description=description, when_to_use=when_to_use or None, body=content
        )
        validate_skill(doc, rules.dialect, max_content_chars=rules.max_content_chars)
    except (InvalidName, InvalidSkill) as exc:
        return _invalid(str(exc), raw)
    return Judged(
        Propose(doc, reason, proposal.scope, proposal.ends),
        merge_counts(*(r.counts for r in redactions)),
    )


def near_duplicate(
    doc: SkillDoc, skills: Iterable[SkillDoc], threshold: float
) -> dict[str, Any] | None:
    """The skill `doc` nearly duplicates (by name, description and body), if any: a proposed
    new skill that close to an existing one is a change of that one."""
    match = closest(doc, skills, threshold)
    if match is None:
        return None
    return {"proposed": doc.name, "near_duplicate_of": match.name, "score": match.score}


def hold_reason(doc: SkillDoc, *, review_mode: bool) -> str | None:
    """Why a person must approve `doc` before it is published, or None."""
    held = download_hold(doc.body, doc.description, doc.when_to_use or "")
    if held is not None:
        return held
    return "review mode" if review_mode else None


def branch_hold(branch: str | None, allowed: Sequence[str]) -> str | None:
    """Why a project skill learned on `branch` must wait for a person (`evolve.project_branches`:
    globs of the branches it may be written from; empty allows every branch), or None. A
    session whose branch is unknown (no repository, a detached HEAD) is not on an allowed one."""
    if not allowed:
        return None
    if branch is None:
        return "learned on no known branch"
    if any(fnmatchcase(branch, pattern) for pattern in allowed):
        return None
    return f"learned on branch {branch}"


#: Words with which a 400 names the configuration rather than the request's content.
_CONFIGURATION_WORDS = ("model", "api key", "api_key", "authentication", "unauthorized")


def is_windows_fault(error: LLMError) -> bool:
    """Whether a failed call says something about the window itself (a 400 that names the
    request: too long, bad content) rather than about the service (down, overloaded, the key
    or the model wrong, the spend cap, an open circuit). Only the window's own faults count
    toward `max_attempts`; every other failure waits for the service to answer again."""
    if error.kind != "bad_request":
        return False
    message = error.message.lower()
    return not any(word in message for word in _CONFIGURATION_WORDS)
