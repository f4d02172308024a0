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
        #: The last listing and the mtimes of every directory it walked: while none of those
        #: directories changed, no session file can have appeared or gone (appends to a file
        #: do not touch its directory), so an idle scan costs one stat per file, no walk.
        self._listing: tuple[dict[str, int], list[SessionFile]] | None = None
        #: A subclass clears this while listing when a file could not be classified yet
        #: (e.g. its first line is still being written): such a listing is not reused.
        self.listing_is_final = True

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
            sessions = self._list_sessions(result.errors)
        except OSError as error:
            # Seeing nothing is not the same as every session having gone: keep the cursors.
            result.errors.append(f"{self.path}: {error.strerror or type(error).__name__}")
            result.seen.update(key for key in cursors if key.startswith(f"{self.kind}:"))
            return result
        for session in sessions:
            cursor = cursors.get(session.key)
            if cursor is not None and _unchanged_since(session.path, cursor):
                result.seen.add(session.key)
                continue
            try:
                read = self._read_session(session, cursor, start_new_at_end_before)
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
        return result

    def _list_sessions(self, errors: list[str]) -> list[SessionFile]:
        if self._listing is not None:
            directories, sessions = self._listing
            if all(_mtime_ns(path) == mtime for path, mtime in directories.items()):
                return sessions
        self.listing_is_final = True
        errors_before = len(errors)
        directories = _directory_mtimes(self.path)
        sessions = self.session_files(errors)
        final = self.listing_is_final and len(errors) == errors_before and directories
        self._listing = (directories, sessions) if final else None
        return sessions

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


def _unchanged_since(path: Path, cursor: Cursor) -> bool:
    """The tailer's own "nothing new" test, without building anything: one stat."""
    if cursor.get("skipping"):
        return False
    try:
        stat = os.stat(path)
    except OSError:
        return False  # the full read reports what is wrong
    return (
        stat.st_size == cursor.get("size")
        and stat.st_mtime_ns == cursor.get("mtime_ns")
        and stat.st_ino == cursor.get("ino")
        and stat.st_dev == cursor.get("dev")
    )


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _directory_mtimes(root: Path) -> dict[str, int]:
    """mtime of `root` and every real directory below it (taken before listing, so that a
    change during the listing invalidates it)."""
    mtimes: dict[str, int] = {}
    if not root.is_dir():
        return mtimes
    for directory, subdirectories, _ in os.walk(root):
        mtime = _mtime_ns(directory)
        if mtime is not None:
            mtimes[directory] = mtime
        subdirectories[:] = [
            d for d in subdirectories if not os.path.islink(os.path.join(directory, d))
        ]
    return mtimes


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
