"""Team libraries in the product: set a library's work tree up, run a sync round, and record
what it did (events, the status `skilld status` shows). The git engine is `skilld.sync`.

A library with `remote` is a work tree of that repository; its changes are committed by the
Library as they happen. A round here publishes this host's usage, commits what was left,
fetches, replays this host's commits onto the remote and pushes; each conflict it settled is a
`conflict` event naming both versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from skilld.log import get_logger
from skilld.masking import mask_urls, masked_url

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.skills.library import Library
    from skilld.skills.usage import State
    from skilld.state import StateDB
    from skilld.sync import SyncReport, TeamRepo

_log = get_logger("skilld.team")


def meta_key(library: str) -> str:
    return f"sync:{library}"


def team_repo(library: Library) -> TeamRepo:
    """The git work tree of a team library (the library itself sees it as a `TeamTree`)."""
    from skilld.sync import TeamRepo

    team = library.team
    assert isinstance(team, TeamRepo)
    return team


def set_up(library: Library) -> list[str]:
    """Make the library's dir a work tree of its remote (no network); problems that need a
    person, each with the command that repairs it. Idempotent."""
    from skilld.sync import GitError

    team = team_repo(library)
    try:
        # The seed is read only where a join may still happen (it hashes every skill file).
        result = team.setup(library.team_seed() if not team.is_set_up else None)
    except (GitError, OSError) as exc:
        return [mask_urls(f"{library.root}: {exc}")]
    return [f"{problem.message} (repair: {problem.repair})" for problem in result.problems]


def sync_round(library: Library) -> SyncReport:
    """One sync round of a team library (git and the network only: it may run in a thread)."""
    team = team_repo(library)
    return team.sync(usage=library.usage.read())


def record_round(library: Library, state: StateDB, report: SyncReport) -> None:
    """A round's conflicts as events, and its outcome as the library's sync status."""
    from dataclasses import asdict  # the daemon's: `skilld status` imports this module

    previous = state.get_meta(meta_key(library.name), {})
    when = datetime.fromtimestamp(report.finished_at, UTC).isoformat(timespec="seconds")
    # git's errors come masked (skilld.sync.git); what else a round says is masked here.
    error = mask_urls(report.error) if report.error else report.error
    status = {
        **previous,
        "last_attempt": when,
        "last_error": error,
        "pushed": report.pushed,
        "pulled": report.pulled,
        "ahead": report.ahead,
        "problems": [f"{p.message} (repair: {p.repair})" for p in report.problems],
        "refused": refused_records(library, report),
    }
    if report.ok:
        status["last_success"] = when
    if report.pulled:
        follow_archive_moves(library)
    with state.transaction():
        for conflict in report.conflicts:
            state.add_event(
                "conflict",
                library=library.name,
                skill=conflict.skill,
                source="sync",
                reason=(
                    f"{_side(conflict.winner_host, conflict.winner)} version kept"
                    f" ({conflict.rule}); {_side(conflict.loser_host, conflict.winner, lost=True)}"
                    f" version is in history as {conflict.loser_commit[:12]}"
                ),
                detail=asdict(conflict),
            )
        if report.pushed or report.pulled:
            state.add_event(
                "synced",
                library=library.name,
                source="sync",
                detail={"pushed": report.pushed, "pulled": report.pulled},
            )
        for refused in status["refused"]:
            if refused in (previous.get("refused") or ()):
                continue  # refused on an earlier round already
            state.add_event(
                "sync_refused",
                library=library.name,
                source="sync",
                reason=f"{refused['path']}: {refused['why']} (commit {refused['commit'][:12]})",
                detail=refused,
            )
        if not report.ok:
            state.add_event("error", library=library.name, source="sync", reason=f"sync: {error}")
        state.set_meta(meta_key(library.name), status)


def refused_records(library: Library, report: SyncReport) -> list[dict[str, str]]:
    """Why a round did not apply the fetched commit, a path each, for the status and the
    `sync_refused` events."""
    team = team_repo(library)
    return [
        {
            "commit": refusal.commit,
            "tip": refusal.tip,
            "path": refusal.path,
            "why": refusal.why,
            "repair": refusal.repair(team.root, team.branch),
        }
        for refusal in report.refused
    ]


def _side(host: str | None, winner: str, *, lost: bool = False) -> str:
    """A conflict's side as a person reads it: the host's name, else where it came from."""
    if host:
        return f"{host}'s"
    local = (winner == "local") != lost
    return "this host's" if local else "the remote's"


def follow_archive_moves(library: Library) -> None:
    """After a round that pulled: this host's usage records follow the archives and restores
    teammates made (a record's `state` is host-local, the files are the team's). One read of
    the sidecar and one write, however many skills a round moved."""
    archived = library.archived()
    moves: dict[str, State] = {}
    for name, record in library.usage.read().items():
        # Only the few records that may disagree look at their skill's files.
        if record.get("state") == "archived":
            if library.entry(name, parse=False) is not None:
                moves[name] = "active"
        elif name in archived and library.entry(name, parse=False) is None:
            moves[name] = "archived"
    if moves:
        library.usage.set_states(moves)


def sync_findings(problems: list[str], recorded: Mapping[str, Any]) -> list[str]:
    """What is wrong with a team library, each with its repair: the work tree's live problems
    (`problems`, as `sync_status` words them), else the last round's error when no live check
    explains it (a failed round whose problems a person has repaired since is not one)."""
    if problems:
        return list(problems)
    error = recorded.get("last_error")
    if not error or recorded.get("problems") or recorded.get("refused"):
        return []
    return [f"the last sync failed: {error} (repair: fix that, then run: skilld sync)"]


def team_libraries(app: App) -> list[Library]:
    return [library for library in app.libraries.values() if library.team is not None]


def sync_status(app: App) -> list[dict[str, Any]]:
    """Per team library: the last successful sync, commits waiting to be pushed, the last
    error, the commit the last round refused, problems a person must repair (no network), and
    `findings`: what `doctor` and `status --check` fail on, each with its repair."""
    rows = []
    for library in team_libraries(app):
        team = team_repo(library)
        recorded = app.state.get_meta(meta_key(library.name), {})
        status = team.status()
        problems = [f"{p.message} (repair: {p.repair})" for p in status.problems]
        rows.append(
            {
                "library": library.name,
                "remote": masked_url(team.remote),
                "branch": team.branch,
                "host": team.host,
                "set_up": status.set_up,
                "last_success": recorded.get("last_success"),
                "last_attempt": recorded.get("last_attempt"),
                "last_error": recorded.get("last_error"),
                "ahead": status.ahead,
                "problems": problems,
                "refused": recorded.get("refused"),
                "findings": sync_findings(problems, recorded),
            }
        )
    return rows
