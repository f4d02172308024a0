"""Hostile local files for the tests and the security campaign: a FIFO, a socket, a link to a
device, a 1 GB sparse file, bytes that are not UTF-8, deep nesting and control characters,
each planted as a skill's `SKILL.md`; and `measured`, which runs a `skilld` command with a
deadline and reports its peak RSS."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Workspace
from tests.loopback import browser_like

#: A sparse file's size: 1 GiB, which costs nothing on disk and must never be read whole.
SPARSE_BYTES = 1 << 30
#: What a command that reads no skill whole may reach (a skilld process is about 40 MB).
RSS_LIMIT_KIB = 200 * 1024
#: Well above what any of these commands takes; a command still running then has hung.
DEADLINE_SECONDS = 30.0
#: How long a panel page may take before it counts as hung.
PAGE_SECONDS = 10.0
#: The escape sequences a hostile file carries: OSC 52 (writes the clipboard), clear-screen,
#: a window title, and an 8-bit CSI.
OSC52 = "\x1b]52;c;ZWNobyBvd25lZA==\x07"
CLEAR_SCREEN = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"
CSI8 = "\x9b31m"


def _fifo(path: Path, _name: str) -> None:
    os.mkfifo(path)


def _socket(path: Path, _name: str) -> None:
    # A socket's path is limited to 108 bytes: bound in a short folder, then moved in place.
    short = Path(tempfile.mkdtemp(prefix="sk-", dir="/tmp"))
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(short / "s"))
        os.rename(short / "s", path)
    finally:
        os.rmdir(short)


def _device_link(path: Path, _name: str) -> None:
    path.symlink_to("/dev/zero")


def _sparse(path: Path, name: str) -> None:
    with path.open("wb") as handle:
        handle.write(f"---\nname: {name}\ndescription: Huge.\n---\n".encode())
        handle.truncate(SPARSE_BYTES)


def _not_utf8(path: Path, name: str) -> None:
    path.write_bytes(
        f"---\nname: {name}\n".encode() + b"description: Caf\xe9 au lait.\n---\nNot \xff UTF-8.\n"
    )


def _deep_yaml(path: Path, name: str) -> None:
    depth = 100_000
    path.write_text(f"---\nname: {name}\ndescription: {'[' * depth}{']' * depth}\n---\nx\n")


def _controls(path: Path, name: str) -> None:
    path.write_text(
        f"---\nname: {name}\ndescription: Escapes.\n---\n{OSC52}{CLEAR_SCREEN}{TITLE}{CSI8}"
        "Harmless text.\n"
    )


#: Each kind of hostile file, by the skill name it is planted as: what plants it, and why a
#: listing (which checks a file without a YAML parser) and a parsing read (`skills show`, MCP
#: `skill_view`) call it broken (None: a readable skill, shown escaped, never run).
KINDS: dict[str, tuple[Callable[[Path, str], None], str | None, str | None]] = {
    "fifo": (_fifo, "a FIFO", "a FIFO"),
    "socket": (_socket, "a socket", "a socket"),
    "device-link": (_device_link, "links out of", "links out of"),
    "sparse": (_sparse, "over the limit", "over the limit"),
    "latin": (_not_utf8, "not valid UTF-8", "not valid UTF-8"),
    "deep-yaml": (_deep_yaml, None, "nest"),
    "controls": (_controls, None, None),
}


def plant(skills: Path, kind: str, name: str | None = None) -> Path:
    """A skill folder `skills/<name>` (`name`: `kind`) whose `SKILL.md` is the hostile file
    `kind`."""
    folder = skills / (name or kind)
    folder.mkdir(parents=True, exist_ok=True)
    KINDS[kind][0](folder / "SKILL.md", name or kind)
    return folder / "SKILL.md"


def plant_deep_folders(skills: Path, depth: int) -> Path:
    """`depth` nested folders below `skills`, the last holding a skill file."""
    folder = skills.joinpath(*(["deep"] * depth))
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: deep\ndescription: Deep.\n---\nx\n")
    return folder


@dataclass
class Measured:
    """A finished command: its exit code and output, its peak RSS, and whether it hung."""

    returncode: int
    stdout: str
    stderr: str
    peak_kib: int
    hung: bool


#: Runs the command below it as its only child and prints that child's peak RSS (KiB) last.
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def measured(
    workspace: Workspace,
    *args: str,
    stdin: str | None = None,
    deadline: float = DEADLINE_SECONDS,
) -> Measured:
    """`skilld ARGS` (fed `stdin`), killed with its whole process group at `deadline`."""
    if not workspace.config_path.exists():
        workspace.write_config()
    process = subprocess.Popen(
        [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "skilld", *args],
        env=workspace.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(stdin or "", timeout=deadline)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return Measured(-1, out, err, 0, hung=True)
    *lines, peak = err.rstrip("\n").split("\n")
    return Measured(process.returncode, out, "\n".join(lines), int(peak), hung=False)


def mcp_lines(*calls: tuple[str, dict[str, Any]]) -> str:
    """The stdin of an MCP session: initialize, then each tool call (ids from 2)."""
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}},
        }
    ]
    for number, (tool, arguments) in enumerate(calls, start=2):
        params = {"name": tool, "arguments": arguments}
        lines.append({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
    return "".join(json.dumps(line) + "\n" for line in lines)


def mcp_results(stdout: str) -> dict[int, dict[str, Any]]:
    """Each tool call's result by its id."""
    answers = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return {answer["id"]: answer.get("result", answer) for answer in answers if answer["id"] != 1}


def result_text(result: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in result.get("content", []))


@dataclass
class Panel:
    """A running `skilld web`: its process id, and a client that has opened the URL it printed
    (with a token, that sets the session cookie)."""

    pid: int
    client: httpx.Client

    def peak_rss_kib(self) -> int:
        """The panel's peak RSS so far (VmHWM), KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0


@contextlib.contextmanager
def running_panel(workspace: Workspace) -> Iterator[Panel]:
    """`skilld web` on a free port, stopped on leaving."""
    from tests.test_web import start_panel

    process, url = start_panel(workspace)
    try:
        base = url.split("?", 1)[0]
        with browser_like(base_url=base, timeout=PAGE_SECONDS, follow_redirects=True) as client:
            client.get(url)
            yield Panel(process.pid, client)
    finally:
        process.kill()
        process.communicate()


def page_status(client: httpx.Client, path: str) -> int | None:
    """The status `path` answers with; None when it did not answer in `PAGE_SECONDS`."""
    try:
        return client.get(path).status_code
    except httpx.TimeoutException:
        return None
