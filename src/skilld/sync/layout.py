"""What a shared library's repository holds, and what never leaves the host.

    <root>/<name>/SKILL.md                  skills (and <category>/<name>/SKILL.md, <name>.md)
    <root>/.archive/...                     archived skills
    <root>/.skilld/manifest.json            which skills skilld wrote, team-wide (manifest.py)
    <root>/.skilld/usage/<host>.json        each host's usage counters (usage.py)
    <root>/.gitignore                       skilld's block keeps the host-local files out:
    .usage.json .usage.json.lock .usage.journal .usage.json.corrupt-* .usage.json.tmp*
    and every temp file of an atomic write (`*.skilld-tmp-*`)

Whatever `git add` staged of the host-local patterns (and of anything else a library may not
hold: incoming.py) is unstaged before every commit skilld makes, so a person who rewrites
`.gitignore` cannot make skilld commit them.
"""

from __future__ import annotations

import re
from typing import Final

from skilld.fsutil import TEMP_MARKER
from skilld.skills.usage import CORRUPT_PREFIX, LOCK_FILE, TEMP_FILE, USAGE_FILE

META_DIR: Final = ".skilld"
MANIFEST_PATH: Final = f"{META_DIR}/manifest.json"
USAGE_DIR: Final = f"{META_DIR}/usage"
GITIGNORE: Final = ".gitignore"
SKILL_FILE: Final = "SKILL.md"

#: The bump journal of skilld 0.1 (`.usage.journal`) may still lie in an upgraded library.
LEGACY_JOURNAL: Final = ".usage.journal"

HOST_LOCAL_PATTERNS: Final[tuple[str, ...]] = (
    USAGE_FILE,
    LOCK_FILE,
    LEGACY_JOURNAL,
    f"{CORRUPT_PREFIX}*",
    f"{TEMP_FILE}*",
    f"*{TEMP_MARKER}*",
)
#: Pathspecs that keep host-local files out of `git status`, whatever `.gitignore` says.
EXCLUDE_HOST_LOCAL: Final[tuple[str, ...]] = tuple(
    f":(exclude,glob)**/{pattern}" for pattern in HOST_LOCAL_PATTERNS
)

_BLOCK_START = (
    "# >>> skilld: host-local files, never committed (this block is maintained by skilld)"
)
_BLOCK_END = "# <<< skilld"
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class InvalidHost(ValueError):
    pass


def check_host(host: str) -> str:
    """`host` as a team-wide machine id: it names a file and an email, so letters, digits,
    `.`, `_` and `-` only, 1 to 63 characters, starting with a letter or digit."""
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise InvalidHost(
            f"not a usable sync host id: {host!r} (letters, digits, '.', '_', '-'; at most 63)"
        )
    return host


def usage_path(host: str) -> str:
    return f"{USAGE_DIR}/{check_host(host)}.json"


def gitignore_text(existing: str) -> str:
    """`existing` with skilld's block present and current; every other line is kept."""
    block = "\n".join((_BLOCK_START, *HOST_LOCAL_PATTERNS, _BLOCK_END)) + "\n"
    start, end = existing.find(_BLOCK_START), existing.find(_BLOCK_END)
    if start != -1 and end > start:
        after = existing[end + len(_BLOCK_END) :].removeprefix("\n")
        return existing[:start] + block + after
    if not existing:
        return block
    return existing + ("" if existing.endswith("\n") else "\n") + block


def skill_name_of_path(relpath: str) -> str | None:
    """The skill a repository path holds by its shape: `…/<name>/SKILL.md` or `<name>.md`."""
    parts = relpath.split("/")
    if len(parts) >= 2 and parts[-1] == SKILL_FILE:
        return parts[-2]
    if len(parts) == 1 and parts[0].endswith(".md") and not parts[0].startswith("."):
        return parts[0][:-3]
    return None
