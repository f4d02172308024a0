"""`skilld effect`: whether each learned skill helps (docs/learning.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from skilld.commands.common import CommandTable, Parser, library_option, print_json_line

if TYPE_CHECKING:
    from skilld.app import App


def cmd_effect(app: App, args: argparse.Namespace) -> int:
    from skilld.effect.report import effect_records, pooled

    chosen = [app.select(args.library)] if args.library else app.all_libraries()
    libraries = [library.name for library in chosen]
    records = effect_records(
        app.state.conn, libraries, min_exposures=app.config.effect.min_exposures
    )
    if args.json:
        print_json_line([record.row() for record in records])
        return 0
    if not records:
        print("no learned skills")
        return 0
    width = max(len("LIBRARY"), *(len(record.library) for record in records))
    print(f"{'NAME':<32} {'LIBRARY':<{width}} {'VERDICT':<13} EVIDENCE")
    for record in records:
        print(
            f"{record.name:<32} {record.library:<{width}} {record.outcome.verdict:<13}"
            f" {record.outcome.evidence}"
        )
    figure = pooled(records)
    print(
        f"pooled: {_rate(figure.before_per_100)} failures per 100 exposures before,"
        f" {_rate(figure.after_per_100)} after"
        f" ({figure.before_exposures} and {figure.after_exposures} exposures)"
    )
    return 0


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def _configure_effect(parser: Parser) -> None:
    library_option(parser)
    parser.add_argument("--json", action="store_true", help="one JSON list of rows")
    parser.set_defaults(handler=cmd_effect)


COMMANDS: CommandTable = {
    "effect": ("does each learned skill help? (before/after its failure)", _configure_effect),
}
