"""The normalised shape every transcript format is read into.

Sources own their file formats; everything downstream (gates, windows, prompts, usage
inference) sees only these plain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["user", "assistant", "tool", "system"]

#: A cursor is a small JSON-serialisable mapping owned by the source that made it
#: (a file tail keeps device/inode/offset, a database keeps the last row id).
Cursor = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    #: Arguments as compact text (JSON for most agents), already cut to a sane length.
    arguments: str = ""
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    #: For role "tool": the call this result answers, and its tool name when known.
    tool_call_id: str | None = None
    tool_name: str | None = None
    timestamp: str | None = None

    @property
    def finishes_turn(self) -> bool:
        """An assistant message with no pending tool call ends a turn."""
        return self.role == "assistant" and not self.tool_calls


@dataclass(slots=True)
class SessionRead:
    """What one source read from one session since its cursor."""

    source: str  # the source kind, e.g. "claude-code"
    session: str  # stable session key, unique across sources ("<kind>:<id>")
    messages: list[Message]
    cursor: dict[str, Any]  # the cursor to store once these messages are safely recorded
    skill_uses: list[str] = field(default_factory=list)  # names inferred as "used"
    skipped_lines: int = 0  # malformed or oversize records skipped (counted, never fatal)
    reset: bool = False  # the file was truncated or replaced and re-read from its start
    mtime: float | None = None  # last modification time of the session, when known
    label: str | None = None  # e.g. "subagent of <parent>"


@dataclass(slots=True)
class ScanResult:
    """One pass of a source over everything it can see."""

    reads: list[SessionRead]
    #: Every session key the source still sees (changed or not); cursors of keys that are
    #: no longer seen are forgotten.
    seen: set[str]
    #: Skips that belong to no session (e.g. a file whose header is unreadable); skips inside
    #: a session are counted on its SessionRead only, so the total is this plus the reads'.
    skipped_lines: int = 0
    errors: list[str] = field(default_factory=list)


class Source(Protocol):
    """A place transcripts come from. Each kind owns its format and its cursor shape."""

    kind: str

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        """Read what was appended to every session since its cursor.

        `cursors` maps session key -> the cursor stored after the previous read (absent for a
        session never seen). A session without a cursor is read from its start, unless its
        modification time is older than `start_new_at_end_before` (epoch seconds): then it
        starts at its end (the backfill policy) and yields no messages, only a cursor.
        Sessions whose cursor shows nothing new are not in `reads` but are in `seen`.
        Never raises for bad content: malformed records are counted in `skipped_lines`.
        """
        ...
