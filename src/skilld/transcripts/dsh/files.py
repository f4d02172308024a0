"""A directory of DSH session files, read incrementally.

Layout (DSH 0.1.x): `<root>/--<projectKey(cwd)>--/<encodeSegment(id)>/session.jsonl.zstd`, a
series of concatenated, checksummed Zstandard frames: frame 0 holds the header line, every later
frame one write batch of complete JSON lines. With compression off the same lines sit in a plain
`session.jsonl`.

Reading rules (each is a promise the tests hold):

* A frame that end of file cuts short is still being written: the cursor stays before it and
  the frame is read once complete. A plain file's partial last line waits the same way.
* A complete frame that fails to decode (checksum mismatch, corrupt blocks) and bytes that are
  not a frame at all are counted in `skipped_lines`. While no valid frame follows them the
  cursor stays before them and they are retried on every tick (a writer may still be repairing
  its tail); as soon as a later frame decodes they are skipped for good, so a damaged file never
  stalls its session.
* The cursor names its file relative to the root and keeps a content mark (`_fileid`) whose head
  is the header frame (or header line). A file that no longer holds what was read (shorter than
  the offset, another header, other bytes before the offset) is read again from its start with
  `reset=True`; the same bytes under a new device or inode are read on from the offset. A file
  whose device, inode, size and mtime are unchanged is answered from `stat` alone.
* Skips inside a session are counted on its SessionRead; ScanResult.skipped_lines counts only
  those that belong to no session (a file whose header is unreadable).
* A session's directory comes and goes with it, so the directory that held a session file is
  its project's: a missing or unreadable project directory or root keeps its sessions' cursors.
"""

from __future__ import annotations

import json
import os
import stat
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from skilld.transcripts._fileid import ContentMark, read_mark, still_holds
from skilld.transcripts._filesource import FILE_KEY, file_owners, find_files, forgettable
from skilld.transcripts.dsh.digest import (
    KIND,
    OPEN_TURN_RELEASE_SECONDS,
    BadHeader,
    Digester,
    SessionHeader,
    TurnState,
    event_from_record,
    int_or_none,
    parse_header,
)
from skilld.transcripts.dsh.frames import (
    READ_CHUNK,
    ZSTD_MAGIC,
    ByteWindow,
    FrameFormatError,
    LineCutter,
    decode_frame,
    frame_end,
    is_skippable_frame,
    iter_frames,
)
from skilld.transcripts.model import Cursor, ScanResult, SessionRead

#: Newer DSH releases put the format version in the name (`session.v3.jsonl.zstd` in 0.1.5,
#: `session.v4.jsonl.zstd` in 0.2.x): every version is listed, the reader skips what it does
#: not know.
DEFAULT_GLOBS = ("*/*/session*.jsonl.zstd", "*/*/session*.jsonl")
#: A session file is held by its project's directory, two levels up.
HOLDER_LEVELS = 2

_HEADER_FRAME_MAX_BYTES = 1 << 20
_HEADER_FIRST_READ = 4096
#: Start-at-end looks for the last seq in this many trailing frames (corrupt ones are skipped).
_END_STATE_FRAMES = 16


# --------------------------------------------------------------------------------------------
# Headers


@dataclass(frozen=True, slots=True)
class _Head:
    header: SessionHeader
    end: int  # offset just past the header frame / line: the file's head in its content mark


def _read_zstd_head(file: BinaryIO, size: int, max_line_bytes: int) -> _Head | None:
    """The header frame, or None while it is still being written."""
    window = ByteWindow(file, 0, min(size, _HEADER_FRAME_MAX_BYTES), first_read=_HEADER_FIRST_READ)
    while True:
        try:
            stop = frame_end(window.buf, 0)
        except FrameFormatError as exc:
            raise BadHeader(f"first frame: {exc}") from exc
        if stop is not None:
            break
        if not window.more():
            if size > _HEADER_FRAME_MAX_BYTES:
                raise BadHeader("header frame larger than 1 MiB")
            return None
    decoded = decode_frame(bytes(window.buf[:stop]), max_line_bytes)
    if decoded is None:
        raise BadHeader("header frame does not decode (checksum or data corrupt)")
    lines, _ = decoded
    if len(lines) != 1:
        raise BadHeader("first frame is not exactly one header line")
    return _Head(parse_header(lines[0]), stop)


def _read_plain_head(file: BinaryIO, size: int, max_line_bytes: int) -> _Head | None:
    """The header line, or None while it is still being written."""
    file.seek(0)
    data = file.read(min(size, max_line_bytes + 1))
    newline = data.find(b"\n")
    if newline == -1:
        if len(data) > max_line_bytes:
            raise BadHeader("header line longer than max_line_bytes")
        return None
    line = data[: newline + 1]
    return _Head(parse_header(line), newline + 1)


