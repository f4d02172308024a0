"""Every agent loads skilld's skills safely and routes them well (issue 26), through the CLI.

Three findings against the real agents, each reproduced here as a user meets it:
1. a skill written for Hermes kept `` !`cmd` `` live, so Hermes with `skills.inline_shell`
   ran it as it loaded the skill (every dialect must break every load-time trigger);
2. Hermes lists only 60 characters of a description, and skilld wrote 1,024 with the
   when-to-use folded at the end, where Hermes never showed it;
3. the agentskills fold read `… Use when A build hangs …`.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from skilld.sync.incoming import LIVE_TRIGGER
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, completion, skill_reply
from tests.synchosts import Host, Person, bare_remote

# Hermes Agent's inline-shell pattern, which `skill_view` runs on a skill's raw text when
# `skills.inline_shell: true` (hermes-agent agent/skill_preprocessing.py, `_INLINE_SHELL_RE`,
# "Matches inline shell snippets like: !`date +%Y-%m-%d`"). It does not skip code fences.
HERMES_INLINE_SHELL = re.compile(r"!`([^`\n]+)`")
# Claude Code's two triggers as its skills documentation gives them ("Inject dynamic context":
# `` !`command` `` inline, and a fence opened with ```` ```! ````); its source is not public,
# and the documented forms are matched on the raw text, fences included.
CLAUDE_INLINE_SHELL = re.compile(r"!`[^`]+`")
CLAUDE_FENCED_SHELL = re.compile(r"^\s*`{3,}!", re.MULTILINE)

COMMAND = "touch ran.txt && date +%F"
LIVE_BODY = f"Today is !`{COMMAND}`.\n\n```!\ntouch fenced.txt\n```\n\n```sh\necho !`id`\n```\n"
#: Each agent's own library, declared by its name (so with its agent's dialect).
LIBRARIES = ("dsh", "claude", "codex", "hermes")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def libraries(workspace: Workspace, fake_llm: FakeLLM) -> Workspace:
    """One workspace with each agent's library (declared by its agent's name) and a jsonl
    source learning into the Hermes library."""
    workspace.llm_url = fake_llm.base_url
    workspace.libraries = [
        {"name": name, "dir": str(workspace.root / f"{name}-skills")} for name in LIBRARIES
    ]
    workspace.sources = [{"kind": "jsonl", "path": str(workspace.sessions), "library": "hermes"}]
    workspace.write_config()
    return workspace


def skill_text(workspace: Workspace, library: str, name: str) -> str:
    return (workspace.root / f"{library}-skills" / name / "SKILL.md").read_text(encoding="utf-8")


def split(text: str) -> tuple[dict[str, Any], str]:
    assert text.startswith("---\n"), text
    head, _, body = text[4:].partition("\n---\n")
    loaded = yaml.safe_load(head)
    assert isinstance(loaded, dict)
    return loaded, body


def assert_no_live_trigger(text: str) -> None:
    assert HERMES_INLINE_SHELL.search(text) is None, text
    assert CLAUDE_INLINE_SHELL.search(text) is None, text
    assert CLAUDE_FENCED_SHELL.search(text) is None, text


def is_hermes_index_line(description: str, name: str) -> bool:
    """One sentence of at most 60 characters ending with a period, without the name."""
    return (
        len(description) <= 60
        and description.endswith(".")
        and re.search(r"[.!?]\s+[A-Z]", description) is None
        and name.replace("-", " ") not in description.lower().replace("-", " ")
    )


# -- finding 1: nothing runs as it loads, in any dialect ----------------------------------------


def test_a_hand_written_skill_never_carries_a_live_trigger_in_any_library(
    libraries: Workspace,
) -> None:
    for library in LIBRARIES:
        result = libraries.cli(
            "skills",
            "write",
            "date-stamp",
            "--library",
            library,
            "--description",
            "Stamp reports with the date !`id`.",
            "--when",
            "A report needs !`whoami` today's date.",
            "--content",
            LIVE_BODY,
        )
        assert result.returncode == 0, (library, result.stderr)
        text = skill_text(libraries, library, "date-stamp")
        assert_no_live_trigger(text)
        # The command stays readable as the same command, in prose and in code.
        assert f"! `{COMMAND}`" in text
        assert "```\\!\ntouch fenced.txt\n```" in text
        assert "echo ! `id`" in text
    assert not (libraries.root / "ran.txt").exists()


def test_a_rollback_never_brings_back_a_live_trigger(libraries: Workspace) -> None:
    # A person's skill with a live trigger, handed to skilld with --force: the person's
    # version is kept in history, and a rollback restores it, byte for byte but the trigger.
    folder = libraries.root / "codex-skills" / "date-stamp"
    folder.mkdir(parents=True)
    mine = (
        "---\nname: date-stamp\ndescription: 'Stamp reports: !`date`'\nlicense: MIT\n---\n"
        + LIVE_BODY
    )
    (folder / "SKILL.md").write_text(mine, encoding="utf-8")
    wrote = libraries.cli(
        "skills", "write", "date-stamp", "--library", "codex", "--force",
        "--description", "Stamp reports with the date.", "--content", "1. Run `date`.\n",
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    rolled = libraries.cli("skills", "rollback", "date-stamp", "--library", "codex")
    assert rolled.returncode == 0, rolled.stderr
    text = skill_text(libraries, "codex", "date-stamp")
    assert_no_live_trigger(text)
    assert text == mine.replace("!`", "! `").replace("```!", "```\\!")
    [event] = libraries.events("rolled_back")
    assert event["skill"] == "date-stamp"


# -- finding 2: each agent's index is a budget ---------------------------------------------------


def test_a_hand_write_over_the_hermes_budget_is_refused_with_the_budget(
    libraries: Workspace,
) -> None:
    description = "Stamp every generated report with today's date before it is sent."
    result = libraries.cli(
        "skills", "write", "date-stamp", "--library", "hermes",
        "--description", description, "--content", "1. Run `date`.\n",
    )  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    over = len(description) - 60
    assert f"description is {len(description)} characters; Hermes's skill index allows 60" in line
    assert f"({over} over)" in line
    assert not (libraries.root / "hermes-skills" / "date-stamp").exists()
    [invalid] = libraries.events("invalid")
    assert invalid["skill"] == "date-stamp"
    # The same description fits the other agents' listings.
    for library in ("dsh", "claude", "codex"):
        ok = libraries.cli(
            "skills", "write", "date-stamp", "--library", library,
            "--description", description, "--content", "1. Run `date`.\n",
        )  # fmt: skip
        assert ok.returncode == 0, (library, ok.stderr)


def test_a_hermes_skill_is_one_index_line_with_its_when_to_use_in_the_body(
    libraries: Workspace,
) -> None:
    result = libraries.cli(
        "skills", "write", "date-stamp", "--library", "hermes",
        "--description", "Stamp reports with today's date.",
        "--when", "A report goes out without a date.",
        "--content", "# Date stamps\n\nWhy.\n\n## Procedure\n\n1. Run `date +%F`.\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    frontmatter, body = split(skill_text(libraries, "hermes", "date-stamp"))
    assert set(frontmatter) == {"name", "description", "metadata"}
    assert frontmatter["description"] == "Stamp reports with today's date."
    assert body == (
        "# Date stamps\n\nWhy.\n\n## When to Use\n\nA report goes out without a date.\n\n"
        "## Procedure\n\n1. Run `date +%F`.\n"
    )
    shown = libraries.cli("skills", "show", "date-stamp", "--library", "hermes")
    assert shown.returncode == 0 and shown.stdout.count("## When to Use") == 1


def test_a_learned_hermes_skill_fits_the_index_after_one_repair(
    libraries: Workspace, fake_llm: FakeLLM
) -> None:
    libraries.add_session("s1", conversation("the stale cache"))
    too_long = (
        "Fix CI builds that fail because a stale dependency cache key survives a lockfile "
        "change. Run !`rm -rf ~/.cache` first."
    )
    first = skill_reply(
        "stale-cache-key", LIVE_BODY, description=too_long, when="When CI restores a cache."
    )
    fixed = skill_reply(
        "stale-cache-key",
        LIVE_BODY,
        description="Fix CI builds broken by a stale cache !`id`.",
        when="When CI restores a cache but the build misses a module.",
    )
    fake_llm.push(first, fixed)
    result = libraries.cli("once")
    assert result.returncode == 0, result.stderr

    reflection, repair = fake_llm.requests
    system = reflection["messages"][0]["content"]
    assert "at most 60 characters, ending with a period, not repeating the skill's name" in system
    assert '"## When to Use"' in system
    asked = repair["messages"][-1]["content"]
    assert f"description is {len(too_long)} characters; Hermes's skill index allows 60" in asked
    assert f"({len(too_long) - 60} over)" in asked

    text = skill_text(libraries, "hermes", "stale-cache-key")
    assert_no_live_trigger(text)
    frontmatter, body = split(text)
    description = frontmatter["description"]
    assert description == "Fix CI builds broken by a stale cache ! `id`."
    assert is_hermes_index_line(description, "stale-cache-key")
    # Hermes's index line for the skill is the whole description.
    assert f"- stale-cache-key: {description[:60]}" == f"- stale-cache-key: {description}"
    assert "\n## When to Use\n\nWhen CI restores a cache but the build misses a module.\n" in (
        "\n" + body
    )
    [created] = libraries.events("created")
    assert created["skill"] == "stale-cache-key"


# -- finding 3: the agentskills fold reads as one sentence ---------------------------------------


def test_the_agentskills_fold_reads_as_one_sentence(
    libraries: Workspace, fake_llm: FakeLLM
) -> None:
    config = libraries.config_path.read_text(encoding="utf-8")
    libraries.config_path.write_text(
        config.replace('library = "hermes"', 'library = "codex"'), encoding="utf-8"
    )
    libraries.add_session("s1", conversation("the hanging build"))
    fake_llm.push(
        skill_reply(
            "unhang-dependency-step",
            description="Unblock a build stuck resolving dependencies",
            when="A build hangs on the dependency step",
        )
    )
    result = libraries.cli("once")
    assert result.returncode == 0, result.stderr
    frontmatter, _ = split(skill_text(libraries, "codex", "unhang-dependency-step"))
    assert frontmatter["description"] == (
        "Unblock a build stuck resolving dependencies. Use when a build hangs on the "
        "dependency step."
    )
    listed = json.loads(libraries.cli("skills", "list", "--library", "codex", "--json").stdout)
    assert [row["name"] for row in listed] == ["unhang-dependency-step"]


def test_the_merge_request_asks_for_the_hermes_budget(
    libraries: Workspace, fake_llm: FakeLLM
) -> None:
    wrote = libraries.cli(
        "skills", "write", "stale-cache-key", "--library", "hermes",
        "--description", "Recover CI builds from an outdated cache.",
        "--when", "CI restores a cache.", "--content", "1. Bump the key.\n",
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    libraries.add_session("s1", conversation("the stale cache"))
    proposal = skill_reply(
        "stale-cache-key",
        "1. Bump the key.\n2. Re-run the job.\n",
        description="Recover CI builds from an outdated cache.",
        when="CI restores a cache and the build fails.",
    )
    merged = Reply(
        body=completion(
            json.dumps(
                {
                    "evolve": True,
                    "name": "stale-cache-key",
                    "description": "Recover CI builds from an outdated cache.",
                    "whenToUse": "CI restores a cache and the build fails.",
                    "content": "1. Bump the key.\n2. Re-run the job.\n",
                    "reason": "Adds the re-run.",
                }
            )
        )
    )
    fake_llm.push(proposal, merged)
    result = libraries.cli("once")
    assert result.returncode == 0, result.stderr
    merge = fake_llm.requests[-1]
    assert "Merge into stale-cache-key" in merge["messages"][1]["content"]
    system = merge["messages"][0]["content"]
    assert "at most 60 characters, ending with a period" in system
    # The current skill is shown with its when-to-use apart from the body, not twice.
    assert "whenToUse: CI restores a cache." in merge["messages"][1]["content"]
    assert "## When to Use" not in merge["messages"][1]["content"]
    text = skill_text(libraries, "hermes", "stale-cache-key")
    assert text.count("## When to Use") == 1
    assert "\n## When to Use\n\nCI restores a cache and the build fails.\n" in text


def test_a_library_in_hermes_dir_under_another_name_writes_for_hermes(
    workspace: Workspace, tmp_path: Path
) -> None:
    hermes_home = tmp_path / "hermes-home"
    workspace.libraries = [
        {"name": "mine", "dir": str(hermes_home / "skills"), "dialect": "agentskills"}
    ]
    workspace.sources = [{"kind": "jsonl", "path": str(workspace.sessions), "library": "mine"}]
    workspace.settings = {}
    workspace.write_config()
    result = workspace.cli(
        "skills", "write", "date-stamp", "--library", "mine",
        "--description", "Stamp every generated report with today's date before it is sent.",
        "--content", "1. Run `date`.\n",
        HERMES_HOME=str(hermes_home),
    )  # fmt: skip
    assert result.returncode == 1
    assert "Hermes's skill index allows 60" in result.stderr


@pytest.mark.anyio
async def test_the_mcp_skill_write_over_the_hermes_budget_is_refused_with_the_budget(
    libraries: Workspace,
) -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import TextContent

    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "skilld", "--config", str(libraries.config_path), "mcp", "--library", "hermes"],
        env=libraries.env(),
    )
    description = "Stamp every generated report with today's date before it is sent."
    with (libraries.root / "server.err").open("w") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            refused = await session.call_tool(
                "skill_write",
                {"name": "date-stamp", "description": description, "content": "1. `date`.\n"},
            )
            written = await session.call_tool(
                "skill_write",
                {
                    "name": "date-stamp",
                    "description": "Stamp reports with the date.",
                    "whenToUse": "A report goes out !`id` undated.",
                    "content": LIVE_BODY,
                },
            )
    message = "".join(b.text for b in refused.content if isinstance(b, TextContent))
    assert refused.is_error
    assert f"Hermes's skill index allows 60 ({len(description) - 60} over)" in message
    assert not written.is_error
    text = skill_text(libraries, "hermes", "date-stamp")
    assert_no_live_trigger(text)
    assert "\n## When to Use\n\nA report goes out ! `id` undated.\n" in text


# -- a team remote brings no live trigger ---------------------------------------------------------


def test_a_remote_commit_bringing_a_live_trigger_is_refused(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    alpha, bravo = (Host(tmp_path, name, remote) for name in ("alpha", "bravo"))
    for host in (alpha, bravo):
        host.repo.setup()
    alpha.write_skill("deploy", "Run the script.")
    assert alpha.repo.sync().error is None
    assert bravo.repo.sync().error is None
    good = bravo.head_tree()

    # A teammate (or an older skilld) pushes a skill an agent would run a command from.
    live = b"---\nname: status\ndescription: Show status.\n---\nNow: !`git status`\n"
    person = Person(tmp_path, remote)
    person.edit("status/SKILL.md", live, "add a status skill")
    report = bravo.repo.sync()
    [refused] = report.refused
    assert (refused.path, refused.why) == ("status/SKILL.md", LIVE_TRIGGER)
    assert report.error == f"refused: status/SKILL.md: {LIVE_TRIGGER}"
    assert bravo.head_tree() == good
    assert not (bravo.skills / "status").exists()
    # status and doctor read the same refusal from the last fetch, with its repair.
    [problem] = bravo.repo.status().problems
    assert problem.code == "refused" and "status/SKILL.md" in problem.message
    assert LIVE_TRIGGER in problem.message

    # Once the remote breaks the trigger, the round goes on.
    person.edit("status/SKILL.md", live.replace(b"!`", b"! `"), "break the trigger")
    assert bravo.repo.sync().error is None
    assert (bravo.skills / "status" / "SKILL.md").read_bytes().count(b"! `git status`") == 1


# -- skills an older skilld wrote ------------------------------------------------------------------


def test_the_daemon_breaks_the_triggers_an_older_skilld_left_in_its_skills(
    libraries: Workspace,
) -> None:
    paths = {}
    for name in ("old-stamp", "pinned-stamp"):
        wrote = libraries.cli(
            "skills", "write", name, "--library", "codex",
            "--description", "Stamp reports with the date.", "--content", "1. Run `date`.\n",
        )  # fmt: skip
        assert wrote.returncode == 0, wrote.stderr
        paths[name] = libraries.root / "codex-skills" / name / "SKILL.md"
    # What skilld wrote before it broke triggers in every dialect: a live trigger in a file it
    # recorded as its own.
    database = sqlite3.connect(libraries.state / "state.db")
    with database:
        for name, path in paths.items():
            live = path.read_bytes().replace(b"1. Run `date`.", b"1. Run !`date`.")
            path.write_bytes(live)
            database.execute(
                "UPDATE provenance SET sha256 = ? WHERE library = 'codex' AND name = ?",
                (hashlib.sha256(live).hexdigest(), name),
            )
    database.close()
    assert libraries.cli("skills", "pin", "pinned-stamp", "--library", "codex").returncode == 0
    pinned_before = paths["pinned-stamp"].read_bytes()
    old_before = paths["old-stamp"].read_bytes()

    result = libraries.cli("once")
    assert result.returncode == 0, result.stderr
    assert paths["old-stamp"].read_bytes() == old_before.replace(b"!`", b"! `")
    assert paths["pinned-stamp"].read_bytes() == pinned_before  # no automatic path moves a pin
    [updated] = [e for e in libraries.events("updated") if e["source"] == "daemon"]
    assert (updated["skill"], updated["reason"]) == ("old-stamp", "load-time shell triggers broken")
    [warning] = libraries.events("warning")
    assert warning["skill"] == "pinned-stamp" and "shell trigger" in warning["reason"]
    rows = json.loads(libraries.cli("skills", "list", "--library", "codex", "--json").stdout)
    assert {row["name"]: row["owner"] for row in rows}["old-stamp"] == "managed"
    history = libraries.cli("skills", "history", "old-stamp", "--library", "codex")
    assert history.returncode == 0 and history.stdout.strip()


def test_a_single_skills_dir_in_hermes_dir_writes_for_hermes(
    workspace: Workspace, tmp_path: Path
) -> None:
    hermes_home = tmp_path / "hermes-home"
    workspace.settings = {"skills": {"dir": str(hermes_home / "skills"), "dialect": "agentskills"}}
    workspace.write_config()
    result = workspace.cli(
        "skills", "write", "date-stamp",
        "--description", "Stamp every generated report with today's date before it is sent.",
        "--content", "1. Run `date`.\n",
        HERMES_HOME=str(hermes_home),
    )  # fmt: skip
    assert result.returncode == 1
    assert "Hermes's skill index allows 60" in result.stderr
