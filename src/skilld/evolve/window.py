"""Turning pending messages into windows of text for the model.

Owns: how messages are stored while pending (plain dicts), how an oversize window is split in
order, and the delimiters around the transcript, which the transcript itself cannot close.
"""

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from skilld.gitinfo import from_json
from skilld.transcripts.model import Message, ToolCall
from skilld.transcripts.normalise import cut_text


def encode_message(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "text": message.text}
    if message.tool_calls:
        data["tool_calls"] = [
            {"name": c.name, "arguments": c.arguments, "call_id": c.call_id}
            for c in message.tool_calls
        ]
    for key in ("tool_call_id", "tool_name", "timestamp"):
        if (value := getattr(message, key)) is not None:
            data[key] = value
    if message.git is not None:
        data["git"] = message.git.as_json()
    return data


def decode_message(data: dict[str, Any]) -> Message:
    calls = tuple(
        ToolCall(c.get("name", ""), c.get("arguments", ""), c.get("call_id"))
        for c in data.get("tool_calls", ())
    )
    return Message(
        role=data["role"],
        text=data.get("text", ""),
        tool_calls=calls,
        tool_call_id=data.get("tool_call_id"),
        tool_name=data.get("tool_name"),
        timestamp=data.get("timestamp"),
        git=from_json(data.get("git")),
    )


#: How a text cut to a length limit ends (`…[cut N chars]`; DSH writes `… [cut N chars]`).
_CUT_MARKER = re.compile(r"… ?\[cut \d+ chars\]\Z")
_CUT_WORD_MAX_CHARS = 512


def without_cut_word(text: str) -> str:
    """`text` without the word a length cut went through, if it was cut.

    Redaction recognises a secret by its whole shape; the first half of a token cut in two
    passes as harmless text, so the half-word is dropped instead of being sent.
    """
    marker = _CUT_MARKER.search(text)
    if marker is None:
        return text
    end = start = marker.start()
    while start > 0 and end - start < _CUT_WORD_MAX_CHARS and not text[start - 1].isspace():
        start -= 1
    return text[:start] + text[end:]


def render_message(message: Message) -> str:
    if message.role == "tool":
        label = f"[tool result: {message.tool_name}]" if message.tool_name else "[tool result]"
    else:
        label = f"[{message.role}]"
    lines = [f"{label} {without_cut_word(message.text)}".rstrip()]
    for call in message.tool_calls:
        lines.append(f"  -> tool call {call.name}({without_cut_word(call.arguments)})")
    return "\n".join(lines)


def split_window(messages: Sequence[Message], max_chars: int) -> list[list[Message]]:
    """Split in order into chunks whose rendered size stays within `max_chars`.

    A single message larger than the budget becomes a chunk of its own, its text cut to fit.
    """
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for message in messages:
        rendered = len(render_message(message)) + 1
        if rendered > max_chars:
            message = _shrink(message, max_chars)
            rendered = len(render_message(message)) + 1
        if current and size + rendered > max_chars:
            chunks.append(current)
            current, size = [], 0
        current.append(message)
        size += rendered
    if current:
        chunks.append(current)
    return chunks


def _shrink(message: Message, max_chars: int) -> Message:
    overhead = len(
        render_message(
            Message(message.role, "", message.tool_calls, message.tool_call_id, message.tool_name)
        )
    )
    budget = max(max_chars - overhead - 40, 0)
    return Message(
        message.role,
        cut_text(message.text, budget),
        message.tool_calls,
        message.tool_call_id,
        message.tool_name,
        message.timestamp,
        message.git,
    )


class Window(NamedTuple):
    """The text sent to the model, and its delimiters."""

    text: str
    open_tag: str
    close_tag: str

    @property
    def delimited(self) -> str:
        return f"{self.open_tag}\n{self.text}\n{self.close_tag}"


def delimit(body: str, *, token: str | None = None, label: str = "transcript") -> Window:
    """Wrap `body` in `<label-…>` tags carrying a random token that does not occur in it, so
    nothing in it can close them."""
    import secrets  # (with hmac and random) not for `skilld status`, which imports this module

    while True:
        nonce = token or secrets.token_hex(8)
        if nonce not in body:
            break
        token = None
    return Window(body, f"<{label}-{nonce}>", f"</{label}-{nonce}>")


def render_window(messages: Iterable[Message]) -> str:
    return "\n".join(render_message(m) for m in messages)


def estimate_tokens(text: str) -> int:
    """A rough count (about four characters per token) for budgets and previews."""
    return max(1, len(text) // 4)
