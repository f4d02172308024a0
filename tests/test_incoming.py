"""What a library's repository may hold (sync/incoming.py): the rule a fetched tip and every
commit skilld makes are held to."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from skilld.sync.incoming import (
    LIVE_TRIGGER,
    MAX_FILE_BYTES,
    NOT_UTF8,
    entry_problem,
    path_problem,
    shown,
)
from tests.synchosts import Host, Person, bare_remote, remote_files


@pytest.mark.parametrize(
    "path",
    [
        "fix-venv/SKILL.md",
        "fix-venv/scripts/run.sh",
        "fix-venv/references/.hidden-notes.md",
        "devops/deploy-app/SKILL.md",
        "fix-venv.md",
        ".archive/old-habit/SKILL.md",
        ".archive/old-habit-20250101T000000Z/SKILL.md",
        ".archive/flat-one-20250101T000000Z.md",
        ".skilld/manifest.json",
        ".skilld/usage/laptop.json",
        "README.md",
        "LICENSE",
        ".gitignore",
        ".gitattributes",
        "fix-venv/.gitignore",
    ],
)
def test_what_a_library_may_hold(path: str) -> None:
    assert path_problem(path) is None


@pytest.mark.parametrize(
    ("path", "why"),
    [
        (".usage.json", "host-local"),
        ("fix-venv/.usage.json.lock", "host-local"),
        (".usage.journal", "host-local"),
        (".usage.json.corrupt-20250101T000000Z", "host-local"),
        ("fix-venv/.SKILL.md.skilld-tmp-12-ab", "host-local"),
        (".git/config", "git metadata"),
        (".gitmodules", "git metadata"),
        ("fix-venv/.git/HEAD", "git metadata"),
        (".git.skilld-aside/config", "git metadata"),
        (".skilld/config", "manifest"),
        (".skilld/usage/bad host.json", "manifest"),
        (".lfsconfig", "not a skill folder"),
        ("notes.txt", "not a skill folder"),
        ("Notes.md", "not a skill folder"),
        (".archive/README.md", "not an archived skill"),
        (".hidden/SKILL.md", "not in a skill folder"),
        ("fix-venv/../x", "'..'"),
        ("a//b", "'..'"),
        ("fix-venv/line\nbreak.md", "control character"),
        ("fix-venv/\udcff.md", "not UTF-8"),
        (".Usage.JSON", "host-local"),
        (".GIT/config", "git metadata"),
        (".GitModules", "git metadata"),
        (".usage\u200c.json", "invisible"),
    ],
)
def test_what_a_library_may_not_hold_and_why(path: str, why: str) -> None:
    problem = path_problem(path)
    assert problem is not None and why in problem


def test_links_gitlinks_and_big_files_are_refused_whatever_their_name() -> None:
    assert entry_problem("100644", MAX_FILE_BYTES) is None
    assert entry_problem("100755", 10) is None
    assert entry_problem("120000", 10) == "a symbolic link"
    assert entry_problem("160000", None) == "a gitlink (submodule)"
    assert "over the limit" in (entry_problem("100644", MAX_FILE_BYTES + 1) or "")


def test_a_name_is_shown_on_one_line_whatever_its_bytes() -> None:
    assert shown("fix-venv/line\nbreak.md") == "fix-venv/line\\nbreak.md"
    assert shown(b"a/\xff.md".decode("utf-8", "surrogateescape")) == "a/\\xff.md"


def test_what_a_library_may_not_share_stays_on_its_host_uncommitted(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "team.git")
    host = Host(tmp_path, "alpha", remote)
    host.repo.setup()
    host.write_skill("fix-venv", "Recreate it.")
    secret = tmp_path / "id_rsa"
    secret.write_text("key\n")
    (host.skills / "fix-venv" / "scripts").mkdir()
    (host.skills / "fix-venv" / "scripts" / "key").symlink_to(secret)
    (host.skills / "notes.txt").write_text("mine\n")
    (host.skills / "fix-venv" / "big.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    (host.skills / ".git.skilld-aside").mkdir()
    (host.skills / ".git.skilld-aside" / "config").write_text("[remote]\n")

    assert host.repo.sync().ok

    assert remote_files(remote) == {".gitignore", ".skilld/manifest.json", "fix-venv/SKILL.md"}
    assert os.path.islink(host.skills / "fix-venv" / "scripts" / "key")
    assert (host.skills / "notes.txt").read_text() == "mine\n"


def test_a_link_a_person_puts_in_the_work_tree_fails_the_round_and_writes_nothing_out(
    tmp_path: Path,
) -> None:
    remote = bare_remote(tmp_path / "team.git")
    host = Host(tmp_path, "alpha", remote)
    host.repo.setup()
    host.write_skill("fix-venv", "Recreate it.")
    assert host.repo.sync().ok
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(host.skills / ".skilld")
    (host.skills / ".skilld").symlink_to(outside)

    report = host.repo.sync(usage={"fix-venv": {"use_count": 1}})

    assert not report.ok
    assert report.error == f"refused: {host.skills / '.skilld'} is a symbolic link"
    assert list(outside.iterdir()) == []
    assert remote_files(remote) == {".gitignore", ".skilld/manifest.json", "fix-venv/SKILL.md"}


@pytest.mark.parametrize(
    ("relpath", "data", "why"),
    [
        ("latin/SKILL.md", b"---\nname: latin\ndescription: Caf\xe9.\n---\nx\n", NOT_UTF8),
        ("latin.md", b"---\nname: latin\ndescription: d\n---\n\xff\xfe\n", NOT_UTF8),
        ("tilde/SKILL.md", b"---\nname: tilde\ndescription: d\n---\n~~~!\nid\n~~~\n", LIVE_TRIGGER),
    ],
    ids=["not UTF-8", "flat, not UTF-8", "~~~! fence"],
)
def test_a_remote_skill_file_no_agent_may_load_is_refused(
    tmp_path: Path, relpath: str, data: bytes, why: str
) -> None:
    """Through a real remote: a teammate's push of a skill file that is not UTF-8 (every page
    would show it broken) or opens a `~~~!` fence is refused, and the round applies nothing;
    a script beside a skill may still be any bytes."""
    remote = bare_remote(tmp_path / "team.git")
    host = Host(tmp_path, "alpha", remote)
    host.repo.setup()
    host.write_skill("fix-venv", "Recreate it.")
    assert host.repo.sync().ok
    good = host.head_tree()
    person = Person(tmp_path, remote)
    person.edit("fix-venv/scripts/blob.bin", b"\xff\xfe\x00binary", "a binary script")
    assert host.repo.sync().ok
    assert (host.skills / "fix-venv" / "scripts" / "blob.bin").is_file()
    good = host.head_tree()

    person.edit(relpath, data, "a skill no agent may load")
    report = host.repo.sync()

    [refused] = report.refused
    assert refused.path == relpath and refused.why.startswith(why)
    assert host.head_tree() == good
    assert not (host.skills / relpath).exists()
