"""A library dir's git work tree, and the commits skilld makes of it on its own.

`TeamRepo` (repo.py) is a `WorkTree` with a remote: it adds set-up, the change a Library makes
and the sync round. Here is what sits beside the round: the work-tree lock, staging (never what
a library may not hold: incoming.py), and the commits no Library change asked for:

* the join (`_join_commit`): a dir's first commit, every file already there with `.gitignore`
  and the manifest seeded from what this host's skilld owns;
* the leftovers (`_commit_leftovers`): what a crash or a git failure left uncommitted, as
  skilld's own commit when its files hash to their manifest entries, and a person's edits as
  a "changed by hand" commit;
* `.gitignore` upkeep and this host's published usage counters.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from skilld.digest import sha256_hex
from skilld.fsutil import (
    UnsafePath,
    read_tree_file,
    remove_tree_file,
    tree_path,
    write_tree_file,
)
from skilld.log import get_logger
from skilld.sync.git import Git
from skilld.sync.incoming import entry_problem, path_problem, shown
from skilld.sync.layout import (
    EXCLUDE_HOST_LOCAL,
    GITIGNORE,
    MANIFEST_PATH,
    SKILL_FILE,
    gitignore_text,
    skill_name_of_path,
    usage_path,
)
from skilld.sync.manifest import (
    Manifest,
    ManifestEntry,
    ManifestError,
    parse_manifest,
    render_manifest,
)
from skilld.sync.messages import GITIGNORE as GITIGNORE_EVENT
from skilld.sync.messages import HAND_EDIT, JOINED, RECOVERED, USAGE, change_message
from skilld.sync.objects import read_objects
from skilld.sync.usage import render_host_usage

WORKTREE_LOCK = "skilld-worktree.lock"


class WorkTree:
    """A library dir as a git work tree: its lock, its staging and its own commits."""

    def __init__(self, root: Path, host: str, git: Git, *, max_file_bytes: int) -> None:
        self.root = root
        self.host = host
        self.git = git
        self.max_file_bytes = max_file_bytes
        self._thread_lock = threading.RLock()
        self._lock_depth = 0
        self._lock_fd: int | None = None
        self._log = get_logger("skilld.sync")

    # -- the lock and a commit ---------------------------------------------------------------

    @property
    def is_set_up(self) -> bool:
        return (self.root / ".git").exists()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the work-tree lock (re-entrant). Hold it around writing a skill file and
        committing it, or use `change`, which does. Before `setup` there is no git dir to
        lock in: only this process's threads are kept apart."""
        with self._thread_lock:
            if self._lock_depth == 0 and self.is_set_up:
                self._lock_fd = acquire_lock(self._git_dir() / WORKTREE_LOCK)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0 and self._lock_fd is not None:
                    os.close(self._lock_fd)
                    self._lock_fd = None

    def commit(self, message: str, paths: Sequence[str]) -> str | None:
        """Commit exactly `paths` (relative to the root) as they are in the work tree; the new
        commit, or None when they hold no change. Raises GitError."""
        with self.lock():
            present = [p for p in paths if os.path.lexists(self.root / p)]
            gone = [p for p in paths if p not in present]
            if present:
                self._stage(_literal(present))
            if gone:
                self.git.run(
                    "rm", "-r", "--quiet", "--cached", "--ignore-unmatch", "--", *_literal(gone)
                )
            if self.git.ok("diff", "--cached", "--quiet"):
                return None
            self.git.run("commit", "--quiet", "--no-verify", "--file=-", input=message.encode())
            return self._head()

    # -- what a round or a join commits itself ---------------------------------------------

    def _publish_usage(self, records: Mapping[str, Mapping[str, Any]]) -> str | None:
        relpath = usage_path(self.host)
        data = render_host_usage(self.host, records)
        if read_tree_file(self.root, relpath) == data:
            return None
        write_tree_file(self.root, relpath, data)
        subject = f"usage of {self.host}"
        return self.commit(change_message(USAGE, None, host=self.host, subject=subject), [relpath])

    def _commit_leftovers(self) -> list[str]:
        """Commit what is uncommitted: skilld's own changes a crash or a git failure left
        (their files hash to their manifest entries) in one commit, then everything else, a
        person's edits, in a "changed by hand" commit."""
        changed = self._changed_paths()
        if not changed:
            return []
        head_manifest = self._manifest_at("HEAD")
        try:
            work_manifest = self._read_manifest()
        except ManifestError as exc:
            self._log.warning("sync_manifest_unreadable", error=str(exc))
            work_manifest = head_manifest
        accepted = self._accepted_entries(head_manifest, work_manifest)
        settled = head_manifest.changed(accepted)
        ours = {p for p in changed if self._is_skillds(p, accepted, head_manifest)}
        current = read_tree_file(self.root, MANIFEST_PATH)
        if settled.skills or current is not None:
            if current != render_manifest(settled):
                self._write_manifest(settled)
            ours.add(MANIFEST_PATH)
        commits = []
        if ours:
            skills = sorted({n for p in ours if (n := _skill_of(p, settled, head_manifest))})
            message = change_message(
                RECOVERED, ", ".join(skills) or None, host=self.host,
                subject=f"skilld's uncommitted changes on {self.host}", paths=sorted(ours),
            )  # fmt: skip
            if commit := self.commit(message, sorted(ours)):
                commits.append(commit)
        hand = sorted(set(changed) - ours - {MANIFEST_PATH})
        if hand:
            skills = sorted({n for p in hand if (n := _skill_of(p, settled, head_manifest))})
            message = change_message(
                HAND_EDIT, ", ".join(skills) or None, host=self.host,
                subject=f"changed by hand on {self.host}", paths=hand,
            )  # fmt: skip
            if commit := self.commit(message, hand):
                commits.append(commit)
        return commits

    def _accepted_entries(self, head: Manifest, work: Manifest) -> dict[str, ManifestEntry | None]:
        """The work tree's manifest changes whose file writes really happened."""
        accepted: dict[str, ManifestEntry | None] = {}
        for name in head.skills.keys() | work.skills.keys():
            before, after = head.get(name), work.get(name)
            if before == after:
                continue
            if after is None:
                if before is not None and not self._exists(before.path):
                    accepted[name] = None
            elif self._sha256_of(after.path) == after.sha256:
                accepted[name] = after
        return accepted

    def _is_skillds(
        self, relpath: str, accepted: Mapping[str, ManifestEntry | None], head: Manifest
    ) -> bool:
        if relpath == usage_path(self.host):
            return True
        for name, entry in accepted.items():
            previous = head.get(name)
            folders = [_folder_of(e.path) for e in (entry, previous) if e is not None]
            if any(relpath == f or relpath.startswith(f"{f}/") for f in folders):
                return True
        return False

    def _join_commit(self, managed: Mapping[str, ManifestEntry]) -> str | None:
        self._write_gitignore()
        seeded = {
            name: entry
            for name, entry in managed.items()
            if self._sha256_of(entry.path) == entry.sha256
        }
        if seeded:
            self._write_manifest(self._work_manifest().changed(seeded))
        # By name, never `.`: only what a library may hold (incoming.py) joins the history.
        paths = self._shareable(self._changed_paths())
        if paths:
            self._stage(_literal(paths))
        message = change_message(JOINED, None, host=self.host, subject=f"library of {self.host}")
        self.git.run("commit", "--quiet", "--no-verify", "--file=-", input=message.encode())
        return self._head()

    def _maintain_gitignore(self) -> str | None:
        if not self._write_gitignore():
            return None
        subject = "skilld keeps host-local files out of git"
        message = change_message(GITIGNORE_EVENT, None, host=self.host, subject=subject)
        return self.commit(message, [GITIGNORE])

    def _write_gitignore(self) -> bool:
        existing = read_tree_file(self.root, GITIGNORE)
        wanted = gitignore_text((existing or b"").decode("utf-8", "replace")).encode()
        if existing == wanted:
            return False
        write_tree_file(self.root, GITIGNORE, wanted)
        return True

    # -- staging -----------------------------------------------------------------------------

    def _shareable(self, paths: Sequence[str]) -> list[str]:
        """`paths` less what a library may not hold (incoming.py): what no other host would
        accept is never committed (a warning names it; it stays in the work tree)."""
        kept = []
        for path in paths:
            why = path_problem(path)
            if why is None and os.path.islink(self.root / path):
                why = "a symbolic link"
            if why is None:
                kept.append(path)
            else:
                self._log.warning("sync_not_shared", root=str(self.root), path=shown(path), why=why)
        return kept

    def _stage(self, pathspecs: Sequence[str]) -> None:
        """`git add --all` of `pathspecs`, then unstage whatever a library may not hold,
        whatever `.gitignore` says (host-local files, links, git metadata, files over the size
        limit: incoming.py). They are unstaged after the add rather than excluded in it: with
        an exclude pathspec, git (2.39) silently skips a file inside a folder it does not
        track yet."""
        self.git.run("add", "--all", "--", *pathspecs)
        local = self._staged_but_not_shareable()
        if not local:
            return
        if self._head() is None:
            self.git.run("rm", "--cached", "--quiet", "--", *_literal(local))
        else:
            self.git.run("reset", "--quiet", "--", *_literal(local))

    def _staged_but_not_shareable(self) -> list[str]:
        raw = self.git.run(
            "diff", "--cached", "--raw", "-z", "--no-renames", "--no-abbrev"
        ).stdout.split(b"\0")
        added: dict[str, tuple[str, str]] = {}  # path -> (mode, object) of what is staged
        for meta, name in zip(raw[::2], raw[1::2], strict=False):
            fields = meta.decode().lstrip(":").split()
            if len(fields) == 5 and fields[4] != "D":
                added[name.decode("utf-8", "surrogateescape")] = (fields[1], fields[3])
        sizes = self._object_sizes({object_id for _, object_id in added.values()})
        refused = []
        for path, (mode, object_id) in added.items():
            size = sizes.get(object_id)
            why = entry_problem(mode, size, limit=self.max_file_bytes) or path_problem(path)
            if why is not None:
                self._log.warning("sync_not_shared", root=str(self.root), path=shown(path), why=why)
                refused.append(path)
        return refused

    def _object_sizes(self, object_ids: set[str]) -> dict[str, int]:
        if not object_ids:
            return {}
        wanted = "".join(f"{object_id}\n" for object_id in sorted(object_ids)).encode()
        out = self.git.run("cat-file", "--batch-check=%(objectname) %(objectsize)", input=wanted)
        sizes = {}
        for line in out.text.splitlines():
            object_id, _, size = line.partition(" ")
            if size.isdigit():
                sizes[object_id] = int(size)
        return sizes

    # -- small helpers -----------------------------------------------------------------------

    def _changed_paths(self) -> list[str]:
        status = self.git.run(
            "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames",
            "--", ".", *EXCLUDE_HOST_LOCAL,
        ).stdout  # fmt: skip
        return [
            record[3:].decode("utf-8", "surrogateescape")
            for record in status.split(b"\0")
            if len(record) > 3
        ]

    def _manifest_at(self, commit: str) -> Manifest:
        data = read_objects(self.git, [f"{commit}:{MANIFEST_PATH}"]).get(
            f"{commit}:{MANIFEST_PATH}"
        )
        if data is None:
            return Manifest()
        try:
            return parse_manifest(data)
        except ManifestError:
            return Manifest()

    def _read_manifest(self) -> Manifest:
        """The work tree's manifest; empty when there is none yet. ManifestError when it is not
        a manifest (a bad hand edit, or a link where it should be)."""
        try:
            data = read_tree_file(self.root, MANIFEST_PATH)
        except UnsafePath as exc:
            raise ManifestError(str(exc)) from None
        return Manifest() if data is None else parse_manifest(data)

    def _exists(self, relpath: str) -> bool:
        try:
            return os.path.lexists(tree_path(self.root, relpath))
        except UnsafePath:
            return False

    def _sha256_of(self, relpath: str) -> str | None:
        try:
            data = read_tree_file(self.root, relpath)
        except (UnsafePath, IsADirectoryError, NotADirectoryError):
            return None
        return sha256_hex(data) if data is not None else None

    def _work_manifest(self) -> Manifest:
        """The work tree's manifest; the committed one when a person broke the file."""
        try:
            return self._read_manifest()
        except ManifestError as exc:
            self._log.warning("sync_manifest_unreadable", error=str(exc))
            return self._manifest_at("HEAD") if self._head() else Manifest()

    def _write_manifest(self, manifest: Manifest) -> None:
        write_tree_file(self.root, MANIFEST_PATH, render_manifest(manifest))

    def _restore_file(self, relpath: str, data: bytes | None) -> None:
        if data is None:
            remove_tree_file(self.root, relpath)
        else:
            write_tree_file(self.root, relpath, data)

    def _head(self) -> str | None:
        result = self.git.run("rev-parse", "--quiet", "--verify", "HEAD^{commit}", check=False)
        return result.line or None

    def _git_dir(self) -> Path:
        dot_git = self.root / ".git"
        if dot_git.is_dir():
            return dot_git
        return Path(self.git.run("rev-parse", "--absolute-git-dir").line)


def acquire_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _literal(paths: Sequence[str]) -> list[str]:
    return [f":(literal){path}" for path in paths]


def _folder_of(relpath: str) -> str:
    """A skill's folder for the dir layout (`name/SKILL.md` -> `name`), else the file."""
    return relpath.removesuffix(f"/{SKILL_FILE}") if relpath.endswith(f"/{SKILL_FILE}") else relpath


def _skill_of(relpath: str, *manifests: Manifest) -> str | None:
    for manifest in manifests:
        for name, entry in manifest.skills.items():
            folder = _folder_of(entry.path)
            if relpath == folder or relpath.startswith(f"{folder}/"):
                return name
    return skill_name_of_path(relpath)
