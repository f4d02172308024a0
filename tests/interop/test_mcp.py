"""skilld's MCP server as Claude Code and Codex use it, configured as docs/mcp.md says (issue
27): the first model request offers skilld's tools, and a tool call the model makes writes a
skill into that agent's library that skilld owns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import (
    CODEX_RUNS,
    Agents,
    Home,
    claude_env,
    codex_env,
    documented_claude_allowed_tools,
    documented_claude_mcp_add,
    documented_claude_permissions,
    documented_codex_exec_overrides,
    documented_codex_table,
    run_agent,
    strings,
)
from tests.interop.loopback import AnthropicModel, Captured, ResponsesModel, Text, ToolCall

pytestmark = pytest.mark.interop

TOOLS = ("skill_list", "skill_view", "skill_write", "skill_delete")
CLAUDE_TOOLS = {f"mcp__skilld__{tool}" for tool in TOOLS}
CODEX_NAMESPACE = "mcp__skilld"
CODEX_TOOLS = {f"{CODEX_NAMESPACE}.{tool}" for tool in TOOLS}
WRITE = {
    "name": "retry-flaky-fetch",
    "description": "Retry a flaky fetch once before failing the build.",
    "content": "1. Rerun the fetch step once.\n2. Fail only if it fails again.\n",
    "whenToUse": "A fetch step fails with a timeout.",
}


def assert_owned_by_skilld(home: Home, library: str, skill_file: Path) -> None:
    """The skill the agent's tool call wrote: on disk, managed, created by the tool."""
    assert skill_file.is_file()
    assert "1. Rerun the fetch step once." in skill_file.read_text(encoding="utf-8")
    listed = {skill["name"]: skill for skill in home.skills(library)}
    assert listed[WRITE["name"]]["owner"] == "managed"
    assert Path(listed[WRITE["name"]]["path"]) == skill_file
    created = [event for event in home.events("created") if event["skill"] == WRITE["name"]]
    assert [(event["library"], event["source"]) for event in created] == [(library, "tool")]


# Claude Code


def claude_offered(captured: Captured) -> set[str]:
    """skilld's tools a Claude Code request offers: loaded, or named as deferred tools the
    model loads through ToolSearch."""
    names = {str(tool.get("name")) for tool in captured.body.get("tools", [])}
    names |= {line.strip() for text in strings(captured.body) for line in text.splitlines()}
    return names & CLAUDE_TOOLS


def claude_with_skilld(agents: Agents, home: Home, origin: str) -> dict[str, str]:
    """Claude Code with skilld registered as docs/mcp.md says, in a home where it has run."""
    (home.root / ".claude/projects").mkdir(parents=True)
    env = claude_env(home, origin)
    added = run_agent([str(agents.claude), *documented_claude_mcp_add()[1:]], home, env)
    assert added.returncode == 0, added.stderr
    return env


def tool_results(captured: Captured) -> list[dict[str, Any]]:
    """The tool results a Claude Code request sends back to the model."""
    content = captured.body["messages"][-1]["content"]
    return [block for block in content if block.get("type") == "tool_result"]


