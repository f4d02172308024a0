"""What every source of one-session-per-JSONL-file transcripts shares.

A subclass says which files are sessions (and their keys) and how a batch of lines becomes
messages; this module does the rest: the incremental tail of each file, the backfill policy,
parser state carried in the cursor, and turning bad files into counted errors.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skilld.transcripts.model import Cursor, Message, ScanResult, SessionRead
from skilld.transcripts.tailer import (
    DEFAULT_MAX_LINE_BYTES,
    FileVanished,
    TailError,
    read_appended_lines,
    tail_part,
)

#: The cursor key under which a source keeps its own parser state beside the tail keys.
STATE_KEY = "state"


@dataclass(frozen=True, slots=True)
class SessionFile:
    path: Path
    key: str
    label: str | None = None


@dataclass(slots=True)
class ParsedLines:
    messages: list[Message] = field(default_factory=list)
    #: Skills used according to records that do not become messages (e.g. attachments).
    skill_uses: list[str] = field(default_factory=list)
    skipped: int = 0
    #: Parser state to carry into the next read of this session (JSON-serialisable).
    state: dict[str, Any] = field(default_factory=dict)


class LineFileSource(ABC):
    """A Source whose sessions are JSONL files under `path` (a directory or one file)."""

    kind: str
    default_glob: str

    def __init__(
        self,
        path: Path,
        *,
        glob: str | None = None,
        include_subagents: bool = False,
        tool_result_max_chars: int = 2000,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self.path = Path(path).expanduser()
        #: A glob given by the user; None means the kind's own layout (`default_glob`).
        self.glob = glob
        self.include_subagents = include_subagents
        self.tool_result_max_chars = tool_result_max_chars
        self.max_line_bytes = max_line_bytes

    @abstractmethod
    def session_files(self, errors: list[str]) -> list[SessionFile]:
        """Every session file that exists now; listing problems are appended to `errors`."""

    @abstractmethod
    def parse_lines(
        self, lines: list[bytes], state: dict[str, Any], session: SessionFile
    ) -> ParsedLines:
        """Normalise a batch of complete lines, continuing from the parser `state`."""

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        result = ScanResult(reads=[], seen=set())
        try:
            sessions = self.session_files(result.errors)
        except OSError as error:
            # Seeing nothing is not the same as every session having gone: keep the cursors.
            result.errors.append(f"{self.path}: {error.strerror or type(error).__name__}")
            result.seen.update(key for key in cursors if key.startswith(f"{self.kind}:"))
            return result
        for session in sessions:
            try:
                read = self._read_session(
                    session, cursors.get(session.key), start_new_at_end_before
                )
            except FileVanished:
                continue
            except TailError as error:
                # Still there but unreadable now: keep its cursor for when it heals.
                result.seen.add(session.key)
                result.errors.append(str(error))
                continue
            result.seen.add(session.key)
            if read is not None:
                result.reads.append(read)
                result.skipped_lines += read.skipped_lines
        return result

    def _read_session(
        self, session: SessionFile, cursor: Cursor | None, start_new_at_end_before: float | None
    ) -> SessionRead | None:
        start_at_end = cursor is None and _older_than(session.path, start_new_at_end_before)
        tail = read_appended_lines(
            session.path,
            tail_part(cursor) if cursor is not None else None,
            max_line_bytes=self.max_line_bytes,
            start_at_end=start_at_end,
        )
        state = {} if cursor is None or tail.reset else _stored_state(cursor)
        parsed = (
            self.parse_lines(tail.lines, dict(state), session)
            if tail.lines
            else ParsedLines(state=state)
        )
        new_cursor = dict(tail.cursor)
        if parsed.state:
            new_cursor[STATE_KEY] = parsed.state
        skipped = parsed.skipped + tail.skipped_oversize
        nothing_new = not parsed.messages and not parsed.skill_uses and not skipped
        if nothing_new and not tail.reset and cursor is not None and new_cursor == dict(cursor):
            return None
        return SessionRead(
            source=self.kind,
            session=session.key,
            messages=parsed.messages,
            cursor=new_cursor,
            skill_uses=parsed.skill_uses,
            skipped_lines=skipped,
            reset=tail.reset,
            mtime=tail.cursor["mtime_ns"] / 1e9,
            label=session.label,
        )


def _stored_state(cursor: Cursor) -> dict[str, Any]:
    state = cursor.get(STATE_KEY)
    return dict(state) if isinstance(state, dict) else {}


def _older_than(path: Path, threshold: float | None) -> bool:
    if threshold is None:
        return False
    try:
        return os.stat(path).st_mtime < threshold
    except OSError:
        return False  # the tail reports the problem


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex matching relative POSIX paths against a glob (`*`, `?`, `**`)."""
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            parts.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            parts.append(".*")
            index += 2
        elif pattern[index] == "*":
            parts.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            parts.append("[^/]")
            index += 1
        else:
            parts.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(parts))


def find_files(root: Path, pattern: str, errors: list[str]) -> list[Path]:
    """Entries under `root` whose relative path matches `pattern`, sorted.

    Symlinked directories are never descended into (no loops); a pattern without `**` stops
    descending at its own depth. Matching directories are returned too, so that a directory
    named like a session file is reported as a bad session instead of vanishing silently.
    """
    regex = glob_regex(pattern)
    max_depth = None if "**" in pattern else pattern.count("/")
    found: list[Path] = []

    def report(error: OSError) -> None:
        errors.append(f"{error.filename}: {error.strerror or type(error).__name__}")

    for directory, subdirectories, filenames in os.walk(root, onerror=report):
        relative = Path(directory).relative_to(root)
        depth = 0 if relative == Path(".") else len(relative.parts)
        for name in [*filenames, *subdirectories]:
            candidate = (relative / name).as_posix()
            if regex.fullmatch(candidate):
                found.append(Path(directory) / name)
        if max_depth is not None and depth >= max_depth:
            subdirectories.clear()
    return sorted(found)
