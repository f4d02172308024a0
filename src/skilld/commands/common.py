"""What every command module shares: errors that map to exit codes, output helpers."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from skilld.errors import Failure, UsageError

if TYPE_CHECKING:
    from skilld.skills.library import Origin

__all__ = ["Failure", "Parser", "UsageError", "cli_origin", "library_option", "print_json_line"]


def cli_origin() -> Origin:
    """Changes made from the command line are attributed to "cli" in the event log."""
    from skilld.skills.library import Origin

    return Origin(source="cli")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized without `shutil`: argparse builds one for every option it
    adds, and `shutil` (with the compression modules it imports) would double the start-up of
    a hook's `skilld usage use`."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_terminal_width() - 2)


def _terminal_width() -> int:
    """`shutil.get_terminal_size().columns`: $COLUMNS, else stdout's terminal, else 80."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    stdout = sys.__stdout__
    if stdout is None:
        return 80
    try:
        return os.get_terminal_size(stdout.fileno()).columns or 80
    except (ValueError, OSError):  # not a terminal, or stdout closed
        return 80


class Parser(argparse.ArgumentParser):
    """argparse, with errors on one line in skilld's voice (exit 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def print_json_line(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, default=str))


def library_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--library", help="the library (default: the only one, or the one holding the skill)"
    )
