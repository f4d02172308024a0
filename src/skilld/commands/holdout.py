"""`skilld holdout`: the learned skills withheld now, and until when (DESIGN.md §14)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from skilld.commands.common import CommandTable, Parser, print_json_line

if TYPE_CHECKING:
    from skilld.app import App


def cmd_holdout(app: App, args: argparse.Namespace) -> int:
    from skilld.curator.holdout import library_figure, withheld_now

    rows = withheld_now(app)
    if args.json:
        print_json_line(rows)
        return 0
    share = app.config.effect.holdout
    if not rows:
        print("no skill is withheld now" + ("" if share else " (holdout is off)"))
    else:
        width = max(len("LIBRARY"), *(len(row["library"]) for row in rows))
        print(f"{'NAME':<32} {'LIBRARY':<{width}} UNTIL")
        for row in rows:
            print(f"{row['name']:<32} {row['library']:<{width}} {row['until'] or '?'}")
    figure = library_figure(app)
    if figure.skills and figure.per_100 is not None and figure.ci95 is not None:
        print(
            f"{figure.skills} skills in holdout: {figure.per_100:g} failures prevented per 100"
            f" sessions (95% interval {figure.ci95[0]:g} to {figure.ci95[1]:g}; present"
            f" {figure.present.failures} of {figure.present.sessions}, withheld"
            f" {figure.withheld.failures} of {figure.withheld.sessions})"
        )
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
