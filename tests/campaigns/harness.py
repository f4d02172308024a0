"""What the campaigns share: watching a daemon (its sd_notify datagrams, its log lines, its tick
failures), a fault injected into a skilld subprocess, a window named by the request that asks
about it, and a skilld process run as an unprivileged user.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from skilld.state import EVENT_KINDS, StateDB
from tests.fakellm import Reply, completion, skip_reply

# -- waiting ---------------------------------------------------------------------------------


def wait_for(condition: Callable[[], bool], timeout: float, poll: float = 0.02) -> bool:
    """Poll `condition` until it holds; `timeout` only matters when the test is failing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll)
    return condition()


# -- counting what a campaign checked --------------------------------------------------------


@dataclass
class Tally:
    """The checks a campaign ran and those that failed (raised, or an assert in them). The
    first failure is held until the campaign has printed its figures, then raised: the
    figures show the failure instead of being skipped by it."""

    checked: int = 0
    failed: int = 0
    held: Exception | None = None

    def count(self, check: Callable[..., Any]) -> Callable[..., Any]:
        """`check`, counted; its signature (and hypothesis's examples) kept."""

        @functools.wraps(check)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.checked += 1
            try:
                return check(*args, **kwargs)
            except Exception:
                self.failed += 1
                raise

        return counted

    def run(self, check: Callable[..., Any], *args: Any) -> None:
        """Run `check` now, counted; a failure is held."""
        try:
            self.count(check)(*args)
        except Exception as error:  # held, and raised once the figures are out
            self.hold(error)

    def hold(self, error: Exception) -> None:
        if self.held is None:
            self.held = error

    def raise_held(self) -> None:
        if self.held is not None:
            raise self.held


# -- the daemon's sd_notify datagrams --------------------------------------------------------


class NotifySocket:
    """Receives what the daemon sends to `$NOTIFY_SOCKET`: ticks (`STATUS=tick …`), failed
    ticks, starts and restarts after a reload (`READY=1`), and reloads (`RELOADING=1`).

    A thread reads all along: a datagram socket holds only a few messages, and a daemon whose
    messages are not read would block on the next one (as systemd never lets it)."""

    def __init__(self) -> None:
        self.name = f"skilld-test-{secrets.token_hex(6)}"
        self.ticks = self.starts = self.reloads = self.failed_ticks = 0
        self._lock = threading.Lock()
        self._open = True
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name)
        self.sock.settimeout(0.05)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def address(self) -> str:
        return "@" + self.name

    def _read(self) -> None:
        while self._open:
            try:
                payload = self.sock.recv(65536).decode("utf-8", "replace")
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                for line in payload.splitlines():
                    self.ticks += line.startswith("STATUS=tick ")
                    self.failed_ticks += line.startswith("STATUS=last tick failed")
                    self.starts += line == "READY=1"
                    self.reloads += line == "RELOADING=1"

    def drain(self) -> int:
        """The ticks counted so far."""
        with self._lock:
            return self.ticks

    def all_ticks(self) -> int:
        """Ticks that ended, successful or failed."""
        with self._lock:
            return self.ticks + self.failed_ticks

    def wait_ticks(self, count: int, timeout: float = 60) -> bool:
        """Until `count` ticks (successful or failed) were reported in all."""
        return wait_for(lambda: self.all_ticks() >= count, timeout)

    def wait_full_tick(self, timeout: float = 60) -> bool:
        """Until a tick that started after this call has ended (the one under way may have
        begun before whatever the caller just changed)."""
        return self.wait_ticks(self.all_ticks() + 2, timeout)

    def close(self) -> None:
        self._open = False
        self._reader.join(timeout=5)
        self.sock.close()


@contextlib.contextmanager
def notify_socket() -> Iterator[NotifySocket]:
    listener = NotifySocket()
    try:
        yield listener
    finally:
        listener.close()


@dataclass
class DaemonRun:
    """A `skilld run` process, what it reported through sd_notify, and (once stopped) its
    output and exit code."""

    process: subprocess.Popen[str]
    notify: NotifySocket
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def problems(self) -> list[str]:
        """What went wrong, seen from outside: an exit code other than 0 after SIGTERM, failed
        ticks, and log lines that report an error."""
        found = [f"run: {problem}" for problem in log_problems(self.stderr)]
        if self.notify.failed_ticks:
            found.append(f"run: {self.notify.failed_ticks} ticks failed")
        if self.returncode != 0:
            found.append(f"run: stopped with {self.returncode}: {self.stderr[-500:]!r}")
        return found


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str]) -> Iterator[DaemonRun]:
    """The daemon `argv` starts, with its own notify socket, stopped with SIGTERM on leaving.
    Its output is read all along: a full pipe would stall it."""
    with notify_socket() as notify:
        process = subprocess.Popen(
            argv,
            env={**env, "NOTIFY_SOCKET": notify.address},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        run = DaemonRun(process, notify)

        def read() -> None:
            run.stdout, run.stderr = process.communicate()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            yield run
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            reader.join(timeout=30)
            if process.poll() is None:
                process.kill()
                reader.join(timeout=10)
            run.returncode = process.returncode
            notify.drain()


def skilld_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "skilld", *args]


