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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skilld.digest import sha256_hex
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
    diff_trees,
    list_tree,
    read_commit,
    read_commits,
    read_objects,
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
    """Replay `commits` (oldest first, each the first parent of the next) onto `onto`."""
    result = ReplayResult(tip=onto)
    if not commits:
        return result
    infos = read_commits(git, commits)
    diffs = diff_trees(git, [(sha, next(iter(infos[sha].parents), None)) for sha in commits])
    entries = list_tree(git, onto)
    tip_tree = tree_of(git, onto)
    blobs = _Blobs(git)
    manifests = _local_manifest_ids(infos[commits[0]], commits, diffs)
    blobs.prefetch([*(i for pair in manifests for i in pair), _id(entries.get(MANIFEST_PATH))])
    with scratch_index(git, git_dir) as index:
        index.load(onto)
        for sha, (base_manifest, local_manifest) in zip(commits, manifests, strict=True):
            info = infos[sha]
            updates: dict[str, Entry | None] = {}
            contested: list[Change] = []
            manifest_changed = False
            for change in diffs.get(sha, []):
                current = entries.get(change.path)
                if change.path == MANIFEST_PATH:
                    manifest_changed = True
                elif current == change.old:
                    updates[change.path] = change.new
                elif current != change.new:
                    contested.append(change)
            step = None
            if contested or manifest_changed:
                manifest_ids = (base_manifest, local_manifest)
                step = _Step(git, blobs, info, entries, manifest_ids, contested, host=host)
                updates.update({change.path: change.new for change in contested})
                if manifest_changed:
                    updates[MANIFEST_PATH] = blobs.write_manifest(step.local_first_manifest)
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


def _local_manifest_ids(
    first: CommitInfo, commits: Sequence[str], diffs: Mapping[str, list[Change]]
) -> list[tuple[str | None, str | None]]:
    """For each commit, the manifest (an object name) before and after it."""
    current = f"{first.parents[0]}:{MANIFEST_PATH}" if first.parents else None
    pairs = []
    for sha in commits:
        before = current
        for change in diffs.get(sha, []):
            if change.path == MANIFEST_PATH:
                current = _id(change.new)
        pairs.append((before, current))
    return pairs


class _Blobs:
    """Objects read once per replay, with the manifests the replay writes kept as written."""

    def __init__(self, git: Git) -> None:
        self._git = git
        self._data: dict[str, bytes] = {}
        self._manifests: dict[str | None, Manifest] = {None: Manifest()}

    def prefetch(self, names: Iterable[str | None]) -> None:
        missing = {n for n in names if n is not None and n not in self._data}
        self._data.update(read_objects(self._git, missing))

    def get(self, name: str | None) -> bytes | None:
        return self._data.get(name) if name is not None else None

    def manifest(self, name: str | None) -> Manifest:
        """A manifest by object name; one that does not parse counts as empty (every skill
        human), as does a missing one."""
        if name not in self._manifests:
            try:
                data = self.get(name)
                self._manifests[name] = parse_manifest(data) if data is not None else Manifest()
            except ManifestError:
                self._manifests[name] = Manifest()
        return self._manifests[name]

    def write_manifest(self, manifest: Manifest) -> Entry:
        data = render_manifest(manifest)
        object_id = write_blob(self._git, data)
        self._data[object_id] = data
        self._manifests[object_id] = manifest
        return ("100644", object_id)


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
        blobs: _Blobs,
        info: CommitInfo,
        remote_entries: dict[str, Entry],
        manifest_ids: tuple[str | None, str | None],
        contested: list[Change],
        *,
        host: str,
    ) -> None:
        self._git = git
        self._blobs = blobs
        self._host = host
        self._remote_entries = dict(remote_entries)
        joining = trailers(info.message).get("Event") == JOINED
        remote_manifest_id = _id(remote_entries.get(MANIFEST_PATH))
        blobs.prefetch([_id(e) for c in contested for e in (c.new, remote_entries.get(c.path))])
        base_manifest = blobs.manifest(manifest_ids[0])
        self.local_manifest = blobs.manifest(manifest_ids[1])
        self.remote_manifest = blobs.manifest(remote_manifest_id)
        self._manifest_changed = manifest_ids[0] != manifest_ids[1]
        self.decisions = [
            self._decide(change, remote_entries.get(change.path), joining=joining)
            for change in contested
        ]
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

    def _decide(self, change: Change, remote: Entry | None, *, joining: bool) -> _Decision:
        path = change.path
        skill = (
            self.local_manifest.name_at(path)
            or self.remote_manifest.name_at(path)
            or skill_name_of_path(path)
        )
        local_digest = _digest(self._blobs.get(_id(change.new)))
        remote_digest = _digest(self._blobs.get(_id(remote)))
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
                restore[MANIFEST_PATH] = self._blobs.write_manifest(settled)
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


def _id(entry: Entry | None) -> str | None:
    return entry[1] if entry is not None else None


def _digest(data: bytes | None) -> str | None:
    return sha256_hex(data) if data is not None else None


def _author_of(info: CommitInfo) -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": info.author_name,
        "GIT_AUTHOR_EMAIL": info.author_email,
        "GIT_AUTHOR_DATE": info.author_date,
    }
