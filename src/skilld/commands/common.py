"""What every command module shares: errors that map to exit codes, output helpers."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from skilld.errors import Failure, UsageError

if TYPE_CHECKING:
    from skilld.skills.outcomes import Origin

__all__ = [
    "CommandTable",
    "Failure",
    "Parser",
    "UsageError",
    "cli_origin",
    "library_option",
    "print_json_line",
]


def cli_origin() -> Origin:
    """Changes made from the command line are attributed to "cli" in the event log."""
    from skilld.skills.outcomes import Origin

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
    """argparse, with errors on one line in skilld's voice (exit 2), that builds the parsers
    of the subcommands its command line uses only."""

    def __init__(self, *args: Any, line: Sequence[str] = (), **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        #: What this parser will parse from its subcommand's name on, when known.
        self.line = line

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")

    def add_commands(self, dest: str, table: CommandTable) -> None:
        """`table`'s commands as this parser's subcommands, their name stored in `dest`.

        Only the parser of the command `line` names is built, or every one when it names none
        of them (help, a mistyped command: argparse then lists them all). argparse takes about
        0.4 ms to build a parser (it looks up the translation of its own messages each time),
        `skilld skills` alone has thirteen, and an agent's hook uses one.
        """
        commands = self.add_subparsers(dest=dest, required=True, parser_class=Parser)
        named = self.line[0] if self.line and self.line[0] in table else None
        for name, (text, configure) in table.items():
            if named in (None, name):
                parser = commands.add_parser(name, help=text, line=self.line[1:] if named else ())
                configure(parser)


#: A command group: each command's name, its one line of help, and what adds its arguments and
#: handler to its parser.
CommandTable = Mapping[str, tuple[str, Callable[[Parser], None]]]


def terminal_text(text: str) -> str:
    """`text` as it may reach a terminal: every C0 and C1 control character but tab and newline
    (and the CR of a CRLF) shown as a visible `\\xNN` escape, so a skill file or an event
    holding an escape sequence (OSC 52 writes the clipboard; others clear the screen) prints as
    text and does nothing. `--json` output is JSON, and keeps the text exact."""
    return re.sub(
        r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)",
        lambda m: f"\\x{ord(m.group()):02x}",
        text,
    )


def print_json_line(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, default=str))


def library_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--library", help="the library (default: the only one, or the one holding the skill)"
    )
