"""One tick of the evolution loop (docs/design.md): ingest, gate, reflect, settle.

I/O lives here, at the edge; every decision it acts on comes from a pure function (gates,
contract, judging, similarity, safety). The order of things is fixed so that nothing is lost
and nothing is paid for twice:

1. *Ingest*: each source's new messages are held in state.db with its cursor.
2. *Gate*: a session whose held messages pass the gates yields windows.
3. *Reflect*: a window goes to the model. A proposal is *kept* in state.db in the same
   transaction that moves the session's watermark past the window: from then on the answer is
   paid for and safe, whatever happens to the write.
4. *Settle*: a kept proposal is judged against its library (ownership, near-duplicates, a
   merge into the current text of the skill it changes, the cap) and written; its event commits
   together with the proposal's removal. A proposal that cannot be written yet (the cap, a full
   disk, the LLM down for its merge) stays kept and is settled again on a later tick, with no
   new reflection. `evolve.settlement` decides, `evolve.settler` gathers its facts and acts.

Whose fault is a failure? Only the window's own (a 400 that names the request, a reply that
breaks the contract after its repair) counts toward `max_attempts`. An outage of the LLM or a
failed write of this machine never gives up a window: it waits until the fault is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from skilld.app import App
from skilld.config import backfill_cutoff
from skilld.effect import store as effect_store
from skilld.effect import watch as effect_watch
from skilld.effect.record import Recorder, window_history
from skilld.effect.targets import Listed, failure_lines, listed_failures, targeted
from skilld.evolve._gates import GateSettings, Waiting, held_after_append, held_after_consume
from skilld.evolve._judge import (
    Failed,
    Invalid,
    Propose,
    Rules,
    Skip,
    Verdict,
    is_windows_fault,
    judge_reply,
)
from skilld.evolve.backlog import prompt_chars_of, ready_windows, summary_of
from skilld.evolve.contract import RAW_REPLY_LIMIT, Violation, proposal_schema, repair_message
from skilld.evolve.prompt import (
    PromptSettings,
    build_merge_messages,
    build_messages,
    effect_lines,
    history_lines,
    revision_reason,
    session_header,
)
from skilld.evolve.report import (
    Outage,
    Spend,
    TickReport,
    WindowRecord,
    record_outage,
    record_tick,
)
from skilld.evolve.review import ReviewQueue
from skilld.evolve.settlement import candidate_of
from skilld.evolve.settler import Settler
from skilld.evolve.signal_counts import count_signals
from skilld.evolve.window import (
    delimit,
    encode_message,
    render_window,
)
from skilld.evolve.wiring import SourceBinding
from skilld.gitinfo import GitContext, completed, from_json, observe
from skilld.llm import LLMClient, LLMError
from skilld.log import get_logger
from skilld.redact import redact
from skilld.routing import project_root, project_skills_dir
from skilld.skills.document import SkillDoc
from skilld.skills.library import (
    Library,
    SkillEntry,
)
from skilld.state import Held, KeptProposal, SessionState
from skilld.transcripts.model import Message, SkillSignal
from skilld.transcripts.normalise import cut_text
from skilld.transcripts.signals import skill_signals

#: state.db meta: the wall-clock times of the LLM calls of the last hour (the spend cap).


#: How often one session's windows are split again within a tick after context refusals.
_MAX_REFITS = 4


class Refit(Exception):
    """The window is longer than the model's context: split it again, nothing is spent."""

    def __init__(self, error: LLMError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True, slots=True)
class Job:
    """One window of one session."""

    session: str
    source: str  # the source kind
    library: str  # the user library the session learns into
    messages: tuple[Message, ...]
    first_message: int  # index in the session of the window's first message
    cwd: str | None = None
    #: Where the session worked at the window's last message (None: unknown).
    git: GitContext | None = None
    #: Skills this window offers for revision (skilld.effect.watch.window_offers).
    revisions: tuple[dict[str, Any], ...] = ()
    #: The failures the window lists as `[failure F<n>]` lines (skilld.effect.targets).
    failures: tuple[Listed, ...] = ()

    @property
    def last_message(self) -> int:
        return self.first_message + len(self.messages) - 1


