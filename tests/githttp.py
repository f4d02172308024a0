"""A git remote over HTTP that wants a password: `git http-backend` (git's own smart-HTTP
server, as CGI) behind a loopback server that answers 401 unless the request carries HTTP Basic
credentials it was given. What a team remote on a git host does, on 127.0.0.1."""

from __future__ import annotations

import base64
import os
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.loopback import LoopbackServer, QuietHandler

_CGI_TIMEOUT_SECONDS = 30


class AuthGitServer(LoopbackServer):
    """Serves every bare repository under `root` at `http://127.0.0.1:PORT/<name>`, to a
    client that authenticates as `username` with `password` (an empty password too)."""

    def __init__(self, root: Path, username: str, password: str) -> None:
        self.root = root
        self.expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        #: The Authorization header of every request, as it came (None: there was none).
        self.authorizations: list[str | None] = []
        self._listen()

    def url(self, repository: str, userinfo: str = "") -> str:
        at = f"{userinfo}@" if userinfo else ""
        return f"http://{at}127.0.0.1:{self.port}/{repository}"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                self.serve()

            def do_POST(self) -> None:
                self.serve()

            def serve(self) -> None:
                given = self.headers.get("Authorization")
                server.authorizations.append(given)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if given != server.expected:
                    self.answer(401, "text/plain", b"who are you?\n",
                                {"WWW-Authenticate": 'Basic realm="team"'})  # fmt: skip
                    return
                self.answer_from_backend(body)

            def answer_from_backend(self, body: bytes) -> None:
                path, _, query = self.path.partition("?")
                env = {key: value for key, value in os.environ.items() if key == "PATH"}
                env.update(
                    GIT_PROJECT_ROOT=str(server.root),
                    GIT_HTTP_EXPORT_ALL="1",
                    GIT_CONFIG_NOSYSTEM="1",
                    GIT_CONFIG_GLOBAL=os.devnull,
                    REQUEST_METHOD=self.command,
                    PATH_INFO=path,
                    QUERY_STRING=query,
                    CONTENT_TYPE=self.headers.get("Content-Type", ""),
                    CONTENT_LENGTH=str(len(body)),
                    HTTP_CONTENT_ENCODING=self.headers.get("Content-Encoding", ""),
                    GIT_PROTOCOL=self.headers.get("Git-Protocol", ""),
                    REMOTE_USER="teammate",  # http-backend serves a push only to a known user
                    REMOTE_ADDR="127.0.0.1",
                )
                result = subprocess.run(
                    ["git", "http-backend"], input=body, env=env, capture_output=True,
                    timeout=_CGI_TIMEOUT_SECONDS, check=False,
                )  # fmt: skip
                head, _, content = result.stdout.partition(b"\r\n\r\n")
                headers = {}
                for line in head.decode("latin-1").split("\r\n"):
                    key, _, value = line.partition(":")
                    if key.strip():
                        headers[key.strip().lower()] = value.strip()
                status = int((headers.pop("status", "") or "200").split()[0])
                content_type = headers.pop("content-type", "application/octet-stream")
                headers.pop("content-length", None)
                self.answer(status, content_type, content, headers)

        return Handler
