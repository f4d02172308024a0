"""Libraries and scope (DESIGN.md §9) through the CLI, as subprocesses, against a loopback LLM.

One HOME holds what four agents leave on a machine: a Claude Code project, a Codex rollout, a
DeepSeek Harness zstd session and a Hermes `state.db`. With no config file at all, skilld must
learn each agent's skills into the library that agent loads, in its dialect, and nowhere else.
The fake LLM answers per request by the session the window comes from.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply
from tests.test_dsh import DshSession
from tests.test_sources import Hermes

#: CLI arguments, optionally ending with environment variables of their own.
Command = tuple[str | dict[str, str], ...]
#: The first line of a reflection request's user message names its session and source kind.
REFLECTION = re.compile(r"^Session (\S+) \((\S+)\), messages")


# -- what the agents leave on disk ------------------------------------------------------------


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return path


def claude_session(home: Path, session_id: str, cwd: Path | str, topic: str) -> Path:
    """A finished Claude Code session in `cwd`: a request, a Bash call, its result, an answer."""
    folder = home / ".claude" / "projects" / str(cwd).replace("/", "-")
    envelope = {"sessionId": session_id, "cwd": str(cwd), "version": "2.1.12", "userType": "x"}
    stamp = "2026-01-20T11:57:{:02d}.000Z"

    def record(index: int, kind: str, message: dict[str, Any]) -> dict[str, Any]:
        return {
            **envelope,
            "type": kind,
            "uuid": f"{session_id}-{index}",
            "timestamp": stamp.format(index),
            "message": message,
        }

    def assistant(index: int, *content: dict[str, Any]) -> dict[str, Any]:
        message = {"id": f"msg_{index}", "role": "assistant", "content": list(content)}
        return record(index, "assistant", {**message, "model": "claude-opus-4-5"})

    call = {"type": "tool_use", "id": f"toolu_{session_id}", "name": "Bash"}
    return write_jsonl(
        folder / f"{session_id}.jsonl",
        [
            record(0, "user", {"role": "user", "content": f"Please fix {topic}."}),
            assistant(1, {**call, "input": {"command": "make test"}}),
            record(
                2,
                "user",
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call["id"], "content": "2 passed"}
                    ],
                },
            ),
            assistant(3, {"type": "text", "text": f"Fixed {topic}: run make test first."}),
        ],
    )


def codex_rollout(home: Path, rollout_id: str, cwd: Path | str, topic: str) -> Path:
    def item(**payload: Any) -> dict[str, Any]:
        return {
            "timestamp": "2025-10-29T00:59:38.317Z",
            "type": "response_item",
            "payload": payload,
        }

    def text(role: str, words: str) -> dict[str, Any]:
        block = "output_text" if role == "assistant" else "input_text"
        return item(type="message", role=role, content=[{"type": block, "text": words}])

    meta = {"id": rollout_id, "timestamp": "2025-10-29T00:59:38.308Z", "cwd": str(cwd)}
    name = f"rollout-2025-10-29T00-59-38-{rollout_id}.jsonl"
    return write_jsonl(
        home / ".codex" / "sessions" / "2025" / "10" / "29" / name,
        [
            {"timestamp": "2025-10-29T00:59:38.308Z", "type": "session_meta", "payload": meta},
            text("user", f"Please fix {topic}."),
            item(
                type="function_call",
                name="shell",
                arguments='{"command":["make","test"]}',
                call_id="call_1",
            ),
            item(type="function_call_output", call_id="call_1", output="2 passed"),
            text("assistant", f"Fixed {topic}: run make test first."),
        ],
    )


def dsh_session(dsh_home: Path, session_id: str, cwd: Path | str, topic: str) -> DshSession:
    project = "--" + str(cwd).strip("/").replace("/", "-") + "--"
    session = DshSession(dsh_home / "sessions", session_id, project=project, cwd=str(cwd))
    session.append(*session.simple_turn(f"Please fix {topic}.", f"Fixed {topic}: make test."))
    return session


def hermes_session(hermes_home: Path, session_id: str, topic: str) -> None:
    hermes_home.mkdir(parents=True, exist_ok=True)
    database = Hermes(hermes_home / "state.db")
    try:
        database.session(session_id)
        database.message(session_id, "user", f"Please fix {topic}.")
        database.message(session_id, "assistant", f"Fixed {topic}: run make test first.")
    finally:
        database.close()


# -- the machine ------------------------------------------------------------------------------


@dataclass
class Machine:
    """One user's machine: HOME with the agents' files, skilld's XDG dirs, the LLM's address."""

    root: Path
    llm: FakeLLM
    config: Path | None = None

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def dsh_home(self) -> Path:
        return self.root / "dsh-home"

    @property
    def hermes_home(self) -> Path:
        return self.root / "hermes-home"

    @property
    def state(self) -> Path:
        return self.root / "xdg-state" / "skilld"

    @property
    def skill_dirs(self) -> dict[str, Path]:
        """Each agent's own library, where the agent loads its skills."""
        return {
            "claude": self.home / ".claude" / "skills",
            "codex": self.home / ".agents" / "skills",
            "dsh": self.dsh_home / "skills",
            "hermes": self.hermes_home / "skills",
        }

    def env(self, **extra: str) -> dict[str, str]:
        drop = ("SKILLD_", "XDG_", "DSH_", "HERMES_", "CLAUDE_", "CODEX_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        (self.root / "xdg-config").mkdir(parents=True, exist_ok=True)
        env.update(
            HOME=str(self.home),
            DSH_HOME=str(self.dsh_home),
            HERMES_HOME=str(self.hermes_home),
            XDG_CONFIG_HOME=str(self.root / "xdg-config"),
            XDG_STATE_HOME=str(self.root / "xdg-state"),
            XDG_DATA_HOME=str(self.root / "xdg-data"),
            XDG_CACHE_HOME=str(self.root / "xdg-cache"),
            PYTHONUNBUFFERED="1",
            # Not a config file: the scalar overrides every installation may set.
            SKILLD_LLM_BASE_URL=self.llm.base_url,
            SKILLD_LLM_MODEL="test-model",
            SKILLD_LLM_TIMEOUT_SECONDS="5",
            SKILLD_LLM_MAX_RETRIES="1",
            SKILLD_EVOLVE_COOLDOWN_SECONDS="0",
            SKILLD_EVOLVE_MIN_MESSAGES="2",
            SKILLD_EVOLVE_BACKFILL="all",
            SKILLD_LOG_FORMAT="json",
        )
        if self.config is not None:
            env["SKILLD_CONFIG"] = str(self.config)
        env.update(extra)
        return env

    def cli(
        self, *args: str, stdin: str | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "skilld", *args],
            input=stdin,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.root,
        )

    def many(self, *commands: Command) -> list[subprocess.CompletedProcess[str]]:
        """Commands run side by side (each one is a Python start-up): independent ones only.
        A command may end with a dict of environment variables of its own."""
        running = []
        for command in commands:
            env = command[-1] if isinstance(command[-1], dict) else {}
            args = [part for part in command if isinstance(part, str)]
            process = subprocess.Popen(
                [sys.executable, "-m", "skilld", *args],
                env=self.env(**env),
                cwd=self.root,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            running.append((args, process))
        results = []
        for args, process in running:
            out, err = process.communicate(timeout=60)
            results.append(subprocess.CompletedProcess(args, process.returncode, out, err))
        return results

    def all_ok(self, *commands: Command) -> list[str]:
        results = self.many(*commands)
        for result in results:
            assert result.returncode == 0, (result.args, result.stdout, result.stderr)
        return [result.stdout for result in results]

    def ok(self, *args: str, **env: str) -> str:
        result = self.cli(*args, **env)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        args = ["events", "--json"]
        for kind in kinds:
            args += ["--kind", kind]
        return [json.loads(line) for line in self.ok(*args).splitlines() if line.strip()]

    def write_config(self, text: str) -> Path:
        self.config = self.root / "config.toml"
        self.config.write_text(text, encoding="utf-8")
        return self.config


@pytest.fixture
def machine(tmp_path: Path, fake_llm: FakeLLM) -> Machine:
    for folder in ("home", "xdg-config"):
        (tmp_path / folder).mkdir()
    return Machine(tmp_path, fake_llm)


def proposal(name: str, content: str | None = None, **fields: str) -> Reply:
    """An evolve reply with a body of its own (skills of one library must not look alike)."""
    body = content or f"1. Run `make test` for {name}.\n2. Read the failures.\n"
    return skill_reply(name, body, **fields)


def by_session(replies: dict[str, Reply]) -> Callable[[dict[str, Any]], Reply]:
    """A responder: the reply for the session (key, or source kind) a reflection comes from."""

    def respond(request: dict[str, Any]) -> Reply:
        user = request["messages"][1]["content"]
        match = REFLECTION.match(user)
        if match is None:
            return skip_reply("not a reflection")
        key, kind = match.groups()
        return replies.get(key) or replies.get(kind) or skip_reply()

    return respond


def reflections(llm: FakeLLM) -> dict[str, dict[str, Any]]:
    """The reflection requests the server received, by session key."""
    found = {}
    for request in llm.requests:
        match = REFLECTION.match(request["messages"][1]["content"])
        if match is not None:
            found[match.group(1)] = request
    return found


def frontmatter(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), text
    head, _, _ = text[4:].partition("\n---\n")
    loaded = yaml.safe_load(head)
    assert isinstance(loaded, dict)
    return loaded


def skill_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.md") if ".archive" not in path.parts)


# -- zero config: every agent learns into its own library ---------------------------------------

CLAUDE_ID = "c0ffee00-0000-4000-8000-000000000001"
CODEX_ID = "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"
DSH_ID = "01JXQ7M2K9R4T6V8W0Y2Z4B6D8"
HERMES_ID = "20260101_a"
#: Each agent's library -> (the session key its transcript gets, the skill its window teaches).
AGENT_SKILLS = {
    "claude": (f"claude-code:{CLAUDE_ID}", "alembic-enum-migration"),
    "codex": (f"codex:{CODEX_ID}", "docker-layer-cache"),
    "dsh": (f"dsh:{DSH_ID}", "pypi-release-check"),
    "hermes": (f"hermes:{HERMES_ID}", "gunicorn-timeout-502"),
}
#: Distinct skills (one library may hold them all, and near-duplicates would merge).
TEACHES = {
    "alembic-enum-migration": (
        "Ship a new Postgres enum value with Alembic.",
        "1. `alembic revision -m add-value`.\n2. `ALTER TYPE ... ADD VALUE`.\n",
    ),
    "docker-layer-cache": (
        "Keep npm ci cached across Docker rebuilds.",
        "1. COPY package*.json first.\n2. RUN npm ci, then COPY src.\n",
    ),
    "pypi-release-check": (
        "Check a release renders on PyPI before upload.",
        "1. `python -m build`.\n2. `twine check dist/*`.\n",
    ),
    "gunicorn-timeout-502": (
        "Stop intermittent nginx 502s from gunicorn worker timeouts.",
        "1. grep WORKER TIMEOUT in journalctl.\n2. Align --timeout.\n",
    ),
}


def four_agents(machine: Machine) -> None:
    """One session of each agent, and a model that teaches one skill per session."""
    work = machine.root / "work"
    claude_session(machine.home, CLAUDE_ID, work / "api", "the api")
    codex_rollout(machine.home, CODEX_ID, work / "web", "the web")
    dsh_session(machine.dsh_home, DSH_ID, work / "lib", "the lib")
    hermes_session(machine.hermes_home, HERMES_ID, "the site")
    machine.llm.responder = by_session(
        {
            key: proposal(
                skill,
                description=TEACHES[skill][0],
                content=TEACHES[skill][1],
                when=f"Before {skill} run.",
            )
            for key, skill in AGENT_SKILLS.values()
        }
    )


def test_with_no_config_each_agent_learns_into_the_library_it_loads(machine: Machine) -> None:
    four_agents(machine)
    machine.ok("once")

    # Each skill is in its agent's dir, in its agent's dialect, and nowhere else on the machine.
    written = {
        library: machine.skill_dirs[library] / skill / "SKILL.md"
        for library, (_, skill) in AGENT_SKILLS.items()
    }
    everywhere = [p for p in skill_files(machine.root) if machine.state not in p.parents]
    assert everywhere == sorted(written.values())
    keys = {library: set(frontmatter(path)) for library, path in written.items()}
    assert keys == {
        "claude": {"name", "description", "when_to_use", "metadata"},
        "dsh": {"name", "description", "whenToUse", "metadata"},
        "codex": {"name", "description", "metadata"},
        "hermes": {"name", "description", "metadata"},
    }
    assert frontmatter(written["claude"])["when_to_use"] == "Before alembic-enum-migration run."
    assert frontmatter(written["dsh"])["whenToUse"] == "Before pypi-release-check run."
    # agentskills: one line, when-to-use folded in as one sentence
    skill = AGENT_SKILLS["codex"][1]
    description = frontmatter(written["codex"])["description"]
    assert description == f"{TEACHES[skill][0]} Use when before {skill} run."
    # Hermes: the description is the whole index line, the when-to-use is in the body
    skill = AGENT_SKILLS["hermes"][1]
    assert frontmatter(written["hermes"])["description"] == TEACHES[skill][0]
    assert f"\n## When to Use\n\nBefore {skill} run.\n" in written["hermes"].read_text()

    rows = machine.json("skills", "list")
    assert {(row["name"], row["library"]) for row in rows} == {
        (skill, library) for library, (_, skill) in AGENT_SKILLS.items()
    }
    created = machine.events("created")
    assert {(e["library"], e["skill"], e["session"]) for e in created} == {
        (library, skill, key) for library, (key, skill) in AGENT_SKILLS.items()
    }
    status = machine.json("status")
    assert {
        row["name"]: (row["dir"], row["managed"], row["max_managed"]) for row in status["libraries"]
    } == {library: (str(machine.skill_dirs[library]), 1, 50) for library in AGENT_SKILLS}
    # One request per session, nothing more: no repair, no merge.
    assert len(machine.llm.requests) == 4
    assert set(reflections(machine.llm)) == {key for key, _ in AGENT_SKILLS.values()}


def test_a_skills_dir_config_still_routes_every_agent_to_that_dir(machine: Machine) -> None:
    four_agents(machine)
    shared = machine.root / "one-library"
    machine.write_config(f'[skills]\ndir = "{shared}"\n')
    machine.ok("once")

    everywhere = [p for p in skill_files(machine.root) if machine.state not in p.parents]
    assert everywhere == sorted(shared / skill / "SKILL.md" for _, skill in AGENT_SKILLS.values())
    for path in everywhere:  # the default dialect, dsh, for every one of them
        assert set(frontmatter(path)) == {"name", "description", "whenToUse", "metadata"}
    rows = machine.json("skills", "list")
    assert {row["library"] for row in rows} == {"default"} and len(rows) == 4
    assert [row["name"] for row in machine.json("status")["libraries"]] == ["default"]

    config = machine.ok("config")
    for kind in ("claude-code", "codex", "dsh", "hermes"):
        assert re.search(rf"^#   {kind} \S+ -> default$", config, re.MULTILINE), config
    # Doctor tells which agents will not read what this library writes: every one fed by it.
    doctor = machine.cli("doctor", "--no-llm")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    warned = re.findall(
        r"^warn\s+library\s+default: fed by (\S+), whose agent reads the (\w+)",
        doctor.stdout,
        re.MULTILINE,
    )
    assert sorted(warned) == [
        ("claude-code", "claude"),
        ("codex", "agentskills"),
        ("hermes", "agentskills"),
    ], doctor.stdout


def test_doctor_and_config_show_every_library_and_refuse_a_shared_dir(machine: Machine) -> None:
    four_agents(machine)
    doctor = machine.cli("doctor", "--no-llm")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    lines = [line for line in doctor.stdout.splitlines() if line.split()[1:2] == ["library"]]
    assert sorted(lines) == sorted(
        f"ok    library   {name} {root} ({dialect}): writable, flock works"
        for name, root, dialect in (
            ("claude", machine.skill_dirs["claude"], "claude"),
            ("codex", machine.skill_dirs["codex"], "agentskills"),
            ("dsh", machine.skill_dirs["dsh"], "dsh"),
            ("hermes", machine.skill_dirs["hermes"], "agentskills"),
        )
    ), doctor.stdout

    config = machine.ok("config")
    routes = re.findall(r"^#   (\S+) (\S+) -> (\S+)$", config, re.MULTILINE)
    assert sorted(routes) == [
        ("claude-code", str(machine.home / ".claude" / "projects"), "claude"),
        ("codex", str(machine.home / ".codex" / "sessions"), "codex"),
        ("dsh", str(machine.dsh_home / "sessions"), "dsh"),
        ("hermes", str(machine.hermes_home / "state.db"), "hermes"),
    ]
    for name, root in machine.skill_dirs.items():
        assert f'# name = "{name}"\n# dir = "{root}"\n' in config

    shared = machine.root / "shared"
    machine.write_config(
        f'[[libraries]]\nname = "one"\ndir = "{shared}"\ndialect = "claude"\n'
        f'[[libraries]]\nname = "two"\ndir = "{shared}"\n'
        '[[sources]]\nkind = "claude-code"\nlibrary = "one"\n'
        '[[sources]]\nkind = "codex"\nlibrary = "two"\n'
    )
    problem = "libraries 'one' and 'two' share the dir"
    doctor, listing, once = machine.many(("doctor", "--no-llm"), ("skills", "list"), ("once",))
    assert doctor.returncode == 1
    assert re.search(rf"^fail\s+library\s+.*{problem}", doctor.stdout, re.MULTILINE)
    for result in (listing, once):
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and problem in result.stderr
        assert result.stdout == ""
    assert machine.llm.requests == [] and not shared.exists()


def test_library_option_on_every_skills_command_usage_and_mcp(machine: Machine) -> None:
    four_agents(machine)  # four libraries; a skill in each but hermes's
    body = ("--description", "A skill two agents hold.", "--content", "1. First.\n")
    machine.all_ok(
        *(
            (
                "skills",
                "write",
                skill,
                "--description",
                TEACHES[skill][0],
                "--content",
                TEACHES[skill][1],
                "--library",
                library,
            )
            for library, (_, skill) in AGENT_SKILLS.items()
            if library != "hermes"
        ),
        ("skills", "write", "shared", *body, "--library", "claude"),
        ("skills", "write", "shared", "--when", "Always.", *body, "--library", "codex"),
    )
    holders = machine.skill_dirs["claude"], machine.skill_dirs["codex"]
    assert all((root / "shared" / "SKILL.md").is_file() for root in holders)

    # A name two libraries hold: every command that names it asks which, exit 2, one line.
    ambiguous = [
        ("skills", "show", "shared"),
        ("skills", "write", "shared", *body),
        ("skills", "delete", "shared"),
        ("skills", "pin", "shared"),
        ("skills", "unpin", "shared"),
        ("skills", "archive", "shared"),
        ("skills", "history", "shared"),
        ("skills", "rollback", "shared"),
        ("usage", "use", "shared"),
    ]
    extra = [
        ("skills", "write", "brand-new", *body),  # held by none, four libraries
        ("skills", "show", "shared", "--library", "nope"),
        ("mcp",),  # one library is served; which one?
    ]
    results = machine.many(*ambiguous, *extra)
    for result in results:
        assert result.returncode == 2, (result.args, result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1, (result.args, result.stderr)
    for result in results[: len(ambiguous)]:
        assert "shared is in several libraries (claude, codex); add --library" in result.stderr
    new, unknown, mcp = results[len(ambiguous) :]
    offered = re.search(r"which library\? add --library NAME \(one of: ([^)]*)\)", new.stderr)
    assert offered is not None and sorted(offered.group(1).split(", ")) == sorted(AGENT_SKILLS)
    assert "no library named 'nope'" in unknown.stderr
    assert "which library?" in mcp.stderr
    assert not any((root / "brand-new").exists() for root in machine.skill_dirs.values())

    # With --library (or $SKILLD_LIBRARY) each acts on the library named, and only there.
    codex_text, claude_text, _, _, codex_rows = machine.all_ok(
        ("skills", "show", "shared", "--library", "codex"),
        ("skills", "show", "shared", {"SKILLD_LIBRARY": "claude"}),
        ("usage", "use", "shared", "--library", "claude"),
        ("skills", "pin", "shared", "--library", "codex"),
        ("skills", "list", "--library", "codex", "--json"),
    )
    assert "Use when always." in codex_text and "when_to_use" not in codex_text
    assert claude_text == (holders[0] / "shared" / "SKILL.md").read_text(encoding="utf-8")
    assert sorted((row["name"], row["library"]) for row in json.loads(codex_rows)) == [
        ("docker-layer-cache", "codex"),
        ("shared", "codex"),
    ]
    usage = [json.loads((root / ".usage.json").read_text())["shared"] for root in holders]
    assert (usage[0]["use_count"], usage[1]["use_count"]) == (1, 0)
    assert (usage[0]["pinned"], usage[1]["pinned"]) == (False, True)
    machine.all_ok(
        ("skills", "unpin", "shared", "--library", "codex"),
        (
            "skills",
            "write",
            "shared",
            "--description",
            "Changed.",
            "--content",
            "2. Second.\n",
            "--library",
            "claude",
        ),
    )
    history, _ = machine.all_ok(
        ("skills", "history", "shared", "--library", "claude", "--json"),
        ("skills", "archive", "shared", "--library", "codex"),
    )
    [version] = json.loads(history)
    assert version["path"].startswith(str(machine.state))
    assert not (holders[1] / "shared").exists() and (holders[1] / ".archive" / "shared").is_dir()
    machine.all_ok(
        ("skills", "rollback", "shared", "--library", "claude"),
        ("skills", "restore", "shared", "--library", "codex"),
    )
    assert "1. First." in (holders[0] / "shared" / "SKILL.md").read_text(encoding="utf-8")
    assert (holders[1] / "shared" / "SKILL.md").is_file()
    machine.ok("skills", "delete", "shared", "--library", "codex")
    assert not (holders[1] / "shared" / "SKILL.md").exists()
    assert (holders[0] / "shared" / "SKILL.md").is_file()
    # Now one library holds it: the option may be left out.
    assert "1. First." in machine.ok("skills", "show", "shared")
    acted = {(e["kind"], e["library"]) for e in machine.events() if e["skill"] == "shared"}
    assert acted >= {
        ("created", "claude"),
        ("created", "codex"),
        ("updated", "claude"),
        ("pinned", "codex"),
        ("unpinned", "codex"),
        ("rolled_back", "claude"),
        ("archived", "codex"),
        ("restored", "codex"),
        ("deleted", "codex"),
    }

    # The MCP server serves the library it is given, and only that one.
    assert anyio.run(mcp_skill_names, machine, "codex") == ["docker-layer-cache"]


async def mcp_skill_names(machine: Machine, library: str) -> list[str]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from tests.test_mcp import structured

    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "skilld", "mcp", "--library", library],
        env=machine.env(),
    )
    with (machine.root / "mcp.err").open("a") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = structured(await session.call_tool("skill_list", {}))["skills"]
    return sorted(row["name"] for row in listed)


