"""Hostile local files (issue 34, findings 4-7): a FIFO, a socket, a link to a device, a 1 GB
sparse file or bytes that are not UTF-8 as a skill's `SKILL.md` hang nothing, exhaust no
memory and break no page; escape sequences are refused on write and never printed raw.

Every test drives a real `skilld` process (the CLI, `skilld mcp` on stdio, `skilld web` over
HTTP) with a deadline, and reads the peak RSS of the process that met the file."""

from __future__ import annotations

import json

import pytest

from skilld.state import StateDB
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, skill_reply
from tests.hostile_files import (
    CLEAR_SCREEN,
    CSI8,
    KINDS,
    OSC52,
    RSS_LIMIT_KIB,
    TITLE,
    mcp_lines,
    mcp_results,
    measured,
    page_status,
    plant,
    result_text,
    running_panel,
)
from tests.test_web import stage

GOOD = "---\nname: good\ndescription: A good skill.\n---\n1. Do it.\n"
SPECIAL = ("fifo", "socket", "device-link", "sparse")
RAW_CONTROLS = ("\x1b", "\x07", "\x9b")


def with_good_skill(workspace: Workspace) -> None:
    (workspace.skills / "good").mkdir()
    (workspace.skills / "good" / "SKILL.md").write_text(GOOD)


# -- finding 4: nothing hangs, nothing is read whole ------------------------------------------


def test_skills_list_lists_each_special_or_huge_file_as_broken_and_reads_none_whole(
    workspace: Workspace,
) -> None:
    with_good_skill(workspace)
    for kind in KINDS:
        plant(workspace.skills, kind)

    listed = measured(workspace, "skills", "list", "--json")

    assert not listed.hung and listed.returncode == 0, listed.stderr
    assert listed.peak_kib < RSS_LIMIT_KIB
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["good"]["broken"] is None
    for kind, (_plant, reason, _parsed) in KINDS.items():
        assert (reason in rows[kind]["broken"]) if reason else rows[kind]["broken"] is None, kind
    text = measured(workspace, "skills", "list")
    assert not text.hung and text.returncode == 0
    assert all(f"\n{kind} " in text.stdout and "broken" in text.stdout for kind in SPECIAL)


@pytest.mark.parametrize("kind", SPECIAL)
def test_skills_show_refuses_a_special_or_huge_file_at_once(
    workspace: Workspace, kind: str
) -> None:
    plant(workspace.skills, kind)
    shown = measured(workspace, "skills", "show", kind)
    assert not shown.hung and shown.returncode == 1
    assert shown.peak_kib < RSS_LIMIT_KIB
    reason = KINDS[kind][2]
    assert reason is not None and reason in shown.stderr
    assert f"{kind} is broken" in shown.stderr


