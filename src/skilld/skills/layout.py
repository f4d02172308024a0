"""Where a skill's file lives in a library dir: `<root>/<name>/SKILL.md` (the `dir` layout),
`<root>/<name>.md` (`flat`, DSH only), or below one or more category folders (Hermes).

Light on purpose: an agent's hook (`skilld usage use NAME`) finds a skill's library with this
alone, without loading the library.
"""

from __future__ import annotations

import os
from pathlib import Path

SKILL_FILE = "SKILL.md"
ARCHIVE_DIR = ".archive"
#: How deep a library read recursively (Hermes's category folders) looks for skills.
MAX_CATEGORY_DEPTH = 3


def find_skill_file(root: Path, name: str, *, recursive: bool = False) -> Path | None:
    """The skill file of `name` in `root`, if there is one (the folder wins over a flat file)."""
    for candidate in (root / name / SKILL_FILE, root / f"{name}.md"):
        if candidate.is_file():
            return candidate
    if recursive:
        return _in_categories(root, name, MAX_CATEGORY_DEPTH - 1)
    return None


def _in_categories(folder: Path, name: str, depth: int) -> Path | None:
    try:
        children = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError:
        return None
    for child in children:
        if child.startswith("."):
            continue
        category = folder / child
        if (category / SKILL_FILE).exists():
            continue  # a skill, not a category
        found = category / name / SKILL_FILE
        if found.is_file():
            return found
        if depth > 1 and (deeper := _in_categories(category, name, depth - 1)) is not None:
            return deeper
    return None
