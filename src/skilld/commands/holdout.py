"""`skilld holdout`: the learned skills withheld now, and until when (DESIGN.md §14)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from skilld.commands.common import CommandTable, Parser, print_json_line

if TYPE_CHECKING:
    from skilld.app import App


def cmd_holdout(app: App, args: argparse.Namespace) -> int:
    from skilld.curator.holdout import withheld_now

    rows = withheld_now(app)
    if args.json:
        print_json_line(rows)
        return 0
    share = app.config.effect.holdout
    if not rows:
        print("no skill is withheld now" + ("" if share else " (holdout is off)"))
        return 0
    width = max(len("LIBRARY"), *(len(row["library"]) for row in rows))
    print(f"{'NAME':<32} {'LIBRARY':<{width}} UNTIL")
    for row in rows:
        print(f"{row['name']:<32} {row['library']:<{width}} {row['until'] or '?'}")
    return 0


def _configure_holdout(parser: Parser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON list")
    parser.set_defaults(handler=cmd_holdout)


COMMANDS: CommandTable = {
    "holdout": (
        "the learned skills withheld now to measure them, and until when",
        _configure_holdout,
    ),
}
