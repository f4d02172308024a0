"""What a teammate's push may do to a host, through the CLI (issue 22, findings 1-4, 7, 8).

Each host is a skilld installation (`tests.test_team.Host`); the teammate is a plain `git
clone` of the bare remote that pushes what a careless or hostile person might. Every test
asserts on the remote's history, the files outside the library, the exit codes and what
`doctor` and `status --check` print.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from skilld.state import StateDB
from tests.fakellm import FakeLLM
from tests.synchosts import Person, bare_remote, plain_git, remote_files
from tests.test_team import Host

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- planted-secret-0f9e"


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return bare_remote(tmp_path / "team.git")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A private key beside the library, where `../../secret/id_rsa` from it leads."""
    path = tmp_path / "alpha" / "secret" / "id_rsa"
    path.parent.mkdir(parents=True)
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture
def alpha(tmp_path: Path, remote: Path, fake_llm: FakeLLM, secret: Path) -> Host:
    host = Host(tmp_path / "alpha", fake_llm.base_url, name="alpha", remote=remote)
    host.sessions.mkdir(parents=True)
    host.write_config()
    host.ok("skills", "write", "fix-venv", "--description", "Fix a venv.", "--content", "1. Go.")
    host.sync()
    return host


def push(person: Person, *paths: str, message: str = "teammate's change") -> str:
    """Commit what the test put in the clone (`paths`, added or removed) and push it."""
    if paths:
        plain_git("add", "--all", "--force", "--", *paths, cwd=person.clone)
    plain_git("commit", "--quiet", "-m", message, cwd=person.clone)
    plain_git("push", "--quiet", "origin", "main", cwd=person.clone)
    return plain_git("rev-parse", "HEAD", cwd=person.clone).stdout.strip()


def remote_history(remote: Path) -> str:
    return plain_git("log", "-p", "--all", "--binary", cwd=remote).stdout


def fresh_heartbeat(host: Host) -> None:
    """A daemon's heartbeat (this test's own pid, alive): `status --check` then exits 0 unless
    something else is wrong."""
    with StateDB(host.state / "state.db") as state:
        state.set_meta("heartbeat", time.time())
        state.set_meta("daemon", {"pid": os.getpid(), "interval": 60})


