"""Claude Code and Codex list a skill skilld wrote, with its description, in the first request
they send to the model (issue 26)."""

from __future__ import annotations

from pathlib import Path

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
UPDATED = "Rerun a flaky network test twice, then report it with both logs."
CONTENT = "1. Rerun the one test with `-k`.\n2. Report it only if it fails again.\n"


def write_skill(home: Home, library: str, description: str = DESCRIPTION) -> str:
    """Writes (or updates) the skill through the CLI; returns the description as written."""
    result = home.skilld(
        "skills", "write", NAME, "--library", library,
        "--description", description, "--when", WHEN, "--content", CONTENT,
    )  # fmt: skip
    assert f" {NAME} " in result.stdout, result.stdout
    (listed,) = [skill for skill in home.skills(library) if skill["name"] == NAME]
    assert listed["owner"] == "managed"
    written = frontmatter(Path(listed["path"]))["description"]
    assert isinstance(written, str)
    return written


def claude_listing(agents: Agents, home: Home) -> str:
    """The line for the skill in the first request of a `claude -p` run."""
    with AnthropicModel() as model:
        result = run_agent(
            [str(agents.claude), "-p", "hello"], home, claude_env(home, model.origin)
        )
    assert result.returncode == 0, result.stderr
    assert model.requests, f"Claude Code sent no model request: {result.stderr}"
    return listing_line(model.requests[0].body, NAME)


def codex_listing(agents: Agents, home: Home) -> str:
    """The line for the skill in the first request of a `codex exec` run."""
    with ResponsesModel() as model:
        result = run_agent(
            [str(agents.codex), "exec", "hello"], home, codex_env(home, model.origin)
        )
    assert result.returncode == 0, result.stderr
    assert model.requests, f"Codex sent no model request: {result.stderr}"
    return listing_line(model.requests[0].body, NAME)


def test_claude_code_lists_the_skill_in_its_first_request(agents: Agents, home: Home) -> None:
    (home.root / ".claude/projects").mkdir(parents=True)
    description = write_skill(home, "claude")
    assert (home.root / f".claude/skills/{NAME}/SKILL.md").is_file()

    line = claude_listing(agents, home)
    assert line.startswith(f"- {NAME}: {description}"), line

    updated = write_skill(home, "claude", UPDATED)
    line = claude_listing(agents, home)
    assert line.startswith(f"- {NAME}: {updated}"), line


def test_codex_lists_the_skill_in_its_first_request(agents: Agents, home: Home) -> None:
    (home.root / ".codex/sessions").mkdir(parents=True)
    description = write_skill(home, "codex")
    assert (home.root / f".agents/skills/{NAME}/SKILL.md").is_file()

    line = codex_listing(agents, home)
    assert line.startswith(f"- {NAME}: {description} (file: "), line
    # The when-to-use folded into the description reads as one sentence.
    assert f"Use when {WHEN[0].lower()}{WHEN[1:]}" in line, line

    updated = write_skill(home, "codex", UPDATED)
    line = codex_listing(agents, home)
    assert line.startswith(f"- {NAME}: {updated} (file: "), line
