"""How fast the one-shot commands an agent's hook calls start, and how soon `skilld mcp`
answers an agent's `initialize`, beside a bare interpreter.

    python bench/startup.py [--runs 15] [--smoke]

Agents call `skilld usage use NAME` from hooks that run on every matching tool call,
synchronously, so its start-up is what the agent waits for. A hook runs the `skilld` console
script pip installs; each command here runs that script's code (`console_script`: what pip
writes for pyproject.toml's entry point) on this interpreter, so the figures hold for a
checkout as for an install.

Each command runs `--runs` times, alternating with `python -c pass` on the same interpreter
(the machine is noisy: alternation gives both the same conditions) and with its floor: a
`python -c` importing the standard-library modules the command imported (read from one
`-X importtime` run), so the table shows what the command costs beyond what Python's own
modules cost it. Target: each command within 4x the bare interpreter.

An agent starts `skilld mcp` and waits for its answer to `initialize`: Codex gives a server
that is not marked required about a second before its first request goes out without that
server's tools. That row times the spawn to the answer's line, beside a bare interpreter that
answers a line (and the floor, which imports what the server imported first). Target: under
0.3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 4.0
MCP_TARGET_SECONDS = 0.3
MCP_ROW = "mcp: initialize"

MCP_INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "bench", "version": "1"}},
}) + "\n"  # fmt: skip
#: The least any stdio server can take to answer: an interpreter that reads a line and writes one.
ANSWER_A_LINE = "import sys\nsys.stdout.write(sys.stdin.readline())\nsys.stdout.flush()\n"


def console_script() -> str:
    """The `skilld` script pip generates for the `[project.scripts]` entry point."""
    with open(ROOT / "pyproject.toml", "rb") as handle:
        entry = tomllib.load(handle)["project"]["scripts"]["skilld"]
    module, _, function = entry.partition(":")
    return (
        f"import re\nimport sys\nfrom {module} import {function}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({function}())\n"
    )


def workspace(root: Path) -> dict[str, str]:
    """A configured installation with one skill and a state.db, as a hook would find it."""
    skills, state, sessions = root / "skills", root / "state", root / "sessions"
    sessions.mkdir(parents=True)
    config = root / "config.toml"
    config.write_text(
        f'[skills]\ndir = "{skills}"\n[state]\ndir = "{state}"\n'
        f'[[sources]]\nkind = "jsonl"\npath = "{sessions}"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "SKILLD_CONFIG": str(config), "PYTHONPATH": str(ROOT / "src")}
    # An installed package has its bytecode compiled (pip does it at install); without this the
    # warm-up run could not write it and every run would compile skilld from source.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-m", "skilld", "skills", "write", "run-tests",
         "--description", "Run the tests.", "--content", "1. Run `make test`.\n"],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    return env


def floor_command(
    command: list[str], env: dict[str, str], stdin: str = "", then: str = ""
) -> list[str]:
    """`python -c` importing every module outside skilld that `command` imports (given
    `stdin`), then running `then`."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *command[1:]],
        input=stdin, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    modules = []
    for line in run.stderr.splitlines():
        name = line.rpartition("|")[2].strip()
        if line.startswith("import time:") and name and not name.startswith(("skilld", "imported")):
            modules.append(name)
    # Some are tried and absent (`nt` on Linux, tried by `ntpath`): the floor tries them too.
    body = "".join(f"try:\n    import {name}\nexcept ImportError:\n    pass\n" for name in modules)
    return [sys.executable, "-c", body + then]


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def answered(command: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning `command` to the line it writes back to MCP's `initialize`."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(MCP_INITIALIZE)
    process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    process.stdin.close()
    if process.wait() != 0 or '"id":1' not in line.replace(" ", ""):
        raise SystemExit(f"{command[-1]}: no answer to initialize: {line!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="one JSON line of the figures")
    parser.add_argument("--smoke", action="store_true", help="one run of each command")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    commands = {
        "usage use NAME": ["usage", "use", "run-tests"],
        "skills list --json": ["skills", "list", "--json"],
        "status --json": ["status", "--json"],
    }
    bare_command = [sys.executable, "-c", "pass"]
    with tempfile.TemporaryDirectory() as tmp:
        env = workspace(Path(tmp))
        rows: list[tuple[str, float, float, float]] = []
        script = console_script()
        for label, argv in commands.items():
            command = [sys.executable, "-c", script, *argv]
            floor_argv = floor_command(command, env)
            timed(command, env)  # warm the page cache and bytecode
            samples: tuple[list[float], list[float], list[float]] = ([], [], [])
            for _ in range(runs):
                for times, argv_timed in zip(
                    samples, (command, floor_argv, bare_command), strict=True
                ):
                    times.append(timed(argv_timed, env))
            own_s, floor_s, bare_s = (statistics.median(times) for times in samples)
            rows.append((label, own_s, floor_s, bare_s))
        rows.append(mcp_handshake(script, env, runs))
    if args.json:
        figures = {
            label: {"ms": own * 1000, "floor_ms": floor * 1000, "bare_ms": bare * 1000}
            for label, own, floor, bare in rows
        }
        print(json.dumps(figures))
        return
    print(
        f"{'command':<22} {'skilld':>9} {'its stdlib imports':>19} {'python -c pass':>15}"
        f" {'ratio':>7} {'floor':>7}  target"
    )
    for label, own, floor, bare in rows:
        target = f"< {MCP_TARGET_SECONDS * 1000:g} ms" if label == MCP_ROW else f"≤ {TARGET:g}×"
        print(
            f"{label:<22} {own * 1000:>7.1f}ms {floor * 1000:>17.1f}ms {bare * 1000:>13.1f}ms"
            f" {own / bare:>6.2f}× {floor / bare:>6.2f}×  {target}"
        )
    print(
        f"(median of {runs} runs each, alternating; ratios against python -c pass, and for"
        " mcp against an interpreter that answers a line)"
    )


def mcp_handshake(script: str, env: dict[str, str], runs: int) -> tuple[str, float, float, float]:
    """Spawn to `initialize` answered: `skilld mcp`, its floor, a bare interpreter."""
    command = [sys.executable, "-c", script, "mcp"]
    floor = floor_command(command, env, stdin=MCP_INITIALIZE, then=ANSWER_A_LINE)
    bare_command = [sys.executable, "-c", ANSWER_A_LINE]
    answered(command, env)  # warm the page cache and bytecode
    samples: tuple[list[float], list[float], list[float]] = ([], [], [])
    for _ in range(runs):
        for times, argv_timed in zip(samples, (command, floor, bare_command), strict=True):
            times.append(answered(argv_timed, env))
    own, imports, bare = (statistics.median(times) for times in samples)
    return MCP_ROW, own, imports, bare


if __name__ == "__main__":
    main()
