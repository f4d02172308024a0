"""The commands an agent's hook calls load only what they use (bench/startup.py times them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import Workspace

#: What one-shot commands must not pay for: the LLM client, logging, YAML, the event loop,
#: the redaction patterns.
HEAVY = ("httpx", "structlog", "yaml", "anyio", "asyncio", "skilld.redact")

PROBE = """
import json, sys
from skilld.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


@pytest.mark.parametrize(
    "command",
    [["usage", "use", "run-tests"], ["skills", "list", "--json"], ["status", "--json"]],
    ids=["usage use", "skills list", "status"],
)
def test_one_shot_commands_import_nothing_heavy(workspace: Workspace, command: list[str]) -> None:
    workspace.write_config()
    written = workspace.cli(
        "skills", "write", "run-tests", "--description", "Run the tests.", "--content", "1. Go.\n"
    )
    assert written.returncode == 0, written.stderr
    report = workspace.root / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *command],
        env=workspace.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(report.read_text())
    assert loaded["code"] == 0
    assert [module for module in HEAVY if module in loaded["modules"]] == []


def test_the_probe_sees_a_heavy_import(workspace: Workspace) -> None:
    """The check can fail: a command that does load them (the daemon's) is seen doing it."""
    workspace.write_config()
    report = workspace.root / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), "once"],
        env=workspace.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(report.read_text())["modules"]
    assert {"httpx", "anyio", "structlog"} <= set(loaded)
