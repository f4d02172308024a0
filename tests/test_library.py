from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skilld.digest import sha256_hex
from skilld.errors import CapReached, LibraryError, NotFound, Protected
from skilld.fsutil import STRAY_TEMP_SECONDS, TEMP_MARKER, atomic_write
from skilld.skills.document import SkillDoc, parse_skill
from skilld.skills.library import Library
from skilld.skills.outcomes import Origin, Refused, WriteFailed
from tests.conftest import open_library

ME = Origin(source="cli")


def make_library(tmp_path: Path, **changes: object) -> Library:
    skills = tmp_path / "skills"
    skills.mkdir(exist_ok=True)
    lib = open_library(skills, tmp_path / "state", **changes)
    lib.prepare()
    return lib


@pytest.fixture
def library(tmp_path: Path) -> Library:
    return make_library(tmp_path)


def doc(name: str, body: str = "1. Do the thing.\n", description: str = "Does it.") -> SkillDoc:
    return SkillDoc(name=name, description=description, when_to_use="When needed.", body=body)


def owners(library: Library) -> dict[str, str]:
    return {entry.name: entry.owner for entry in library.discover()}


def kinds(library: Library) -> list[str]:
    return [event.kind for event in library.state.events()]


def test_create_update_unchanged(library: Library) -> None:
    created = library.apply(doc("deploy-app"), ME)
    assert created.kind == "created"
    assert created.path == library.root / "deploy-app" / "SKILL.md"
    parsed = parse_skill(created.path.read_text())
    assert parsed.metadata["managed-by"] == "skilld"
    assert parsed.metadata["version"] == "1"
    assert library.apply(doc("deploy-app"), ME).kind == "unchanged"
    updated = library.apply(doc("deploy-app", body="1. Do it better.\n"), ME)
    assert updated.kind == "updated"
    assert parse_skill(updated.path.read_text()).metadata["version"] == "2"
    assert kinds(library) == ["created", "unchanged", "updated"]
    record = library.usage.get("deploy-app")
    assert record is not None and record["created_by"] == "agent"
    assert record["patch_count"] == 1


def test_flat_layout(tmp_path: Path) -> None:
    library = make_library(tmp_path, layout="flat")
    result = library.apply(doc("flat-one"), ME)
    assert result.path == library.root / "flat-one.md"
    assert owners(library) == {"flat-one": "managed"}


def test_hand_edited_managed_skill_is_adopted_and_never_overwritten(library: Library) -> None:
    path = library.apply(doc("tidy"), ME).path
    edited = path.read_text() + "\nA human note.\n"
    path.write_text(edited)
    assert owners(library)["tidy"] == "human"
    with pytest.raises(Protected):
        library.apply(doc("tidy", body="1. Machine text.\n"), ME)
    with pytest.raises(Protected):
        library.delete("tidy", ME)
    with pytest.raises(Protected):
        library.archive("tidy", ME)
    assert path.read_text() == edited
    assert kinds(library).count("protected") == 3


def test_owners_bundled_hub_human_external(tmp_path: Path) -> None:
    extra = tmp_path / "project-skills"
    library = make_library(tmp_path, extra_dirs=(extra,))
    for name in ("bundled-one", "hub-one", "mine"):
        (library.root / name).mkdir()
        (library.root / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: x\n---\nbody\n"
        )
    (library.root / ".bundled_manifest").write_text("bundled-one:abc123\n")
    (library.root / ".hub").mkdir()
    (library.root / ".hub" / "lock.json").write_text(
        json.dumps({"version": 1, "installed": {"hub-one": {"source": "x"}}})
    )
    (extra / "proj").mkdir(parents=True)
    (extra / "proj" / "SKILL.md").write_text("---\nname: proj\ndescription: x\n---\nbody\n")
    assert owners(library) == {
        "bundled-one": "bundled",
        "hub-one": "hub",
        "mine": "human",
        "proj": "external",
    }
    for name in ("bundled-one", "hub-one", "mine", "proj"):
        with pytest.raises(Protected):
            library.apply(doc(name), ME)


def test_pin_blocks_every_change(library: Library) -> None:
    path = library.apply(doc("pinned-skill"), ME).path
    library.set_pinned("pinned-skill", True, ME)
    before = path.read_bytes()
    with pytest.raises(Protected, match="pinned"):
        library.apply(doc("pinned-skill", body="new\n"), ME)
    with pytest.raises(Protected):
        library.delete("pinned-skill", ME)
    with pytest.raises(Protected):
        library.archive("pinned-skill", ME)
    assert path.read_bytes() == before
    library.set_pinned("pinned-skill", False, ME)
    assert library.apply(doc("pinned-skill", body="new\n"), ME).kind == "updated"


