"""What a tick did and what its windows cost: plain values for `status`, `replay` and tests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from skilld.evolve.window import estimate_tokens
from skilld.llm import LLMError, LLMReply

#: How many source errors a tick keeps for `status`; the total is always counted.
MAX_REPORTED_SOURCE_ERRORS = 100
#: state.db meta: LLM calls and tokens per UTC day, {"YYYY-MM-DD": {...}}, the last 30 days.
DAILY_SPEND_KEY = "llm_daily"
DAILY_SPEND_DAYS = 30


def add_daily_spend(
    daily: dict[str, dict[str, int]], day: str, spend: dict[str, int]
) -> dict[str, dict[str, int]]:
    """`daily` with `spend` (calls, prompt and completion tokens) added to `day`, keeping the
    newest `DAILY_SPEND_DAYS` days."""
    totals = dict(daily.get(day) or {})
    for key, value in spend.items():
        totals[key] = int(totals.get(key, 0)) + value
    merged = {**daily, day: totals}
    return {key: merged[key] for key in sorted(merged)[-DAILY_SPEND_DAYS:]}


class Outage(Exception):
    """The LLM cannot answer now (down, refusing our key or model, the spend cap, an open
    circuit). Ends the tick's LLM work; nothing is given up."""

    def __init__(self, error: LLMError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class Spend:
    """What the LLM calls of one window cost, from the server's `usage` or else estimated."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False  # some count is an estimate: the server sent no usage
    #: Of those, the calls that merged a proposal into an existing skill.
    merge_calls: int = 0

    def add(self, reply: LLMReply, messages: list[dict[str, Any]], *, merge: bool = False) -> None:
        self.calls += reply.attempts
        self.merge_calls += reply.attempts if merge else 0
        prompt = reply.usage.get("prompt_tokens")
        completion = reply.usage.get("completion_tokens")
        if prompt is None or completion is None:
            self.estimated = True
        if prompt is None:
            prompt = estimate_tokens("\n".join(str(m.get("content", "")) for m in messages))
        if completion is None:
            completion = estimate_tokens(reply.content or "")
        self.prompt_tokens += prompt
        self.completion_tokens += completion


@dataclass(frozen=True, slots=True)
class WindowRecord:
    """One settled window: what came of it and what it cost (`skilld replay` reports these)."""

    session: str
    source: str
    first_message: int
    last_message: int
    outcome: str
    skill: str | None
    spend: Spend
    library: str | None = None
    path: str | None = None


@dataclass
class TickReport:
    started_at: float
    duration: float = 0.0
    sessions_read: int = 0
    messages_read: int = 0
    windows: int = 0
    llm_calls: int = 0
    skipped_lines: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    deferred: Counter[str] = field(default_factory=Counter)
    source_errors: list[str] = field(default_factory=list)
    records: list[WindowRecord] = field(default_factory=list)
    #: The LLM could not answer (down, refusing the key or model, the spend cap): its windows
    #: wait for a later tick.
    outage: str | None = None

    def spend(self) -> dict[str, int]:
        """The LLM calls of this tick and the tokens of its settled windows."""
        return {
            "calls": self.llm_calls,
            "prompt_tokens": sum(record.spend.prompt_tokens for record in self.records),
            "completion_tokens": sum(record.spend.completion_tokens for record in self.records),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "duration_seconds": round(self.duration, 3),
            "sessions_read": self.sessions_read,
            "messages_read": self.messages_read,
            "windows": self.windows,
            "llm_calls": self.llm_calls,
            "skipped_lines": self.skipped_lines,
            "outcomes": dict(self.outcomes),
            "deferred": dict(self.deferred),
            "source_errors": self.source_errors[:MAX_REPORTED_SOURCE_ERRORS],
            "source_errors_total": len(self.source_errors),
            "outage": self.outage,
        }
