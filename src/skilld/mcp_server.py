"""`skilld mcp`: the skill library as MCP tools on stdio, for agents.

Four tools over one library (`skilld mcp --library NAME`, else `$SKILLD_LIBRARY`, else the
only library), under the same ownership rules as the CLI (every change goes through `Library`,
attributed to source `tool` in the event log): `skill_write`, `skill_delete`, `skill_list` and
`skill_view`. A refusal (a human or pinned skill, a bad name, the cap) comes back as a tool
error carrying the reason; it never ends the server.

An agent writes skills from its own context, which can hold tool output with secrets in it:
what `skill_write` receives is redacted like a learned skill, and new skills count against
the library's cap like learned ones.

The `mcp` SDK (2.x) is an optional extra, imported only when the server is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from skilld import __version__
from skilld.app import open_app
from skilld.config import Config
from skilld.errors import SkilldError
from skilld.redact import merge_counts, redact
from skilld.reports import tool_skill_rows
from skilld.skills.document import SkillDoc
from skilld.skills.library import Library, Origin, Written

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

TOOL = Origin(source="tool")

INSTRUCTIONS = (
    "skilld keeps this agent's library of reusable skills (Markdown playbooks). Call skill_list "
    "to see them, skill_view to read one, skill_write to create or improve one you own, and "
    "skill_delete to remove one you own. Skills written by a person, bundled, installed from a "
    "hub, or pinned cannot be changed through these tools."
)


class MCPUnavailable(RuntimeError):
    """The optional `mcp` package is not installed."""


class Refused(Exception):
    """A tool call that skilld refused; the message is for the agent."""


class SkillTools:
    """The tools as plain methods over one library; each call opens the state afresh, so the
    server sees what the daemon and the CLI changed in the meantime."""

    def __init__(self, config: Config, library: str) -> None:
        self.config = config
        self.library = library

    def write(
        self, name: str, description: str, content: str, when_to_use: str | None = None
    ) -> dict[str, Any]:
        redactions = [redact(text) for text in (description, when_to_use or "", content)]
        counts = merge_counts(*(r.counts for r in redactions))
        description, when_to_use, content = (r.text for r in redactions)
        doc = SkillDoc(
            name=name, description=description, when_to_use=when_to_use or None, body=content
        )
        with self._library() as library:
            if counts:
                library.state.add_event(
                    "redacted",
                    library=library.name,
                    skill=name,
                    source=TOOL.source,
                    detail={"counts": counts, "stage": "tool"},
                )
            result = library.apply(doc, TOOL)
        return {
            "outcome": result.kind if isinstance(result, Written) else "unchanged",
            "name": result.name,
            "path": str(result.path),
            "redacted": counts,
        }

    def delete(self, name: str) -> dict[str, Any]:
        with self._library() as library:
            deleted = library.delete(name, TOOL)
        return {"deleted": name, "path": str(deleted.path), "kept": list(deleted.kept)}

    def list(self) -> dict[str, Any]:
        with self._library() as library:
            skills = tool_skill_rows(library)
        return {"skills": skills}

    def view(self, name: str) -> str:
        with self._library() as library:
            entry = library.get(name)
            if entry is None:
                raise Refused(f"no skill named {name}")
            if entry.error:  # e.g. a link out of the skills dir: never read through it
                raise Refused(f"{entry.name} is broken: {entry.error}")
            text = entry.path.read_text(encoding="utf-8", errors="replace")
            library.usage.bump(entry.name, "view")
        return text

    @contextlib.contextmanager
    def _library(self) -> Iterator[Library]:
        try:
            with open_app(self.config) as app:
                yield app.select(self.library)
        except SkilldError as exc:
            raise Refused(str(exc)) from None
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise Refused(f"{exc.strerror or exc}{where}") from None


def build_server(config: Config, library: str) -> MCPServer:
    """The MCP server with the four tools over `library`. Raises MCPUnavailable without the
    `mcp` extra."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as exc:
        raise MCPUnavailable(
            f"the MCP server needs the mcp package (>= 2): install skilld[mcp] ({exc})"
        ) from None

    tools = SkillTools(config, library)
    server: MCPServer = MCPServer(
        name="skilld", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )

    @contextlib.contextmanager
    def as_tool_error() -> Iterator[None]:
        try:
            yield
        except Refused as exc:
            raise ToolError(str(exc)) from None

    @server.tool(
        description="Create a skill, or update one skilld manages. `content` is the Markdown "
        "body (no frontmatter); `whenToUse` says when an agent should load it."
    )
    def skill_write(
        name: str, description: str, content: str, whenToUse: str | None = None
    ) -> dict[str, Any]:
        with as_tool_error():
            return tools.write(name, description, content, whenToUse)

    @server.tool(description="Delete a skill skilld manages (its last version stays in history).")
    def skill_delete(name: str) -> dict[str, Any]:
        with as_tool_error():
            return tools.delete(name)

    @server.tool(
        description="Every skill with its owner, whether skilld manages it, its state "
        "(active, stale), whether it is pinned, and its usage counts."
    )
    def skill_list() -> dict[str, Any]:
        with as_tool_error():
            return tools.list()

    @server.tool(description="The full text of a skill file; counts as a view of the skill.")
    def skill_view(name: str) -> str:
        with as_tool_error():
            return tools.view(name)

    return server


def serve(config: Config, library: str) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    build_server(config, library).run("stdio")
