"""What every source of one-session-per-JSONL-file transcripts shares.

A subclass says which files are sessions (and their natural keys) and how a batch of lines
becomes messages; this module does the rest: the incremental tail of each file, the backfill
policy, parser state carried in the cursor, turning bad files into counted errors, and two
promises about cursors:

* A key never changes once given. A cursor names its file (relative to the source's path, so
  however that path is spelled: a symlink, `~`); the file keeps that cursor's key. A new file
  takes its natural key unless another file holds or shares it; then its qualified key.
* A cursor is forgotten only when its file is gone while the directory that held it is still
  there, listable, and on the device the file was read from (an unmounted volume leaves an empty
  mount point on another device). A missing or unreadable root or sub-tree keeps the cursors of
  everything below it, so nothing is read twice when it comes back.
"""

from __future__ import annotations

import os
import re
import stat
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from skilld.transcripts._tailer import (
    DEFAULT_MAX_LINE_BYTES,
    FileVanished,
    TailError,
    read_appended_lines,
    tail_part,
)
from skilld.transcripts.model import Cursor, Message, ScanResult, SessionRead, SkillSignal

#: The cursor key under which a source keeps its own parser state beside the tail keys.
STATE_KEY = "state"
#: The cursor key naming the session's file, relative to the source's path (POSIX, "." when
#: the path is the file itself).
FILE_KEY = "file"


@dataclass(frozen=True, slots=True)
class SessionFile:
    path: Path
    key: str  # the natural key; `settle_keys` decides the key the session really gets
    label: str | None = None
    #: The key to take when the natural one is held or shared by another file (None: the
    #: path relative to the source's, without its suffix).
    qualified_key: str | None = None
    relative: str = ""  # set by the listing: `path` relative to the source's path


@dataclass(slots=True)
class ParsedLines:
    messages: list[Message] = field(default_factory=list)
    #: Skill signals of records that do not become messages (e.g. attachments).
    signals: list[SkillSignal] = field(default_factory=list)
    skipped: int = 0
    #: Parser state to carry into the next read of this session (JSON-serialisable).
    state: dict[str, Any] = field(default_factory=dict)
    #: The session's working directory, when these lines (or the carried state) name it.
    cwd: str | None = None


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
        """Every session file under the (existing) path; listing problems go to `errors`."""

    @abstractmethod
    def parse_lines(
        self, lines: list[bytes], state: dict[str, Any], session: SessionFile
    ) -> ParsedLines:
        """Normalise a batch of complete lines, continuing from the parser `state`."""

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        result = ScanResult(reads=[], seen=set())
        own = {key: cursor for key, cursor in cursors.items() if key.startswith(f"{self.kind}:")}
        try:
            os.stat(self.path)
            listed = self._list_sessions(result.errors)
        except FileNotFoundError:
            # Nothing here now (an unmounted volume, a mount not there yet, a tree moved away):
            # seeing nothing is not every session having gone.
            result.seen.update(own)
            return result
        except OSError as error:
            result.errors.append(f"{self.path}: {error.strerror or type(error).__name__}")
            result.seen.update(own)
            return result
        for session in settle_keys(listed, file_owners(own)):
            cursor = own.get(session.key)
            if cursor is not None and _unchanged_since(session, cursor):
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
        devices: dict[Path, int | None] = {}
        result.seen.update(
            key
            for key, cursor in own.items()
            if key not in result.seen
            and not forgettable(self.path, cursor, holder_levels=1, devices=devices)
        )
        return result

    def _list_sessions(self, errors: list[str]) -> list[SessionFile]:
        if self._listing is not None:
            directories, sessions = self._listing
            if all(_mtime_ns(path) == mtime for path, mtime in directories.items()):
                return sessions
        self.listing_is_final = True
        errors_before = len(errors)
        directories = _directory_mtimes(self.path)
        sessions = [
            replace(session, relative=session.path.relative_to(self.path).as_posix())
            for session in self.session_files(errors)
        ]
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
        new_cursor = {**tail.cursor, FILE_KEY: session.relative}
        if parsed.state:
            new_cursor[STATE_KEY] = parsed.state
        skipped = parsed.skipped + tail.skipped_oversize
        nothing_new = not parsed.messages and not parsed.signals and not skipped
        if nothing_new and not tail.reset and cursor is not None and new_cursor == dict(cursor):
            return None
        return SessionRead(
            source=self.kind,
            session=session.key,
            messages=parsed.messages,
            cursor=new_cursor,
            signals=parsed.signals,
            skipped_lines=skipped,
            reset=tail.reset,
            mtime=tail.cursor["mtime_ns"] / 1e9,
            label=session.label,
            cwd=parsed.cwd,
        )


def file_owners(cursors: Mapping[str, Cursor]) -> dict[str, str]:
    """File (relative to the source's path) -> the key of the cursor that names it."""
    return {
        cursor[FILE_KEY]: key
        for key, cursor in cursors.items()
        if isinstance(cursor.get(FILE_KEY), str)
    }


