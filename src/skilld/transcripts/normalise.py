"""Small pure helpers every transcript format uses to turn records into `Message`s.

Transcripts are untrusted input: every helper accepts any JSON value and degrades to an
empty or placeholder result instead of raising.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any

#: Tool-call arguments are kept short but long enough to keep file paths (usage inference
#: reads skill paths out of them).
ARGUMENTS_MAX_CHARS = 500

#: How many tool calls awaiting their result a cursor remembers (call id -> tool name).
MAX_PENDING_CALLS = 64

TEXT_BLOCK_TYPES = frozenset({"text", "input_text", "output_text"})
IMAGE_BLOCK_TYPES = frozenset({"image", "image_url", "input_image"})
IMAGE_PLACEHOLDER = "[image]"

# Epoch values above this are milliseconds, not seconds (year 2286 in seconds).
_EPOCH_MILLIS_THRESHOLD = 10_000_000_000


def cut_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with a marker saying how much was dropped."""
    if len(text) <= limit:
        return text
    return f"{text[: max(limit, 0)]}…[cut {len(text) - max(limit, 0)} chars]"


#: How much of a cut tool result's end is kept beside it (`Message.tail`).
RESULT_TAIL_CHARS = 1500


def cut_result(text: str, limit: int) -> tuple[str, str]:
    """A tool result cut as `cut_text` cuts it, and the end the cut dropped (at most
    `RESULT_TAIL_CHARS`; empty when nothing was cut)."""
    if len(text) <= limit:
        return text, ""
    return cut_text(text, limit), text[max(limit, len(text) - RESULT_TAIL_CHARS) :]


def compact_arguments(value: Any) -> str:
    """Tool-call arguments as compact JSON text, cut to `ARGUMENTS_MAX_CHARS`.

    A string holding JSON (OpenAI-style `arguments`) is re-dumped compactly; any other string
    (a free-form tool input) is kept as it is.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return cut_text(value, ARGUMENTS_MAX_CHARS)
        if isinstance(value, str):
            return cut_text(value, ARGUMENTS_MAX_CHARS)
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (ValueError, TypeError, RecursionError):
        text = str(value)
    return cut_text(text, ARGUMENTS_MAX_CHARS)


def content_text(content: Any) -> str:
    """The text of a message `content`: a string, or a list of typed blocks.

    Text blocks are joined with newlines, images become a placeholder, anything else
    (thinking, tool blocks, unknown types) is left out.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            block_type = string_or_none(block.get("type"))  # hashable for `in`
            text = block.get("text")
            if block_type in TEXT_BLOCK_TYPES and isinstance(text, str):
                parts.append(text)
            elif block_type in IMAGE_BLOCK_TYPES:
                parts.append(IMAGE_PLACEHOLDER)
    return "\n".join(part for part in parts if part)


def iso_timestamp(value: Any) -> str | None:
    """An ISO-8601 timestamp from a string (kept as written) or epoch seconds/millis."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = value / 1000 if value > _EPOCH_MILLIS_THRESHOLD else value
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def decode_record(line: bytes) -> dict[str, Any] | None:
    """The JSON object on one transcript line; None for a blank line.

    Invalid UTF-8 is replaced, never fatal. Raises ValueError for anything that is not a
    JSON object (the caller counts it as a skipped line).
    """
    text = line.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        record = json.loads(text)
    except RecursionError as error:
        raise ValueError("JSON nested too deeply") from error
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


def string_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def remember_call(calls: MutableMapping[str, str], call_id: str | None, name: str) -> None:
    """Record a call awaiting its result, forgetting the oldest beyond `MAX_PENDING_CALLS`."""
    if not call_id:
        return
    calls.pop(call_id, None)
    calls[call_id] = name
    while len(calls) > MAX_PENDING_CALLS:
        del calls[next(iter(calls))]


def pending_calls(state: dict[str, Any]) -> dict[str, str]:
    """The call id -> tool name map kept in a cursor's parser state (validated)."""
    stored = state.get("calls")
    if not isinstance(stored, dict):
        return {}
    return {str(key): value for key, value in stored.items() if isinstance(value, str)}
