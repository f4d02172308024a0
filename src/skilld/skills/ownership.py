"""Whose a skill file is: the facts ownership is decided on, and the rule over them.

A file is `bundled` or `hub` when the agent's own bundle or hub lists it, `managed` when it
hashes to what skilld wrote there (this host's provenance, or a team library's manifest), and
`human` otherwise. Ownership before a change is always decided on a fresh read.
"""

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from skilld.boundedjson import loads as bounded_loads
from skilld.digest import sha256_hex
from skilld.fsutil import MAX_FILE_BYTES, UnsafePath, read_regular_file, read_tree_file
from skilld.skills.discovery import FileFacts, Owner, OwnerRule
from skilld.skills.discovery import identity as file_identity
from skilld.skills.layout import ARCHIVE_DIR

if TYPE_CHECKING:
    from skilld.skills.team_tree import SharedManifest
    from skilld.state import Provenance

BUNDLED_MANIFEST = ".bundled_manifest"
HUB_LOCK = ".hub/lock.json"


def bundled_names(root: Path) -> set[str]:
    """The skills the agent's bundle installed (`.bundled_manifest`)."""
    try:
        text = (read_tree_file(root, BUNDLED_MANIFEST) or b"").decode("utf-8")
    except (OSError, UnsafePath, UnicodeDecodeError):
        return set()
    names = (line.split(":", 1)[0].strip() for line in text.splitlines())
    return {name for name in names if name and not name.startswith("#")}


def hub_names(root: Path) -> set[str]:
    """The skills a hub installed (`.hub/lock.json`)."""
    try:
        data = bounded_loads(read_tree_file(root, HUB_LOCK) or b"{}", limit=MAX_FILE_BYTES)
    except (OSError, ValueError):  # UnsafePath and boundedjson's JSONRefused are too
        return set()
    installed = data.get("installed") if isinstance(data, dict) else None
    return set(installed) if isinstance(installed, dict) else set()


def owner_rule(
    bundled: set[str],
    hub: set[str],
    provenance: "Mapping[str, Provenance]",
    team: "SharedManifest | None",
) -> OwnerRule:
    """The owner of a skill file by its name and hash, over the facts read for one listing."""

    def owner_of(name: str, digest: str | None) -> Owner:
        if name in bundled:
            return "bundled"
        if name in hub:
            return "hub"
        record = provenance.get(name)
        ours = record is not None and digest in (record.sha256, record.prev_sha256)
        # A team library: what any host's skilld last wrote is skilld's on every host.
        shared = team is not None and team.owns(name, digest)
        return "managed" if ours or shared else "human"

    return owner_of


class ManagedCount:
    """Which skills are skilld's by hash, for the cap: only the files skilld recorded are
    looked at, and a file's hash is kept while its identity (inode, size, mtime) stays the
    same, so the count costs a stat per managed skill, not a read of the library, on every
    create. (Ownership before a change is always decided on a fresh read.)"""

    def __init__(self, root: Path, file_facts: FileFacts | None = None) -> None:
        self.root = root
        #: Skill file -> (inode, size, mtime) -> its sha256.
        self._digests: dict[str, tuple[tuple[int, int, int], str]] = {}
        #: What a listing learned of each file, shared by a long-lived caller (the panel).
        self._file_facts = file_facts

    def names(
        self,
        provenance: "Mapping[str, Provenance]",
        team: "SharedManifest | None",
        *,
        excluded: set[str],
    ) -> list[str]:
        """Skills skilld wrote (here, or any host of a team) and nobody changed since."""
        expected: dict[str, set[str]] = {}
        paths: dict[str, Path] = {}
        for name, record in provenance.items():
            expected[name] = {record.sha256, record.prev_sha256 or record.sha256}
            paths[name] = Path(record.path)
        if team is not None:
            for name, shared in team.skills.items():
                expected.setdefault(name, set()).add(shared.sha256)
                paths.setdefault(name, self.root / shared.path)
        # Compared as text: `Path.parents` builds a path per level, for every skill.
        root, archive = f"{self.root}{os.sep}", f"{self.root / ARCHIVE_DIR}{os.sep}"
        managed = []
        for name, path in sorted(paths.items()):
            text = str(path)
            inside = text.startswith(root) and not text.startswith(archive)
            if name not in excluded and inside and self._digest(path) in expected[name]:
                managed.append(name)
        return managed

    def _digest(self, path: Path) -> str | None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        # What a listing learned of this file (`FileFacts`) holds its hash too: a count of
        # the cap then reads no file at all.
        known = self._file_facts.get(str(path)) if self._file_facts is not None else None
        if known is not None and stat.S_ISREG(st.st_mode) and known[0] == file_identity(st):
            return known[1]
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._digests.get(str(path))
        if cached is not None and cached[0] == identity:
            return cached[1]
        try:
            digest = sha256_hex(read_regular_file(path)[0])
        except (OSError, UnsafePath):  # gone, a link, a FIFO, or over the bound
            return None
        self._digests[str(path)] = (identity, digest)
        return digest
