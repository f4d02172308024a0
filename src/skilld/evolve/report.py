"""What a tick did and what its windows cost: plain values for `status`, `replay` and tests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from skilld.evolve.backlog import PROMPT_CHARS_KEY
from skilld.evolve.window import estimate_tokens
from skilld.llm import LLMError, LLMReply
from skilld.state import StateDB, utc_now_iso

#: state.db meta: the LLM calls of the last hour, the spend cap's count (kept over restarts).
SPEND_KEY = "llm_spend"
#: state.db meta: the tokens the LLM reported today (UTC), the daily cap's count, {day, tokens}.
TOKENS_KEY = "llm_tokens_today"
#: state.db meta: the LLM's health of the last tick (and what the client learned: the context).
HEALTH_KEY = "llm_health"
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
    #: The signatures of the window's failures the proposal targets (skilld.effect.targets).
    targets: tuple[str, ...] = ()


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


def record_tick(
    state: StateDB,
    report: TickReport,
    llm_health: dict[str, Any],
    spend_record: Any,
    prompt_chars: dict[str, int],
    heartbeat: float,
    token_record: Any = None,
) -> None:
    """What `status` reads of a tick: the tick, the heartbeat, the LLM's health and spend,
    the prompt sizes measured, the lines skipped and the sources' errors."""
    with state.transaction():
        state.set_meta("last_tick", report.as_dict())
        state.set_meta("heartbeat", heartbeat)
        state.set_meta(HEALTH_KEY, llm_health)
        state.set_meta(SPEND_KEY, spend_record)
        if token_record is not None:
            state.set_meta(TOKENS_KEY, token_record)
        if report.llm_calls:
            day = utc_now_iso(report.started_at)[:10]
            daily = state.get_meta(DAILY_SPEND_KEY, {})
            state.set_meta(DAILY_SPEND_KEY, add_daily_spend(daily, day, report.spend()))
        if prompt_chars:
            measured = state.get_meta(PROMPT_CHARS_KEY, {})
            state.set_meta(PROMPT_CHARS_KEY, {**measured, **prompt_chars})
        total = state.get_meta("skipped_lines_total", 0) + report.skipped_lines
        state.set_meta("skipped_lines_total", total)
        # The last tick's errors, also when there are none: a fixed file stops being listed.
        state.set_meta("source_errors", report.source_errors[:MAX_REPORTED_SOURCE_ERRORS])
        state.set_meta("source_errors_total", len(report.source_errors))


def record_outage(
    state: StateDB, error: LLMError, report: TickReport, llm_health: dict[str, Any]
) -> None:
    """The outage's event: `deferred` for the spend cap, else `error`, with the windows it
    keeps waiting."""
    state.add_event(
        "deferred" if error.kind == "budget" else "error",
        reason=str(error),
        detail={
            "kind": error.kind,
            "status": error.status,
            "windows_waiting": report.deferred["llm unavailable"],
            "llm": {k: v for k, v in llm_health.items() if k in ("circuit", "last_error")},
        },
    )
