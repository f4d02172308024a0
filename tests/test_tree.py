"""The library tree's trust boundary (fsutil): no read or write leaves the root through a link."""

from __future__ import annotations

from pathlib import Path

import pytest

from skilld.fsutil import (
    UnsafePath,
    list_tree_files,
    move_in_tree,
    read_tree_file,
    real_subdir,
    remove_tree_file,
    tree_path,
    write_tree_file,
)
from skilld.skills.usage import UsageStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "library" / "real").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("key\n")
    return tmp_path / "library"


def test_reads_and_writes_inside_the_root_work_and_create_their_folders(root: Path) -> None:
    write_tree_file(root, ".skilld/usage/alpha.json", b"{}\n")
    assert read_tree_file(root, ".skilld/usage/alpha.json") == b"{}\n"
    assert read_tree_file(root, "missing/file") is None
    assert list_tree_files(root, ".skilld/usage") == ["alpha.json"]
    move_in_tree(root, ".skilld/usage/alpha.json", ".archive/alpha.json")
    assert (root / ".archive" / "alpha.json").read_bytes() == b"{}\n"
    remove_tree_file(root, ".archive/alpha.json")
    remove_tree_file(root, ".archive/alpha.json")  # already gone: fine
    assert not (root / ".archive" / "alpha.json").exists()


@pytest.mark.parametrize("link", [".skilld", "real/sub"])
def test_a_linked_folder_on_the_way_is_refused_and_nothing_lands_outside(
    root: Path, link: str
) -> None:
    (root / link).symlink_to(root.parent / "outside")
    relpath = f"{link}/secret"
    with pytest.raises(UnsafePath):
        read_tree_file(root, relpath)
    with pytest.raises(UnsafePath):
        write_tree_file(root, f"{link}/manifest.json", b"x")
    with pytest.raises(UnsafePath):
        tree_path(root, relpath)
    with pytest.raises(UnsafePath):
        move_in_tree(root, "real", f"{link}/moved")
    assert list_tree_files(root, ".") == []
    assert sorted(p.name for p in (root.parent / "outside").iterdir()) == ["secret"]


def test_a_linked_file_is_never_read_and_a_write_replaces_the_link_itself(root: Path) -> None:
    (root / ".gitignore").symlink_to(root.parent / "outside" / "secret")
    with pytest.raises(UnsafePath):
        read_tree_file(root, ".gitignore")
    with pytest.raises(UnsafePath):
        move_in_tree(root, ".gitignore", "moved")
    assert list_tree_files(root, ".") == []
    write_tree_file(root, ".gitignore", b"*.swp\n")
    assert not (root / ".gitignore").is_symlink()
    assert (root.parent / "outside" / "secret").read_text() == "key\n"


@pytest.mark.parametrize(
    "relpath", ["../outside/secret", "a/../../x", "/etc/passwd", "a//b", "a\nb"]
)
def test_paths_that_are_not_plainly_inside_the_root_are_refused(root: Path, relpath: str) -> None:
    with pytest.raises(UnsafePath):
        read_tree_file(root, relpath)
    with pytest.raises(UnsafePath):
        write_tree_file(root, relpath, b"x")


def test_a_root_that_is_itself_a_link_is_followed(tmp_path: Path, root: Path) -> None:
    (tmp_path / "dotfiles").symlink_to(root)
    write_tree_file(tmp_path / "dotfiles", "real/SKILL.md", b"skill")
    assert (root / "real" / "SKILL.md").read_bytes() == b"skill"


def test_a_usage_sidecar_that_is_a_link_is_refused_not_read(root: Path) -> None:
    (root / ".usage.json").symlink_to(root.parent / "outside" / "secret")
    with pytest.raises(UnsafePath):
        UsageStore(root).read()
    assert (root.parent / "outside" / "secret").read_text() == "key\n"


def test_a_folder_counts_only_when_it_the_root_and_every_folder_on_the_way_are_real(
    root: Path, tmp_path: Path
) -> None:
    (root / "real" / "skills").mkdir()
    (root / "linked").symlink_to(root / "real")
    (root / "file").write_text("x")
    assert real_subdir(root, ("real", "skills")) == root / "real" / "skills"
    with pytest.raises(UnsafePath, match=f"^{root / 'linked'} is a symbolic link$"):
        real_subdir(root, ("linked", "skills"))
    with pytest.raises(UnsafePath, match=f"^{root / 'file'} is not a directory$"):
        real_subdir(root, ("file", "skills"), create=True)
    assert real_subdir(root, ("missing",)) is None
    assert not (root / "missing").exists()
    with pytest.raises(UnsafePath):
        real_subdir(root, ("..", "outside"))
    (tmp_path / "linked-root").symlink_to(root)  # a project root reached through a link
    with pytest.raises(UnsafePath, match="linked-root is a symbolic link"):
        real_subdir(tmp_path / "linked-root", ("real", "skills"))
    assert real_subdir(root, ()) == root
