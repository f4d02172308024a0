"""Settling a kept proposal: gather the facts, let `settlement.decide` say what happens, do
it and record its event (docs/design.md, Settlement).

The event of a settled proposal commits together with the proposal's removal from state.db;
one that cannot be written yet (the cap, a failed write, the LLM down for its merge) stays
kept, and is settled again on a later tick.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

from skilld.app import App
from skilld.effect.targets import kept_targets
from skilld.evolve._judge import Verdict
from skilld.evolve.contract import RAW_REPLY_LIMIT
from skilld.evolve.prompt import PROMPT_VERSION
from skilld.evolve.report import Outage, Spend, TickReport
from skilld.evolve.review import ReviewQueue
from skilld.evolve.settlement import (
    Candidate,
    Existing,
    Facts,
    KeepCurrent,
    MergeFirst,
    Plan,
    Refuse,
    Stage,
    Wait,
    Write,
    after_merge,
    body_of,
    candidate_of,
    decide,
)
from skilld.fsutil import UnsafePath
from skilld.gitinfo import from_json, repository_of
from skilld.projects import (
    ProjectDecision,
    pattern_kind,
    project_decision,
    resolve_pattern,
    skills_dir_state,
)
from skilld.routing import project_root, resolved_home
from skilld.skills.document import SkillDoc
from skilld.skills.library import Library, SkillEntry
from skilld.skills.outcomes import Origin, Refused, Unchanged, WriteFailed, Written
from skilld.state import KeptProposal

#: Merge a proposal into a skill's current text: (current, proposed, the kept proposal, the
#: library, the tick's report, the window's spend) -> the model's verdict.
Merge = Callable[[SkillDoc, SkillDoc, KeptProposal, Library, TickReport, Spend], Awaitable[Verdict]]

#: What settling came to: (outcome, library, path).
Settled = tuple[str, str | None, str | None]


class _Settling(NamedTuple):
    """One kept proposal on its way to disk: where it goes and what its events carry."""

    kept: KeptProposal
    library: Library
    project_root: Path | None
    origin: Origin
    window: dict[str, Any]  # the window's messages and git, on every event
    report: TickReport


class Settler:
    def __init__(
        self,
        app: App,
        review: ReviewQueue,
        *,
        listing: Callable[[Library], list[SkillEntry]],
        written: Callable[[Library], None],
        merge: Merge,
    ) -> None:
        self.app = app
        self.config = app.config
        self.review = review
        #: The library's skills as this tick listed them, and what forgets that listing.
        self.listing = listing
        self.written = written
        self.merge = merge

    async def settle(self, kept: KeptProposal, report: TickReport, spend: Spend) -> Settled:
        """Decide on a kept proposal and carry the decision out. Raises Outage when its merge
        needs an LLM that cannot answer."""
        settling, candidate, facts = self._gather(kept, report)
        if isinstance(facts, WriteFailed):
            return self._record(settling, candidate, facts)
        return await self._carry_out(settling, decide(candidate, facts), spend)

    # -- the facts ---------------------------------------------------------------------------

    def _gather(
        self, kept: KeptProposal, report: TickReport
    ) -> tuple[_Settling, Candidate, Facts | WriteFailed]:
        """Everything the decision needs, read once: where the proposal goes, what its events
        carry, and the target library's facts (or the fault that keeps them unknown)."""
        library, root = self._target(kept)
        git = from_json(kept.body.get("git"))
        origin = Origin(
            source=kept.source or "evolve",
            session=kept.session,
            first_message=kept.first_message,
            last_message=kept.last_message,
            model=self.config.llm.model,
            prompt_version=PROMPT_VERSION,
            git=git,
            targets=kept_targets(kept.body.get("targets")),
        )
        git_json = git.as_json() if git is not None else None
        window = {"messages": [kept.first_message, kept.last_message], "git": git_json}
        settling = _Settling(kept, library, root, origin, window, report)
        candidate = candidate_of(kept.body, git.branch if git else None)
        project = self._project_decision(kept, root) if root is not None else None
        try:
            return settling, candidate, self._facts(library, project, candidate)
        except UnsafePath as refused:
            # The skill's pin is in a usage sidecar the tree guard refuses (a link): a fault of
            # this machine, like a failed write. The proposal is kept until it is gone.
            return settling, candidate, WriteFailed(candidate.doc.name, str(refused))

    def _target(self, kept: KeptProposal) -> tuple[Library, Path | None]:
        """Where the proposal goes: the user library, or the session's project library for a
        project skill (its root, to check whether skilld may write there)."""
        user = self.app.libraries[kept.library]
        scoped = self.config.evolve.scope == "auto" and kept.body.get("scope") == "project"
        root = project_root(user.spec, kept.body.get("cwd")) if scoped else None
        if root is None:
            return user, None
        return self.app.project(user, root), root

    def _facts(
        self, library: Library, project: ProjectDecision | None, candidate: Candidate
    ) -> Facts:
        """The library's facts: the skill of the candidate's name read afresh (ownership
        before a change is decided on the file as it is now), the others as the tick listed
        them, every pin from one read of the usage sidecar. The sidecar is read only where a
        pin can matter: reading takes its lock, a file in a project skilld may not write into.
        """
        entry = library.entry(candidate.doc.name)
        listed = [
            e
            for e in self.listing(library)
            if e.root == library.root and e.doc is not None and e.name != candidate.doc.name
        ]
        may_write = project is None or project.allowed
        records = library.usage.read() if entry is not None or (listed and may_write) else {}

        def existing(entry: SkillEntry) -> Existing:
            protection = library.protection(entry, library.usage_record(entry.name, records))
            return Existing(entry.doc, protection, entry.file, entry.sha256 or "")

        evolve = self.config.evolve
        return Facts(
            dialect=library.form,
            existing=existing(entry) if entry is not None else None,
            others=[existing(e) for e in listed],
            similarity_threshold=evolve.similarity_threshold,
            # Counted for a new skill only: the cap limits creations, and counting costs a stat
            # per managed skill.
            managed=len(library.managed_names()) if entry is None else 0,
            max_managed=library.max_managed,
            review_mode=evolve.publish == "review",
            project=project,
            project_branches=evolve.project_branches,
        )

    def _project_decision(self, kept: KeptProposal, root: Path) -> ProjectDecision:
        """May skilld write into the project at `root` (resolved)? `evolve.projects`, the
        project's repository and what its skills dir is on disk decide (skilld.projects)."""
        project_dir = self.app.libraries[kept.library].spec.project_dir
        assert project_dir is not None  # a project root needs one
        patterns = [resolve_pattern(pattern) for pattern in self.config.evolve.projects]
        wants_repository = any(pattern_kind(pattern) == "repository" for pattern in patterns)
        return project_decision(
            root,
            repository=repository_of(root) if wants_repository else None,
            patterns=patterns,
            home=resolved_home(),
            skills_dir=root / project_dir,
            skills_dir_state=skills_dir_state(root, project_dir),
        )

    # -- carrying it out ---------------------------------------------------------------------

    async def _carry_out(self, settling: _Settling, plan: Plan, spend: Spend) -> Settled:
        candidate, decision = plan.candidate, plan.decision
        if isinstance(decision, MergeFirst):
            kept, library, report = settling.kept, settling.library, settling.report
            args = (decision.current, decision.proposed, kept, library, report, spend)
            merged = after_merge(candidate, await self.merge(*args))
            if not isinstance(merged, Write):
                return self._merge_closed(settling, candidate, merged, plan.facts.existing)
            settling = self._keep_merged(settling, merged.candidate)
            plan = decide(merged.candidate, plan.facts)
            candidate, decision = plan.candidate, plan.decision
        if isinstance(decision, Stage):
            return self._stage(settling, candidate, decision.reason)
        if isinstance(decision, Refuse):
            refused = Refused(decision.kind, candidate.doc.name, decision.reason)
            return self._record(settling, candidate, refused)
        # A merged candidate needs no merge again.
        assert isinstance(decision, Write), decision
        outcome = settling.library.write(candidate.doc, settling.origin)
        if isinstance(outcome, Written):
            self.written(settling.library)
        return self._record(settling, candidate, outcome)

    def _finish(
        self, settling: _Settling, kind: str, commit: Callable[[], None], path: str | None = None
    ) -> Settled:
        """Record the settled proposal's event and drop it, in one transaction."""
        state = self.app.state
        with state.transaction():
            commit()
            state.drop_proposal(settling.kept.id)
        settling.report.outcomes[kind] += 1
        return kind, settling.library.name, path

    def _stage(self, settling: _Settling, candidate: Candidate, reason: str) -> Settled:
        kept, library = settling.kept, settling.library
        doc = candidate.doc
        path = self.review.stage(
            doc,
            settling.origin,
            library=library.name,
            storage_key=library.spec.storage_key,
            reason=candidate.reason,
            held_because=reason,
            project_root=settling.project_root,
        )
        target = str(library.root / doc.name)
        detail = {**settling.window, "path": str(path), "target": target, **(candidate.near or {})}

        def staged() -> None:
            self.app.state.add_event(
                "staged",
                library=library.name,
                skill=doc.name,
                session=kept.session,
                source=kept.source,
                reason=reason,
                detail=detail,
            )

        return self._finish(settling, "staged", staged, str(path))

    def _merge_closed(
        self,
        settling: _Settling,
        candidate: Candidate,
        decision: KeepCurrent | Refuse | Wait,
        existing: Existing | None,
    ) -> Settled:
        """A merge that wrote nothing: declined (the skill stays as it is), broken, or waiting
        for the LLM."""
        library, origin, window = settling.library, settling.origin, settling.window
        if isinstance(decision, Wait):
            raise Outage(decision.error)
        if isinstance(decision, KeepCurrent):
            assert existing is not None  # a merge is into an existing skill
            unchanged = Unchanged(candidate.doc.name, Path(existing.path), existing.sha256)
            detail = {**window, "merge": "declined"}
            return self._finish(
                settling,
                "unchanged",
                lambda: library.commit(unchanged, origin, reason=decision.reason, detail=detail),
            )
        refused = Refused(decision.kind, candidate.doc.name, decision.reason)
        detail = {**window, "raw": decision.raw[:RAW_REPLY_LIMIT]}
        return self._finish(
            settling, refused.kind, lambda: library.commit(refused, origin, detail=detail)
        )

    def _keep_merged(self, settling: _Settling, candidate: Candidate) -> _Settling:
        """Keep the merged text: a later attempt writes it without asking the model again."""
        kept = settling.kept
        body = body_of(candidate, kept.body)
        self.app.state.update_proposal(kept.id, status=kept.status, note=kept.note, body=body)
        return settling._replace(kept=kept._replace(body=body))

    def _record(
        self,
        settling: _Settling,
        candidate: Candidate,
        outcome: Written | Unchanged | Refused | WriteFailed,
    ) -> Settled:
        """Record what the write came to. The cap and a failed write keep the proposal for a
        later tick, recording their event once."""
        kept, library, origin = settling.kept, settling.library, settling.origin
        detail = {**settling.window, **(candidate.near or {})}
        if candidate.merged:
            detail["merged"] = True
        body = kept.body  # with the merged text, once there is one (`_keep_merged`)
        if isinstance(outcome, Written | Unchanged):
            written = outcome
            return self._finish(
                settling,
                written.kind,
                lambda: library.commit(written, origin, reason=candidate.reason, detail=detail),
                str(written.path),
            )
        if isinstance(outcome, Refused) and outcome.kind == "cap":
            if kept.status != "cap":
                with self.app.state.transaction():
                    library.commit(
                        outcome, origin, detail={**detail, "kept": "written when there is room"}
                    )
                    self.app.state.update_proposal(kept.id, status="cap", body=body)
                settling.report.outcomes["cap"] += 1
            return "cap", library.name, None
        if isinstance(outcome, WriteFailed):
            if kept.status != "failed" or kept.note != outcome.reason:
                with self.app.state.transaction():
                    library.commit(
                        outcome, origin, detail={**detail, "kept": "written once the fault is gone"}
                    )
                    self.app.state.update_proposal(
                        kept.id, status="failed", note=outcome.reason, body=body
                    )
                settling.report.outcomes["error"] += 1
            return "failed", library.name, None
        refused = outcome
        return self._finish(
            settling, refused.kind, lambda: library.commit(refused, origin, detail=detail)
        )
