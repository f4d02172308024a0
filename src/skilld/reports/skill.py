"""One skill's report (`skills show --json`, the panel's skill page): its file, owner and
effect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skilld.errors import Failure
from skilld.reports.effect import effect_records, recurrence_rows

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.skills.library import Library


def skill_report(
    app: App,
    name: str,
    library: str | None = None,
    *,
    record: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`skills show --json`: the file, its owner and its effect (`record`: as for `skill_effect`).
    Raises Failure for a skill that is missing or broken."""
    chosen = app.select(library, skill=name)
    entry = chosen.get(name)
    if entry is None:
        raise Failure(f"no skill named {name} in library {chosen.name}")
    if entry.error:
        raise Failure(f"{entry.name} is broken: {entry.error}")
    return {
        "name": entry.name,
        "library": chosen.name,
        "owner": entry.owner,
        "path": str(entry.path),
        "text": entry.text(),
        "effect": skill_effect(app, chosen, entry.name, record=record, on_disk=entry.sha256),
    }


def skill_effect(
    app: App,
    library: Library,
    name: str,
    *,
    record: Mapping[str, Any] | None = None,
    on_disk: str | None = None,
) -> dict[str, Any]:
    """What the library knows of a skill's effect: uses (in all, and per UTC day when each
    happened, `uses_by_day`, whoever counted it), the sessions that used it, and each
    version v1…vN with the reason given for it and where it was learned (`git`, null when
    unknown); `current` is the version whose text is on disk (`on_disk`: its sha256, when
    known; see `skilld.versions`). `record` is the skill's usage record, when the caller has
    read the library's already (the sidecar is the costly read)."""
    from skilld.skills.usage import latest_activity_at, uses_by_day
    from skilld.versions import VERSION_KINDS, current_version, numbered_versions

    if record is None:
        record = library.listed_usage()[0].get(name) or {}
    latest = latest_activity_at(record) if record else None
    sessions = app.state.skill_sessions(library.name, name)
    measured = effect_records(
        app, [library.name], names=[(library.name, name)], with_recurrences=True
    )
    versions = numbered_versions(
        app.state.events(kinds=VERSION_KINDS, skill=name, library=library.name)
    )
    return {
        "uses": int(record.get("use_count", 0) or 0),
        "views": int(record.get("view_count", 0) or 0),
        "created_at": record.get("created_at"),
        "last_used_at": record.get("last_used_at"),
        "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
        "sessions": [{"session": s, "uses": n, "last_at": at} for s, n, at in sessions],
        "uses_by_day": uses_by_day(record),
        "versions": versions,
        "current": current_version(versions, on_disk),
        "outcome": measured[0].row() if measured else None,
        "recurrences": recurrence_rows(app, measured[0]) if measured else [],
    }