def settle_keys(files: Sequence[SessionFile], owners: Mapping[str, str]) -> list[SessionFile]:
    """The listed files with the keys they get: a key, once given, never changes.

    A file a cursor names keeps that cursor's key. A new file takes its natural key when no
    other new file shares it and no cursor holds it (a cursor's file may be away for now and
    come back); else its qualified key, so that only the newcomer is qualified. A qualified key
    taken too (`a/x.jsonl` holds `jsonl:x`, the natural and qualified key of a newcomer `x.jsonl`)
    is numbered: `jsonl:x~2`. No two files ever get one key.
    """
    taken = set(owners.values())
    newcomers = Counter(file.key for file in files if file.relative not in owners)
    keys = {file.relative: owners[file.relative] for file in files if file.relative in owners}
    for file in files:
        if file.relative in keys:
            continue
        if newcomers[file.key] == 1 and file.key not in taken:
            key = file.key
        else:
            key = _free(file.qualified_key or _relative_key(file), taken)
        taken.add(key)
        keys[file.relative] = key
    return [
        file if keys[file.relative] == file.key else replace(file, key=keys[file.relative])
        for file in files
    ]


def _free(key: str, taken: set[str]) -> str:
    """`key`, or the first of `key~2`, `key~3`, … that is not taken."""
    number, free = 1, key
    while free in taken:
        number += 1
        free = f"{key}~{number}"
    return free


def _relative_key(file: SessionFile) -> str:
    kind = file.key.partition(":")[0]
    relative = PurePosixPath(file.relative)
    # A source whose path is the file itself lists it as ".": its own name qualifies it.
    name = relative.with_suffix("") if relative.name else PurePosixPath(file.path.stem)
    return f"{kind}:{name.as_posix()}"


@dataclass(frozen=True, slots=True)
class Whereabouts:
    """What can be seen of an unseen session's file and the directory that held it."""

    file_there: bool  # something still exists at the file's path
    #: Device of the holding directory when it is there and listable, else None.
    holder_device: int | None


def may_forget(where: Whereabouts | None, file_device: Any) -> bool:
    """Whether the cursor of a session a scan did not see may be forgotten.

    `where` is None for a cursor that names no file (written before cursors did): the scan
    listed the source's path, so its file is gone. Otherwise only when the directory that held
    the file is there and listable and either the file is still there (no longer a session of
    this source) or the directory is on the device the file was read from: an empty mount point
    left by an unmounted volume is not the directory that held it.
    """
    if where is None:
        return True
    if where.holder_device is None:
        return False
    return where.file_there or where.holder_device == file_device


def whereabouts(
    root: Path, relative: str, holder_levels: int, devices: dict[Path, int | None]
) -> Whereabouts:
    """Looks at a session file (relative to `root`) and its holder, `holder_levels` up.

    Every directory from `root` down to the holder must be listable for the holder to count as
    there: below one that is not, nothing could be listed. `devices` caches, for one scan, each
    directory's device (None: not a listable directory)."""
    parts = PurePosixPath(relative).parts
    depth = max(0, len(parts) - holder_levels)
    device: int | None = None
    for level in range(depth + 1):
        directory = root.joinpath(*parts[:level])
        if directory not in devices:
            devices[directory] = _listable_device(directory)
        device = devices[directory]
        if device is None:
            return Whereabouts(file_there=False, holder_device=None)
    return Whereabouts(os.path.lexists(root / relative), device)


def _listable_device(directory: Path) -> int | None:
    try:
        directory_stat = os.stat(directory)
        with os.scandir(directory):
            pass
    except OSError:
        return None
    return directory_stat.st_dev if stat.S_ISDIR(directory_stat.st_mode) else None


def forgettable(
    root: Path, cursor: Cursor, *, holder_levels: int, devices: dict[Path, int | None]
) -> bool:
    """`may_forget` for a cursor whose session a scan of the existing `root` did not see."""
    relative = cursor.get(FILE_KEY)
    if not isinstance(relative, str):
        return may_forget(None, None)
    if PurePosixPath(relative).is_absolute() or ".." in PurePosixPath(relative).parts:
        return may_forget(None, None)  # not a name this module wrote
    where = whereabouts(root, relative, holder_levels, devices)
    return may_forget(where, cursor.get("dev"))


def _unchanged_since(session: SessionFile, cursor: Cursor) -> bool:
    """The tailer's own "nothing new" test, without building anything: one stat."""
    if cursor.get("skipping") or cursor.get(FILE_KEY) != session.relative:
        return False
    try:
        file_stat = os.stat(session.path)
    except OSError:
        return False  # the full read reports what is wrong
    return (
        file_stat.st_size == cursor.get("size")
        and file_stat.st_mtime_ns == cursor.get("mtime_ns")
        and file_stat.st_ino == cursor.get("ino")
        and file_stat.st_dev == cursor.get("dev")
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