class Evolver:
    def __init__(
        self,
        app: App,
        llm: LLMClient,
        sources: list[SourceBinding],
        *,
        clock: Callable[[], float] = time.time,
        system_prompt: str | None = None,
    ) -> None:
        self.app = app
        self.config = app.config
        self.llm = llm
        self.sources = sources
        self.clock = clock
        self.system_prompt = system_prompt
        self.review = ReviewQueue(self.config.state.dir / "pending")
        self.settler = Settler(
            app,
            self.review,
            listing=self._listing,
            written=self._forget_listing,
            merge=self._merge,
        )
        self.log = get_logger("skilld.evolve")
        self._by_id = {binding.id: binding for binding in sources}
        #: An open circuit is reported once per opening, not once per tick it stays open.
        self._circuit_reported = False
        #: Windows this evolver may still send to the LLM (None: no limit; `replay --limit`).
        self.window_allowance: int | None = None
        #: Each library's skills as this tick found them, listed once per tick (the prompt's
        #: existing skills, the near-duplicate guard); a write of this evolver refreshes it.
        self._listings: dict[str, list[SkillEntry]] = {}
        #: Characters of each library's last reflection prompt around its window (`status`).
        self._prompt_chars: dict[str, int] = {}
        #: Cursors by source id, loaded once: this process holds the daemon lock, so state.db
        #: only changes through it, and an idle tick then touches no database row.
        self._cursors: dict[str, dict[str, dict[str, Any]]] = {}
        #: What the repository of each working directory holds, read once per tick.
        self._observed: dict[str, GitContext | None] = {}
        #: What this tick wrote to the effect tables, for its measurement (no tick yet: none
        #: that a kept measurement could have missed only).
        self._reach = effect_watch.Reach(generation=-1)

    # -- the tick ----------------------------------------------------------------------------

    async def tick(self) -> TickReport:
        report = TickReport(started_at=self.clock())
        self._listings.clear()
        self._observed.clear()
        self._reach = effect_watch.Reach(effect_store.generation(self.app.state.conn))
        for binding in self.sources:
            await self._ingest(binding, report)
        if report.messages_read:
            self._watch_effect()
        outage = await self._settle_kept(report)
        if outage is None:
            outage = await self._reflect_ready(report)
        if outage is not None:
            report.outage = str(outage.error)
            self._report_outage(outage, report)
        report.duration = self.clock() - report.started_at
        llm = self.llm
        health, spent = llm.health(), llm.spend_record()
        record_tick(
            self.app.state,
            report,
            health,
            spent,
            self._prompt_chars,
            self.clock(),
            llm.token_record(),
        )
        return report

    def _watch_effect(self) -> None:
        """The effect events this tick's reads caused, and the skills the next windows offer
        for revision (skilld.effect.watch)."""
        libraries = [library.name for library in self.app.all_libraries()]
        min_exposures = self.config.effect.min_exposures
        self.app.backfill_targets()
        observation = effect_watch.observe(
            self.app.state, libraries, min_exposures=min_exposures, reach=self._reach
        )
        effect_watch.record(self.app.state, observation)

    def _report_outage(self, outage: Outage, report: TickReport) -> None:
        """One event per tick for an outage (one per opening while the circuit stays open),
        never one per session: the windows themselves are not at fault."""
        health = self.llm.health()
        if health.get("circuit") == "closed":
            self._circuit_reported = False
        if outage.error.kind == "circuit_open":
            if self._circuit_reported:
                return
            self._circuit_reported = True
        record_outage(self.app.state, outage.error, report, health)

    # -- ingest ------------------------------------------------------------------------------

    async def _ingest(self, binding: SourceBinding, report: TickReport) -> None:
        state = self.app.state
        sid = binding.id
        started_key = f"source_started:{sid}"
        first_time = not state.get_meta(started_key, False)
        cutoff = backfill_cutoff(self.config.evolve.backfill, self.clock()) if first_time else None
        cursors = self._cursors.get(sid)
        if cursors is None:
            cursors = self._cursors[sid] = state.cursors(sid)

        def held_elsewhere(key: str) -> bool:
            return state.session_source(key) not in (None, sid)

        scan = await binding.scan(cursors, held_elsewhere, start_new_at_end_before=cutoff)
        report.skipped_lines += scan.skipped_lines + sum(r.skipped_lines for r in scan.reads)
        report.source_errors.extend(scan.errors)
        now = self.clock()
        signals: list[tuple[SkillSignal, str, str | None]] = []  # (signal, session, cwd)
        library = self.app.libraries[binding.library]
        recorder = Recorder(state, binding.library, self._observe, now, self._reach)
        with state.transaction(), recorder:
            for read in scan.reads:
                session = state.session(read.session) or SessionState(
                    key=read.session,
                    source=sid,
                    cursor={},
                    held=Held(),
                    last_reflect_at=None,
                    attempts=0,
                    label=read.label,
                    mtime=read.mtime,
                )
                held = session.held
                if read.reset:
                    # The file was replaced: what was held came from a file that is gone.
                    state.drop_held(read.session)
                    held = Held(start=held.start, last_append_at=held.last_append_at)
                recorder.add(read, held.end, session.cwd)
                if read.messages:
                    encoded = [encode_message(m) for m in read.messages]
                    state.append_held(read.session, held.end, encoded)
                    held = held_after_append(held, read.messages, now=now)
                session.held = held
                session.cursor = cursors[read.session] = dict(read.cursor)
                session.mtime = read.mtime if read.mtime is not None else session.mtime
                session.label = read.label or session.label
                session.cwd = getattr(read, "cwd", None) or session.cwd
                state.save_session(session)
                report.sessions_read += 1 if read.messages else 0
                report.messages_read += len(read.messages)
                dirs = self._skills_dirs(library, session.cwd)
                found = skill_signals(read, list(dirs))
                signals += [(signal, read.session, session.cwd) for signal in found]
            gone = cursors.keys() - scan.seen
            if gone:
                for key in state.forget_sessions(sid, gone):
                    del cursors[key]
            if first_time and (scan.seen or not scan.errors):
                # A first look that saw nothing because the source failed is no first look:
                # the backfill policy still applies to the files it will find once readable.
                state.set_meta(started_key, True)
        await recorder.history(
            lambda known: binding.scan(known, held_elsewhere),
            cursors,
            scan,
            first_time and cutoff is not None,
        )
        if signals:
            self._count_signals(library, signals)

    def _listing(self, library: Library) -> list[SkillEntry]:
        if library.name not in self._listings:
            self._listings[library.name] = library.discover()
        return self._listings[library.name]

    def _forget_listing(self, library: Library) -> None:
        self._listings.pop(library.name, None)

    def _skills_dirs(self, user: Library, cwd: str | None) -> dict[Path, Library]:
        """Every skills dir a session may read a skill from: each library's, and its project's."""
        dirs = {library.root: library for library in self.app.libraries.values()}
        if (project := self._project_library(user, cwd)) is not None:
            dirs[project.root] = project
        return dirs

    def _count_signals(
        self, user: Library, signals: list[tuple[SkillSignal, str, str | None]]
    ) -> None:
        """Count each signal in the library that holds its skill: the one whose file was read,
        else the session's project library when the name is there, else its user library.
        Names no library holds are not skills."""
        names = {entry.name for entry in self._listing(user) if entry.root == user.root}
        found: list[tuple[SkillSignal, str, Library]] = []
        for signal, session, cwd in signals:
            target: Library | None = None
            if signal.skills_dir is not None:
                target = self._skills_dirs(user, cwd).get(Path(signal.skills_dir))
            else:
                project = self._project_library(user, cwd)
                if project is not None and project.entry(signal.name) is not None:
                    target = project
                elif signal.name in names:
                    target = user
            if target is not None and target.entry(signal.name) is not None:
                found.append((signal, session, target))
        now = datetime.fromtimestamp(self.clock(), UTC)
        count_signals(self.app.state, found, now, self._reach)

    # -- gate and reflect ----------------------------------------------------------------------

    def _gate_settings(self) -> GateSettings:
        evolve = self.config.evolve
        return GateSettings(
            min_messages=evolve.min_messages,
            cooldown_seconds=evolve.cooldown_seconds,
            turn_timeout_seconds=evolve.turn_timeout_seconds,
        )

    def _jobs(
        self,
        session: SessionState,
        binding: SourceBinding,
        report: TickReport,
        *,
        refit: bool = False,
    ) -> list[Job]:
        """The session's windows, if its held messages pass the gates; `refit`: the rest of
        windows this tick already began, split again (the cooldown its own reflections
        started does not hold them back)."""
        if session.held.conversational < 0:  # carried over from an older state.db
            session.held = summary_of(self.app.state, session)
            self.app.state.save_session(session)
        gates = self._gate_settings()
        windows = ready_windows(
            self.app.state,
            session,
            gates._replace(cooldown_seconds=0) if refit else gates,
            self._window_chars(binding.library),
            now=self.clock(),
        )
        if isinstance(windows, Waiting):
            report.deferred[windows.reason] += 1
            return []
        jobs, first = [], session.held.start
        for chunk in windows:
            git = completed(chunk[-1].git, self._observe(session.cwd))
            jobs.append(
                Job(
                    session.key,
                    binding.kind,
                    binding.library,
                    tuple(chunk),
                    first,
                    session.cwd,
                    git,
                )
            )
            first += len(chunk)
        return jobs

    def _window_chars(self, library: str) -> int:
        """`window_max_chars`, or less: what fits the model's context beside the prompt
        around the window (as last measured for `library`) and the reply."""
        configured = self.config.evolve.window_max_chars
        prompt = self._prompt_chars.get(library) or prompt_chars_of(self.app.state, library)
        fitted = self.llm.window_chars(prompt)
        return configured if fitted is None else min(configured, fitted)

    def _observe(self, cwd: str | None) -> GitContext | None:
        """What the repository holding `cwd` holds now (its files, no process), once a tick."""
        if not cwd:
            return None
        if cwd not in self._observed:
            self._observed[cwd] = observe(cwd)
        return self._observed[cwd]

    async def _reflect_ready(self, report: TickReport) -> Outage | None:
        state = self.app.state
        limiter = anyio.CapacityLimiter(max(1, self.config.llm.max_concurrency))
        outages: list[Outage] = []
        asked = False  # the server's context, asked once before the first window is cut

        async def run_session(
            session: SessionState, binding: SourceBinding, jobs: list[Job]
        ) -> None:
            refits = 0
            async with limiter:
                index = 0
                while index < len(jobs):
                    job = jobs[index]
                    if outages:
                        report.deferred["llm unavailable"] += len(jobs) - index
                        return
                    if self.window_allowance is not None:
                        if self.window_allowance <= 0:
                            report.deferred["window limit"] += 1
                            return
                        self.window_allowance -= 1
                    try:
                        await self._reflect(session, job, report)
                    except Outage as outage:
                        outages.append(outage)
                        report.deferred["llm unavailable"] += len(jobs) - index
                        return
                    except Refit:
                        # The model's context is smaller than the window: split what is left
                        # again to fit it, giving up nothing and spending no attempt.
                        refits += 1
                        if refits > _MAX_REFITS:
                            report.deferred["window refit"] += len(jobs) - index
                            return
                        refreshed = self.app.state.session(session.key)
                        if refreshed is None:
                            return
                        session, jobs, index = (
                            refreshed,
                            self._jobs(refreshed, binding, report, refit=True),
                            0,
                        )
                        report.windows += len(jobs)
                        continue
                    index += 1

        async with anyio.create_task_group() as group:
            for key in state.sessions_with_pending():
                session = state.session(key)
                if session is None:
                    continue
                binding = self._by_id.get(session.source)
                if binding is None:
                    report.deferred["source not configured"] += 1
                    continue
                if not asked:
                    asked = True
                    await self.llm.learn_context()
                jobs = self._jobs(session, binding, report)
                if jobs:
                    report.windows += len(jobs)
                    group.start_soon(run_session, session, binding, jobs)
        return outages[0] if outages else None

    async def _reflect(self, session: SessionState, job: Job, report: TickReport) -> None:
        """Ask about one window and settle what the answer allows. Raises Outage."""
        spend = Spend()
        offers = effect_watch.window_offers(
            self.app.state, job.library, job.session, job.first_message, job.last_message
        )
        shown = effect_store.window_failures(
            self.app.state.conn, job.session, job.first_message, job.last_message
        )
        job = replace(job, revisions=tuple(offers), failures=tuple(listed_failures(shown)))
        verdict = await self._ask(job, report, spend)
        if isinstance(verdict, Failed):
            if verdict.error.kind == "context":
                raise Refit(verdict.error)
            if not is_windows_fault(verdict.error):
                raise Outage(verdict.error)
            outcome = self._window_failed(session, job, verdict.error)
            report.outcomes[outcome] += 1
            report.records.append(self._record(job, outcome, None, spend))
            return
        if isinstance(verdict, Skip | Invalid):
            kind = "skipped" if isinstance(verdict, Skip) else "invalid"
            detail: dict[str, Any] = {
                "messages": [job.first_message, job.last_message],
                "git": _git_json(job.git),
            }
            if isinstance(verdict, Invalid):
                detail["raw"] = verdict.raw[:RAW_REPLY_LIMIT]
            with self.app.state.transaction():
                self.app.state.add_event(
                    kind,
                    library=job.library,
                    session=job.session,
                    source=job.source,
                    reason=verdict.reason,
                    detail=detail,
                )
                self._advance(session, job)
            report.outcomes[kind] += 1
            report.records.append(self._record(job, kind, None, spend))
            return
        kept = self._keep(session, job, verdict)
        outcome, library, path = await self.settler.settle(kept, report, spend)
        record = self._record(job, outcome, kept.body["name"], spend, library, path)
        report.records.append(replace(record, targets=tuple(kept.body["targets"])))

    def _record(
        self,
        job: Job,
        outcome: str,
        skill: str | None,
        spend: Spend,
        library: str | None = None,
        path: str | None = None,
    ) -> WindowRecord:
        return WindowRecord(
            job.session,
            job.source,
            job.first_message,
            job.last_message,
            outcome,
            skill,
            spend,
            library or job.library,
            path,
        )

    def _advance(self, session: SessionState, job: Job) -> None:
        """Move the watermark past `job` (inside the caller's transaction)."""
        session.held = held_after_consume(session.held, job.messages)
        session.last_reflect_at = self.clock()
        session.attempts = 0
        self.app.state.drop_held(session.key, before=session.held.start)
        self.app.state.save_session(session)

    def _window_failed(self, session: SessionState, job: Job, error: LLMError) -> str:
        """A failure the window caused: counted; after `max_attempts` the window is given up."""
        state = self.app.state
        session.attempts += 1
        gave_up = session.attempts >= self.config.evolve.max_attempts
        with state.transaction():
            state.add_event(
                "error",
                library=job.library,
                session=job.session,
                source=job.source,
                reason=str(error),
                detail={
                    "messages": [job.first_message, job.last_message],
                    "kind": error.kind,
                    "status": error.status,
                    "attempt": session.attempts,
                    "gave_up": gave_up,
                    "git": _git_json(job.git),
                },
            )
            if gave_up:
                self._advance(session, job)
            else:
                session.last_reflect_at = self.clock()
                state.save_session(session)
        return "error"

    def _prompt_settings(self, library: Library) -> PromptSettings:
        evolve = self.config.evolve
        return PromptSettings(
            dialect=library.form,
            max_content_chars=library.max_content_chars,
            name_prefix=library.spec.name_prefix,
            with_scope=evolve.scope == "auto" and bool(library.spec.project_dir),
            guidance=self._guidance(),
            system_prompt=self.system_prompt,
        )

    def _guidance(self) -> str:
        evolve = self.config.evolve
        parts = [evolve.guidance]
        if evolve.guidance_file is not None:
            try:
                parts.append(evolve.guidance_file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as exc:
                self.log.warning(
                    "guidance_file_unreadable", path=str(evolve.guidance_file), error=str(exc)
                )
        return "\n\n".join(part.strip() for part in parts if part and part.strip())

    async def _ask(self, job: Job, report: TickReport, spend: Spend) -> Verdict:
        """Redact, prompt, call the model (with one repair request), judge. Writes nothing
        but the redaction event."""
        state = self.app.state
        user = self.app.libraries[job.library]
        git = job.git
        header = session_header(git.repository, git.branch) if git is not None else ""
        recurred = window_history(state.conn, job)
        lines = history_lines(recurred) + failure_lines(job.failures) + effect_lines(job.revisions)
        redaction = redact(header + lines + render_window(job.messages))
        if redaction.counts:
            state.add_event(
                "redacted",
                library=job.library,
                session=job.session,
                source=job.source,
                detail={
                    "counts": dict(redaction.counts),
                    "stage": "window",
                    "git": _git_json(git),
                },
            )
        # The session's own libraries only: its agent's, and its project's (never another's).
        shown = [user]
        if (project := self._project_library(user, job.cwd)) is not None:
            shown.append(project)
        existing = [
            (entry.name, entry.doc.description)
            for library in shown
            for entry in self._listing(library)
            if entry.doc is not None
        ]
        settings = self._prompt_settings(user)
        messages: list[dict[str, Any]] = build_messages(
            delimit(redaction.text),
            session=job.session,
            source=job.source,
            first_message=job.first_message,
            last_message=job.last_message,
            existing=existing,
            settings=settings,
        )
        total = sum(len(message["content"]) for message in messages)
        self._prompt_chars[job.library] = total - len(redaction.text)
        rules = Rules(user.form, user.max_content_chars, user.spec.name_prefix)
        schema = proposal_schema(with_scope=settings.with_scope)
        return await self._converse(
            messages, rules, schema, report, spend, job, known=[name for name, _ in existing],
            failure_ids=[item.label for item in job.failures],
        )  # fmt: skip

    async def _converse(
        self,
        messages: list[dict[str, Any]],
        rules: Rules,
        schema: dict[str, Any],
        report: TickReport,
        spend: Spend,
        job: Job,
        *,
        known: list[str],
        merge: bool = False,
        failure_ids: Sequence[str] | None = None,
    ) -> Verdict:
        """A request and, when its reply breaks the contract, one repair request."""
        verdict: Verdict | None = None
        for attempt in range(2):
            try:
                reply = await self.llm.chat(messages, json_schema=schema)
            except LLMError as error:
                return Failed(error)
            report.llm_calls += reply.attempts
            spend.add(reply, messages, merge=merge)
            judged = judge_reply(
                reply.content,
                finish_reason=reply.finish_reason,
                refusal=reply.refusal,
                rules=rules,
                existing=known,
                failure_ids=failure_ids,
            )
            if judged.redactions:
                self.app.state.add_event(
                    "redacted",
                    library=job.library,
                    session=job.session,
                    source=job.source,
                    detail={
                        "counts": judged.redactions,
                        "stage": "merge" if merge else "reply",
                        "git": _git_json(job.git),
                    },
                )
            verdict = judged.verdict
            if not isinstance(verdict, Invalid) or attempt == 1:
                return verdict
            messages = [
                *messages,
                # Its own reply, for context, up to what a valid reply can hold: a 10 MB
                # ramble must not come back as a 10 MB request.
                {
                    "role": "assistant",
                    "content": cut_text(reply.content or "", 2 * rules.max_content_chars),
                },
                {
                    "role": "user",
                    "content": repair_message(
                        Violation(verdict.reason, verdict.raw),
                        with_scope="scope" in schema["properties"],
                    ),
                },
            ]
        assert verdict is not None  # the loop always returns on its second pass
        return verdict

    # -- keep and settle ---------------------------------------------------------------------

    def _keep(self, session: SessionState, job: Job, verdict: Propose) -> KeptProposal:
        """Keep the judged proposal and move the watermark, in one transaction: from here on
        the answer is never asked for again."""
        state = self.app.state
        doc = verdict.doc
        revision = next((offer for offer in job.revisions if offer["name"] == doc.name), None)
        body: dict[str, Any] = {
            "name": doc.name,
            "description": doc.description,
            "when_to_use": doc.when_to_use,
            "content": doc.body,
            "reason": revision_reason(verdict.reason, revision) if revision else verdict.reason,
            "scope": verdict.scope,
            "cwd": job.cwd,
            "git": _git_json(job.git),
            "merged": False,
            "revision": revision,
            # What the skill is meant to end (its source failures), the window's own knowledge.
            "targets": targeted(job.failures, verdict.ends, doc.body),
        }
        with state.transaction():
            proposal_id = state.keep_proposal(
                job.library,
                body,
                session=job.session,
                source=job.source,
                first_message=job.first_message,
                last_message=job.last_message,
            )
            self._advance(session, job)
        return KeptProposal(
            proposal_id,
            job.library,
            job.session,
            job.source,
            job.first_message,
            job.last_message,
            body,
            "new",
            None,
            self.clock(),
        )

    async def _settle_kept(self, report: TickReport) -> Outage | None:
        """Proposals kept by earlier ticks: written now if they can be, without reflecting
        their windows again."""
        for kept in self.app.state.kept_proposals():
            if kept.library not in self.app.libraries:
                report.deferred["library not configured"] += 1
                continue
            try:
                outcome, library, path = await self.settler.settle(kept, report, Spend())
            except Outage as outage:
                return outage
            if outcome in ("cap", "failed"):
                report.deferred[f"kept proposal: {outcome}"] += 1
            else:
                job = Job(
                    kept.session or "", kept.source or "", kept.library, (), kept.first_message or 0
                )
                report.records.append(
                    WindowRecord(
                        job.session,
                        job.source,
                        kept.first_message or 0,
                        kept.last_message or 0,
                        outcome,
                        kept.body.get("name"),
                        Spend(),
                        library,
                        path,
                    )
                )
        return None

    def _project_library(self, user: Library, cwd: str | None) -> Library | None:
        """The project library of a session's working directory for `user`'s agent, when the
        project keeps skills (`routing.project_skills_dir`: real folders inside a root that may
        be a project at all); what a session is shown and its uses are counted in."""
        root = project_root(user.spec, cwd)
        if root is None or user.spec.project_dir is None:
            return None
        if project_skills_dir(root, user.spec.project_dir) is None:
            return None
        return self.app.project(user, root)

    async def merge(
        self,
        current: SkillDoc,
        kept: KeptProposal,
        library: Library,
        report: TickReport,
        spend: Spend,
    ) -> Verdict:
        """The merge a learned update takes, for a staged proposal a person approves
        (`skilld.evolve.approval`): `kept`'s text merged into the skill's `current` one."""
        proposed = candidate_of(kept.body, None).doc
        return await self._merge(current, proposed, kept, library, report, spend)

    async def _merge(
        self,
        current: SkillDoc,
        proposed: SkillDoc,
        kept: KeptProposal,
        library: Library,
        report: TickReport,
        spend: Spend,
    ) -> Verdict:
        """Ask the model to merge `proposed` into the skill's `current` text: an update never
        overwrites a body the model has not seen."""
        first, last = kept.first_message or 0, kept.last_message or 0
        messages = build_merge_messages(
            current,
            proposed,
            reason=kept.body.get("reason", ""),
            session=kept.session or "",
            source=kept.source or "",
            first_message=first,
            last_message=last,
            current_tags=delimit(current.body + current.description),
            proposed_tags=delimit(proposed.body + proposed.description),
            settings=replace(self._prompt_settings(library), with_scope=False, system_prompt=None),
            revision=kept.body.get("revision"),
        )
        job = Job(
            kept.session or "",
            kept.source or "",
            library.name,
            (),
            first,
            git=from_json(kept.body.get("git")),
        )
        rules = Rules(library.form, library.max_content_chars, "")
        merged = await self._converse(
            messages,
            rules,
            proposal_schema(with_scope=False),
            report,
            spend,
            job,
            known=[current.name],
            merge=True,
        )
        revision = kept.body.get("revision")
        if isinstance(merged, Propose) and revision:  # a revision's reason quotes its evidence
            merged = replace(merged, reason=revision_reason(merged.reason, revision))
        return merged


def _git_json(git: GitContext | None) -> dict[str, str | None] | None:
    return git.as_json() if git is not None else None
