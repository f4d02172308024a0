"""Rebase: replay this host's unpublished commits onto the remote branch, with no conflicts left.

Each local commit's changes (against its own parent) are applied to the new tip path by path:

* a path the remote left as the commit found it takes the commit's version;
* a path already at the commit's version stays;
* a path both changed to different results is a conflict, decided by resolve.py.

The commit is first re-made with *its* version of every conflicting path (and its manifest
entries): so the losing version, when it is the local one, is a commit of the published
history. When the remote wins, a second "conflict" commit on top restores the remote's version
and manifest entry. `git log -- <path>` on every host then shows both versions, and
`file_versions`/`read_version` reach either. The manifest is merged key by key, consistently
with the file decisions. Commits whose changes the remote already has are dropped.

Everything is built in a scratch index from git objects: the work tree and the branch are not
touched here, so a crash or a failure leaves nothing half-done; the caller moves the branch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skilld.sync.git import Git
from skilld.sync.layout import MANIFEST_PATH, skill_name_of_path
from skilld.sync.manifest import (
    Manifest,
    ManifestError,
    merge_manifests,
    parse_manifest,
    render_manifest,
)
from skilld.sync.messages import CONFLICT, JOINED, change_message, trailers
from skilld.sync.objects import (
    Change,
    CommitInfo,
    Entry,
    commit_tree,
    diff_tree,
    empty_tree,
    list_tree,
    read_blobs,
    read_commit,
    scratch_index,
    tree_of,
    write_blob,
)
from skilld.sync.resolve import MANIFEST_ONLY, Candidate, Side, decide, is_managed


@dataclass(frozen=True, slots=True)
class Conflict:
    """One path two hosts changed between syncs, and how it was settled."""

    skill: str | None  # None for a file that is no skill (a README, say)
    path: str
    winner: Side  # "local" (this host's version) or "remote"
    rule: str
    winner_sha256: str | None  # None: the winning side had removed the file
    loser_sha256: str | None
    winner_commit: str  # commits of the pushed history holding each version
    loser_commit: str
    winner_host: str | None  # from the commit's Skilld-Host trailer, else its author email
    loser_host: str | None


@dataclass(slots=True)
class ReplayResult:
    tip: str
    conflicts: list[Conflict] = field(default_factory=list)
    dropped: int = 0  # local commits whose changes the remote already had


@dataclass(frozen=True, slots=True)
class _Decision:
    change: Change
    skill: str | None
    winner: Side
    rule: str
    local_sha256: str | None
    remote_sha256: str | None


def replay(
    git: Git, git_dir: Path, *, onto: str, commits: Sequence[str], host: str
) -> ReplayResult:
    """Replay `commits` (oldest first) onto the commit `onto`; returns the new tip."""
    result = ReplayResult(tip=onto)
    if not commits:
        return result
    entries = list_tree(git, onto)
    tip_tree = tree_of(git, onto)
    blank = empty_tree(git)
    with scratch_index(git, git_dir) as index:
        index.load(onto)
        for sha in commits:
            info = read_commit(git, sha)
            changes = diff_tree(git, info.parents[0] if info.parents else blank, sha)
            updates: dict[str, Entry | None] = {}
            contested: list[Change] = []
            manifest_change: Change | None = None
            for change in changes:
                current = entries.get(change.path)
                if change.path == MANIFEST_PATH:
                    manifest_change = change
                elif current == change.old:
                    updates[change.path] = change.new
                elif current != change.new:
                    contested.append(change)
            step = (
                _Step(git, info, entries, manifest_change, contested, host=host)
                if contested or manifest_change is not None
                else None
            )
            if step is not None:
                updates.update({change.path: change.new for change in contested})
                if manifest_change is not None:
                    updates[MANIFEST_PATH] = step.entry_for(step.local_first_manifest)
            index.apply(updates)
            tree = index.write_tree()
            if tree == tip_tree:
                result.dropped += 1
                continue
            local_commit = commit_tree(git, tree, [result.tip], info.message, _author_of(info))
            result.tip, tip_tree = local_commit, tree
            _apply(entries, updates)
            if step is None:
                continue
            restore = step.restorations()
            if restore:
                index.apply(restore)
                tip_tree = index.write_tree()
                result.tip = commit_tree(git, tip_tree, [local_commit], step.conflict_message())
                _apply(entries, restore)
            result.conflicts += step.conflicts(onto, local_commit=local_commit)
    return result


def _apply(entries: dict[str, Entry], updates: dict[str, Entry | None]) -> None:
    for path, entry in updates.items():
        if entry is None:
            entries.pop(path, None)
        else:
            entries[path] = entry


class _Step:
    """The decisions for one local commit's contested paths and manifest entries."""

    def __init__(
        self,
        git: Git,
        info: CommitInfo,
        remote_entries: dict[str, Entry],
        manifest_change: Change | None,
        contested: list[Change],
        *,
        host: str,
    ) -> None:
        self._git = git
        self._info = info
        self._host = host
        self._remote_entries = dict(remote_entries)
        joining = trailers(info.message).get("Event") == JOINED
        remote_manifest_entry = remote_entries.get(MANIFEST_PATH)
        local_manifest_id = (
            (manifest_change.new[1] if manifest_change.new else None)
            if manifest_change is not None
            else f"{info.sha}:{MANIFEST_PATH}"
        )
        base_manifest_id = (
            (manifest_change.old[1] if manifest_change.old else None)
            if manifest_change is not None
            else local_manifest_id
        )
        remote_manifest_id = remote_manifest_entry[1] if remote_manifest_entry else None
        ids = [i for i in (local_manifest_id, base_manifest_id, remote_manifest_id) if i]
        ids += [e[1] for c in contested for e in (c.new, remote_entries.get(c.path)) if e]
        blobs = read_blobs(git, ids)
        self.local_manifest = _manifest(blobs, local_manifest_id)
        self.remote_manifest = _manifest(blobs, remote_manifest_id)
        base_manifest = _manifest(blobs, base_manifest_id)
        self.decisions = [
            self._decide(change, blobs, remote_entries.get(change.path), joining=joining)
            for change in contested
        ]
        local_wins = {d.skill for d in self.decisions if d.winner == "local" and d.skill}
        everything = self.local_manifest.skills.keys() | self.remote_manifest.skills.keys()
        self.local_first_manifest, both_changed = merge_manifests(
            base_manifest, self.local_manifest, self.remote_manifest, ours_wins=everything
        )
        decided = {d.skill for d in self.decisions if d.skill}
        self.manifest_only = sorted(both_changed - decided)
        self._reverted = sorted(
            {d.skill for d in self.decisions if d.winner == "remote" and d.skill}
            | set(self.manifest_only)
        )
        self._local_wins = local_wins
        self._manifest_changed = manifest_change is not None

    def _decide(
        self, change: Change, blobs: dict[str, bytes], remote: Entry | None, *, joining: bool
    ) -> _Decision:
        path = change.path
        skill = (
            self.local_manifest.name_at(path)
            or self.remote_manifest.name_at(path)
            or skill_name_of_path(path)
        )
        local_digest = _digest(blobs, change.new)
        remote_digest = _digest(blobs, remote)
        local = Candidate(
            local_digest,
            is_managed(skill, path, local_digest, self.local_manifest, self.remote_manifest),
        )
        remote_side = Candidate(
            remote_digest,
            is_managed(skill, path, remote_digest, self.remote_manifest, self.local_manifest),
        )
        winner, rule = decide(local, remote_side, joining=joining)
        return _Decision(change, skill, winner, rule, local_digest, remote_digest)

    def entry_for(self, manifest: Manifest) -> Entry:
        return ("100644", write_blob(self._git, render_manifest(manifest)))

    def restorations(self) -> dict[str, Entry | None]:
        """What the conflict commit puts back: the remote's version of every path it won."""
        restore: dict[str, Entry | None] = {
            d.change.path: self._remote_entries.get(d.change.path)
            for d in self.decisions
            if d.winner == "remote"
        }
        if self._reverted and (self._manifest_changed or self.manifest_only):
            settled = self.local_first_manifest.changed(
                {name: self.remote_manifest.get(name) for name in self._reverted}
            )
            if settled != self.local_first_manifest:
                restore[MANIFEST_PATH] = self.entry_for(settled)
        return restore

    def conflict_message(self) -> str:
        names = sorted({d.skill or d.change.path for d in self.decisions if d.winner == "remote"})
        names += [n for n in self.manifest_only if n not in names]
        paths = [d.change.path for d in self.decisions if d.winner == "remote"]
        return change_message(
            CONFLICT, ", ".join(names), host=self._host,
            detail="(the remote's version is kept)", paths=paths,
        )  # fmt: skip

    def conflicts(self, onto: str, *, local_commit: str) -> list[Conflict]:
        """The report of each decision; `local_commit` holds the local versions in history."""
        found = []
        for d in self.decisions:
            remote_commit, remote_host = self._origin(onto, d.change.path)
            local = _SideOf(local_commit, self._host, d.local_sha256)
            remote = _SideOf(remote_commit, remote_host, d.remote_sha256)
            found.append(_conflict(d.skill, d.change.path, d.winner, d.rule, local, remote))
        for name in self.manifest_only:
            mine, theirs = self.local_manifest.get(name), self.remote_manifest.get(name)
            entry = theirs or mine
            remote_commit, remote_host = self._origin(onto, MANIFEST_PATH)
            local = _SideOf(local_commit, self._host, mine.sha256 if mine else None)
            remote = _SideOf(remote_commit, remote_host, theirs.sha256 if theirs else None)
            path = entry.path if entry else MANIFEST_PATH
            found.append(_conflict(name, path, "remote", MANIFEST_ONLY, local, remote))
        return found

    def _origin(self, onto: str, path: str) -> tuple[str, str | None]:
        """The remote commit that last changed `path`, and the host that made it."""
        sha = self._git.run("--literal-pathspecs", "rev-list", "-1", onto, "--", path).line
        if not sha:
            return onto, None
        info = read_commit(self._git, sha)
        return sha, trailers(info.message).get("Host") or info.author_email


