"""Incremental tail of one line-oriented file.

The cursor remembers how far the file was read (offset of the end of the last complete line),
what the file looked like then (device, inode, size, mtime) and a mark of its content (`_fileid`:
a digest of its first bytes and the bytes just before the offset). An unchanged file is answered
from one `stat` without opening it, so an idle tick costs a stat per session. A partial last
line is left for the next read; a truncated or rewritten file is read again from its start,
while the same bytes under a new device or inode (a remount, a restored copy) are read on from
the offset. Lines longer than `max_line_bytes` are skipped while streaming, so a huge line never
sits in memory whole.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from skilld.transcripts._fileid import HEAD_BYTES, ContentMark, read_mark, still_holds
from skilld.transcripts.model import Cursor

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
_CHUNK_BYTES = 64 * 1024
_NEWLINE = b"\n"

#: The keys of a tail cursor; sources may add their own keys beside them.
TAIL_KEYS = ("dev", "ino", "offset", "size", "mtime_ns", "head", "tail", "skipping")


class TailError(Exception):
    """The file cannot be tailed: not a regular file, unreadable, or a symlink loop."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class FileVanished(TailError):
    """The file no longer exists (deleted or renamed between listing and reading)."""


@dataclass(frozen=True, slots=True)
class TailResult:
    lines: list[bytes]
    cursor: dict[str, Any]
    reset: bool = False
    skipped_oversize: int = 0


def read_appended_lines(
    path: Path,
    cursor: Cursor | None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    start_at_end: bool = False,
) -> TailResult:
    """Read the complete lines appended to `path` since `cursor` (without their newline).

    With no cursor the file is read from its start, or with `start_at_end` from the end of
    its last complete line (nothing is returned, only a cursor). Raises `FileVanished` when
    the file is gone and `TailError` when it cannot be read.
    """
    path_stat = _stat(path)
    previous = _valid_cursor(cursor)
    if previous is not None and _unchanged(previous, path_stat):
        return TailResult(lines=[], cursor=previous)
    with _open_regular(path) as handle:
        held = os.fstat(handle.fileno())
        end = held.st_size
        reset = cursor is not None and (previous is None or not _continues(handle, previous, held))
        if previous is None or reset:
            offset = _last_line_end(handle, end) if start_at_end and cursor is None else 0
            skipping = False
        else:
            offset = previous["offset"]
            skipping = bool(previous.get("skipping", False))
        lines, offset, skipping, skipped = _read_lines(
            handle, offset, end, max_line_bytes=max_line_bytes, skipping=skipping
        )
        mark = read_mark(handle, offset, min(HEAD_BYTES, offset))
    new_cursor: dict[str, Any] = {
        "dev": held.st_dev,
        "ino": held.st_ino,
        "size": held.st_size,
        "mtime_ns": held.st_mtime_ns,
        **mark.to_cursor(),
    }
    if skipping:
        new_cursor["skipping"] = True
    return TailResult(lines=lines, cursor=new_cursor, reset=reset, skipped_oversize=skipped)


def tail_part(cursor: Cursor) -> dict[str, Any]:
    """Only the tailer's own keys of a cursor that may carry a source's keys too."""
    return {key: cursor[key] for key in TAIL_KEYS if key in cursor}


def _stat(path: Path) -> os.stat_result:
    try:
        path_stat = os.stat(path)
    except FileNotFoundError as error:
        raise FileVanished(path, "no longer exists") from error
    except OSError as error:
        raise TailError(path, error.strerror or type(error).__name__) from error
    if stat.S_ISDIR(path_stat.st_mode):
        raise TailError(path, "is a directory")
    if not stat.S_ISREG(path_stat.st_mode):
        raise TailError(path, "is not a regular file")
    return path_stat


def _open_regular(path: Path) -> BinaryIO:
    # O_NONBLOCK: if the path was swapped for a FIFO after the stat, opening must not hang.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError as error:
        raise FileVanished(path, "no longer exists") from error
    except OSError as error:
        raise TailError(path, error.strerror or type(error).__name__) from error
    handle = os.fdopen(descriptor, "rb", buffering=0)
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise TailError(path, "is not a regular file")
    return handle


def _valid_cursor(cursor: Cursor | None) -> dict[str, Any] | None:
    """The cursor's tail keys when they are well-formed, else None (read it again)."""
    if cursor is None:
        return None
    numbers = ("dev", "ino", "size", "mtime_ns")
    if not all(isinstance(cursor.get(key), int) for key in numbers):
        return None
    if ContentMark.from_cursor(cursor) is None:
        return None
    return tail_part(cursor)


def _unchanged(cursor: dict[str, Any], path_stat: os.stat_result) -> bool:
    return (
        cursor["dev"] == path_stat.st_dev
        and cursor["ino"] == path_stat.st_ino
        and cursor["size"] == path_stat.st_size
        and cursor["mtime_ns"] == path_stat.st_mtime_ns
    )


def _continues(handle: BinaryIO, cursor: dict[str, Any], held: os.stat_result) -> bool:
    """Whether the open file still holds the bytes the cursor read (else: read it again)."""
    mark = ContentMark.from_cursor(cursor)
    if mark is None:
        return False
    return still_holds(
        handle,
        mark,
        size=held.st_size,
        head_length=min(HEAD_BYTES, mark.offset),
        same_inode=(cursor["dev"], cursor["ino"]) == (held.st_dev, held.st_ino),
    )


def _last_line_end(handle: BinaryIO, end: int) -> int:
    """Offset just after the last newline before `end` (0 when there is none)."""
    position = end
    while position > 0:
        start = max(0, position - _CHUNK_BYTES)
        handle.seek(start)
        chunk = handle.read(position - start)
        newline = chunk.rfind(_NEWLINE)
        if newline != -1:
            return start + newline + 1
        position = start
    return 0


def _read_lines(
    handle: BinaryIO, offset: int, end: int, *, max_line_bytes: int, skipping: bool
) -> tuple[list[bytes], int, bool, int]:
    """Complete lines in [offset, end), the offset to resume from, and oversize accounting.

    Returns (lines, resume_offset, still_skipping, skipped_count). `skipping` means the read
    starts inside an oversize line whose beginning was already discarded.
    """
    lines: list[bytes] = []
    pending: list[bytes] = []
    pending_length = 0
    skipped = 0
    position = offset
    resume = offset
    handle.seek(offset)
    while position < end:
        chunk = handle.read(min(_CHUNK_BYTES, end - position))
        if not chunk:
            break  # the file shrank while being read; the next read notices
        start = 0
        while start < len(chunk):
            newline = chunk.find(_NEWLINE, start)
            if newline == -1:
                if not skipping:
                    pending.append(chunk[start:])
                    pending_length += len(chunk) - start
                    if pending_length > max_line_bytes:
                        pending.clear()
                        pending_length = 0
                        skipping = True
                break
            piece_length = newline - start
            if skipping or pending_length + piece_length > max_line_bytes:
                skipped += 1
            else:
                pending.append(chunk[start:newline])
                lines.append(b"".join(pending))
            skipping = False
            pending.clear()
            pending_length = 0
            start = newline + 1
            resume = position + newline + 1
        position += len(chunk)
    if skipping:
        # The discarded start of an oversize line is never read again.
        resume = position
    return lines, resume, skipping, skipped
