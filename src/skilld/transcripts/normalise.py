"""Small pure helpers every transcript format uses to turn records into `Message`s.

Transcripts are untrusted input: every helper accepts any JSON value and degrades to an
empty or placeholder result instead of raising.
"""

from __future__ import annotations

import itertools
import json
import re
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


#: How many of the error lines a failed result's cut dropped are kept in its tail.
MIDDLE_ERROR_LINES = 8
#: How much of a cut result's middle is searched for them.
MIDDLE_SCAN_CHARS = 200_000
_ERROR_LINE = re.compile(r"^.{0,200}\b(?:error|Error|ERROR|fatal|FATAL)\b.{0,300}$", re.MULTILINE)


def cut_result(text: str, limit: int, failed: bool = False) -> tuple[str, str]:
    """A tool result cut as `cut_text` cuts it, and the end the cut dropped (at most
    `RESULT_TAIL_CHARS`; empty when nothing was cut). A failed result's tail opens with the
    first error lines of the part dropped between (a build's error sits among its warnings)."""
    if len(text) <= limit:
        return text, ""
    end = max(limit, len(text) - RESULT_TAIL_CHARS)
    # From a line's start: a word the cut went through (half a token) is no word to read.
    line_start = text.find("\n", end)
    tail = text[line_start + 1 :] if line_start != -1 else ""
    if failed and end > limit:
        middle = _ERROR_LINE.finditer(text, limit, min(end, limit + MIDDLE_SCAN_CHARS))
        found = [match.group(0) for match in itertools.islice(middle, MIDDLE_ERROR_LINES)]
        if found:
            tail = "\n".join([*found, tail])
    return cut_text(text, limit), tail


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
        text = _dumped(value)
        if len(text) > ARGUMENTS_MAX_CHARS and isinstance(value, dict):
            text = _longest_cut(value, text)
    except (ValueError, TypeError, RecursionError):
        text = str(value)
    return cut_text(text, ARGUMENTS_MAX_CHARS)


def _dumped(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


#: How much of a long argument's end is kept: a shell command's last part (`… && gcc x.c`)
#: is often the one that fails, after a long first one (`echo '<a file>' > x.c`).
ARGUMENT_TAIL_CHARS = 200
#: A command's quoted words and here-documents: where a long command is cut, its shell
#: structure kept (`echo '#include…[cut 900 chars]…}' > x.c && gcc x.c`).
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|<<-?\s*['\"]?(\w+)['\"]?\n.*?\n\1\b", re.DOTALL)


def _longest_cut(arguments: dict[Any, Any], dumped: str) -> str:
    """`arguments` as JSON within `ARGUMENTS_MAX_CHARS`, its longest string value cut with a
    marker inside its longest quoted word if that is long enough, else in its middle, its
    start and end kept: the arguments stay JSON, and a command keeps its structure and end.
    `dumped` (too long) when the value is too short to cut so."""
    key = max(arguments, key=lambda k: len(v) if isinstance(v := arguments[k], str) else -1)
    text = arguments[key]
    if not isinstance(text, str):
        return dumped
    quoted = max(_QUOTED.finditer(text[:100_000]), key=lambda m: m.end() - m.start(), default=None)
    drop = len(dumped) - ARGUMENTS_MAX_CHARS + 32
    for _ in range(6):  # the escapes JSON adds: each round cuts what the last overshot
        if quoted is not None and quoted.end() - quoted.start() >= drop + 40:
            start = quoted.start() + (quoted.end() - quoted.start() - drop) // 2
        elif len(text) - drop >= ARGUMENT_TAIL_CHARS + 60:
            start = len(text) - drop - ARGUMENT_TAIL_CHARS
        else:
            return dumped
        cut = _dumped({**arguments, key: _cut_between_words(text, start, start + drop)})
        if len(cut) <= ARGUMENTS_MAX_CHARS:
            return cut
        drop += len(cut) - ARGUMENTS_MAX_CHARS
    return dumped


def _cut_between_words(text: str, start: int, end: int) -> str:
    """`text` without `text[start:end]`, widened to whole words, and a marker: the words the
    cut went through are dropped on both sides (half a secret is no shape redaction knows)."""
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    while end < len(text) and not text[end].isspace():
        end += 1
    return f"{text[:start]}…[cut {end - start} chars]…{text[end:]}"


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