# -- Hermes: its own skills in category folders -------------------------------------------------

HERMES_OWN = """\
---
name: restart-gunicorn
description: Stop intermittent nginx 502s by aligning gunicorn's worker timeout with nginx.
metadata:
  hermes:
    tags: [devops]
---
1. `journalctl -u gunicorn | grep 'WORKER TIMEOUT'` confirms the cause.
2. Set gunicorn `--timeout` to nginx's `proxy_read_timeout`; restart both.
3. Verify: the 502s stop in nginx's error log.
"""


def test_hermes_own_skills_in_category_folders_are_seen_and_never_copied(machine: Machine) -> None:
    own = machine.skill_dirs["hermes"] / "devops" / "restart-gunicorn" / "SKILL.md"
    own.parent.mkdir(parents=True)
    own.write_text(HERMES_OWN, encoding="utf-8")
    hermes_session(machine.hermes_home, HERMES_ID, "the site")
    # The model proposes Hermes's own skill again under another name (a near-duplicate).
    body = HERMES_OWN.split("---\n", 2)[2]
    machine.llm.responder = by_session(
        {
            "hermes": proposal(
                "restart-gunicorn-workers",
                description="Stop nginx 502s by aligning gunicorn's worker timeout.",
                content=body,
            )
        }
    )
    machine.ok("once")

    [request] = reflections(machine.llm).values()
    listing = request["messages"][1]["content"]
    assert "- restart-gunicorn: Stop intermittent nginx 502s by aligning" in listing
    [refused] = machine.events("protected")
    assert (refused["library"], refused["skill"]) == ("hermes", "restart-gunicorn")
    assert "owned by human" in refused["reason"]
    assert refused["detail"]["near_duplicate_of"] == "restart-gunicorn"
    assert machine.events("created", "updated") == []
    assert skill_files(machine.skill_dirs["hermes"]) == [own]  # never a second copy
    assert own.read_text(encoding="utf-8") == HERMES_OWN
    [row] = machine.json("skills", "list")
    assert (row["name"], row["library"], row["owner"], row["path"]) == (
        "restart-gunicorn",
        "hermes",
        "human",
        str(own),
    )


