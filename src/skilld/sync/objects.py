"""Reading and writing git objects without touching the work tree (git's plumbing).

Replaying commits with these instead of `git rebase` means a replay never stops half-way with
a work tree full of conflict markers and a rebase in progress: commits are built in a private
index, and the branch moves only once, at the end, to a finished result.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from skilld.sync.git import Git, GitError

#: A file in a tree: (mode, object id). Trees compare entries by these.
Entry = tuple[str, str]

_AUTHOR = re.compile(r"^author (?P<name>.*) <(?P<email>.*)> (?P<date>\d+ [+-]\d{4})$")


@dataclass(frozen=True, slots=True)
class CommitInfo:
    sha: str
    parents: tuple[str, ...]
    author_name: str
    author_email: str
    author_date: str  # git's raw form: "<unix seconds> <+zone>"
    committed_at: int
    message: str


@dataclass(frozen=True, slots=True)
class Change:
    path: str
    old: Entry | None  # None: added
    new: Entry | None  # None: deleted


def read_commit(git: Git, sha: str) -> CommitInfo:
    raw = git.run("cat-file", "commit", sha).text
    header, _, message = raw.partition("\n\n")
    parents: list[str] = []
    author = ("", "", "0 +0000")
    committed_at = 0
    for line in header.splitlines():
        if line.startswith("parent "):
            parents.append(line.split(" ", 1)[1])
        elif match := _AUTHOR.match(line):
            author = (match["name"], match["email"], match["date"])
        elif line.startswith("committer "):
            committed_at = int(line.rsplit(" ", 2)[1])
    return CommitInfo(sha, tuple(parents), *author, committed_at, message)


def empty_tree(git: Git) -> str:
    return git.run("hash-object", "-t", "tree", os.devnull).line


def diff_tree(git: Git, parent: str, commit: str) -> list[Change]:
    """What `commit` changed against `parent` (a commit or a tree), file by file, no renames."""
    raw = git.run("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", parent, commit)
    fields = raw.stdout.split(b"\0")
    changes = []
    for header, path in zip(fields[0:-1:2], fields[1::2], strict=True):
        old_mode, new_mode, old_id, new_id, _status = header.decode().lstrip(":").split(" ")
        changes.append(
            Change(
                path.decode("utf-8", "surrogateescape"),
                None if set(old_id) == {"0"} else (old_mode, old_id),
                None if set(new_id) == {"0"} else (new_mode, new_id),
            )
        )
    return changes


def list_tree(git: Git, treeish: str) -> dict[str, Entry]:
    """Every file of `treeish`, by path (submodule links included, as entries)."""
    raw = git.run("ls-tree", "-r", "-z", "--full-tree", treeish).stdout
    entries: dict[str, Entry] = {}
    for record in raw.split(b"\0"):
        if record:
            meta, _, path = record.partition(b"\t")
            mode, _kind, object_id = meta.decode().split(" ")
            entries[path.decode("utf-8", "surrogateescape")] = (mode, object_id)
    return entries


def read_blobs(git: Git, object_ids: Iterable[str]) -> dict[str, bytes]:
    """The content of each blob, by id; ids that name no blob are left out."""
    wanted = sorted(set(object_ids))
    if not wanted:
        return {}
    out = git.run("cat-file", "--batch", input="".join(f"{i}\n" for i in wanted).encode()).stdout
    blobs: dict[str, bytes] = {}
    position = 0
    for object_id in wanted:
        end = out.index(b"\n", position)
        header = out[position:end].decode().split(" ")
        position = end + 1
        if len(header) == 3 and header[1] == "blob":
            size = int(header[2])
            blobs[object_id] = out[position : position + size]
            position += size + 1
        elif len(header) == 3:
            position += int(header[2]) + 1
    return blobs


def write_blob(git: Git, data: bytes) -> str:
    return git.run("hash-object", "-w", "--stdin", input=data).line


def commit_tree(git: Git, tree: str, parents: Iterable[str], message: str,
                author: Mapping[str, str] | None = None) -> str:  # fmt: skip
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    return git.run(*args, input=message.encode(), env=author).line


class ScratchIndex:
    """A private index in the git dir: trees are built here, never in the work tree's index."""

    def __init__(self, git: Git, git_dir: Path) -> None:
        self._git = git
        self._path = git_dir / f"skilld-scratch-{secrets.token_hex(6)}.index"
        self._env = {"GIT_INDEX_FILE": str(self._path)}

    def load(self, treeish: str) -> None:
        self._git.run("read-tree", treeish, env=self._env)

    def apply(self, updates: Mapping[str, Entry | None]) -> None:
        if not updates:
            return
        lines = [
            f"{entry[0]} {entry[1]}\t{path}" if entry else f"0 {'0' * 40}\t{path}"
            for path, entry in updates.items()
        ]
        info = "".join(f"{line}\0" for line in lines).encode("utf-8", "surrogateescape")
        self._git.run("update-index", "-z", "--index-info", input=info, env=self._env)

    def write_tree(self) -> str:
        return self._git.run("write-tree", env=self._env).line

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()


@contextlib.contextmanager
def scratch_index(git: Git, git_dir: Path) -> Iterator[ScratchIndex]:
    index = ScratchIndex(git, git_dir)
    try:
        yield index
    finally:
        index.discard()


def tree_of(git: Git, commit: str) -> str:
    return git.run("rev-parse", f"{commit}^{{tree}}").line


def is_ancestor(git: Git, ancestor: str, descendant: str) -> bool:
    result = git.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if result.returncode not in (0, 1):
        raise GitError(result.stderr.strip() or "git merge-base failed", args=("merge-base",))
    return result.returncode == 0
