"""Where a lesson came from (issue 24): each window's repository, branch and commit, recorded
from the transcript or observed from the repository on disk, on its events, its skill's
versions, the request to the model and team commits; never a remote URL's user info.

The end-to-end tests run `python -m skilld once` on the repository's example transcripts (their
git fields as Claude Code and Codex write them) and on sessions whose cwd is a real repository
the test makes, against a loopback LLM server.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from skilld.evolve._judge import branch_hold
from skilld.evolve.prompt import session_header
from skilld.gitinfo import GitContext, completed
from skilld.reports.listing import learned_on, learned_on_text
from skilld.state import SCHEMA_VERSION, StateDB
from skilld.sync.messages import change_message, trailers
from skilld.transcripts.registry import build_source
from tests.conftest import Workspace, git
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "transcripts"
CODEX_COMMIT = "9c1d2e7f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d"
TOKEN = "ghp_PLANTEDtoken0123456789abcdefABCDEF"
REQUEST = re.compile(r"^(?:Session|Merge into \S+: session) (\S+) \((\S+)\)")


def make_repo(path: Path, origin: str, *, branch: str = "main") -> str:
    """A repository with one commit on `main`, `branch` checked out and an `origin` remote;
    returns the commit."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text(f"{path.name}\n")  # each repository its own commit
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "one")
    git(path, "remote", "add", "origin", origin)
    if branch != "main":
        git(path, "checkout", "-q", "-b", branch)
    return git(path, "rev-parse", "HEAD")


# -- sources ---------------------------------------------------------------------------------


def test_claude_code_messages_keep_the_branch_of_their_own_line() -> None:
    source = build_source("claude-code", EXAMPLES / "claude-code" / "projects")
    [read] = source.scan({}).reads
    branches = [m.git.branch if m.git else None for m in read.messages]
    assert branches[0] == "feat/invoice-status" and branches[-1] == "main"
    assert branches == sorted(branches, key=lambda b: b == "main")  # one switch, mid-session
    assert {m.git.how for m in read.messages if m.git} == {"recorded"}
    assert all(m.git and m.git.repository is None for m in read.messages)