def test_cap_limits_creation_only(tmp_path: Path) -> None:
    library = make_library(tmp_path, max_managed=2)
    library.apply(doc("one"), ME)
    library.apply(doc("two"), ME)
    with pytest.raises(CapReached):
        library.apply(doc("three"), ME)
    refused = library.write(doc("three"), ME)
    assert isinstance(refused, Refused) and refused.kind == "cap"
    assert library.apply(doc("two", body="better\n"), ME).kind == "updated"
    assert not (library.root / "three").exists()
    assert "cap" in kinds(library)


@pytest.mark.parametrize("name", ["../evil", "a/b", "Bad", "x\x00y", ".hidden", "а-cyrillic"])
def test_unsafe_names_are_refused(library: Library, name: str) -> None:
    with pytest.raises(LibraryError):
        library.apply(doc(name), ME)
    assert list(library.root.iterdir()) == [library.root / ".usage.json.lock"] or all(
        p.name.startswith(".") for p in library.root.iterdir()
    )


def test_symlink_out_of_the_root_is_refused(library: Library, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("---\nname: escape\ndescription: x\n---\nbody\n")
    os.symlink(outside, library.root / "escape")
    entry = library.get("escape")
    assert entry is not None and entry.broken
    with pytest.raises(LibraryError):
        library.apply(doc("escape"), ME)
    with pytest.raises(LibraryError):
        library.delete("escape", ME, force=True)
    assert (outside / "SKILL.md").read_text().startswith("---\nname: escape")


def test_directory_beats_flat_file_and_dot_folders_are_not_skills(library: Library) -> None:
    (library.root / "twin").mkdir()
    (library.root / "twin" / "SKILL.md").write_text("---\nname: twin\ndescription: dir\n---\nb\n")
    (library.root / "twin.md").write_text("---\nname: twin\ndescription: flat\n---\nb\n")
    (library.root / ".archive" / "old").mkdir(parents=True)
    (library.root / ".archive" / "old" / "SKILL.md").write_text(
        "---\nname: old\ndescription: x\n---\nb\n"
    )
    entries = library.discover()
    assert [e.name for e in entries] == ["twin"]
    assert entries[0].doc is not None and entries[0].doc.description == "dir"


def test_broken_file_is_listed_not_fatal(library: Library) -> None:
    (library.root / "broken").mkdir()
    (library.root / "broken" / "SKILL.md").write_text("no frontmatter here")
    library.apply(doc("fine"), ME)
    entries = {e.name: e for e in library.discover()}
    assert entries["broken"].broken and entries["broken"].error
    assert not entries["fine"].broken


def test_failure_between_write_and_replace_leaves_old_file(
    library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = library.apply(doc("sturdy"), ME).path
    before = path.read_bytes()

    def exploding_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", exploding_replace)
    failed = library.write(doc("sturdy", body="1. New text.\n"), ME)
    monkeypatch.undo()
    assert isinstance(failed, WriteFailed) and "No space left" in failed.reason
    assert path.read_bytes() == before
    assert not [p for p in path.parent.iterdir() if TEMP_MARKER in p.name]
    assert [e.name for e in library.discover()] == ["sturdy"]
    # The refused write committed no event: the last word is still "created".
    assert kinds(library)[-1] == "created"
    assert owners(library)["sturdy"] == "managed"


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stray_temp_files_are_removed_at_start(library: Library) -> None:
    path = library.apply(doc("crashy"), ME).path
    stray = path.parent / f".SKILL.md{TEMP_MARKER}{dead_pid()}-deadbeef"
    stray.write_text("half")
    flat_stray = library.root / f".x.md{TEMP_MARKER}{dead_pid()}-cafe"
    flat_stray.write_text("half")
    # A write of a live process (the CLI, the MCP server) may be in flight: left alone.
    live = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    in_flight = library.root / f".y.md{TEMP_MARKER}{live.pid}-0f0f"
    in_flight.write_text("being written")
    try:
        removed = library.prepare()
    finally:
        live.communicate(b"")
    assert set(removed) == {stray, flat_stray}
    assert not stray.exists() and in_flight.exists()
    # A temp file older than any write takes is a leftover whoever named it.
    old = time.time() - 2 * STRAY_TEMP_SECONDS
    os.utime(in_flight, (old, old))
    assert library.prepare() == [in_flight]


def test_crash_after_file_write_before_commit_keeps_ownership(library: Library) -> None:
    """Provenance is committed (new + previous hash) before the file is replaced."""
    path = library.apply(doc("resumable"), ME).path
    # The intent of the next write is recorded (new hash, old hash as previous), then the
    # process dies before the file is replaced: the old file must still count as skilld's.
    library.state.put_provenance(
        library.name,
        "resumable",
        path=str(path),
        sha256="h-new",
        prev_sha256=sha256_hex(path.read_bytes()),
    )
    assert owners(library)["resumable"] == "managed"
    assert library.apply(doc("resumable", body="1. Newer.\n"), ME).kind == "updated"


def test_history_rollback_and_bound(tmp_path: Path) -> None:
    library = make_library(tmp_path, history_keep=3)
    for version in range(6):
        library.apply(doc("versioned", body=f"1. Version {version}.\n"), ME)
    versions = library.history("versioned")
    assert len(versions) == 3
    current = library.get("versioned")
    assert current is not None and current.doc is not None
    assert "Version 5" in current.doc.body
    library.rollback("versioned", ME)
    rolled = library.get("versioned")
    assert rolled is not None and rolled.doc is not None
    assert "Version 4" in rolled.doc.body
    assert rolled.owner == "managed"
    assert "rolled_back" in kinds(library)
    with pytest.raises(NotFound):
        library.rollback("versioned", ME, version="nope")


def test_an_update_retried_after_failed_writes_saves_the_old_version_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = make_library(tmp_path, history_keep=3)
    for version in range(3):
        library.apply(doc("versioned", body=f"1. Version {version}.\n"), ME)

    def disk_full(root: Path, relpath: str, data: bytes | str, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(root / relpath))

    newer = doc("versioned", body="1. Version 3.\n")
    with monkeypatch.context() as patch:
        patch.setattr("skilld.skills.library.write_tree_file", disk_full)
        for _ in range(5):  # the daemon retries the write on every tick
            assert isinstance(library.write(newer, ME), WriteFailed)
    assert library.apply(newer, ME).kind == "updated"
    saved = [version.path.read_text() for version in library.history("versioned")]
    bodies = [line for text in saved for line in text.splitlines() if line.startswith("1. ")]
    assert bodies == ["1. Version 0.", "1. Version 1.", "1. Version 2."]


def test_archive_and_restore(library: Library) -> None:
    library.apply(doc("old-habit"), ME)
    target = library.archive("old-habit", ME, reason="test")
    assert target == library.root / ".archive" / "old-habit"
    assert library.get("old-habit") is None
    record = library.usage.get("old-habit")
    assert record is not None and record["state"] == "archived" and record["archived_at"]
    assert library.archived() == {"old-habit": target}
    restored = library.restore("old-habit", ME)
    assert restored == library.root / "old-habit" / "SKILL.md"
    entry = library.get("old-habit")
    assert entry is not None and entry.owner == "managed"
    record = library.usage.get("old-habit")
    assert record is not None and record["state"] == "active"
    assert kinds(library)[-2:] == ["archived", "restored"]


def test_delete_keeps_last_version_in_history(library: Library) -> None:
    library.apply(doc("goner"), ME)
    library.delete("goner", ME)
    assert library.get("goner") is None
    assert not (library.root / "goner").exists()
    assert len(library.history("goner")) == 1
    assert library.usage.get("goner") is None
    assert library.state.provenance(library.name, "goner") is None
    # History brings a deleted skill back, as skilld's own.
    library.rollback("goner", ME)
    entry = library.get("goner")
    assert entry is not None and entry.owner == "managed"
    assert entry.doc is not None and entry.doc.body == "1. Do the thing.\n"


def test_delete_removes_only_what_skilld_wrote(library: Library) -> None:
    path = library.apply(doc("with-scripts"), ME).path
    scripts = path.parent / "scripts"
    scripts.mkdir()
    (scripts / "run.sh").write_text("#!/bin/sh\necho person's work\n")
    (path.parent / "references.md").write_text("notes\n")
    deleted = library.delete("with-scripts", ME)
    assert not path.exists()
    assert deleted.kept == ("references.md", "scripts/run.sh")
    assert (scripts / "run.sh").read_text() == "#!/bin/sh\necho person's work\n"
    assert (path.parent / "references.md").is_file()
    event = library.state.events(kinds=("deleted",))[-1]
    assert event.detail["kept"] == ["references.md", "scripts/run.sh"]
    library.rollback("with-scripts", ME)
    assert path.is_file() and (scripts / "run.sh").is_file()


def test_claude_dialect_round_trip_is_unchanged(tmp_path: Path) -> None:
    """A body with a shell directive (neutralised on write) or CRLF line endings compares
    equal to the proposal that wrote it: the same proposal twice is `unchanged`."""
    library = make_library(tmp_path, dialect="claude")
    body = "1. Check the host with !`uname -a`.\r\n2. Then run:\r\n```!\r\nmake\r\n```\r\n"
    proposal = SkillDoc(name="host-check", description="Checks the host.", body=body)
    first = library.apply(proposal, ME)
    assert first.kind == "created"
    assert "!`" not in first.path.read_text()
    again = library.apply(proposal, ME)
    assert again.kind == "unchanged"
    assert library.history("host-check") == []
    record = library.usage.get("host-check")
    assert record is not None and record["patch_count"] == 0


def test_an_extra_dir_never_shadows_skillds_own(tmp_path: Path) -> None:
    extra = tmp_path / "project"
    library = make_library(tmp_path, extra_dirs=(extra,), max_managed=1)
    library.apply(doc("twin"), ME)
    (extra / "twin").mkdir(parents=True)
    (extra / "twin" / "SKILL.md").write_text("---\nname: twin\ndescription: x\n---\nproject\n")
    listed = library.get("twin")
    assert listed is not None and listed.owner == "managed"
    assert library.managed_names() == ["twin"]
    assert library.apply(doc("twin", body="1. Better.\n"), ME).kind == "updated"
    assert (extra / "twin" / "SKILL.md").read_text().endswith("project\n")
    library.archive("twin", ME)
    assert library.managed_names() == []


def test_a_name_reused_after_archiving_starts_afresh(library: Library) -> None:
    library.apply(doc("again"), ME)
    library.usage.bump("again", "use")
    library.archive("again", ME)
    created = library.apply(doc("again", body="1. The new one.\n"), ME)
    assert created.kind == "created"
    record = library.usage.get("again")
    assert record is not None and record["state"] == "active" and record["archived_at"] is None
    assert record["use_count"] == 0
    library.archive("again", ME)
    assert library.usage.get("again")["state"] == "archived"  # type: ignore[index]
    restored = library.restore("again", ME)
    assert "The new one." in restored.read_text()
    assert library.usage.get("again")["state"] == "active"  # type: ignore[index]


def test_a_linked_archive_is_refused(library: Library, tmp_path: Path) -> None:
    library.apply(doc("keep-home"), ME)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, library.root / ".archive")
    with pytest.raises(LibraryError, match="not a plain folder"):
        library.archive("keep-home", ME)
    assert (library.root / "keep-home" / "SKILL.md").is_file()
    assert list(elsewhere.iterdir()) == []


def test_files_honour_the_umask(tmp_path: Path) -> None:
    script = (
        "import os, sys; from pathlib import Path; from skilld.fsutil import atomic_write;"
        "os.umask(0o002); atomic_write(Path(sys.argv[1]), 'x')"
    )
    target = tmp_path / "shared.md"
    subprocess.run([sys.executable, "-c", script, str(target)], check=True)
    assert stat.S_IMODE(target.stat().st_mode) == 0o664


def test_concurrent_writers_never_make_a_skill_look_human(tmp_path: Path) -> None:
    """Two processes rewriting one skill: at every moment the file on disk is one skilld
    recorded (the writer lock spans reading, recording and replacing)."""
    library = make_library(tmp_path)
    library.apply(doc("contended"), ME)
    script = (
        "import sys; from pathlib import Path;"
        "from tests.conftest import open_library;"
        "from skilld.skills.document import SkillDoc;"
        "from skilld.skills.outcomes import Origin;"
        "lib = open_library(Path(sys.argv[1]), Path(sys.argv[2]));"
        "[lib.apply(SkillDoc(name='contended', description='Does it.', when_to_use='When needed.',"
        " body=f'1. Writer {sys.argv[3]} pass {i}.\\n'), Origin(source='cli'))"
        " for i in range(40)]"
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(library.root), str(tmp_path / "state"), str(n)],
            cwd=Path(__file__).parent.parent,
        )
        for n in range(2)
    ]
    seen = set()
    while any(writer.poll() is None for writer in writers):
        with library.locked():  # what a third writer sees before it writes
            entry = library.entry("contended")
        if entry is not None:
            seen.add(entry.owner)
    assert [writer.wait() for writer in writers] == [0, 0]
    assert seen == {"managed"}


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "file.md"
    atomic_write(target, "one")
    atomic_write(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.md"]
