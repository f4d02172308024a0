"""Clients that misbehave on purpose: a flood of slow connections to the panel, and requests an
MCP server cannot parse or should not read whole. Each through the real process (`skilld web`,
`skilld mcp`)."""

from __future__ import annotations

import contextlib
import json
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from skilld.mcp_server import INVALID_REQUEST, MAX_MESSAGE_BYTES
from tests.conftest import Workspace
from tests.hostile_files import RSS_LIMIT_KIB, measured
from tests.loopback import reachable

TOKEN = "token-of-the-hostile-clients-test"
IDLE_SOCKETS = 500
#: The panel starts with a file limit this low (as under a small `ulimit -n`): it must make
#: room for a flood itself.
PANEL_SOFT_FILES = 256


@contextlib.contextmanager
def soft_file_limit(limit: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def panel(workspace: Workspace) -> Iterator[tuple[str, int]]:
    """`skilld web` on a free loopback port, started with a small file limit; (host, port)."""
    workspace.write_config()
    with soft_file_limit(PANEL_SOFT_FILES):
        process = workspace.popen("web", "--port", "0", SKILLD_WEB_TOKEN=TOKEN)
    try:
        assert process.stdout is not None
        url = urlsplit(process.stdout.readline().removeprefix("skilld web: ").strip())
        assert url.hostname is not None and url.port is not None, process.communicate(timeout=5)
        yield reachable(url.hostname), url.port
    finally:
        process.terminate()
        try:
            process.communicate(timeout=15)
        finally:
            process.kill()


def closed_by_server(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.slow
def test_a_flood_of_slow_clients_never_blocks_a_normal_request(workspace: Workspace) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= IDLE_SOCKETS * 2, f"the hard file limit ({hard}) is too small for the test"
    with soft_file_limit(IDLE_SOCKETS * 2), panel(workspace) as (host, port):
        flood: list[socket.socket] = []
        try:
            for _ in range(IDLE_SOCKETS):
                flood.append(socket.create_connection((host, port), timeout=5))
            dripping = flood[0]
            dripping.sendall(b"GET / HTTP/1.1\r\n")  # a head that never ends
            started = time.monotonic()
            answer = httpx.get(
                f"http://{host}:{port}/api/status",
                headers={"authorization": f"Bearer {TOKEN}"},
                timeout=10,
            )
            assert answer.status_code == 200
            assert time.monotonic() - started < 1.0
            # Slow clients do not keep their connections: the server closes them.
            deadline = time.monotonic() + 20
            open_ones = list(flood)
            while open_ones and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    dripping.send(b"X")  # one byte a while: still no whole head
                open_ones = [sock for sock in open_ones if not closed_by_server(sock)]
                time.sleep(0.5)
            assert open_ones == []
        finally:
            for sock in flood:
                sock.close()


# -- MCP: what a client sends that the server cannot use -------------------------------------


def strict_json(line: str) -> Any:
    """`line` as JSON that any parser accepts: no NaN, no Infinity."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def ping(request_id: str) -> str:
    return f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "ping"}}'


DEEP_PARAMS = (
    '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": ' + "[" * 10**5 + "]" * 10**5 + "}"
)
#: (what is sent, the error code expected back) for each line the server cannot use.
UNUSABLE = [
    ("[" * 100_000 + "]" * 100_000, -32700),  # nested too deep for the parser
    (DEEP_PARAMS, -32700),
    ("{not json", -32700),
    (b"\xff\xfe{}".decode("latin-1"), -32700),
    (ping("NaN"), -32600),
    (ping("Infinity"), -32600),
    (ping("-Infinity"), -32600),
    (ping("1e400"), -32600),
    (ping("1.5"), -32600),
    (ping("2.0"), -32600),
    (ping('{"a": 1}'), -32600),
    (ping("[1]"), -32600),
    (ping("true"), -32600),
]  # fmt: skip


def test_an_unusable_request_gets_an_error_and_the_session_goes_on(
    workspace: Workspace,
) -> None:
    workspace.write_config()
    lines = [line for sent, _ in UNUSABLE for line in (sent, ping(f'"after-{len(sent)}"'))]
    result = subprocess.run(
        [sys.executable, "-m", "skilld", "mcp"],
        input="".join(line + "\n" for line in lines).encode("latin-1"),
        env=workspace.env(),
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    answers = [strict_json(line) for line in result.stdout.decode("utf-8").splitlines()]
    assert len(answers) == 2 * len(UNUSABLE)
    for (sent, code), error, pong in zip(UNUSABLE, answers[::2], answers[1::2], strict=True):
        assert (error["id"], error["error"]["code"]) == (None, code), sent[:60]
        assert pong == {"jsonrpc": "2.0", "id": f"after-{len(sent)}", "result": {}}
    # Ids the server may answer with: a string, and integers of any size.
    result = subprocess.run(
        [sys.executable, "-m", "skilld", "mcp"],
        input="\n".join([ping('"a"'), ping("0"), ping("-7"), ping("1" * 300)]) + "\n",
        env=workspace.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    ids = [strict_json(line)["id"] for line in result.stdout.splitlines()]
    assert ids == ["a", 0, -7, int("1" * 300)]


def test_an_oversize_mcp_line_gets_an_error_and_the_next_request_an_answer(
    workspace: Workspace,
) -> None:
    huge = '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "'
    huge += "x" * (8 * MAX_MESSAGE_BYTES) + '"}}'
    after = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    session = measured(workspace, "mcp", stdin=f"{huge}\n{after}\n")

    assert session.returncode == 0 and "Traceback" not in session.stderr
    refused, pong = (json.loads(line) for line in session.stdout.splitlines())
    assert (refused["id"], refused["error"]["code"]) == (None, INVALID_REQUEST)
    assert f"over the limit of {MAX_MESSAGE_BYTES:,} bytes" in refused["error"]["message"]
    assert pong == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert session.peak_kib < RSS_LIMIT_KIB, session.peak_kib


def test_an_mcp_line_just_within_the_bound_is_answered(workspace: Workspace) -> None:
    """The control: a line of exactly `MAX_MESSAGE_BYTES` is read and answered."""
    prefix = '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "'
    line = prefix + "x" * (MAX_MESSAGE_BYTES - len(prefix) - 3) + '"}}'
    assert len(line.encode()) == MAX_MESSAGE_BYTES
    workspace.write_config()
    result = subprocess.run(
        [sys.executable, "-m", "skilld", "mcp"], input=line + "\n", env=workspace.env(),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    answers: list[dict[str, Any]] = [json.loads(x) for x in result.stdout.splitlines()]
    assert answers == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
