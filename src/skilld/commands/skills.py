"""`skilld skills …` and `skilld events`: the libraries by hand.

Every command that names a skill takes `--library NAME`; it may be left out when only one
library is configured, or when exactly one library holds that skill.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skilld.commands.common import (
    CommandTable,
    Parser,
    cli_origin,
    library_option,
    print_json_line,
    terminal_text,
)
from skilld.errors import Failure
from skilld.reports.listing import learned_on_text, skill_rows

if TYPE_CHECKING:  # loaded by the handlers that use them: a hook's `usage` needs none
    from skilld.app import App

# -- skills ----------------------------------------------------------------------------------


def cmd_skills_list(app: App, args: argparse.Namespace) -> int:
    problems: list[str] = []
    rows = skill_rows(
        app, args.library, repository=args.repository, branch=args.branch, problems=problems
    )
    for problem in problems:
        print(terminal_text(f"skilld: {problem}"), file=sys.stderr)
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
        line = (
            f"{row['name']:<32} {row['library']:<{width}} {row['owner']:<8} {state:<8}"
            f" {'yes' if row['pinned'] else 'no':<3}"
            f" {row['use_count']:>4} {row['view_count']:>4} {row['patch_count']:>5}"
            f"  {row['last_activity_at'] or 'never':<21} {row['path']}"
        )
        print(terminal_text(line))
    return 0


def cmd_skills_show(app: App, args: argparse.Namespace) -> int:
    from skilld.reports.skill import skill_report

    report = skill_report(app, args.name, args.library)
    if args.json:
        print_json_line(report)
        return 0
    # The file itself on stdout (so it can be piped); what is known of it on stderr.
    lines = effect_lines(
        report["name"], report["library"], report["owner"], report["path"], report["effect"]
    )
    for line in lines:
        print(terminal_text(f"# {line}"), file=sys.stderr)
    sys.stdout.write(terminal_text(report["text"]))
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
    outcome = report.get("outcome")
    if outcome:
        lines.append(f"effect: {outcome['verdict']}: {outcome['evidence']}")
    for version in report["versions"]:
        restored = version.get("restored")
        lines.append(
            f"v{version['version']} {version['event']} {version['at']}"
            + (f" (restored v{restored})" if restored else "")
            + (f" from {version['session']}" if version["session"] else "")
            + (f", approved by {version['approved_by']}" if version["approved_by"] else "")
            + (f": {version['reason']}" if version["reason"] else "")
        )
        if version["git"] is not None:
            lines.append(f"  {learned_on_text(version['git'])}")
    return lines


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
    from skilld.versions import VERSION_KINDS, numbered_history, numbered_versions

    library = app.select(args.library, skill=args.name)
    events = app.state.events(kinds=VERSION_KINDS, skill=args.name, library=library.name)
    saved = numbered_history(library, args.name, numbered_versions(events))
    if args.json:
        print_json_line(
            [
                {
                    "version": v.version,
                    "number": number,
                    "saved_at": v.saved_at,
                    "path": str(v.path) if v.path else None,
                    "commit": v.commit,
                    "subject": v.subject or None,
                }
                for v, number in saved
            ]
        )
    elif not saved:
        print(f"{args.name} has no saved versions")
    for version, number in saved if not args.json else ():
        where = version.path if version.path else f"git: {version.subject}"
        label = f"v{number}" if number is not None else "-"
        print(f"{label:<5} {version.version}  {version.saved_at}  {where}")
    return 0


def cmd_skills_rollback(app: App, args: argparse.Namespace) -> int:
    from skilld.actions import rollback

    library = app.select(args.library, skill=args.name)
    result = rollback(app, library, args.name, cli_origin(), args.version, force=args.force)
    print(f"rolled back {result.name} {result.path}")
    return 0


# -- events ----------------------------------------------------------------------------------


def cmd_events(app: App, args: argparse.Namespace) -> int:
    from skilld.reports.events import event_rows

    events = event_rows(
        app,
        kinds=tuple(args.kind or ()),
        skill=args.skill,
        library=args.library,
        since=args.since,
        limit=args.limit,
    )
    for event in events:
        if args.json:
            print_json_line(event)
        else:
            parts = [
                event["ts"],
                f"{event['kind']:<10}",
                event["library"] or "-",
                event["skill"] or "-",
                event["session"] or "-",
            ]
            line = "  ".join(parts)
            if event["reason"]:
                line += f"  {event['reason']}"
            if event["detail"]:
                line += "  " + json.dumps(event["detail"], ensure_ascii=False, default=str)
            print(terminal_text(line))
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
    parser.add_argument(
        "--version",
        help="a version number from `skilld skills show` (3 or v3), or a snapshot id from"
        " `skilld skills history`",
    )


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
