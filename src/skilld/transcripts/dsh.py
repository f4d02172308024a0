"""DeepSeek Harness (DSH) sessions, read incrementally.

Layout (DSH 0.1.x): `<root>/--<projectKey(cwd)>--/<encodeSegment(id)>/session.jsonl.zstd`, a
series of concatenated, checksummed Zstandard frames: frame 0 holds the header line, every later
frame one write batch of complete JSON lines. With compression off the same lines sit in a plain
`session.jsonl`. The opt-in SQLite persistence keeps the same events in one database file
(table `events`, plus `sessions` for the headers when present).

Reading rules (each is a promise the tests hold):

* Frames are found by their structure (frame header, every block header, the checksum), never
  by searching for the magic number, so a frame's extent is known before decompressing it, with
  or without a content size in its header.
* A frame that end of file cuts short is still being written: the cursor stays before it and
  the frame is read once complete. A plain file's partial last line waits the same way.
* A complete frame that fails to decode (checksum mismatch, corrupt blocks) and bytes that are
  not a frame at all are counted in `skipped_lines`. While no valid frame follows them the
  cursor stays before them and they are retried on every tick (a writer may still be repairing
  its tail); as soon as a later frame decodes they are skipped for good, so a damaged file never
  stalls its session.
* The cursor fingerprints the header frame (or header line) and the bytes just before its
  offset. A file that shrank, was replaced (new inode) or whose earlier bytes changed is re-read
  from its start with `reset=True`. A file whose device, inode, size and mtime are unchanged is
  answered from `stat` alone, without opening it.
* Events whose `seq` is not above the cursor's are ignored: nothing is sent twice.
* Skips inside a session are counted on its SessionRead; ScanResult.skipped_lines counts only
  those that belong to no session (a file whose header is unreadable).
* Only user messages typed by a person (`source.kind` "user", or no source at all in older
  logs) become role "user"; harness-injected text (plugins, coordinator, settled subagents,
  ...) is dropped, a goal becomes a short "[goal] ..." system line. Reasoning and streaming
  rows never reach a window. Surface rewrites (`surfaceOp` replace: compaction summaries,
  pruned tool results) restate old history and are skipped.
* `turn/end` closes a turn. A turn that ends on a tool result or an error gets an assistant line
  "[turn ended: <reason>]" so the finished turn is visible as one. A finished-looking assistant
  message with no `turn/end` after it yet is held back (the cursor stays before it) until its
  turn ends, so a window never closes on a turn the agent is still continuing; a session idle
  for OPEN_TURN_RELEASE_SECONDS releases it (an agent that died mid-turn writes no `turn/end`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import stat
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from skilld.transcripts.filesource import find_files
from skilld.transcripts.model import Cursor, Message, ScanResult, SessionRead, ToolCall
from skilld.transcripts.normalise import content_text, cut_text

KIND = "dsh"
ZSTD_FILE_NAME = "session.jsonl.zstd"
PLAIN_FILE_NAME = "session.jsonl"
DEFAULT_GLOBS = (f"*/*/{ZSTD_FILE_NAME}", f"*/*/{PLAIN_FILE_NAME}")

#: Streaming rows: they repeat, token by token, what the settled messages already hold.
NOISE_EVENT_TYPES = frozenset(
    {"assistant/chunk", "assistant/attempt", "text-chunks", "reasoning-chunks", "tool-call-chunks"}
)
SKILL_TOOL_NAME = "skill"
GOAL_MAX_CHARS = 300
TOOL_ARGUMENTS_MAX_CHARS = 1000
#: callId -> tool name pairs kept in a cursor; a result follows its call within a few events.
REMEMBERED_CALLS = 64
OPEN_TURN_RELEASE_SECONDS = 600.0

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_MAX_BLOCK_SIZE = 128 * 1024
_HEADER_FRAME_MAX_BYTES = 1 << 20
_HEADER_FIRST_READ = 4096
_READ_CHUNK = 1 << 20
_DECODE_CHUNK = 1 << 18
_FINGERPRINT_HEX_CHARS = 32
_TAIL_CHECK_BYTES = 16
#: Start-at-end looks for the last seq in this many trailing frames (corrupt ones are skipped).
_END_STATE_FRAMES = 16


# --------------------------------------------------------------------------------------------
# Zstandard frame structure (RFC 8878 §3.1)


class FrameFormatError(ValueError):
    """The bytes at a position are not the start of a Zstandard frame."""


def frame_end(data: bytes | bytearray, pos: int) -> int | None:
    """Offset just past the frame that starts at `pos`; None when `data` ends before it does.

    Walks the frame header, every block header and the optional checksum, so it needs no
    decompression and works whether or not the frame header carries a content size. Skippable
    frames are measured too. Raises FrameFormatError when `pos` is not a frame start.
    """
    limit = len(data)
    if limit - pos < 4:
        return None
    magic = int.from_bytes(data[pos : pos + 4], "little")
    if magic & 0xFFFFFFF0 == 0x184D2A50:
        if limit - pos < 8:
            return None
        end = pos + 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
        return end if end <= limit else None
    if magic != 0xFD2FB528:
        raise FrameFormatError(f"no Zstandard frame magic at byte {pos}")
    if limit - pos < 5:
        return None
    descriptor = data[pos + 4]
    if descriptor & 0x08:
        raise FrameFormatError(f"reserved bit set in the frame header at byte {pos}")
    single_segment = bool(descriptor & 0x20)
    content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    dictionary_id_bytes = (0, 1, 2, 4)[descriptor & 0x03]
    window_descriptor_bytes = 0 if single_segment else 1
    cursor = pos + 5 + window_descriptor_bytes + dictionary_id_bytes + content_size_bytes
    while True:
        if limit - cursor < 3:
            return None
        block_header = int.from_bytes(data[cursor : cursor + 3], "little")
        block_type = (block_header >> 1) & 0x03
        block_size = block_header >> 3
        if block_type == 3 or block_size > _MAX_BLOCK_SIZE:
            raise FrameFormatError(f"impossible block header at byte {cursor}")
        # An RLE block stores one byte however many it stands for.
        cursor += 3 + (1 if block_type == 1 else block_size)
        if block_header & 0x01:
            break
    end = cursor + (4 if descriptor & 0x04 else 0)
    return end if end <= limit else None


def _is_skippable_frame(frame: bytes) -> bool:
    return int.from_bytes(frame[:4], "little") & 0xFFFFFFF0 == 0x184D2A50


@dataclass(frozen=True, slots=True)
class _Piece:
    """One complete frame, or a run of bytes that is not a frame (payload None)."""

    start: int
    end: int
    payload: bytes | None


class _ByteWindow:
    """File bytes [base, base + len(buf)) read on demand, never past `end`.

    Reads start at `first_read` bytes and double, so measuring a small frame reads little and
    a large one is still read in few calls.
    """

    def __init__(
        self, file: BinaryIO, start: int, end: int, *, first_read: int = _READ_CHUNK
    ) -> None:
        self.file = file
        self.base = start
        self.end = end
        self.first_read = first_read
        self.buf = bytearray()

    def more(self) -> bool:
        have = self.base + len(self.buf)
        want = min(max(self.first_read, len(self.buf)), self.end - have)
        if want <= 0:
            return False
        self.file.seek(have)
        chunk = self.file.read(want)
        self.buf += chunk
        return bool(chunk)

    def release(self, pos: int) -> int:
        """Forget the bytes before index `pos`; returns where `pos` now is."""
        if pos < _READ_CHUNK:
            return pos
        del self.buf[:pos]
        self.base += pos
        return 0

    def find_magic(self, pos: int) -> int | None:
        searched_from = pos
        while True:
            found = self.buf.find(_ZSTD_MAGIC, searched_from)
            if found != -1:
                return found
            searched_from = max(pos, len(self.buf) - len(_ZSTD_MAGIC) + 1)
            if not self.more():
                return None


def _iter_frames(file: BinaryIO, start: int, end: int) -> Iterator[_Piece]:
    """Every complete frame in [start, end), in order, and every run of non-frame bytes.

    Stops before a frame that `end` cuts short: it is still being written. Non-frame bytes
    end at the next frame magic, or at `end` when there is none (then iteration stops).
    """
    window = _ByteWindow(file, start, end)
    pos = 0
    while True:
        try:
            stop = frame_end(window.buf, pos)
        except FrameFormatError:
            resume = window.find_magic(pos + 1)
            if resume is None:
                yield _Piece(window.base + pos, end, None)
                return
            yield _Piece(window.base + pos, window.base + resume, None)
            pos = resume
            continue
        if stop is None:
            if not window.more():
                return
            continue
        yield _Piece(window.base + pos, window.base + stop, bytes(window.buf[pos:stop]))
        pos = window.release(stop)


class _LineCutter:
    """Cuts a byte stream into lines; a line longer than `limit` bytes is dropped and counted."""

    def __init__(self, limit: int, *, dropping: bool = False) -> None:
        self.limit = limit
        self.partial = bytearray()
        self.dropping = dropping
        self.oversize = 0

    def feed(self, chunk: bytes) -> Iterator[tuple[int, bytes | None]]:
        """Per line the chunk completes: (index just past its newline, line or None if dropped)."""
        start = 0
        while (newline := chunk.find(b"\n", start)) != -1:
            self._take(chunk, start, newline)
            line = None if self.dropping else bytes(self.partial)
            self.partial.clear()
            self.dropping = False
            start = newline + 1
            yield start, line
        self._take(chunk, start, len(chunk))

    def _take(self, chunk: bytes, start: int, stop: int) -> None:
        if self.dropping:
            return
        if len(self.partial) + (stop - start) > self.limit:
            self.partial.clear()
            self.dropping = True
            self.oversize += 1
            return
        self.partial += chunk[start:stop]


def _decode_frame(frame: bytes, max_line_bytes: int) -> tuple[list[bytes], int] | None:
    """The lines of one complete frame and how many were too long; None if it does not decode.

    Output is produced in bounded chunks, so a frame that inflates enormously costs at most
    one line's worth of memory per line kept.
    """
    reader = zstandard.ZstdDecompressor().stream_reader(
        io.BytesIO(frame), read_size=_DECODE_CHUNK, read_across_frames=False
    )
    cutter = _LineCutter(max_line_bytes)
    lines: list[bytes] = []
    try:
        while chunk := reader.read(_DECODE_CHUNK):
            lines.extend(line for _, line in cutter.feed(chunk) if line is not None)
    except zstandard.ZstdError:
        return None
    if cutter.partial and not cutter.dropping:
        lines.append(bytes(cutter.partial))
    return lines, cutter.oversize


def _decompress_bounded(blob: bytes, limit: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=False)
    try:
        out = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        raise ValueError(f"undecodable zstd payload: {exc}") from exc
    if len(out) > limit:
        raise ValueError("payload larger than max_line_bytes")
    return out


# --------------------------------------------------------------------------------------------
# Headers


@dataclass(frozen=True, slots=True)
class SessionHeader:
    id: str
    parent: str | None = None
    subagent: bool = False

    @property
    def key(self) -> str:
        return f"{KIND}:{self.id}"

    @property
    def label(self) -> str | None:
        if not self.subagent:
            return None
        return f"subagent of {self.parent}" if self.parent else "subagent"


class _BadHeader(ValueError):
    pass


def parse_header(line: bytes) -> SessionHeader:
    """The header line of a session file; raises ValueError when it is not one."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise _BadHeader(f"header is not JSON: {exc}") from exc
    if not isinstance(record, dict) or record.get("type") != "session":
        raise _BadHeader('first line is not a {"type":"session"} header')
    session_id = record.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise _BadHeader("header has no session id")
    parent = record.get("parentSession")
    return SessionHeader(
        id=session_id,
        parent=parent if isinstance(parent, str) and parent else None,
        subagent=record.get("origin") == "subagent",
    )


