"""The effect loop end to end (DESIGN.md §13): real jsonl transcripts read by `skilld once` in
a subprocess, a skill learned from a window through a loopback LLM, later sessions that do and
do not load it, then `skilld effect --json`, its events (`failure_recurred`,
`verdict_changed`), `/api/effect`, `skills show --json`, the panel, MCP `skill_view`, and the
revision the next window showing the failure asks for.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from skilld.app import open_app
from skilld.config import load_config
from skilld.effect import failure_id
from skilld.mcp_tools import SkillTools
from skilld.reports.effect import effect_week
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, Reply, completion, skill_reply, skip_reply
from tests.test_failures_tick import PUSH_SIGNATURE, call, checkout
from tests.test_web import client_for

SOURCE_MARK = "Push my new branch, it has never been pushed."
LATE_MARK = "Push it again, the same thing happened."
NEW_DESCRIPTION = "Push a branch that has no upstream yet (git push says no upstream)."


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def push_session(
    moment: datetime,
    cwd: str,
    *,
    fails: bool,
    loads: Path | None = None,
    ask: str = "Push my work please.",
) -> list[dict[str, Any]]:
    """A session at `moment` in `cwd` that pushes: first failing for want of an upstream and
    then succeeding with one (`fails`), or succeeding at once; reading the skill file first
    when `loads` names it."""
    ts = stamp(moment)
    messages: list[dict[str, Any]] = [{"role": "user", "content": ask, "timestamp": ts, "cwd": cwd}]
    if loads is not None:
        reader = call("r", "x", "read_file")
        reader["function"]["arguments"] = json.dumps({"path": str(loads)})
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [reader]},
            {"role": "tool", "tool_call_id": "r", "content": "Use git push -u", "timestamp": ts},
        ]
    if fails:
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call("p1", "git push")]},
            {
                "role": "tool",
                "tool_call_id": "p1",
                "content": "fatal: The current branch feat-x has no upstream branch.",
                "error": True,
                "timestamp": ts,
            },
        ]
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [call("p2", "git push -u origin x")]},
        {"role": "tool", "tool_call_id": "p2", "content": "set up to track", "timestamp": ts},
        {"role": "assistant", "content": "Pushed.", "timestamp": ts},
    ]
    return messages


def responder(request: dict[str, Any]) -> Reply:
    """The model: it learns the skill from the source window, revises it when the late window
    offers it with its evidence (and declines the earlier offers), merges by taking the
    proposal, and skips everything else."""
    system, user = (message["content"] for message in request["messages"][:2])
    if "Merge it into the skill's current text" in system:
        merged = {
            "evolve": True,
            "name": "push-upstream",
            "description": NEW_DESCRIPTION,
            "whenToUse": "When git push fails with no upstream branch.",
            "content": "1. Run `git push -u origin HEAD`.\n2. Check `git status`.\n",
            "reason": "The description now names the failure.",
        }
        return Reply(body=completion(json.dumps(merged)))
    if "[effect] skill push-upstream" in user and LATE_MARK in user:
        return skill_reply("push-upstream", description=NEW_DESCRIPTION, reason="Route it.")
    if SOURCE_MARK in user and "push-upstream:" not in system:
        return skill_reply(
            "push-upstream",
            "1. Run `git push -u origin HEAD` the first time.\n",
            description="Push a new branch.",
            when="When a branch was never pushed.",
            reason="The push worked with -u.",
        )
    return skip_reply()


def once(workspace: Workspace) -> None:
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr


def effect_json(workspace: Workspace) -> list[dict[str, Any]]:
    result = workspace.cli("effect", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_effect_after_real_ticks(workspace: Workspace, fake_llm: FakeLLM) -> None:
    fake_llm.responder = responder
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    shop = str(checkout(workspace.root / "shop", "https://github.com/acme/shop.git"))
    now = datetime.now(UTC)
    # Before the skill: four of six sessions failed to push; then the session it is learned from.
    for n in range(6):
        moment = now - timedelta(days=10 - n)
        workspace.add_session(f"b{n}", push_session(moment, shop, fails=n < 4))
    src = push_session(now - timedelta(days=1), shop, fails=True, ask=SOURCE_MARK)
    workspace.add_session("src", src)
    once(workspace)
    assert [e["skill"] for e in workspace.events("created")] == ["push-upstream"]
    skill_file = workspace.skills / "push-upstream" / "SKILL.md"
    (row,) = effect_json(workspace)
    assert row["source_failures"] == [
        {"id": failure_id(PUSH_SIGNATURE), "signature": PUSH_SIGNATURE, "class": "real",
         "command": "git push"}
    ]  # fmt: skip
    assert row["before"] == {"sessions": 6, "failures": 4}
    assert row["verdict"] == "too-early"

    # After it: four sessions load it and push cleanly; of eight that never load it, three fail.
    later = now + timedelta(hours=1)
    for n in range(4):
        moment = later + timedelta(minutes=n)
        workspace.add_session(f"a{n}", push_session(moment, shop, fails=False, loads=skill_file))
    once(workspace)  # the first verdict recorded: too early
    for n in range(4, 12):
        moment = later + timedelta(minutes=n)
        workspace.add_session(f"a{n}", push_session(moment, shop, fails=n in (5, 8, 11)))
    once(workspace)

    (row,) = effect_json(workspace)
    assert row["before"] == {"sessions": 6, "failures": 4}
    assert row["after"] == {
        "sessions": 12,
        "failures": 3,
        "loaded_sessions": 4,
        "loaded_failures": 0,
    }
    assert row["verdict"] == "not-triggered"
    assert row["evidence"] == (
        "loaded in 4 of 12 later sessions that ran `git push`; failed again in 0 of those 4"
        " and in 3 of the other 8; before: failed in 4 of 6"
    )
    recurred = workspace.events("failure_recurred")
    assert sorted(e["session"] for e in recurred) == ["jsonl:a11", "jsonl:a5", "jsonl:a8"]
    assert all(e["detail"] == {"signature": PUSH_SIGNATURE, "loaded": False,
                               "verdict": "not-triggered"} for e in recurred)  # fmt: skip
    (changed,) = workspace.events("verdict_changed")
    assert (changed["skill"], changed["detail"]) == (
        "push-upstream",
        {"from": "too-early", "to": "not-triggered"},
    )
    assert changed["reason"] == row["evidence"]

    text = workspace.cli("effect")
    assert text.returncode == 0
    assert "not-triggered" in text.stdout
    assert "pooled: 66.7 failures per 100 sessions before, 25 after" in text.stdout

    shown = workspace.cli("skills", "show", "push-upstream", "--json")
    outcome = json.loads(shown.stdout)["effect"]["outcome"]
    assert outcome == row
    with client_for(workspace) as panel:
        assert panel.get("/api/effect").json() == effect_json(workspace)
        assert panel.get("/api/effect?library=default").json() == [row]
        skills_page = panel.get("/skills").text
        assert "Verdict</a></th>" in skills_page and "not-triggered" in skills_page
        page = panel.get("/skills/default/push-upstream").text
        assert "Does it help?" in page and "failed in 3 of 12 sessions" in page
        event_id = next(e["id"] for e in recurred if e["session"] == "jsonl:a5")
        assert f"before={event_id + 1}" in page
        overview = panel.get("/").text
        assert "This week&#39;s learning" in overview or "This week's learning" in overview
    viewed = SkillTools(load_config(workspace.config_path, environ={}), "default").view(
        "push-upstream"
    )
    assert viewed.endswith(f"\n\nskilld effect: not-triggered: {row['evidence']}\n")

    # The next window showing the failure offers the skill for revision, with its evidence.
    late = push_session(later + timedelta(hours=1), shop, fails=True, ask=LATE_MARK)
    workspace.add_session("late", late)
    once(workspace)
    windows = [request["messages"][1]["content"] for request in fake_llm.requests]
    # Offered (and declined) already by the windows of a5, a8 and a11, once the verdict was in.
    assert sum("[effect] skill push-upstream" in text for text in windows) == 4
    offered = next(text for text in windows if LATE_MARK in text)
    line = offered.splitlines()[next(
        i for i, text in enumerate(offered.splitlines()) if text.startswith("[effect]")
    )]  # fmt: skip
    assert "not-triggered" in line and PUSH_SIGNATURE in line
    opening, closing = offered.index("<transcript-"), offered.index("</transcript-")
    assert opening < offered.index("[effect]") < closing
    merge = next(
        request["messages"][1]["content"]
        for request in fake_llm.requests
        if "Merge it into" in request["messages"][0]["content"]
    )
    assert "This change revises a skill whose failure came back" in merge
    assert "It was not loaded where the failure came back" in merge
    (updated,) = workspace.events("updated")
    assert updated["reason"].startswith("The description now names the failure (revision:")
    # The evidence as the tick saw it, the late session's own failure counted.
    assert (
        "not-triggered; loaded in 4 of 13 later sessions that ran `git push`; failed again in 0"
        " of those 4 and in 4 of the other 9" in updated["reason"]
    )
    assert NEW_DESCRIPTION in skill_file.read_text()


def test_effect_prints_the_daemons_measurement_while_nothing_it_read_changed(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """A tick that reads sessions measures every skill and keeps the rows; `skilld effect`
    prints them until a session is read, a version written or the provenance changes."""
    fake_llm.responder = responder
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    shop = str(checkout(workspace.root / "shop", "https://github.com/acme/shop.git"))
    now = datetime.now(UTC)
    for n in range(3):
        workspace.add_session(f"b{n}", push_session(now - timedelta(days=5 - n), shop, fails=True))
    workspace.add_session("src", push_session(now - timedelta(days=1), shop, fails=True,
                                              ask=SOURCE_MARK))  # fmt: skip
    once(workspace)
    # The skill is created after the tick's measurement: the kept rows are stale, not printed.
    (row,) = effect_json(workspace)
    assert (row["name"], row["before"]["failures"]) == ("push-upstream", 3)
    workspace.add_session("a0", push_session(now + timedelta(hours=1), shop, fails=False))
    once(workspace)
    (row,) = effect_json(workspace)

    def kept() -> dict[str, Any]:
        with sqlite3.connect(workspace.state / "state.db") as conn:
            (value,) = conn.execute(
                "SELECT value FROM meta WHERE key = 'effect_measurement'"
            ).fetchone()
        return json.loads(value)

    measured = kept()
    assert measured["rows"] == [row]
    # Printed from what the tick kept: a mark put into the kept rows shows.
    measured["rows"][0]["evidence"] = "kept by the daemon"
    with sqlite3.connect(workspace.state / "state.db") as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'effect_measurement'", (json.dumps(measured),)
        )
    assert [r["evidence"] for r in effect_json(workspace)] == ["kept by the daemon"]
    # A skill written since (new provenance) makes the kept rows stale: measured afresh.
    written = workspace.cli(
        "skills", "write", "by-hand", "--description", "Written by a person.", "--content", "x"
    )
    assert written.returncode == 0, written.stderr
    rows = effect_json(workspace)
    assert [r["name"] for r in rows] == ["by-hand", "push-upstream"]
    assert rows[1] == row
    # A session read since moves the effect tables on: the next tick measures and keeps again.
    workspace.add_session("a1", push_session(now + timedelta(hours=2), shop, fails=True))
    once(workspace)
    assert kept()["rows"] == effect_json(workspace)
    assert effect_json(workspace)[1]["after"]["failures"] == 1
    # The overview's week reads the same kept rows, and says what a fresh measurement says.
    with open_app(load_config(workspace.config_path, environ={})) as app:
        week = effect_week(app)
        with app.state.transaction():
            app.state.conn.execute("DELETE FROM meta WHERE key = 'effect_measurement'")
        assert effect_week(app) == week
    assert week["before_per_100"] == 100.0