# --------------------------------------------------------------------------------------------
# Cursors


@dataclass(frozen=True, slots=True)
class _FileCursor:
    file: str | None  # relative to the root; None in cursors written before it was kept
    dev: int
    ino: int
    size: int
    mtime_ns: int
    mark: ContentMark
    seq: int
    held: bool
    retry: bool
    discard: bool
    subagent: bool
    state: TurnState

    @classmethod
    def parse(cls, raw: Cursor | None) -> _FileCursor | None:
        """The cursor, or None when it is missing or not one this source wrote."""
        if raw is None:
            return None
        dev, ino, size = (int_or_none(raw.get(key)) for key in ("dev", "ino", "size"))
        mtime_ns, seq = int_or_none(raw.get("mtime_ns")), int_or_none(raw.get("seq"))
        mark = ContentMark.from_cursor(raw)
        if dev is None or ino is None or size is None or mtime_ns is None or seq is None:
            return None
        if mark is None:
            return None
        file = raw.get(FILE_KEY)
        return cls(
            file=file if isinstance(file, str) else None,
            dev=dev,
            ino=ino,
            size=size,
            mtime_ns=mtime_ns,
            mark=mark,
            seq=seq,
            held=raw.get("held") is True,
            retry=raw.get("retry") is True,
            discard=raw.get("discard") is True,
            subagent=raw.get("subagent") is True,
            state=TurnState.from_cursor(raw),
        )

    def same_file(self, st: os.stat_result) -> bool:
        return (self.dev, self.ino) == (st.st_dev, st.st_ino)

    def unchanged(self, st: os.stat_result, now: float) -> bool:
        """Nothing to read: same file, same size and mtime, and no pending retry or release."""
        if not self.same_file(st) or (self.size, self.mtime_ns) != (st.st_size, st.st_mtime_ns):
            return False
        if self.retry:
            return False
        return not (self.held and now - st.st_mtime >= OPEN_TURN_RELEASE_SECONDS)


# --------------------------------------------------------------------------------------------
# Reading one file


@dataclass(slots=True)
class _Tail:
    """What a pass over a file's new bytes found."""

    committed: int  # offset just past the last frame / line consumed
    skipped: int = 0
    retry: bool = False  # undecodable bytes after `committed`: look again next tick
    discard: bool = False  # a too-long plain line is being skipped up to its newline


def _feed_lines(digester: Digester, lines: list[bytes], position: int) -> int:
    """Feeds parsed lines to the digester; returns how many were malformed."""
    malformed = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            event = event_from_record(json.loads(line), position)
        except (ValueError, RecursionError):  # nesting too deep for the decoder is malformed too
            malformed += 1
            continue
        if event is not None:
            digester.add(event)
    return malformed


def _read_zstd_tail(
    file: BinaryIO, start: int, end: int, digester: Digester, max_line_bytes: int
) -> _Tail:
    tail = _Tail(committed=start)
    resume: int | None = start
    while resume is not None:
        pieces, resume = iter_frames(file, resume, end), None
        for piece in pieces:
            if piece.payload is None:
                tail.skipped += 1
                tail.retry = True
                continue
            if is_skippable_frame(piece.payload):
                tail.committed, tail.retry = piece.end, False
                continue
            decoded = decode_frame(piece.payload, max_line_bytes)
            if decoded is None:
                tail.skipped += 1
                tail.retry = True
                # A frame cut short by a crash is "completed" by the bytes of the frames written
                # after it: resume at a frame that starts inside it rather than lose that one.
                inner = piece.payload.find(ZSTD_MAGIC, 1)
                if inner != -1:
                    resume = piece.start + inner
                    break
                continue
            lines, oversize = decoded
            tail.skipped += oversize + _feed_lines(digester, lines, piece.start)
            tail.committed, tail.retry = piece.end, False
    return tail


def _read_plain_tail(
    file: BinaryIO, start: int, end: int, digester: Digester, max_line_bytes: int, *, discard: bool
) -> _Tail:
    tail = _Tail(committed=start)
    cutter = LineCutter(max_line_bytes, dropping=discard)
    position = start
    file.seek(start)
    while position < end:
        chunk = file.read(min(READ_CHUNK, end - position))
        if not chunk:
            break
        for stop, line in cutter.feed(chunk):
            line_start, tail.committed = tail.committed, position + stop
            if line is not None:
                tail.skipped += _feed_lines(digester, [line], line_start)
        position += len(chunk)
    tail.skipped += cutter.oversize
    if cutter.dropping:
        # The too-long line is already counted; skip what arrived of it and the rest later.
        tail.committed, tail.discard = position, True
    return tail