# -- project scope ------------------------------------------------------------------------------


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    return path


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_project_skills_land_in_allowed_projects_only_and_never_leak(machine: Machine) -> None:
    repos = machine.root / "repos"
    alpha = git_repo(repos / "allowed-alpha")  # allowed by the glob
    beta = git_repo(repos / "other-beta")  # not allowed, no skills dir
    gamma = git_repo(repos / "other-gamma")  # not in the glob, but keeps Claude skills already
    (gamma / ".claude" / "skills").mkdir(parents=True)
    deep = alpha / "src" / "deep"
    deep.mkdir(parents=True)
    (gamma / "pkg").mkdir()
    machine.write_config(f'[evolve]\nscope = "auto"\nprojects = ["{repos}/allowed-*"]\n')
    sessions = [  # (session, its cwd, the skill its window teaches, scope, description)
        ("a-deep", deep, "alpha-fixtures", "project", "Load alpha's fixtures before its tests."),
        ("a-user", alpha, "bisect-flaky-tests", "user", "Find a flaky test with git bisect."),
        ("b-root", beta, "beta-fixtures", "project", "Seed beta's database before tests."),
        ("g-pkg", gamma / "pkg", "gamma-fixtures", "project", "Build gamma's protobufs first."),
    ]
    replies = {}
    for name, cwd, skill, scope, description in sessions:
        claude_session(machine.home, f"{name}-0000", cwd, name)
        replies[f"claude-code:{name}-0000"] = proposal(skill, scope=scope, description=description)
    machine.llm.responder = by_session(replies)
    beta_before = tree(beta)
    machine.ok("once")

    user = machine.skill_dirs["claude"]
    alpha_skill = alpha / ".claude" / "skills" / "alpha-fixtures" / "SKILL.md"
    assert frontmatter(alpha_skill)["when_to_use"] == "When the tests fail."  # claude dialect
    assert not (deep / ".claude").exists() and not (user / "alpha-fixtures").exists()
    assert (user / "bisect-flaky-tests" / "SKILL.md").is_file()
    assert not (alpha / ".claude" / "skills" / "bisect-flaky-tests").exists()
    assert (gamma / ".claude" / "skills" / "gamma-fixtures" / "SKILL.md").is_file()
    # A root not allowed: staged for review, naming where it would go; the repo untouched.
    assert tree(beta) == beta_before and not (user / "beta-fixtures").exists()
    [staged] = machine.events("staged")
    assert staged["skill"] == "beta-fixtures" and str(beta) in staged["reason"]
    assert staged["detail"]["target"] == str(beta / ".claude" / "skills" / "beta-fixtures")
    written = {(e["skill"], e["library"]) for e in machine.events("created")}
    assert written == {
        ("alpha-fixtures", f"claude@{alpha}"),
        ("bisect-flaky-tests", "claude"),
        ("gamma-fixtures", f"claude@{gamma}"),
    }
    rows = {row["name"]: row["library"] for row in machine.json("skills", "list")}
    assert rows == {name: library for name, library in written}
    system = next(iter(reflections(machine.llm).values()))["messages"][0]["content"]
    assert '"scope": "project"' in system

    # A second session in each project: each prompt lists the user library and its own
    # project's skills, never another project's.
    machine.llm.requests.clear()
    for name, cwd in (("a-again", alpha), ("b-again", beta), ("g-again", gamma)):
        claude_session(machine.home, f"{name}-0000", cwd, name)
    machine.llm.responder = None
    machine.ok("once")
    shown = {
        key.removeprefix("claude-code:").removesuffix("-0000"): {
            skill
            for skill in ("alpha-fixtures", "beta-fixtures", "gamma-fixtures", "bisect-flaky-tests")
            if f"\n- {skill}: " in request["messages"][1]["content"]
        }
        for key, request in reflections(machine.llm).items()
    }
    assert shown == {
        "a-again": {"alpha-fixtures", "bisect-flaky-tests"},
        "b-again": {"bisect-flaky-tests"},
        "g-again": {"gamma-fixtures", "bisect-flaky-tests"},
    }


