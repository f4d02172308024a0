"""`skilld effect`: whether each learned skill helps (docs/learning.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from skilld.commands.common import CommandTable, Parser, library_option, print_json_line

if TYPE_CHECKING:
    from skilld.app import App


def cmd_effect(app: App, args: argparse.Namespace) -> int:
    from skilld.effect.report import pooled
    from skilld.reports.effect import effect_records, effect_rows

    if args.json:
        print_json_line(effect_rows(app, args.library))
        return 0
    records = effect_records(app, [app.select(args.library).name] if args.library else None)
    if not records:
        print("no learned skills")
        return 0
    width = max(len("LIBRARY"), *(len(record.library) for record in records))
    print(f"{'NAME':<32} {'LIBRARY':<{width}} {'VERDICT':<17} EVIDENCE")
    for record in records:
        print(
            f"{record.name:<32} {record.library:<{width}} {record.outcome.verdict:<17}"
            f" {record.outcome.evidence}"
        )
    figure = pooled(records)
    print(
        f"pooled: {_rate(figure.before_per_100)} failures per 100 sessions before,"
        f" {_rate(figure.after_per_100)} after"
        f" ({figure.before_sessions} and {figure.after_sessions} sessions)"
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