def test_once_learns_past_a_fifo_and_a_sparse_skill_file(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    for kind in ("fifo", "sparse"):
        plant(workspace.skills, kind)
    workspace.add_session("s1", conversation("the flaky build"))
    fake_llm.push(skill_reply("flaky-build"))

    once = measured(workspace, "once")

    assert not once.hung and once.returncode == 0, once.stderr
    assert once.peak_kib < RSS_LIMIT_KIB
    assert (workspace.skills / "flaky-build" / "SKILL.md").is_file()


@pytest.mark.parametrize("kind", SPECIAL)
def test_mcp_lists_and_views_past_a_special_or_huge_file(workspace: Workspace, kind: str) -> None:
    with_good_skill(workspace)
    plant(workspace.skills, kind)

    session = measured(
        workspace,
        "mcp",
        stdin=mcp_lines(
            ("skill_list", {}),
            ("skill_view", {"name": kind}),
            ("skill_view", {"name": "good"}),
        ),
    )

    assert not session.hung and session.returncode == 0, session.stderr
    assert session.peak_kib < RSS_LIMIT_KIB
    assert "Traceback" not in session.stderr
    results = mcp_results(session.stdout)
    listed = {row["name"] for row in results[2]["structuredContent"]["skills"]}
    assert "good" in listed
    assert results[3]["isError"] and f"{kind} is broken" in result_text(results[3])
    assert "1. Do it." in result_text(results[4])


# -- findings 5 and 6: the panel reads what discovery reads, and no page breaks ----------------


def test_the_panel_reads_through_no_link_and_no_fifo_and_every_page_renders(
    workspace: Workspace,
) -> None:
    with_good_skill(workspace)
    outside = workspace.root / "private.md"
    outside.write_text("---\nname: leak\ndescription: x\n---\nPRIVATE-NOTES-OUT-OF-LIBRARY\n")
    (workspace.skills / "leak").mkdir()
    (workspace.skills / "leak" / "SKILL.md").symlink_to(outside)
    stage(workspace, "leak", "1. A new version.\n")
    pipe = workspace.skills / ".pipe"  # hidden: listed by nothing, reached through a link
    plant(workspace.skills, "fifo")
    (workspace.skills / "fifo" / "SKILL.md").rename(pipe)
    (workspace.skills / "piped").mkdir()
    (workspace.skills / "piped" / "SKILL.md").symlink_to(pipe)
    plant(workspace.skills, "latin")
    stage(workspace, "latin", "1. Valid text now.\n")
    workspace.write_config()

    with running_panel(workspace) as running:
        panel = running.client
        review = panel.get("/review")
        assert review.status_code == 200
        assert "PRIVATE-NOTES-OUT-OF-LIBRARY" not in review.text
        assert review.text.count("The current skill is broken") == 2
        assert "not valid UTF-8" in review.text and "links out of" in review.text
        for search in ("zzz-none", "good"):
            assert page_status(panel, f"/skills?q={search}") == 200
        skills = panel.get("/skills").text
        assert skills.count("<td>broken</td>") == 3
        for path in ("/", "/events", "/curator", "/skills/default/good"):
            assert page_status(panel, path) == 200, path
        for name in ("leak", "piped", "latin"):
            status = page_status(panel, f"/skills/default/{name}")
            assert status is not None and 400 <= status < 500, name


# -- finding 7: escape sequences are refused on write and never printed raw --------------------


@pytest.mark.parametrize(
    "sequence", [OSC52, CLEAR_SCREEN, TITLE, CSI8], ids=["OSC 52", "clear", "title", "CSI"]
)
def test_mcp_skill_write_refuses_an_escape_sequence_in_any_field(
    workspace: Workspace, sequence: str
) -> None:
    fields = {"name": "escapes", "description": "Escapes.", "content": "1. Go.\n"}
    calls = [
        ("skill_write", {**fields, "content": f"1. Go.{sequence}\n"}),
        ("skill_write", {**fields, "whenToUse": f"When{sequence} needed."}),
    ]
    session = measured(workspace, "mcp", stdin=mcp_lines(*calls))
    assert session.returncode == 0, session.stderr
    for number in (2, 3):
        result = mcp_results(session.stdout)[number]
        assert result["isError"] and "control character" in result_text(result)
    assert not (workspace.skills / "escapes").exists()


def test_skills_write_refuses_an_escape_sequence(workspace: Workspace) -> None:
    wrote = workspace.cli(
        "skills", "write", "escapes", "--description", "Escapes.", "--content", f"Go.{OSC52}\n"
    )
    assert wrote.returncode == 1
    assert "body contains U+001B, a control character" in wrote.stderr
    assert not (workspace.skills / "escapes").exists()


def test_a_learned_skill_with_an_escape_sequence_is_not_written(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.add_session("s1", conversation("the terminal"))
    hostile = skill_reply("clear-screen", f"1. Run it.{CLEAR_SCREEN}\n")
    fake_llm.push(*[hostile] * 4)
    once = workspace.cli("once")
    assert once.returncode == 0, once.stderr
    assert not (workspace.skills / "clear-screen").exists()


def test_escape_sequences_in_files_and_events_print_escaped(workspace: Workspace) -> None:
    plant(workspace.skills, "controls")
    hostile_dir = workspace.skills / f"title{TITLE}"
    hostile_dir.mkdir()
    (hostile_dir / "SKILL.md").write_text(GOOD)
    workspace.write_config()
    state = StateDB(workspace.state / "state.db")
    state.add_event("warning", skill="controls", reason=f"planted {OSC52} {CSI8} reason")
    state.close()

    shown = workspace.cli("skills", "show", "controls")
    listed = workspace.cli("skills", "list")
    events = workspace.cli("events")

    assert shown.returncode == listed.returncode == events.returncode == 0
    for output in (shown.stdout, shown.stderr, listed.stdout, events.stdout):
        assert not any(raw in output for raw in RAW_CONTROLS), output
    assert "\\x1b]52;c;ZWNobyBvd25lZA==\\x07\\x1b[2J" in shown.stdout
    assert "\\x9b31m" in shown.stdout and "Harmless text." in shown.stdout
    assert "title\\x1b]0;owned\\x07" in listed.stdout
    assert "planted \\x1b]52" in events.stdout
    exact = json.loads(workspace.cli("skills", "show", "controls", "--json").stdout)
    assert OSC52 in exact["text"]  # JSON keeps the text exact


def test_a_skill_file_is_read_at_most_to_the_bound(workspace: Workspace) -> None:
    """A file just over the bound is broken; one at it is read (the bound is a remote's)."""
    from skilld.sync.incoming import MAX_FILE_BYTES

    head = b"---\nname: %s\ndescription: Big.\n---\n"
    for name, size in (("at-bound", MAX_FILE_BYTES), ("over-bound", MAX_FILE_BYTES + 1)):
        (workspace.skills / name).mkdir()
        data = head % name.encode()
        (workspace.skills / name / "SKILL.md").write_bytes(data + b"x" * (size - len(data)))
    rows = {
        row["name"]: row for row in json.loads(workspace.cli("skills", "list", "--json").stdout)
    }
    assert rows["at-bound"]["broken"] is None
    assert "over the limit of 1,048,576" in rows["over-bound"]["broken"]