def _zstd_end_state(file: BinaryIO, start: int, end: int, max_line_bytes: int) -> tuple[int, int]:
    """(offset after the last complete frame, the last seq written) for start-at-end."""
    offset = start
    recent: deque[bytes] = deque(maxlen=_END_STATE_FRAMES)
    for piece in iter_frames(file, start, end):
        if piece.payload is None:
            continue
        offset = piece.end
        if not is_skippable_frame(piece.payload):
            recent.append(piece.payload)
    for frame in reversed(recent):
        decoded = decode_frame(frame, max_line_bytes)
        if decoded is not None:
            return offset, _last_seq(decoded[0])
    return offset, -1


def _rfind_newline(file: BinaryIO, start: int, end: int) -> int | None:
    """Offset of the last newline in [start, end) of the file, read backwards in chunks."""
    position = end
    while position > start:
        read_from = max(start, position - READ_CHUNK)
        file.seek(read_from)
        found = file.read(position - read_from).rfind(b"\n")
        if found != -1:
            return read_from + found
        position = read_from
    return None


def _plain_end_state(file: BinaryIO, start: int, end: int, max_line_bytes: int) -> tuple[int, int]:
    """(offset after the last complete line, its seq) for start-at-end."""
    last_newline = _rfind_newline(file, start, end)
    if last_newline is None:
        return start, -1
    previous = _rfind_newline(file, start, last_newline)
    line_start = start if previous is None else previous + 1
    if last_newline - line_start > max_line_bytes:
        return last_newline + 1, -1
    file.seek(line_start)
    return last_newline + 1, _last_seq([file.read(last_newline - line_start)])


def _last_seq(lines: list[bytes]) -> int:
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        seq = int_or_none(record.get("seq")) if isinstance(record, dict) else None
        if seq is not None:
            return seq
    return -1


# --------------------------------------------------------------------------------------------
# The directory


@dataclass(slots=True)
class _KnownFile:
    """A session file whose header this process has read (inode-bound)."""

    dev: int
    ino: int
    header: SessionHeader


@dataclass(slots=True)
class _Pass:
    """Mutable bookkeeping of one scan."""

    cursors: Mapping[str, Cursor]
    start_new_at_end_before: float | None
    now: float
    result: ScanResult = field(default_factory=lambda: ScanResult(reads=[], seen=set()))
    claimed: dict[str, Path] = field(default_factory=dict)  # session key -> file that holds it


