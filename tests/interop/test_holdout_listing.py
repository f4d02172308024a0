"""A withheld skill is in no request (DESIGN.md §14): Claude Code and Codex, given the skill in
the folder the holdout withholds it to, send a first request without it; moved back, with it.

The move is the holdout's own (`fsutil.move_in_tree` to `WITHHELD_DIR`); what is checked is
what the real agent reads, so a loader that looked into dot-folders would fail here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from skilld.curator.holdout import WITHHELD_DIR
from skilld.fsutil import move_in_tree
from tests.interop.conftest import Agents, Home, claude_env, codex_env, run_agent, strings
from tests.interop.loopback import AnthropicModel, ResponsesModel
from tests.interop.test_listing import NAME, write_skill

pytestmark = pytest.mark.interop


def mentions(body: object) -> bool:
    return any(f"- {NAME}:" in text for text in strings(body))


def claude_request(agents: Agents, home: Home) -> object:
    with AnthropicModel() as model:
        result = run_agent(
            [str(agents.claude), "-p", "hello"], home, claude_env(home, model.origin)
        )
    assert result.returncode == 0, result.stderr
    assert model.requests, f"Claude Code sent no model request: {result.stderr}"
    return model.requests[0].body


def codex_request(agents: Agents, home: Home) -> object:
    with ResponsesModel() as model:
        result = run_agent(
            [str(agents.codex), "exec", "hello"], home, codex_env(home, model.origin)
        )
    assert result.returncode == 0, result.stderr
    assert model.requests, f"Codex sent no model request: {result.stderr}"
    return model.requests[0].body


def withheld_then_present(root: Path, request: Callable[[], object]) -> tuple[bool, bool]:
    """(listed on a withheld day, listed on a present day)."""
    move_in_tree(root, NAME, f"{WITHHELD_DIR}/{NAME}")
    assert (root / WITHHELD_DIR / NAME / "SKILL.md").is_file() and not (root / NAME).exists()
    withheld = mentions(request())
    move_in_tree(root, f"{WITHHELD_DIR}/{NAME}", NAME)
    return withheld, mentions(request())


def test_claude_code_does_not_list_a_withheld_skill(agents: Agents, home: Home) -> None:
    (home.root / ".claude/projects").mkdir(parents=True)
    write_skill(home, "claude")
    root = home.root / ".claude/skills"
    assert withheld_then_present(root, lambda: claude_request(agents, home)) == (False, True)


def test_codex_does_not_list_a_withheld_skill(agents: Agents, home: Home) -> None:
    (home.root / ".codex/sessions").mkdir(parents=True)
    write_skill(home, "codex")
    root = home.root / ".agents/skills"
    assert withheld_then_present(root, lambda: codex_request(agents, home)) == (False, True)
