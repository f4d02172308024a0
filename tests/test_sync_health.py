"""A broken, diverged or hostile environment: reported with the command that repairs it, never
silently reset; a hanging remote is cut off; the user's own git config is never read."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from skilld.sync import GitMissing, TeamRepo
from tests.synchosts import Host, Person, bare_remote, plain_git, remote_files


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return bare_remote(tmp_path / "team.git")


@pytest.fixture
def host(tmp_path: Path, remote: Path) -> Host:
    alpha = Host(tmp_path, "alpha", remote)
    alpha.repo.setup()
    alpha.write_skill("first", "The first skill.")
    assert alpha.repo.sync().ok
    return alpha


def run_repair(command: str) -> None:
    """Run a repair command as a person would paste it; `skilld sync` is the test's next step."""
    subprocess.run(command.removesuffix(" && skilld sync"), shell=True, check=True)


def head_of(host: Host) -> str:
    return plain_git("rev-parse", "HEAD", cwd=host.skills).stdout.strip()


@pytest.mark.parametrize(
    ("break_it", "code", "repair"),
    [
        (lambda h: plain_git("checkout", "--quiet", "--detach", cwd=h.skills),
         "detached-head", "git -C {root} switch main"),
        (lambda h: plain_git("switch", "--quiet", "-c", "feature", cwd=h.skills),
         "wrong-branch", "git -C {root} switch main"),
        (lambda h: plain_git("remote", "set-url", "origin", "/elsewhere.git", cwd=h.skills),
         "wrong-remote", "git -C {root} remote set-url origin {remote}"),
        (lambda h: plain_git("remote", "remove", "origin", cwd=h.skills),
         "no-remote", "git -C {root} remote add origin {remote}"),
    ],
)  # fmt: skip
def test_a_diverted_work_tree_is_reported_with_its_repair_and_left_alone(
    host: Host, remote: Path, break_it: Callable[[Host], object], code: str, repair: str
) -> None:
    break_it(host)
    host.write_skill("meanwhile", "Learned while broken.")
    before = head_of(host)

    report = host.repo.sync()

    assert not report.ok
    [problem] = report.problems
    assert problem.code == code
    assert problem.repair == repair.format(root=host.skills, remote=remote)
    assert report.error is not None and problem.repair in report.error
    assert head_of(host) == before
    assert host.repo.status().problems == report.problems
    run_repair(problem.repair)
    if code in ("detached-head", "wrong-branch"):
        plain_git("merge", "--quiet", "--ff-only", before, cwd=host.skills)
    assert host.repo.sync().ok
    # The remote's whole list: a repair never publishes anything but the library.
    assert remote_files(remote) == {
        ".gitignore",
        ".skilld/manifest.json",
        "first/SKILL.md",
        "meanwhile/SKILL.md",
    }


def test_a_rebase_a_person_left_unfinished_stops_syncing_until_aborted(
    host: Host, remote: Path
) -> None:
    skill = host.skills / "first" / "SKILL.md"
    plain_git("switch", "--quiet", "-c", "side", cwd=host.skills)
    skill.write_text("side\n")
    plain_git("commit", "--quiet", "-am", "side", cwd=host.skills)
    plain_git("switch", "--quiet", "main", cwd=host.skills)
    skill.write_text("main\n")
    plain_git("commit", "--quiet", "-am", "main", cwd=host.skills)
    assert plain_git("rebase", "side", cwd=host.skills, check=False).returncode != 0
    conflicted = skill.read_bytes()

    report = host.repo.sync()

    [problem] = report.problems
    assert (problem.code, problem.repair) == ("in-progress", f"git -C {host.skills} rebase --abort")
    assert skill.read_bytes() == conflicted  # skilld touched nothing
    run_repair(problem.repair)
    assert host.repo.sync().ok
    assert remote_files(remote) == {".gitignore", ".skilld/manifest.json", "first/SKILL.md"}


@pytest.mark.parametrize("damage", ["corrupt", "unrelated"])
def test_a_corrupt_or_unrelated_repository_is_rejoined_by_its_repair_keeping_every_file(
    host: Host, remote: Path, damage: str
) -> None:
    host.write_skill("unpushed", "Not pushed yet.")
    if damage == "corrupt":
        (host.skills / ".git" / "HEAD").write_text("garbage\n")
    else:
        plain_git("checkout", "--quiet", "--orphan", "fresh", cwd=host.skills)
        plain_git("commit", "--quiet", "-m", "start over", cwd=host.skills)
        plain_git("branch", "--quiet", "-M", "fresh", "main", cwd=host.skills)

    report = host.repo.sync()

    [problem] = report.problems
    expected = "not-a-repository" if damage == "corrupt" else "unrelated-history"
    assert problem.code == expected
    aside = host.repo.aside_dir
    assert host.skills not in aside.parents
    assert problem.repair == (
        f"mkdir -p {aside} && mv {host.skills / '.git'} "
        f'"$(mktemp -d {aside}/skills.XXXXXX)" && skilld sync'
    )
    run_repair(problem.repair)
    assert host.repo.sync().ok
    [moved] = aside.iterdir()
    assert (moved / ".git" / "config").is_file()  # the old metadata, kept outside the tree
    assert remote_files(remote) == {
        ".gitignore",
        ".skilld/manifest.json",
        "first/SKILL.md",
        "unpushed/SKILL.md",
    }


