"""One tick of the evolution loop (DESIGN.md §5): read, gate, reflect, settle.

I/O lives here, at the edge; every decision it acts on comes from a pure function (gates,
contract, validation, similarity, safety). The order of a settlement is fixed: the skill file is
written first, then the outcome's event and the session's watermark commit in one transaction,
so a crash can at worst repeat a reflection, whose write is idempotent.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from skilld.app import App
from skilld.config import Config, SourceConfig, backfill_cutoff
from skilld.evolve.contract import (
    PROPOSAL_SCHEMA,
    Decline,
    Proposal,
    Violation,
    parse_reply,
    repair_message,
)
from skilld.evolve.gates import Deferred, GateSettings, decide
from skilld.evolve.prompt import PROMPT_VERSION, build_messages
from skilld.evolve.review import ReviewQueue
from skilld.evolve.safety import risky_patterns
from skilld.evolve.similar import Candidate, closest
from skilld.evolve.window import (
    decode_message,
    delimit,
    encode_message,
    estimate_tokens,
    render_window,
    split_window,
)
from skilld.llm import LLMClient, LLMError, LLMReply, LLMSettings
from skilld.log import get_logger
from skilld.redact import merge_counts, redact
from skilld.skills.document import InvalidSkill, SkillDoc, validate_skill
from skilld.skills.library import CapReached, LibraryError, Origin, Protected
from skilld.skills.names import InvalidName, apply_prefix
from skilld.state import Provenance, SessionState
from skilld.transcripts.model import Message, Source
from skilld.transcripts.normalise import cut_text
from skilld.transcripts.registry import build_source, default_path, default_sources
from skilld.transcripts.signals import SkillSignal, skill_signals

#: How many source errors a tick keeps for `status`; the total is always counted.
MAX_REPORTED_SOURCE_ERRORS = 100

#: LLM failures that say nothing about this window: no attempt is counted for them.
_NOT_THE_WINDOWS_FAULT = frozenset({"circuit_open", "budget"})


def llm_settings(config: Config) -> LLMSettings:
    llm = config.llm
    return LLMSettings(
        base_url=llm.base_url,
        model=llm.model,
        api_key=llm.api_key(),
        timeout_seconds=llm.timeout_seconds,
        max_retries=llm.max_retries,
        response_format=llm.response_format,
        max_concurrency=llm.max_concurrency,
        max_calls_per_hour=llm.max_calls_per_hour,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
    )


def configured_sources(config: Config) -> list[tuple[str, Source]]:
    """(source id, source) for each configured source, or the zero-config defaults."""
    specs = config.sources or default_sources()
    built = []
    for spec in specs:
        source = build_source(
            spec.kind,
            spec.path or default_path(spec.kind),
            glob=spec.glob or None,
            include_subagents=spec.include_subagents,
            tool_result_max_chars=config.evolve.tool_result_max_chars,
            max_line_bytes=config.evolve.max_line_bytes,
        )
        built.append((source_id(spec, source), source))
    return built


def source_id(spec: SourceConfig, source: Source) -> str:
    return f"{spec.kind}:{spec.path or default_path(spec.kind)}"


# -- verdicts: what a reflection concluded, before anything is written ------------------------


@dataclass(frozen=True, slots=True)
class Propose:
    doc: SkillDoc
    reason: str
    near_duplicate_of: dict[str, Any] | None = None


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


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A write this window made before a crash, whose event never committed."""

    record: Provenance


Verdict = Propose | Skip | Invalid | Failed | Interrupted


@dataclass(frozen=True, slots=True)
class Job:
    session: str
    source_kind: str
    messages: tuple[Message, ...]
    first_message: int  # index in the session of the window's first message

    @property
    def last_message(self) -> int:
        return self.first_message + len(self.messages) - 1


