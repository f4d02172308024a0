"""JSON in a library that another party writes, read with a size and a nesting bound (issue
39, item 3).

A teammate's manifest or usage file nested 100,000 deep, a `.usage.json` or a hub lock planted
nested that deep: each is refused or read as none with a clear message, and every command goes
on, for every library. Everything here runs through the real CLI; team remotes are bare git
repositories a teammate pushes to from a plain clone.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from skilld.boundedjson import MAX_DEPTH
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, skill_reply
from tests.synchosts import Person, bare_remote, plain_git
from tests.test_hostile_sync import push
from tests.test_team import Host

DEPTH = 100_000
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"


def nested(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


def deep_manifest() -> bytes:
    return ('{"version": 1, "skills": {"fix-venv": ' + nested() + "}}\n").encode()


def deep_usage(host: str) -> bytes:
    return (f'{{"host": "{host}", "skills": {{"fix-venv": {nested()}}}}}\n').encode()


def no_traceback(result: subprocess.CompletedProcess[str], what: str) -> None:
    assert "Traceback" not in result.stderr, f"{what}: {result.stderr[-2000:]}"


def team_and_local(base: Path, remote: Path, llm: str) -> Host:
    """A host with a team library ("team") and a library of its own ("mine")."""
    host = Host(base / "alpha", llm, name="alpha", remote=remote, table=True)
    host.sessions.mkdir(parents=True)
    host.write_config()
    host.libraries.append({"name": "mine", "dir": str(base / "alpha" / "mine")})
    Workspace.write_config(host)
    host.ok("skills", "write", "fix-venv", "--library", "team",
            "--description", "Fix a venv.", "--content", "1. Recreate it.")  # fmt: skip
    host.ok("skills", "write", "my-own", "--library", "mine",
            "--description", "Mine.", "--content", "1. Go.")  # fmt: skip
    host.sync()
    return host


def every_command_goes_on(host: Host, fake_llm: FakeLLM, session: str) -> None:
    """`status`, `skills list` (each library) and `once` work: exit 0, no traceback."""
    for args in (["status"], ["status", "--json"], ["skills", "list", "--json"]):
        result = host.cli(*args)
        no_traceback(result, " ".join(args))
        assert result.returncode == 0, f"{args}: {result.stderr[-2000:]}"
    listed = {(row["library"], row["name"]) for row in host.json("skills", "list")}
    assert {("team", "fix-venv"), ("mine", "my-own")} <= listed
    host.add_session(session, conversation(session))
    fake_llm.push(skill_reply(f"learned-{session}"))
    once = host.cli("once")
    no_traceback(once, "once")
    assert once.returncode == 0, once.stderr[-2000:]
    assert (host.skills / f"learned-{session}" / "SKILL.md").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("relpath", "content"),
    [(".skilld/manifest.json", deep_manifest()), (".skilld/usage/bravo.json", deep_usage("bravo"))],
    ids=["manifest", "usage file"],
)
def test_a_teammate_s_deeply_nested_json_is_refused_and_every_library_goes_on(
    tmp_path: Path, fake_llm: FakeLLM, relpath: str, content: bytes
) -> None:
    remote = bare_remote(tmp_path / "team.git")
    alpha = team_and_local(tmp_path, remote, fake_llm.base_url)
    person = Person(tmp_path, remote)
    (person.clone / relpath).parent.mkdir(parents=True, exist_ok=True)
    (person.clone / relpath).write_bytes(content)
    bad = push(person, relpath, message="a teammate's deep JSON")

    failed = alpha.cli("sync")

    no_traceback(failed, "sync")
    assert failed.returncode == 1
    assert f"refused: {relpath}: JSON {TOO_DEEP}" in failed.stderr
    [event] = alpha.events("sync_refused")
    assert (event["detail"]["path"], event["detail"]["commit"]) == (relpath, bad)
    assert TOO_DEEP in event["reason"]
    # The library stays at its last good commit; every command goes on, for both libraries.
    here = alpha.skills / relpath
    assert not here.exists() or here.read_bytes() != content
    every_command_goes_on(alpha, fake_llm, "while-refused")
    doctor = alpha.cli("doctor", "--no-llm")
    no_traceback(doctor, "doctor")
    assert doctor.returncode == 1
    [line] = [line for line in doctor.stdout.splitlines() if f"refused: {relpath}" in line]
    assert line.startswith("fail") and TOO_DEEP in line and "repair: " in line
    # The teammate reverts: the host syncs again and pushes what it learned meanwhile.
    plain_git("revert", "--no-edit", bad, cwd=person.clone)
    plain_git("push", "--quiet", "origin", "main", cwd=person.clone)
    assert alpha.sync()["error"] is None
    pushed = plain_git("ls-tree", "-r", "--name-only", "main", cwd=remote).stdout.splitlines()
    assert "learned-while-refused/SKILL.md" in pushed
    assert alpha.cli("doctor", "--no-llm").returncode == 0


@pytest.mark.slow
def test_deep_shared_files_already_in_the_work_tree_read_as_none_and_doctor_names_them(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Files that came in before skilld refused them: each reads as none, and goes on."""
    remote = bare_remote(tmp_path / "team.git")
    alpha = team_and_local(tmp_path, remote, fake_llm.base_url)
    (alpha.skills / ".skilld" / "manifest.json").write_bytes(deep_manifest())
    (alpha.skills / ".skilld" / "usage" / "bravo.json").write_bytes(deep_usage("bravo"))

    doctor = alpha.cli("doctor", "--no-llm")
    no_traceback(doctor, "doctor")
    warned = [line for line in doctor.stdout.splitlines() if TOO_DEEP in line]
    assert len(warned) == 2 and all(line.startswith("warn") for line in warned)
    assert any(".skilld/manifest.json" in line for line in warned)
    assert any(".skilld/usage/bravo.json" in line for line in warned)
    every_command_goes_on(alpha, fake_llm, "already-there")
    # The skill `once` learned into the team library wrote a manifest every host reads.
    manifest = json.loads((alpha.skills / ".skilld" / "manifest.json").read_bytes())
    assert "learned-already-there" in manifest["skills"]


