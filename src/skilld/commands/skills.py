"""`skilld skills …`, `skilld usage …` and `skilld events`: the library by hand."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from skilld.app import App
from skilld.commands.common import CLI, Failure, Parser, UsageError, print_json_line
from skilld.config import parse_duration
from skilld.skills.document import SkillDoc
from skilld.skills.usage import latest_activity_at
from skilld.state import utc_now_iso

# -- skills ----------------------------------------------------------------------------------


def skill_rows(app: App) -> list[dict[str, Any]]:
    usage = app.usage.read()
    rows = []
    entries = [(e.name, e.owner, str(e.path), e.error) for e in app.library.discover()]
    provenance = app.state.all_provenance()
    live = {name for name, *_ in entries}
    for name, path in app.library.archived().items():
        if name not in live:
            file = path / "SKILL.md" if path.is_dir() else path
            owner = "managed" if name in provenance else "human"
            entries.append((name, owner, str(file), None))
    for name, owner, path, error in sorted(entries):
        record = usage.get(name, {})
        latest = latest_activity_at(record) if record else None
        archived = path.startswith(str(app.library.root / ".archive"))
        rows.append(
            {
                "name": name,
                "owner": owner,
                "state": "archived" if archived else record.get("state") or "active",
                "pinned": bool(record.get("pinned", False)),
                "use_count": int(record.get("use_count", 0) or 0),
                "view_count": int(record.get("view_count", 0) or 0),
                "patch_count": int(record.get("patch_count", 0) or 0),
                "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
                "path": path,
                "broken": error,
            }
        )
    return rows


def cmd_skills_list(app: App, args: argparse.Namespace) -> int:
    rows = skill_rows(app)
    if args.json:
        print_json_line(rows)
        return 0
    if not rows:
        print(f"no skills in {app.library.root}")
        return 0
    header = (
        f"{'NAME':<32} {'OWNER':<8} {'STATE':<8} PIN  USE VIEW PATCH  LAST ACTIVITY         PATH"
    )
    print(header)
    for row in rows:
        state = "broken" if row["broken"] else row["state"]
        print(
            f"{row['name']:<32} {row['owner']:<8} {state:<8} {'yes' if row['pinned'] else 'no':<3}"
            f" {row['use_count']:>4} {row['view_count']:>4} {row['patch_count']:>5}"
            f"  {row['last_activity_at'] or 'never':<21} {row['path']}"
        )
    return 0


def cmd_skills_show(app: App, args: argparse.Namespace) -> int:
    entry = app.library.get(args.name)
    if entry is None:
        raise Failure(f"no skill named {args.name}")
    print(f"# {entry.name} ({entry.owner}, {entry.path})", file=sys.stderr)
    if entry.error:
        raise Failure(f"{entry.name} is broken: {entry.error}")
    sys.stdout.write(entry.path.read_text(encoding="utf-8"))
    return 0


def cmd_skills_write(app: App, args: argparse.Namespace) -> int:
    if args.content_file is not None:
        try:
            content = Path(args.content_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Failure(f"cannot read {args.content_file}: {exc}") from None
    else:
        content = args.content
    doc = SkillDoc(
        name=args.name, description=args.description, when_to_use=args.when, body=content
    )
    result = app.library.write(doc, CLI, force=args.force)
    print(f"{result.outcome} {result.name} {result.path}")
    return 0


def cmd_skills_delete(app: App, args: argparse.Namespace) -> int:
    path = app.library.delete(args.name, CLI, force=args.force)
    print(f"deleted {args.name} {path}")
    return 0


def cmd_skills_pin(app: App, args: argparse.Namespace) -> int:
    app.library.set_pinned(args.name, args.command == "pin", CLI)
    print(f"{args.command}ned {args.name}")
    return 0


def cmd_skills_archive(app: App, args: argparse.Namespace) -> int:
    target = app.library.archive(args.name, CLI, reason="by hand", force=args.force)
    print(f"archived {args.name} {target}")
    return 0


def cmd_skills_restore(app: App, args: argparse.Namespace) -> int:
    path = app.library.restore(args.name, CLI)
    print(f"restored {args.name} {path}")
    return 0


def cmd_skills_history(app: App, args: argparse.Namespace) -> int:
    versions = app.library.history(args.name)
    if args.json:
        print_json_line(
            [{"version": v.version, "saved_at": v.saved_at, "path": str(v.path)} for v in versions]
        )
    elif not versions:
        print(f"{args.name} has no saved versions")
    for version in versions if not args.json else ():
        print(f"{version.version}  {version.saved_at}  {version.path}")
    return 0


def cmd_skills_rollback(app: App, args: argparse.Namespace) -> int:
    result = app.library.rollback(args.name, CLI, version=args.version, force=args.force)
    print(f"rolled back {result.name} {result.path}")
    return 0


# -- usage -----------------------------------------------------------------------------------


def cmd_usage(app: App, args: argparse.Namespace) -> int:
    app.library.check_name(args.name)
    app.usage.bump(args.name, args.kind)
    return 0


# -- events ----------------------------------------------------------------------------------


def cmd_events(app: App, args: argparse.Namespace) -> int:
    since = None
    if args.since:
        try:
            since = utc_now_iso(time.time() - parse_duration(args.since))
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None
    events = app.state.events(
        kinds=tuple(args.kind or ()), skill=args.skill, since=since, limit=args.limit
    )
    for event in events:
        if args.json:
            print_json_line(event.as_dict())
        else:
            parts = [event.ts, f"{event.kind:<10}", event.skill or "-", event.session or "-"]
            line = "  ".join(parts)
            if event.reason:
                line += f"  {event.reason}"
            if event.detail:
                line += "  " + json.dumps(event.detail, ensure_ascii=False, default=str)
            print(line)
    return 0


def register(commands: Any) -> None:
    skills = commands.add_parser("skills", help="list, show and change skills")
    skill_commands = skills.add_subparsers(dest="command", required=True, parser_class=Parser)
    listing = skill_commands.add_parser("list", help="every skill with owner, state and usage")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_skills_list)
    show = skill_commands.add_parser("show", help="print a skill file")
    show.add_argument("name")
    show.set_defaults(handler=cmd_skills_show)
    write = skill_commands.add_parser("write", help="create or update a skill")
    write.add_argument("name")
    write.add_argument("--description", required=True)
    write.add_argument("--when", help="when to use it")
    content = write.add_mutually_exclusive_group(required=True)
    content.add_argument("--content-file", help="Markdown body from this file")
    content.add_argument("--content", help="Markdown body")
    write.add_argument("--force", action="store_true", help="take over a human-owned skill")
    write.set_defaults(handler=cmd_skills_write)
    for name, handler, text in (
        ("delete", cmd_skills_delete, "delete a skill (its last version stays in history)"),
        ("pin", cmd_skills_pin, "never change this skill automatically"),
        ("unpin", cmd_skills_pin, "allow automatic changes again"),
        ("archive", cmd_skills_archive, "move a skill under .archive/"),
        ("restore", cmd_skills_restore, "move an archived skill back"),
        ("history", cmd_skills_history, "list saved versions"),
        ("rollback", cmd_skills_rollback, "restore a saved version (default: the newest)"),
    ):
        sub = skill_commands.add_parser(name, help=text)
        sub.add_argument("name")
        if name in ("delete", "archive", "rollback"):
            sub.add_argument("--force", action="store_true", help="also act on a human skill")
        if name == "rollback":
            sub.add_argument("--version", help="a version from `skilld skills history`")
        if name == "history":
            sub.add_argument("--json", action="store_true")
        sub.set_defaults(handler=handler)

    usage = commands.add_parser("usage", help="record a use, view or patch (for agent hooks)")
    usage.add_argument("kind", choices=("use", "view", "patch"))
    usage.add_argument("name")
    usage.set_defaults(handler=cmd_usage)

    events = commands.add_parser("events", help="the event log, oldest first")
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.add_argument("--kind", action="append", help="only this kind (repeatable)")
    events.add_argument("--skill")
    events.add_argument("--since", help="e.g. 30m, 1h, 7d")
    events.add_argument("--limit", type=int, help="the newest N")
    events.set_defaults(handler=cmd_events)
