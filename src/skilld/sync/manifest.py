"""`.skilld/manifest.json`: which skills skilld wrote, for the whole team.

For each skill skilld created or last changed (on any host), the path of its skill file relative
to the library root and the sha256 of the bytes skilld wrote there. A skill is skilld's to
change on every host exactly when its file still hashes to its entry; a teammate's hand edit,
pushed by anyone, changes the hash and so makes the skill `human` everywhere.

The file is rendered one skill per line, keys sorted, so that `git diff` and `git log -p` read
naturally; it is never merged as text: `merge_manifests` merges it key by key.

    {
      "version": 1,
      "skills": {
        "fix-venv": {"path": "fix-venv/SKILL.md", "sha256": "3f1a…"}
      }
    }
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from skilld.boundedjson import JSONRefused
from skilld.boundedjson import loads as bounded_loads
from skilld.fsutil import MAX_FILE_BYTES
from skilld.skills.names import is_safe_path_component
from skilld.sync.layout import MANIFEST_PATH

VERSION = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """The manifest is not what skilld writes; the message says where."""


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    path: str  # the skill file, relative to the library root, with `/` separators
    sha256: str  # of the bytes skilld last wrote there


@dataclass(frozen=True, slots=True)
class Manifest:
    skills: Mapping[str, ManifestEntry] = field(default_factory=dict)

    def get(self, name: str) -> ManifestEntry | None:
        return self.skills.get(name)

    def owns(self, name: str, digest: str | None) -> bool:
        """True when the file of `name` hashing to `digest` is what skilld last wrote."""
        entry = self.skills.get(name)
        return entry is not None and digest is not None and entry.sha256 == digest

    def name_at(self, relpath: str) -> str | None:
        """The skill whose entry points at `relpath`, if any."""
        return next((name for name, e in self.skills.items() if e.path == relpath), None)

    def changed(self, changes: Mapping[str, ManifestEntry | None]) -> Manifest:
        """A copy with `changes` applied: an entry sets a skill, None removes it."""
        skills = dict(self.skills)
        for name, entry in changes.items():
            if entry is None:
                skills.pop(name, None)
            else:
                skills[name] = _checked_entry(name, entry)
        return Manifest(skills)


def parse_manifest(data: bytes) -> Manifest:
    try:
        document = bounded_loads(data, limit=MAX_FILE_BYTES)
    except JSONRefused as exc:
        raise ManifestError(f"{MANIFEST_PATH} is not read: {exc}") from None
    except ValueError as exc:
        raise ManifestError(f"{MANIFEST_PATH} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ManifestError(f"{MANIFEST_PATH} is not a version {VERSION} manifest")
    skills = document.get("skills")
    if not isinstance(skills, dict):
        raise ManifestError(f'{MANIFEST_PATH} has no "skills" object')
    entries: dict[str, ManifestEntry] = {}
    for name, raw in skills.items():
        if not isinstance(raw, dict):
            raise ManifestError(f"{MANIFEST_PATH}: the entry of {name!r} is not an object")
        entries[name] = _checked_entry(
            name, ManifestEntry(raw.get("path", ""), raw.get("sha256", ""))
        )
    return Manifest(entries)


def render_manifest(manifest: Manifest) -> bytes:
    lines = [
        f"    {json.dumps(name)}: "
        + json.dumps({"path": entry.path, "sha256": entry.sha256}, sort_keys=True)
        for name, entry in sorted(manifest.skills.items())
    ]
    body = ",\n".join(lines)
    skills = "{\n" + body + "\n  }" if lines else "{}"
    return f'{{\n  "version": {VERSION},\n  "skills": {skills}\n}}\n'.encode()


def merge_manifests(
    base: Manifest, ours: Manifest, theirs: Manifest, *, ours_wins: Collection[str] = ()
) -> tuple[Manifest, frozenset[str]]:
    """Merge key by key: a side that changed a skill's entry (from `base`) gets its change;
    when both changed it differently, `theirs` wins unless the skill is in `ours_wins`.

    Returns the merged manifest and the names both sides changed differently."""
    merged: dict[str, ManifestEntry] = {}
    contested: set[str] = set()
    for name in base.skills.keys() | ours.skills.keys() | theirs.skills.keys():
        was, mine, other = base.get(name), ours.get(name), theirs.get(name)
        if mine in (was, other):
            chosen = other
        elif other == was:
            chosen = mine
        else:
            contested.add(name)
            chosen = mine if name in ours_wins else other
        if chosen is not None:
            merged[name] = chosen
    return Manifest(merged), frozenset(contested)


def _checked_entry(name: Any, entry: ManifestEntry) -> ManifestEntry:
    if not isinstance(name, str) or not is_safe_path_component(name):
        raise ManifestError(f"{MANIFEST_PATH}: {name!r} is not a skill name")
    path, digest = entry.path, entry.sha256
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ManifestError(f"{MANIFEST_PATH}: the sha256 of {name!r} is not a sha256")
    if not isinstance(path, str) or not _is_relative_path(path):
        raise ManifestError(f"{MANIFEST_PATH}: the path of {name!r} is not inside the library")
    return entry


def _is_relative_path(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and "\x00" not in path and all(p not in ("", ".", "..") for p in parts)
