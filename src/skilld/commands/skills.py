"""`skilld skills …` and `skilld events`: the libraries by hand.

Every command that names a skill takes `--library NAME`; it may be left out when only one
library is configured, or when exactly one library holds that skill.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skilld.commands.common import CommandTable, Parser, cli_origin, library_option, print_json_line
from skilld.config import parse_duration
from skilld.errors import Failure, UsageError

if TYPE_CHECKING:  # loaded by the handlers that use them: a hook's `usage` needs none
    from skilld.app import App
    from skilld.gitinfo import GitContext
    from skilld.skills.library import Library

# -- skills ----------------------------------------------------------------------------------


def library_rows(library: Library) -> list[dict[str, Any]]:
    """One row per skill of `library` (live or archived), with its usage and where its
    current version was learned (`git`, null when unknown)."""
    from skilld.skills.layout import SKILL_FILE
    from skilld.skills.usage import latest_activity_at

    usage = library.usage_records()
    entries: list[tuple[str, str, str, str | None]] = [
        (e.name, e.owner, str(e.path), e.error) for e in library.discover(parse=False)
    ]
    provenance = library.state.all_provenance(library.name)
    live = {name for name, *_ in entries}
    for name, archived in library.archived().items():
        if name not in live:
            file = archived / SKILL_FILE if archived.is_dir() else archived
            owner = "managed" if name in provenance else "human"
            entries.append((name, owner, str(file), None))
    archive = str(library.root / ".archive")
    rows = []
    for name, owner, path, error in sorted(entries):
        record = usage.get(name, {})
        latest = latest_activity_at(record) if record else None
        rows.append(
            {
                "name": name,
                "library": library.name,
                "owner": owner,
                "state": "archived"
                if path.startswith(archive)
                else record.get("state") or "active",
                "pinned": bool(record.get("pinned", False)),
                "use_count": int(record.get("use_count", 0) or 0),
                "view_count": int(record.get("view_count", 0) or 0),
                "patch_count": int(record.get("patch_count", 0) or 0),
                "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
                "path": path,
                "broken": error,
                "git": _git_json(_stored_git(provenance[name].git) if name in provenance else None),
            }
        )
    return rows


def _stored_git(text: str | None) -> GitContext | None:
    """A git context as state.db keeps it (JSON), read back as untrusted."""
    from skilld.gitinfo import from_json

    if not text:
        return None
    try:
        return from_json(json.loads(text))
    except ValueError:
        return None


def _git_json(git: GitContext | None) -> dict[str, str | None] | None:
    return git.as_json() if git is not None else None


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


def skill_rows(app: App, library: str | None = None) -> list[dict[str, Any]]:
    libraries = [app.select(library)] if library is not None else app.all_libraries()
    return [row for lib in libraries for row in library_rows(lib)]


def cmd_skills_list(app: App, args: argparse.Namespace) -> int:
    rows = [
        row
        for row in skill_rows(app, args.library)
        if learned_on(row["git"], args.repository, args.branch)
    ]
    if args.json:
        print_json_line(rows)
        return 0
    if not rows:
        roots = ", ".join(str(library.root) for library in app.all_libraries()) or "no library"
        print(f"no skills in {roots}")
        return 0
    width = max(len("LIBRARY"), *(len(row["library"]) for row in rows))
    print(
        f"{'NAME':<32} {'LIBRARY':<{width}} {'OWNER':<8} {'STATE':<8} PIN  USE VIEW PATCH"
        "  LAST ACTIVITY         PATH"
    )
    for row in rows:
        state = "broken" if row["broken"] else row["state"]
        print(
            f"{row['name']:<32} {row['library']:<{width}} {row['owner']:<8} {state:<8}"
            f" {'yes' if row['pinned'] else 'no':<3}"
            f" {row['use_count']:>4} {row['view_count']:>4} {row['patch_count']:>5}"
            f"  {row['last_activity_at'] or 'never':<21} {row['path']}"
        )
    return 0


def effect(app: App, library: Library, name: str) -> dict[str, Any]:
    """What the library knows of a skill's effect: uses, the sessions that used it, and each
    version with the reason given for it."""
    from skilld.skills.usage import latest_activity_at

    record = library.usage_records().get(name) or {}
    latest = latest_activity_at(record) if record else None
    sessions = app.state.skill_sessions(library.name, name)
    from skilld.gitinfo import from_json

    versions = [
        {
            "event": event.kind,
            "at": event.ts,
            "version": event.detail.get("version"),
            "session": event.session,
            "reason": event.reason,
            "git": _git_json(from_json(event.detail.get("git"))),
        }
        for event in app.state.events(
            kinds=("created", "updated", "rolled_back", "merged"), skill=name, library=library.name
        )
    ]
    return {
        "uses": int(record.get("use_count", 0) or 0),
        "views": int(record.get("view_count", 0) or 0),
        "created_at": record.get("created_at"),
        "last_used_at": record.get("last_used_at"),
        "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
        "sessions": [{"session": s, "uses": n, "last_at": at} for s, n, at in sessions],
        "versions": versions,
    }


def cmd_skills_show(app: App, args: argparse.Namespace) -> int:
    library = app.select(args.library, skill=args.name)
    entry = library.get(args.name)
    if entry is None:
        raise Failure(f"no skill named {args.name} in library {library.name}")
    if entry.error:
        raise Failure(f"{entry.name} is broken: {entry.error}")
    text = entry.path.read_text(encoding="utf-8")
    report = effect(app, library, entry.name)
    if args.json:
        print_json_line(
            {
                "name": entry.name,
                "library": library.name,
                "owner": entry.owner,
                "path": str(entry.path),
                "text": text,
                "effect": report,
            }
        )
        return 0
    # The file itself on stdout (so it can be piped); what is known of it on stderr.
    for line in effect_lines(entry.name, library.name, entry.owner, str(entry.path), report):
        print(f"# {line}", file=sys.stderr)
    sys.stdout.write(text)
    return 0


def effect_lines(
    name: str, library: str, owner: str, path: str, report: dict[str, Any]
) -> list[str]:
    sessions = report["sessions"]
    lines = [
        f"{name} ({library}, {owner}, {path})",
        f"used {report['uses']} times (viewed {report['views']}) since"
        f" {report['created_at'] or 'an unknown time'}, by {len(sessions)} session"
        f"{'' if len(sessions) == 1 else 's'} in transcripts;"
        f" last use {report['last_used_at'] or 'never'}",
    ]
    for version in report["versions"]:
        number = f"v{version['version']} " if version["version"] else ""
        lines.append(
            f"{number}{version['event']} {version['at']}"
            + (f" from {version['session']}" if version["session"] else "")
            + (f": {version['reason']}" if version["reason"] else "")
        )
        if version["git"] is not None:
            lines.append(f"  {learned_on_text(version['git'])}")
    return lines


def learned_on_text(git: dict[str, Any]) -> str:
    """`learned on <repository>@<branch> (<short commit>)`, `?` for what is unknown."""
    commit = f" ({git['commit'][:7]})" if git["commit"] else ""
    return f"learned on {git['repository'] or '?'}@{git['branch'] or '?'}{commit}"


def cmd_skills_write(app: App, args: argparse.Namespace) -> int:
    from skilld.skills.document import SkillDoc

    if args.content_file is not None:
        try:
            content = Path(args.content_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Failure(f"cannot read {args.content_file}: {exc}") from None
    else:
        content = args.content
    library = app.select(args.library, skill=args.name)
    doc = SkillDoc(
        name=args.name, description=args.description, when_to_use=args.when, body=content
    )
    result = library.apply(doc, cli_origin(), force=args.force)
    outcome = result.kind if hasattr(result, "kind") else "unchanged"
    print(f"{outcome} {result.name} {result.path}")
    return 0


def cmd_skills_delete(app: App, args: argparse.Namespace) -> int:
    library = app.select(args.library, skill=args.name)
    deleted = library.delete(args.name, cli_origin(), force=args.force)
    print(f"deleted {args.name} {deleted.path}")
    if deleted.kept:
        kept = ", ".join(deleted.kept)
        print(f"kept {kept} in {deleted.path.parent} (not written by skilld)", file=sys.stderr)
    return 0


def cmd_skills_pin(app: App, args: argparse.Namespace) -> int:
    library = app.select(args.library, skill=args.name)
    library.set_pinned(args.name, args.command == "pin", cli_origin())
    print(f"{args.command}ned {args.name}")
    return 0


def cmd_skills_archive(app: App, args: argparse.Namespace) -> int:
    library = app.select(args.library, skill=args.name)
    target = library.archive(args.name, cli_origin(), reason="by hand", force=args.force)
    print(f"archived {args.name} {target}")
    return 0


def cmd_skills_restore(app: App, args: argparse.Namespace) -> int:
    library = app.select(args.library, skill=args.name)
    path = library.restore(args.name, cli_origin())
    print(f"restored {args.name} {path}")
    return 0


def cmd_skills_history(app: App, args: argparse.Namespace) -> int:
    library = app.select(args.library, skill=args.name)
    versions = library.history(args.name)
    if args.json:
        print_json_line(
            [
                {
                    "version": v.version,
                    "saved_at": v.saved_at,
                    "path": str(v.path) if v.path else None,
                    "commit": v.commit,
                    "subject": v.subject or None,
                }
                for v in versions
            ]
        )
    elif not versions:
        print(f"{args.name} has no saved versions")
    for version in versions if not args.json else ():
        where = version.path if version.path else f"git: {version.subject}"
        print(f"{version.version}  {version.saved_at}  {where}")
    return 0


def cmd_skills_rollback(app: App, args: argparse.Namespace) -> int:
    library = app.select(args.library, skill=args.name)
    result = library.rollback(args.name, cli_origin(), version=args.version, force=args.force)
    print(f"rolled back {result.name} {result.path}")
    return 0


# -- events ----------------------------------------------------------------------------------


def cmd_events(app: App, args: argparse.Namespace) -> int:
    from skilld.state import utc_now_iso

    since = None
    if args.since:
        try:
            since = utc_now_iso(time.time() - parse_duration(args.since))
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None
    events = app.state.events(
        kinds=tuple(args.kind or ()),
        skill=args.skill,
        library=args.library,
        since=since,
        limit=args.limit,
    )
    for event in events:
        if args.json:
            print_json_line(event.as_dict())
        else:
            parts = [
                event.ts,
                f"{event.kind:<10}",
                event.library or "-",
                event.skill or "-",
                event.session or "-",
            ]
            line = "  ".join(parts)
            if event.reason:
                line += f"  {event.reason}"
            if event.detail:
                line += "  " + json.dumps(event.detail, ensure_ascii=False, default=str)
            print(line)
    return 0


def _skills_parser(parser: Parser) -> None:
    parser.add_commands("command", SKILL_COMMANDS)


def _list_parser(parser: Parser) -> None:
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--repository", help="only skills learned in this repository (host/owner/repo, a glob)"
    )
    parser.add_argument("--branch", help="only skills learned on this branch (a glob)")
    library_option(parser)
    parser.set_defaults(handler=cmd_skills_list)


def _show_parser(parser: Parser) -> None:
    parser.add_argument("name")
    parser.add_argument("--json", action="store_true", help="the file, its owner and its effect")
    library_option(parser)
    parser.set_defaults(handler=cmd_skills_show)


def _write_parser(parser: Parser) -> None:
    parser.add_argument("name")
    parser.add_argument("--description", required=True)
    parser.add_argument("--when", help="when to use it")
    content = parser.add_mutually_exclusive_group(required=True)
    content.add_argument("--content-file", help="Markdown body from this file")
    content.add_argument("--content", help="Markdown body")
    parser.add_argument("--force", action="store_true", help="take over a human-owned skill")
    library_option(parser)
    parser.set_defaults(handler=cmd_skills_write)


def _one_skill(
    handler: Callable[[App, argparse.Namespace], int], *, force: bool = False
) -> Callable[[Parser], None]:
    """The parser of a command that acts on one named skill."""

    def configure(parser: Parser) -> None:
        parser.add_argument("name")
        library_option(parser)
        if force:
            parser.add_argument("--force", action="store_true", help="also act on a human skill")
        parser.set_defaults(handler=handler)

    return configure


def _history_parser(parser: Parser) -> None:
    _one_skill(cmd_skills_history)(parser)
    parser.add_argument("--json", action="store_true")


def _rollback_parser(parser: Parser) -> None:
    _one_skill(cmd_skills_rollback, force=True)(parser)
    parser.add_argument("--version", help="a version from `skilld skills history`")


def _events_parser(parser: Parser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--kind", action="append", help="only this kind (repeatable)")
    parser.add_argument("--skill")
    parser.add_argument("--library", help="only events of this library")
    parser.add_argument("--since", help="e.g. 30m, 1h, 7d")
    parser.add_argument("--limit", type=int, help="the newest N")
    parser.set_defaults(handler=cmd_events)


SKILL_COMMANDS: CommandTable = {
    "list": ("every skill with owner, state and usage", _list_parser),
    "show": ("print a skill file and what it did", _show_parser),
    "write": ("create or update a skill", _write_parser),
    "delete": (
        "delete a skill (its last version stays in history)",
        _one_skill(cmd_skills_delete, force=True),
    ),
    "pin": ("never change this skill automatically", _one_skill(cmd_skills_pin)),
    "unpin": ("allow automatic changes again", _one_skill(cmd_skills_pin)),
    "archive": ("move a skill under .archive/", _one_skill(cmd_skills_archive, force=True)),
    "restore": ("move an archived skill back", _one_skill(cmd_skills_restore)),
    "history": ("list saved versions", _history_parser),
    "rollback": ("restore a saved version (default: the newest)", _rollback_parser),
}
COMMANDS: CommandTable = {
    "skills": ("list, show and change skills", _skills_parser),
    "events": ("the event log, oldest first", _events_parser),
}
