"""A skill's versions as people name them: v1…vN, in the order the event log wrote them.

Each write of a skill's text (`created`, `updated`, `rolled_back`) is a version, numbered from 1
in the order of its event. A rollback is a new version that `restored` an earlier one: the one
whose text it brought back (matched by the hash of that text). What a version came from (its
session, window, model, reason) is the version's own; after a rollback, the text on disk came
from the version it restored, so that is the `current` one.

The numbering is computed from the log on every read (nothing stores it), so the log written
before it existed is numbered the same way. Saved snapshots (`skills history`) and team commits
are where a version's text is kept; `snapshot_of` finds the one holding a numbered version.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skilld.errors import NotFound

if TYPE_CHECKING:
    from skilld.skills.history import HistoryVersion
    from skilld.skills.library import Library
    from skilld.state import Event

#: The events that each wrote a new text of a skill: one version each.
VERSION_KINDS = ("created", "updated", "rolled_back")
#: A version named by its number: `3` or `v3`. Anything else is a snapshot id (`skills history`).
_NUMBER = re.compile(r"[vV]?([0-9]{1,9})")
#: A snapshot saved on this host is named `<UTC stamp>-<first 12 hex of its text's sha256>`.
_SNAPSHOT_DIGEST = re.compile(r"-([0-9a-f]{12})$")


def version_number(text: str) -> int | None:
    """The number `text` names (`3`, `v3`), or None when it names a snapshot instead."""
    match = _NUMBER.fullmatch(text.strip())
    return int(match.group(1)) if match else None


def numbered_versions(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Each version event (oldest first) as an entry of `skills show --json`'s
    `effect.versions`, numbered 1…N; a rollback's entry names the number it `restored`."""
    entries: list[dict[str, Any]] = []
    for event in events:
        detail = event.detail
        entry: dict[str, Any] = {
            "version": len(entries) + 1,
            "event": event.kind,
            "at": event.ts,
            "session": event.session,
            "source": event.source,
            "window": _window(detail.get("messages")),
            "model": _text(detail.get("model")),
            "prompt_version": _text(detail.get("prompt_version")),
            "reason": event.reason,
            "approved_by": _text(detail.get("approved_by")),
            "git": _git(detail.get("git")),
            "sha256": _text(detail.get("sha256")),
        }
        if event.kind == "rolled_back":
            entry["restored"] = _restored(entries, detail)
        entries.append(entry)
    return entries


def current_version(
    entries: Sequence[dict[str, Any]], on_disk: str | None = None
) -> dict[str, Any] | None:
    """The entry whose text is on disk now: the newest, or, for a rollback, the version it
    restored (where the text came from). None when there is none, or when the file on disk
    (`on_disk`: its sha256, when known) is not what the newest version wrote (a hand edit)."""
    if not entries:
        return None
    newest = entries[-1]
    if on_disk is not None and newest["sha256"] is not None and newest["sha256"] != on_disk:
        return None
    current = newest
    seen = {current["version"]}
    while (restored := current.get("restored")) is not None and restored not in seen:
        seen.add(restored)
        current = entries[restored - 1]
    return current


def snapshot_of(
    library: Library, name: str, entries: Sequence[dict[str, Any]], number: int
) -> HistoryVersion:
    """The saved snapshot (or team commit) holding version `number`'s text. Raises NotFound
    for a number that is no version, the text on disk now, or a text history no longer keeps."""
    if not 1 <= number <= len(entries):
        raise NotFound(f"{name} has no version v{number} (versions: v1…v{len(entries)})")
    digest = entries[number - 1]["sha256"]
    if digest is None:
        raise NotFound(f"{name} v{number}: the log does not say which text it was")
    entry = library.get(name)
    if entry is not None and entry.sha256 == digest:
        raise NotFound(f"{name} v{number} is the text on disk now")
    found = snapshots_by_digest(library, name).get(digest)
    if found is None:
        raise NotFound(f"{name} v{number} is no longer in history (it keeps the last versions)")
    return found


def numbered_history(
    library: Library, name: str, entries: Sequence[dict[str, Any]]
) -> list[tuple[HistoryVersion, int | None]]:
    """`skills history` with the number of the version each saved text is (the version that
    first wrote it, not a rollback to it; None for a text the log never saw written)."""
    from skilld.digest import sha256_hex

    first_written: dict[str, int] = {}
    for entry in reversed(entries):
        if entry["sha256"] is not None and entry["event"] != "rolled_back":
            first_written[entry["sha256"]] = entry["version"]
    return [
        (saved, first_written.get(sha256_hex(library.version_bytes(name, saved.version))))
        for saved in library.history(name)
    ]


def snapshots_by_digest(library: Library, name: str) -> dict[str, HistoryVersion]:
    """Each saved text of `name` by its sha256 (the newest snapshot of a text wins)."""
    from skilld.digest import sha256_hex

    found: dict[str, HistoryVersion] = {}
    for saved in library.history(name):
        found[sha256_hex(library.version_bytes(name, saved.version))] = saved
    return found


def labelled(
    entries: Sequence[dict[str, Any]], kept: set[str], current: str | None
) -> list[dict[str, Any]]:
    """The versions a person may choose (to roll back to, to compare), newest first: those
    whose text history keeps (`kept`: their sha256) and that are not on disk now (`current`),
    each with its label `v3 · 2026-12-01 10:02 · the reason`."""
    chosen = []
    for entry in reversed(entries):
        if entry["sha256"] in kept and entry["sha256"] != current:
            chosen.append({**entry, "label": version_label(entry)})
    return chosen


def version_label(entry: dict[str, Any]) -> str:
    """`v3 · 2026-12-01 10:02 · why`: a version's number, date and reason, as choices show it."""
    at = str(entry["at"] or "")[:16].replace("T", " ")
    why = entry["reason"] or (
        f"rolled back to v{entry['restored']}" if entry.get("restored") else entry["event"]
    )
    return f"v{entry['version']} · {at} · {why}"


def _restored(entries: Sequence[dict[str, Any]], detail: dict[str, Any]) -> int | None:
    """The number of the version a rollback brought back: the newest earlier version (not
    itself a rollback) that wrote the same text, by its hash or the snapshot's short hash."""
    digest = _text(detail.get("sha256"))
    snapshot = _SNAPSHOT_DIGEST.search(str(detail.get("version") or ""))
    short = snapshot.group(1) if snapshot else None
    for entry in reversed(entries):
        written = entry["sha256"]
        if entry["event"] == "rolled_back" or written is None:
            continue
        if written == digest or (short is not None and written.startswith(short)):
            return int(entry["version"])
    return None


def _window(messages: object) -> list[int | None] | None:
    """The window `[first, last]` message an event names, or None when it names none."""
    if not isinstance(messages, list) or len(messages) != 2:
        return None
    first, last = (m if isinstance(m, int) and not isinstance(m, bool) else None for m in messages)
    return None if first is None and last is None else [first, last]


def _git(value: object) -> dict[str, str | None] | None:
    """Where the version was learned, as `gitinfo` reads what the event kept (None: unknown)."""
    from skilld.gitinfo import from_json

    git = from_json(value)
    return git.as_json() if git is not None else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
