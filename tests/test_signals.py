"""`skill_signals`: every skill signal of a read, each counted once, by one owner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skilld.transcripts.model import Message, SessionRead, ToolCall
from skilld.transcripts.normalise import compact_arguments
from skilld.transcripts.signals import SkillSignal, skill_call_name, skill_signals

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
    assert arguments.endswith("chars]")
    with pytest.raises(ValueError):
        json.loads(arguments)

    assert skill_call_name(ToolCall(name="Skill", arguments=arguments)) == "long-one"


def test_skill_call_name_ignores_other_tools() -> None:
    assert skill_call_name(ToolCall(name="Read", arguments='{"skill": "x"}')) is None
    assert skill_call_name(ToolCall(name="Skill", arguments="not json")) is None
    assert skill_call_name(ToolCall(name="Skill", arguments='{"skill": "  "}')) is None
