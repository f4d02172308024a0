"""A skill's sessions before and after it, combined from what state.db counts for it.

For each source failure of a skill (a counted failure, `real`, `hook` or `masked`, that a
version targets: skilld.effect.targets) there is an *anchor*: its signature and command head,
the agent and repository of the window, and the creation time of the first version that
targeted it. A session of the same agent (and the same repository, when the version's is known)
that ran the command is an *exposure*: *after* when its first message is later than the
anchor's time, *before* when earlier. A *failure* is an exposure in which the signature failed
again (a counted class). The unit a person reads is the session: a session that ran two of a
skill's commands counts once, and fails once however many of them failed. The sessions the
skill was learned from count on neither side: they were chosen because they failed, and would
make any skill look as if it helped.

`skilld.effect.report` counts each anchor's exposures and failures with one indexed query for
every skill and reads the few sessions that need a closer look (the source sessions, those
that loaded the skill, and those of skills with several source failures); this module
combines them. Pure: plain values in, plain values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from skilld.effect.extract import COUNTED_CLASSES
from skilld.effect.verdict import Counts


class Version(NamedTuple):
    """One version of a skill and the window it was learned from."""

    at: str  # when it was written (ISO UTC, one comparable form)
    session: str
    first_message: int
    last_message: int
    #: The repository the window worked in (host/owner/repo), None when unknown.
    repository: str | None
    #: The signatures it targets (skilld.effect.targets); None while a version written before
    #: targets were recorded waits for `record.backfill_targets`.
    targets: tuple[str, ...] | None = ()


class SourceFailure(NamedTuple):
    """A failure a source window showed (any class; only the counted ones it targets count)."""

    session: str
    seq: int
    signature: str
    cls: str
    command: str
    resolved: bool


class Anchor(NamedTuple):
    """One source failure of a skill, compared over the sessions of its group."""

    signature: str
    cls: str
    command: str
    source: str  # the agent
    repository: str | None  # None: every session of the agent
    at: str  # the creation time of the version that learned it
    session: str  # the session whose window it was learned from

    def side(self, source: str, repository: str | None, session_ts: str) -> str | None:
        """ "before" or "after" for a session of this group, None for any other session."""
        if source != self.source or (self.repository is not None and repository != self.repository):
            return None
        if session_ts == self.at:
            return None
        return "before" if session_ts < self.at else "after"


class AnchorCounts(NamedTuple):
    """What the indexed counts say of one anchor, the source sessions included."""

    before_exposures: int = 0
    before_failures: int = 0
    after_exposures: int = 0
    after_failures: int = 0
    #: The first message time of the newest after-exposure (None: none).
    newest: str | None = None


class SessionRun(NamedTuple):
    """A session that ran an anchor's command, as the report read it for a closer look."""

    anchor: int  # index in the skill's anchors
    session: str
    source: str
    repository: str | None
    session_ts: str
    failed: bool  # the anchor's signature failed in it (a counted class)


class Recurrence(NamedTuple):
    signature: str
    session: str
    first_ts: str
    loaded: bool


class Measured(NamedTuple):
    """What the rows say of one skill."""

    since: str | None
    #: (signature, class, command) of each source failure, in the order first learned.
    source_failures: list[tuple[str, str, str]]
    counts: Counts
    #: The first message time of the newest after-exposure (None: none yet).
    last_exposure: str | None


def learned_failures(
    versions: Sequence[Version], failures: Iterable[SourceFailure]
) -> list[tuple[Version, SourceFailure]]:
    """The counted failures each version's window showed and the version targets, each
    signature with the first version that targeted it: a skill keeps the union of its
    versions' source failures."""
    by_session: dict[str, list[SourceFailure]] = {}
    for failure in failures:
        if failure.cls in COUNTED_CLASSES:
            by_session.setdefault(failure.session, []).append(failure)
    learned: dict[str, tuple[Version, SourceFailure]] = {}
    for version in sorted(versions, key=lambda v: v.at):
        targets = set(version.targets or ())
        for failure in sorted(by_session.get(version.session, ()), key=lambda f: f.seq):
            inside = version.first_message <= failure.seq <= version.last_message
            if inside and failure.signature in targets and failure.signature not in learned:
                learned[failure.signature] = (version, failure)
    return list(learned.values())


