"""The `skilld` command line. Exit codes: 0 success, 1 failed operation, 2 bad usage or config.

Each command group lives in `skilld.commands.<group>` and registers its own subcommands; a
handler takes `(app, args)` (an opened App) or, with `needs_app=False`, `(config, args)`.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from skilld import __version__
from skilld.commands.common import Parser
from skilld.config import Config, load_config
from skilld.errors import ConfigError, SkilldError
from skilld.fsutil import UnsafePath
from skilld.log import configure_logging

if TYPE_CHECKING:
    from skilld.app import App

#: Each top-level command and the `skilld.commands` module whose `COMMANDS` table holds it. A
#: command line that names one imports that module only, and builds that command's parsers
#: only: a hook's `skilld usage use` imports no other command module (tests/test_startup.py
#: checks this table against the modules).
GROUPS: dict[str, str] = {
    "run": "daemon",
    "once": "daemon",
    "status": "daemon",
    "review": "daemon",
    "skills": "skills",
    "usage": "usage",
    "events": "skills",
    "doctor": "ops",
    "config": "ops",
    "replay": "replay",
    "curate": "curate",
    "mcp": "mcp",
    "sync": "sync",
    "web": "web",
    "failures": "failures",
    "effect": "effect",
    "holdout": "holdout",
}

Handler = Callable[["App", argparse.Namespace], int]

#: Long-running commands whose log lines are the operator's view of what happens.
DAEMON_GROUPS = frozenset({"run", "once", "replay", "mcp"})


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`'s command, or for every command when `argv` names none (help,
    a mistyped command: argparse then lists them all)."""
    line = _command_line(argv or ())
    parser = Parser(
        prog="skilld", description="Learn reusable skills from agent sessions.", line=line
    )
    parser.add_argument("--version", action="version", version=f"skilld {__version__}")
    parser.add_argument("--config", help="config file (else $SKILLD_CONFIG, XDG, defaults)")
    group = line[0] if line and line[0] in GROUPS else None
    modules = [GROUPS[group]] if group else dict.fromkeys(GROUPS.values())
    tables = [importlib.import_module(f"skilld.commands.{module}").COMMANDS for module in modules]
    parser.add_commands("group", dict(item for table in tables for item in table.items()))
    return parser


def _command_line(argv: Sequence[str]) -> Sequence[str]:
    """`argv` from the command's name on: past the options and `--config`'s value."""
    words = iter(enumerate(argv))
    for index, word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return argv[index:]
    return ()


def entry_point() -> None:
    """The `skilld` script and `python -m skilld`: `main`, then an exit without the teardown.

    At exit Python frees every object of every module, one by one: 5 to 15 ms, a tenth of what
    an agent's hook waits for `skilld usage use`, to hand back memory the kernel takes back
    anyway. By then a command has closed its files and committed its state, so the process ends
    once Python's own exit work is done: threads joined, `atexit` handlers run (the one
    registered here, first, runs last) and the standard streams flushed. A command that
    raises, and a process being traced or profiled (coverage's tracer, a debugger), exit as
    usual.
    """
    status: list[int] = []
    atexit.register(_end_process, status)
    code: str | int | None
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        code = exc.code
    status.append(code if isinstance(code, int) else 0 if code is None else 1)
    sys.exit(code)


def _end_process(status: list[int]) -> None:
    if not status or sys.gettrace() is not None or sys.getprofile() is not None:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return  # a closed pipe or stream: the interpreter's own exit reports it
    os._exit(status[0])


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
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
        with open_app(config, requested=getattr(args, "library", None)) as app:
            return handler(app, args)
    except ConfigError as exc:
        print(f"skilld: config error: {exc}", file=sys.stderr)
        return exc.exit_code
    except SkilldError as exc:
        print(f"skilld: {exc}", file=sys.stderr)
        return exc.exit_code
    except UnsafePath as exc:  # the tree guard refused a file a change needs (a link)
        print(f"skilld: refused: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"skilld: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