@dataclass(frozen=True, slots=True)
class _Head:
    header: SessionHeader
    end: int  # offset just past the header frame / line
    fingerprint: str


def _fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_FINGERPRINT_HEX_CHARS]


def _read_zstd_head(file: BinaryIO, size: int, max_line_bytes: int) -> _Head | None:
    """The header frame, or None while it is still being written."""
    window = _ByteWindow(file, 0, min(size, _HEADER_FRAME_MAX_BYTES), first_read=_HEADER_FIRST_READ)
    while True:
        try:
            stop = frame_end(window.buf, 0)
        except FrameFormatError as exc:
            raise _BadHeader(f"first frame: {exc}") from exc
        if stop is not None:
            break
        if not window.more():
            if size > _HEADER_FRAME_MAX_BYTES:
                raise _BadHeader("header frame larger than 1 MiB")
            return None
    frame = bytes(window.buf[:stop])
    decoded = _decode_frame(frame, max_line_bytes)
    if decoded is None:
        raise _BadHeader("header frame does not decode (checksum or data corrupt)")
    lines, _ = decoded
    if len(lines) != 1:
        raise _BadHeader("first frame is not exactly one header line")
    return _Head(parse_header(lines[0]), stop, _fingerprint(frame))


def _read_plain_head(file: BinaryIO, size: int, max_line_bytes: int) -> _Head | None:
    """The header line, or None while it is still being written."""
    file.seek(0)
    data = file.read(min(size, max_line_bytes + 1))
    newline = data.find(b"\n")
    if newline == -1:
        if len(data) > max_line_bytes:
            raise _BadHeader("header line longer than max_line_bytes")
        return None
    line = data[: newline + 1]
    return _Head(parse_header(line), newline + 1, _fingerprint(line))