def run_repair(command: str, cwd: Path | None = None) -> None:
    """A repair command as a person pastes it (with a git identity for its commits)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Pat", "GIT_AUTHOR_EMAIL": "pat@example.com",
        "GIT_COMMITTER_NAME": "Pat", "GIT_COMMITTER_EMAIL": "pat@example.com",
    }  # fmt: skip
    command = command.removesuffix(" && skilld sync")
    subprocess.run(command, shell=True, check=True, cwd=cwd, env=env, capture_output=True)


def test_a_symlinked_gitignore_is_refused_and_the_file_it_names_never_leaves(
    alpha: Host, remote: Path, tmp_path: Path
) -> None:
    person = Person(tmp_path, remote)
    (person.clone / ".gitignore").unlink()
    (person.clone / ".gitignore").symlink_to("../../secret/id_rsa")
    bad = push(person, ".gitignore")

    failed = alpha.cli("sync")

    assert failed.returncode == 1
    assert "refused: .gitignore: a symbolic link" in failed.stderr
    assert SECRET not in remote_history(remote)
    assert not (alpha.skills / ".gitignore").is_symlink()
    [event] = alpha.events("sync_refused")
    assert event["detail"]["commit"] == bad and event["detail"]["path"] == ".gitignore"
    # Learning goes on locally; the repair doctor prints fixes the remote, and the next
    # round pushes what was learned meanwhile.
    alpha.ok("skills", "write", "later", "--description", "Later.", "--content", "1. Go.")
    doctor = alpha.cli("doctor", "--no-llm")
    [line] = [line for line in doctor.stdout.splitlines() if "refused: .gitignore" in line]
    assert line.startswith("fail") and str(remote) not in line  # the URL is never printed
    run_repair(line.split("repair: ", 1)[1], cwd=tmp_path)
    assert alpha.sync()["error"] is None
    assert "later/SKILL.md" in remote_files(remote)
    assert SECRET not in remote_history(remote)


def test_a_symlinked_skilld_folder_writes_nothing_outside_and_doctor_names_it(
    alpha: Host, remote: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "alpha" / "outside"
    outside.mkdir()
    person = Person(tmp_path, remote)
    plain_git("rm", "-r", "--quiet", ".skilld", cwd=person.clone)
    (person.clone / ".skilld").symlink_to("../../outside")
    push(person, ".skilld")
    alpha.ok("usage", "use", "fix-venv")

    failed = alpha.cli("sync")

    assert failed.returncode == 1 and "refused: .skilld: a symbolic link" in failed.stderr
    assert list(outside.iterdir()) == []
    assert (alpha.skills / ".skilld").is_dir() and not (alpha.skills / ".skilld").is_symlink()
    doctor = alpha.cli("doctor", "--no-llm")
    assert doctor.returncode == 1
    [line] = [line for line in doctor.stdout.splitlines() if "refused" in line]
    assert line.startswith("fail") and ".skilld" in line and "remote get-url origin" in line
    # A later round fails the same way, and never wedges: once fixed, it syncs again.
    assert alpha.cli("sync").returncode == 1
    (person.clone / ".skilld").unlink()
    plain_git("checkout", "--quiet", "HEAD~1", "--", ".skilld", cwd=person.clone)
    push(person, ".skilld", message="the manifest back")
    assert alpha.sync()["error"] is None
    assert alpha.cli("doctor", "--no-llm").returncode == 0
    assert list(outside.iterdir()) == []


def test_the_repair_of_a_force_pushed_remote_publishes_no_git_metadata(
    alpha: Host, remote: Path, tmp_path: Path
) -> None:
    person = Person(tmp_path, remote)
    plain_git("commit", "--quiet", "--amend", "-m", "rewritten", cwd=person.clone)
    plain_git("push", "--quiet", "--force", "origin", "main", cwd=person.clone)
    alpha.ok("skills", "write", "after", "--description", "After.", "--content", "1. Go.")

    failed = alpha.cli("sync")
    assert failed.returncode == 1 and "rewritten" in failed.stderr
    doctor = alpha.cli("doctor", "--no-llm")
    assert doctor.returncode == 1
    [line] = [line for line in doctor.stdout.splitlines() if "rewritten" in line]
    repair = line.split("repair: ", 1)[1]
    assert str(alpha.state) in repair and f"{alpha.skills}/.git." not in repair
    run_repair(repair)
    assert alpha.sync()["error"] is None

    assert remote_files(remote) == {
        ".gitignore",
        ".skilld/manifest.json",
        ".skilld/usage/alpha.json",
        "fix-venv/SKILL.md",
        "after/SKILL.md",
    }
    ever = plain_git("log", "--all", "--format=", "--name-only", cwd=remote).stdout.split()
    assert not [path for path in ever if ".git" in path.removeprefix(".gitignore")]
    assert alpha.cli("doctor", "--no-llm").returncode == 0


def test_a_committed_usage_json_never_wipes_the_hosts_pins_and_counts(
    alpha: Host, remote: Path, tmp_path: Path
) -> None:
    alpha.ok("skills", "pin", "fix-venv")
    alpha.ok("usage", "use", "fix-venv")
    published = plain_git("show", "main:.skilld/usage/alpha.json", cwd=remote).stdout
    person = Person(tmp_path, remote)
    (person.clone / ".usage.json").write_text("{}\n")
    push(person, ".usage.json")

    failed = alpha.cli("sync")

    assert failed.returncode == 1
    assert "refused: .usage.json: a host-local file" in failed.stderr
    row = alpha.skills_listed()["fix-venv"]
    assert (row["pinned"], row["use_count"]) == (True, 1)
    # Nothing was pushed over the refused commit, and the host's own counts wait for it.
    assert plain_git("show", "main:.skilld/usage/alpha.json", cwd=remote).stdout == published
    assert '"use_count": 1' in alpha.git("show", "HEAD:.skilld/usage/alpha.json")
    # The teammate removes it again: the host syncs on, its sidecar untouched.
    plain_git("rm", "--quiet", ".usage.json", cwd=person.clone)
    push(person, message="remove .usage.json")
    assert alpha.sync()["error"] is None
    assert alpha.sync()["error"] is None
    row = alpha.skills_listed()["fix-venv"]
    assert (row["pinned"], row["use_count"]) == (True, 1)
    assert '"use_count": 1' in plain_git("show", "main:.skilld/usage/alpha.json", cwd=remote).stdout


def test_doctor_and_status_check_fail_for_a_rewritten_remote_with_its_repair(
    alpha: Host, remote: Path, tmp_path: Path
) -> None:
    fresh_heartbeat(alpha)
    assert alpha.cli("status", "--check").returncode == 0
    person = Person(tmp_path, remote)
    plain_git("commit", "--quiet", "--amend", "-m", "rewritten", cwd=person.clone)
    plain_git("push", "--quiet", "--force", "origin", "main", cwd=person.clone)
    assert alpha.cli("sync").returncode == 1

    doctor = alpha.cli("doctor", "--no-llm")
    assert doctor.returncode == 1
    [line] = [line for line in doctor.stdout.splitlines() if "rewritten" in line]
    assert line.startswith("fail") and "repair: " in line
    fresh_heartbeat(alpha)
    check = alpha.cli("status", "--check")
    assert check.returncode == 1
    assert "rewritten" in check.stderr and "repair: " in check.stderr


def test_a_readme_at_the_top_of_a_library_is_not_a_skill(alpha: Host) -> None:
    (alpha.skills / "README.md").write_text("# Our team's skills\n")
    (alpha.skills / "LICENSE").write_text("MIT\n")

    listed = alpha.skills_listed()

    assert sorted(listed) == ["fix-venv"]
    assert alpha.sync()["error"] is None
