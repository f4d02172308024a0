"""The start-up repair of load-time shell triggers an older skilld left in managed skills.

An older skilld broke them in the claude dialect only (`neutralise_file` does it for every
dialect now). The daemon runs this once per library at start-up.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING

from skilld.errors import LibraryError
from skilld.skills.document import neutralise_file
from skilld.skills.usage import Record

if TYPE_CHECKING:
    from skilld.skills.library import Library
    from skilld.skills.outcomes import Origin


def break_shell_triggers(library: "Library", origin: "Origin") -> list[str]:
    """Break the load-time shell triggers left in the skills `library` manages: each file
    keeps every other byte, and its previous version is saved in history. A pinned skill is
    left as it is, since no automatic path changes it, and a `warning` event names it.
    Returns the names rewritten."""
    rewritten: list[str] = []
    records: Mapping[str, Record] | None = None  # read once, when a skill needs rewriting
    with library.locked():
        for entry in library.entries(parse=False):
            if entry.owner != "managed" or entry.broken:
                continue
            try:
                data = entry.content()
            except LibraryError:
                continue  # a listing reports an unreadable file; nothing runs from it here
            neutral = neutralise_file(data)
            if neutral == data:
                continue
            if records is None:
                records = library.usage.read()
            if (library.usage_record(entry.name, records) or {}).get("pinned"):
                library.state.add_event(
                    "warning",
                    library=library.name,
                    skill=entry.name,
                    source=origin.source,
                    reason="pinned, so left with a load-time shell trigger: unpin it to "
                    "have skilld break it, or edit the file",
                )
                continue
            digest = library.rewrite(entry, neutral, origin, event="updated")
            with library.state.transaction():
                library.state.settle_provenance(library.name, entry.name, digest)
                library.state.add_event(
                    "updated",
                    library=library.name,
                    skill=entry.name,
                    source=origin.source,
                    reason="load-time shell triggers broken",
                    detail={"sha256": digest, "path": str(entry.path)},
                )
            rewritten.append(entry.name)
    return rewritten
