"""DSH events -> normalised messages (pure), and the session header.

* Events whose `seq` is not above the cursor's are ignored: nothing is sent twice.
* Only user messages typed by a person (`source.kind` "user", or no source at all in older
  logs) become role "user"; harness-injected text (plugins, coordinator, settled subagents,
  ...) is dropped, a goal becomes a short "[goal] ..." system line. Reasoning and streaming
  rows never reach a window. Surface rewrites (`surfaceOp` replace: compaction summaries,
  pruned tool results) restate old history and are skipped.
* `turn/end` closes a turn. A turn that ends on a tool result or an error gets an assistant line
  "[turn ended: <reason>]" so the finished turn is visible as one. A finished-looking assistant
  message with no `turn/end` after it yet is held back (the reader's cursor stays before it)
  until its turn ends, so a window never closes on a turn the agent is still continuing; a
  session idle for OPEN_TURN_RELEASE_SECONDS releases it (an agent that died mid-turn writes no
  `turn/end`).
* A `skill` tool call stays a tool call: `signals.skill_signals` counts it from the messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from skilld.transcripts.model import Message, ToolCall
from skilld.transcripts.normalise import content_text, cut_result, cut_text

KIND = "dsh"
#: Streaming rows: they repeat, token by token, what the settled messages already hold.
NOISE_EVENT_TYPES = frozenset(
    {"assistant/chunk", "assistant/attempt", "text-chunks", "reasoning-chunks", "tool-call-chunks"}
)
GOAL_MAX_CHARS = 300
TOOL_ARGUMENTS_MAX_CHARS = 1000
#: callId -> tool name pairs kept in a cursor; a result follows its call within a few events.
REMEMBERED_CALLS = 64
OPEN_TURN_RELEASE_SECONDS = 600.0


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class SessionHeader:
    id: str
    parent: str | None = None
    subagent: bool = False
    cwd: str | None = None  # the directory the session ran in, as DSH wrote it

    @property
    def key(self) -> str:
        return f"{KIND}:{self.id}"

    @property
    def label(self) -> str | None:
        if not self.subagent:
            return None
        return f"subagent of {self.parent}" if self.parent else "subagent"


class BadHeader(ValueError):
    """The first line of a session file is not a session header."""


def parse_header(line: bytes) -> SessionHeader:
    """The header line of a session file; raises ValueError when it is not one."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise BadHeader(f"header is not JSON: {exc}") from exc
    if not isinstance(record, dict) or record.get("type") != "session":
        raise BadHeader('first line is not a {"type":"session"} header')
    session_id = record.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise BadHeader("header has no session id")
    parent, cwd = record.get("parentSession"), record.get("cwd")
    return SessionHeader(
        id=session_id,
        parent=parent if isinstance(parent, str) and parent else None,
        subagent=record.get("origin") == "subagent",
        cwd=cwd if isinstance(cwd, str) and cwd else None,
    )


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
    state: TurnState
    last_seq: int
    hold: Hold | None


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A finished-looking assistant message whose turn has not ended yet."""

    message_index: int
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
            return Digest(self.messages, self.state, self.last_seq, None)
        self.state.open = candidate.open_before
        return Digest(
            self.messages[: candidate.message_index],
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
        self._emit(Message("assistant", text, tuple(calls), timestamp=timestamp))
        self._joinable = len(self.messages) - 1
        if not calls:
            self.state.open = False
            self._candidate = _Candidate(len(self.messages) - 1, hold, open_before)

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
            failed = block.get("isError") is True
            if failed:
                text = f"[error] {text}"
            known_name = self.state.calls.get(call_id) if call_id else None
            fallback_name = data.get("name")
            cut, tail = cut_result(text, self.tool_result_max_chars, failed)
            self._emit(
                Message(
                    "tool",
                    cut,
                    tool_call_id=call_id,
                    tool_name=known_name
                    or (fallback_name if isinstance(fallback_name, str) else None),
                    timestamp=timestamp,
                    failed=failed,
                    tail=tail,
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
