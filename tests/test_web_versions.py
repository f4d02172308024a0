"""Nothing lost by a click, through the panel (real HTTP through its guard): Approve merges into
the current text, a pinned target is shown and not offered for approval, and a rollback shows the
restored version's provenance with versions numbered v1…vN."""

from __future__ import annotations

import json
import re

from skilld.state import StateDB
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, Reply, skill_reply
from tests.test_approval import (
    BOTH_STEPS,
    STAGED_STEPS,
    cli_json,
    learn,
    publish,
    rolled_back_to_v1,
    staged_after_merge,
    staged_window,
)
from tests.test_web import client_for, post, stage


def test_approve_in_the_panel_keeps_the_merged_step(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    staged_after_merge(workspace, fake_llm)
    window = staged_window(workspace)
    with client_for(workspace) as panel:
        fake_llm.push(*[Reply(status=503, body="down")] * 3)
        refused = post(panel, "approve", library="default", name="deploy")  # back on /review
        assert '<p class="flash refused" role="status">Approve refused' in refused.text
        assert "could not merge" in refused.text
        assert "Approve" in panel.get("/review").text  # still staged, offered again
        fake_llm.push(skill_reply("deploy", BOTH_STEPS, reason="both steps"))
        response = post(panel, "approve", library="default", name="deploy")
        assert response.status_code == 200, response.text
        text = (workspace.skills / "deploy" / "SKILL.md").read_text()
        assert "Deploy to the canary first." in text and "Run the smoke tests." in text
        shown = panel.get("/api/skills/default/deploy").json()
    newest = shown["effect"]["versions"][-1]
    assert (newest["session"], newest["window"], newest["reason"], newest["approved_by"]) == (
        "jsonl:s2",
        window,
        "both steps",
        "panel",
    )
    assert shown == cli_json(workspace, "skills", "show", "deploy", "--json")


def test_a_pinned_target_is_shown_and_not_offered_for_approval(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    publish(workspace, "review")
    learn(workspace, fake_llm, "s1", skill_reply("deploy", STAGED_STEPS))
    learn(workspace, fake_llm, "s2", skill_reply("deploy", STAGED_STEPS + "4. Tag it.\n"))
    workspace.cli_here("review", "approve", "deploy")  # a new skill: no merge
    stage(workspace, "deploy", "1. Build.\n2. Ship it fast.\n")
    workspace.cli_here("skills", "pin", "deploy")
    with client_for(workspace) as panel:
        page = panel.get("/review").text
        assert '<small class="pinned">pinned</small>' in page
        assert "deploy is pinned: Approve is not offered (unpin it first" in page
        assert '<button type="submit">Approve</button>' not in page
        assert '<button type="submit">Reject</button>' in page
        refused = post(panel, "approve", library="default", name="deploy")
    assert "Approve refused: deploy is pinned" in refused.text
    assert "Ship it fast" not in (workspace.skills / "deploy" / "SKILL.md").read_text()


def test_a_rollback_in_the_panel_shows_the_restored_version_s_provenance(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    rolled_back_to_v1(workspace, fake_llm, "v1")
    assert workspace.cli("skills", "rollback", "deploy", "--version", "2").returncode == 0
    with client_for(workspace) as panel:
        response = post(panel, "rollback", library="default", name="deploy", version="1")
        assert response.status_code == 200, response.text
        page = panel.get("/skills/default/deploy").text
        api = panel.get("/api/skills/default/deploy").json()
        compared = panel.get("/skills/default/deploy?a=2&b=current").text
    assert "canary" not in (workspace.skills / "deploy" / "SKILL.md").read_text()
    versions = api["effect"]["versions"]
    assert [v["version"] for v in versions] == [1, 2, 3, 4, 5]
    assert [v.get("restored") for v in versions] == [None, None, 1, 2, 1]
    assert api["effect"]["current"]["session"] == "jsonl:s1"
    provenance = page.split('<h2 id="provenance">', 1)[1].split("</dl>", 1)[0]
    assert "<dd>v1 (restored by v5): first</dd>" in provenance
    assert "<dd>jsonl:s1</dd>" in provenance
    # Roll back and Compare offer numbered versions with their date and reason, no snapshot.
    choices = re.findall(r'<option value="([^"]*)">([^<]*)</option>', page)
    assert choices and all(value.isdigit() or value == "current" for value, _ in choices)
    labels = [label for value, label in choices if value == "2"]
    assert labels and all(re.fullmatch(r"v2 · \d{4}-\d\d-\d\d \d\d:\d\d · .+", x) for x in labels)
    assert '<span class="del">-2. Deploy to the canary first.</span>' in compared


# -- API paging ------------------------------------------------------------------------------


def test_the_api_pages_events_and_skills(workspace: Workspace) -> None:
    workspace.write_config()
    for n in range(5):
        workspace.cli_here("skills", "write", f"s{n}", "--description", "S.", "--content", "Go.")
    with StateDB(workspace.state / "state.db") as state:
        for n in range(120):
            state.add_event("web", skill=f"e{n}", source="panel")
    every = [json.loads(line) for line in workspace.cli_here("events", "--json").splitlines()]
    newest_first = every[::-1]
    with client_for(workspace) as panel:
        assert panel.get("/api/events").json() == newest_first[:100]  # the default: 100
        page = panel.get("/api/events?limit=30").json()
        assert page == newest_first[:30]
        after = panel.get(f"/api/events?limit=30&before={page[-1]['id']}").json()
        assert after == newest_first[30:60]
        assert panel.get("/api/events?limit=0").json() == []
        rows = cli_json(workspace, "skills", "list", "--json")
        assert panel.get("/api/skills").json() == rows  # the default: all
        assert panel.get("/api/skills?limit=2").json() == rows[:2]
        assert panel.get("/api/skills?limit=2&offset=2").json() == rows[2:4]
        assert panel.get("/api/skills?offset=4").json() == rows[4:]
        for bad in (
            "/api/events?limit=ten",
            "/api/events?before=-3",
            "/api/skills?offset=x",
            "/api/skills?limit=-1",
        ):
            response = panel.get(bad)
            assert response.status_code == 400, bad
            assert response.headers["content-type"] == "application/json"
            name = bad.split("?")[1].split("=")[0]
            assert response.json()["error"].startswith(f"{name}: "), response.text
        for unknown in ("/api/nothing", "/api/events/3", "/api/", "/api/status/x"):
            missing = panel.get(unknown)
            assert missing.status_code == 404, unknown
            assert missing.json() == {"error": f"no API path {unknown}"}
        assert "error" in panel.get("/api/skills/default/s1/extra").json()


# -- the effect chart ------------------------------------------------------------------------


def test_the_chart_shows_each_use_on_its_day_and_says_when_there_is_none(
    workspace: Workspace,
) -> None:
    from datetime import UTC, datetime, timedelta

    from tests.test_approval import skill_call

    workspace.write_config()
    for name in ("deploy", "triage"):
        workspace.cli_here("skills", "write", name, "--description", "D.", "--content", "Go.")
    assert workspace.cli("usage", "use", "deploy").returncode == 0
    assert workspace.cli("usage", "use", "deploy").returncode == 0
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    workspace.add_session("old", skill_call("deploy", two_days_ago.isoformat()))
    assert workspace.cli("once").returncode == 0
    with client_for(workspace) as panel:
        used = panel.get("/skills/default/deploy").text
        unused = panel.get("/skills/default/triage").text
    today = datetime.now(UTC).date().isoformat()
    bars = dict(re.findall(r"<title>(\d{4}-\d\d-\d\d): (\d+)</title>", used))
    assert len(bars) == 30 and bars[today] == "2"
    assert bars[two_days_ago.date().isoformat()] == "1"
    assert sum(map(int, bars.values())) == 3 and "Used 3 times" in used
    assert "no uses yet" not in used
    assert "no uses yet" in unused and "<svg" not in unused.split('id="effect"')[1]