class SessionDirectory:
    """The session files under one DSH sessions directory."""

    def __init__(
        self,
        root: Path,
        *,
        globs: tuple[str, ...],
        include_subagents: bool,
        tool_result_max_chars: int,
        max_line_bytes: int,
    ) -> None:
        self.root = root
        self.globs = globs
        self.include_subagents = include_subagents
        self.tool_result_max_chars = tool_result_max_chars
        self.max_line_bytes = max_line_bytes
        # Headers read by this process, by file, so files without a cursor (excluded subagents,
        # or sessions found mid-write) are not re-opened every tick just to learn their key.
        self._known: dict[str, _KnownFile] = {}

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None, now: float
    ) -> ScanResult:
        scan = _Pass(cursors, start_new_at_end_before, now)
        owners = file_owners(cursors)
        found: dict[str, Path] = {}
        for pattern in self.globs:
            # Unlike Path.glob, this lists symlink loops and dangling links (reported as bad
            # sessions, never silently missing) and never descends into a symlinked directory.
            for path in find_files(self.root, pattern, scan.result.errors):
                found[path.relative_to(self.root).as_posix()] = path
        # Files a cursor already names claim their session key first.
        for relative in sorted(found, key=lambda name: (name not in owners, name)):
            self._scan_file(found[relative], relative, owners.get(relative), scan)
        self._known = {name: known for name, known in self._known.items() if name in found}
        result = scan.result
        devices: dict[Path, int | None] = {}
        result.seen.update(
            key
            for key, cursor in cursors.items()
            if key not in result.seen
            and not forgettable(self.root, cursor, holder_levels=HOLDER_LEVELS, devices=devices)
        )
        return result

    def _scan_file(self, path: Path, relative: str, cursor_key: str | None, scan: _Pass) -> None:
        result = scan.result
        try:
            st = os.stat(path)
        except OSError as exc:
            result.errors.append(f"{path}: {exc.strerror or exc}")
            if cursor_key is not None:
                result.seen.add(cursor_key)
            return
        if stat.S_ISDIR(st.st_mode):
            result.errors.append(f"{path}: a directory where a session file should be")
            return
        if not stat.S_ISREG(st.st_mode):
            result.errors.append(f"{path}: not a regular file")
            return
        if cursor_key is not None:
            cursor = _FileCursor.parse(scan.cursors.get(cursor_key))
            if cursor is not None and cursor.file == relative and cursor.same_file(st):
                if cursor.subagent and not self.include_subagents:
                    return
                if cursor.unchanged(st, scan.now):
                    if self._claim(cursor_key, path, scan):
                        result.seen.add(cursor_key)
                    return
        known = self._known.get(relative)
        if known is not None and (known.dev, known.ino) == (st.st_dev, st.st_ino):
            if known.header.subagent and not self.include_subagents:
                return
            if not self._claim(known.header.key, path, scan):
                return
        try:
            with open(path, "rb") as file:
                self._read_file(file, path, relative, st, scan)
        except OSError as exc:
            result.errors.append(f"{path}: {exc.strerror or exc}")
            if cursor_key is not None:
                result.seen.add(cursor_key)

    def _claim(self, key: str, path: Path, scan: _Pass) -> bool:
        holder = scan.claimed.setdefault(key, path)
        if holder != path:
            scan.result.errors.append(
                f"{path}: session {key} is already read from {holder}; skipped"
            )
            return False
        return True

    def _read_file(
        self, file: BinaryIO, path: Path, relative: str, st: os.stat_result, scan: _Pass
    ) -> None:
        result = scan.result
        compressed = path.name.endswith(".zstd")
        read_head = _read_zstd_head if compressed else _read_plain_head
        try:
            head = read_head(file, st.st_size, self.max_line_bytes)
        except BadHeader as exc:
            result.errors.append(f"{path}: {exc}")
            result.skipped_lines += 1
            return
        if head is None:
            return  # the header itself is still being written
        header = head.header
        self._known[relative] = _KnownFile(st.st_dev, st.st_ino, header)
        if header.subagent and not self.include_subagents:
            return
        if not self._claim(header.key, path, scan):
            return
        result.seen.add(header.key)
        raw_cursor = scan.cursors.get(header.key)
        cursor = _FileCursor.parse(raw_cursor)
        continues = (
            cursor is not None
            and head.end <= cursor.mark.offset
            and still_holds(
                file,
                cursor.mark,
                size=st.st_size,
                head_length=head.end,
                same_inode=cursor.same_file(st),
            )
        )
        if cursor is not None and continues:
            start, after_seq, state, discard = (
                cursor.mark.offset,
                cursor.seq,
                cursor.state,
                cursor.discard,
            )
        else:
            start, after_seq, state, discard = head.end, -1, TurnState(), False
            cutoff = scan.start_new_at_end_before
            if raw_cursor is None and cutoff is not None and st.st_mtime < cutoff:
                self._start_at_end(file, relative, st, head, compressed, scan)
                return
        digester = Digester(
            state=state, after_seq=after_seq, tool_result_max_chars=self.tool_result_max_chars
        )
        if compressed:
            tail = _read_zstd_tail(file, start, st.st_size, digester, self.max_line_bytes)
        else:
            tail = _read_plain_tail(
                file, start, st.st_size, digester, self.max_line_bytes, discard=discard
            )
        digest = digester.finish(hold_open_turn=scan.now - st.st_mtime < OPEN_TURN_RELEASE_SECONDS)
        offset = digest.hold.position if digest.hold else tail.committed
        new_cursor = _file_cursor(file, relative, st, head, offset, digest.last_seq, digest.state)
        new_cursor.update(
            held=digest.hold is not None, retry=tail.retry, discard=tail.discard and not digest.hold
        )
        reset = raw_cursor is not None and not continues
        if digest.messages or reset or tail.skipped or new_cursor != raw_cursor:
            result.reads.append(
                SessionRead(
                    source=KIND,
                    session=header.key,
                    messages=digest.messages,
                    cursor=new_cursor,
                    skipped_lines=tail.skipped,
                    reset=reset,
                    mtime=st.st_mtime,
                    label=header.label,
                    cwd=header.cwd,
                )
            )

    def _start_at_end(
        self,
        file: BinaryIO,
        relative: str,
        st: os.stat_result,
        head: _Head,
        compressed: bool,
        scan: _Pass,
    ) -> None:
        if compressed:
            offset, seq = _zstd_end_state(file, head.end, st.st_size, self.max_line_bytes)
        else:
            offset, seq = _plain_end_state(file, head.end, st.st_size, self.max_line_bytes)
        scan.result.reads.append(
            SessionRead(
                source=KIND,
                session=head.header.key,
                messages=[],
                cursor=_file_cursor(file, relative, st, head, offset, seq, TurnState()),
                mtime=st.st_mtime,
                label=head.header.label,
                cwd=head.header.cwd,
            )
        )


def _file_cursor(
    file: BinaryIO,
    relative: str,
    st: os.stat_result,
    head: _Head,
    offset: int,
    seq: int,
    state: TurnState,
) -> dict[str, Any]:
    return {
        FILE_KEY: relative,
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        **read_mark(file, offset, head.end).to_cursor(),
        "seq": seq,
        "held": False,
        "retry": False,
        "discard": False,
        "subagent": head.header.subagent,
        **state.to_cursor(),
    }
