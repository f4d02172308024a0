"""A team library's git work tree, as the library sees it: what it asks of one, never how.

A library with a `remote` is handed a `TeamTree` (`skilld.sync.TeamRepo` implements it): the
library asks it whether a skill is skilld's team-wide (`readable_manifest`), wraps each change
of a skill's files in `skill_change` (one commit), and reads the team's usage and versions.
The library never imports `skilld.sync`: the arrow points from sync down to this protocol.
"""

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from skilld.digest import sha256_hex
from skilld.fsutil import read_regular_file

if TYPE_CHECKING:
    from skilld.gitinfo import GitContext
    from skilld.state import Provenance


class SharedFile(Protocol):
    """A skill file as the team's manifest records it: where, and the hash skilld wrote."""

    @property
    def path(self) -> str: ...

    @property
    def sha256(self) -> str: ...


class WrittenFile(NamedTuple):
    """What this library wrote of a skill: its file relative to the root, and its hash."""

    path: str
    sha256: str


class SkillChange(NamedTuple):
    """One change of a skill's files (`paths`), as its team commit names it: the event, the
    skill, the session and where it worked, and the manifest entry of what skilld wrote
    (`written`; None when the skill left the live library)."""

    event: str
    name: str
    paths: Sequence[Path]
    written: SharedFile | None
    session: str | None
    git: "GitContext | None"


class SharedManifest(Protocol):
    """Which skills any host's skilld wrote, by the hash of what it wrote."""

    @property
    def skills(self) -> Mapping[str, SharedFile]: ...

    def get(self, name: str) -> SharedFile | None: ...

    def owns(self, name: str, digest: str | None) -> bool: ...


class CommittedVersion(Protocol):
    @property
    def commit(self) -> str: ...

    @property
    def committed_at(self) -> str: ...

    @property
    def subject(self) -> str: ...


class TeamTree(Protocol):
    @property
    def is_set_up(self) -> bool: ...

    def relpath(self, path: Path) -> str: ...

    def readable_manifest(self) -> SharedManifest | None:
        """The team's manifest; None when a person broke it (nothing is skilld's by it)."""
        ...

    def team_usage(self, local: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]: ...

    def file_versions(self, relpath: str) -> Sequence[CommittedVersion]: ...

    def read_version(self, commit: str, relpath: str) -> bytes: ...

    def skill_change(
        self, change: SkillChange, seed: Callable[[], Mapping[str, SharedFile]]
    ) -> AbstractContextManager[None]:
        """One commit around `change`. A work tree not set up yet joins first, its manifest
        started from `seed()`."""
        ...


def team_seed(team: TeamTree, provenance: "Mapping[str, Provenance]") -> dict[str, WrittenFile]:
    """The manifest entries this host's provenance vouches for, whatever the layout: skills
    skilld wrote here whose file still holds what it wrote. A library joining its remote
    starts the team's manifest from them, so the team takes them as skilld's."""
    seed = {}
    for name, record in provenance.items():
        path = Path(record.path)
        try:
            relpath = team.relpath(path)
            digest = sha256_hex(read_regular_file(path)[0])
        except (ValueError, OSError):  # outside the root, gone, or not a plain file
            continue
        if digest in (record.sha256, record.prev_sha256):
            seed[name] = WrittenFile(relpath, digest)
    return seed
