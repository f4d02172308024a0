"""`skilld web`: the panel, served until SIGINT or SIGTERM (`skilld.web`)."""

from __future__ import annotations

import argparse
import sys

from skilld.commands.common import CommandTable, Parser
from skilld.config import Config
from skilld.errors import Failure

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8741


def cmd_web(config: Config, args: argparse.Namespace) -> int:
    from skilld.web.login import panel_token, require_token_off_loopback

    if args.url:
        return print_running_panels(config)
    # Said before anything binds: a panel open to the network without a token never starts.
    require_token_off_loopback(args.host, panel_token(config.web.token_file, config.state.dir))
    from skilld.web.serve import run_panel

    try:
        return run_panel(config, args.host, args.port, open_browser=args.open)
    except OSError as exc:
        print(f"skilld: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 1


def print_running_panels(config: Config) -> int:
    """`skilld web --url`: the login URL of each running panel (`skilld web`, or `[web]
    listen` in `skilld run`), newest first."""
    from skilld.web.login import login_url, panel_token, running_panels

    panels = running_panels(config.state.dir)
    if not panels:
        raise Failure(f"no panel is running for {config.state.dir}: start one with skilld web")
    token = panel_token(config.web.token_file, config.state.dir, create=False).token
    for url in panels:
        print(login_url(url, token))
    return 0


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
    parser.add_argument(
        "--url", action="store_true", help="print the login URL of the running panel, and exit"
    )
    parser.set_defaults(handler=cmd_web, needs_app=False)


COMMANDS: CommandTable = {
    "web": ("the panel in a browser: see and steer what skilld learned", _web_parser),
}
