"""What a person decides about a staged proposal, from the CLI (`skilld review`) or the panel.

The skill actions (pin, archive, restore, roll back, delete) are `Library` methods, which both
faces call directly; a review decision spans the review queue, the library the proposal was
meant for and the event log, so it lives here, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from skilld.errors import Failure, Protected, UsageError

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.evolve.review import Staged
    from skilld.skills.document import SkillDoc
    from skilld.skills.library import Library
    from skilld.skills.outcomes import Origin, Unchanged, WriteOutcome, Written


def staged_proposal(app: App, name: str, library: str | None = None) -> tuple[Path, Staged]:
    """The file and the proposal staged under `name` (for `library`, when given). Raises
    Failure when none is, UsageError when several libraries have one."""
    from skilld.evolve.review import ReviewQueue

    queue = ReviewQueue(app.config.state.dir / "pending")
    found = [
        (file, item)
        for file, item in queue.find(name)
        if library is None or item.library == library
    ]
    if not found:
        raise Failure(f"nothing staged under the name {name}")
    if len(found) > 1:
        names = ", ".join(item.library for _, item in found)
        raise UsageError(f"{name} is staged for several libraries ({names}); add --library")
    return found[0]


def approve(app: App, name: str, origin: Origin, library: str | None = None) -> Written | Unchanged:
    """Write the proposal staged under `name` into its library (under the library's ownership
    rules), drop it from the queue and record an `approved` event.

    An update goes through the merge a learned update takes (`skilld.evolve.approval`): the
    model sees the skill's current text, so nothing a later write added is lost; when it cannot
    answer, nothing is written and the proposal stays staged. The version keeps the proposal's
    session, window, model and reason; `approved_by` (its event's detail) is `origin.source`.
    """
    from skilld.evolve.approval import approved_text
    from skilld.skills.outcomes import Unchanged, refused_or_written

    file, item = staged_proposal(app, name, library)
    target = staged_library(app, item.library, item.project_root)
    approved = approved_text(app, target, item)
    taught = proposal_origin(item)
    detail: dict[str, Any] = {"approved_by": origin.source}
    if approved.merged:
        detail["merged"] = True
    if approved.doc is None:
        entry = target.entry(item.name)
        assert entry is not None  # only a merge into an existing skill finds nothing to add
        result: WriteOutcome = Unchanged(entry.name, entry.path, entry.sha256 or "")
    else:
        result = target.write(approved.doc, taught)
    target.commit(result, taught, reason=approved.reason, detail=detail)
    written = refused_or_written(result)
    file.unlink(missing_ok=True)
    app.state.add_event(
        "approved",
        library=target.name,
        skill=item.name,
        source=origin.source,
        detail={"outcome": written.kind, **detail},
    )
    return written


def proposal_origin(item: Staged) -> Origin:
    """Who taught the staged proposal: its session, window, model and where it worked."""
    from skilld.effect.targets import kept_targets
    from skilld.gitinfo import from_json
    from skilld.skills.outcomes import Origin

    taught = item.origin
    return Origin(
        source=str(taught.get("source") or "evolve"),
        session=taught.get("session"),
        first_message=taught.get("first_message"),
        last_message=taught.get("last_message"),
        model=taught.get("model"),
        prompt_version=taught.get("prompt_version"),
        git=from_json(taught.get("git")),
        targets=kept_targets(taught.get("targets")),
    )


def rollback(
    app: App,
    library: Library,
    name: str,
    origin: Origin,
    version: str | None = None,
    *,
    force: bool = False,
) -> Written:
    """Roll `name` back to `version`: a number (`3` or `v3`, as `skills show` numbers its
    versions), or a snapshot id from `skills history`; by default the newest saved text other
    than the one on disk. Where the skill came from is then the restored version's."""
    from skilld.versions import (
        VERSION_KINDS,
        current_version,
        numbered_versions,
        snapshot_of,
        version_number,
    )

    def versions() -> list[dict[str, Any]]:
        events = app.state.events(kinds=VERSION_KINDS, skill=name, library=library.name)
        return numbered_versions(events)

    snapshot = version
    if version is not None and (number := version_number(version)) is not None:
        snapshot = snapshot_of(library, name, versions(), number).version
    # A person's skill rolled back by its person (`force`) stays theirs: the rollback is
    # their act, a new version of the same skill.
    before = library.entry(name, parse=False)
    persons = force and before is not None and before.owner == "human"
    learned = library.state.provenance(library.name, name) is not None
    result = library.rollback(name, origin, version=snapshot, force=force)
    restored = current_version(versions(), result.sha256)
    if restored is None or restored["event"] == "rolled_back":
        restored = {}  # a text the log never saw written: where it came from is unknown
    window = restored.get("window") or [None, None]
    app.state.restore_provenance(
        library.name,
        result.name,
        result.sha256,
        {
            "session": restored.get("session"),
            "first_message": window[0],
            "last_message": window[1],
            "model": restored.get("model"),
            "prompt_version": restored.get("prompt_version"),
            "git": restored.get("git"),
        },
    )
    if persons:
        keep_persons(library, result.name, learned=learned)
    return result


def reject(app: App, name: str, origin: Origin, library: str | None = None) -> Staged:
    """Drop the proposal staged under `name` and record a `rejected` event."""
    file, item = staged_proposal(app, name, library)
    file.unlink(missing_ok=True)
    app.state.add_event("rejected", library=item.library, skill=item.name, source=origin.source)
    return item


def staged_library(app: App, name: str, project_root: str | None) -> Library:
    """The library a staged proposal was meant for (a project's, when it names one). A root
    that can never be a project (`/`, the home directory, a system directory) is refused even
    to a person approving it."""
    from skilld.routing import never_root_reason, project_library, resolved_home

    user_name = name.partition("@")[0] if name else None
    user = app.select(user_name if user_name in app.libraries else None)
    if project_root is None:
        return user
    root = Path(project_root)
    if (never := never_root_reason(root, resolved_home())) is not None:
        raise Failure(f"{never}: never a project root; nothing written (`skilld review reject`)")
    return app.open_library(project_library(user.spec, root))


def write_by_hand(
    library: Library, doc: SkillDoc, origin: Origin, *, new: bool, managed: bool = False
) -> Written | Unchanged:
    """A person's skill, or their edit of one, written through the panel: the same write as
    `skills write` (checked, atomic, the previous version kept in history, a `created`/
    `updated` event: a new version of the same skill). `new`: refuse a name that is already
    taken (a new skill never replaces one).

    Then whose it is: by default the person's, as a hand edit of the file would make it
    (DESIGN.md §3), and skilld never changes it afterwards; with `managed` it stays skilld's
    to keep improving, the version recorded `approved_by` `origin.source`, as an approval's
    is. Either way a skill skilld learned keeps its provenance row, so its effect is still
    measured (§13). Raises LibraryError (Protected for a pinned or foreign skill) as
    `Library.apply` does."""
    from skilld.skills.outcomes import refused_or_written

    if new and library.get(doc.name) is not None:
        raise Protected(f"{doc.name} already exists in {library.name}: edit it instead")
    learned = library.state.provenance(library.name, doc.name) is not None
    # `force`: a person may rewrite a skill that is already theirs (human), never another's.
    with library.state.transaction():
        outcome = library.write(doc, origin, force=True)
        detail = {"approved_by": origin.source} if managed else None
        library.commit(outcome, origin, detail=detail)
        result = refused_or_written(outcome)
        if not managed:
            keep_persons(library, result.name, learned=learned)
    return result


def keep_persons(library: Library, name: str, *, learned: bool) -> None:
    """`name` stays the person's after a write by their hand: skilld forgets the hash it
    wrote. A skill it once `learned` keeps its row (where it came from, its measurement); one
    it never learned has none."""
    if learned:
        library.state.disown_provenance(library.name, name)
    else:
        library.state.drop_provenance(library.name, name)
