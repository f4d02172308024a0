"""Zstandard framing of DSH session files (RFC 8878 §3.1), and cutting bytes into lines.

Frames are found by their structure (frame header, every block header, the checksum), never by
searching for the magic number, so a frame's extent is known before decompressing it, with or
without a content size in its header. Decoding is bounded: a frame that inflates enormously
costs at most one line's worth of memory per line kept.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
READ_CHUNK = 1 << 20
_MAX_BLOCK_SIZE = 128 * 1024
_DECODE_CHUNK = 1 << 18


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


def is_skippable_frame(frame: bytes) -> bool:
    return int.from_bytes(frame[:4], "little") & 0xFFFFFFF0 == 0x184D2A50


@dataclass(frozen=True, slots=True)
class Piece:
    """One complete frame, or a run of bytes that is not a frame (payload None)."""

    start: int
    end: int
    payload: bytes | None


class ByteWindow:
    """File bytes [base, base + len(buf)) read on demand, never past `end`.

    Reads start at `first_read` bytes and double, so measuring a small frame reads little and
    a large one is still read in few calls.
    """

    def __init__(
        self, file: BinaryIO, start: int, end: int, *, first_read: int = READ_CHUNK
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
        if pos < READ_CHUNK:
            return pos
        del self.buf[:pos]
        self.base += pos
        return 0

    def find_magic(self, pos: int) -> int | None:
        searched_from = pos
        while True:
            found = self.buf.find(ZSTD_MAGIC, searched_from)
            if found != -1:
                return found
            searched_from = max(pos, len(self.buf) - len(ZSTD_MAGIC) + 1)
            if not self.more():
                return None


def iter_frames(file: BinaryIO, start: int, end: int) -> Iterator[Piece]:
    """Every complete frame in [start, end), in order, and every run of non-frame bytes.

    Stops before a frame that `end` cuts short: it is still being written. Non-frame bytes
    end at the next frame magic, or at `end` when there is none (then iteration stops).
    """
    window = ByteWindow(file, start, end)
    pos = 0
    while True:
        try:
            stop = frame_end(window.buf, pos)
        except FrameFormatError:
            resume = window.find_magic(pos + 1)
            if resume is None:
                yield Piece(window.base + pos, end, None)
                return
            yield Piece(window.base + pos, window.base + resume, None)
            pos = resume
            continue
        if stop is None:
            if not window.more():
                return
            continue
        yield Piece(window.base + pos, window.base + stop, bytes(window.buf[pos:stop]))
        pos = window.release(stop)


class LineCutter:
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


def decode_frame(frame: bytes, max_line_bytes: int) -> tuple[list[bytes], int] | None:
    """The lines of one complete frame and how many were too long; None if it does not decode.

    Output is produced in bounded chunks, so a frame that inflates enormously costs at most
    one line's worth of memory per line kept.
    """
    reader = zstandard.ZstdDecompressor().stream_reader(
        io.BytesIO(frame), read_size=_DECODE_CHUNK, read_across_frames=False
    )
    cutter = LineCutter(max_line_bytes)
    lines: list[bytes] = []
    try:
        while chunk := reader.read(_DECODE_CHUNK):
            lines.extend(line for _, line in cutter.feed(chunk) if line is not None)
    except zstandard.ZstdError:
        return None
    if cutter.partial and not cutter.dropping:
        lines.append(bytes(cutter.partial))
    return lines, cutter.oversize


def decompress_bounded(blob: bytes, limit: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=False)
    try:
        out = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        raise ValueError(f"undecodable zstd payload: {exc}") from exc
    if len(out) > limit:
        raise ValueError("payload larger than max_line_bytes")
    return out
