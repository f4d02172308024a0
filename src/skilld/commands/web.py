"""`skilld web`: the panel, served until SIGINT or SIGTERM (`skilld.web`)."""

from __future__ import annotations

import argparse
import sys

from skilld.commands.common import CommandTable, Parser
from skilld.config import Config

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8741


def cmd_web(config: Config, args: argparse.Namespace) -> int:
    from skilld.web.security import read_token, require_token_off_loopback
    from skilld.web.serve import run_panel

    # Said before anything binds: a panel open to the network without a token never starts.
    require_token_off_loopback(args.host, read_token(config.web.token_file))
    try:
        return run_panel(config, args.host, args.port, open_browser=args.open)
    except OSError as exc:
        print(f"skilld: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 1


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}")
    return int(text)


def _web_parser(parser: Parser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"default {DEFAULT_HOST}")
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free"
    )
    parser.add_argument("--open", action="store_true", help="open it in a browser")
    parser.set_defaults(handler=cmd_web, needs_app=False)


COMMANDS: CommandTable = {
    "web": ("the panel in a browser: see and steer what skilld learned", _web_parser),
}
