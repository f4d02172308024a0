"""`skilld doctor` and `skilld config`: can this installation run, and with which settings.

`doctor` prints one line per check (`ok`, `warn` or `fail`) and exits 1 when any check fails;
`config` prints the effective configuration as TOML, with where each value came from. The
checks live in `skilld.commands._doctor`, loaded only when one of these commands runs.
"""

from __future__ import annotations

import argparse
import sys

from skilld.commands.common import CommandTable, Parser
from skilld.config import Config

DEFAULT_LLM_TIMEOUT_SECONDS = 10.0


def cmd_doctor(config: Config, args: argparse.Namespace) -> int:
    from skilld.commands._doctor import format_check, run_doctor
    from skilld.log import configure_logging

    # The checks report LLM failures themselves; the client's warning log would say it twice.
    configure_logging(config.log.format, "error")
    checks = run_doctor(config, llm_timeout=args.timeout, check_llm=not args.no_llm)
    for check in checks:
        print(format_check(check))
    failed = sum(check.status == "fail" for check in checks)
    if failed:
        print(f"skilld doctor: {failed} check{'s' if failed > 1 else ''} failed", file=sys.stderr)
        return 1
    return 0


def cmd_config(config: Config, args: argparse.Namespace) -> int:
    from skilld.commands._doctor import render_config

    for line in render_config(config):
        print(line)
    return 0


def _doctor_parser(parser: Parser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_LLM_TIMEOUT_SECONDS,
        help=f"seconds to wait for the LLM (default {DEFAULT_LLM_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument("--no-llm", action="store_true", help="skip the request to the LLM")
    parser.set_defaults(handler=cmd_doctor, needs_app=False)


def _config_parser(parser: Parser) -> None:
    parser.set_defaults(handler=cmd_config, needs_app=False)


COMMANDS: CommandTable = {
    "doctor": ("check config, paths, permissions and the LLM", _doctor_parser),
    "config": ("the effective configuration, with origins", _config_parser),
}