def test_a_force_pushed_remote_is_reported_and_never_pushed_back_over(
    tmp_path: Path, host: Host, remote: Path
) -> None:
    person = Person(tmp_path, remote)
    plain_git("commit", "--quiet", "--amend", "-m", "rewritten", cwd=person.clone)
    plain_git("push", "--quiet", "--force", "origin", "main", cwd=person.clone)
    rewritten = plain_git("rev-parse", "main", cwd=remote).stdout
    host.write_skill("later", "Learned after the rewrite.")

    report = host.repo.sync()

    [problem] = report.problems
    assert problem.code == "remote-rewritten"
    assert plain_git("rev-parse", "main", cwd=remote).stdout == rewritten
    assert host.repo.sync().problems == report.problems  # reported on every round
    run_repair(problem.repair)
    assert host.repo.sync().ok
    assert remote_files(remote) == {
        ".gitignore",
        ".skilld/manifest.json",
        "first/SKILL.md",
        "later/SKILL.md",
    }
    assert plain_git("merge-base", "--is-ancestor", rewritten.strip(), "main", cwd=remote)


def test_a_remote_that_hangs_is_cut_off_with_its_helpers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "ssh.pid"
    fake_ssh = tmp_path / "fake-ssh"
    fake_ssh.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 300\n")
    fake_ssh.chmod(0o755)
    monkeypatch.setenv("GIT_SSH_COMMAND", str(fake_ssh))
    repo = TeamRepo(
        tmp_path / "skills", "ssh://git.example.invalid/team.git", host="alpha",
        network_timeout=1.0,
    )  # fmt: skip
    repo.setup()

    report = repo.sync()

    assert not report.ok
    assert report.error == "git fetch took longer than 1 s and was stopped"
    pid = int(pid_file.read_text())
    wait_until(lambda: not _alive(pid))


def test_without_git_setup_raises_and_sync_reports_it(
    tmp_path: Path, remote: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "no-git-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    repo = TeamRepo(tmp_path / "skills", str(remote), host="alpha")

    with pytest.raises(GitMissing):
        repo.setup()
    report = repo.sync()
    assert not report.ok
    assert report.error is not None and report.error.startswith("git is not installed")


def test_the_users_own_git_config_and_environment_are_ignored(
    tmp_path: Path, remote: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    hooks = home / "hooks"
    hooks.mkdir(parents=True)
    tripped = tmp_path / "hook-ran"
    for hook in ("pre-commit", "commit-msg", "post-commit", "pre-push", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {tripped}\nexit 1\n")
        (hooks / hook).chmod(0o755)
    (home / "ignore").write_text("*.md\n.skilld/\n")
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Mallory\n\temail = mallory@example.com\n"
        "[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = /bin/false\n"
        f"[core]\n\thooksPath = {hooks}\n\texcludesFile = {home / 'ignore'}\n"
        "[init]\n\tdefaultBranch = trunk\n"
        f'[url "/nonexistent/"]\n\tinsteadOf = {remote.parent}/\n'
    )
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM", raising=False)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere.git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "elsewhere.index"))
    # The control: git as the user runs it cannot even commit in this environment.
    control = tmp_path / "control"
    subprocess.run(["git", "init", "-q", str(control)], check=True, env=_without_git_dir())
    (control / "f.md").write_text("x\n")
    added = subprocess.run(["git", "-C", str(control), "add", "-f", "f.md"], env=_without_git_dir())
    committed = subprocess.run(
        ["git", "-C", str(control), "commit", "-qm", "x"], env=_without_git_dir(),
        capture_output=True,
    )  # fmt: skip
    assert added.returncode == 0 and committed.returncode != 0 and tripped.exists()
    tripped.unlink()

    alpha = Host(tmp_path, "alpha", remote)
    alpha.repo.setup()
    outcome = alpha.write_skill("safe", "Works anyway.")
    report = alpha.repo.sync()

    assert outcome.commit and report.ok
    assert {"safe/SKILL.md", ".skilld/manifest.json"} <= remote_files(remote)
    author = plain_git("log", "-1", "--format=%an <%ae>|%cn <%ce>", "main", cwd=remote).stdout
    assert author.strip() == "skilld <skilld@alpha>|skilld <skilld@alpha>"
    assert not tripped.exists()
    assert not (tmp_path / "elsewhere.git").exists()


def _without_git_dir() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_INDEX_FILE")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(")")[-1].split()[0] == "Z")


def wait_until(condition: Callable[[], bool], *, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.02)


def test_a_library_dir_that_cannot_be_written_fails_the_round_with_the_reason(
    tmp_path: Path, remote: Path
) -> None:
    blocked = tmp_path / "a-file-not-a-dir"
    blocked.write_text("in the way\n")
    repo = TeamRepo(blocked / "skills", str(remote), host="alpha")

    report = repo.sync()

    assert not report.ok
    assert report.error == f"Not a directory: {blocked / 'skills'}"
    assert blocked.read_text() == "in the way\n"
