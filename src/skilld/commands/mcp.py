"""`skilld mcp`: the MCP server on stdio (needs the optional `mcp` extra)."""

from __future__ import annotations

import argparse
import sys

from skilld.commands.common import CommandTable, Parser
from skilld.config import Config


def cmd_mcp(config: Config, args: argparse.Namespace) -> int:
    from skilld.app import open_app
    from skilld.errors import SkilldError
    from skilld.mcp_server import MCPUnavailable, serve

    try:
        # The library is chosen once, at start-up: a wrong or ambiguous one is bad usage.
        with open_app(config) as app:
            library = app.select(args.library).name
        serve(config, library)
    except MCPUnavailable as exc:
        print(f"skilld: {exc}", file=sys.stderr)
        return 1
    except SkilldError as exc:
        print(f"skilld: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def _mcp_parser(parser: Parser) -> None:
    parser.add_argument(
        "--library",
        help="the library to serve (default: $SKILLD_LIBRARY, else the only library)",
    )
    parser.set_defaults(handler=cmd_mcp, needs_app=False)


COMMANDS: CommandTable = {
    "mcp": ("MCP server on stdio: skill_write, skill_delete, skill_list, skill_view", _mcp_parser),
}
