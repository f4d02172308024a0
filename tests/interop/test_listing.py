"""Claude Code and Codex list a skill skilld wrote, with its description, in the first request
they send to the model (issue 26)."""

from __future__ import annotations

import pytest

from tests.interop.conftest import (
    Agents,
    Home,
    claude_env,
    codex_env,
    frontmatter,
    listing_line,
    run_agent,
)
from tests.interop.loopback import AnthropicModel, ResponsesModel

pytestmark = pytest.mark.interop

NAME = "flaky-network-test"
DESCRIPTION = "Rerun a flaky network test once before reporting it as failed."
WHEN = "A test fails with a connection timeout."
CONTENT = "1. Rerun the one test with `-k`.\n2. Report it only if it fails again.\n"


def write_skill(home: Home, library: str) -> str:
    """Writes the skill through the CLI; returns the description as written to the file."""
    result = home.skilld(
        "skills", "write", NAME, "--library", library,
        "--description", DESCRIPTION, "--when", WHEN, "--content", CONTENT,
    )  # fmt: skip
    assert f"created {NAME}" in result.stdout
    (listed,) = [skill for skill in home.skills(library) if skill["name"] == NAME]
    assert listed["owner"] == "managed"
    from pathlib import Path

    description = frontmatter(Path(listed["path"]))["description"]
    assert isinstance(description, str)
    return description


def test_claude_code_lists_the_skill_in_its_first_request(agents: Agents, home: Home) -> None:
    (home.root / ".claude/projects").mkdir(parents=True)
    description = write_skill(home, "claude")
    assert (home.root / f".claude/skills/{NAME}/SKILL.md").is_file()

    with AnthropicModel() as model:
        env = claude_env(home, model.origin)
        result = run_agent([str(agents.claude), "-p", "hello"], home, env)
    assert result.returncode == 0, result.stderr
    assert model.requests, f"Claude Code sent no model request: {result.stderr}"

    line = listing_line(model.requests[0].body, NAME)
    assert line.startswith(f"- {NAME}: {description}"), line


def test_codex_lists_the_skill_in_its_first_request(agents: Agents, home: Home) -> None:
    (home.root / ".codex/sessions").mkdir(parents=True)
    description = write_skill(home, "codex")
    assert (home.root / f".agents/skills/{NAME}/SKILL.md").is_file()

    with ResponsesModel() as model:
        env = codex_env(home, model.origin)
        result = run_agent([str(agents.codex), "exec", "hello"], home, env)
    assert result.returncode == 0, result.stderr
    assert model.requests, f"Codex sent no model request: {result.stderr}"

    line = listing_line(model.requests[0].body, NAME)
    assert line.startswith(f"- {NAME}: {description} (file: "), line
