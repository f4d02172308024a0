"""`skilld once` and `skilld run` as real subprocesses against a loopback LLM server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from skilld.skills.document import parse_skill
from tests.campaigns.harness import notify_socket, running, skilld_argv, wait_for
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply


def claude_code_session(path: Path) -> None:
    session_id = path.stem
    records: list[dict[str, Any]] = [
        {"type": "summary", "summary": "noise", "leafUuid": "x"},
        {
            "type": "user",
            "sessionId": session_id,
            "uuid": "u1",
            "timestamp": "2026-11-30T10:00:00Z",
            "message": {"role": "user", "content": "The deploy script fails on staging."},
        },
        {
            "type": "assistant",
            "sessionId": session_id,
            "uuid": "a1",
            "timestamp": "2026-11-30T10:00:01Z",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "secret thoughts"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                     "input": {"command": "./deploy.sh staging"}},
                ],
            },
        },
        {
            "type": "user",
            "sessionId": session_id,
            "uuid": "u2",
            "timestamp": "2026-11-30T10:00:02Z",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                             "content": "error: missing STAGING_HOST"}],
            },
        },
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
        {
            "type": "assistant",
            "sessionId": session_id,
            "uuid": "a2",
            "timestamp": "2026-11-30T10:00:03Z",
            "message": {
                "id": "msg_2",
                "role": "assistant",
                "content": [{"type": "text", "text": "Set STAGING_HOST first, then rerun."}],
            },
        },
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def codex_session(path: Path) -> None:
    session_id = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    lines: list[dict[str, Any]] = [
        {"timestamp": "2026-11-30T10:00:00Z", "type": "session_meta",
         "payload": {"id": session_id, "cwd": "/repo", "instructions": "harness"}},
        {"timestamp": "2026-11-30T10:00:00Z", "type": "response_item",
         "payload": {"type": "message", "role": "user",
                     "content": [{"type": "input_text",
                                  "text": "<environment_context>x</environment_context>"}]}},
        {"timestamp": "2026-11-30T10:00:01Z", "type": "response_item",
         "payload": {"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": "Migrate the database schema."}]}},
        {"timestamp": "2026-11-30T10:00:02Z", "type": "response_item",
         "payload": {"type": "reasoning", "summary": [], "content": None}},
        {"timestamp": "2026-11-30T10:00:03Z", "type": "response_item",
         "payload": {"type": "function_call", "name": "shell", "call_id": "call_1",
                     "arguments": json.dumps({"command": ["alembic", "upgrade", "head"]})}},
        {"timestamp": "2026-11-30T10:00:04Z", "type": "response_item",
         "payload": {"type": "function_call_output", "call_id": "call_1",
                     "output": json.dumps({"output": "Running upgrade -> 42",
                                           "metadata": {"exit_code": 0}})}},
        {"timestamp": "2026-11-30T10:00:05Z", "type": "response_item",
         "payload": {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text",
                                  "text": "Migrated with alembic upgrade head."}]}},
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")


def test_once_creates_skills_from_jsonl_claude_code_and_codex(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    claude_root = workspace.root / "claude"
    codex_root = workspace.root / "codex"
    workspace.sources = [
        {"kind": "jsonl", "path": str(workspace.sessions)},
        {"kind": "claude-code", "path": str(claude_root)},
        {"kind": "codex", "path": str(codex_root)},
    ]
    workspace.write_config()
    workspace.add_session("generic", conversation())
    claude_code_session(claude_root / "-repo" / "6f0c4a52-claude-session.jsonl")
    codex_session(
        codex_root / "2026" / "11" / "30"
        / "rollout-2026-11-30T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl"
    )  # fmt: skip

    def by_content(request: dict[str, Any]) -> Reply:
        window = request["messages"][1]["content"]
        if "STAGING_HOST" in window:
            return skill_reply("deploy-to-staging", description="Deploy to staging.")
        if "alembic" in window:
            return skill_reply("migrate-schema", description="Migrate the database schema.")
        return skill_reply("run-make-test", description="Run the make test target.")

    fake_llm.responder = by_content
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr
    names = sorted(p.parent.name for p in workspace.skills.glob("*/SKILL.md"))
    assert names == ["deploy-to-staging", "migrate-schema", "run-make-test"]
    windows = "\n".join(r["messages"][1]["content"] for r in fake_llm.requests)
    assert "secret thoughts" not in windows  # thinking dropped
    assert "environment_context" not in windows  # harness text dropped
    created = workspace.events("created")
    assert {e["source"] for e in created} == {"jsonl", "claude-code", "codex"}
    for path in workspace.skills.glob("*/SKILL.md"):
        doc = parse_skill(path.read_text())
        assert doc.metadata["managed-by"] == "skilld"

    requests = len(fake_llm.requests)
    again = workspace.cli("once")
    assert again.returncode == 0
    assert len(fake_llm.requests) == requests  # nothing new: no call


def test_retry_after_is_honoured(workspace: Workspace, fake_llm: FakeLLM) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s1", conversation())
    stamps: list[float] = []

    def stamped(request: dict[str, Any]) -> Reply:
        stamps.append(time.monotonic())
        if len(stamps) == 1:
            return Reply(status=429, body="{}", headers={"Retry-After": "2"})
        return skill_reply("after-a-pause")

    fake_llm.responder = stamped
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr
    assert len(stamps) == 2
    assert stamps[1] - stamps[0] >= 1.9
    assert (workspace.skills / "after-a-pause" / "SKILL.md").exists()


def test_sigterm_during_a_tick_exits_0_with_nothing_half_written(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("fast", conversation("fast"))
    workspace.add_session("slow", conversation("slow"))

    def slow_second(request: dict[str, Any]) -> Reply:
        window = request["messages"][1]["content"]
        if "slow" in window:
            return Reply(hang_seconds=30, body="{}")
        return skill_reply("fast-one")

    fake_llm.responder = slow_second
    daemon = workspace.popen("run")
    try:
        # The fast window is settled and the slow one still hangs (for 30 s) in its request.
        assert wait_for(
            lambda: (
                len(fake_llm.requests) == 2
                and (workspace.skills / "fast-one" / "SKILL.md").exists()
            ),
            30,
        ), "both windows should have been asked, the fast one settled"
        daemon.send_signal(signal.SIGTERM)
        # Far less than the hang: SIGTERM cancels the request in flight.
        code = daemon.wait(timeout=20)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert code == 0
    files = [p for p in workspace.skills.rglob("*") if p.is_file()]
    assert all(".skilld-tmp-" not in p.name for p in files)
    for path in workspace.skills.glob("*/SKILL.md"):
        parse_skill(path.read_text())
    # The unanswered window is still pending: reflected on the next run, not lost.
    fake_llm.responder = None
    fake_llm.push(skill_reply("slow-one"))
    assert workspace.cli("once").returncode == 0
    assert (workspace.skills / "slow-one" / "SKILL.md").exists()


def test_second_daemon_on_the_same_state_exits_2(workspace: Workspace, fake_llm: FakeLLM) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    first = workspace.popen("run")
    try:
        lock = workspace.state / "daemon.lock"
        wait_for(lambda: lock.exists() and lock.read_text().strip() != "", 20)
        second = workspace.cli("run", timeout=30)
        assert second.returncode == 2
        assert f"pid {first.pid}" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=10) == 0


def test_status_check_and_json(workspace: Workspace, fake_llm: FakeLLM) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    assert workspace.cli("status", "--check").returncode == 1  # never ran
    workspace.add_session("s1", conversation())
    fake_llm.push(skill_reply("status-skill"))
    assert workspace.cli("once").returncode == 0
    report = json.loads(workspace.cli("status", "--json").stdout)
    assert report["sessions_tracked"] == 1
    assert report["skills_managed"] == 1
    assert report["last_tick"]["outcomes"] == {"created": 1}
    assert report["llm"]["circuit"] == "closed"
    # `once` beats the heart, but no daemon runs: not healthy.
    once_only = workspace.cli("status", "--check")
    assert once_only.returncode == 1 and "no daemon is running" in once_only.stderr
    daemon = workspace.popen("run")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            result = workspace.cli("status", "--json", "--check")
            if result.returncode == 0:
                break
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["daemon_pid"] == daemon.pid
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0


def test_llm_failure_is_an_error_event_visible_in_status(workspace: Workspace) -> None:
    workspace.llm_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    workspace.settings = {"llm": {"max_retries": 0}}
    workspace.write_config()
    workspace.add_session("s1", conversation())
    assert workspace.cli("once").returncode == 0
    errors = workspace.events("error")
    assert errors and errors[0]["detail"]["kind"] in ("transport", "timeout")
    status = json.loads(workspace.cli("status", "--json").stdout)
    assert status["llm"]["last_error"]["kind"] in ("transport", "timeout")
    assert status["windows_deferred"] == 1


def test_sighup_reloads_the_config(workspace: Workspace, fake_llm: FakeLLM) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    with notify_socket() as notify:
        daemon = workspace.popen("run", NOTIFY_SOCKET=notify.address)
        try:
            workspace.add_session("before", conversation("before"))
            fake_llm.push(skill_reply("before-reload"))
            assert wait_for(lambda: (workspace.skills / "before-reload").exists(), 30)
            workspace.settings = {"evolve": {"publish": "review"}}
            workspace.write_config()
            daemon.send_signal(signal.SIGHUP)
            # The reload happens between ticks: RELOADING=1, then READY=1 once it is done.
            assert wait_for(lambda: notify.reloads == 1 and notify.starts == 2, 30)
            workspace.add_session("after", conversation("after"))
            fake_llm.push(skill_reply("after-reload"))
            staged = workspace.state / "pending" / "default" / "after-reload.json"
            assert wait_for(staged.exists, 30), "after SIGHUP, review mode should stage"
            assert not (workspace.skills / "after-reload").exists()
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=10) == 0


#: Variables that move an agent's or skilld's folders away from $HOME.
HOME_OVERRIDES = (
    "CLAUDE_CONFIG_DIR", "CODEX_HOME", "DSH_HOME", "HERMES_HOME",
    "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME",
)  # fmt: skip


def test_a_first_run_with_no_agent_says_so_and_reads_an_agent_installed_later(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """No config file and an empty home: `skilld run` warns once where it looks; a Claude Code
    session that appears while it runs is read, into the `claude` library, within two ticks."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SKILLD_") and key not in HOME_OVERRIDES
    }
    env.update(
        HOME=str(home),
        DEEPSEEK_API_KEY="sk-test-0000",
        SKILLD_LLM_BASE_URL=fake_llm.base_url,
        SKILLD_EVOLVE_INTERVAL_SECONDS="0.5",
        SKILLD_EVOLVE_COOLDOWN_SECONDS="0",
        SKILLD_EVOLVE_MIN_MESSAGES="2",
        SKILLD_EVOLVE_BACKFILL="all",
        SKILLD_LOG_FORMAT="json",
    )
    fake_llm.push(skill_reply("set-staging-host"))
    with running(skilld_argv("run"), env) as run:
        assert run.notify.wait_ticks(2, 60), "the daemon should tick with nothing to read"
        before = run.notify.all_ticks()
        claude_code_session(home / ".claude" / "projects" / "-repo" / "0d3c9a1e-first.jsonl")
        skill = home / ".claude" / "skills" / "set-staging-host" / "SKILL.md"
        assert wait_for(skill.exists, 60), "the new agent's session should have been read"
        ticks_taken = run.notify.all_ticks() - before
    assert run.returncode == 0, run.stderr[-2000:]
    assert ticks_taken <= 2
    warnings = [json.loads(line) for line in run.stderr.splitlines() if "no_agent_found" in line]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning"
    assert str(home / ".claude" / "projects") in warnings[0]["watching"]

    def cli(*args: str) -> list[Any]:
        done = subprocess.run(skilld_argv(*args), env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    (found,) = cli("events", "--json", "--kind", "agent_found")
    assert (found["library"], found["source"]) == ("claude", "claude-code")
    (status,) = cli("status", "--json")
    assert [library["name"] for library in status["libraries"]] == ["claude"]
    assert status["sessions_tracked"] == 1
    created = cli("events", "--json", "--kind", "created")
    assert [(e["library"], e["skill"]) for e in created] == [("claude", "set-staging-host")]


def test_no_agent_found_is_said_once_per_start_not_again_after_each_reload(
    tmp_path: Path,
) -> None:
    """SIGHUP reloads the config, not the daemon: the start-up warning that no agent is found
    is not repeated by each reload."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SKILLD_") and key not in HOME_OVERRIDES
    }
    env.update(
        HOME=str(home),
        DEEPSEEK_API_KEY="sk-test-0000",
        SKILLD_EVOLVE_INTERVAL_SECONDS="0.2",
        SKILLD_LOG_FORMAT="json",
    )
    with running(skilld_argv("run"), env) as run:
        assert run.notify.wait_ticks(1, 60), "the daemon should tick with nothing to read"
        for reload in (1, 2):
            run.process.send_signal(signal.SIGHUP)
            assert wait_for(lambda: run.notify.reloads == reload, 30)  # noqa: B023
            assert wait_for(lambda: run.notify.starts == reload + 1, 30)  # noqa: B023
            assert run.notify.wait_full_tick(60)
    assert run.returncode == 0, run.stderr[-2000:]
    logged = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    assert [line["event"] for line in logged].count("reloaded") == 2
    assert [line["event"] for line in logged].count("no_agent_found") == 1
