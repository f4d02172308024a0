"""What every command module shares: errors that map to exit codes, output helpers."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, NoReturn

from skilld.errors import Failure, UsageError

if TYPE_CHECKING:
    from skilld.skills.library import Origin

__all__ = ["Failure", "Parser", "UsageError", "cli_origin", "library_option", "print_json_line"]


def cli_origin() -> Origin:
    """Changes made from the command line are attributed to "cli" in the event log."""
    from skilld.skills.library import Origin

    return Origin(source="cli")


class Parser(argparse.ArgumentParser):
    """argparse, with errors on one line in skilld's voice (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def print_json_line(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, default=str))


def library_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--library", help="the library (default: the only one, or the one holding the skill)"
    )
