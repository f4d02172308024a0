"""The event log as `events` and the panel page it: the filters both take, checked the same
way (`--since`, `--kind`, counts)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from skilld.config import parse_duration
from skilld.errors import UsageError

if TYPE_CHECKING:
    from skilld.app import App


def since_timestamp(since: str | None) -> str | None:
    """The ISO time `since` (e.g. "30m", "7d") before now. Raises UsageError naming it."""
    from skilld.state import utc_now_iso

    if not since:
        return None
    try:
        return utc_now_iso(time.time() - parse_duration(since))
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from None


def count_option(value: str | int | None, name: str) -> int | None:
    """A count a query takes (`events --limit`, the API's `limit`, `offset`, `before`): a whole
    number, 0 or more; None when absent. Raises UsageError naming `name`: the CLI and the API
    refuse the same values with the same words."""
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{name}: not a whole number: {value!r}") from None
    if number < 0:
        raise UsageError(f"{name}: must be 0 or more, not {number}")
    return number


def known_kinds(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """`kinds`, each an event kind the log records. Raises UsageError naming the others (a
    misspelt kind would otherwise match nothing, silently)."""
    from skilld.state import EVENT_KINDS

    unknown = [kind for kind in kinds if kind not in EVENT_KINDS]
    if unknown:
        raise UsageError(
            f"--kind: no event kind {', '.join(map(repr, unknown))}"
            f" (kinds: {', '.join(sorted(EVENT_KINDS))})"
        )
    return kinds


def event_rows(
    app: App,
    *,
    kinds: tuple[str, ...] = (),
    skill: str | None = None,
    library: str | None = None,
    since: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """`events --json`, oldest first: the events matching the filters (`since` as
    `since_timestamp` reads it), the newest `limit` of them. Raises UsageError for an unknown
    kind, a bad `since` or a negative `limit`."""
    limit = count_option(limit, "--limit")
    kinds = known_kinds(kinds)
    events = app.state.events(
        kinds=kinds, skill=skill, library=library, since=since_timestamp(since), limit=limit
    )
    return [event.as_dict() for event in events]


def event_page(
    app: App,
    *,
    kinds: tuple[str, ...] = (),
    skill: str | None = None,
    library: str | None = None,
    since: str | None = None,
    session: str | None = None,
    before: int | None = None,
    size: int = 50,
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the event log, newest first: the `size` events before the event `before`
    (else the newest), and the id to pass as `before` for the next page (None: no older
    events); `session`: only that session's. One query with a LIMIT, however long the log
    is."""
    events = app.state.events(
        kinds=known_kinds(kinds),
        skill=skill,
        library=library,
        since=since_timestamp(since),
        limit=size + 1,
        before_id=before,
        session=session,
    )
    newest_first = [event.as_dict() for event in reversed(events)]
    older = newest_first[size - 1]["id"] if size and len(newest_first) > size else None
    return newest_first[:size], older