# --------------------------------------------------------------------------------------------
# Normalisation: events -> messages (pure)


@dataclass(frozen=True, slots=True)
class PositionedEvent:
    """One event and where a re-read must start to see it again (frame, line or seq)."""

    record: Mapping[str, Any]
    seq: int
    position: int


def event_from_record(record: Any, position: int) -> PositionedEvent | None:
    """The event a decoded record holds; None for streaming noise. ValueError if malformed."""
    if not isinstance(record, dict):
        raise ValueError("event is not a JSON object")
    event_type = record.get("type")
    if not isinstance(event_type, str):
        raise ValueError("event has no type")
    if event_type in NOISE_EVENT_TYPES:
        return None
    seq = record.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise ValueError("event has no integer seq")
    return PositionedEvent(record, seq, position)


@dataclass(slots=True)
class TurnState:
    """What normalisation must remember between reads of one session."""

    #: callId -> tool name for recent calls (results carry only the callId), oldest first.
    calls: dict[str, str] = field(default_factory=dict)
    #: The last message emitted leaves its turn unfinished (a user line, tool call or result).
    open: bool = False

    def remember(self, call_id: str, name: str) -> None:
        self.calls.pop(call_id, None)
        self.calls[call_id] = name
        while len(self.calls) > REMEMBERED_CALLS:
            del self.calls[next(iter(self.calls))]

    def copy(self) -> TurnState:
        return TurnState(dict(self.calls), self.open)

    @classmethod
    def from_cursor(cls, cursor: Mapping[str, Any]) -> TurnState:
        calls = cursor.get("calls")
        return cls(
            calls={k: v for k, v in calls.items() if isinstance(k, str) and isinstance(v, str)}
            if isinstance(calls, dict)
            else {},
            open=cursor.get("open") is True,
        )

    def to_cursor(self) -> dict[str, Any]:
        return {"calls": dict(self.calls), "open": self.open}


