"""Which skills a stretch of transcript shows being used, from its messages alone.

Signals (each occurrence counts once, in transcript order):
- a skill-loading tool call: Claude Code `Skill` ({"skill": name}, older builds {"command":
  name}), DSH `skill` ({"name": name}), Hermes Agent `skill_view` ({"name": name});
- a read of `<skills_dir>/<name>/SKILL.md` or `<skills_dir>/<name>.md`, by a file-reading tool
  (Read, read_file, view, ...) or by a shell tool whose command reads files (cat, sed, head, ...).

Record-level signals that never become messages (a Claude Code `invoked_skills` attachment, a
Codex `<skill>` injection) are reported by the sources themselves in `SessionRead.skill_uses`;
the caller merges both. Pure: no file is touched.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from skilld.transcripts.model import Message, ToolCall

#: Tool name -> the argument naming the skill it loads.
SKILL_TOOLS: dict[str, tuple[str, ...]] = {
    "Skill": ("skill", "command"),
    "skill": ("name",),
    "skill_view": ("name",),
}

READ_TOOLS = frozenset(
    {"Read", "read", "read_file", "ReadFile", "view", "View", "cat", "open_file", "view_file"}
)
SHELL_TOOLS = frozenset(
    {
        "Bash",
        "bash",
        "shell",
        "shell_command",
        "exec_command",
        "local_shell",
        "run_shell_command",
        "execute_command",
        "terminal",
    }
)
_SHELL_READERS = re.compile(
    r"(?<![\w.-])(cat|head|tail|less|more|sed|nl|bat|awk|rg|grep)(?![\w.-])"
)
# The quoted value of a skill argument, for arguments that were cut and no longer parse.
_QUOTED_VALUE = '"{key}"\\s*:\\s*"((?:[^"\\\\]|\\\\.)*)"'


def infer_skill_uses(messages: Iterable[Message], skills_dir: Path | None) -> list[str]:
    """Skill names the messages show being used, one entry per use, in order."""
    read_pattern = _skill_read_pattern(skills_dir) if skills_dir is not None else None
    uses: list[str] = []
    for message in messages:
        for call in message.tool_calls:
            name = skill_call_name(call)
            if name is None and read_pattern is not None and _reads_files(call):
                name = _read_skill_name(read_pattern, call.arguments)
            if name is not None:
                uses.append(name)
    return uses


def skill_call_name(call: ToolCall) -> str | None:
    """The skill a skill-loading tool call loads, else None."""
    keys = SKILL_TOOLS.get(call.name)
    if keys is None:
        return None
    arguments = _parse_arguments(call.arguments)
    for key in keys:
        value = arguments.get(key) if arguments is not None else _quoted(call.arguments, key)
        if isinstance(value, str) and value.strip().lstrip("/"):
            return value.strip().lstrip("/")
    return None


def _parse_arguments(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _quoted(text: str, key: str) -> str | None:
    match = re.search(_QUOTED_VALUE.format(key=re.escape(key)), text)
    if match is None:
        return None
    try:
        value = json.loads(f'"{match.group(1)}"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _reads_files(call: ToolCall) -> bool:
    if call.name in READ_TOOLS:
        return True
    return call.name in SHELL_TOOLS and _SHELL_READERS.search(call.arguments) is not None


def _skill_read_pattern(skills_dir: Path) -> re.Pattern[str]:
    """Matches `<dir>/<name>/SKILL.md` or `<dir>/<name>.md` for every spelling of the dir."""
    spellings = {str(skills_dir).rstrip("/")}
    home = os.path.expanduser("~")
    for spelling in list(spellings):
        if home not in ("", "/", "~") and spelling.startswith(home + "/"):
            rest = spelling[len(home) :]
            spellings.update({"~" + rest, "$HOME" + rest, "${HOME}" + rest})
    alternatives = "|".join(
        re.escape(spelling) for spelling in sorted(spellings, key=len, reverse=True)
    )
    name = r"([A-Za-z0-9][A-Za-z0-9._:-]*)"
    # The directory must start a path (not be the tail of a longer one) and the file must
    # end it.
    return re.compile(rf"(?<![\w./-])(?:{alternatives})/(?:{name}/SKILL\.md|{name}\.md)(?![\w.-])")


def _read_skill_name(pattern: re.Pattern[str], arguments: str) -> str | None:
    match = pattern.search(arguments)
    if match is None:
        return None
    return match.group(1) or match.group(2)
