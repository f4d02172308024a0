"""What a person decides about a staged proposal, from the CLI (`skilld review`) or the panel.

The skill actions (pin, archive, restore, roll back, delete) are `Library` methods, which both
faces call directly; a review decision spans the review queue, the library the proposal was
meant for and the event log, so it lives here, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from skilld.errors import Failure, UsageError

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.evolve.review import Staged
    from skilld.skills.library import Library, Origin, Unchanged, Written


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
    rules), drop it from the queue and record an `approved` event."""
    from skilld.gitinfo import from_json

    file, item = staged_proposal(app, name, library)
    target = staged_library(app, item.library, item.project_root)
    # The version is still the session's lesson: it keeps where that session worked.
    result = target.apply(item.doc(), origin._replace(git=from_json(item.origin.get("git"))))
    file.unlink(missing_ok=True)
    app.state.add_event(
        "approved",
        library=target.name,
        skill=item.name,
        source=origin.source,
        detail={"outcome": result.kind},
    )
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
