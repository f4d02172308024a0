"""The `skilld` command line. Exit codes: 0 success, 1 failed operation, 2 bad usage or config.

Each command group lives in `skilld.commands.<group>` and registers its own subcommands; a
handler takes `(app, args)` (an opened App) or, with `needs_app=False`, `(config, args)`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from skilld import __version__
from skilld.commands import curate, daemon, mcp, ops, replay, skills, sync
from skilld.commands.common import Parser
from skilld.config import Config, load_config
from skilld.errors import ConfigError, SkilldError
from skilld.log import configure_logging

if TYPE_CHECKING:
    from skilld.app import App

COMMAND_MODULES = (daemon, skills, ops, replay, curate, mcp, sync)

Handler = Callable[["App", argparse.Namespace], int]

#: Long-running commands whose log lines are the operator's view of what happens.
DAEMON_GROUPS = frozenset({"run", "once", "replay", "mcp"})


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="skilld", description="Learn reusable skills from agent sessions.")
    parser.add_argument("--version", action="version", version=f"skilld {__version__}")
    parser.add_argument("--config", help="config file (else $SKILLD_CONFIG, XDG, defaults)")
    commands = parser.add_subparsers(dest="group", required=True, parser_class=Parser)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"skilld: config error: {exc}", file=sys.stderr)
        return 2
    level = config.log.level
    if args.group not in DAEMON_GROUPS and level in ("debug", "info"):
        # Events are in the event log; a one-shot command's stderr is for its one-line verdict.
        level = "warning"
    configure_logging(config.log.format, level)
    return run_handler(config, args)


def run_handler(config: Config, args: argparse.Namespace) -> int:
    """Run the command's handler; every error skilld raises on purpose becomes its one-line
    message and its exit code."""
    try:
        if not getattr(args, "needs_app", True):
            return int(args.handler(config, args))
        from skilld.app import open_app  # the libraries: not for commands that need no app

        handler: Handler = args.handler
        with open_app(config) as app:
            return handler(app, args)
    except ConfigError as exc:
        print(f"skilld: config error: {exc}", file=sys.stderr)
        return exc.exit_code
    except SkilldError as exc:
        print(f"skilld: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"skilld: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
