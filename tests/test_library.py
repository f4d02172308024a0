from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skilld.fsutil import TEMP_MARKER, atomic_write
from skilld.skills.document import SkillDoc, parse_skill
from skilld.skills.library import (
    CapReached,
    Library,
    LibraryError,
    NotFound,
    Origin,
    Protected,
    sha256_bytes,
)
from skilld.skills.usage import UsageStore
from skilld.state import StateDB

ME = Origin(source="cli")


@pytest.fixture
def library(tmp_path: Path) -> Library:
    skills = tmp_path / "skills"
    skills.mkdir()
    state = StateDB(tmp_path / "state" / "state.db")
    lib = Library(skills, state, UsageStore(skills), history_dir=tmp_path / "state" / "history")
    lib.prepare()
    return lib


def doc(name: str, body: str = "1. Do the thing.\n", description: str = "Does it.") -> SkillDoc:
    return SkillDoc(name=name, description=description, when_to_use="When needed.", body=body)


def owners(library: Library) -> dict[str, str]:
    return {entry.name: entry.owner for entry in library.discover()}


def kinds(library: Library) -> list[str]:
    return [event.kind for event in library.state.events()]


def test_create_update_unchanged(library: Library) -> None:
    created = library.write(doc("deploy-app"), ME)
    assert created.outcome == "created"
    assert created.path == library.root / "deploy-app" / "SKILL.md"
    parsed = parse_skill(created.path.read_text())
    assert parsed.metadata["managed-by"] == "skilld"
    assert parsed.metadata["version"] == "1"
    assert library.write(doc("deploy-app"), ME).outcome == "unchanged"
    updated = library.write(doc("deploy-app", body="1. Do it better.\n"), ME)
    assert updated.outcome == "updated"
    assert parse_skill(updated.path.read_text()).metadata["version"] == "2"
    assert kinds(library) == ["created", "unchanged", "updated"]
    record = library.usage.get("deploy-app")
    assert record is not None and record["created_by"] == "agent"
    assert record["patch_count"] == 1


def test_flat_layout(library: Library) -> None:
    library.layout = "flat"
    result = library.write(doc("flat-one"), ME)
    assert result.path == library.root / "flat-one.md"
    assert owners(library) == {"flat-one": "managed"}


def test_hand_edited_managed_skill_is_adopted_and_never_overwritten(library: Library) -> None:
    path = library.write(doc("tidy"), ME).path
    edited = path.read_text() + "\nA human note.\n"
    path.write_text(edited)
    assert owners(library)["tidy"] == "human"
    with pytest.raises(Protected):
        library.write(doc("tidy", body="1. Machine text.\n"), ME)
    with pytest.raises(Protected):
        library.delete("tidy", ME)
    with pytest.raises(Protected):
        library.archive("tidy", ME)
    assert path.read_text() == edited
    assert kinds(library).count("protected") == 3


def test_owners_bundled_hub_human_external(library: Library, tmp_path: Path) -> None:
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
    extra = tmp_path / "project-skills"
    (extra / "proj").mkdir(parents=True)
    (extra / "proj" / "SKILL.md").write_text("---\nname: proj\ndescription: x\n---\nbody\n")
    library.extra_dirs = (extra,)
    assert owners(library) == {
        "bundled-one": "bundled",
        "hub-one": "hub",
        "mine": "human",
        "proj": "external",
    }
    for name in ("bundled-one", "hub-one", "mine", "proj"):
        with pytest.raises(Protected):
            library.write(doc(name), ME)


def test_pin_blocks_every_change(library: Library) -> None:
    path = library.write(doc("pinned-skill"), ME).path
    library.set_pinned("pinned-skill", True, ME)
    before = path.read_bytes()
    with pytest.raises(Protected, match="pinned"):
        library.write(doc("pinned-skill", body="new\n"), ME)
    with pytest.raises(Protected):
        library.delete("pinned-skill", ME)
    with pytest.raises(Protected):
        library.archive("pinned-skill", ME)
    assert path.read_bytes() == before
    library.set_pinned("pinned-skill", False, ME)
    assert library.write(doc("pinned-skill", body="new\n"), ME).outcome == "updated"


def test_cap_limits_creation_only(library: Library) -> None:
    library.write(doc("one"), ME, cap=2)
    library.write(doc("two"), ME, cap=2)
    with pytest.raises(CapReached):
        library.write(doc("three"), ME, cap=2)
    assert library.write(doc("two", body="better\n"), ME, cap=2).outcome == "updated"
    assert not (library.root / "three").exists()
    assert "cap" in kinds(library)


@pytest.mark.parametrize("name", ["../evil", "a/b", "Bad", "x\x00y", ".hidden", "а-cyrillic"])
def test_unsafe_names_are_refused(library: Library, name: str) -> None:
    with pytest.raises(LibraryError):
        library.write(doc(name), ME)
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
        library.write(doc("escape"), ME)
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
    library.write(doc("fine"), ME)
    entries = {e.name: e for e in library.discover()}
    assert entries["broken"].broken and entries["broken"].error
    assert not entries["fine"].broken


def test_failure_between_write_and_replace_leaves_old_file(
    library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = library.write(doc("sturdy"), ME).path
    before = path.read_bytes()

    def exploding_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", exploding_replace)
    with pytest.raises(OSError):
        library.write(doc("sturdy", body="1. New text.\n"), ME)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert not [p for p in path.parent.iterdir() if TEMP_MARKER in p.name]
    assert [e.name for e in library.discover()] == ["sturdy"]
    # The refused write committed no event: the last word is still "created".
    assert kinds(library)[-1] == "created"
    assert owners(library)["sturdy"] == "managed"


def test_stray_temp_files_are_removed_at_start(library: Library) -> None:
    path = library.write(doc("crashy"), ME).path
    stray = path.parent / f".SKILL.md{TEMP_MARKER}deadbeef"
    stray.write_text("half")
    flat_stray = library.root / f".x.md{TEMP_MARKER}cafe"
    flat_stray.write_text("half")
    removed = library.prepare()
    assert set(removed) == {stray, flat_stray}
    assert not stray.exists()


def test_crash_after_file_write_before_commit_keeps_ownership(library: Library) -> None:
    """Provenance is committed (new + previous hash) before the file is replaced."""
    path = library.write(doc("resumable"), ME).path
    # The intent of the next write is recorded (new hash, old hash as previous), then the
    # process dies before the file is replaced: the old file must still count as skilld's.
    library.state.put_provenance(
        "resumable", path=str(path), sha256="h-new", prev_sha256=sha256_bytes(path.read_bytes())
    )
    assert owners(library)["resumable"] == "managed"
    assert library.write(doc("resumable", body="1. Newer.\n"), ME).outcome == "updated"


def test_history_rollback_and_bound(library: Library) -> None:
    library.history_keep = 3
    for version in range(6):
        library.write(doc("versioned", body=f"1. Version {version}.\n"), ME)
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


def test_archive_and_restore(library: Library) -> None:
    library.write(doc("old-habit"), ME)
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
    library.write(doc("goner"), ME)
    library.delete("goner", ME)
    assert library.get("goner") is None
    assert len(library.history("goner")) == 1
    assert library.usage.get("goner") is None
    assert library.state.provenance("goner") is None


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "file.md"
    atomic_write(target, "one")
    atomic_write(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.md"]
