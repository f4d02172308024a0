"""A library's version history: the previous versions of its skill files.

Before skilld replaces or removes a file it saves the bytes there under the state dir
(`<state>/history/<library>/<skill>/<UTC stamp>-<short hash>.md`, the newest `history_keep`
kept). In a team library the git history holds every version too, and `versions` lists both.
The library restores a chosen version (`Library.rollback`): a write, under its ownership rules.
"""

import contextlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from skilld.digest import sha256_hex
from skilld.errors import NotFound
from skilld.fsutil import PRIVATE_FILE_MODE, atomic_write, private_dir, read_tree_file
from skilld.skills.layout import SKILL_FILE

if TYPE_CHECKING:
    from skilld.skills.team_tree import TeamTree


class HistoryVersion(NamedTuple):
    version: str  # a saved file's stem (sortable UTC stamp and short hash), or a commit
    saved_at: str
    path: Path | None = None  # a version saved on this host
    commit: str | None = None  # a version in a team library's git history
    subject: str = ""  # what the commit says changed it


class VersionHistory:
    """The saved versions of one library's skills."""

    def __init__(
        self,
        root: Path,
        history_dir: Path,
        *,
        keep: int,
        team: "TeamTree | None",
        clock: Callable[[], float],
    ) -> None:
        self.root = root
        self.dir = history_dir
        self.keep = keep
        self.team = team
        self._clock = clock

    def save(self, name: str, relpath: str) -> None:
        """Keep the bytes now at `root/relpath` (read through the tree guard) as a version."""
        if self.keep == 0:
            return
        data = read_tree_file(self.root, relpath)
        if data is None:
            return
        digest = sha256_hex(data)[:12]
        saved = self.saved_versions(name)
        if saved and saved[-1].path is not None and saved[-1].path.name.endswith(f"-{digest}.md"):
            # A write retried tick after tick (a full disk) replaces the same version: saving
            # it each time would push the older versions out of the history.
            return
        folder = self.dir / name
        private_dir(folder)  # under the state dir: its owner's alone
        stamp = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y%m%dT%H%M%S%fZ")
        atomic_write(folder / f"{stamp}-{digest}.md", data, mode=PRIVATE_FILE_MODE)
        for old in self.saved_versions(name)[: -self.keep]:
            assert old.path is not None
            old.path.unlink(missing_ok=True)

    def versions(self, name: str) -> list[HistoryVersion]:
        """Saved versions, oldest first: those saved on this host, and in a team library every
        version the git history holds (a conflict's losing side included)."""
        versions = self.saved_versions(name)
        if self.team is not None and self.team.is_set_up:
            for relpath in _team_paths(name):
                versions += [
                    HistoryVersion(v.commit, v.committed_at, commit=v.commit, subject=v.subject)
                    for v in self.team.file_versions(relpath)
                ]
            versions.sort(key=lambda v: v.saved_at)
        return versions

    def saved_versions(self, name: str) -> list[HistoryVersion]:
        """The versions saved on this host, oldest first (bounded by `keep`)."""
        versions = []
        with contextlib.suppress(FileNotFoundError):
            for child in sorted(os.scandir(self.dir / name), key=lambda e: e.name):
                if child.name.endswith(".md") and not child.name.startswith("."):
                    stem = child.name[:-3]
                    saved = datetime.strptime(stem.split("-")[0], "%Y%m%dT%H%M%S%fZ")
                    saved_at = saved.replace(tzinfo=UTC).isoformat(timespec="seconds")
                    versions.append(HistoryVersion(stem, saved_at, path=Path(child.path)))
        return versions

    def content(self, version: HistoryVersion, name: str) -> bytes:
        """The bytes of `version` of `name`. Raises NotFound."""
        if version.path is not None:
            return version.path.read_bytes()
        assert self.team is not None and version.commit is not None
        for relpath in _team_paths(name):
            with contextlib.suppress(KeyError):
                return self.team.read_version(version.commit, relpath)
        raise NotFound(f"{name} is not in commit {version.commit}")

    def choose(
        self, name: str, versions: list[HistoryVersion], version: str | None, current: str | None
    ) -> HistoryVersion:
        """`version` among `versions` of `name`, or by default the newest whose bytes differ
        from the current file's hash `current` (a team library's history holds the current
        version too). Raises NotFound."""
        if version is not None:
            chosen = next((v for v in versions if v.version == version), None)
            if chosen is None:
                raise NotFound(f"{name} has no version {version}")
            return chosen
        for candidate in reversed(versions):
            if sha256_hex(self.content(candidate, name)) != current:
                return candidate
        raise NotFound(f"{name} has no saved version other than the current one")


def _team_paths(name: str) -> list[str]:
    """Where a skill's file has lived in a team library's tree (dir and flat layouts)."""
    return [f"{name}/{SKILL_FILE}", f"{name}.md"]
