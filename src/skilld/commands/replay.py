"""`skilld replay`: what the daemon would make of existing transcripts, without touching anything.

    skilld replay [--since DUR] [--source KIND] [--limit N] [--out DIR] [--json] [--dry-run]

Proposals go under `--out` (default: a new temporary directory, printed); the real skills dir,
its `.usage.json` and the daemon's state are only read. `--dry-run` stops before the LLM.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from skilld.commands.common import CommandTable, Parser, print_json_line, terminal_text
from skilld.config import SOURCE_KINDS, Config, parse_duration
from skilld.log import configure_logging

if TYPE_CHECKING:
    from skilld.evolve.replay import ReplayReport


def cmd_replay(config: Config, args: argparse.Namespace) -> int:
    import anyio

    # Imported here: the pipeline is heavy, and most commands (usage bumps from agent hooks)
    # should start fast.
    from skilld.errors import SkilldError
    from skilld.evolve.replay import (
        ReplayError,
        ReplayOptions,
        check_out_dir,
        default_out_dir,
        run_replay,
    )

    if config.log.level != "debug":
        # Every sandbox event would otherwise be logged like a real one; the report says it all.
        configure_logging(config.log.format, "warning")
    out: Path = args.out if args.out is not None else default_out_dir()
    # A dry run writes no proposal: its own temporary sandbox is not worth keeping, nor is one
    # that a failed start left empty.
    discard = args.dry_run and args.out is None
    try:
        system_prompt = args.prompt_file.read_text(encoding="utf-8") if args.prompt_file else None
    except (OSError, UnicodeDecodeError) as exc:
        print(f"skilld: --prompt-file: cannot read {args.prompt_file}: {exc}", file=sys.stderr)
        return 2
    options = ReplayOptions(
        out=out,
        since=args.since,
        source_kind=args.source,
        limit=args.limit,
        dry_run=args.dry_run,
        system_prompt=system_prompt,
    )
    try:
        check_out_dir(out, config)
        report = anyio.run(run_replay, config, options)
    except ReplayError as exc:
        discard = args.out is None
        print(f"skilld: {exc}", file=sys.stderr)
        return 2
    except SkilldError as exc:
        print(f"skilld: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"skilld: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    finally:
        if discard:
            shutil.rmtree(out, ignore_errors=True)
    if discard:
        report.out = None
    if args.json:
        print_json_line(report.as_dict())
    else:
        print_report(report)
    return 1 if report.failed else 0


def print_report(report: ReplayReport) -> None:
    totals = report.totals()
    scope = f"files modified within {report.since}" if report.since else "all transcripts"
    sources = ", ".join(report.sources)
    if report.dry_run:
        print(f"dry run of {scope} in {sources}: nothing is sent")
    else:
        print(f"replay of {scope} in {sources}")
        copies = (
            f"beside copies of the {report.seeded_skills} existing skill{_s(report.seeded_skills)}"
            if report.seeded_skills
            else "no existing skills to copy"
        )
        print(f"proposals in   {report.out}/skills/<library> ({copies})")
    if report.rows:
        print()
        _print_rows(report)
    print()
    if report.dry_run:
        print(
            f"total: {totals['windows']} window{_s(totals['windows'])} would be sent,"
            f" ~{totals['prompt_tokens']:,} input tokens (estimated), no request made"
        )
        cap = report.max_calls_per_hour
        if cap and totals["windows"]:
            print(
                f"at llm.max_calls_per_hour = {cap} the daemon needs at least"
                f" {_duration(totals['windows'] / cap * 3600)} for them"
            )
    else:
        mark = "~" if totals["estimated"] else ""
        merges = totals["merge_calls"]
        print(
            f"total: {totals['windows']} window{_s(totals['windows'])},"
            f" {totals['calls']} call{_s(totals['calls'])}"
            + (f" ({merges} to merge into existing skills)," if merges else ",")
            + f" {mark}{totals['prompt_tokens']:,} input + {mark}{totals['completion_tokens']:,}"
            f" output = {mark}{totals['total_tokens']:,} tokens"
            + (" (~: estimated where the server sent no usage)" if mark else "")
        )
        counts = ", ".join(
            f"{outcome} {totals[outcome]}"
            for outcome in ("created", "updated", "skipped", "invalid")
        )
        others = ", ".join(
            f"{outcome} {totals[outcome]}"
            for outcome in ("unchanged", "protected", "cap", "staged", "error")
            if totals[outcome]
        )
        print(f"skills: {counts}" + (f", {others}" if others else ""))
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(report.redactions.items()))
    print(f"redactions: {totals['redactions']}" + (f" ({kinds})" if kinds else ""))
    if report.not_sent:
        print(f"not sent: {report.not_sent} window{_s(report.not_sent)} ({report.stopped})")
    for error in report.source_errors:
        print(f"source error: {error}")


def _print_rows(report: ReplayReport) -> None:
    """A table: text columns left-aligned, token columns (the last `numbers`) right-aligned."""
    if report.dry_run:
        header = ["session", "messages", "input tokens"]
        numbers = 1
    else:
        header = ["session", "messages", "outcome", "skill", "in", "out"]
        numbers = 2
    table = [header]
    for row in report.rows:
        mark = "~" if row.estimated else ""
        line = [row.session, f"{row.first_message}-{row.last_message}"]
        if report.dry_run:
            line.append(f"~{row.prompt_tokens:,}")
        else:
            line += [
                row.outcome,
                row.skill or "-",
                f"{mark}{row.prompt_tokens:,}",
                f"{mark}{row.completion_tokens:,}",
            ]
        table.append(line)
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    split = len(header) - numbers
    for line in table:
        left = zip(line[:split], widths[:split], strict=True)
        right = zip(line[split:], widths[split:], strict=True)
        cells = [cell.ljust(width) for cell, width in left]
        cells += [cell.rjust(width) for cell, width in right]
        print("  ".join(cells).rstrip())
    for row in report.rows:
        if row.path:
            print(f"{row.outcome:<8} {row.skill}: {row.path}")
            for signature in row.targets:
                print(terminal_text(f"  ends: {signature}"))


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min"
    return f"{seconds / 3600:.1f} h"


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _since(text: str) -> str:
    try:
        parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _replay_parser(parser: Parser) -> None:
    parser.add_argument("--since", type=_since, help="only files modified within DUR (24h)")
    parser.add_argument("--source", choices=SOURCE_KINDS, help="only sources of this kind")
    parser.add_argument("--limit", type=_positive, help="send at most N windows")
    parser.add_argument("--out", type=Path, help="where proposals go (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="the report as one JSON object")
    parser.add_argument(
        "--dry-run", action="store_true", help="count windows and tokens; send nothing"
    )
    parser.add_argument(
        "--prompt-file",
        type=Path,
        help="try this system prompt instead of skilld's own (same {placeholders})",
    )
    parser.set_defaults(handler=cmd_replay, needs_app=False)


COMMANDS: CommandTable = {
    "replay": (
        "run the pipeline over existing transcripts into a sandbox (nothing real changes)",
        _replay_parser,
    ),
}