# -- what went wrong inside a daemon ---------------------------------------------------------

TICK_FAILED_PREFIX = "tick failed: "


def log_problems(stderr: str, *, killed: bool = False) -> list[str]:
    """Each stderr line of a skilld process that says something went wrong: a JSON log line at
    level error or above (`tick_failed` among them), or a line that is no log line at all (a
    traceback or a warning printed around the logger). The echo of an event (an `error` event
    for an outage, say) is left to the audit of the event log. A SIGKILLed process may leave its
    last line cut short: with `killed`, that one line is not counted."""
    lines = stderr.splitlines()
    if killed and lines and not stderr.endswith("\n"):
        lines = lines[:-1]
    problems: list[str] = []
    stray: list[str] = []  # consecutive lines that are no log line: one traceback, say
    for line in [*lines, ""]:
        record: Any = None
        with contextlib.suppress(ValueError):
            record = json.loads(line) if line.strip() else None
        if line.strip() and not isinstance(record, dict):
            stray.append(line)
            continue
        if stray:
            problems.append("not a log line: " + "\n".join(stray)[-1500:])
            stray = []
        if not isinstance(record, dict) or record.get("event") in EVENT_KINDS:
            continue
        if record.get("level") in ("error", "critical"):
            problems.append(f"{record.get('event')}: {str(record.get('error', record))[:500]}")
    return problems


def tick_failure_events(state_db: Path, *, after_id: int = 0) -> list[str]:
    """The `error` events a daemon records when a tick raised (it logs `tick_failed` and goes
    on): each one is a tick that failed."""
    with StateDB(state_db) as state:
        errors = state.events(kinds=("error",), after_id=after_id)
    return [
        f"event {event.id}: {event.reason}"
        for event in errors
        if (event.reason or "").startswith(TICK_FAILED_PREFIX)
    ]


def last_event_id(state_db: Path) -> int:
    with StateDB(state_db) as state:
        newest = state.events(limit=1)
    return newest[0].id if newest else 0


# -- a fault injected into a skilld subprocess -----------------------------------------------


def fault_shim(directory: Path, code: str) -> dict[str, str]:
    """Environment that makes every Python process started with it run `code` first (as its
    `sitecustomize`), to inject a fault where no outside action can (a raising tick)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(code, encoding="utf-8")
    directory.chmod(0o755)
    (directory / "sitecustomize.py").chmod(0o644)
    path = [str(directory), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(part for part in path if part)}


#: Every other tick of the daemon raises (the first, the third, ...), as a bug inside the tick
#: would.
TICK_RAISES_EVERY_OTHER_TIME = """
import skilld.evolve.supervisor as _supervisor

_real_tick = _supervisor.Evolver.tick
_calls = [0]


async def _tick(self):
    _calls[0] += 1
    if _calls[0] % 2 == 1:
        raise RuntimeError("injected: tick number %d raised" % _calls[0])
    return await _real_tick(self)


_supervisor.Evolver.tick = _tick
"""


def short_circuit_shim(reset_seconds: float) -> str:
    """The daemon's LLM client with a circuit that lets a probe through after `reset_seconds`
    (300 s in the product), so that a test sees its probes."""
    return f"""
import dataclasses
import skilld.daemon as _daemon

_real_settings = _daemon.llm_settings


def _settings(config):
    return dataclasses.replace(_real_settings(config), circuit_reset_seconds={reset_seconds!r})


