"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests, in a background thread.

Tests queue replies (a JSON body, a status, a hang, a reset) or set a `responder` function;
every request body is recorded so tests can assert on what left the machine.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.loopback import LoopbackServer, QuietHandler


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    hang_seconds: float = 0.0  # sleep before answering (a hung server)
    reset: bool = False  # close the connection without answering


def completion(content: str, *, finish_reason: str = "stop", usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
    return body


def skill_reply(
    name: str,
    content: str = "1. Run `make test`.\n2. Read the failures.\n",
    *,
    description: str | None = None,
    when: str = "When the tests fail.",
    reason: str = "A reusable procedure.",
    **extra: Any,
) -> Reply:
    """An evolve reply; `extra` adds keys (e.g. `scope`)."""
    payload = {
        "evolve": True,
        "name": name,
        "description": description or f"How to {name.replace('-', ' ')}.",
        "whenToUse": when,
        "content": content,
        "reason": reason,
        **extra,
    }
    return Reply(body=completion(json.dumps(payload)))


def skip_reply(reason: str = "Nothing reusable.") -> Reply:
    return Reply(body=completion(json.dumps({"evolve": False, "reason": reason})))


class FakeLLM(LoopbackServer):
    """`port` 0 picks a free port; a given one brings a server back where clients look for
    it (after a test closed the previous one to refuse connections)."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.raw_bodies: list[bytes] = []
        self.queue: list[Reply] = []
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.default: Reply = skip_reply()
        self._listen(port)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.queue.extend(replies)

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            if self.queue:
                return self.queue.pop(0)
        if self.responder is not None:
            return self.responder(request)
        return self.default

    @property
    def all_request_text(self) -> str:
        return "\n".join(body.decode("utf-8", "replace") for body in self.raw_bodies)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                if not self.path.endswith("/chat/completions"):
                    # What an OpenAI-compatible server says to the context probes (Ollama's
                    # `/api/show`): no such endpoint; the queued replies are for chats.
                    self.answer(404, "application/json", b'{"error": "not found"}', {})
                    return
                try:
                    request = json.loads(raw)
                except ValueError:
                    request = {}
                with fake._lock:
                    fake.requests.append(request)
                    fake.raw_bodies.append(raw)
                reply = fake._next(request)
                if reply.hang_seconds:
                    time.sleep(reply.hang_seconds)
                if reply.reset:
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                    return
                body = reply.body
                if isinstance(body, dict):
                    body = json.dumps(body)
                data = body.encode() if isinstance(body, str) else body
                content_type = "application/json" if reply.status < 600 else "text/html"
                extra = {k: v for k, v in reply.headers.items() if k != "Content-Type"}
                content_type = reply.headers.get("Content-Type", content_type)
                self.answer(reply.status, content_type, data, extra)

        return Handler
