"""The generic `jsonl` source: one OpenAI chat message per line, one session per file.

    {"role": "user"|"assistant"|"tool"|"system", "content": str | [blocks],
     "tool_calls"?: [{"id", "type": "function", "function": {"name", "arguments"}}],
     "tool_call_id"?, "name"?, "timestamp"?, "cwd"?, "error"?}

Session id = file stem; a file whose stem another file already holds (or shares, when both
appear at once) is keyed by its path relative to the root, without its suffix. System messages
are the harness speaking and are dropped. A line may name the session's working directory
(`cwd`, as Claude Code's lines do; the last one named counts), so that a project skill and the
repository the session worked in can be found.

A tool result failed when its line says `"error": true`, or when its content is a JSON result
that says so (`{"exit_code": 1, ...}`, `{"error": "..."}`, `{"success": false}`,
`{"status": "error"}`: the shape Hermes Agent's tools answer in); it succeeded otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from skilld.transcripts._filesource import (
    LineFileSource,
    ParsedLines,
    SessionFile,
    find_files,
)
from skilld.transcripts.model import Message, ToolCall
from skilld.transcripts.normalise import (
    compact_arguments,
    content_text,
    cut_result,
    decode_record,
    iso_timestamp,
    pending_calls,
    remember_call,
    string_or_none,
)

#: A tool result longer than this is output, not a small JSON outcome: it is not parsed.
MAX_OUTCOME_CHARS = 200_000


class JsonlSource(LineFileSource):
    kind = "jsonl"
    default_glob = "**/*.jsonl"

    def session_files(self, errors: list[str]) -> list[SessionFile]:
        if not self.path.is_dir():
            return [SessionFile(self.path, f"{self.kind}:{self.path.stem}")]
        files = find_files(self.path, self.glob or self.default_glob, errors)
        return [SessionFile(file, f"{self.kind}:{file.stem}") for file in files]

    def parse_lines(
        self, lines: list[bytes], state: dict[str, Any], session: SessionFile
    ) -> ParsedLines:
        calls = pending_calls(state)
        parsed = ParsedLines()
        for line in lines:
            try:
                record = decode_record(line)
            except ValueError:
                parsed.skipped += 1
                continue
            if record is None:
                continue
            parsed.cwd = string_or_none(record.get("cwd")) or parsed.cwd
            message = chat_message(record, calls, self.tool_result_max_chars)
            if message is not None:
                parsed.messages.append(message)
        parsed.state = {"calls": calls} if calls else {}
        return parsed


def chat_message(
    record: dict[str, Any], calls: dict[str, str], tool_result_max_chars: int
) -> Message | None:
    """One OpenAI chat message as a `Message`; None for system/unknown roles and empty ones.

    `calls` (call id -> tool name) is updated with the assistant's calls and consulted to name
    tool results that do not carry their tool's name.
    """
    role = record.get("role")
    timestamp = iso_timestamp(record.get("timestamp"))
    text = content_text(record.get("content"))
    if role == "user":
        return Message(role="user", text=text, timestamp=timestamp) if text else None
    if role == "assistant":
        tool_calls = openai_tool_calls(record.get("tool_calls"))
        for call in tool_calls:
            remember_call(calls, call.call_id, call.name)
        if not text and not tool_calls:
            return None
        return Message(role="assistant", text=text, tool_calls=tool_calls, timestamp=timestamp)
    if role == "tool":
        call_id = string_or_none(record.get("tool_call_id"))
        known_name = calls.pop(call_id, None) if call_id else None
        failed, exit_code = tool_outcome(text)
        cut, tail = cut_result(text, tool_result_max_chars, failed is True)
        return Message(
            role="tool",
            text=cut,
            tool_call_id=call_id,
            tool_name=string_or_none(record.get("name")) or known_name,
            timestamp=timestamp,
            failed=failed or record.get("error") is True,
            exit_code=exit_code,
            tail=tail,
        )
    return None


def tool_outcome(text: str) -> tuple[bool, int | None]:
    """(failed, exit code) of a tool result whose content is a JSON object reporting them."""
    if not text.startswith("{") or len(text) > MAX_OUTCOME_CHARS:
        return False, None
    try:
        result = json.loads(text)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(result, dict):
        return False, None
    exit_code = result.get("exit_code")
    if isinstance(exit_code, int) and not isinstance(exit_code, bool):
        return exit_code != 0, exit_code
    error = result.get("error")
    failed = (
        (isinstance(error, str) and bool(error.strip()))
        or error is True
        or result.get("success") is False
        or result.get("status") == "error"
    )
    return failed, None


def openai_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        return ()
    calls = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        function = item.get("function")
        if not isinstance(function, dict):
            continue
        name = string_or_none(function.get("name"))
        if name is None:
            continue
        calls.append(
            ToolCall(
                name=name,
                arguments=compact_arguments(function.get("arguments")),
                call_id=string_or_none(item.get("id")),
            )
        )
    return tuple(calls)
