"""How fast the one-shot commands an agent's hook calls start, beside a bare interpreter.

    python bench/startup.py [--runs 15]

Agents call `skilld usage use NAME` from hooks that run on every matching tool call,
synchronously, so its start-up is what the agent waits for. Each command runs `--runs` times,
alternating with `python -c pass` on the same interpreter (the machine is noisy: alternation
gives both the same conditions); the table prints each median and the ratio. Target: each
command within 4x the bare interpreter.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 4.0


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


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="one JSON line of the figures")
    args = parser.parse_args()
    commands = {
        "usage use NAME": ["usage", "use", "run-tests"],
        "skills list --json": ["skills", "list", "--json"],
        "status --json": ["status", "--json"],
    }
    bare_command = [sys.executable, "-c", "pass"]
    with tempfile.TemporaryDirectory() as tmp:
        env = workspace(Path(tmp))
        rows = []
        for label, argv in commands.items():
            command = [sys.executable, "-m", "skilld", *argv]
            timed(command, env)  # warm the page cache and bytecode
            own, bare = [], []
            for _ in range(args.runs):
                own.append(timed(command, env))
                bare.append(timed(bare_command, env))
            rows.append((label, statistics.median(own), statistics.median(bare)))
    if args.json:
        print(json.dumps({label: {"ms": o * 1000, "bare_ms": b * 1000} for label, o, b in rows}))
        return
    print(f"{'command':<22} {'skilld':>9} {'python -c pass':>15} {'ratio':>7}  target")
    for label, own, bare in rows:
        print(f"{label:<22} {own * 1000:>7.1f}ms {bare * 1000:>13.1f}ms {own / bare:>6.2f}×  ≤ 4×")
    print(f"(median of {args.runs} runs each, alternating)")


if __name__ == "__main__":
    main()