@dataclass(frozen=True, slots=True)
class Hold:
    """Where to resume so a held-back tail is read again: first position and the seq before it."""

    position: int
    seq: int


@dataclass(slots=True)
class Digest:
    messages: list[Message]
    skill_uses: list[str]
    state: TurnState
    last_seq: int
    hold: Hold | None


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A finished-looking assistant message whose turn has not ended yet."""

    message_index: int
    skill_count: int
    hold: Hold
    open_before: bool


def _timestamp(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        moment = datetime.fromtimestamp(value / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    try:
        return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:  # decoded near the recursion limit, too deep to encode again
        return ""


def _skill_name(arguments: Any) -> str | None:
    """The skill a `skill` tool call loads: arguments {"name": ...}, as JSON text or object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    name = arguments.get("name") if isinstance(arguments, dict) else None
    return name.strip() if isinstance(name, str) and name.strip() else None


def _appends_to_surface(record: Mapping[str, Any]) -> bool:
    """False for surface rewrites (compaction summaries, pruned tool results): not new talk."""
    surface_op = record.get("surfaceOp")
    return surface_op is None or surface_op == "append"


class Digester:
    """Turns one session's events, in seq order, into normalised messages.

    Holds the message state between events so readers can feed events as they decode them.
    """

    def __init__(self, *, state: TurnState, after_seq: int, tool_result_max_chars: int) -> None:
        self.state = state.copy()
        self.last_seq = after_seq
        self.tool_result_max_chars = tool_result_max_chars
        self.messages: list[Message] = []
        self.skill_uses: list[str] = []
        # tool/call events no assistant message has announced (yet): DSH writes a step's
        # message before its tool/call rows, so these wait for one event before standing alone.
        self._unannounced: list[ToolCall] = []
        self._unannounced_at: str | None = None
        self._candidate: _Candidate | None = None
        # Index of the last message if it is an assistant message from the model (the only
        # kind a stray tool/call may join), else None.
        self._joinable: int | None = None

    def add(self, event: PositionedEvent) -> None:
        if event.seq <= self.last_seq:
            return
        seq_before, self.last_seq = self.last_seq, event.seq
        record = event.record
        event_type = record.get("type")
        data = record.get("data")
        data = data if isinstance(data, dict) else {}
        timestamp = _timestamp(record.get("time"))
        if event_type == "tool/call":
            self._tool_call(data, timestamp)
            return
        if event_type == "assistant/message":
            if _appends_to_surface(record):
                self._assistant(data, timestamp, Hold(event.position, seq_before))
            return
        self._flush_unannounced()
        if event_type == "user/message" and _appends_to_surface(record):
            self._user(data, timestamp)
        elif event_type == "tool/result" and _appends_to_surface(record):
            self._tool_results(data, timestamp)
        elif event_type == "turn/end":
            self._turn_end(data, timestamp)

    def finish(self, *, hold_open_turn: bool) -> Digest:
        """The messages so far; with `hold_open_turn`, without the unfinished turn's tail."""
        self._flush_unannounced()
        candidate = self._candidate
        if not hold_open_turn or candidate is None:
            return Digest(self.messages, self.skill_uses, self.state, self.last_seq, None)
        self.state.open = candidate.open_before
        return Digest(
            self.messages[: candidate.message_index],
            self.skill_uses[: candidate.skill_count],
            self.state,
            candidate.hold.seq,
            candidate.hold,
        )

    def _emit(self, message: Message) -> None:
        self.messages.append(message)
        self._candidate = None
        self._joinable = None
        self.state.open = True

    def _note(self, message: Message) -> None:
        """Adds a line that neither continues nor finishes the turn (a goal, a turn marker)."""
        self.messages.append(message)
        self._joinable = None

    def _announce(self, call_id: str | None, name: str, arguments: Any) -> ToolCall | None:
        """The call to add to the transcript, or None when it is already there."""
        if call_id is not None and call_id in self.state.calls:
            return None
        if call_id is not None:
            self.state.remember(call_id, name)
        if name == SKILL_TOOL_NAME and (skill := _skill_name(arguments)):
            self.skill_uses.append(skill)
        return ToolCall(
            name, cut_text(_arguments_text(arguments), TOOL_ARGUMENTS_MAX_CHARS), call_id
        )

    def _user(self, data: Mapping[str, Any], timestamp: str | None) -> None:
        source = data.get("source")
        kind = source.get("kind") if isinstance(source, dict) else None
        text = content_text(data.get("content")).strip()
        if not text:
            return
        # Older logs carry no source at all; everything the harness injects names its source.
        if source is None or kind == "user":
            self._emit(Message("user", text, timestamp=timestamp))
        elif kind == "goal":
            self._note(
                Message("system", cut_text(f"[goal] {text}", GOAL_MAX_CHARS), timestamp=timestamp)
            )

    def _assistant(self, data: Mapping[str, Any], timestamp: str | None, hold: Hold) -> None:
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        blocks = content if isinstance(content, list) else []
        call_blocks = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool-call"]
        # A tool/call row that came first belongs to this message when the ids match.
        block_ids = {block["id"] for block in call_blocks if isinstance(block.get("id"), str)}
        early = {c.call_id: c for c in self._unannounced if c.call_id in block_ids}
        self._unannounced = [c for c in self._unannounced if c.call_id not in block_ids]
        self._flush_unannounced()
        calls: list[ToolCall] = []
        for block in call_blocks:
            name, call_id = block.get("name"), block.get("id")
            call_id = call_id if isinstance(call_id, str) else None
            if call_id in early:
                calls.append(early.pop(call_id))
            elif isinstance(name, str) and name:
                call = self._announce(call_id, name, block.get("arguments"))
                if call is not None:
                    calls.append(call)
        text = content_text(blocks).strip()
        if not text and not calls:
            return
        open_before = self.state.open
        skill_count = len(self.skill_uses)
        self._emit(Message("assistant", text, tuple(calls), timestamp=timestamp))
        self._joinable = len(self.messages) - 1
        if not calls:
            self.state.open = False
            self._candidate = _Candidate(len(self.messages) - 1, skill_count, hold, open_before)

    def _tool_call(self, data: Mapping[str, Any], timestamp: str | None) -> None:
        name = data.get("name")
        call_id = data.get("callId")
        if not isinstance(name, str) or not name:
            return
        call = self._announce(
            call_id if isinstance(call_id, str) else None, name, data.get("arguments")
        )
        if call is not None:
            if not self._unannounced:
                self._unannounced_at = timestamp
            self._unannounced.append(call)

    def _flush_unannounced(self) -> None:
        """Calls no message announced join the assistant message they follow, or stand alone."""
        if not self._unannounced:
            return
        calls, self._unannounced = tuple(self._unannounced), []
        if self._joinable is None:
            self._emit(Message("assistant", "", calls, timestamp=self._unannounced_at))
            return
        last = self.messages[self._joinable]
        self.messages[self._joinable] = Message(
            "assistant", last.text, last.tool_calls + calls, timestamp=last.timestamp
        )
        self._candidate = None
        self.state.open = True

    def _tool_results(self, data: Mapping[str, Any], timestamp: str | None) -> None:
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool-result":
                continue
            call_id = block.get("toolCallId")
            call_id = call_id if isinstance(call_id, str) else None
            result = block.get("content")
            text = (
                content_text(result) if isinstance(result, str | list) else _arguments_text(result)
            )
            if block.get("isError") is True:
                text = f"[error] {text}"
            known_name = self.state.calls.get(call_id) if call_id else None
            fallback_name = data.get("name")
            self._emit(
                Message(
                    "tool",
                    cut_text(text, self.tool_result_max_chars),
                    tool_call_id=call_id,
                    tool_name=known_name
                    or (fallback_name if isinstance(fallback_name, str) else None),
                    timestamp=timestamp,
                )
            )

    def _turn_end(self, data: Mapping[str, Any], timestamp: str | None) -> None:
        self._candidate = None
        if not self.state.open:
            return
        reason = data.get("reason")
        kind = reason.get("kind") if isinstance(reason, dict) else None
        reason_text = kind if isinstance(kind, str) else "unknown"
        self._note(Message("assistant", f"[turn ended: {reason_text}]", timestamp=timestamp))
        self.state.open = False


