"""A skill's exposures and recurrences, counted over plain rows read from state.db.

For each source failure signature of a skill (a `real`/`hook` failure its version's source
window showed resolved), the *anchor* is the creation time of the first version that learned
it. A session of the same agent (and the same repository, when the version's is known) that
ran the signature's command head is an *exposure*: *after* when its first message is later
than the anchor, *before* when earlier. A *failure* is an exposure in which the signature
failed again. The sessions the skill was learned from count on neither side: they were chosen
because they failed, and would make any skill look as if it helped.

Pure: plain values in, plain values out. `skilld.effect.report` reads the rows and records
nothing; `skilld.effect.verdict` judges the counts.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

from skilld.effect.verdict import Counts

#: The failure classes that count for effect.
COUNTED_CLASSES = frozenset({"real", "hook"})


class Version(NamedTuple):
    """One version of a skill and the window it was learned from."""

    at: str  # when it was written (ISO UTC, the form `instant` gives)
    session: str
    first_message: int
    last_message: int
    #: The repository the window worked in (host/owner/repo), None when unknown.
    repository: str | None


class SourceFailure(NamedTuple):
    """A failure a source window showed (any class; only real/hook resolved ones count)."""

    session: str
    seq: int
    signature: str
    cls: str
    command: str
    resolved: bool


class SessionFacts(NamedTuple):
    source: str  # the agent (source kind)
    repository: str | None
    first_ts: str  # ISO UTC, the form `instant` gives


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
    recurrences: list[Recurrence]
    #: The first message time of the newest after-exposure (None: none yet).
    last_exposure: str | None


class History:
    """Every session's facts, which sessions ran each command, where each signature failed,
    indexed once for a library's worth of skills: each count is a bisection."""

    def __init__(
        self,
        sessions: Mapping[str, SessionFacts],
        runs: Iterable[tuple[str, str]],
        failed: Iterable[tuple[str, str]],
        loads: Iterable[tuple[str, str, str]],
    ) -> None:
        """`runs`: (session, command head); `failed`: (signature, session) of counted
        failures; `loads`: (library, name, session) of each skill a session loaded."""
        self.sessions = sessions
        self.ran: dict[str, set[str]] = {}
        grouped: dict[tuple[str, str, str | None], list[str]] = {}
        for session, command in runs:
            facts = sessions.get(session)
            if facts is None:
                continue
            self.ran.setdefault(command, set()).add(session)
            # Each run counts in its repository's group and in the agent-wide one (None).
            grouped.setdefault((command, facts.source, None), []).append(facts.first_ts)
            if facts.repository is not None:
                key = (command, facts.source, facts.repository)
                grouped.setdefault(key, []).append(facts.first_ts)
        self._times = {key: sorted(times) for key, times in grouped.items()}
        self.failed: dict[str, set[str]] = {}
        for signature, session in failed:
            self.failed.setdefault(signature, set()).add(session)
        self.loads: dict[tuple[str, str], set[str]] = {}
        for library, name, session in loads:
            self.loads.setdefault((library, name), set()).add(session)

    def in_group(self, session: str, source: str, repository: str | None) -> SessionFacts | None:
        facts = self.sessions.get(session)
        if facts is None or facts.source != source:
            return None
        if repository is not None and facts.repository != repository:
            return None
        return facts

    def count_runs(
        self, command: str, source: str, repository: str | None, anchor: str
    ) -> tuple[int, int, str | None]:
        """(sessions before `anchor`, sessions after it, the newest after) that ran `command`."""
        times = self._times.get((command, source, repository), [])
        before = bisect_left(times, anchor)
        after = len(times) - bisect_right(times, anchor)
        return before, after, times[-1] if after else None


def source_failures(
    versions: Sequence[Version], failures: Iterable[SourceFailure]
) -> list[tuple[Version, SourceFailure]]:
    """The counted failures (real/hook, resolved) each version's window showed, each signature
    with the first version that learned it (versions oldest first)."""
    by_session: dict[str, list[SourceFailure]] = {}
    for failure in failures:
        if failure.cls in COUNTED_CLASSES and failure.resolved:
            by_session.setdefault(failure.session, []).append(failure)
    learned: dict[str, tuple[Version, SourceFailure]] = {}
    for version in sorted(versions, key=lambda v: v.at):
        for failure in sorted(by_session.get(version.session, ()), key=lambda f: f.seq):
            inside = version.first_message <= failure.seq <= version.last_message
            if inside and failure.signature not in learned:
                learned[failure.signature] = (version, failure)
    return list(learned.values())


