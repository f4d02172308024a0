"""The overview's week: the skills learned, the proposals waiting and the curator's moves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skilld.reports.curator import CURATOR_KINDS
from skilld.reports.events import since_timestamp
from skilld.reports.status import review_items

if TYPE_CHECKING:
    from skilld.app import App


#: What the overview calls learned: a skill a session (or a person) created or changed.
LEARNED_KINDS = ("created", "updated")


def week_report(app: App, *, days: int = 7, limit: int = 20) -> dict[str, Any]:
    """What happened over the last `days` days, newest first: the skills created and updated
    (one row per skill: its latest change, its description, the session, repository and branch
    it came from), the proposals waiting for a person, and what the curator moved. Each list
    holds at most `limit` rows; `more` says the learned list was cut there."""
    from skilld.gitinfo import from_json

    since = since_timestamp(f"{days}d")
    libraries = {library.name: library for library in app.all_libraries()}
    learned: dict[tuple[str, str], dict[str, Any]] = {}
    events = app.state.events(kinds=LEARNED_KINDS, since=since, limit=limit * 5)
    for event in reversed(events):
        key = (event.library or "", event.skill or "")
        if key in learned or not event.skill or len(learned) == limit:
            continue
        git = from_json(event.detail.get("git"))
        library = libraries.get(event.library or "")
        entry = library.get(event.skill) if library is not None else None
        description = entry.doc.description if entry is not None and entry.doc else None
        learned[key] = {
            "name": event.skill,
            "library": event.library,
            "kind": event.kind,
            "at": event.ts,
            "session": event.session,
            "source": event.source,
            "repository": git.repository if git is not None else None,
            "branch": git.branch if git is not None else None,
            "description": one_line(description),
            "exists": entry is not None,
        }
    moved = [
        event.as_dict()
        for event in reversed(app.state.events(kinds=CURATOR_KINDS, since=since, limit=limit))
        if event.source == "curator"
    ]
    return {
        "days": days,
        "learned": list(learned.values()),
        "more": len(learned) == limit,
        "review": review_items(app),
        "kept": len(app.state.kept_proposals()),
        "curator": moved,
    }


def one_line(text: str | None, width: int = 140) -> str | None:
    """`text`'s first line, cut at a word to `width` characters (an ellipsis says so)."""
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= width:
        return line
    return line[:width].rsplit(" ", 1)[0].rstrip(",;:") + "…"
