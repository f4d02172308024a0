"""Every skill signal a session read carries: the one place they are derived and counted.

A signal says a skill was used (really loaded or executed) or only viewed. Two owners could
count the same event twice, so there is one: sources report in `SessionRead.signals` only the
record-level signals that never become messages (a Claude Code `invoked_skills` attachment, a
Codex `<skill>` injection); `skill_signals` adds those visible in the messages, each occurrence
once, in transcript order:

- a skill tool call: Claude Code `Skill` ({"skill": name}, older builds {"command": name}) and
  DSH `skill` ({"name": name}) are uses; Hermes Agent `skill_view` ({"name": name}) is a view,
  as Hermes itself counts it;
- a read of `<skills_dir>/<name>/SKILL.md` or `<skills_dir>/<name>.md` by a file-reading tool
  (Read, read_file, view, ...) or by a shell tool whose command reads files (cat, sed, head, ...)
  is a use, tagged with the skills dir it read from.

Pure: no file is touched.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skilld.transcripts.model import SessionRead, SignalKind, SkillSignal, ToolCall

#: Tool name -> what a call of it signals, and the arguments that may name the skill.
SKILL_TOOLS: dict[str, tuple[SignalKind, tuple[str, ...]]] = {
    "Skill": ("use", ("skill", "command")),
    "skill": ("use", ("name",)),
    "skill_view": ("view", ("name",)),
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


def skill_signals(read: SessionRead, skills_dirs: Sequence[Path]) -> list[SkillSignal]:
    """The read's record-level signals, then those its messages show, each in order."""
    read_patterns = [(str(directory), _skill_read_pattern(directory)) for directory in skills_dirs]
    signals = list(read.signals)
    for message in read.messages:
        for call in message.tool_calls:
            signal = _call_signal(call, read_patterns)
            if signal is not None:
                signals.append(signal._replace(at=message.timestamp))
    return signals


def skill_call_name(call: ToolCall) -> str | None:
    """The skill a skill tool call names (used or viewed), else None."""
    spec = SKILL_TOOLS.get(call.name)
    if spec is None:
        return None
    arguments = _parse_arguments(call.arguments)
    for key in spec[1]:
        value = arguments.get(key) if arguments is not None else _quoted(call.arguments, key)
        if isinstance(value, str) and value.strip().lstrip("/"):
            return value.strip().lstrip("/")
    return None


def _call_signal(
    call: ToolCall, read_patterns: Sequence[tuple[str, re.Pattern[str]]]
) -> SkillSignal | None:
    name = skill_call_name(call)
    if name is not None:
        return SkillSignal(name, SKILL_TOOLS[call.name][0])
    if not _reads_files(call):
        return None
    for skills_dir, pattern in read_patterns:
        read_name = _read_skill_name(pattern, call.arguments)
        if read_name is not None:
            return SkillSignal(read_name, "use", skills_dir)
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
