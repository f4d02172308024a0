"""Three hosts on one machine share a library through one bare repository (real git)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

import skilld.sync.repo as repo_module
from skilld.sync import MANIFEST_PATH, ManifestEntry, SyncReport, SyncStatus, TeamRepo
from skilld.sync.git import Git
from skilld.sync.manifest import render_manifest
from skilld.sync.remote import Fetched
from tests.synchosts import (
    Host,
    Person,
    bare_remote,
    plain_git,
    remote_files,
    remote_subjects,
    sha256,
    skill_text,
)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return bare_remote(tmp_path / "team.git")


@pytest.fixture
def hosts(tmp_path: Path, remote: Path) -> list[Host]:
    team = [Host(tmp_path, name, remote) for name in ("alpha", "bravo", "charlie")]
    for host in team:
        host.repo.setup()
    return team


def sync_all(hosts: list[Host]) -> list[SyncReport]:
    reports = [host.repo.sync() for host in hosts]
    assert [r.error for r in reports] == [None] * len(hosts)
    return reports


def test_each_host_learns_a_skill_and_two_rounds_give_everyone_all_of_them(
    hosts: list[Host], remote: Path
) -> None:
    for host in hosts:
        assert host.write_skill(f"{host.name}-skill", f"Learned on {host.name}.").commit

    sync_all(hosts)
    sync_all(hosts)

    names = [f"{host.name}-skill" for host in hosts]
    for host in hosts:
        for name in names:
            assert host.read(name) == hosts[names.index(name)].read(name)
            assert host.owns(name), f"{name} should be managed on {host.name}"
    assert len({host.head_tree() for host in hosts}) == 1
    # One commit per change: the first host's join of its (empty) library, then one create
    # each; the other hosts' joins held nothing new and were dropped.
    assert sorted(remote_subjects(remote)) == sorted(
        ["library of alpha", *(f"created {name}" for name in names)]
    )
    for host in hosts:
        assert host.repo.status().ahead == 0


def test_two_hosts_update_one_skill_all_converge_and_the_other_version_stays_in_history(
    hosts: list[Host], remote: Path
) -> None:
    alpha, bravo, charlie = hosts
    alpha.write_skill("shared", "Version one.")
    sync_all(hosts)
    alpha.write_skill("shared", "Alpha's improvement.", event="updated")
    bravo.write_skill("shared", "Bravo's improvement.", event="updated")

    first = alpha.repo.sync()
    second = bravo.repo.sync()
    sync_all(hosts)

    winner, loser = (
        skill_text("shared", "Alpha's improvement."),
        skill_text("shared", "Bravo's improvement."),
    )
    for host in hosts:
        assert host.read("shared") == winner
        assert host.owns("shared")
        assert b"<<<<<<<" not in host.read("shared")
        assert b"<<<<<<<" not in (host.skills / MANIFEST_PATH).read_bytes()
    assert first.conflicts == ()
    [conflict] = second.conflicts
    assert (conflict.skill, conflict.winner) == ("shared", "remote")
    assert (conflict.winner_sha256, conflict.loser_sha256) == (sha256(winner), sha256(loser))
    assert (conflict.winner_host, conflict.loser_host) == ("alpha", "bravo")
    # The loser is published history on every host: `skills history`/`rollback` reach it.
    versions = charlie.repo.file_versions("shared/SKILL.md")
    digests = [v.sha256 for v in versions]
    assert sha256(loser) in digests and digests[-1] == sha256(winner)
    assert charlie.repo.read_version(conflict.loser_commit, "shared/SKILL.md") == loser
    assert remote_subjects(remote)[-1].startswith("conflict shared")


def test_a_hand_edit_pushed_from_a_plain_clone_is_kept_and_not_managed_anywhere(
    tmp_path: Path, hosts: list[Host], remote: Path
) -> None:
    alpha, bravo, _ = hosts
    alpha.write_skill("deploy", "Run the script.")
    sync_all(hosts)
    edited = skill_text("deploy", "Run the script, then check the dashboard.")
    Person(tmp_path, remote).edit("deploy/SKILL.md", edited)
    # Meanwhile bravo's skilld updates the same skill: a managed update loses to a hand edit.
    bravo.write_skill("deploy", "Run the script twice.", event="updated")

    report = bravo.repo.sync()
    sync_all(hosts)

    for host in hosts:
        assert host.read("deploy") == edited
        assert not host.owns("deploy")
    [conflict] = report.conflicts
    assert (conflict.winner, conflict.winner_host) == ("remote", "pat@example.com")
    assert conflict.rule == "a hand edit beats a managed update"


def test_a_local_hand_edit_beats_a_teammates_managed_update(hosts: list[Host]) -> None:
    alpha, bravo, _ = hosts
    alpha.write_skill("lint", "Run ruff.")
    sync_all(hosts)
    alpha.write_skill("lint", "Run ruff and mypy.", event="updated")
    assert alpha.repo.sync().ok
    by_hand = skill_text("lint", "Run ruff; my team prefers flake8 too.")
    (bravo.skills / "lint" / "SKILL.md").write_bytes(by_hand)

    report = bravo.repo.sync()
    sync_all(hosts)

    [conflict] = report.conflicts
    assert (conflict.winner, conflict.rule) == ("local", "a hand edit beats a managed update")
    for host in hosts:
        assert host.read("lint") == by_hand
        assert not host.owns("lint")
    subjects = [v.subject for v in alpha.repo.file_versions("lint/SKILL.md")]
    assert "changed by hand on bravo" in subjects


def test_three_uses_on_one_host_count_three_on_another(hosts: list[Host]) -> None:
    alpha, bravo, _ = hosts
    alpha.write_skill("format", "Run the formatter.")
    record = {"use_count": 3, "last_used_at": "2025-03-01T10:00:00+00:00", "pinned": True}
    assert alpha.repo.sync(usage={"format": record}).ok
    assert bravo.repo.sync(usage={}).ok

    team = bravo.repo.team_usage({"format": {"use_count": 1, "pinned": False}})
    assert team["format"]["use_count"] == 4
    assert team["format"]["last_used_at"] == "2025-03-01T10:00:00+00:00"
    assert team["format"]["pinned"] is False  # pins stay each host's own
    assert bravo.repo.team_usage({})["format"]["use_count"] == 3
    # Publishing again without a change makes no commit.
    assert alpha.repo.sync(usage={"format": record}).committed == ()


def test_the_remote_gone_keeps_local_commits_and_the_next_sync_pushes_them(
    tmp_path: Path, hosts: list[Host], remote: Path
) -> None:
    alpha, bravo, _ = hosts
    sync_all(hosts)
    moved = tmp_path / "moved.git"
    remote.rename(moved)
    alpha.write_skill("offline", "Learned on a plane.")

    report = alpha.repo.sync()

    assert not report.ok
    assert report.error is not None and "does not appear to be a git repository" in report.error
    assert report.ahead == 1 and alpha.repo.status().ahead == 1
    moved.rename(remote)
    assert alpha.repo.sync().pushed == 1
    assert bravo.repo.sync().ok
    assert bravo.read("offline") == skill_text("offline", "Learned on a plane.")


def test_joining_a_library_full_of_skills_to_a_remote_full_of_skills_loses_no_file(
    tmp_path: Path, remote: Path
) -> None:
    alpha = Host(tmp_path, "alpha", remote)
    alpha.repo.setup()
    alpha.write_skill("team-only", "From the team.")
    alpha.write_skill("both", "The team's version.")
    assert alpha.repo.sync().ok
    newcomer = Host(tmp_path, "newcomer", remote)
    for name, body in (("mine-only", "From my laptop."), ("both", "My old version.")):
        (newcomer.skills / name).mkdir(parents=True)
        (newcomer.skills / name / "SKILL.md").write_bytes(skill_text(name, body))
    (newcomer.skills / "README.md").write_text("my notes\n")
    (newcomer.skills / "notes.txt").write_text("not a skill, not shared\n")
    (newcomer.skills / ".usage.json").write_text('{"mine-only": {"use_count": 2}}\n')
    mine = sha256(skill_text("mine-only", "From my laptop."))

    newcomer.repo.setup(managed={"mine-only": _entry("mine-only", mine)})
    report = newcomer.repo.sync()
    assert alpha.repo.sync().ok

    assert report.ok
    for host in (alpha, newcomer):
        assert host.read("team-only") == skill_text("team-only", "From the team.")
        assert host.read("mine-only") == skill_text("mine-only", "From my laptop.")
        assert host.read("both") == skill_text("both", "The team's version.")
        assert (host.skills / "README.md").read_text() == "my notes\n"
        assert host.owns("mine-only") and host.owns("team-only")
    [conflict] = report.conflicts
    assert (conflict.skill, conflict.winner) == ("both", "remote")
    old = alpha.repo.read_version(conflict.loser_commit, "both/SKILL.md")
    assert old == skill_text("both", "My old version.")
    assert (newcomer.skills / ".usage.json").read_text() == '{"mine-only": {"use_count": 2}}\n'
    assert ".usage.json" not in remote_files(remote)
    # A file a library may not share (incoming.py) stays where it is, on its host only.
    assert (newcomer.skills / "notes.txt").read_text() == "not a skill, not shared\n"
    assert "notes.txt" not in remote_files(remote)


def test_an_empty_dir_joined_to_a_team_remote_is_a_clone_of_it(
    tmp_path: Path, hosts: list[Host], remote: Path
) -> None:
    hosts[0].write_skill("existing", "Already shared.")
    sync_all(hosts[:1])
    before = remote_subjects(remote)
    late = Host(tmp_path, "late", remote)

    assert late.repo.sync().ok

    assert late.read("existing") == hosts[0].read("existing")
    assert remote_subjects(remote) == before
    assert late.head_tree() == hosts[0].head_tree()


def test_deletes_and_archives_travel_and_an_archive_loses_to_an_update_pushed_first(
    hosts: list[Host],
) -> None:
    alpha, bravo, charlie = hosts
    alpha.write_skill("old", "Obsolete.")
    alpha.write_skill("kept", "Still useful.")
    sync_all(hosts)
    with alpha.repo.change(alpha.repo.change_message("deleted", "old"), ["old"],
                           manifest={"old": None}) as deleted:  # fmt: skip
        (alpha.skills / "old" / "SKILL.md").unlink()
        (alpha.skills / "old").rmdir()
    alpha.write_skill("kept", "Still useful, now faster.", event="updated")
    bravo.archive_skill("kept")

    assert deleted.commit
    sync_all(hosts)
    sync_all(hosts)

    for host in hosts:
        assert not (host.skills / "old").exists()
        assert host.read("kept") == skill_text("kept", "Still useful, now faster.")
        assert host.owns("kept")
        assert host.repo.manifest().get("old") is None
    assert len({host.head_tree() for host in hosts}) == 1
    assert charlie.repo.manifest().get("kept").path == "kept/SKILL.md"  # type: ignore[union-attr]


def test_changes_skilld_wrote_but_never_committed_are_recovered_as_its_own(
    hosts: list[Host], remote: Path
) -> None:
    alpha, bravo, _ = hosts
    alpha.write_skill("crashy", "Before the crash.")
    sync_all(hosts)
    # A crash after the manifest and the file were written, before the commit:
    data = skill_text("crashy", "Written just before the crash.")
    manifest = alpha.repo.manifest().changed({"crashy": _entry("crashy", sha256(data))})
    (alpha.skills / MANIFEST_PATH).write_bytes(render_manifest(manifest))
    (alpha.skills / "crashy" / "SKILL.md").write_bytes(data)
    # ...and a crash after the manifest entry of a new skill, before its file:
    ghost = alpha.repo.manifest().changed({"ghost": _entry("ghost", "0" * 64)})
    (alpha.skills / MANIFEST_PATH).write_bytes(render_manifest(ghost))

    assert alpha.repo.sync().ok
    assert bravo.repo.sync().ok

    assert bravo.read("crashy") == data and bravo.owns("crashy")
    assert bravo.repo.manifest().get("ghost") is None
    assert remote_subjects(remote)[-1] == "skilld's uncommitted changes on alpha"


def test_host_local_files_are_never_committed_even_when_gitignore_is_emptied(
    hosts: list[Host], remote: Path
) -> None:
    alpha = hosts[0]
    local = [".usage.json", ".usage.json.lock", ".usage.journal",
             ".usage.json.corrupt-20250101T000000Z", ".usage.json.tmp-0123456789abcdef",
             "x/.SKILL.md.skilld-tmp-abc123"]  # fmt: skip
    for name in local:
        (alpha.skills / name).parent.mkdir(parents=True, exist_ok=True)
        (alpha.skills / name).write_text("host-local\n")
    (alpha.skills / ".gitignore").write_text("")
    (alpha.skills / "by-hand" / "SKILL.md").parent.mkdir()
    (alpha.skills / "by-hand" / "SKILL.md").write_bytes(skill_text("by-hand", "Mine."))

    assert alpha.repo.sync().ok

    files = remote_files(remote)
    assert "by-hand/SKILL.md" in files
    assert not files & set(local)
    # The emptied .gitignore went in with the hand edit; skilld then put its block back.
    assert remote_subjects(remote)[-2:] == [
        "changed by hand on alpha",
        "skilld keeps host-local files out of git",
    ]
    assert ".usage.journal\n" in plain_git("show", "main:.gitignore", cwd=remote).stdout
    assert all((alpha.skills / name).read_text() == "host-local\n" for name in local)


def teammate_pushes_during_fetches(
    monkeypatch: pytest.MonkeyPatch, syncing: Host, teammate: Host, times: int
) -> list[str]:
    """Make `teammate` push a new skill right after each of `syncing`'s first `times` fetches:
    exactly the race a rejected push comes from."""
    real_fetch = repo_module.fetch_branch
    pushed: list[str] = []

    def fetch_then_teammate_pushes(git: Git, branch: str) -> Fetched:
        fetched = real_fetch(git, branch)
        if git.root == syncing.skills and len(pushed) < times:
            pushed.append(f"{teammate.name}-{len(pushed)}")
            teammate.write_skill(pushed[-1], "Pushed between a fetch and a push.")
            assert teammate.repo.sync().ok
        return fetched

    monkeypatch.setattr(repo_module, "fetch_branch", fetch_then_teammate_pushes)
    return pushed


def test_a_push_rejected_because_a_teammate_pushed_meanwhile_is_retried(
    hosts: list[Host], remote: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alpha, bravo, _ = hosts
    sync_all(hosts)
    alpha.write_skill("alpha-skill", "Mine.")
    pushed = teammate_pushes_during_fetches(monkeypatch, alpha, bravo, times=2)

    report = alpha.repo.sync()

    assert report.ok and report.attempts == 3 and report.pushed == 1
    assert {"alpha-skill", *pushed} == {p.split("/")[0] for p in remote_files(remote)} - {
        ".gitignore",
        ".skilld",
    }


def test_a_remote_that_keeps_moving_fails_the_round_and_keeps_the_commit(
    hosts: list[Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    alpha, bravo, _ = hosts
    sync_all(hosts)
    alpha.write_skill("patient", "Waits its turn.")
    teammate_pushes_during_fetches(monkeypatch, alpha, bravo, times=100)

    report = alpha.repo.sync()

    assert not report.ok
    assert report.error == "the remote kept moving: the push was rejected 5 times"
    assert report.ahead == 1
    monkeypatch.undo()
    assert alpha.repo.sync().pushed == 1


def test_history_of_a_skill_lists_every_version_oldest_first(hosts: list[Host]) -> None:
    alpha = hosts[0]
    for n in range(3):
        alpha.write_skill("evolving", f"Version {n}.", event="updated" if n else "created")
    relpath = alpha.repo.relpath(alpha.skills / "evolving" / "SKILL.md")
    assert relpath == "evolving/SKILL.md"
    versions = alpha.repo.file_versions(relpath)
    assert [v.subject for v in versions] == [
        "created evolving",
        "updated evolving",
        "updated evolving",
    ]
    assert [alpha.repo.read_version(v.commit, "evolving/SKILL.md") for v in versions] == [
        skill_text("evolving", f"Version {n}.") for n in range(3)
    ]
    with pytest.raises(KeyError):
        alpha.repo.read_version(versions[0].commit, "missing/SKILL.md")
    assert plain_git("log", "-1", "--format=%an <%ae>", cwd=alpha.skills).stdout.strip() == (
        "skilld <skilld@alpha>"
    )


def _entry(name: str, digest: str) -> ManifestEntry:
    return ManifestEntry(f"{name}/SKILL.md", digest)


def _create_and_sync(args: tuple[Path, Path, str]) -> tuple[bool, str | None]:
    base, remote, name = args
    host = Host(base, "alpha", remote)
    host.write_skill(name, f"Written by process {name}.")
    report = host.repo.sync()
    return report.ok, report.error


def test_the_daemon_and_a_cli_sync_in_other_processes_never_interleave(
    tmp_path: Path, hosts: list[Host], remote: Path
) -> None:
    alpha = hosts[0]
    names = [f"parallel-{n}" for n in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_create_and_sync, [(tmp_path, remote, name) for name in names])

    assert all(ok for ok, _ in results), results
    assert alpha.repo.sync().ok
    assert {f"{name}/SKILL.md" for name in names} <= remote_files(remote)
    assert alpha.repo.status() == SyncStatus(True, alpha.repo.status().head, 0, ())
    assert plain_git("status", "--porcelain", cwd=alpha.skills).stdout == ""
    created = sorted(s for s in remote_subjects(remote) if s.startswith("created parallel"))
    assert created == [f"created {name}" for name in names]


def test_a_change_that_fails_puts_the_manifest_back_and_commits_nothing(
    hosts: list[Host],
) -> None:
    alpha = hosts[0]
    alpha.write_skill("steady", "Unchanged.")
    manifest_before = (alpha.skills / MANIFEST_PATH).read_bytes()
    head_before = alpha.repo.status().head

    with pytest.raises(OSError), alpha.repo.change(
        alpha.repo.change_message("created", "doomed"), ["doomed/SKILL.md"],
        manifest={"doomed": ManifestEntry("doomed/SKILL.md", "d" * 64)},
    ):  # fmt: skip
        raise OSError("disk full")

    assert (alpha.skills / MANIFEST_PATH).read_bytes() == manifest_before
    assert alpha.repo.status().head == head_before
    assert alpha.repo.sync().committed == ()


def test_before_setup_a_change_is_written_and_the_join_commits_it(
    tmp_path: Path, remote: Path
) -> None:
    fresh = Host(tmp_path, "fresh", remote)
    assert fresh.repo.status() == SyncStatus(False, None, 0, ())

    outcome = fresh.write_skill("early", "Before git was set up.")

    assert outcome.commit is None and outcome.error is not None
    assert fresh.repo.sync().ok
    assert "early/SKILL.md" in remote_files(remote)
    assert fresh.owns("early")


@pytest.mark.parametrize(
    ("remote_url", "host", "branch", "complaint"),
    [
        ("/r.git", "bad host", "main", "not a usable sync host id"),
        ("/r.git", "ok", "main:evil", "not a usable branch name"),
        ("", "ok", "main", "not a usable git remote"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(
    tmp_path: Path, remote_url: str, host: str, branch: str, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        TeamRepo(tmp_path / "skills", remote_url, host=host, branch=branch)


def test_a_remote_a_person_started_keeps_its_files_and_gains_skillds_gitignore_block(
    tmp_path: Path, remote: Path
) -> None:
    starter = tmp_path / "starter"
    plain_git("init", "--quiet", "--initial-branch=main", str(starter), cwd=tmp_path)
    (starter / "README.md").write_text("Our team's skills.\n")
    (starter / ".gitignore").write_text("*.log\n")
    plain_git("add", "-A", cwd=starter)
    plain_git("commit", "--quiet", "-m", "start", cwd=starter)
    plain_git("push", "--quiet", str(remote), "main", cwd=starter)
    alpha = Host(tmp_path, "alpha", remote)

    assert alpha.repo.setup().problems == ()
    report = alpha.repo.sync()

    assert report.ok
    ignore = plain_git("show", "main:.gitignore", cwd=remote).stdout
    assert ignore.startswith("*.log\n") and ".usage.json\n" in ignore
    assert (alpha.skills / "README.md").read_text() == "Our team's skills.\n"
    assert plain_git("status", "--porcelain", cwd=alpha.skills).stdout == ""
