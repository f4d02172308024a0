"""Whether a file still holds what a cursor read from it: one definition for every reader.

Beside its offset, a cursor keeps a digest of the file's first bytes (its head: the reader says
how many) and the bytes just before the offset (its tail). The file continues what was read when
it is at least as long as the offset and both still match. Device and inode are not asked: a
remount, a restored copy or a file copied and renamed over itself hold the same bytes under a new
identity and are not read again, while a rewrite in place (same inode, a changed head or changed
bytes before the offset, or fewer bytes than the offset) is read again from its start.

A cursor stores its mark under the keys `offset`, `head` and `tail`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from skilld.digest import sha256_hex

#: The head of a file without a header of its own: its first bytes, up to this many.
HEAD_BYTES = 64
#: How many bytes before the offset are kept verbatim (hex) in a cursor.
TAIL_BYTES = 16
#: Head digests are SHA-256 cut to this many hex characters (128 bits).
DIGEST_HEX_CHARS = 32


@dataclass(frozen=True, slots=True)
class ContentMark:
    """What a cursor remembers of the bytes it read."""

    offset: int
    head: str  # digest of the file's first bytes
    #: The bytes just before `offset`, hex; None in a cursor written before tails were kept.
    tail: str | None

    @classmethod
    def from_cursor(cls, cursor: Mapping[str, Any]) -> ContentMark | None:
        """The mark a cursor holds; None when it holds none (or a malformed one)."""
        offset, head, tail = cursor.get("offset"), cursor.get("head"), cursor.get("tail")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            return None
        if not isinstance(head, str) or len(head) < DIGEST_HEX_CHARS:
            return None
        if tail is not None and not isinstance(tail, str):
            return None
        # Older cursors kept the whole SHA-256; its prefix is the digest this module makes.
        return cls(offset, head[:DIGEST_HEX_CHARS], tail)

    def to_cursor(self) -> dict[str, Any]:
        return {"offset": self.offset, "head": self.head, "tail": self.tail}


def continues(mark: ContentMark, *, size: int, head: str, tail: str, same_inode: bool) -> bool:
    """Whether a file of `size` bytes, whose head digest and tail at `mark.offset` are `head` and
    `tail`, still holds what `mark` was taken from (False: read it again from its start)."""
    if size < mark.offset or head != mark.head:
        return False
    if mark.tail is None:
        # A cursor from before tails were kept: the inode vouches for the bytes, as it used to.
        return same_inode
    return tail == mark.tail


def read_mark(handle: BinaryIO, offset: int, head_length: int) -> ContentMark:
    """The mark of the open file at `offset`, its head being its first `head_length` bytes."""
    head, tail = _look(handle, offset, head_length)
    return ContentMark(offset, head, tail)


def still_holds(
    handle: BinaryIO, mark: ContentMark, *, size: int, head_length: int, same_inode: bool
) -> bool:
    """`continues` for an open file of `size` bytes (reads nothing when it is too short)."""
    if size < mark.offset:
        return False
    head, tail = _look(handle, mark.offset, head_length)
    return continues(mark, size=size, head=head, tail=tail, same_inode=same_inode)


def _look(handle: BinaryIO, offset: int, head_length: int) -> tuple[str, str]:
    handle.seek(0)
    head = handle.read(head_length) if head_length > 0 else b""
    start = max(0, offset - TAIL_BYTES)
    handle.seek(start)
    tail = handle.read(offset - start) if offset > start else b""
    return sha256_hex(head)[:DIGEST_HEX_CHARS], tail.hex()
