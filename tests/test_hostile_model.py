"""A hostile model endpoint (issue 39, item 4): a server on 127.0.0.1 answering bodies no
client should take in whole (`tests/hostile_model.py`), met through the real CLI.

A reply nested 200,000 deep, or streamed for a gigabyte, is the server's fault: `once` records
it and exits cleanly, `run` asks no more often than the circuit allows, and no process reads a
reply past `MAX_REPLY_BYTES`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from skilld.boundedjson import MAX_DEPTH
from skilld.llm import MAX_REPLY_BYTES, LLMSettings
from tests.campaigns.harness import running, skilld_argv
from tests.conftest import Workspace, conversation
from tests.hostile_files import RSS_LIMIT_KIB, measured
from tests.hostile_model import HostileModel

TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"


def no_traceback(result: subprocess.CompletedProcess[str], what: str) -> None:
    assert "Traceback" not in result.stderr, f"{what}: {result.stderr[-2000:]}"


def model_workspace(root: Path, model: HostileModel, *, max_retries: int) -> Workspace:
    workspace = Workspace(root, llm_url=model.base_url)
    workspace.settings = {
        "llm": {"max_retries": max_retries},
        "evolve": {"interval_seconds": 0.3},
    }
    workspace.write_config()
    workspace.add_session("hostile-model", conversation("the hostile model"))
    return workspace


def test_once_against_a_200_000_deep_reply_records_the_fault_and_exits_cleanly(
    tmp_path: Path,
) -> None:
    with HostileModel("deep") as model:
        workspace = model_workspace(tmp_path, model, max_retries=1)
        once = workspace.cli("once")
    no_traceback(once, "once")
    assert once.returncode == 0, once.stderr[-2000:]
    assert len(model.requests) == 2  # retried once, as a 5xx is, then waited for
    [error] = workspace.events("error")
    assert error["detail"]["kind"] == "bad_response" and TOO_DEEP in error["reason"]
    # The window was not given up: it waits for the server to answer again.
    status = json.loads(workspace.cli("status", "--json").stdout)
    assert status["backlog"]["windows"] >= 1, status["backlog"]


def test_run_asks_a_server_whose_replies_cannot_be_read_only_as_often_as_the_circuit_allows(
    tmp_path: Path,
) -> None:
    with HostileModel("deep") as model:
        workspace = model_workspace(tmp_path, model, max_retries=0)
        with running(skilld_argv("run"), workspace.env()) as daemon:
            assert daemon.notify.wait_ticks(8, timeout=30)
        ticks = daemon.notify.all_ticks()
    # Each tick would ask again for the same window; a reply that cannot be read counts toward
    # the circuit like a 5xx, which opens after `circuit_failures` calls and stays open.
    allowed = LLMSettings(base_url="", model="").circuit_failures
    assert len(model.requests) == allowed, (len(model.requests), ticks)
    assert daemon.notify.failed_ticks == 0
    assert "Traceback" not in daemon.stderr
    kinds = [event["detail"].get("kind") for event in workspace.events("error")]
    assert kinds[:allowed] == ["bad_response"] * allowed and "circuit_open" in kinds


def test_a_huge_reply_is_read_no_further_than_the_bound(tmp_path: Path) -> None:
    with HostileModel("streamed") as model:
        workspace = model_workspace(tmp_path, model, max_retries=0)
        once = measured(workspace, "once")
    assert once.returncode == 0 and "Traceback" not in once.stderr, once.stderr[-2000:]
    assert model.requests and model.most_sent < 4 * MAX_REPLY_BYTES
    assert once.peak_kib < RSS_LIMIT_KIB, once.peak_kib
    [error] = workspace.events("error")
    assert f"over the limit of {MAX_REPLY_BYTES:,} bytes" in error["reason"]