def test_claude_code_offers_skilld_tools_and_writes_a_skill_through_them(
    agents: Agents, home: Home
) -> None:
    """The unattended recipe: `claude mcp add`, then `claude -p` naming the tools it may use."""
    script = [
        # Claude Code defers MCP tools behind ToolSearch: the model loads the one it calls.
        ToolCall("ToolSearch", {"query": "select:mcp__skilld__skill_write"}),
        ToolCall("mcp__skilld__skill_write", WRITE),
        Text("Saved the skill."),
    ]
    with AnthropicModel(script=script) as model:
        env = claude_with_skilld(agents, home, model.origin)
        result = run_agent(
            [str(agents.claude), "-p", "Save what we learned as a skill.",
             *documented_claude_allowed_tools()],
            home, env,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(model.requests) == 3, result.stdout

    assert claude_offered(model.requests[0]) == CLAUDE_TOOLS
    (written,) = tool_results(model.requests[2])
    assert not written.get("is_error"), written
    assert_owned_by_skilld(home, "claude", home.root / f".claude/skills/{WRITE['name']}/SKILL.md")


def test_claude_code_documented_permissions_let_reads_through_and_hold_writes(
    agents: Agents, home: Home
) -> None:
    """The permissions docs/mcp.md gives: a read runs without asking, a write waits for a
    person, so under `claude -p` (no one to ask) it is refused and nothing is written."""
    permissions = documented_claude_permissions()
    assert permissions is not None, "docs/mcp.md gives no Claude Code permissions"
    (home.root / ".claude").mkdir(parents=True)
    (home.root / ".claude/settings.json").write_text(json.dumps(permissions), encoding="utf-8")
    script = [
        ToolCall(
            "ToolSearch", {"query": "select:mcp__skilld__skill_list,mcp__skilld__skill_write"}
        ),
        ToolCall("mcp__skilld__skill_list", {}),
        ToolCall("mcp__skilld__skill_write", WRITE),
        Text("Done."),
    ]
    with AnthropicModel(script=script) as model:
        env = claude_with_skilld(agents, home, model.origin)
        home.skilld(
            "skills", "write", "pin-the-toolchain", "--library", "claude",
            "--description", "Pin the toolchain version before a release build.",
            "--content", "1. Set the version in rust-toolchain.toml.\n",
        )  # fmt: skip
        result = run_agent([str(agents.claude), "-p", "Which skills do we have?"], home, env)
    assert result.returncode == 0, result.stderr
    assert len(model.requests) == 4, result.stdout

    (listed,) = tool_results(model.requests[2])
    assert not listed.get("is_error"), listed
    assert "pin-the-toolchain" in "\n".join(strings(listed["content"]))
    (refused,) = tool_results(model.requests[3])
    assert refused.get("is_error"), refused
    assert not (home.root / f".claude/skills/{WRITE['name']}").exists()
    assert [skill["name"] for skill in home.skills("claude")] == ["pin-the-toolchain"]


# Codex


def codex_with_skilld(home: Home, origin: str, *, approvals: bool = True) -> dict[str, str]:
    """Codex with `[mcp_servers.skilld]` exactly as docs/mcp.md gives it (no `required`), in
    a home where it has run; without `approvals`, less its per-tool `tools` tables, so that
    Codex decides from the tools' annotations alone."""
    (home.root / ".codex/sessions").mkdir(parents=True, exist_ok=True)
    table = documented_codex_table()
    assert "required" not in table
    if not approvals:
        table.pop("tools", None)
    return codex_env(home, origin, mcp=table)


def codex_outputs(model: ResponsesModel) -> list[str]:
    return ["\n".join(strings(item.get("output"))) for item in model.function_outputs()]


def test_codex_offers_skilld_tools_in_its_first_request_every_time(
    agents: Agents, home: Home, request: pytest.FixtureRequest
) -> None:
    runs = int(request.config.getoption("--codex-runs", default=CODEX_RUNS))
    offered = []
    for _ in range(runs):
        with ResponsesModel() as model:
            env = codex_with_skilld(home, model.origin)
            result = run_agent([str(agents.codex), "exec", "hello"], home, env)
        assert result.returncode == 0, result.stderr
        offered.append(CODEX_TOOLS.issubset(model.tool_names(model.requests[0])))
    assert offered.count(True) == runs, f"skilld's tools offered in {offered.count(True)}/{runs}"


@pytest.mark.parametrize("approvals", [True, False], ids=["documented", "annotations-only"])
def test_codex_runs_skill_list_under_exec_without_approval(
    agents: Agents, home: Home, approvals: bool
) -> None:
    (home.root / ".codex/sessions").mkdir(parents=True)
    home.skilld(
        "skills", "write", "pin-the-toolchain", "--library", "codex",
        "--description", "Pin the toolchain version before a release build.",
        "--content", "1. Set the version in rust-toolchain.toml.\n",
    )  # fmt: skip
    script: list[Any] = [ToolCall("skill_list", {}, namespace=CODEX_NAMESPACE), Text("Listed.")]
    with ResponsesModel(script=script) as model:
        env = codex_with_skilld(home, model.origin, approvals=approvals)
        result = run_agent([str(agents.codex), "exec", "Which skills do we have?"], home, env)
    assert result.returncode == 0, result.stderr

    (output,) = codex_outputs(model)
    assert "requires approval" not in output, output
    assert "pin-the-toolchain" in output, output


def test_codex_writes_a_skill_through_skilld_tool(agents: Agents, home: Home) -> None:
    script: list[Any] = [ToolCall("skill_write", WRITE, namespace=CODEX_NAMESPACE), Text("Saved.")]
    with ResponsesModel(script=script) as model:
        env = codex_with_skilld(home, model.origin)
        result = run_agent(
            [str(agents.codex), "exec", *documented_codex_exec_overrides(),
             "Save what we learned as a skill."],
            home, env,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr

    (output,) = codex_outputs(model)
    assert "requires approval" not in output, output
    assert_owned_by_skilld(home, "codex", home.root / f".agents/skills/{WRITE['name']}/SKILL.md")
