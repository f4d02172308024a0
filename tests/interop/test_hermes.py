"""Hermes Agent's own skill tools, from its PyPI wheel, on skills skilld wrote (issue 26):
`skills_list` and `skill_view` return them, the system prompt's skill index shows the whole
description, and with `skills.inline_shell: true` loading a skill runs nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import Agents, Home, frontmatter

pytestmark = pytest.mark.interop

PROBE = Path(__file__).with_name("hermes_probe.py")
#: Hermes's system-prompt index cuts a description here (agent/prompt_builder.py).
HERMES_INDEX_CHARS = 60


def hermes_home(home: Home, *, inline_shell: bool = False) -> Path:
    """`~/.hermes` where Hermes has run (its state.db exists, so skilld finds the library)."""
    root = home.root / ".hermes"
    root.mkdir(parents=True, exist_ok=True)
    (root / "state.db").touch()
    if inline_shell:
        (root / "config.yaml").write_text("skills:\n  inline_shell: true\n", encoding="utf-8")
    return root


def probe(agents: Agents, home: Home, name: str) -> dict[str, Any]:
    """What Hermes's skills_list, skill_view(name) and skill index show, run by Hermes's own
    interpreter in the home's project directory."""
    result = subprocess.run(
        [str(agents.hermes_python), str(PROBE), name],
        env=home.env(HERMES_HOME=str(home.root / ".hermes")),
        cwd=home.project,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert isinstance(seen, dict)
    return seen


def index_line(index: str, name: str) -> str:
    (line,) = [line.strip() for line in index.splitlines() if line.strip().startswith(f"- {name}:")]
    return line


def test_hermes_lists_and_loads_a_skill_skilld_wrote(agents: Agents, home: Home) -> None:
    hermes_home(home)
    home.skilld(
        "skills", "write", "stale-cache-key", "--library", "hermes",
        "--description", "Clear the stale cache key that breaks CI builds.",
        "--when", "CI fails right after a dependency bump.",
        "--content", "1. Bump the cache key in ci.yml.\n2. Rerun the job.\n",
    )  # fmt: skip
    (skill,) = home.skills("hermes")
    written = frontmatter(Path(skill["path"]))

    seen = probe(agents, home, "stale-cache-key")

    listed = {entry["name"]: entry for entry in seen["list"]["skills"]}
    assert listed["stale-cache-key"]["description"] == written["description"]
    view = seen["view"]
    assert view["success"] is True
    assert "1. Bump the cache key in ci.yml." in view["content"]
    assert view["metadata"]["managed-by"] == "skilld"


def test_hermes_index_line_is_the_whole_description(agents: Agents, home: Home) -> None:
    hermes_home(home)
    home.skilld(
        "skills", "write", "edge-colon", "--library", "hermes",
        "--description", "Fix the build when a stale cache key breaks it.",
        "--when", "CI says the lockfile and the cache disagree.",
        "--content", "1. Bump the cache key.\n2. Rerun the build.\n",
    )  # fmt: skip
    (skill,) = home.skills("hermes")
    description = frontmatter(Path(skill["path"]))["description"]

    line = index_line(probe(agents, home, "edge-colon")["index"], "edge-colon")

    assert line == f"- edge-colon: {description}", line
    assert len(description) <= HERMES_INDEX_CHARS
    assert description.endswith(".")


def test_hermes_inline_shell_runs_nothing_in_a_skill_skilld_wrote(
    agents: Agents, home: Home
) -> None:
    hermes_home(home, inline_shell=True)
    home.skilld(
        "skills", "write", "today-date", "--library", "hermes",
        "--description", "Put today's date in a release note.",
        "--content", "Today is !`touch ran.txt && date +%F`.",
    )  # fmt: skip

    seen = probe(agents, home, "today-date")

    assert seen["view"]["success"] is True
    assert "Today is" in seen["view"]["content"]
    assert not list(home.root.rglob("ran.txt")), "Hermes ran the skill's inline shell"
