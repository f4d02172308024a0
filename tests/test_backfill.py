"""The first-run backfill policy, its spend, and how `status` shows the backlog.

In-process tests run the real Evolver against a loopback LLM server with a clock the test owns
(set near the real time, because the policy compares it with real file modification times).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from skilld.app import App, open_app
from skilld.config import build_config
from skilld.evolve.supervisor import Evolver
from skilld.evolve.wiring import SourceBinding, bind_sources
from skilld.llm import LLMClient, LLMSettings
from skilld.transcripts.model import Cursor, ScanResult
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, skill_reply, skip_reply

pytestmark = pytest.mark.anyio

HOUR = 3600.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def write_session(folder: Path, name: str, messages: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    with path.open("a", encoding="utf-8") as handle:
        for message in messages:
            handle.write(json.dumps(message) + "\n")
    return path


def age(path: Path, seconds: float) -> None:
    """Make `path` look last modified `seconds` ago."""
    when = time.time() - seconds
    os.utime(path, (when, when))


def windows_sent(llm: FakeLLM) -> list[str]:
    return [request["messages"][1]["content"] for request in llm.requests]


@asynccontextmanager
async def evolver(
    tmp_path: Path,
    llm: FakeLLM,
    *,
    backfill: str,
    clock: Clock,
    llm_overrides: Mapping[str, Any] | None = None,
) -> AsyncIterator[tuple[App, Evolver]]:
    """An Evolver over `<tmp>/sessions` with `<tmp>/state`: a new one is a daemon restart."""
    llm_section = {"base_url": llm.base_url, "model": "test-model", **(llm_overrides or {})}
    config = build_config(
        {
            "skills": {"dir": str(tmp_path / "skills")},
            "state": {"dir": str(tmp_path / "state")},
            "evolve": {"cooldown_seconds": 0, "min_messages": 2, "backfill": backfill},
            "llm": llm_section,
            "sources": [{"kind": "jsonl", "path": str(tmp_path / "sessions")}],
        },
        environ={},
    )
    settings = LLMSettings(
        base_url=llm.base_url,
        model="test-model",
        max_retries=0,
        max_concurrency=config.llm.max_concurrency,
        max_calls_per_hour=config.llm.max_calls_per_hour,
    )
    with open_app(config, prepare=True) as app:
        async with LLMClient(settings) as client:
            yield app, Evolver(app, client, bind_sources(config, app.routing), clock=clock)


async def test_none_starts_existing_sessions_at_their_end(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    sessions = tmp_path / "sessions"
    write_session(sessions, "busy", conversation("the old work"))  # modified just now
    async with evolver(tmp_path, fake_llm, backfill="none", clock=Clock()) as (_, loop):
        report = await loop.tick()
        assert fake_llm.requests == []
        assert report.windows == 0 and dict(report.outcomes) == {}
        write_session(sessions, "busy", conversation("the new work"))
        fake_llm.push(skill_reply("new-work"))
        report = await loop.tick()
    assert dict(report.outcomes) == {"created": 1}
    [window] = windows_sent(fake_llm)
    assert "the new work" in window and "the old work" not in window


async def test_duration_reads_recent_files_and_starts_older_ones_at_their_end(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    sessions = tmp_path / "sessions"
    age(write_session(sessions, "two-days-ago", conversation("ancient history")), 48 * HOUR)
    age(write_session(sessions, "an-hour-ago", conversation("recent work")), HOUR)
    fake_llm.default = skip_reply()
    async with evolver(tmp_path, fake_llm, backfill="24h", clock=Clock()) as (_, loop):
        report = await loop.tick()
        assert dict(report.outcomes) == {"skipped": 1}
        [window] = windows_sent(fake_llm)
        assert "recent work" in window and "ancient history" not in window
        # The old session is tracked from its end: what it gains later is reflected.
        write_session(sessions, "two-days-ago", conversation("a late follow-up"))
        report = await loop.tick()
    assert dict(report.outcomes) == {"skipped": 1}
    follow_up = windows_sent(fake_llm)[-1]
    assert "a late follow-up" in follow_up and "ancient history" not in follow_up


async def test_changing_backfill_after_the_first_run_rereads_nothing(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    sessions = tmp_path / "sessions"
    age(write_session(sessions, "old", conversation("old session")), 48 * HOUR)
    write_session(sessions, "recent", conversation("recent session"))
    fake_llm.default = skip_reply()
    async with evolver(tmp_path, fake_llm, backfill="24h", clock=Clock()) as (_, loop):
        await loop.tick()
    assert len(fake_llm.requests) == 1  # the recent session only

    # Restart with the widest policy: neither the skipped nor the reflected session is re-read.
    async with evolver(tmp_path, fake_llm, backfill="all", clock=Clock()) as (_, loop):
        report = await loop.tick()
        assert len(fake_llm.requests) == 1
        assert report.messages_read == 0 and dict(report.outcomes) == {}
        # A file that appears after the first run is read from its start, however old it looks.
        age(write_session(sessions, "copied-in", conversation("restored backup")), 240 * HOUR)
        report = await loop.tick()
    assert dict(report.outcomes) == {"skipped": 1}
    assert "restored backup" in windows_sent(fake_llm)[-1]

    async with evolver(tmp_path, fake_llm, backfill="none", clock=Clock()) as (_, loop):
        report = await loop.tick()
    assert report.messages_read == 0 and len(fake_llm.requests) == 2


class FlakySource:
    """A source whose first listing fails (as an unmounted or unreadable directory would)."""

    kind = "jsonl"

    def __init__(self) -> None:
        self.cutoffs: list[float | None] = []

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        self.cutoffs.append(start_new_at_end_before)
        if len(self.cutoffs) == 1:
            return ScanResult(reads=[], seen=set(), errors=["/sessions: Permission denied"])
        return ScanResult(reads=[], seen=set())


async def test_a_first_look_that_fails_keeps_the_policy_for_the_next_one(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    clock = Clock()
    async with evolver(tmp_path, fake_llm, backfill="24h", clock=clock) as (_, loop):
        source = FlakySource()
        loop.sources = [SourceBinding("jsonl:/sessions", "jsonl", source, "default")]
        loop._by_id = {"jsonl:/sessions": loop.sources[0]}
        await loop.tick()
        await loop.tick()
        await loop.tick()
    day_ago = clock.now - 24 * HOUR
    # The policy is offered until a look succeeds, then never again (later files: from start).
    assert source.cutoffs == [day_ago, day_ago, None]


async def test_backfill_is_reflected_oldest_first_within_the_spend_cap(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    sessions = tmp_path / "sessions"
    # Names sort the other way round from ages: the order must come from the files' times.
    age(write_session(sessions, "a-newest", conversation("newest topic")), 1 * HOUR)
    age(write_session(sessions, "b-middle", conversation("middle topic")), 2 * HOUR)
    age(write_session(sessions, "c-oldest", conversation("oldest topic")), 3 * HOUR)
    fake_llm.default = skip_reply()
    overrides = {"max_calls_per_hour": 2, "max_concurrency": 1}
    clock = Clock()
    async with evolver(
        tmp_path, fake_llm, backfill="all", clock=clock, llm_overrides=overrides
    ) as (app, loop):
        report = await loop.tick()
        assert dict(report.outcomes) == {"skipped": 2}
        sent = windows_sent(fake_llm)
        assert "oldest topic" in sent[0] and "middle topic" in sent[1]
        [deferred] = app.state.events(kinds=("deferred",))
        assert "max_calls_per_hour" in (deferred.reason or "")
        session = app.state.session("jsonl:a-newest")
        assert session is not None and session.held.size  # deferred, not dropped
        # The next tick in the same hour sends nothing more.
        clock.now += 60
        await loop.tick()
        assert len(fake_llm.requests) == 2


def status(workspace: Workspace, *args: str) -> Any:
    result = workspace.cli("status", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if "--json" in args else result.stdout


def test_status_shows_the_backlog_in_windows_and_tokens(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.settings = {
        "llm": {"max_calls_per_hour": 1, "max_concurrency": 1, "max_retries": 0},
        "evolve": {"window_max_chars": 150},  # each conversation splits into several windows
    }
    workspace.write_config()
    for index, topic in enumerate(["alpha", "beta", "gamma"]):
        age(workspace.add_session(f"s{index}", conversation(topic)), (3 - index) * HOUR)
    workspace.add_session("s3", conversation("delta", turns=1)[:-1])  # the agent is still busy
    fake_llm.default = skip_reply()
    assert workspace.cli("once").returncode == 0
    assert len(fake_llm.requests) == 1  # the spend cap stopped the backfill

    backlog = status(workspace, "--json")["backlog"]
    assert backlog["sessions_ready"] == 3 and backlog["sessions_waiting"] == 1
    assert backlog["windows"] > backlog["sessions_ready"]  # counted in windows, not sessions
    assert backlog["max_calls_per_hour"] == 1
    assert backlog["min_hours_at_spend_cap"] == backlog["windows"]
    text = status(workspace)
    line = next(line for line in text.splitlines() if line.startswith("backlog"))
    assert f"{backlog['windows']} windows ready in 3 sessions" in line
    assert f"~{backlog['estimated_tokens']:,} input tokens" in line
    assert f"at least {backlog['windows']:.1f} h at 1 calls/hour" in line
    assert "1 session waiting for a finished turn" in line

    # Lift the cap: the daemon then sends exactly the windows the backlog announced, and about
    # as many input characters as it estimated.
    workspace.settings["llm"]["max_calls_per_hour"] = 0
    workspace.write_config()
    assert workspace.cli("once").returncode == 0
    sent = fake_llm.requests[1:]
    assert len(sent) == backlog["windows"]
    chars = sum(len(m["content"]) for request in sent for m in request["messages"])
    assert abs(chars // 4 - backlog["estimated_tokens"]) <= 0.05 * backlog["estimated_tokens"]
    after = status(workspace, "--json")["backlog"]
    assert after["windows"] == 0 and after["sessions_waiting"] == 1


def test_status_with_nothing_behind(workspace: Workspace, fake_llm: FakeLLM) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s1", conversation())
    fake_llm.default = skip_reply()
    assert workspace.cli("once").returncode == 0
    backlog = status(workspace, "--json")["backlog"]
    assert backlog["windows"] == 0 and backlog["estimated_tokens"] == 0
    assert "backlog        nothing to reflect" in status(workspace)