@dataclass(frozen=True, slots=True)
class _SideOf:
    commit: str
    host: str | None
    sha256: str | None


def _conflict(
    skill: str | None, path: str, winner: Side, rule: str, local: _SideOf, remote: _SideOf
) -> Conflict:
    won, lost = (local, remote) if winner == "local" else (remote, local)
    return Conflict(
        skill=skill,
        path=path,
        winner=winner,
        rule=rule,
        winner_sha256=won.sha256,
        loser_sha256=lost.sha256,
        winner_commit=won.commit,
        loser_commit=lost.commit,
        winner_host=won.host,
        loser_host=lost.host,
    )


def _manifest(blobs: dict[str, bytes], object_id: str | None) -> Manifest:
    """A side's manifest; one that does not parse counts as empty (every skill human)."""
    if object_id is None or object_id not in blobs:
        return Manifest()
    try:
        return parse_manifest(blobs[object_id])
    except ManifestError:
        return Manifest()


def _digest(blobs: dict[str, bytes], entry: Entry | None) -> str | None:
    if entry is None:
        return None
    data = blobs.get(entry[1])
    return hashlib.sha256(data).hexdigest() if data is not None else None


def _author_of(info: CommitInfo) -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": info.author_name,
        "GIT_AUTHOR_EMAIL": info.author_email,
        "GIT_AUTHOR_DATE": info.author_date,
    }
