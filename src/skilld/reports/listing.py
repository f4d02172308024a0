"""The skills table: what a listing finds of each skill, and the row `skills list --json`
prints, filtered by where a skill was learned; and the MCP server's `skill_list`."""

# Annotations are not postponed here: a NamedTuple's string annotations are compiled (typing's
# ForwardRef), and the first `compile()` in a process builds Python's AST types, a millisecond
# of a one-shot command's start (tests/test_startup.py checks that none compiles).
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from skilld.state import DISOWNED

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.gitinfo import GitContext
    from skilld.skills.library import Library


class ListedSkill(NamedTuple):
    """A skill as a listing first finds it: what the skills table filters on, before its row
    (`skill_row`) is built."""

    library: str
    name: str
    owner: str
    #: "active", "stale" or "archived".
    state: str
    pinned: bool
    path: str
    broken: str | None
    #: Its usage record ({} when it has none).
    record: Mapping[str, Any]
    #: The git context its current version was learned in, as state.db keeps it (JSON).
    git: str | None


def listed_skills(library: "Library", problems: list[str] | None = None) -> list[ListedSkill]:
    """Every skill of `library` (live or archived), by name: `library_rows` before the rows.
    A usage sidecar the tree guard refuses lists every skill without usage, and its reason
    goes to `problems`."""
    from skilld.skills.layout import SKILL_FILE

    usage = listed_usage(library, problems)
    provenance = library.state.all_provenance(library.name)
    entries: list[tuple[str, str, str, str | None]] = [
        (e.name, e.owner, e.file, e.error)
        for e in library.discover(parse=False, provenance=provenance)
    ]
    live = {name for name, *_ in entries}
    for name, archived in library.archived().items():
        if name not in live:
            file = archived / SKILL_FILE if archived.is_dir() else archived
            known = provenance.get(name)
            owner = "managed" if known is not None and known.sha256 != DISOWNED else "human"
            entries.append((name, owner, str(file), None))
    archive = str(library.root / ".archive")
    listed = []
    for name, owner, path, error in sorted(entries):
        record = usage.get(name, {})
        known = provenance.get(name)
        listed.append(
            ListedSkill(
                library=library.name,
                name=name,
                owner=owner,
                state="archived" if path.startswith(archive) else record.get("state") or "active",
                pinned=bool(record.get("pinned", False)),
                path=path,
                broken=error,
                record=record,
                git=known.git if known is not None else None,
            )
        )
    return listed


def listed_usage(
    library: "Library", problems: list[str] | None = None
) -> Mapping[str, Mapping[str, Any]]:
    """The usage records a listing shows; a refused sidecar's reason goes to `problems`."""
    records, refused = library.listed_usage()
    if refused is not None and problems is not None:
        problems.append(f"library {library.name}: usage not read: {refused}")
    return records


def skill_row(skill: ListedSkill) -> dict[str, Any]:
    """The row `skills list --json` prints for `skill`."""
    from skilld.skills.usage import latest_activity_at

    record = skill.record
    latest = latest_activity_at(record) if record else None
    return {
        "name": skill.name,
        "library": skill.library,
        "owner": skill.owner,
        "state": skill.state,
        "pinned": skill.pinned,
        "use_count": int(record.get("use_count", 0) or 0),
        "view_count": int(record.get("view_count", 0) or 0),
        "patch_count": int(record.get("patch_count", 0) or 0),
        "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
        "path": skill.path,
        "broken": skill.broken,
        "git": _git_json(_stored_git(skill.git)),
    }


def library_rows(library: "Library", problems: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per skill of `library` (live or archived), with its usage and where its
    current version was learned (`git`, null when unknown)."""
    return [skill_row(skill) for skill in listed_skills(library, problems)]


def skill_rows(
    app: "App",
    library: str | None = None,
    *,
    repository: str | None = None,
    branch: str | None = None,
    problems: list[str] | None = None,
) -> list[dict[str, Any]]:
    """`skills list --json`: every skill of `library`, or of every library; with `repository`
    or `branch`, only those whose current version was learned there. What kept a library's
    usage from being read goes to `problems`."""
    libraries = [app.select(library)] if library is not None else app.all_libraries()
    rows = [row for lib in libraries for row in library_rows(lib, problems)]
    if repository is None and branch is None:
        return rows
    return [row for row in rows if learned_on(row["git"], repository, branch)]


def learned_on(git: dict[str, Any] | None, repository: str | None, branch: str | None) -> bool:
    """Whether a skill learned in `git` passes `skills list --repository R --branch B` (each a
    glob; the repository is compared in its normal form, so any spelling of a remote works)."""
    from fnmatch import fnmatchcase

    from skilld.gitinfo import normalise_repository

    if repository is not None:
        repository = normalise_repository(repository) or repository
    for key, pattern in (("repository", repository), ("branch", branch)):
        value = git.get(key) if git is not None else None
        if pattern is not None and (value is None or not fnmatchcase(value, pattern)):
            return False
    return True


def learned_on_text(git: Mapping[str, Any]) -> str:
    """`learned on <repository>@<branch> (<short commit>)`, `?` for what is unknown."""
    commit = f" ({git['commit'][:7]})" if git["commit"] else ""
    return f"learned on {git['repository'] or '?'}@{git['branch'] or '?'}{commit}"


def _stored_git(text: str | None) -> "GitContext | None":
    """A git context as state.db keeps it (JSON), read back as untrusted."""
    if not text:
        return None  # learned outside a repository, or before skilld kept where
    from skilld.gitinfo import from_json

    try:
        return from_json(json.loads(text))
    except ValueError:
        return None


def _git_json(git: "GitContext | None") -> dict[str, str | None] | None:
    return git.as_json() if git is not None else None


def tool_skill_rows(library: "Library", problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The MCP server's `skill_list`: the live skills of one library, with descriptions."""
    from skilld.skills.usage import report_row

    records = listed_usage(library, problems)
    skills = []
    for entry in library.discover():
        row = report_row(entry.name, records.get(entry.name) or {})
        latest = row["latest_activity_at"]
        skills.append(
            {
                "name": entry.name,
                "owner": entry.owner,
                "managed": entry.owner == "managed",
                "state": row["state"],
                "pinned": row["pinned"],
                "description": entry.doc.description if entry.doc else None,
                "use_count": row["use_count"],
                "view_count": row["view_count"],
                "patch_count": row["patch_count"],
                "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
                "path": str(entry.path),
                "broken": entry.error,
            }
        )
    return skills
