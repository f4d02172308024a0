"""Nothing lost by a click, through the panel (real HTTP through its guard): Approve merges into
the current text, a pinned target is shown and not offered for approval, and a rollback shows the
restored version's provenance with versions numbered v1…vN."""

from __future__ import annotations

import re

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
        refused = post(panel, "approve", library="default", name="deploy")
        assert refused.status_code == 409 and "could not merge" in refused.text
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
    assert refused.status_code == 409 and "deploy is pinned" in refused.text
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