# -- listing budgets ----------------------------------------------------------------------------


def test_a_claude_skill_over_the_listing_budget_is_repaired_once_then_invalid(
    machine: Machine,
) -> None:
    claude_session(machine.home, CLAUDE_ID, machine.root / "work", "the api")
    description = "Ship a new Postgres enum value with Alembic, " + "carefully " * 95
    when = "When an enum changes, " + "again " * 100
    assert len(description) <= 1024 and len(description) + len(when) > 1536
    machine.llm.responder = by_session(
        {"claude-code": proposal("alembic-enum", description=description, when=when)}
    )
    machine.ok("once")

    first, repair = machine.llm.requests
    assert repair["messages"][:2] == first["messages"]
    assert "1536" in repair["messages"][-1]["content"]
    [invalid] = machine.events("invalid")
    assert invalid["library"] == "claude" and "Claude Code lists at most 1536" in invalid["reason"]
    assert machine.events("created") == [] and skill_files(machine.home) == []


def test_a_reload_into_libraries_that_share_a_dir_keeps_the_running_ones(
    machine: Machine,
) -> None:
    codex_rollout(machine.home, CODEX_ID, machine.root / "work", "the web")
    first = machine.root / "first"
    one = f'[[libraries]]\nname = "one"\ndir = "{first}"\n'
    route = '[[sources]]\nkind = "codex"\nlibrary = "one"\n'
    machine.write_config(one + route)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "skilld", "run"],
        env=machine.env(SKILLD_LOG_LEVEL="info", SKILLD_EVOLVE_INTERVAL_SECONDS="1"),
        cwd=machine.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert daemon.stderr is not None
    try:
        logged = [daemon.stderr.readline()]  # its first line: the signal handlers are in place
        machine.write_config(one + f'[[libraries]]\nname = "two"\ndir = "{first}"\n' + route)
        daemon.send_signal(signal.SIGHUP)
        while "reload_failed" not in logged[-1] and logged[-1]:
            logged.append(daemon.stderr.readline())
        assert "share the dir" in logged[-1], "".join(logged)
        assert daemon.poll() is None  # still running, on the libraries it had
        daemon.send_signal(signal.SIGTERM)
        rest = daemon.stderr.read()
        assert daemon.wait(timeout=60) == 0 and "Traceback" not in rest, rest
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_declaring_one_library_leaves_the_other_agents_in_their_own(tmp_path: Path) -> None:
    from skilld.config import build_config
    from skilld.routing import resolve

    claude = tmp_path / "claude-projects"
    codex = tmp_path / "codex-sessions"
    config = build_config(
        {
            "libraries": [{"name": "claude", "max_managed": 7}],
            "sources": [
                {"kind": "claude-code", "path": str(claude)},
                {"kind": "codex", "path": str(codex)},
            ],
        },
        environ={},
    )
    routing = resolve(config, detected_sources=tuple)
    assert {route.source.kind: route.library for route in routing.routes} == {
        "claude-code": "claude",
        "codex": "codex",
    }
    assert routing.libraries["claude"].max_managed == 7
    assert routing.libraries["codex"].dialect == "agentskills"
    # A library declared in an agent's own dir is that agent's library, whatever its name.
    mine = build_config(
        {
            "libraries": [{"name": "mine", "dir": str(routing.libraries["codex"].dir)}],
            "sources": [{"kind": "codex", "path": str(codex)}],
        },
        environ={},
    )
    assert [route.library for route in resolve(mine, detected_sources=tuple).routes] == ["mine"]


