"""`skilld run`, `once`, `status` and `review`: the daemon and what it reports."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from skilld.commands.common import CommandTable, Parser, cli_origin, print_json_line
from skilld.config import Config, load_config
from skilld.errors import ConfigError, StateError
from skilld.reports.status import (
    context_line,
    format_line,
    outcome_counts_text,
    review_items,
    status_problems,
    status_report,
)

if TYPE_CHECKING:
    from skilld.app import App

# -- daemon ----------------------------------------------------------------------------------


def cmd_run(config: Config, args: argparse.Namespace) -> int:
    import anyio

    from skilld.curator.schedule import ScheduledCurator
    from skilld.daemon import Daemon

    once = args.group == "once"
    daemon = Daemon(
        config,
        reload_config=lambda: load_config(args.config),
        curator_pass=ScheduledCurator(),
    )
    try:
        result = anyio.run(lambda: daemon.run(once=once))
    except ConfigError as exc:
        print(f"skilld: config error: {exc}", file=sys.stderr)
        return 2
    except StateError as exc:  # another daemon holds the state dir, or it is unusable
        print(f"skilld: {exc}", file=sys.stderr)
        return 2
    return result.exit_code


def backlog_line(backlog: dict[str, Any]) -> str:
    """How far behind the daemon is, in one line for people."""
    windows = backlog["windows"]
    if windows:
        line = (
            f"{windows} window{'s' if windows != 1 else ''} ready in "
            f"{backlog['sessions_ready']} session{'s' if backlog['sessions_ready'] != 1 else ''},"
            f" ~{backlog['estimated_tokens']:,} input tokens"
        )
        hours = backlog["min_hours_at_spend_cap"]
        if hours is not None:
            line += (
                f", at least {_duration(hours * 3600)} at"
                f" {backlog['max_calls_per_hour']} calls/hour"
            )
    else:
        line = "nothing to reflect"
    waiting = backlog["sessions_waiting"]
    if waiting:
        line += (
            f"; {waiting} session{'s' if waiting != 1 else ''} waiting for a finished turn"
            " or more messages"
        )
    return line


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cmd_status(app: App, args: argparse.Namespace) -> int:
    from skilld.state import utc_now_iso

    report = status_report(app)
    age = report["heartbeat_age_seconds"]
    if args.json:
        print_json_line(report)
    else:
        tick = report["last_tick"] or {}
        llm = report["llm"] or {}
        last_error = (llm.get("last_error") or {}).get("message") or "none"
        print(f"heartbeat      {'never' if age is None else f'{age:.0f}s ago'}")
        if tick:
            print(
                f"last tick      {utc_now_iso(tick['started_at'])}, "
                f"{tick['duration_seconds']}s, outcomes {outcome_counts_text(tick['outcomes'])}"
            )
        else:
            print("last tick      never")
        print(
            f"sessions       {report['sessions_tracked']} tracked, "
            f"{report['windows_deferred']} with content not yet reflected"
        )
        print(f"backlog        {backlog_line(report['backlog'])}")
        for library in report["libraries"]:
            waiting = library["proposals_waiting"]
            kept = f", {waiting} kept proposals waiting" if waiting else ""
            print(
                f"library        {library['name']}: {library['managed']}/"
                f"{library['max_managed']} managed ({library['dir']}){kept}"
            )
        if not report["libraries"]:
            print("library        none (no agent found and none configured)")
        for team in report["sync"]:
            problems = f"; needs repair: {team['problems'][0]}" if team["problems"] else ""
            error = f"; last error: {team['last_error']}" if team["last_error"] else ""
            print(
                f"sync           {team['library']} -> {team['remote']} ({team['branch']}):"
                f" last success {team['last_success'] or 'never'},"
                f" {team['ahead']} commits to push{error}{problems}"
            )
        print(f"review         {report['pending_review']} awaiting approval")
        print(f"llm            circuit {llm.get('circuit', 'unknown')}, last error: {last_error}")
        print(f"llm format     {format_line(llm)}")
        print(f"llm context    {context_line(llm)}")
        tokens = report["llm_tokens"]
        cap = tokens["max_tokens_per_day"]
        limit = f" of {cap} (max_tokens_per_day)" if cap else " (no max_tokens_per_day)"
        paused = ", calls paused until 00:00 UTC" if tokens["at_cap"] else ""
        print(f"llm tokens     {tokens['today']} today{limit}{paused}")
        print(f"skipped lines  {report['malformed_lines_skipped']}")
        print(f"source errors  {report['source_errors_total']} in the last tick")
    if not args.check:
        return 0
    found = status_problems(report)
    for problem in found:
        print(f"skilld: {problem.text}", file=sys.stderr)
    return 1 if found else 0


# -- review ----------------------------------------------------------------------------------


def cmd_review(app: App, args: argparse.Namespace) -> int:
    from skilld.actions import approve, reject

    if args.command == "list":
        rows = review_items(app)
        if args.json:
            print_json_line(rows)
        for row in rows if not args.json else ():
            print(
                f"{row['name']:<32} {row['library'] or '-':<12} {row['staged_at']}"
                f"  {row['held_because']}: {row['description']}  ({_taught_where(row['origin'])})"
            )
        return 0
    if args.command == "reject":
        reject(app, args.name, cli_origin(), args.library)
        print(f"rejected {args.name}")
        return 0
    result = approve(app, args.name, cli_origin(), args.library)
    print(f"{result.kind} {result.name} {result.path}")
    return 0


def _taught_where(origin: dict[str, Any]) -> str:
    """`session S, learned on repo@branch`: where a staged proposal came from."""
    from skilld.gitinfo import from_json
    from skilld.reports.listing import learned_on_text

    git = from_json(origin.get("git"))
    where = learned_on_text(git.as_json()) if git is not None else "not in a git repository"
    return f"session {origin.get('session') or '-'}, {where}"


def _run_parser(parser: Parser) -> None:
    parser.set_defaults(handler=cmd_run, needs_app=False)


def _status_parser(parser: Parser) -> None:
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if no daemon runs, a team library cannot sync, a source fails, the LLM"
        " is out or the backlog is stuck",
    )
    parser.set_defaults(handler=cmd_status)


def _review_parser(parser: Parser) -> None:
    parser.add_commands("command", REVIEW_COMMANDS)
    parser.set_defaults(handler=cmd_review)


def _review_list_parser(parser: Parser) -> None:
    parser.add_argument("--json", action="store_true")


def _review_decision_parser(parser: Parser) -> None:
    parser.add_argument("name")
    parser.add_argument("--library", help="when the name is staged for several libraries")


REVIEW_COMMANDS: CommandTable = {
    "list": ("the proposals awaiting approval", _review_list_parser),
    "approve": ("write a staged proposal into its library", _review_decision_parser),
    "reject": ("drop a staged proposal", _review_decision_parser),
}
COMMANDS: CommandTable = {
    "run": ("the daemon, in the foreground", _run_parser),
    "once": ("one tick, then exit", _run_parser),
    "status": ("last tick, heartbeat, sessions, skills, LLM", _status_parser),
    "review": ("proposals staged for approval", _review_parser),
}
