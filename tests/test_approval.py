"""Nothing lost by a click, through the CLI: an approval merges into the current text, a pinned
skill gets no proposal staged, and after a rollback a skill says where its text came from."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply

STAGED_STEPS = "1. Build.\n2. Run the smoke tests.\n3. Ship.\n"
MERGED_STEPS = "1. Build.\n2. Deploy to the canary first.\n3. Ship.\n"
BOTH_STEPS = "1. Build.\n2. Deploy to the canary first.\n3. Run the smoke tests.\n4. Ship.\n"


def cli_json(workspace: Workspace, *args: str) -> Any:
    result = workspace.cli(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def learn(workspace: Workspace, fake_llm: FakeLLM, session: str, *replies: Reply) -> None:
    """One daemon tick over a new session whose window the model answers with `replies`."""
    workspace.add_session(session, conversation(f"the deploy of {session}"))
    fake_llm.push(*replies)
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr


def publish(workspace: Workspace, mode: str) -> None:
    workspace.settings.setdefault("evolve", {})["publish"] = mode
    workspace.write_config()


def staged_after_merge(workspace: Workspace, fake_llm: FakeLLM) -> None:
    """`deploy` learned, a proposal for it staged (review mode) from session s2, then the skill
    updated by a learned merge (auto mode) from session s3 that added the canary step."""
    workspace.llm_url = fake_llm.base_url
    publish(workspace, "auto")
    learn(workspace, fake_llm, "s1", skill_reply("deploy", "1. Build.\n2. Ship.\n"))
    publish(workspace, "review")
    learn(workspace, fake_llm, "s2", skill_reply("deploy", STAGED_STEPS, reason="smoke tests"))
    assert [item["name"] for item in cli_json(workspace, "review", "list", "--json")] == ["deploy"]
    publish(workspace, "auto")
    learn(
        workspace,
        fake_llm,
        "s3",
        skill_reply("deploy", MERGED_STEPS, reason="canary"),
        skill_reply("deploy", MERGED_STEPS, reason="canary"),  # the merge
    )
    assert "canary" in (workspace.skills / "deploy" / "SKILL.md").read_text()


def staged_window(workspace: Workspace) -> list[int]:
    (staged,) = [e for e in workspace.events("staged") if e["skill"] == "deploy"]
    return list(staged["detail"]["messages"])


def test_approve_merges_into_the_current_text_and_keeps_the_proposal_s_origin(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    staged_after_merge(workspace, fake_llm)
    window = staged_window(workspace)
    asked = len(fake_llm.requests)
    fake_llm.push(skill_reply("deploy", BOTH_STEPS, reason="smoke tests after the canary"))
    result = workspace.cli("review", "approve", "deploy")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("updated deploy")
    text = (workspace.skills / "deploy" / "SKILL.md").read_text()
    assert "Deploy to the canary first." in text and "Run the smoke tests." in text
    # The model was shown the current text (with the merged step) beside the proposal.
    (merge,) = fake_llm.requests[asked:]
    shown = merge["messages"][1]["content"]
    assert "Deploy to the canary first." in shown and "Run the smoke tests." in shown
    shown = cli_json(workspace, "skills", "show", "deploy", "--json")
    newest = shown["effect"]["versions"][-1]
    assert (newest["session"], newest["window"], newest["approved_by"]) == (
        "jsonl:s2",
        window,
        "cli",
    )
    assert newest["reason"] == "smoke tests after the canary"
    assert newest["source"] == "jsonl" and newest["model"] == "test-model"
    assert shown["effect"]["current"] == newest
    assert cli_json(workspace, "review", "list", "--json") == []
    (approved,) = workspace.events("approved")
    assert approved["detail"] == {"outcome": "updated", "approved_by": "cli", "merged": True}


def test_approve_is_refused_as_stale_while_the_model_cannot_merge(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    staged_after_merge(workspace, fake_llm)
    before = (workspace.skills / "deploy" / "SKILL.md").read_bytes()
    fake_llm.push(*[Reply(status=503, body="down")] * 3)
    result = workspace.cli("review", "approve", "deploy")
    assert result.returncode == 1
    assert "could not merge" in result.stderr and "stays staged" in result.stderr
    assert (workspace.skills / "deploy" / "SKILL.md").read_bytes() == before
    assert [item["name"] for item in cli_json(workspace, "review", "list", "--json")] == ["deploy"]
    assert workspace.events("approved") == []
    # Once the model answers, the same command merges it.
    fake_llm.push(skill_reply("deploy", BOTH_STEPS, reason="both"))
    assert workspace.cli("review", "approve", "deploy").returncode == 0
    assert "canary" in (workspace.skills / "deploy" / "SKILL.md").read_text()


def test_a_proposal_for_a_pinned_skill_is_not_staged(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    publish(workspace, "review")
    workspace.cli_here("skills", "write", "deploy", "--description", "Deploy.", "--content", "Go.")
    workspace.cli_here("skills", "pin", "deploy")
    learn(workspace, fake_llm, "s1", skill_reply("deploy", STAGED_STEPS))
    assert cli_json(workspace, "review", "list", "--json") == []
    assert workspace.events("staged") == []
    (refused,) = [e for e in workspace.events("protected") if e["session"] == "jsonl:s1"]
    assert refused["skill"] == "deploy"
    assert refused["reason"] == "deploy is pinned: not staged for review (review mode)"


def test_a_proposal_that_changes_nothing_is_not_staged(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """Review mode: a proposal whose text is the skill's own is `unchanged`, never a diff of
    nothing for a person to approve."""
    workspace.llm_url = fake_llm.base_url
    publish(workspace, "auto")
    learn(workspace, fake_llm, "s1", skill_reply("deploy", "1. Build.\n2. Ship.\n"))
    publish(workspace, "review")
    learn(workspace, fake_llm, "s2", skill_reply("deploy", "1. Build.\n2. Ship.\n"))
    assert cli_json(workspace, "review", "list", "--json") == []
    assert workspace.events("staged") == []
    assert [e["session"] for e in workspace.events("unchanged")] == ["jsonl:s2"]
    learn(workspace, fake_llm, "s3", skill_reply("deploy", STAGED_STEPS))
    assert [item["name"] for item in cli_json(workspace, "review", "list", "--json")] == ["deploy"]


def rolled_back_to_v1(workspace: Workspace, fake_llm: FakeLLM, version: str) -> dict[str, Any]:
    workspace.llm_url = fake_llm.base_url
    publish(workspace, "auto")
    learn(workspace, fake_llm, "s1", skill_reply("deploy", "1. Ship.\n", reason="first"))
    learn(
        workspace,
        fake_llm,
        "s2",
        skill_reply("deploy", MERGED_STEPS, reason="second"),
        skill_reply("deploy", MERGED_STEPS, reason="second, merged"),
    )
    result = workspace.cli("skills", "rollback", "deploy", "--version", version)
    assert result.returncode == 0, result.stderr
    shown: dict[str, Any] = cli_json(workspace, "skills", "show", "deploy", "--json")
    return shown


@pytest.mark.parametrize("version", ["1", "v1"])
def test_after_a_rollback_the_skill_comes_from_the_restored_version(
    workspace: Workspace, fake_llm: FakeLLM, version: str
) -> None:
    shown = rolled_back_to_v1(workspace, fake_llm, version)
    assert "1. Ship." in shown["text"] and "canary" not in shown["text"]
    versions = shown["effect"]["versions"]
    assert [(v["version"], v["event"]) for v in versions] == [
        (1, "created"),
        (2, "updated"),
        (3, "rolled_back"),
    ]
    assert versions[2]["restored"] == 1 and versions[2]["source"] == "cli"
    current = shown["effect"]["current"]
    assert current == versions[0]
    assert (current["session"], current["reason"], current["model"]) == (
        "jsonl:s1",
        "first",
        "test-model",
    )
    rows = {row["name"]: row for row in cli_json(workspace, "skills", "list", "--json")}
    assert rows["deploy"]["git"] == current["git"]
    # The frontmatter and the provenance agree: session s1.
    assert "source-session: jsonl:s1" in shown["text"]
    shows = workspace.cli("skills", "show", "deploy")
    assert "v3 rolled_back" in shows.stderr and "(restored v1)" in shows.stderr
    # Rolling forward again by number brings back v2's text and origin.
    assert workspace.cli("skills", "rollback", "deploy", "--version", "2").returncode == 0
    again = cli_json(workspace, "skills", "show", "deploy", "--json")["effect"]
    assert again["versions"][-1]["restored"] == 2 and again["current"]["session"] == "jsonl:s2"


def test_rollback_refuses_a_number_that_is_no_saved_version(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    rolled_back_to_v1(workspace, fake_llm, "1")
    for version, why in (("9", "no version v9"), ("3", "the text on disk now")):
        result = workspace.cli("skills", "rollback", "deploy", "--version", version)
        assert result.returncode == 1 and why in result.stderr, result.stderr
    # `skills history` says which version each saved text is; its snapshot ids still work.
    history = cli_json(workspace, "skills", "history", "deploy", "--json")
    assert [saved["number"] for saved in history] == [1, 2]
    assert workspace.cli("skills", "history", "deploy").stdout.startswith("v1 ")
    first = history[0]
    assert (
        workspace.cli("skills", "rollback", "deploy", "--version", first["version"]).returncode == 0
    )


# -- the effect chart: every use on the day it happened ----------------------------------------


def skill_call(name: str, at: str) -> list[dict[str, Any]]:
    """A session that loads skill `name` with the `skill` tool at `at` (its messages' time)."""
    call = {"id": "c1", "type": "function", "function": {"name": "skill", "arguments": ""}}
    call["function"]["arguments"] = json.dumps({"name": name})
    return [
        {"role": "user", "content": "deploy it", "timestamp": at},
        {"role": "assistant", "content": "", "tool_calls": [call], "timestamp": at},
        {"role": "tool", "tool_call_id": "c1", "content": "loaded", "timestamp": at},
        {"role": "assistant", "content": "Deployed.", "timestamp": at},
    ]


def test_uses_from_the_cli_and_transcripts_are_one_series_dated_when_they_happened(
    workspace: Workspace,
) -> None:
    from datetime import UTC, datetime, timedelta

    workspace.write_config()
    workspace.cli_here("skills", "write", "deploy", "--description", "Deploy.", "--content", "Go.")
    shown = cli_json(workspace, "skills", "show", "deploy", "--json")["effect"]
    assert (shown["uses"], shown["uses_by_day"]) == (0, {})
    assert workspace.cli("usage", "use", "deploy").returncode == 0  # what a hook runs
    three_days_ago = datetime.now(UTC) - timedelta(days=3)
    workspace.add_session("old", skill_call("deploy", three_days_ago.isoformat()))
    assert workspace.cli("once").returncode == 0  # read today, used three days ago
    effect = cli_json(workspace, "skills", "show", "deploy", "--json")["effect"]
    today = datetime.now(UTC).date().isoformat()
    assert effect["uses"] == 2
    assert effect["uses_by_day"] == {three_days_ago.date().isoformat(): 1, today: 1}
    (session,) = effect["sessions"]
    assert session["last_at"] == three_days_ago.isoformat(timespec="seconds")
