"""`skill_signals`: every skill signal of a read, each counted once, by one owner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skilld.transcripts.model import Message, SessionRead, ToolCall
from skilld.transcripts.normalise import ARGUMENTS_MAX_CHARS, compact_arguments, cut_text
from skilld.transcripts.signals import SkillSignal, skill_call_name, skill_signals
from tests.conftest import Workspace
from tests.fakellm import FakeLLM
from tests.test_dsh import DshSession

SKILLS = Path("/home/dev/.claude/skills")
TEAM = Path("/srv/team/skills")


def calling(name: str, arguments: object) -> Message:
    return Message(
        role="assistant", tool_calls=(ToolCall(name=name, arguments=compact_arguments(arguments)),)
    )


def read_of(*messages: Message, signals: list[SkillSignal] | None = None) -> SessionRead:
    return SessionRead(
        source="jsonl", session="jsonl:s", messages=list(messages), cursor={}, signals=signals or []
    )


def test_skill_tool_calls_of_each_agent() -> None:
    read = read_of(
        calling("Skill", {"skill": "pytest-fixtures"}),
        calling("Skill", {"command": "/release-notes"}),  # older Claude Code builds
        calling("skill", {"name": "deploy"}),  # DSH
        calling("skill_view", {"name": "triage"}),  # Hermes Agent: a view, as Hermes counts it
        calling("Skill", {"skill": "pytest-fixtures", "args": "-k slow"}),
    )

    assert skill_signals(read, []) == [
        SkillSignal("pytest-fixtures", "use"),
        SkillSignal("release-notes", "use"),
        SkillSignal("deploy", "use"),
        SkillSignal("triage", "view"),
        SkillSignal("pytest-fixtures", "use"),
    ]


def test_record_level_signals_come_first_then_the_messages_in_order() -> None:
    read = read_of(
        calling("Skill", {"skill": "pytest-fixtures"}),
        calling("skill_view", {"name": "triage"}),
        signals=[SkillSignal("deploy-notes", "use")],
    )

    assert skill_signals(read, []) == [
        SkillSignal("deploy-notes", "use"),
        SkillSignal("pytest-fixtures", "use"),
        SkillSignal("triage", "view"),
    ]


def test_reads_of_skill_files_are_uses_of_the_library_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/home/dev")  # so that ~ and $HOME spell the skills dir
    read = read_of(
        calling("Read", {"file_path": f"{SKILLS}/pytest-fixtures/SKILL.md"}),
        calling("read_file", {"path": f"{SKILLS}/flat-skill.md"}),
        calling("view", {"path": f"{SKILLS}/viewed/SKILL.md", "view_range": [1, 40]}),
        calling("shell", {"command": ["bash", "-lc", f"cat {SKILLS}/from-shell/SKILL.md"]}),
        calling("Bash", {"command": "sed -n '1,80p' ~/.claude/skills/tilde/SKILL.md"}),
        calling("exec_command", {"cmd": "head -40 $HOME/.claude/skills/home-var/SKILL.md"}),
        calling("Read", {"file_path": f"{TEAM}/shared/SKILL.md"}),
    )

    signals = skill_signals(read, [SKILLS, TEAM])

    own = [(name, "use", str(SKILLS)) for name in ("pytest-fixtures", "flat-skill", "viewed")]
    own += [(name, "use", str(SKILLS)) for name in ("from-shell", "tilde", "home-var")]
    assert [(s.name, s.kind, s.skills_dir) for s in signals] == [
        *own,
        ("shared", "use", str(TEAM)),
    ]


@pytest.mark.parametrize(
    "message",
    [
        calling("Write", {"file_path": f"{SKILLS}/new-skill/SKILL.md", "content": "x"}),
        calling("Edit", {"file_path": f"{SKILLS}/edited/SKILL.md"}),
        calling("Bash", {"command": f"rm -rf {SKILLS}/gone/SKILL.md"}),
        calling("Read", {"file_path": f"/tmp/copy{SKILLS}/elsewhere/SKILL.md"}),
        calling("Read", {"file_path": f"{SKILLS}/pytest-fixtures/references/api.md"}),
        calling("Read", {"file_path": f"{SKILLS}/pytest-fixtures/SKILL.md.bak"}),
        calling("Skill", {"other": "no skill named"}),
        Message(role="user", text=f"please cat {SKILLS}/x/SKILL.md"),
    ],
)
def test_things_that_are_no_signal(message: Message) -> None:
    assert skill_signals(read_of(message), [SKILLS]) == []


def test_without_skills_dirs_only_tool_calls_count() -> None:
    read = read_of(
        calling("Read", {"file_path": f"{SKILLS}/pytest-fixtures/SKILL.md"}),
        calling("skill", {"name": "deploy"}),
    )

    assert skill_signals(read, []) == [SkillSignal("deploy", "use")]


def test_skill_name_survives_arguments_cut_to_length() -> None:
    arguments = compact_arguments({"skill": "long-one", "args": "a" * 2000})
    assert len(arguments) <= ARGUMENTS_MAX_CHARS and "…[cut " in arguments
    assert skill_call_name(ToolCall(name="Skill", arguments=arguments)) == "long-one"
    # Arguments cut mid-JSON (a free-form input, or a row an older reader stored).
    cut = cut_text('{"skill":"long-one","args":"' + "a" * 2000 + '"}', ARGUMENTS_MAX_CHARS)
    with pytest.raises(ValueError):
        json.loads(cut)
    assert skill_call_name(ToolCall(name="Skill", arguments=cut)) == "long-one"


def test_skill_call_name_ignores_other_tools() -> None:
    assert skill_call_name(ToolCall(name="Read", arguments='{"skill": "x"}')) is None
    assert skill_call_name(ToolCall(name="Skill", arguments="not json")) is None
    assert skill_call_name(ToolCall(name="Skill", arguments='{"skill": "  "}')) is None


def test_the_daemon_counts_each_signal_once_with_its_kind(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """Through `skilld once`: a DSH `skill` call is one use (the reader and the messages used to
    count it twice), a Hermes-style `skill_view` is a view, a Claude Code `Skill` call and
    its `invoked_skills` attachment are one use."""
    workspace.llm_url = fake_llm.base_url
    dsh_root = workspace.root / "dsh"
    claude_root = workspace.root / "claude"
    workspace.sources = [
        {"kind": "jsonl", "path": str(workspace.sessions)},
        {"kind": "dsh", "path": str(dsh_root)},
        {"kind": "claude-code", "path": str(claude_root)},
    ]
    workspace.write_config()
    for name in ("pdf-tools", "triage", "deploy-notes"):
        written = workspace.cli(
            "skills", "write", name, "--description", f"About {name}.", "--content", "1. Do it."
        )
        assert written.returncode == 0, written.stderr

    dsh = DshSession(dsh_root, "s")
    dsh.append(
        dsh.turn_start(),
        dsh.user("make a pdf"),
        dsh.assistant(calls=(("c1", "skill", '{"name":"pdf-tools"}'),)),
        dsh.tool_call("c1", "skill", '{"name":"pdf-tools"}'),
        dsh.tool_result("c1", "skill loaded"),
        dsh.assistant("Done."),
        dsh.turn_end(),
    )
    view = {
        "id": "v1",
        "type": "function",
        "function": {"name": "skill_view", "arguments": '{"name": "triage"}'},
    }
    workspace.add_session(
        "viewer",
        [
            {"role": "user", "content": "how do we triage?"},
            {"role": "assistant", "content": "", "tool_calls": [view]},
            {"role": "tool", "tool_call_id": "v1", "content": "the triage skill"},
            {"role": "assistant", "content": "Like this."},
        ],
    )
    claude = claude_root / "-home-dev-shop" / "5f1c2e9a-7c1b-4c53-9d55-1a2b3c4d5e6f.jsonl"
    claude.parent.mkdir(parents=True)
    claude.write_text(
        "\n".join(json.dumps(record) for record in claude_skill_session("deploy-notes")) + "\n"
    )

    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr

    listed = workspace.cli("skills", "list", "--json")
    counts = {s["name"]: (s["use_count"], s["view_count"]) for s in json.loads(listed.stdout)}
    assert counts == {"pdf-tools": (1, 0), "triage": (0, 1), "deploy-notes": (1, 0)}


def claude_skill_session(skill: str) -> list[dict[str, object]]:
    """A Claude Code session that loads `skill` with the Skill tool, which also writes an
    `invoked_skills` attachment naming it."""
    envelope = {"sessionId": "5f1c2e9a-7c1b-4c53-9d55-1a2b3c4d5e6f", "cwd": "/home/dev/shop"}
    call = {"type": "tool_use", "id": "t1", "name": "Skill", "input": {"skill": skill}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": f"Launching skill: {skill}"}
    attachment = {"type": "invoked_skills", "skills": [{"name": skill, "content": "..."}]}
    return [
        {**envelope, "type": "user", "message": {"role": "user", "content": "write notes"}},
        {**envelope, "type": "assistant", "message": {"id": "m1", "content": [call]}},
        {**envelope, "type": "user", "message": {"role": "user", "content": [result]}},
        {**envelope, "type": "attachment", "attachment": attachment},
        {
            **envelope,
            "type": "assistant",
            "message": {"id": "m2", "content": [{"type": "text", "text": "Written."}]},
        },
    ]