def measure(
    library: str,
    name: str,
    versions: Sequence[Version],
    failures: Iterable[SourceFailure],
    history: History,
) -> Measured:
    """The counts behind a skill's verdict: `failures` are those of its versions' windows."""
    learned = source_failures(versions, failures)
    if not learned:
        first = min((v.at for v in versions), default=None)
        return Measured(first, [], Counts(0, 0, 0, 0, 0, 0, 0), [], None)
    excluded = {version.session for version in versions}
    loads = history.loads.get((library, name), set())
    several = len(learned) > 1
    tally = _Tally()
    for version, failure in learned:
        source_facts = history.sessions.get(version.session)
        if source_facts is not None:
            group = _Group(failure.command, source_facts.source, version.repository, version.at)
            tally.add(history, group, failure.signature, excluded, loads, several=several)
    counts = Counts(
        source_failures=len(learned),
        before_exposures=tally.before,
        before_failures=tally.before_failures,
        after_exposures=tally.after,
        after_failures=tally.after_failures,
        loaded_exposures=tally.loaded,
        loaded_failures=tally.loaded_failures,
        before_sessions=len(tally.before_sessions) if several else tally.before,
        after_sessions=len(tally.after_sessions) if several else tally.after,
        loaded_sessions=len(tally.loaded_sessions),
    )
    tally.recurrences.sort(key=lambda r: (r.first_ts, r.session))
    since = min(version.at for version, _ in learned)
    listed = [(f.signature, f.cls, f.command) for _, f in learned]
    return Measured(since, listed, counts, tally.recurrences, tally.newest)


class _Group(NamedTuple):
    """The sessions a source failure is compared over: those of its agent (and repository,
    when known) that ran its command, before and after its anchor."""

    command: str
    source: str
    repository: str | None
    anchor: str


class _Tally:
    """A skill's counts, summed over its source failures."""

    def __init__(self) -> None:
        self.before = self.before_failures = 0
        self.after = self.after_failures = 0
        self.loaded = self.loaded_failures = 0
        self.before_sessions: set[str] = set()
        self.after_sessions: set[str] = set()
        self.loaded_sessions: set[str] = set()
        self.recurrences: list[Recurrence] = []
        self.newest: str | None = None

    def add(
        self,
        history: History,
        group: _Group,
        signature: str,
        excluded: Collection[str],
        loads: Collection[str],
        *,
        several: bool,
    ) -> None:
        before, after, last = history.count_runs(
            group.command, group.source, group.repository, group.anchor
        )
        ran = history.ran.get(group.command, set())
        for session in ran.intersection(excluded):
            side = _side(history, session, group)
            before -= side == "before"
            after -= side == "after"
        self.before += before
        self.after += after
        if after > 0 and last is not None:
            self.newest = last if self.newest is None else max(self.newest, last)
        if several:  # a session that ran two source commands is one session
            for session in ran.difference(excluded):
                side = _side(history, session, group)
                if side == "before":
                    self.before_sessions.add(session)
                elif side == "after":
                    self.after_sessions.add(session)
        for session in loads:
            exposed = session in ran and session not in excluded
            if exposed and _side(history, session, group) == "after":
                self.loaded += 1
                self.loaded_sessions.add(session)
        for session in history.failed.get(signature, set()):
            if session in excluded or session not in ran:
                continue
            side = _side(history, session, group)
            if side == "before":
                self.before_failures += 1
            elif side == "after":
                loaded = session in loads
                self.after_failures += 1
                self.loaded_failures += loaded
                first_ts = history.sessions[session].first_ts
                self.recurrences.append(Recurrence(signature, session, first_ts, loaded))


def _side(history: History, session: str, group: _Group) -> str | None:
    """ "before" or "after" the anchor for a session of the group, else None."""
    facts = history.in_group(session, group.source, group.repository)
    if facts is None or facts.first_ts == group.anchor:
        return None
    return "before" if facts.first_ts < group.anchor else "after"
