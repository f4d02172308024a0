"""A `.usage.json` that is a link (issue 39, item 9) is refused, never read through: every
listing (`skills list`, the panel's pages, MCP `skill_list`) lists its skills without usage,
names the refused file as a problem, and goes on. The curator moves nothing it cannot judge."""

from __future__ import annotations

import json

from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, skill_reply
from tests.hostile_files import mcp_lines, mcp_results, measured, page_status, running_panel

GOOD = "---\nname: good\ndescription: A good skill.\n---\n1. Do it.\n"
#: What the link points at: usage a listing would show if it followed the link.
ELSEWHERE = {"good": {"use_count": 41, "state": "active", "pinned": True}}
PROBLEM = "usage not read: .usage.json is a symbolic link inside"


def linked_usage(workspace: Workspace, link: str = ".usage.json") -> None:
    """A skill, and `link` in its library (the sidecar or its lock) a link to a file outside."""
    (workspace.skills / "good").mkdir()
    (workspace.skills / "good" / "SKILL.md").write_text(GOOD)
    target = workspace.root / "elsewhere.json"
    target.write_text(json.dumps(ELSEWHERE))
    (workspace.skills / link).symlink_to(target)
    workspace.write_config()


def test_skills_list_lists_past_a_linked_usage_file_and_names_it(workspace: Workspace) -> None:
    linked_usage(workspace)

    listed = workspace.cli("skills", "list", "--json")
    text = workspace.cli("skills", "list")

    assert listed.returncode == 0 and text.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr + text.stderr
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["use_count"], row["pinned"]) == ("good", 0, False)
    for run in (listed, text):
        assert f"skilld: library default: {PROBLEM} {workspace.skills}" in run.stderr
    assert "\ngood " in "\n" + text.stdout
    assert json.loads((workspace.root / "elsewhere.json").read_text()) == ELSEWHERE


def test_a_linked_usage_lock_is_refused_too(workspace: Workspace) -> None:
    linked_usage(workspace, ".usage.json.lock")
    (workspace.skills / ".usage.json").write_text(json.dumps(ELSEWHERE))
    listed = workspace.cli("skills", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["use_count"] for row in json.loads(listed.stdout)] == [0]
    lock_problem = "usage not read: .usage.json.lock is a symbolic link inside"
    assert f"skilld: library default: {lock_problem} {workspace.skills}" in listed.stderr
    assert (workspace.root / "elsewhere.json").read_text() == json.dumps(ELSEWHERE)


def test_a_change_the_sidecar_must_record_is_refused_in_one_line(workspace: Workspace) -> None:
    linked_usage(workspace)
    for command in (("skills", "pin", "good"), ("usage", "use", "good")):
        changed = workspace.cli(*command)
        assert changed.returncode == 1, command
        assert changed.stderr == (
            f"skilld: refused: .usage.json is a symbolic link inside {workspace.skills}\n"
        )
    assert json.loads((workspace.root / "elsewhere.json").read_text()) == ELSEWHERE
    assert (workspace.skills / ".usage.json").is_symlink()


def test_the_curator_moves_nothing_it_cannot_judge(workspace: Workspace) -> None:
    linked_usage(workspace)
    curated = workspace.cli("curate", "--json")
    assert curated.returncode == 0, curated.stderr
    [lifecycle] = json.loads(curated.stdout)["lifecycle"]
    assert lifecycle["refused"].startswith(PROBLEM) and lifecycle["transitions"] == []


def test_the_panel_answers_every_page_past_a_linked_usage_file(workspace: Workspace) -> None:
    linked_usage(workspace)
    with running_panel(workspace) as running:
        panel = running.client
        for path in ("/", "/skills", "/api/skills", "/curator", "/skills/default/good"):
            assert page_status(panel, path) == 200, path
        assert PROBLEM in panel.get("/skills").text
        assert PROBLEM in panel.get("/curator").text
        [row] = panel.get("/api/skills").json()
        assert (row["name"], row["use_count"]) == ("good", 0)


def test_mcp_skill_list_answers_past_a_linked_usage_file(workspace: Workspace) -> None:
    linked_usage(workspace)
    session = measured(workspace, "mcp", stdin=mcp_lines(("skill_list", {})))
    assert not session.hung and session.returncode == 0, session.stderr
    assert "Traceback" not in session.stderr
    result = mcp_results(session.stdout)[2]
    assert not result.get("isError"), result
    listed = result["structuredContent"]
    assert [row["name"] for row in listed["skills"]] == ["good"]
    [problem] = listed["problems"]
    assert problem.startswith(f"library default: {PROBLEM}")


def test_the_daemon_goes_on_past_a_linked_usage_file(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """A tick whose session reads a skill of that library and learns another: the uses count
    in state.db only, the learned skill waits for the link to go (its usage record cannot be
    made), and no tick fails. Once the link is gone, the kept skill is written."""
    linked_usage(workspace)
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    read_good = {
        "id": "call_read",
        "type": "function",
        "function": {
            "name": "bash",
            "arguments": json.dumps({"cmd": f"cat {workspace.skills}/good/SKILL.md"}),
        },
    }
    workspace.add_session(
        "s1",
        [
            {"role": "user", "content": "Do the good thing."},
            {"role": "assistant", "content": "", "tool_calls": [read_good]},
            {"role": "tool", "tool_call_id": "call_read", "content": GOOD},
            *conversation("the flaky build"),
        ],
    )
    fake_llm.push(skill_reply("flaky-build"))

    for _ in range(2):
        once = workspace.cli("once")
        assert once.returncode == 0, once.stderr
    reasons = [event["reason"] for event in workspace.events("error")]
    assert not [reason for reason in reasons if reason.startswith("tick failed")], reasons
    assert reasons == [f"could not write: .usage.json is a symbolic link inside {workspace.skills}"]
    assert json.loads((workspace.root / "elsewhere.json").read_text()) == ELSEWHERE

    (workspace.skills / ".usage.json").unlink()
    assert workspace.cli("once").returncode == 0
    assert [event["skill"] for event in workspace.events("created")] == ["flaky-build"]
    assert len(fake_llm.requests) == 1  # the kept proposal, written without a second call


def test_a_usage_file_over_its_bound_is_named_and_the_listing_goes_on(
    workspace: Workspace,
) -> None:
    """Past 64 MiB the sidecar is not read (a cloned repository may hold one): refused like a
    link, and `skills list` goes on without its usage."""
    (workspace.skills / "good").mkdir()
    (workspace.skills / "good" / "SKILL.md").write_text(GOOD)
    with (workspace.skills / ".usage.json").open("wb") as sidecar:
        sidecar.truncate((64 << 20) + 1)  # sparse: costs no disk
    workspace.write_config()

    listed = workspace.cli("skills", "list", "--json")

    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    assert [row["name"] for row in json.loads(listed.stdout)] == ["good"]
    assert "skilld: library default: usage not read: .usage.json" in listed.stderr
