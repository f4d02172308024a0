"""sd_notify end to end: a real `skilld run` talks to a datagram socket the test binds.

What systemd relies on: READY=1 once the daemon is up, WATCHDOG=1 at half of WATCHDOG_USEC,
STOPPING=1 on SIGTERM, exit code 0 after a clean stop, and the abstract `@name` form.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skilld.config import load_config
from skilld.daemon import Daemon
from skilld.notify import Notifier
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM

#: Generous: a loaded CI machine may take seconds to import and open the state.
DEADLINE_SECONDS = 30.0
SUN_PATH_MAX = 107


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    address = tmp_path / "notify.sock"
    if len(os.fsencode(address)) > SUN_PATH_MAX:
        pytest.skip(f"tmp_path too long for a unix socket: {address}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(address))
    with sock:
        yield sock, str(address)


@pytest.fixture
def abstract_socket() -> Iterator[tuple[socket.socket, str]]:
    name = f"skilld-test-{secrets.token_hex(8)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    with sock:
        yield sock, "@" + name


def receive_until(
    sock: socket.socket,
    wanted: set[str],
    received: list[str],
    process: subprocess.Popen[str],
    *,
    prefix: str = "",
) -> None:
    """Collect datagram lines into `received` until every line in `wanted` has arrived (and,
    with `prefix`, a line starting with it)."""
    deadline = time.monotonic() + DEADLINE_SECONDS

    def done() -> bool:
        return wanted <= set(received) and any(line.startswith(prefix) for line in received)

    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0 or process.poll() is not None:
            _, stderr = process.communicate(timeout=DEADLINE_SECONDS)
            pytest.fail(f"wanted {wanted} and {prefix!r}; got {received}; stderr:\n{stderr}")
        sock.settimeout(min(remaining, 1.0))
        try:
            datagram = sock.recv(4096)
        except TimeoutError:
            continue
        received.extend(datagram.decode().splitlines())


def run_under_notify(
    workspace: Workspace, fake_llm: FakeLLM, sock: socket.socket, address: str
) -> list[str]:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("build", conversation())
    process = workspace.popen("run", NOTIFY_SOCKET=address, WATCHDOG_USEC="2000000")
    received: list[str] = []
    try:
        # STATUS= follows each tick: waiting for it means a whole tick ran under systemd.
        receive_until(sock, {"READY=1", "WATCHDOG=1"}, received, process, prefix="STATUS=tick ")
        process.send_signal(signal.SIGTERM)
        receive_until(sock, {"STOPPING=1"}, received, process)
        _, stderr = process.communicate(timeout=DEADLINE_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    return received


def test_path_socket_gets_ready_watchdog_stopping(
    workspace: Workspace, fake_llm: FakeLLM, path_socket: tuple[socket.socket, str]
) -> None:
    received = run_under_notify(workspace, fake_llm, *path_socket)
    assert received.index("READY=1") < received.index("STOPPING=1")
    assert received.index("WATCHDOG=1") < received.index("STOPPING=1")
    statuses = [line for line in received if line.startswith("STATUS=")]
    assert any(status.startswith("STATUS=tick ") for status in statuses), statuses
    # The tick that ran really reached the LLM: the status is about real work.
    assert fake_llm.requests


def test_abstract_socket_gets_ready_watchdog_stopping(
    workspace: Workspace, fake_llm: FakeLLM, abstract_socket: tuple[socket.socket, str]
) -> None:
    received = run_under_notify(workspace, fake_llm, *abstract_socket)
    assert {"READY=1", "WATCHDOG=1", "STOPPING=1"} <= set(received)


def test_no_socket_is_silent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog_interval is None


def test_watchdog_interval_is_half_and_only_for_our_pid() -> None:
    assert Notifier({"WATCHDOG_USEC": "2000000"}).watchdog_interval == 1.0
    other_pid = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier(other_pid).watchdog_interval is None
    assert Notifier({"WATCHDOG_USEC": "0"}).watchdog_interval is None
    assert Notifier({"WATCHDOG_USEC": "soon"}).watchdog_interval is None


def test_send_to_an_absent_socket_reports_failure(tmp_path: Path) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    assert notifier.enabled
    assert notifier.ready() is False


class _ReadyProbe(Notifier):
    """Records how SIGTERM is handled at the moment READY=1 goes out, then stops the daemon."""

    def __init__(self) -> None:
        super().__init__({})
        self.daemon: Daemon | None = None
        self.sigterm_handler_at_ready: object = None

    def ready(self, status: str = "") -> bool:
        self.sigterm_handler_at_ready = signal.getsignal(signal.SIGTERM)
        assert self.daemon is not None
        self.daemon.request_stop()
        return True


def test_a_listener_that_does_not_read_never_blocks_the_sender() -> None:
    """A datagram socket queues a few messages; past them a status is dropped (the send says
    so) rather than the daemon's loop blocking until someone reads."""
    name = f"skilld-test-{secrets.token_hex(6)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        sent: list[bool] = []
        sender = threading.Thread(
            target=lambda: sent.extend(notifier.status(f"tick {n}") for n in range(200)),
            daemon=True,
        )
        sender.start()
        sender.join(timeout=DEADLINE_SECONDS)
        assert not sender.is_alive(), "the send blocked on a full queue"
        assert sent[0] is True and sent.count(False) > 0
        assert listener.recv(100) == b"STATUS=tick 0"


@pytest.mark.anyio
async def test_ready_is_sent_only_once_sigterm_is_handled(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    # systemd may send SIGTERM the moment it sees READY=1; the default action would kill the
    # daemon mid-start instead of stopping it cleanly.
    workspace.llm_url = fake_llm.base_url
    config = load_config(workspace.write_config(), environ={})
    probe = _ReadyProbe()
    daemon = Daemon(config, notifier=probe)
    probe.daemon = daemon
    result = await daemon.run()
    assert result.exit_code == 0
    assert probe.sigterm_handler_at_ready not in (signal.SIG_DFL, signal.SIG_IGN, None)


def test_sighup_reloads_with_reloading_then_ready_and_stops_cleanly(
    workspace: Workspace, fake_llm: FakeLLM, path_socket: tuple[socket.socket, str]
) -> None:
    sock, address = path_socket
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    process = workspace.popen("run", NOTIFY_SOCKET=address)
    received: list[str] = []
    try:
        receive_until(sock, {"READY=1"}, received, process, prefix="STATUS=tick ")
        process.send_signal(signal.SIGHUP)
        receive_until(sock, {"RELOADING=1"}, received, process)
        received.clear()
        receive_until(sock, {"READY=1"}, received, process)
        process.send_signal(signal.SIGTERM)
        receive_until(sock, {"STOPPING=1"}, received, process)
        _, stderr = process.communicate(timeout=DEADLINE_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert '"reloaded"' in stderr
