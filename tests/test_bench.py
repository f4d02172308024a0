"""Every benchmark in bench/ still runs: its `--smoke` (tiny sizes, one run) exits 0.

The scripts are found by glob, so a new benchmark is covered as soon as it lands; a renamed
field or a changed signature breaks the suite instead of the next person's benchmark run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(path for path in BENCH.glob("*.py") if not path.name.startswith("_"))


def test_the_benchmarks_are_found() -> None:
    assert len(SCRIPTS) >= 6, [script.name for script in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=[script.stem for script in SCRIPTS])
def test_benchmark_smoke_run_exits_zero(script: Path, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SKILLD_")}
    # Scratch space and any home-relative path of the run stay in this test's temp dir.
    env.update(HOME=str(tmp_path), TMPDIR=str(tmp_path))
    extra = claude_sessions(tmp_path) if script.stem == "tick" else []
    run = subprocess.run(
        [sys.executable, str(script), "--smoke", *extra],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"{script.name} --smoke exited {run.returncode}:\n{run.stderr}"
    assert run.stdout.strip(), f"{script.name} --smoke printed nothing"
    if extra:
        assert "read sessions/*.jsonl claude-code" in run.stdout


def claude_sessions(tmp_path: Path) -> list[str]:
    """`bench/tick.py --claude-sessions DIR` adds a row over DIR's sessions: here, sessions the
    bench itself writes in Claude Code's format (one smoke run covers both)."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    write = (
        "import sys; sys.path.insert(0, sys.argv[1]); import tick\n"
        "for i in range(2):\n"
        "    text, _ = tick.session_text(i, 'x', 'claude-code', 'mixed')\n"
        "    open(f'{sys.argv[2]}/s{i}.jsonl', 'w').write(text)\n"
    )
    subprocess.run([sys.executable, "-c", write, str(BENCH), str(sessions)], check=True)
    return ["--claude-sessions", str(sessions)]
