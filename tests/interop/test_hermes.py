"""Hermes Agent's own skill tools, from its PyPI wheel, on skills skilld wrote (issue 26):
`skills_list` and `skill_view` return them, the system prompt's skill index shows the whole
description, and with `skills.inline_shell: true` loading a skill runs nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakellm import FakeLLM, skill_reply
from tests.interop.conftest import REPO, Agents, Home, frontmatter

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
        "--description", "Clear the old cache key that breaks CI builds.",
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
    hermes = hermes_home(home, inline_shell=True)
    # The control: with this config, home and working directory, Hermes does run a live
    # trigger a person wrote by hand (else the assertion below would prove nothing).
    control = hermes / "skills" / "hand-written"
    control.mkdir(parents=True)
    (control / "SKILL.md").write_text(
        "---\nname: hand-written\ndescription: Written by a person.\n---\n"
        "Today is !`touch ran.txt && date +%F`.\n",
        encoding="utf-8",
    )
    assert probe(agents, home, "hand-written")["view"]["success"] is True
    markers = list(home.root.rglob("ran.txt"))
    assert markers, "the control failed: Hermes ran no inline shell with this config"
    for marker in markers:
        marker.unlink()
    shutil.rmtree(control)
    home.skilld(
        "skills", "write", "today-date", "--library", "hermes",
        "--description", "Put today's date in a release note.",
        "--content", "Today is !`touch ran.txt && date +%F`.",
    )  # fmt: skip

    seen = probe(agents, home, "today-date")

    assert seen["view"]["success"] is True
    assert "Today is" in seen["view"]["content"]
    assert not list(home.root.rglob("ran.txt")), "Hermes ran the skill's inline shell"


def test_hermes_index_shows_a_skill_learned_from_the_example_session_whole(
    agents: Agents, home: Home, fake_llm: FakeLLM
) -> None:
    """The example Hermes session (examples/make_hermes_db.py) learned with no config but the
    model's: the model first proposes a description as long as models write them; whatever
    skilld writes, Hermes's index line for it is the whole description."""
    hermes = hermes_home(home)
    made = subprocess.run(
        [sys.executable, str(REPO / "examples/make_hermes_db.py"), str(hermes / "state.db")],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    config = home.root / ".config/skilld/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[evolve]\nbackfill = "all"\ncooldown_seconds = 0\n\n'
        f'[llm]\nbase_url = "{fake_llm.base_url}"\nmodel = "loopback"\n'
        'api_key_env = "SKILLD_INTEROP_KEY"\n',
        encoding="utf-8",
    )
    content = (
        "1. Read nginx's error log: `upstream prematurely closed connection` points at the app.\n"
        "2. grep gunicorn's journal for `WORKER TIMEOUT`.\n"
        "3. Raise gunicorn's `--timeout` to nginx's `proxy_read_timeout`; restart both.\n"
    )
    when = "nginx answers 502 now and then and its log says the upstream closed the connection."
    fake_llm.push(
        skill_reply(
            "gunicorn-timeout-502",
            content,
            description="Diagnose intermittent nginx 502 errors caused by gunicorn worker "
            "timeouts on slow endpoints such as large exports.",
            when=when,
        ),
        skill_reply(
            "gunicorn-timeout-502",
            content,
            description="Fix nginx 502s from gunicorn worker timeouts.",
            when=when,
        ),
    )

    home.skilld("once", SKILLD_INTEROP_KEY="sk-interop-loopback")

    (skill,) = home.skills("hermes")
    assert skill["name"] == "gunicorn-timeout-502"
    description = frontmatter(Path(skill["path"]))["description"]
    line = index_line(probe(agents, home, "gunicorn-timeout-502")["index"], skill["name"])
    assert line == f"- gunicorn-timeout-502: {description}", line
