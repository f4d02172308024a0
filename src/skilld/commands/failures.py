"""`skilld failures`: the failing tool calls the transcripts show, one row per signature, and
`skilld failures show`: where one of them happened (DESIGN.md §13; docs/learning.md explains
signatures and classes)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from skilld.commands.common import CommandTable, Parser, print_json_line, terminal_text

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
    print(f"{'ID':<12}  {'SESSIONS':>8} {'TIMES':>5}  {'CLASS':<8}  {'LAST SEEN':<20}  SIGNATURE")
    for row in rows:
        line = (
            f"{row['id']}  {row['sessions']:>8} {row['occurrences']:>5}  {row['class']:<8}"
            f"  {(row['last_seen'] or '-')[:19]:<20}  {row['signature']}{_skills(row)}"
        )
        print(terminal_text(line))
    return 0


def cmd_failures_show(app: App, args: argparse.Namespace) -> int:
    from skilld.reports.effect import failure_detail

    detail = failure_detail(app, args.failure)
    if args.json:
        print_json_line(detail)
        return 0
    for line in _detail_lines(detail):
        print(terminal_text(line))
    return 0


def _detail_lines(detail: dict[str, Any]) -> list[str]:
    """A failure and where it happened, for a person: each occurrence's time, session and
    place, then the command as run and the error line as read."""
    sessions, times = detail["sessions"], len(detail["occurrences"])
    lines = [
        f"{detail['id']}  {detail['signature']}",
        f"{detail['class']}, {times} time{'' if times == 1 else 's'} in {sessions}"
        f" session{'' if sessions == 1 else 's'}, {detail['first_seen'] or '?'}"
        f" .. {detail['last_seen'] or '?'}{_skills(detail)}",
    ]
    for occurrence in detail["occurrences"]:
        place = occurrence["repository"] or "no repository"
        if occurrence["branch"]:
            place += f"@{occurrence['branch']}"
        call = f", call {occurrence['call_id']}" if occurrence["call_id"] else ""
        state = "resolved later" if occurrence["resolved"] else "not resolved"
        lines += [
            "",
            f"{(occurrence['at'] or '-')[:19]}  {occurrence['session']}"
            f" (message {occurrence['message']}{call})",
            f"  in {place}; {occurrence['class']}, {state}",
            f"  $ {occurrence['command'] or '(command not recorded)'}",
            f"  ! {occurrence['error'] or '(error line not recorded)'}",
        ]
    return lines


def _skills(row: dict[str, Any]) -> str:
    names = [
        f"{skill['library']}/{skill['name']}" + (f" {skill['verdict']}" if skill["verdict"] else "")
        for skill in row["skills"]
    ]
    return f"  (targeted by: {', '.join(names)})" if names else ""


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
    commands = parser.add_subparsers(dest="failures_command", parser_class=Parser)
    show = commands.add_parser("show", help="one failure and where it happened, oldest first")
    show.add_argument("failure", metavar="ID|SIGNATURE", help="an id or signature it lists")
    show.add_argument("--json", action="store_true", help="the row and its occurrences")
    show.set_defaults(handler=cmd_failures_show)


COMMANDS: CommandTable = {
    "failures": (
        "failing tool calls the transcripts show, by signature; `show` one",
        _failures_parser,
    ),
}
