"""Session histories written into a real state.db the way a tick records them
(`skilld.effect.store`), and skills learned from their windows (provenance and the event that
wrote each version): what the effect tests and the effect campaign measure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from skilld.effect.extract import Failure, ToolRun
from skilld.effect.store import SessionFacts, record_loads, record_read
from skilld.state import StateDB

DAY0 = datetime(2026, 1, 1, 9, tzinfo=UTC)
LIBRARY = "default"
REPOSITORY = "github.com/acme/app"


def day(n: float) -> datetime:
    return DAY0 + timedelta(days=n)


class Clock:
    """The state's clock: what time each event is written at."""

    def __init__(self) -> None:
        self.now = DAY0

    def __call__(self) -> float:
        return self.now.timestamp()


def push_failure(seq: int, *, resolved: bool = True, signature: str = "sig-push") -> Failure:
    return Failure(
        seq,
        None,
        "Bash",
        "git push",
        "fatal: The current branch <branch> has no upstream branch.",
        signature,
        "real",
        128,
        resolved,
    )


def record_session(
    state: StateDB,
    session: str,
    when: datetime,
    *,
    ran: bool = True,
    failed: bool = False,
    loaded: tuple[str, ...] = (),
    source: str = "claude-code",
    repository: str | None = REPOSITORY,
    signature: str = "sig-push",
    command: str = "git push",
) -> None:
    """One session: it ran `command` (failing with `signature` when `failed`, then
    succeeding), and loaded the skills named in `loaded`."""
    runs: list[ToolRun] = []
    failures: list[Failure] = []
    stamp = when.isoformat()
    if ran and failed:
        failures.append(push_failure(1, signature=signature)._replace(ts=stamp, command=command))
        runs.append(ToolRun(1, stamp, "Bash", command, False))
    if ran:
        runs.append(ToolRun(2, stamp, "Bash", command, True))
    facts = SessionFacts(session, source, LIBRARY, repository, stamp)
    with state.transaction() as conn:
        record_read(conn, facts, runs, failures)
        if loaded:
            record_loads(conn, session, LIBRARY, loaded)


def learn_skill(
    state: StateDB,
    clock: Clock,
    name: str,
    session: str,
    when: datetime,
    *,
    window: tuple[int, int] = (0, 5),
    repository: str | None = REPOSITORY,
    kind: str = "created",
    targets: tuple[str, ...] | None = None,
) -> None:
    """skilld wrote `name` at `when` from `session`'s messages `window`, targeting `targets`
    (None: every counted failure the window shows, as a reply naming them all in `ends`)."""
    clock.now = when
    if targets is None:
        targets = tuple(
            dict.fromkeys(
                row[0]
                for row in state.conn.execute(
                    "SELECT signature FROM effect_failures WHERE session = ?"
                    " AND seq BETWEEN ? AND ? AND class IN ('real', 'hook', 'masked') ORDER BY seq",
                    (session, *window),
                )
            )
        )
    git: dict[str, Any] | None = (
        {"repository": repository, "branch": "main", "commit": None, "how": "recorded"}
        if repository
        else None
    )
    state.put_provenance(
        LIBRARY,
        name,
        path=f"/skills/{name}/SKILL.md",
        sha256="0" * 64,
        session=session,
        first_message=window[0],
        last_message=window[1],
        git=git,
    )
    state.add_event(
        kind,
        library=LIBRARY,
        skill=name,
        session=session,
        source="claude-code",
        reason="learned",
        detail={"messages": list(window), "git": git, "targets": list(targets)},
    )
