"""`skilld mcp`: the MCP server on stdio (docs/mcp.md).

It must answer an agent's `initialize` within the agent's patience, so it starts with the
config and the routing only: the library code loads on the first tool call.
"""

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from skilld.commands.common import CommandTable, Parser
from skilld.config import Config
from skilld.errors import SkilldError
from skilld.log import get_logger
from skilld.mcp_server import CallTool, Refused, serve_stdio
from skilld.routing import choose_library, requested_library, resolve, with_named_library

log = get_logger("skilld.mcp")


def cmd_mcp(config: Config, args: argparse.Namespace) -> int:
    try:
        # The library is chosen once, at start-up: a wrong or ambiguous one is bad usage.
        library = served_library(config, args.library)
    except SkilldError as exc:
        print(f"skilld: {exc}", file=sys.stderr)
        return exc.exit_code
    serve_stdio(lazy_tools(config, library))
    return 0


def served_library(config: Config, name: str | None) -> str:
    """The library `--library` (else `$SKILLD_LIBRARY`, else the only one) names. A configured
    library, or an agent's own before that agent has run here, is found from the routing
    alone; any other name (a project library skilld has written into, or a mistake) is looked
    up as every command does, with the state opened."""
    requested = requested_library(name)
    configured = list(with_named_library(resolve(config), config, requested).libraries)
    if requested is None or requested in configured:
        return choose_library(
            configured, configured=len(configured), requested=requested, holding=[], skill=None
        )
    from skilld.app import open_app

    with open_app(config, requested=requested) as app:
        return app.select(requested).name


def lazy_tools(config: Config, library: str) -> CallTool:
    """The tools over `library`, their code imported on the first call. A call that fails
    unexpectedly (a bug, the environment) is the tool's error, logged, and the server goes on
    serving the agent's session."""
    loaded: list[CallTool] = []

    def call_tool(tool: str, arguments: Mapping[str, str | None]) -> dict[str, Any] | str:
        try:
            if not loaded:
                from skilld.mcp_tools import SkillTools

                loaded.append(SkillTools(config, library))
            return loaded[0](tool, arguments)
        except Refused:
            raise
        except Exception as exc:
            import traceback

            log.error("tool_failed", tool=tool, error=repr(exc), traceback=traceback.format_exc())
            raise Refused(f"{tool} failed: {type(exc).__name__}: {exc}") from None

    return call_tool


def _mcp_parser(parser: Parser) -> None:
    parser.add_argument(
        "--library",
        help="the library to serve (default: $SKILLD_LIBRARY, else the only library)",
    )
    parser.set_defaults(handler=cmd_mcp, needs_app=False)


COMMANDS: CommandTable = {
    "mcp": ("MCP server on stdio: skill_write, skill_delete, skill_list, skill_view", _mcp_parser),
}