# --------------------------------------------------------------------------------------------
# Cursors


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class _FileCursor:
    path: str
    dev: int
    ino: int
    size: int
    mtime_ns: int
    offset: int
    seq: int
    head: str
    tail: str
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
        dev, ino, size = _int(raw.get("dev")), _int(raw.get("ino")), _int(raw.get("size"))
        mtime_ns, offset, seq = (
            _int(raw.get("mtime_ns")),
            _int(raw.get("offset")),
            _int(raw.get("seq")),
        )
        path, head, tail = raw.get("path"), raw.get("head"), raw.get("tail")
        if dev is None or ino is None or size is None or mtime_ns is None or offset is None:
            return None
        if seq is None or not isinstance(path, str) or not isinstance(head, str):
            return None
        if not isinstance(tail, str):
            return None
        return cls(
            path=path,
            dev=dev,
            ino=ino,
            size=size,
            mtime_ns=mtime_ns,
            offset=offset,
            seq=seq,
            head=head,
            tail=tail,
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


@dataclass(frozen=True, slots=True)
class _DbCursor:
    seq: int  # last event consumed
    last: int  # highest seq the session had when read (nothing new while it stays so)
    incarnation: str | None
    held: bool
    state: TurnState

    @classmethod
    def parse(cls, raw: Cursor | None) -> _DbCursor | None:
        """The cursor, or None when it is missing or not one this source wrote."""
        if raw is None:
            return None
        seq, last, incarnation = _int(raw.get("seq")), _int(raw.get("last")), raw.get("incarnation")
        if seq is None or last is None or not (incarnation is None or isinstance(incarnation, str)):
            return None
        return cls(seq, last, incarnation, raw.get("held") is True, TurnState.from_cursor(raw))


def _tail_bytes(file: BinaryIO, offset: int) -> str:
    start = max(0, offset - _TAIL_CHECK_BYTES)
    file.seek(start)
    return file.read(offset - start).hex()


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
        pieces, resume = _iter_frames(file, resume, end), None
        for piece in pieces:
            if piece.payload is None:
                tail.skipped += 1
                tail.retry = True
                continue
            if _is_skippable_frame(piece.payload):
                tail.committed, tail.retry = piece.end, False
                continue
            decoded = _decode_frame(piece.payload, max_line_bytes)
            if decoded is None:
                tail.skipped += 1
                tail.retry = True
                # A frame cut short by a crash is "completed" by the bytes of the frames written
                # after it: resume at a frame that starts inside it rather than lose that one.
                inner = piece.payload.find(_ZSTD_MAGIC, 1)
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
    cutter = _LineCutter(max_line_bytes, dropping=discard)
    position = start
    file.seek(start)
    while position < end:
        chunk = file.read(min(_READ_CHUNK, end - position))
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
    for piece in _iter_frames(file, start, end):
        if piece.payload is None:
            continue
        offset = piece.end
        if not _is_skippable_frame(piece.payload):
            recent.append(piece.payload)
    for frame in reversed(recent):
        decoded = _decode_frame(frame, max_line_bytes)
        if decoded is not None:
            return offset, _last_seq(decoded[0])
    return offset, -1


def _rfind_newline(file: BinaryIO, start: int, end: int) -> int | None:
    """Offset of the last newline in [start, end) of the file, read backwards in chunks."""
    position = end
    while position > start:
        read_from = max(start, position - _READ_CHUNK)
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
        seq = _int(record.get("seq")) if isinstance(record, dict) else None
        if seq is not None:
            return seq
    return -1


# --------------------------------------------------------------------------------------------
# SQLite persistence


@dataclass(frozen=True, slots=True)
class _DbSession:
    row_id: Any  # events.session_id as stored (text id, or integer row id in newer schemas)
    header: SessionHeader
    incarnation: str | None


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _database_sessions(connection: sqlite3.Connection) -> list[_DbSession]:
    tables = {
        row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if "events" not in tables:
        raise sqlite3.DatabaseError("no events table: not a DSH session database")
    if "sessions" not in tables:
        rows = connection.execute("SELECT DISTINCT session_id FROM events")
        return [_DbSession(row[0], SessionHeader(str(row[0])), None) for row in rows]
    columns = {row[1] for row in connection.execute("PRAGMA table_info(sessions)")}
    # Column names come from this fixed list, never from the database.
    optional = ("session_key", "parent_session", "origin", "incarnation")
    selected = ["id", *(name for name in optional if name in columns)]
    sessions = []
    for row in connection.execute(f"SELECT {', '.join(selected)} FROM sessions"):
        values = dict(zip(selected, row, strict=True))
        session_key = values.get("session_key")
        parent = values.get("parent_session")
        incarnation = values.get("incarnation")
        sessions.append(
            _DbSession(
                values["id"],
                SessionHeader(
                    id=str(session_key if session_key is not None else values["id"]),
                    parent=str(parent) if parent is not None else None,
                    subagent=values.get("origin") == "subagent",
                ),
                str(incarnation) if incarnation is not None else None,
            )
        )
    return sessions


def _surface_op(value: Any) -> Any:
    """The stored surface_op column as the event field: "append", a replace object, or None."""
    if isinstance(value, str) and value[:1] in ('"', "{"):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _row_data(value: Any, max_line_bytes: int) -> Any:
    """events.data: JSON text, or a BLOB holding JSON (zstd-compressed when large)."""
    if isinstance(value, str):
        if len(value) > max_line_bytes:
            raise ValueError("payload larger than max_line_bytes")
        return json.loads(value)
    if isinstance(value, bytes | memoryview):
        blob = bytes(value)
        if blob.startswith(_ZSTD_MAGIC):
            blob = _decompress_bounded(blob, max_line_bytes)
        elif len(blob) > max_line_bytes:
            raise ValueError("payload larger than max_line_bytes")
        return json.loads(blob)
    raise ValueError("events.data is neither text nor a blob")


# --------------------------------------------------------------------------------------------
# The source


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
    claimed: dict[str, str] = field(default_factory=dict)  # session key -> path that holds it


class DshSource:
    """Sessions of DeepSeek Harness: a sessions directory (zstd or plain), or its SQLite store."""

    kind = KIND

    def __init__(
        self,
        path: Path,
        *,
        glob: str | None = None,
        include_subagents: bool = False,
        tool_result_max_chars: int = 2000,
        max_line_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.path = Path(path).expanduser()
        self.globs: tuple[str, ...] = (glob,) if glob else DEFAULT_GLOBS
        self.include_subagents = include_subagents
        self.tool_result_max_chars = tool_result_max_chars
        self.max_line_bytes = max_line_bytes
        # Headers read by this process, so files without a cursor (excluded subagents, or
        # sessions found mid-write) are not re-opened every tick just to learn their key.
        self._known: dict[str, _KnownFile] = {}

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        scan = _Pass(cursors, start_new_at_end_before, time.time())
        try:
            root = os.stat(self.path)
        except FileNotFoundError:
            scan.result.errors.append(f"{self.path}: no DSH sessions directory or database here")
            return scan.result
        except OSError as exc:
            # Unreadable for now (permissions, I/O): keep every cursor rather than forget them.
            scan.result.errors.append(f"{self.path}: {exc.strerror or exc}")
            scan.result.seen.update(cursors)
            return scan.result
        if stat.S_ISDIR(root.st_mode):
            self._scan_directory(scan)
        elif _is_sqlite(self.path):
            self._scan_database(scan)
        else:
            scan.result.errors.append(
                f"{self.path}: neither a sessions directory nor a SQLite database"
            )
        return scan.result

    # -- directory of session files ---------------------------------------------------------

    def _scan_directory(self, scan: _Pass) -> None:
        path_keys: dict[str, str] = {}
        for key, raw in scan.cursors.items():
            if isinstance(raw.get("path"), str):
                path_keys[raw["path"]] = key
        found: set[str] = set()
        for pattern in self.globs:
            # Unlike Path.glob, this lists symlink loops and dangling links (reported as bad
            # sessions, never silently missing) and never descends into a symlinked directory.
            found.update(str(path) for path in find_files(self.path, pattern, scan.result.errors))
        # Files a cursor already points at claim their session key first.
        for path in sorted(found, key=lambda p: (p not in path_keys, p)):
            self._scan_file(path, path_keys.get(path), scan)
        self._known = {path: known for path, known in self._known.items() if path in found}

    def _scan_file(self, path: str, cursor_key: str | None, scan: _Pass) -> None:
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
            if cursor is not None and cursor.same_file(st):
                if cursor.subagent and not self.include_subagents:
                    return
                if cursor.unchanged(st, scan.now):
                    if self._claim(cursor_key, path, scan):
                        result.seen.add(cursor_key)
                    return
        known = self._known.get(path)
        if known is not None and (known.dev, known.ino) == (st.st_dev, st.st_ino):
            if known.header.subagent and not self.include_subagents:
                return
            if not self._claim(known.header.key, path, scan):
                return
        try:
            with open(path, "rb") as file:
                self._read_file(file, path, st, scan)
        except OSError as exc:
            result.errors.append(f"{path}: {exc.strerror or exc}")
            if cursor_key is not None:
                result.seen.add(cursor_key)

    def _claim(self, key: str, path: str, scan: _Pass) -> bool:
        holder = scan.claimed.setdefault(key, path)
        if holder != path:
            scan.result.errors.append(
                f"{path}: session {key} is already read from {holder}; skipped"
            )
            return False
        return True

    def _read_file(self, file: BinaryIO, path: str, st: os.stat_result, scan: _Pass) -> None:
        result = scan.result
        compressed = path.endswith(".zstd")
        read_head = _read_zstd_head if compressed else _read_plain_head
        try:
            head = read_head(file, st.st_size, self.max_line_bytes)
        except _BadHeader as exc:
            result.errors.append(f"{path}: {exc}")
            result.skipped_lines += 1
            return
        if head is None:
            return  # the header itself is still being written
        header = head.header
        self._known[path] = _KnownFile(st.st_dev, st.st_ino, header)
        if header.subagent and not self.include_subagents:
            return
        if not self._claim(header.key, path, scan):
            return
        result.seen.add(header.key)
        raw_cursor = scan.cursors.get(header.key)
        cursor = _FileCursor.parse(raw_cursor)
        continues = (
            cursor is not None
            and cursor.path == path
            and cursor.same_file(st)
            and head.end <= cursor.offset <= st.st_size
            and cursor.head == head.fingerprint
            and cursor.tail == _tail_bytes(file, cursor.offset)
        )
        if cursor is not None and continues:
            start, after_seq, state, discard = (
                cursor.offset,
                cursor.seq,
                cursor.state,
                cursor.discard,
            )
        else:
            start, after_seq, state, discard = head.end, -1, TurnState(), False
            cutoff = scan.start_new_at_end_before
            if raw_cursor is None and cutoff is not None and st.st_mtime < cutoff:
                self._start_at_end(file, path, st, head, compressed, scan)
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
        new_cursor = self._file_cursor(file, path, st, head, offset, digest.last_seq, digest.state)
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
                    skill_uses=digest.skill_uses,
                    skipped_lines=tail.skipped,
                    reset=reset,
                    mtime=st.st_mtime,
                    label=header.label,
                )
            )

    def _start_at_end(
        self,
        file: BinaryIO,
        path: str,
        st: os.stat_result,
        head: _Head,
        compressed: bool,
        scan: _Pass,
    ) -> None:
        if compressed:
            offset, seq = _zstd_end_state(file, head.end, st.st_size, self.max_line_bytes)
        else:
            offset, seq = _plain_end_state(file, head.end, st.st_size, self.max_line_bytes)
        cursor = self._file_cursor(file, path, st, head, offset, seq, TurnState())
        scan.result.reads.append(
            SessionRead(
                source=KIND,
                session=head.header.key,
                messages=[],
                cursor=cursor,
                mtime=st.st_mtime,
                label=head.header.label,
            )
        )

    def _file_cursor(
        self,
        file: BinaryIO,
        path: str,
        st: os.stat_result,
        head: _Head,
        offset: int,
        seq: int,
        state: TurnState,
    ) -> dict[str, Any]:
        return {
            "path": path,
            "dev": st.st_dev,
            "ino": st.st_ino,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "offset": offset,
            "seq": seq,
            "head": head.fingerprint,
            "tail": _tail_bytes(file, offset),
            "held": False,
            "retry": False,
            "discard": False,
            "subagent": head.header.subagent,
            **state.to_cursor(),
        }

    # -- SQLite store -----------------------------------------------------------------------

    def _scan_database(self, scan: _Pass) -> None:
        result = scan.result
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        try:
            with closing(sqlite3.connect(uri, uri=True, timeout=2.0)) as connection:
                sessions = _database_sessions(connection)
                for session in sessions:
                    if session.header.subagent and not self.include_subagents:
                        continue
                    if not self._claim(session.header.key, str(self.path), scan):
                        continue
                    result.seen.add(session.header.key)
                    try:
                        self._read_database_session(connection, session, scan)
                    except sqlite3.Error as exc:
                        result.errors.append(f"{self.path}: session {session.header.id}: {exc}")
        except sqlite3.Error as exc:
            result.errors.append(f"{self.path}: {exc}")
            # A locked or briefly unreadable store must not make every session look gone.
            result.seen.update(scan.cursors)

    def _read_database_session(
        self, connection: sqlite3.Connection, session: _DbSession, scan: _Pass
    ) -> None:
        key = session.header.key
        raw_cursor = scan.cursors.get(key)
        last = connection.execute(
            "SELECT seq, time FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
            (session.row_id,),
        ).fetchone()
        last_seq, last_time = (last[0], last[1]) if last else (-1, None)
        mtime = last_time / 1000 if isinstance(last_time, int | float) else None
        idle = mtime is None or scan.now - mtime >= OPEN_TURN_RELEASE_SECONDS
        cursor = _DbCursor.parse(raw_cursor)
        continues = (
            cursor is not None
            and cursor.last <= last_seq
            and cursor.incarnation == session.incarnation
        )
        if cursor is not None and continues:
            if cursor.last == last_seq and not (cursor.held and idle):
                return
            after_seq, state = cursor.seq, cursor.state
        else:
            cutoff = scan.start_new_at_end_before
            if raw_cursor is None and cutoff is not None and mtime is not None and mtime < cutoff:
                new_cursor = self._database_cursor(
                    last_seq, last_seq, session, TurnState(), held=False
                )
                scan.result.reads.append(
                    SessionRead(
                        source=KIND,
                        session=key,
                        messages=[],
                        cursor=new_cursor,
                        mtime=mtime,
                        label=session.header.label,
                    )
                )
                return
            after_seq, state = -1, TurnState()
        digester = Digester(
            state=state, after_seq=after_seq, tool_result_max_chars=self.tool_result_max_chars
        )
        skipped = 0
        rows = connection.execute(
            "SELECT seq, type, time, data, surface_op FROM events"
            " WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session.row_id, after_seq),
        )
        for seq, event_type, event_time, data, surface_op in rows:
            if event_type in NOISE_EVENT_TYPES:
                continue
            try:
                record = {
                    "type": event_type,
                    "seq": seq,
                    "time": event_time,
                    "data": _row_data(data, self.max_line_bytes),
                }
            except (ValueError, RecursionError):
                skipped += 1
                continue
            if surface_op is not None:
                record["surfaceOp"] = _surface_op(surface_op)
            digester.add(PositionedEvent(record, seq, seq))
        digest = digester.finish(hold_open_turn=not idle)
        new_cursor = self._database_cursor(
            digest.last_seq, last_seq, session, digest.state, held=digest.hold is not None
        )
        reset = raw_cursor is not None and not continues
        if digest.messages or reset or skipped or new_cursor != raw_cursor:
            scan.result.reads.append(
                SessionRead(
                    source=KIND,
                    session=key,
                    messages=digest.messages,
                    cursor=new_cursor,
                    skill_uses=digest.skill_uses,
                    skipped_lines=skipped,
                    reset=reset,
                    mtime=mtime,
                    label=session.header.label,
                )
            )

    @staticmethod
    def _database_cursor(
        seq: int, last: int, session: _DbSession, state: TurnState, *, held: bool
    ) -> dict[str, Any]:
        return {
            "seq": seq,
            "last": last,
            "incarnation": session.incarnation,
            "held": held,
            "subagent": session.header.subagent,
            **state.to_cursor(),
        }
