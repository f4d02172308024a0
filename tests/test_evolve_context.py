"""Windows fitted to a model's context, and the daily token cap, in the evolution loop: a
context-length refusal re-splits the window (no attempt spent, nothing given up), and the cap
pauses the calls like an outage, the windows waiting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skilld.app import open_app
from skilld.config import build_config
from skilld.evolve.supervisor import Evolver
from skilld.evolve.wiring import bind_sources, llm_settings
from skilld.llm import LLMClient
from tests.fakellm import FakeLLM, Reply, skip_reply

pytestmark = pytest.mark.anyio

#: The fake model's context, and its tokenizer: four characters a token.
CONTEXT = 4096


def long_session(path: Path, turns: int = 12) -> None:
    """A finished conversation of `turns` turns, each about 1,600 characters."""
    with path.open("w", encoding="utf-8") as handle:
        for turn in range(turns):
            for role, text in (
                ("user", f"Step {turn}: " + "please look at the failing build log " * 20),
                ("assistant", f"Step {turn} done: " + "the fix was to pin the resolver " * 20),
            ):
                handle.write(json.dumps({"role": role, "content": text}) + "\n")


def tokens_of(request: dict[str, Any]) -> int:
    chars = sum(len(str(m.get("content", ""))) for m in request.get("messages", ()))
    return chars // 4 + int(request.get("max_tokens", 0))


def too_long(request: dict[str, Any]) -> Reply:
    """A vLLM- or llama-cpp-python-like server: a 400 naming the context past it."""
    if tokens_of(request) > CONTEXT:
        message = (
            f"This model's maximum context length is {CONTEXT} tokens. However, you requested"
            f" {tokens_of(request)} tokens."
        )
        return Reply(status=400, body={"error": {"message": message, "type": "invalid_request"}})
    return skip_reply()


def config_for(tmp_path: Path, base_url: str, **llm: Any) -> Any:
    (tmp_path / "sessions").mkdir(exist_ok=True)
    raw: dict[str, Any] = {
        "skills": {"dir": str(tmp_path / "skills")},
        "state": {"dir": str(tmp_path / "state")},
        "evolve": {"cooldown_seconds": 0, "min_messages": 2, "backfill": "all"},
        "llm": {"base_url": base_url, "model": "m", **llm},
        "sources": [{"kind": "jsonl", "path": str(tmp_path / "sessions")}],
    }
    return build_config(raw, environ={})


async def test_a_context_refusal_resplits_the_window_and_gives_nothing_up(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    config = config_for(tmp_path, fake_llm.base_url)
    long_session(tmp_path / "sessions" / "long.jsonl")
    fake_llm.responder = too_long
    with open_app(config, prepare=True) as app:
        async with LLMClient(llm_settings(config)) as client:
            report = await Evolver(app, client, bind_sources(config, app.routing)).tick()
        events = app.state.events()
        pending = app.state.sessions_with_pending()
        health = app.state.get_meta("llm_health")
    statuses = [tokens_of(r) > CONTEXT for r in fake_llm.requests]
    # The first request (one window of the whole session) was refused; every later one fits.
    assert statuses[0] is True
    assert not any(statuses[1:])
    assert [e.kind for e in events if e.kind == "error"] == []
    skipped = [e for e in events if e.kind == "skipped"]
    assert len(skipped) >= 2  # the session became several windows
    assert report.outcomes["skipped"] == len(skipped)
    assert pending == []  # every window answered
    assert (health["context_tokens"], health["context_source"]) == (CONTEXT, "refusal")
    assert all(r["max_tokens"] == CONTEXT // 4 for r in fake_llm.requests[1:])


async def test_the_token_cap_pauses_calls_and_the_windows_wait(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # One call at a time: a call already in flight when the cap is reached still lands.
    config = config_for(tmp_path, fake_llm.base_url, max_tokens_per_day=100, max_concurrency=1)
    for name in ("a", "b"):
        long_session(tmp_path / "sessions" / f"{name}.jsonl", turns=1)
    with open_app(config, prepare=True) as app:
        async with LLMClient(llm_settings(config)) as client:
            await Evolver(app, client, bind_sources(config, app.routing)).tick()
        # FakeLLM reports 150 tokens a reply: the first answer reaches the cap of 100.
        assert len(fake_llm.requests) == 1
        deferred = [e for e in app.state.events() if e.kind == "deferred"]
        assert deferred and "max_tokens_per_day=100" in (deferred[0].reason or "")
        assert [e for e in app.state.events() if e.kind == "error"] == []
        assert len(app.state.sessions_with_pending()) == 1  # waiting, not given up
        record = app.state.get_meta("llm_tokens_today")
        assert record["tokens"] == 150
    # A restart reads the spend back: still no call.
    with open_app(config, prepare=True) as app:
        from skilld.evolve.report import TOKENS_KEY

        tokens = app.state.get_meta(TOKENS_KEY)
        async with LLMClient(llm_settings(config), tokens_today=tokens) as client:
            await Evolver(app, client, bind_sources(config, app.routing)).tick()
    assert len(fake_llm.requests) == 1
