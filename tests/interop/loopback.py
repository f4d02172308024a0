"""Loopback model APIs for the real agents: the Anthropic Messages API (Claude Code) and the
OpenAI Responses API (Codex), each a real HTTP server on 127.0.0.1 in a background thread.

A server plays a script of turns, one per model request (a text answer, or a tool call), then
answers "Done." to anything more; every request is recorded so that a test can assert on what
the agent itself sent to the model.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import zstandard

from tests.loopback import LoopbackServer, QuietHandler


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolCall:
    """A call of `name` (as the agent offered it to the model) with `arguments`."""

    name: str
    arguments: dict[str, Any]
    #: Codex offers an MCP server's tools as a namespace (`mcp__skilld`) of functions.
    namespace: str | None = None


Turn = Text | ToolCall


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def text(self) -> str:
        return json.dumps(self.body)


@dataclass
class LoopbackModel(LoopbackServer):
    """The recording and the script; subclasses render a turn in their API's wire format."""

    script: list[Turn] = field(default_factory=list)
    requests: list[Captured] = field(default_factory=list)
    #: Requests to paths the API does not serve (anything but the model endpoint).
    strays: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listen()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def is_model_request(self, method: str, path: str) -> bool:
        raise NotImplementedError

    def render(self, turn: Turn, request: dict[str, Any], index: int) -> bytes:
        """The SSE stream answering `request` with `turn`."""
        raise NotImplementedError

    def _next_turn(self, captured: Captured) -> tuple[Turn, int]:
        with self._lock:
            self.requests.append(captured)
            index = len(self.requests)
            turn = self.script.pop(0) if self.script else Text("Done.")
        return turn, index

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(QuietHandler):
            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "zstd":
                    return zstandard.ZstdDecompressor().decompressobj().decompress(raw)
                if encoding == "gzip":
                    return gzip.decompress(raw)
                return raw

            def _serve(self) -> None:
                raw = self._body()
                path = self.path.split("?", 1)[0]
                if not model.is_model_request(self.command, path):
                    with model._lock:
                        model.strays.append(f"{self.command} {self.path}")
                    self.answer(404, "application/json", b'{"error":"not served here"}')
                    return
                request = json.loads(raw)
                captured = Captured(path, dict(self.headers), request)
                turn, index = model._next_turn(captured)
                self.answer(200, "text/event-stream", model.render(turn, request, index))

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _serve

        return Handler


def _sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class AnthropicModel(LoopbackModel):
    """`POST /v1/messages`, streamed as Claude Code asks for it."""

    def is_model_request(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/v1/messages"

    def render(self, turn: Turn, request: dict[str, Any], index: int) -> bytes:
        if isinstance(turn, Text):
            block: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": turn.text}
            stop_reason = "end_turn"
        else:
            block = {"type": "tool_use", "id": f"toolu_{index:04d}", "name": turn.name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(turn.arguments)}
            stop_reason = "tool_use"
        message = {
            "id": f"msg_{index:04d}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": request.get("model", "loopback"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        return _sse(
            [
                {"type": "message_start", "message": message},
                {"type": "content_block_start", "index": 0, "content_block": block},
                {"type": "content_block_delta", "index": 0, "delta": delta},
                {"type": "content_block_stop", "index": 0},
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
                {"type": "message_stop"},
            ]
        )

    def tool_names(self, captured: Captured) -> list[str]:
        return [str(tool.get("name")) for tool in captured.body.get("tools", [])]


class ResponsesModel(LoopbackModel):
    """`POST /v1/responses`, streamed, as Codex's `wire_api = "responses"` speaks it."""

    def is_model_request(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/v1/responses"

    def render(self, turn: Turn, request: dict[str, Any], index: int) -> bytes:
        if isinstance(turn, Text):
            item: dict[str, Any] = {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{index:04d}",
                "content": [{"type": "output_text", "text": turn.text}],
            }
        else:
            item = {
                "type": "function_call",
                "id": f"fc_{index:04d}",
                "call_id": f"call_{index:04d}",
                "name": turn.name,
                "arguments": json.dumps(turn.arguments),
            }
            if turn.namespace is not None:
                item["namespace"] = turn.namespace
        usage = {
            "input_tokens": 10,
            "input_tokens_details": None,
            "output_tokens": 5,
            "output_tokens_details": None,
            "total_tokens": 15,
        }
        return _sse(
            [
                {"type": "response.created", "response": {"id": f"resp_{index:04d}"}},
                {"type": "response.output_item.done", "item": item},
                {
                    "type": "response.completed",
                    "response": {"id": f"resp_{index:04d}", "usage": usage},
                },
            ]
        )

    def tool_names(self, captured: Captured) -> list[str]:
        """Every function the request offers; a namespace's as `namespace.function`."""
        names: list[str] = []
        for tool in captured.body.get("tools", []):
            if tool.get("type") == "namespace":
                names.extend(f"{tool['name']}.{inner['name']}" for inner in tool.get("tools", []))
            else:
                names.append(str(tool.get("name") or tool.get("type")))
        return names

    def function_outputs(self) -> list[dict[str, Any]]:
        """The `function_call_output` items the agent sent back, in order."""
        outputs: list[dict[str, Any]] = []
        for captured in self.requests:
            for item in captured.body.get("input", []):
                if item.get("type") == "function_call_output" and item not in outputs:
                    outputs.append(item)
        return outputs