def anchors_of(
    versions: Sequence[Version],
    failures: Iterable[SourceFailure],
    agents: Mapping[str, str],
) -> list[Anchor]:
    """A skill's anchors; `agents` maps a source session to its agent (a session state.db
    never recorded gives none)."""
    anchors = []
    for version, failure in learned_failures(versions, failures):
        source = agents.get(version.session)
        if source is not None:
            anchors.append(
                Anchor(
                    failure.signature,
                    failure.cls,
                    failure.command,
                    source,
                    version.repository,
                    version.at,
                    version.session,
                )
            )
    return anchors


def combine(
    anchors: Sequence[Anchor],
    counts: Sequence[AnchorCounts],
    *,
    excluded: Iterable[str],
    source_runs: Iterable[SessionRun],
    loaded_runs: Iterable[SessionRun],
    exposed_runs: Iterable[SessionRun] | None = None,
) -> tuple[Counts, str | None]:
    """A skill's counts of sessions from its anchors' counts, less its source sessions
    (`excluded`, read in `source_runs`), with the after-sessions that loaded it
    (`loaded_runs`). `exposed_runs` lists every exposure of a skill with several anchors, so
    that a session that ran two of its commands counts once, and fails once; with one anchor,
    its exposures are sessions already."""
    skip = set(excluded)
    newest: str | None = None
    for anchor_counts in counts:
        if anchor_counts.newest is not None and anchor_counts.after_exposures:
            newest = max(newest or anchor_counts.newest, anchor_counts.newest)
    if exposed_runs is None:
        totals = [0, 0, 0, 0]
        for anchor_counts in counts:
            totals[0] += anchor_counts.before_exposures
            totals[1] += anchor_counts.before_failures
            totals[2] += anchor_counts.after_exposures
            totals[3] += anchor_counts.after_failures
        for run in source_runs:
            side = anchors[run.anchor].side(run.source, run.repository, run.session_ts)
            if run.session in skip and side is not None:
                offset = 0 if side == "before" else 2
                totals[offset] -= 1
                totals[offset + 1] -= run.failed
    else:
        sides: tuple[dict[str, bool], dict[str, bool]] = ({}, {})
        for run in exposed_runs:
            side = anchors[run.anchor].side(run.source, run.repository, run.session_ts)
            if side is not None and run.session not in skip:
                failed = sides[side == "after"]
                failed[run.session] = failed.get(run.session, False) or run.failed
        totals = [len(sides[0]), sum(sides[0].values()), len(sides[1]), sum(sides[1].values())]
    loaded: dict[str, bool] = {}
    for run in loaded_runs:
        side = anchors[run.anchor].side(run.source, run.repository, run.session_ts)
        if side == "after" and run.session not in skip:
            loaded[run.session] = loaded.get(run.session, False) or run.failed
    measured = Counts(
        source_failures=len(anchors),
        before_sessions=totals[0],
        before_failures=totals[1],
        after_sessions=totals[2],
        after_failures=totals[3],
        loaded_sessions=len(loaded),
        loaded_failures=sum(loaded.values()),
    )
    return measured, newest


def recurrences(
    anchors: Sequence[Anchor],
    failed_runs: Iterable[SessionRun],
    *,
    excluded: Iterable[str],
    loaded: Iterable[str],
) -> list[Recurrence]:
    """Where a skill's failures came back: each after-session in which an anchor's signature
    failed (not a source session), with whether it loaded the skill; oldest first."""
    skip, loads = set(excluded), set(loaded)
    found = {
        (run.session, anchors[run.anchor].signature): Recurrence(
            anchors[run.anchor].signature, run.session, run.session_ts, run.session in loads
        )
        for run in failed_runs
        if run.failed
        and run.session not in skip
        and anchors[run.anchor].side(run.source, run.repository, run.session_ts) == "after"
    }
    return sorted(found.values(), key=lambda r: (r.first_ts, r.session, r.signature))
