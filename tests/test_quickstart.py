"""The README's quick start, run as written in a fresh copy of the repository.

The second command (install and run the tests) is what `.ci/run` does; this runs the first:
a fresh virtual environment, `pip install .`, and `skilld run`, which must come up, tick, and
stop cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakellm import FakeLLM

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"## Quick start.*?```sh\n(.*?)```", readme, re.S)
    assert match, "README.md has no Quick start block"
    return [
        line.strip()
        for line in match.group(1).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def skilld_pids(venv_bin: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.startswith(str(venv_bin).encode()) for part in cmdline[:2]):
            pids.append(int(entry.name))
    return pids


def heartbeat(state_db: Path) -> float | None:
    if not state_db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{state_db}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'last_tick'").fetchone()
    except sqlite3.Error:
        return None
    return 1.0 if row else None


def test_two_commands_install_and_test() -> None:
    install_and_run, install_and_test = quick_start_commands()
    assert "pip install ." in install_and_run and install_and_run.endswith("skilld run")
    assert "pip install -e '.[test]'" in install_and_test
    assert install_and_test.endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet -e '.[test]'" in ci and "python -m pytest" in ci


@pytest.mark.slow
def test_first_command_installs_and_runs_the_daemon(tmp_path: Path, fake_llm: FakeLLM) -> None:
    install_and_run = quick_start_commands()[0]
    work = tmp_path / "skilld"
    shutil.copytree(
        ROOT,
        work,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", "out"
        ),
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "SKILLD_LLM_BASE_URL": fake_llm.base_url,
        "SKILLD_EVOLVE_INTERVAL_SECONDS": "1",
    }
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"):
        if key in os.environ:
            env[key] = os.environ[key]
    shell = subprocess.Popen(
        ["bash", "-c", install_and_run],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    state_db = home / ".local" / "state" / "skilld" / "state.db"
    try:
        deadline = time.monotonic() + 480  # a fresh venv and a pip install come first
        while time.monotonic() < deadline and shell.poll() is None and not heartbeat(state_db):
            time.sleep(0.5)
        assert shell.poll() is None, shell.stdout.read() if shell.stdout else ""
        assert heartbeat(state_db), "the daemon never finished a tick"
        daemons = skilld_pids(work / ".venv" / "bin")
        assert daemons, "no skilld process from the quick start's venv"
        for pid in daemons:
            os.kill(pid, signal.SIGTERM)
        assert shell.wait(timeout=30) == 0
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
