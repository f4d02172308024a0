"""`skilld sync`: one sync round of every team library (a library with `remote`), now."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from skilld.commands.common import CommandTable, Failure, Parser, print_json_line

if TYPE_CHECKING:
    from skilld.app import App


def cmd_sync(app: App, args: argparse.Namespace) -> int:
    from skilld.team import record_round, set_up, sync_round, team_libraries

    libraries = team_libraries(app)
    if args.library is not None:
        libraries = [library for library in libraries if library.name == args.library]
        if not libraries:
            raise Failure(f"library {args.library} has no remote: nothing to sync")
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for library in libraries:
        problems = set_up(library)
        report = sync_round(library)
        record_round(library, app.state, report)
        row: dict[str, Any] = {
            "library": library.name,
            "ok": report.ok,
            "error": report.error,
            "pushed": report.pushed,
            "pulled": report.pulled,
            "conflicts": [conflict.skill for conflict in report.conflicts],
            "refused": [{"path": r.path, "why": r.why, "commit": r.commit} for r in report.refused],
            "ahead": report.ahead,
            "problems": problems,
        }
        rows.append(row)
        if not report.ok:
            failed.append(f"{library.name}: {report.error}")
    if args.json:
        print_json_line(rows)
    elif not rows:
        print("no library has a remote: nothing to sync")
    for row in rows if not args.json else ():
        conflicts = f", {len(row['conflicts'])} conflicts" if row["conflicts"] else ""
        if row["ok"]:
            print(f"{row['library']}: pushed {row['pushed']}, pulled {row['pulled']}{conflicts}")
        else:
            print(f"{row['library']}: failed, {row['ahead']} commits wait to be pushed{conflicts}")
    if failed:
        raise Failure("sync failed: " + "; ".join(failed))
    return 0


def _sync_parser(parser: Parser) -> None:
    parser.add_argument("--library", help="only this library")
    parser.add_argument("--json", action="store_true", help="one JSON array of the rounds")
    parser.set_defaults(handler=cmd_sync)


COMMANDS: CommandTable = {
    "sync": ("commit, fetch, rebase and push every library that has a remote, now", _sync_parser),
}