@pytest.mark.parametrize(
    ("content", "reason", "doctor_says", "use_count"),
    [
        ('{"fix-venv": {"use_count": 2}, "deep": ' + nested() + "}", TOO_DEEP, TOO_DEEP, 1),
        # Not JSON, so its records are salvaged; past its first record, a key with a newline
        # and an escaped quote: read from that quote, brackets 100,000 deep follow a key. A
        # salvage never reads a key out of a string, so it recovers the first record only.
        (
            '{"fix-venv": {"use_count": 2}, "s\n\\"": {"a": "' + '{"a":' * DEPTH + '"}}, x',
            "not valid JSON",
            "Invalid control character",
            3,
        ),
    ],
    ids=["deep", "damaged, deep inside a string"],
)
def test_a_deep_local_usage_json_is_set_aside_and_the_listing_goes_on(
    workspace: Workspace, content: str, reason: str, doctor_says: str, use_count: int
) -> None:
    workspace.write_config()
    workspace.cli_here("skills", "write", "fix-venv", "--description", "F.", "--content", "1. Go.")
    (workspace.skills / ".usage.json").write_text(content)

    doctor = workspace.cli("doctor", "--no-llm")
    no_traceback(doctor, "doctor")
    [line] = [line for line in doctor.stdout.splitlines() if ".usage.json" in line]
    assert line.startswith("warn") and doctor_says in line
    listed = workspace.cli("skills", "list", "--json")

    no_traceback(listed, "skills list")
    assert listed.returncode == 0
    assert [row["name"] for row in json.loads(listed.stdout)] == ["fix-venv"]
    [event] = workspace.events("usage_corrupt")
    assert reason in event["reason"]
    [copy] = workspace.skills.glob(".usage.json.corrupt-*")
    assert copy.read_text() == content
    used = workspace.cli("usage", "use", "fix-venv")
    assert used.returncode == 0, used.stderr
    records = json.loads((workspace.skills / ".usage.json").read_text())
    assert records["fix-venv"]["use_count"] == use_count


def test_a_deep_hub_lock_leaves_the_listing_as_it_was(workspace: Workspace) -> None:
    workspace.write_config()
    workspace.cli_here("skills", "write", "fix-venv", "--description", "F.", "--content", "1. Go.")
    (workspace.skills / ".hub").mkdir()
    (workspace.skills / ".hub" / "lock.json").write_text('{"installed": ' + nested() + "}")

    listed = workspace.cli("skills", "list", "--json")

    no_traceback(listed, "skills list")
    assert listed.returncode == 0
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["owner"]) == ("fix-venv", "managed")
