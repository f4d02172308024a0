"""A hostile model endpoint on 127.0.0.1 for the tests and the security campaign: every reply
is one of `KINDS`, a body no client should take in whole. It counts the requests it got and
the bytes it managed to send (a client that stops reading makes its writes fail)."""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.loopback import LoopbackServer, QuietHandler

#: Nested this deep, a body is about 400 KB: small, and far past any decoder's recursion.
DEEP = 200_000
#: What a streamed body offers at most (a client that reads it all has failed long before).
STREAMED_BYTES = 1 << 30
_CHUNK = b" " * (1 << 16)


def deep_json(depth: int = DEEP) -> bytes:
    return b'{"choices": ' + b"[" * depth + b"]" * depth + b"}"


#: Each kind: (status, headers, body or None for a streamed one). `gzip bomb` is 64 MiB of
#: whitespace in about 64 KB.
KINDS: dict[str, tuple[int, dict[str, str], bytes | None]] = {
    "deep": (200, {"Content-Type": "application/json"}, deep_json()),
    "deep error": (500, {"Content-Type": "application/json"}, b'{"error": ' + deep_json() + b"}"),
    "not JSON": (200, {"Content-Type": "text/html"}, b"<html>a proxy's login page</html>"),
    "streamed": (200, {"Content-Type": "application/json"}, None),
    "gzip bomb": (
        200,
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        gzip.compress(b" " * (64 << 20), compresslevel=9),
    ),
}


class HostileModel(LoopbackServer):
    """Answers every POST with `kind`'s reply; `requests` holds when each chat request came
    (the client's context probes, `/api/show`, get the same reply but are not counted)."""

    def __init__(self, kind: str, *, streamed_bytes: int = STREAMED_BYTES) -> None:
        self.kind = kind
        self.streamed_bytes = streamed_bytes
        self.requests: list[float] = []
        #: The most bytes of a body any one reply got out.
        self.most_sent = 0
        self._sent_lock = threading.Lock()
        self._listen()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with model._sent_lock:
                    if self.path.endswith("/chat/completions"):
                        model.requests.append(time.monotonic())
                status, headers, body = KINDS[model.kind]
                if body is not None:
                    extra = {k: v for k, v in headers.items() if k != "Content-Type"}
                    self.answer(status, headers["Content-Type"], body, extra)
                    sent = len(body)
                else:
                    sent = self._stream(status, headers)
                with model._sent_lock:
                    model.most_sent = max(model.most_sent, sent)

            def _stream(self, status: int, headers: dict[str, str]) -> int:
                """Whitespace in chunks, no length, until the client hangs up."""
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = 0
                frame = f"{len(_CHUNK):x}\r\n".encode() + _CHUNK + b"\r\n"
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    while sent < model.streamed_bytes:
                        self.wfile.write(frame)
                        sent += len(_CHUNK)
                    self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True
                return sent

        return Handler
