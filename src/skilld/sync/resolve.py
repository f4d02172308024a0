"""Who wins when two hosts changed one file between syncs: pure decisions over plain values.

The rule, per path changed on both sides to different results:

* joining a library to a remote: the remote's version wins (a new host never overrides the
  team's skills with its old copies);
* otherwise a hand edit beats a managed update: a version is managed when its sha256 is what
  skilld wrote for that skill by either side's manifest (a removal is managed when that side's
  manifest no longer points at the path, i.e. skilld deleted, archived or moved it);
* otherwise, between two managed versions or two hand edits, the remote's version wins: it
  was pushed first.

The loser is never thrown away: the replay commits it before the winner is restored on top, so
both versions are in every host's history (see replay.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skilld.sync.manifest import Manifest

Side = Literal["local", "remote"]

HAND_BEATS_MANAGED = "a hand edit beats a managed update"
FIRST_PUSHED_WINS = "the version pushed first wins"
JOIN_KEEPS_REMOTE = "joining keeps the remote's version"
MANIFEST_ONLY = "both changed the manifest entry; the version pushed first wins"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One side's version of a path."""

    sha256: str | None  # None: the side removed the path
    managed: bool


def is_managed(
    skill: str | None, relpath: str, digest: str | None, own: Manifest, other: Manifest
) -> bool:
    """Whether a side's version of `relpath` is skilld's work (see the module docstring)."""
    if skill is None:
        return False
    if digest is None:
        entry = own.get(skill)
        return entry is None or entry.path != relpath
    return own.owns(skill, digest) or other.owns(skill, digest)


def decide(local: Candidate, remote: Candidate, *, joining: bool) -> tuple[Side, str]:
    """The side whose version keeps the path, and the rule that chose it."""
    if joining:
        return "remote", JOIN_KEEPS_REMOTE
    if not local.managed and remote.managed:
        return "local", HAND_BEATS_MANAGED
    if local.managed and not remote.managed:
        return "remote", HAND_BEATS_MANAGED
    return "remote", FIRST_PUSHED_WINS
