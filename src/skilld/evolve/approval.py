"""A person's approval of a staged proposal for a skill that exists takes the path a learned
update takes: the model merges the proposal into the skill's current text (the daemon's LLM
client, merge prompt, reply contract and judging), so an approval never writes over a text the
model has not seen: a step a merge added since the proposal was staged stays.

The calls count against the same hourly cap and daily spend as the daemon's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import anyio

from skilld.errors import Failure, Protected
from skilld.evolve._judge import Failed, Invalid, Propose, Skip, Verdict
from skilld.evolve.report import (
    DAILY_SPEND_KEY,
    HEALTH_KEY,
    SPEND_KEY,
    TOKENS_KEY,
    Spend,
    TickReport,
    add_daily_spend,
)
from skilld.evolve.supervisor import Evolver
from skilld.evolve.wiring import llm_settings
from skilld.llm import LLMClient
from skilld.skills.document import SkillDoc, same_text
from skilld.state import KeptProposal, utc_now_iso

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.evolve.review import Staged
    from skilld.skills.library import Library


class Approved(NamedTuple):
    """What approving a staged proposal writes."""

    doc: SkillDoc | None  # None: the model found nothing to add to the current text
    reason: str  # the proposal's reason, or the merge's
    merged: bool  # merged into the skill's current text by the model


def approved_text(app: App, library: Library, item: Staged) -> Approved:
    """The proposal's own text for a new skill (or one already holding that text), else the
    model's merge of it into the skill's current text. Raises Protected for a skill skilld may
    not change (before any model call) and Failure when the model cannot merge it (the
    proposal is stale: nothing is written, it stays staged)."""
    doc = item.doc()
    existing = library.entry(item.name)
    if existing is None or existing.doc is None:
        return Approved(doc, item.reason, merged=False)
    record = library.usage_record(existing.name)
    if (refusal := library.protection(existing, record)) is not None:
        raise Protected(f"{refusal}; nothing written, the proposal stays staged")
    if same_text(existing.doc, doc, library.form):
        return Approved(doc, item.reason, merged=False)
    verdict = anyio.run(merge_staged, app, library, existing.doc, item)
    if isinstance(verdict, Failed | Invalid):
        why = verdict.error if isinstance(verdict, Failed) else f"invalid merge: {verdict.reason}"
        raise Failure(
            f"{item.name} has a current text the proposal must be merged into, and the model"
            f" could not merge it ({why}); nothing written, the proposal stays staged:"
            " approve it again once the model answers, or reject it"
        )
    if isinstance(verdict, Skip):
        return Approved(None, verdict.reason, merged=True)
    assert isinstance(verdict, Propose)
    merged = verdict.doc._replace(name=existing.name)
    return Approved(merged, verdict.reason or item.reason, merged=True)


async def merge_staged(app: App, library: Library, current: SkillDoc, item: Staged) -> Verdict:
    """The model's merge of the staged `item` into `current` (the skill's text now): a
    `Propose` to write, a `Skip` (nothing to add), an `Invalid` reply, or `Failed` (the model
    could not answer)."""
    state = app.state
    try:
        client = LLMClient(
            llm_settings(app.config),
            spent=state.get_meta(SPEND_KEY, []),
            tokens_today=state.get_meta(TOKENS_KEY, None),
            learned=state.get_meta(HEALTH_KEY, None),
        )
    except ValueError as exc:
        raise Failure(f"llm.base_url: {exc}") from None
    report, spend = TickReport(started_at=time.time()), Spend()
    async with client as llm:
        verdict = await Evolver(app, llm, []).merge(current, kept_of(item), library, report, spend)
        with state.transaction():
            state.set_meta(SPEND_KEY, llm.spend_record())
            state.set_meta(TOKENS_KEY, llm.token_record())
            if report.llm_calls:
                daily = state.get_meta(DAILY_SPEND_KEY, {})
                cost = {
                    "calls": report.llm_calls,
                    "prompt_tokens": spend.prompt_tokens,
                    "completion_tokens": spend.completion_tokens,
                }
                day = utc_now_iso(report.started_at)[:10]
                state.set_meta(DAILY_SPEND_KEY, add_daily_spend(daily, day, cost))
    return verdict


def kept_of(item: Staged) -> KeptProposal:
    """The staged proposal as the supervisor keeps a judged one (what its merge reads)."""
    origin = item.origin
    return KeptProposal(
        id=0,
        library=item.library,
        session=origin.get("session"),
        source=origin.get("source"),
        first_message=origin.get("first_message"),
        last_message=origin.get("last_message"),
        body={
            "name": item.name,
            "description": item.description,
            "when_to_use": item.when_to_use,
            "content": item.content,
            "reason": item.reason,
            "git": origin.get("git"),
            "merged": False,
        },
        status="new",
        note=None,
        created_at=0.0,
    )
