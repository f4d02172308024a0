"""The base of the tests' loopback HTTP servers (tests/fakellm.py, tests/interop/loopback.py):
a real `ThreadingHTTPServer` on 127.0.0.1 in a background thread, used as a context manager,
and a quiet HTTP/1.1 handler that answers with a length. And a client that reaches the panel's
own name (`skilld-….localhost`) as a browser does."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import httpx


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def answer(
        self, status: int, content_type: str, data: bytes, headers: Mapping[str, str] = {}
    ) -> None:
        """Send a whole answer; a client that went away meanwhile is no error of the server."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


class LoopbackServer:
    """Serves `_handler_class()` once entered; `_listen` binds the port (0: a free one)."""

    def _listen(self, port: int = 0) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def reachable(host: str) -> str:
    """The address a browser connects to for `host`: browsers resolve `localhost` and every
    name under it to loopback themselves (RFC 6761); this machine's resolver may not."""
    return "127.0.0.1" if host == "localhost" or host.endswith(".localhost") else host


class LocalhostTransport(httpx.HTTPTransport):
    """httpx's transport, connecting to a name under `.localhost` at 127.0.0.1 as a browser
    does; the `Host` header and the cookie jar still see the name."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        named = request.url
        request.url = named.copy_with(host=reachable(named.host))
        try:
            return super().handle_request(request)
        finally:
            request.url = named


def browser_like(**options: Any) -> httpx.Client:
    """An httpx client that reaches `*.localhost` as browsers do (`LocalhostTransport`)."""
    return httpx.Client(transport=LocalhostTransport(), **options)


def free_port() -> int:
    """A loopback port nothing listens on (yet): for a server to bind, or a client to fail."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
