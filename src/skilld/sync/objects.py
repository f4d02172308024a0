"""Reading and writing git objects without touching the work tree (git's plumbing).

Replaying commits with these instead of `git rebase` means a replay never stops half-way with
a work tree full of conflict markers and a rebase in progress: commits are built in a private
index, and the branch moves only once, at the end, to a finished result.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from skilld.sync.git import Git, GitError

#: A file in a tree: (mode, object id). Trees compare entries by these.
Entry = tuple[str, str]

_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
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
    return parse_commit(sha, git.run("cat-file", "commit", sha).stdout)


def read_commits(git: Git, shas: Iterable[str]) -> dict[str, CommitInfo]:
    """Many commits in one git call."""
    found = read_objects(git, shas, kind="commit")
    return {sha: parse_commit(sha, raw) for sha, raw in found.items()}


def parse_commit(sha: str, raw: bytes) -> CommitInfo:
    header, _, message = raw.decode("utf-8", "replace").partition("\n\n")
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


def diff_trees(git: Git, commits: Iterable[tuple[str, str | None]]) -> dict[str, list[Change]]:
    """What each commit changed against the given parent (None: against nothing), file by
    file, no renames; all in one git call."""
    lines = "".join(
        f"{commit} {parent}\n" if parent else f"{commit}\n" for commit, parent in commits
    )
    raw = git.run(
        "diff-tree", "--stdin", "--root", "-r", "-z", "--no-renames", input=lines.encode()
    )
    changes: dict[str, list[Change]] = {}
    tokens = iter(raw.stdout.split(b"\0"))
    current: list[Change] = []
    for token in tokens:
        if token.startswith(b":"):
            old_mode, new_mode, old_id, new_id, _status = token.decode()[1:].split(" ")
            path = next(tokens).decode("utf-8", "surrogateescape")
            current.append(Change(path, _entry(old_mode, old_id), _entry(new_mode, new_id)))
        elif token:
            current = changes.setdefault(token.decode(), [])
    return changes


def _entry(mode: str, object_id: str) -> Entry | None:
    return None if set(object_id) == {"0"} else (mode, object_id)


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


def read_objects(git: Git, object_names: Iterable[str], kind: str = "blob") -> dict[str, bytes]:
    """The content of each object of `kind`, by the name asked for (an id, or
    `<commit>:<path>`); names that resolve to nothing (or to another kind) are left out."""
    wanted = sorted(set(object_names))
    if not wanted:
        return {}
    out = git.run("cat-file", "--batch", input="".join(f"{i}\n" for i in wanted).encode()).stdout
    found: dict[str, bytes] = {}
    position = 0
    for name in wanted:
        end = out.index(b"\n", position)
        header = out[position:end].decode().split(" ")
        position = end + 1
        if len(header) == 3:  # "<id> <type> <size>"; else "<name> missing"
            size = int(header[2])
            if header[1] == kind:
                found[name] = out[position : position + size]
            position += size + 1
    return found


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
    if ancestor == descendant and _FULL_SHA.fullmatch(ancestor):
        return True  # a commit is its own ancestor: the common case of a round with no news
    result = git.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if result.returncode not in (0, 1):
        raise GitError(result.stderr.strip() or "git merge-base failed", args=("merge-base",))
    return result.returncode == 0
