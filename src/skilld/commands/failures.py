"""`skilld failures`: the failing tool calls the transcripts show, one row per signature
(DESIGN.md §13; docs/learning.md explains signatures and classes)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from skilld.commands.common import CommandTable, Parser, print_json_line

if TYPE_CHECKING:
    from skilld.app import App


def cmd_failures(app: App, args: argparse.Namespace) -> int:
    from skilld.reports.effect import failure_report

    rows = failure_report(
        app, since=args.since, repository=args.repository, recurring=args.recurring
    )
    if args.json:
        print_json_line(rows)
        return 0
    if not rows:
        print("no failures recorded" + (" that match" if _filtered(args) else ""))
        return 0
    print(f"{'SESSIONS':>8} {'TIMES':>5}  {'CLASS':<8}  {'LAST SEEN':<20}  SIGNATURE")
    for row in rows:
        print(
            f"{row['sessions']:>8} {row['occurrences']:>5}  {row['class']:<8}"
            f"  {(row['last_seen'] or '-')[:19]:<20}  {row['signature']}{_skills(row)}"
        )
    return 0


def _skills(row: dict[str, Any]) -> str:
    names = [f"{skill['library']}/{skill['name']}" for skill in row["skills"]]
    return f"  (learned: {', '.join(names)})" if names else ""


def _filtered(args: argparse.Namespace) -> bool:
    return bool(args.since or args.repository or args.recurring)


def _failures_parser(parser: Parser) -> None:
    parser.add_argument("--since", help="only failures seen since, e.g. 7d, 12h")
    parser.add_argument("--repository", help="only in repositories matching this glob")
    parser.add_argument(
        "--recurring", action="store_true", help="only signatures seen in 2 sessions or more"
    )
    parser.add_argument("--json", action="store_true", help="one JSON list")
    parser.set_defaults(handler=cmd_failures)


COMMANDS: CommandTable = {
    "failures": ("failing tool calls the transcripts show, by signature", _failures_parser),
}