def test_a_session_in_the_home_directory_is_no_project(tmp_path: Path) -> None:
    from skilld.routing import project_root
    from tests.conftest import library_spec

    claude = library_spec(
        tmp_path / ".claude" / "skills", name="claude", project_dir=".claude/skills"
    )
    # No `.git` above the home directory: the home is the session's "project", and its
    # project skills dir would be the user library itself.
    assert project_root(claude, str(tmp_path)) is None
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    assert project_root(claude, str(tmp_path / "repo" / "src")) == tmp_path / "repo"
    assert project_root(library_spec(tmp_path / "x", project_dir=None), str(tmp_path)) is None


def test_a_library_renamed_over_the_same_folder_keeps_its_skills(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """`[skills] dir` replaced by a `[[libraries]]` table over the same folder: the skills
    skilld wrote stay skilld's (not `human`), and their saved versions follow them."""
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s1", conversation("the build"))
    fake_llm.push(skill_reply("fix-the-build"))
    assert workspace.cli("once").returncode == 0
    text = workspace.config_path.read_text()
    text = text.replace("[skills]\n", '[[libraries]]\nname = "team-tools"\n', 1)
    workspace.config_path.write_text(text)
    rows = json.loads(workspace.cli("skills", "list", "--json").stdout)
    assert [(row["name"], row["library"], row["owner"]) for row in rows] == [
        ("fix-the-build", "team-tools", "managed")
    ]
    written = workspace.cli(
        "skills", "write", "fix-the-build", "--description", "Fix it.", "--content", "1. Go.\n"
    )
    assert written.returncode == 0, written.stderr
    assert written.stdout.startswith("updated fix-the-build")


def test_an_agent_s_library_named_explicitly_works_before_that_agent_first_runs(
    machine: Machine,
) -> None:
    """docs/mcp.md registers `skilld mcp --library claude` with Claude Code, often before
    Claude Code has ever run: no `~/.claude/projects` yet, so no agent was found, yet the
    library it names is that agent's own, with its defaults."""
    from tests.test_mcp import INITIALIZE, request

    write = request(
        "tools/call", 2, name="skill_write",
        arguments={"name": "first-run", "description": "D.", "content": "1. Go."},
    )  # fmt: skip
    served = machine.cli("mcp", "--library", "claude", stdin=f"{INITIALIZE}\n{write}\n")
    assert served.returncode == 0, served.stderr
    initialized, written = (json.loads(line) for line in served.stdout.splitlines())
    assert initialized["result"]["serverInfo"]["name"] == "skilld"
    assert written["result"]["structuredContent"]["outcome"] == "created"
    skill = machine.skill_dirs["claude"] / "first-run" / "SKILL.md"
    assert written["result"]["structuredContent"]["path"] == str(skill)
    assert frontmatter(skill)["name"] == "first-run"
    [row] = machine.json("skills", "list", "--library", "claude")
    assert (row["name"], row["owner"], row["library"]) == ("first-run", "managed", "claude")

    machine.ok(
        "skills", "write", "codex-first", "--description", "D.", "--content", "1. Go.\n",
        "--library", "codex",
    )  # fmt: skip
    assert (machine.skill_dirs["codex"] / "codex-first" / "SKILL.md").is_file()
    listing = request("tools/call", 2, name="skill_list", arguments={})
    listed = machine.cli("mcp", stdin=f"{INITIALIZE}\n{listing}\n", SKILLD_LIBRARY="codex")
    assert listed.returncode == 0, listed.stderr
    skills = json.loads(listed.stdout.splitlines()[1])["result"]["structuredContent"]["skills"]
    assert [skill["name"] for skill in skills] == ["codex-first"]
    # Only the libraries named were touched: no agent's sessions, no other agent's skills.
    assert not (machine.home / ".claude" / "projects").exists()
    assert not machine.dsh_home.exists() and not machine.hermes_home.exists()

    unknown = machine.cli("skills", "list", "--library", "nope")
    assert unknown.returncode == 2
    assert unknown.stderr == "skilld: no library named 'nope' (known: dsh, claude, codex, hermes)\n"
    # Libraries declared in the config are the whole set: an agent's name is not one of them.
    machine.write_config(
        f'[[libraries]]\nname = "team"\ndir = "{machine.root / "team"}"\n\n'
        f'[[sources]]\nkind = "jsonl"\npath = "{machine.root / "sessions"}"\n'
    )
    declared = machine.cli("mcp", "--library", "hermes")
    assert (declared.returncode, declared.stdout) == (2, "")
    assert declared.stderr == "skilld: no library named 'hermes' (known: team)\n"