@dataclass
class Spend:
    """What the LLM calls of one window cost, from the server's `usage` or else estimated."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False  # some count is an estimate: the server sent no usage

    def add(self, reply: LLMReply, messages: list[dict[str, Any]]) -> None:
        self.calls += reply.attempts
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
        }


class Evolver:
    def __init__(
        self,
        app: App,
        llm: LLMClient,
        sources: list[tuple[str, Source]],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.config = app.config
        self.llm = llm
        self.sources = sources
        self.clock = clock
        self.review = ReviewQueue(self.config.state.dir / "pending")
        self.log = get_logger("skilld.evolve")
        #: An open circuit is reported once per opening, not once per tick it stays open.
        self._circuit_reported = False
        #: Windows this evolver may still send to the LLM (None: no limit; `replay --limit`).
        self.window_allowance: int | None = None
        #: Cursors by source id, loaded once: this process holds the daemon lock, so state.db
        #: only changes through it, and an idle tick then touches no database row.
        self._cursors: dict[str, dict[str, dict[str, Any]]] = {}

    # -- the tick ----------------------------------------------------------------------------

    async def tick(self) -> TickReport:
        report = TickReport(started_at=self.clock())
        for sid, source in self.sources:
            await self._ingest(sid, source, report)
        await self._reflect_pending(report)
        report.duration = self.clock() - report.started_at
        self._record_tick(report)
        return report

    def _record_tick(self, report: TickReport) -> None:
        state = self.app.state
        with state.transaction():
            state.set_meta("last_tick", report.as_dict())
            state.set_meta("heartbeat", self.clock())
            state.set_meta("llm_health", self.llm.health())
            total = state.get_meta("skipped_lines_total", 0) + report.skipped_lines
            state.set_meta("skipped_lines_total", total)
            # The last tick's errors, also when there are none: a fixed file stops being listed.
            state.set_meta("source_errors", report.source_errors[:MAX_REPORTED_SOURCE_ERRORS])
            state.set_meta("source_errors_total", len(report.source_errors))
        self.app.usage.flush()

    # -- reading -----------------------------------------------------------------------------

    async def _ingest(self, sid: str, source: Source, report: TickReport) -> None:
        state = self.app.state
        started_key = f"source_started:{sid}"
        first_time = not state.get_meta(started_key, False)
        cutoff = backfill_cutoff(self.config.evolve.backfill, self.clock()) if first_time else None
        cursors = self._cursors.get(sid)
        if cursors is None:
            cursors = self._cursors[sid] = state.cursors(sid)
        scan = await anyio.to_thread.run_sync(
            lambda: source.scan(cursors, start_new_at_end_before=cutoff)
        )
        report.skipped_lines += scan.skipped_lines + sum(r.skipped_lines for r in scan.reads)
        report.source_errors.extend(scan.errors)
        signals: list[SkillSignal] = []
        skills_dir = self.config.skills.dir
        with state.transaction():
            for read in scan.reads:
                session = state.session(read.session) or SessionState(
                    key=read.session,
                    source=sid,
                    cursor={},
                    reflected=0,
                    pending=[],
                    last_reflect_at=None,
                    attempts=0,
                    label=read.label,
                    mtime=read.mtime,
                )
                if read.reset:
                    # The file was replaced: what was pending came from a file that is gone.
                    session.pending = []
                session.pending.extend(encode_message(m) for m in read.messages)
                session.cursor = cursors[read.session] = dict(read.cursor)
                session.mtime = read.mtime if read.mtime is not None else session.mtime
                session.label = read.label or session.label
                state.save_session(session)
                report.sessions_read += 1 if read.messages else 0
                report.messages_read += len(read.messages)
                signals.extend(skill_signals(read, [skills_dir]))
            gone = cursors.keys() - scan.seen
            if gone:
                for key in state.forget_sessions(sid, gone):
                    del cursors[key]
            if first_time and (scan.seen or not scan.errors):
                # A first look that saw nothing because the source failed is no first look:
                # the backfill policy still applies to the files it will find once readable.
                state.set_meta(started_key, True)
        if signals:
            known = {entry.name for entry in self.app.library.discover()}
            bumps = [(signal.name, signal.kind) for signal in signals if signal.name in known]
            if bumps:
                self.app.usage.bump_many(bumps)

    # -- gating and reflecting ----------------------------------------------------------------

    def _gate_settings(self) -> GateSettings:
        return GateSettings(
            min_messages=self.config.evolve.min_messages,
            cooldown_seconds=self.config.evolve.cooldown_seconds,
        )

    async def _reflect_pending(self, report: TickReport) -> None:
        state = self.app.state
        settings = self._gate_settings()
        cap = self.config.skills.max_managed
        pending_keys = state.sessions_with_pending()
        if not pending_keys:
            return
        managed = len(self.app.library.managed_names())
        stop = anyio.Event()  # set when the LLM is unavailable for the rest of the tick
        limiter = anyio.CapacityLimiter(max(1, self.config.llm.max_concurrency))
        tick_failures: Counter[str] = Counter()

        async def run_session(session: SessionState, jobs: list[Job]) -> None:
            async with limiter:
                for job in jobs:
                    if stop.is_set():
                        report.deferred["llm unavailable"] += 1
                        return
                    if self.window_allowance is not None:
                        if self.window_allowance <= 0:
                            report.deferred["window limit"] += 1
                            return
                        self.window_allowance -= 1
                    spend = Spend()
                    interrupted = self._interrupted_write(job)
                    if interrupted is not None:
                        job, verdict = interrupted
                    else:
                        verdict = await self._ask(job, report, spend)
                    if isinstance(verdict, Failed) and verdict.error.kind in _NOT_THE_WINDOWS_FAULT:
                        tick_failures[verdict.error.kind] += 1
                        stop.set()
                        return
                    outcome = self._settle(session, job, verdict)
                    report.outcomes[outcome] += 1
                    skill = (
                        verdict.doc.name
                        if isinstance(verdict, Propose)
                        else verdict.record.name
                        if isinstance(verdict, Interrupted)
                        else None
                    )
                    report.records.append(
                        WindowRecord(
                            job.session,
                            job.source_kind,
                            job.first_message,
                            job.last_message,
                            outcome,
                            skill,
                            spend,
                        )
                    )
                    if outcome in ("error", "cap") or interrupted is not None:
                        return  # an interrupted window may be shorter: the rest waits a tick

        async with anyio.create_task_group() as group:
            for key in pending_keys:
                session = state.session(key)
                if session is None:
                    continue
                if session.hold == "cap" and managed >= cap:
                    report.deferred["at the cap"] += 1
                    continue
                pending = [decode_message(m) for m in session.pending]
                decision = decide(
                    pending,
                    last_reflect_at=session.last_reflect_at,
                    now=self.clock(),
                    settings=settings,
                )
                if isinstance(decision, Deferred):
                    report.deferred[decision.reason] += 1
                    continue
                jobs = []
                first = session.reflected
                for chunk in split_window(
                    pending[: decision.end], self.config.evolve.window_max_chars
                ):
                    jobs.append(Job(session.key, _kind(session.source), tuple(chunk), first))
                    first += len(chunk)
                report.windows += len(jobs)
                group.start_soon(run_session, session, jobs)

        if self.llm.health().get("circuit") == "closed":
            self._circuit_reported = False
        for kind, count in tick_failures.items():
            if kind == "circuit_open":
                if self._circuit_reported:
                    continue
                self._circuit_reported = True
            reason = (
                "LLM circuit open after repeated failures"
                if kind == "circuit_open"
                else "llm.max_calls_per_hour reached"
            )
            state.add_event(
                "error" if kind == "circuit_open" else "deferred",
                reason=reason,
                detail={
                    "windows_deferred": count + report.deferred["llm unavailable"],
                    "llm": _health_summary(self.llm.health()),
                },
            )

    async def _ask(self, job: Job, report: TickReport, spend: Spend) -> Verdict:
        """Redact, prompt, call the model (with one repair request), judge. Writes nothing."""
        state = self.app.state
        redaction = redact(render_window(job.messages))
        if redaction.counts:
            state.add_event(
                "redacted",
                session=job.session,
                source=job.source_kind,
                detail={"counts": dict(redaction.counts), "stage": "window"},
            )
        window = delimit(redaction.text)
        existing = [
            (entry.name, entry.doc.description)
            for entry in self.app.library.discover()
            if entry.doc is not None
        ]
        messages: list[dict[str, Any]] = build_messages(
            window,
            session=job.session,
            source=job.source_kind,
            first_message=job.first_message,
            last_message=job.last_message,
            existing=existing,
            dialect=self.config.skills.dialect,
            max_content_chars=self.config.skills.max_content_chars,
            name_prefix=self.config.skills.name_prefix,
        )
        verdict: Verdict | None = None
        for attempt in range(2):
            try:
                reply = await self.llm.chat(messages, json_schema=PROPOSAL_SCHEMA)
            except LLMError as error:
                return Failed(error)
            report.llm_calls += reply.attempts
            spend.add(reply, messages)
            verdict = self._judge(reply, job)
            if not isinstance(verdict, Invalid) or attempt == 1:
                return verdict
            messages = [
                *messages,
                # Its own reply, for context, up to what a valid reply can hold: a 10 MB
                # ramble must not come back as a 10 MB request.
                {
                    "role": "assistant",
                    "content": cut_text(
                        reply.content or "", 2 * self.config.skills.max_content_chars
                    ),
                },
                {"role": "user", "content": repair_message(Violation(verdict.reason, verdict.raw))},
            ]
        assert verdict is not None  # the loop always returns on its second pass
        return verdict

    def _judge(self, reply: LLMReply, job: Job) -> Verdict:
        parsed = parse_reply(
            reply.content, finish_reason=reply.finish_reason, refusal=reply.refusal
        )
        if isinstance(parsed, Violation):
            return Invalid(parsed.reason, parsed.raw)
        if isinstance(parsed, Decline):
            return Skip(parsed.reason)
        assert isinstance(parsed, Proposal)
        return self._proposal_to_doc(parsed, job, raw=reply.content)

    def _proposal_to_doc(self, proposal: Proposal, job: Job, *, raw: str) -> Verdict:
        """Second redaction (on the reply), naming, validation, near-duplicate guard."""
        fields = [proposal.description, proposal.when_to_use, proposal.content]
        redactions = [redact(text) for text in fields]
        counts = merge_counts(*(r.counts for r in redactions))
        if counts:
            self.app.state.add_event(
                "redacted",
                session=job.session,
                source=job.source_kind,
                detail={"counts": counts, "stage": "reply"},
            )
        description, when_to_use, content = (r.text for r in redactions)
        library = self.app.library
        entries = {entry.name: entry for entry in library.discover()}
        name = proposal.name
        try:
            if name not in entries:
                name = apply_prefix(name, self.config.skills.name_prefix or None)
            doc = SkillDoc(
                name=name,
                description=description,
                when_to_use=when_to_use or None,
                body=content,
            )
            validate_skill(
                doc,
                self.config.skills.dialect,
                max_content_chars=self.config.skills.max_content_chars,
            )
        except (InvalidName, InvalidSkill) as exc:
            return Invalid(str(exc), raw[:2000])
        near = None
        if name not in entries:
            managed = [
                Candidate(e.name, e.doc.description, e.doc.body)
                for e in entries.values()
                if e.owner == "managed" and e.doc is not None
            ]
            match = closest(
                Candidate(name, description, content),
                managed,
                self.config.evolve.similarity_threshold,
            )
            if match is not None:
                near = {"proposed": name, "near_duplicate_of": match.name, "score": match.score}
                doc = replace(doc, name=match.name)
        return Propose(doc, proposal.reason, near)

    def _interrupted_write(self, job: Job) -> tuple[Job, Interrupted] | None:
        """The window's own write, if a crash came between it and its event's commit.

        Asking the model again could name another skill for the same window; the write it
        already made becomes the window's outcome instead.
        """
        record = self.app.library.interrupted_write(job.session, job.first_message)
        if record is None or record.last_message is None:
            return None
        count = record.last_message - job.first_message + 1
        if not 0 < count <= len(job.messages):
            return None
        return replace(job, messages=job.messages[:count]), Interrupted(record)

    # -- settling ------------------------------------------------------------------------------

    def _settle(self, session: SessionState, job: Job, verdict: Verdict) -> str:
        """Write (if anything), then commit the event and the watermark together."""
        state = self.app.state
        count = len(job.messages)
        now = self.clock()

        def advance(_outcome: str = "") -> None:
            session.pending = session.pending[count:]
            session.reflected += count
            session.last_reflect_at = now
            session.attempts = 0
            session.hold = None
            state.save_session(session)

        def hold(reason: str) -> None:
            session.hold = reason
            session.last_reflect_at = now
            state.save_session(session)

        common = {"session": job.session, "source": job.source_kind}
        window_detail = {"messages": [job.first_message, job.last_message]}

        if isinstance(verdict, Failed):
            error = verdict.error
            session.attempts += 1
            gave_up = session.attempts >= self.config.evolve.max_attempts
            with state.transaction():
                state.add_event(
                    "error",
                    **common,
                    reason=str(error),
                    detail={
                        **window_detail,
                        "kind": error.kind,
                        "status": error.status,
                        "attempt": session.attempts,
                        "gave_up": gave_up,
                    },
                )
                if gave_up:
                    advance()
                else:
                    state.save_session(session)
            return "error"
        if isinstance(verdict, Skip):
            with state.transaction():
                state.add_event("skipped", **common, reason=verdict.reason, detail=window_detail)
                advance()
            return "skipped"
        if isinstance(verdict, Invalid):
            with state.transaction():
                state.add_event(
                    "invalid",
                    **common,
                    reason=verdict.reason,
                    detail={**window_detail, "raw": verdict.raw[:2000]},
                )
                advance()
            return "invalid"

        if isinstance(verdict, Interrupted):
            return self.app.library.finish_interrupted_write(
                verdict.record, source=job.source_kind, also=advance, detail=window_detail
            ).outcome

        doc = verdict.doc
        origin = Origin(
            source=job.source_kind,
            session=job.session,
            first_message=job.first_message,
            last_message=job.last_message,
            model=self.config.llm.model,
            prompt_version=PROMPT_VERSION,
        )
        risky = risky_patterns(doc.body, doc.description, doc.when_to_use or "")
        if risky or self.config.evolve.publish == "review":
            held_because = "download-and-execute: " + ", ".join(risky) if risky else "review mode"
            path = self.review.stage(doc, origin, reason=verdict.reason, held_because=held_because)
            with state.transaction():
                state.add_event(
                    "staged",
                    skill=doc.name,
                    **common,
                    reason=held_because,
                    detail={
                        **window_detail,
                        "path": str(path),
                        **(verdict.near_duplicate_of or {}),
                    },
                )
                advance()
            return "staged"

        def settle(outcome: str) -> None:
            if outcome == "cap":
                hold("cap")
            else:
                advance()

        try:
            result = self.app.library.write(
                doc,
                origin,
                cap=self.config.skills.max_managed,
                also=settle,
                detail={**window_detail, **(verdict.near_duplicate_of or {})},
            )
        except Protected:
            return "protected"
        except CapReached:
            return "cap"
        except LibraryError as exc:
            with state.transaction():
                state.add_event(
                    "invalid", skill=doc.name, **common, reason=str(exc), detail=window_detail
                )
                advance()
            return "invalid"
        return result.outcome


def _kind(source_id: str) -> str:
    return source_id.split(":", 1)[0]


def _health_summary(health: dict[str, Any]) -> dict[str, Any]:
    return {key: health.get(key) for key in ("circuit", "last_error") if key in health}


def backlog(app: App) -> dict[str, Any]:
    """What was read but not yet reflected (for `status`): how far behind the daemon is.

    `windows` are those the gates let through once the cooldown has passed, split as a tick
    splits them; `estimated_tokens` is their input (prompt and window) at about four characters
    a token. Sessions whose pending content ends on an unfinished turn or has too few messages
    are `sessions_waiting`: that content is not late, it waits for the agent. At the spend cap a
    window costs at least one call, so `min_hours_at_spend_cap` is a lower bound.
    """
    config = app.config
    state = app.state
    settings = GateSettings(min_messages=config.evolve.min_messages, cooldown_seconds=0)
    existing = [(e.name, e.doc.description) for e in app.library.discover() if e.doc is not None]
    prompt_chars = sum(
        len(message["content"])
        for message in build_messages(
            delimit(""),
            session="",
            source="",
            first_message=0,
            last_message=0,
            existing=existing,
            dialect=config.skills.dialect,
            max_content_chars=config.skills.max_content_chars,
            name_prefix=config.skills.name_prefix,
        )
    )
    windows = window_chars = sessions_ready = sessions_waiting = 0
    for key in state.sessions_with_pending():
        session = state.session(key)
        if session is None:
            continue
        pending = [decode_message(m) for m in session.pending]
        decision = decide(pending, last_reflect_at=None, now=0.0, settings=settings)
        if isinstance(decision, Deferred):
            sessions_waiting += 1
            continue
        chunks = split_window(pending[: decision.end], config.evolve.window_max_chars)
        sessions_ready += 1
        windows += len(chunks)
        window_chars += sum(prompt_chars + len(render_window(chunk)) for chunk in chunks)
    stats = state.session_stats()
    cap = config.llm.max_calls_per_hour
    return {
        "windows": windows,
        "estimated_tokens": window_chars // 4,
        "sessions_ready": sessions_ready,
        "sessions_waiting": sessions_waiting,
        "sessions_deferred": stats["deferred"],
        "pending_messages": stats["pending_messages"],
        "max_calls_per_hour": cap,
        "min_hours_at_spend_cap": round(windows / cap, 2) if cap else None,
    }