def test_codex_git_is_normalised_on_reading_and_carried_across_reads(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout-2025-06-14T09-12-33-0197a3c2-5e41-7d20-a8f3-6b2e9c4d1f07.jsonl"
    lines = (EXAMPLES / "codex" / "sessions" / "2025" / "06" / "14" / rollout.name).read_text()
    planted = lines.replace(
        "git@github.com:acme/acme-web.git", f"https://bot:{TOKEN}@GitHub.com/acme/acme-web"
    )
    first, rest = planted.split("\n", 3)[:3], planted.split("\n", 3)[3]
    rollout.write_text("\n".join(first) + "\n")
    source = build_source("codex", rollout)
    [read] = source.scan({}).reads
    expected = GitContext("github.com/acme/acme-web", "main", CODEX_COMMIT, "recorded")
    assert [m.git for m in read.messages] == [expected]
    assert TOKEN not in json.dumps(read.cursor)
    with rollout.open("a") as handle:
        handle.write(rest)
    [later] = source.scan({read.session: read.cursor}).reads
    assert later.messages and {m.git for m in later.messages} == {expected}


def test_jsonl_lines_may_name_the_working_directory(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    session.write_text(
        json.dumps({"role": "user", "content": "hi", "cwd": "/work/a"})
        + "\n"
        + json.dumps({"role": "assistant", "content": "hello", "cwd": 7})
        + "\n"
    )
    [read] = build_source("jsonl", tmp_path).scan({}).reads
    assert read.cwd == "/work/a" and len(read.messages) == 2


# -- pure decisions --------------------------------------------------------------------------


def test_a_recorded_branch_is_completed_from_the_repository_only_where_it_agrees() -> None:
    recorded = GitContext(None, "feat/x", None, "recorded")
    on_x = GitContext("h/o/r", "feat/x", "a" * 40, "observed")
    on_main = GitContext("h/o/r", "main", "b" * 40, "observed")
    assert completed(recorded, on_x) == GitContext("h/o/r", "feat/x", "a" * 40, "recorded")
    assert completed(recorded, on_main) == GitContext("h/o/r", "feat/x", None, "recorded")
    assert completed(None, on_main) == on_main
    assert completed(recorded, None) == recorded
    full = GitContext("x/y/z", "main", "c" * 40, "recorded")
    assert completed(full, on_main) == full


def test_branch_hold() -> None:
    assert branch_hold("feat/x", ()) is None
    assert branch_hold(None, ()) is None
    assert branch_hold("main", ("main", "release/*")) is None
    assert branch_hold("release/2.4", ("main", "release/*")) is None
    assert branch_hold("feat/x", ("main",)) == "learned on branch feat/x"
    assert branch_hold(None, ("main",)) == "learned on no known branch"


def test_the_session_header_and_what_skills_show_prints() -> None:
    assert session_header(None, None) == ""
    assert session_header("h/o/r", None) == "[session] repository: h/o/r; branch: unknown\n"
    git_json = GitContext("h/o/r", "main", "d" * 40, "observed").as_json()
    assert learned_on_text(git_json) == "learned on h/o/r@main (ddddddd)"
    assert learned_on_text({**git_json, "repository": None, "commit": None}) == "learned on ?@main"
    assert learned_on(git_json, "git@h:o/r.git", "ma*")
    assert learned_on(git_json, "h/o/*", None) and not learned_on(git_json, "h/other/*", None)
    assert not learned_on(None, None, "main") and learned_on(None, None, None)


def test_team_commits_name_the_repository_and_branch() -> None:
    message = change_message(
        "created", "fix-venv", host="laptop", session="s", repository="h/o/r", branch="feat/x"
    )
    assert trailers(message) == {
        "Event": "created",
        "Skill": "fix-venv",
        "Session": "s",
        "Repository": "h/o/r",
        "Branch": "feat/x",
        "Host": "laptop",
    }
    assert "Repository" not in trailers(change_message("deleted", "x", host="laptop"))


def test_a_schema_2_state_db_gains_the_provenance_git_column(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with StateDB(path) as db:
        db.put_provenance("lib", "fix", path="/s/fix/SKILL.md", sha256="h")
        db.conn.execute("ALTER TABLE provenance DROP COLUMN git")
        db.conn.execute("PRAGMA user_version = 2")
    with StateDB(path) as db:
        assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        row = db.provenance("lib", "fix")
        assert row is not None and row.git is None
        db.put_provenance("lib", "fix", path="/s/fix/SKILL.md", sha256="i", git={"branch": "x"})
        row = db.provenance("lib", "fix")
        assert row is not None and json.loads(row.git or "") == {"branch": "x"}


# -- through the CLI -------------------------------------------------------------------------


def respond_by_source(names: dict[str, str]) -> Any:
    """Each reflection (and merge) answered with the skill of its source kind."""

    def respond(request: dict[str, Any]) -> Reply:
        user = request["messages"][1]["content"]
        match = REQUEST.match(user)
        if match is None:
            return skip_reply("not a reflection")
        session, kind = match.groups()
        if user.startswith("Merge into"):
            name = user.split()[2].rstrip(":")
            return skill_reply(name, f"1. Merged for {session}.\n2. Check it.\n")
        if kind not in names:
            return skip_reply()
        window = user.splitlines()[0]  # the session and its messages: each window its own text
        return skill_reply(names[kind], f"1. Learned in {window}\n2. Check it.\n")

    return respond


@pytest.fixture
def examples(tmp_path: Path) -> dict[str, Any]:
    """The example transcripts, copied, with two sessions moved into real repositories."""
    copy = tmp_path / "transcripts"
    shutil.copytree(EXAMPLES, copy)
    lib_commit = make_repo(
        tmp_path / "repos" / "acme-lib",
        f"https://dev:{TOKEN}@git.example.com/acme/acme-lib.git",
        branch="feat/x",
    )
    api_commit = make_repo(tmp_path / "repos" / "acme-api", "git@github.com:acme/acme-api.git")
    (tmp_path / "repos" / "acme-api" / "src").mkdir()
    # DSH: the session ran in the repository on feat/x.
    [dsh] = (copy / "dsh").rglob("session.jsonl")
    dsh.write_text(
        dsh.read_text().replace("/home/dev/acme-lib", str(tmp_path / "repos" / "acme-lib"))
    )
    # jsonl: the session ran in a folder of the other repository, on main.
    [session] = (copy / "jsonl").glob("*.jsonl")
    session.write_text(
        session.read_text().replace(
            "/home/dev/acme-api", str(tmp_path / "repos" / "acme-api" / "src")
        )
    )
    # Codex: the rollout recorded a remote with a token in it.
    [rollout] = (copy / "codex").rglob("rollout-*.jsonl")
    rollout.write_text(
        rollout.read_text().replace(
            "git@github.com:acme/acme-web.git", f"https://bot:{TOKEN}@github.com/acme/acme-web.git"
        )
    )
    # Claude Code: the part of the session on the feature branch first.
    [claude] = (copy / "claude-code").rglob("*.jsonl")
    lines = claude.read_text().splitlines(keepends=True)
    claude.write_text("".join(lines[:11]))
    return {
        "root": copy,
        "claude": claude,
        "claude_rest": "".join(lines[11:]),
        "lib": GitContext("git.example.com/acme/acme-lib", "feat/x", lib_commit, "observed"),
        "api": GitContext("github.com/acme/acme-api", "main", api_commit, "observed"),
    }


def show(workspace: Workspace, name: str) -> dict[str, Any]:
    result = workspace.cli("skills", "show", name, "--json")
    assert result.returncode == 0, result.stderr
    shown: dict[str, Any] = json.loads(result.stdout)
    return shown


def test_each_version_says_where_it_was_learned_and_no_token_leaks(
    workspace: Workspace, fake_llm: FakeLLM, examples: dict[str, Any]
) -> None:
    root = examples["root"]
    workspace.llm_url = fake_llm.base_url
    workspace.sources = [
        {"kind": "claude-code", "path": str(root / "claude-code" / "projects")},
        {"kind": "codex", "path": str(root / "codex" / "sessions")},
        {"kind": "dsh", "path": str(root / "dsh" / "sessions")},
        {"kind": "jsonl", "path": str(root / "jsonl")},
    ]
    workspace.write_config()
    names = {
        "claude-code": "add-postgres-enum-value",
        "codex": "cache-npm-in-docker",
        "dsh": "check-readme-before-release",
        "jsonl": "pin-the-clock-in-tests",
    }
    fake_llm.responder = respond_by_source(names)
    runs = [workspace.cli("once")]
    with examples["claude"].open("a") as handle:  # the user switched to main, and went on
        handle.write(examples["claude_rest"])
    runs.append(workspace.cli("once"))
    for run in runs:
        assert run.returncode == 0, run.stderr

    def versions(name: str) -> list[tuple[str, dict[str, Any] | None]]:
        return [(v["event"], v["git"]) for v in show(workspace, name)["effect"]["versions"]]

    codex = GitContext("github.com/acme/acme-web", "main", CODEX_COMMIT, "recorded")
    assert versions("cache-npm-in-docker") == [("created", codex.as_json())]
    assert versions("check-readme-before-release") == [("created", examples["lib"].as_json())]
    assert versions("pin-the-clock-in-tests") == [("created", examples["api"].as_json())]
    # The example's cwd is no repository on this machine: the branch is all it recorded.
    feature = GitContext(None, "feat/invoice-status", None, "recorded")
    assert versions("add-postgres-enum-value") == [
        ("created", feature.as_json()),
        ("updated", feature._replace(branch="main").as_json()),
    ]
    # Every event of a window carries its context.
    created = {e["skill"]: e["detail"]["git"] for e in workspace.events("created")}
    assert created["check-readme-before-release"] == examples["lib"].as_json()
    assert all("git" in e["detail"] for e in workspace.events("skipped", "created", "updated"))

    # The model is told the branch, inside the window's delimiters.
    asked = {
        REQUEST.match(r["messages"][1]["content"]).group(2): r["messages"][1]["content"]  # type: ignore[union-attr]
        for r in fake_llm.requests
        if r["messages"][1]["content"].startswith("Session")
    }
    window = re.search(
        r"(<transcript-[0-9a-f]+>)\n(.*)\n(</transcript-[0-9a-f]+>)", asked["dsh"], re.S
    )
    assert window is not None
    assert window.group(2).startswith(
        "[session] repository: git.example.com/acme/acme-lib; branch: feat/x\n"
    )
    assert "branch: main" in asked["claude-code"] and "acme/acme-web" in asked["codex"]

    # `skills show` prints it per version; `skills list` filters by it.
    shown = workspace.cli("skills", "show", "cache-npm-in-docker")
    assert f"learned on github.com/acme/acme-web@main ({CODEX_COMMIT[:7]})" in shown.stderr
    listed = workspace.cli("skills", "list", "--json", "--repository", "github.com/acme/*")
    assert {row["name"] for row in json.loads(listed.stdout)} == {
        "cache-npm-in-docker",
        "pin-the-clock-in-tests",
    }
    on_feature = workspace.cli("skills", "list", "--json", "--branch", "feat/*")
    assert [row["name"] for row in json.loads(on_feature.stdout)] == ["check-readme-before-release"]

    # The token is nowhere skilld keeps, shows or sends anything.
    outputs = [run.stdout + run.stderr for run in runs] + [shown.stdout + shown.stderr]
    outputs += [json.dumps(workspace.events())]
    assert all(TOKEN not in text for text in outputs)
    assert TOKEN not in fake_llm.all_request_text
    database = sqlite3.connect(workspace.state / "state.db")
    tables = [
        row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type='table'")
    ]
    for table in tables:
        for row in database.execute(f"SELECT * FROM {table}"):
            assert TOKEN not in repr(row), table
    database.close()
    for folder in (workspace.state, workspace.skills):
        for file in folder.rglob("*"):
            assert not file.is_file() or TOKEN.encode() not in file.read_bytes(), file


def test_project_branches_stage_a_lesson_from_another_branch(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    repos = workspace.root / "repos"
    make_repo(repos / "on-main", "git@github.com:acme/on-main.git")
    make_repo(repos / "on-feature", "git@github.com:acme/on-feature.git", branch="feat/x")
    workspace.llm_url = fake_llm.base_url
    workspace.libraries = [
        {"name": "agent", "dir": str(workspace.skills), "project_dir": ".agent/skills"}
    ]
    workspace.sources = [{"kind": "jsonl", "path": str(workspace.sessions), "library": "agent"}]
    workspace.settings["evolve"] = {
        "scope": "auto",
        "projects": [str(repos / "*")],
        "project_branches": ["main"],
    }
    workspace.write_config()
    for name in ("on-main", "on-feature"):
        workspace.add_session(
            name,
            [
                {"role": "user", "content": f"Seed the {name} database.", "cwd": str(repos / name)},
                {"role": "assistant", "content": f"Seeded {name}: run make seed first."},
            ],
        )

    def respond(request: dict[str, Any]) -> Reply:
        session = REQUEST.match(request["messages"][1]["content"]).group(1)  # type: ignore[union-attr]
        name = session.removeprefix("jsonl:")
        return skill_reply(f"seed-{name}", f"1. Seed {name}.\n", scope="project")

    fake_llm.responder = respond
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr

    written = repos / "on-main" / ".agent" / "skills" / "seed-on-main" / "SKILL.md"
    assert written.is_file()
    assert not (repos / "on-feature" / ".agent").exists()
    [staged] = workspace.events("staged")
    assert staged["skill"] == "seed-on-feature"
    assert staged["reason"] == "learned on branch feat/x"
    assert staged["detail"]["git"]["branch"] == "feat/x"
    review = workspace.cli("review", "list", "--json")
    [item] = json.loads(review.stdout)
    assert item["held_because"] == "learned on branch feat/x"
    assert item["origin"]["git"]["repository"] == "github.com/acme/on-feature"

    # Approved by a person, the version still says where it was learned.
    approved = workspace.cli("review", "approve", "seed-on-feature")
    assert approved.returncode == 0, approved.stderr
    shown = workspace.cli(
        "skills", "show", "seed-on-feature", "--json", "--library", f"agent@{repos / 'on-feature'}"
    )
    assert shown.returncode == 0, shown.stderr
    [version] = json.loads(shown.stdout)["effect"]["versions"]
    assert version["git"]["branch"] == "feat/x"


def test_project_branches_is_an_array_of_names(workspace: Workspace) -> None:
    workspace.settings["evolve"] = {"project_branches": "main"}
    workspace.write_config()
    result = workspace.cli("config")
    assert result.returncode == 2 and "evolve.project_branches" in result.stderr
    workspace.settings["evolve"] = {"project_branches": ["main", "release/*"]}
    workspace.write_config()
    result = workspace.cli("config")
    assert result.returncode == 0, result.stderr
    assert 'project_branches = ["main", "release/*"]  # file' in result.stdout
    from_env = workspace.cli("config", SKILLD_EVOLVE_PROJECT_BRANCHES="main:master")
    assert 'project_branches = ["main", "master"]  # env' in from_env.stdout


def test_a_team_library_commit_names_the_repository_and_branch(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    remote = tmp_path / "team.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    team = workspace.root / "team"
    workspace.llm_url = fake_llm.base_url
    workspace.libraries = [{"name": "team", "dir": str(team), "remote": str(remote)}]
    workspace.sources = [
        {"kind": "codex", "path": str(EXAMPLES / "codex" / "sessions"), "library": "team"}
    ]
    workspace.write_config()
    fake_llm.responder = respond_by_source({"codex": "cache-npm-in-docker"})
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr
    message = git(team, "log", "-1", "--format=%B", "--", "cache-npm-in-docker")
    assert message.startswith("created cache-npm-in-docker")
    assert "Skilld-Repository: github.com/acme/acme-web\n" in message
    assert "Skilld-Branch: main\n" in message
