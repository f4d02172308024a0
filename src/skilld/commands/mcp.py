"""`skilld mcp`: the MCP server on stdio (needs the optional `mcp` extra)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from skilld.config import Config


def cmd_mcp(config: Config, args: argparse.Namespace) -> int:
    from skilld.mcp_server import MCPUnavailable, serve

    try:
        serve(config)
    except MCPUnavailable as exc:
        print(f"skilld: {exc}", file=sys.stderr)
        return 1
    return 0


def register(commands: Any) -> None:
    mcp = commands.add_parser(
        "mcp", help="MCP server on stdio: skill_write, skill_delete, skill_list, skill_view"
    )
    mcp.set_defaults(handler=cmd_mcp, needs_app=False)