_daemon.llm_settings = _settings
"""


# -- the window a request asks about ---------------------------------------------------------

_MARKER = re.compile(r"^(Merge into \S+: s|S)ession (\S+) \((\S+)\), messages (\d+)\D(\d+)[:.]")


@dataclass(frozen=True)
class WindowAsked:
    session: str
    first: int
    last: int
    merge: bool
    repair: bool


def window_of(request: dict[str, Any]) -> WindowAsked | None:
    """The window a reflection (or merge) request is about, read from its user message."""
    messages = request.get("messages")
    if not isinstance(messages, list) or len(messages) < 2 or not isinstance(messages[1], dict):
        return None
    match = _MARKER.match(str(messages[1].get("content", "")))
    if match is None:
        return None
    return WindowAsked(
        match.group(2),
        int(match.group(4)),
        int(match.group(5)),
        merge=match.group(1) != "S",
        repair=len(messages) > 2,
    )


# -- a model that proposes what the test assigned -------------------------------------------


def body_of(name: str, version: int = 1) -> dict[str, Any]:
    seed = uuid.uuid5(uuid.NAMESPACE_URL, name).hex
    return {
        "evolve": True,
        "name": name,
        "description": f"Procedure {seed[:16]} for {name}.",
        "whenToUse": "When it applies.",
        "content": "".join(f"{step}. Check {seed[step : step + 12]}.\n" for step in range(version)),
        "reason": "Reusable.",
    }


@dataclass
class Proposer:
    """The model: each session proposes the skill the test assigned to it (`wanted`), and a
    merge request about it gets that text as the merge. Records every request and asserts
    nothing (an assert in the server's thread would only drop the connection)."""

    wanted: dict[str, dict[str, Any]] = field(default_factory=dict)
    asks: Counter[str] = field(default_factory=Counter)
    merges: Counter[str] = field(default_factory=Counter)
    other: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: dict[str, Any]) -> Reply:
        window = window_of(request)
        with self.lock:
            if window is None or window.repair or window.session not in self.wanted:
                self.other += 1
                return skip_reply("Unexpected.")
            (self.merges if window.merge else self.asks)[window.session] += 1
            body = self.wanted[window.session]
        return Reply(body=completion(json.dumps(body)))

    @property
    def calls(self) -> int:
        with self.lock:
            return sum(self.asks.values()) + sum(self.merges.values()) + self.other


# -- a skilld process as an unprivileged user --------------------------------------------------


@dataclass(frozen=True)
class Unprivileged:
    """How to start a process as `nobody` when the tests run as root (as CI does), so that
    permission bits really stop it; as another user, processes already obey them."""

    #: The command that runs `skilld` as the user, its arguments to follow.
    command: tuple[str, ...]
    uid: int
    gid: int

    def own(self, *paths: Path) -> None:
        """Give `paths` (and everything under them) to the unprivileged user."""
        for top in paths:
            for path in [top, *top.rglob("*")]:
                os.chown(path, self.uid, self.gid, follow_symlinks=False)

    def skilld(self, *args: str) -> list[str]:
        return [*self.command, *args]


def unprivileged() -> Unprivileged:
    if os.geteuid() != 0:
        return Unprivileged(tuple(skilld_argv()), os.getuid(), os.getgid())
    nobody = pwd.getpwnam("nobody")
    setpriv, runuser = shutil.which("setpriv"), shutil.which("runuser")
    if setpriv:
        drop: tuple[str, ...] = (
            setpriv,
            f"--reuid={nobody.pw_uid}",
            f"--regid={nobody.pw_gid}",
            "--clear-groups",
            "--",
        )
    elif runuser:
        drop = (runuser, "-u", "nobody", "--")
    else:
        pytest.skip("running as root with neither setpriv nor runuser to drop privileges")
    # As `python -m skilld`, from the readable copy. Not through PYTHONPATH and `env`: a helper
    # exec'd as nobody may not enter the venv's folder at all, where setpriv's exec still may.
    boot = (
        f"import runpy, sys; sys.path.insert(0, {readable_runtime()!r});"
        " runpy.run_module('skilld', run_name='__main__', alter_sys=True)"
    )
    return Unprivileged((*drop, sys.executable, "-c", boot), nobody.pw_uid, nobody.pw_gid)


def runtime_distributions(name: str = "skilld") -> list[metadata.Distribution]:
    """The installed distributions `name` needs at run time (no extras), itself excluded."""
    found: dict[str, metadata.Distribution] = {}
    todo = [req for req in metadata.requires(name) or [] if "extra ==" not in req]
    while todo:
        requirement = re.split(r"[\s;<>=!~\[(]", todo.pop(), maxsplit=1)[0]
        key = requirement.lower().replace("_", "-")
        if key in found:
            continue
        try:
            found[key] = metadata.distribution(requirement)
        except metadata.PackageNotFoundError:
            continue  # a requirement whose marker leaves it out on this Python
        todo.extend(req for req in found[key].requires or [] if "extra ==" not in req)
    return list(found.values())


@functools.cache
def readable_runtime() -> str:
    """A copy of skilld and of what it imports, in a folder anyone may read: `nobody` cannot
    enter a checkout or a virtual environment made under `mktemp -d` (as CI's are)."""
    import skilld

    folder = Path(tempfile.mkdtemp(prefix="skilld-runtime-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    folder.chmod(0o755)
    tops = {Path(skilld.__file__).parent}
    for dist in runtime_distributions():
        for file in dist.files or []:
            top = file.parts[0]
            if top != ".." and not top.endswith((".dist-info", ".data", ".pth")):
                tops.add(Path(str(dist.locate_file(top))))
    for top in tops:
        if top.is_dir():
            shutil.copytree(top, folder / top.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(top, folder / top.name)
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(folder)


@contextlib.contextmanager
def shared_tmp_dir() -> Iterator[Path]:
    """A temp dir an unprivileged user can reach (pytest's own are private to their owner)."""
    path = Path(tempfile.mkdtemp(prefix="skilld-test-", dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
