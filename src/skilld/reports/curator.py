"""The curator's page: its last runs and what each moved, its next pass, the archived skills."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skilld.app import App


#: The events of the curator's moves, and of a restore (which undoes one).
CURATOR_KINDS = ("stale", "reactivated", "archived", "merged", "restored")


def curator_report(app: App, *, runs: int = 10) -> dict[str, Any]:
    """The curator's last runs and what each moved, what its next pass will move and when,
    and every archived skill (each restorable)."""
    from datetime import timedelta

    from skilld.curator.passes import read_last_run, run_lifecycle
    from skilld.curator.schedule import utc_now

    curator = app.config.curator
    last_run = read_last_run(app)
    now = utc_now()
    next_run = last_run + timedelta(hours=curator.interval_hours) if last_run else None
    at = max(next_run, now) if next_run else now
    moved: dict[str, list[dict[str, Any]]] = {}
    for event in reversed(app.state.events(kinds=CURATOR_KINDS, limit=500)):
        if event.source == "curator" and (event.ts in moved or len(moved) < runs):
            moved.setdefault(event.ts, []).append(event.as_dict())
    upcoming = []
    archived = []
    problems = []
    for library in app.all_libraries():
        plan = run_lifecycle(app, library, now=at, dry_run=True)
        if plan.refused is not None:
            problems.append(f"library {library.name}: {plan.refused}: the curator moves nothing")
        upcoming += [
            {
                "library": library.name,
                "name": t.name,
                "kind": t.kind,
                "from": t.from_state,
                "to": t.to_state,
                "reason": t.reason,
            }
            for t in plan.transitions
        ]
        archived += [
            {"library": library.name, "name": name, "path": str(path)}
            for name, path in sorted(library.archived().items())
        ]
    return {
        "enabled": curator.enabled,
        "interval_hours": curator.interval_hours,
        "stale_after_days": curator.stale_after_days,
        "archive_after_days": curator.archive_after_days,
        "last_run": last_run.isoformat(timespec="seconds") if last_run else None,
        "next_run": next_run.isoformat(timespec="seconds") if next_run else None,
        "runs": [{"at": ts, "moves": moves} for ts, moves in moved.items()],
        "upcoming": upcoming,
        "archived": archived,
        "problems": problems,
    }
