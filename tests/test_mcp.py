"""`skilld mcp` as a real subprocess, driven by a real MCP client session over stdio."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from skilld.skills.usage import UsageStore
from skilld.state import StateDB
from tests.conftest import Workspace

SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def text_of(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(text_of(result))


@pytest.mark.anyio
async def test_every_tool_round_trips_through_a_real_session(workspace: Workspace) -> None:
    workspace.settings = {"log": {"level": "warning"}, "skills": {"max_managed": 2}}
    config = workspace.write_config()
    (workspace.skills / "by-hand").mkdir()
    (workspace.skills / "by-hand" / "SKILL.md").write_text(
        "---\nname: by-hand\ndescription: Written by a person.\n---\n1. Mine.\n"
    )
    outside = workspace.root / "outside.md"
    outside.write_text("---\nname: escape\ndescription: x\n---\nprivate notes\n")
    (workspace.skills / "escape.md").symlink_to(outside)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "skilld", "--config", str(config), "mcp"]
    )
    with (workspace.root / "server.err").open("w") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert tools == {"skill_write", "skill_delete", "skill_list", "skill_view"}

            written = structured(
                await session.call_tool(
                    "skill_write",
                    {
                        "name": "run-tests",
                        "description": "How to run the tests.",
                        "whenToUse": "Before every commit.",
                        "content": f"1. export GITHUB_TOKEN={SECRET}\n2. Run `make test`.\n",
                    },
                )
            )
            assert (written["outcome"], written["name"]) == ("created", "run-tests")
            assert written["redacted"] == {"github_token": 1}

            listed = structured(await session.call_tool("skill_list", {}))["skills"]
            rows = {row["name"]: row for row in listed}
            assert rows["run-tests"]["owner"] == "managed" and rows["run-tests"]["managed"]
            assert (rows["run-tests"]["state"], rows["run-tests"]["pinned"]) == (
                "active",
                False,
            )
            assert rows["by-hand"]["owner"] == "human" and not rows["by-hand"]["managed"]

            viewed = await session.call_tool("skill_view", {"name": "run-tests"})
            assert not viewed.is_error
            text = text_of(viewed)
            assert "whenToUse: Before every commit." in text
            assert "[REDACTED:github_token]" in text and SECRET not in text

            refused = await session.call_tool(
                "skill_write",
                {"name": "by-hand", "description": "Taken over.", "content": "1. Theirs."},
            )
            assert refused.is_error and "by-hand is owned by human" in text_of(refused)
            refused = await session.call_tool("skill_delete", {"name": "by-hand"})
            assert refused.is_error and "owned by human" in text_of(refused)
            escaped = await session.call_tool("skill_view", {"name": "escape"})
            assert escaped.is_error and "links out of" in text_of(escaped)
            assert "private notes" not in text_of(escaped)
            missing = await session.call_tool("skill_view", {"name": "no-such-skill"})
            assert missing.is_error and "no skill named no-such-skill" in text_of(missing)
            bad = await session.call_tool(
                "skill_write", {"name": "Bad Name", "description": "x", "content": "1. x"}
            )
            assert bad.is_error and text_of(bad)
            structured(
                await session.call_tool(
                    "skill_write", {"name": "second", "description": "Two.", "content": "2."}
                )
            )
            capped = await session.call_tool(
                "skill_write", {"name": "third", "description": "Three.", "content": "3."}
            )
            assert capped.is_error and "cap of 2 managed skills" in text_of(capped)

            deleted = structured(await session.call_tool("skill_delete", {"name": "second"}))
            assert deleted["deleted"] == "second"
            after = structured(await session.call_tool("skill_list", {}))["skills"]
            assert sorted(row["name"] for row in after) == ["by-hand", "escape", "run-tests"]

    assert "Traceback" not in (workspace.root / "server.err").read_text()
    assert (workspace.skills / "by-hand" / "SKILL.md").read_text().endswith("1. Mine.\n")
    assert not (workspace.skills / "second").exists()
    record = UsageStore(workspace.skills).get("run-tests")
    assert record is not None and record["view_count"] == 1
    state = StateDB(workspace.state / "state.db")
    events = [(e.kind, e.skill, e.source) for e in state.events()]
    state.close()
    assert ("created", "run-tests", "tool") in events
    assert ("deleted", "second", "tool") in events
    assert ("protected", "by-hand", "tool") in events
    assert ("cap", "third", "tool") in events
    assert ("redacted", "run-tests", "tool") in events


def test_without_the_mcp_package_it_exits_1_and_says_what_to_install(
    workspace: Workspace, tmp_path: Path
) -> None:
    shadow = tmp_path / "no-mcp"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text("raise ImportError('mcp is not installed')\n")
    result = workspace.cli("mcp", PYTHONPATH=str(shadow))
    assert result.returncode == 1
    assert "install skilld[mcp]" in result.stderr
    assert result.stdout == ""
