from __future__ import annotations

import json
from pathlib import Path

import pytest

from skilld.transcripts.model import Message, ToolCall
from skilld.transcripts.normalise import compact_arguments
from skilld.transcripts.usage_inference import infer_skill_uses, skill_call_name

SKILLS = Path("/home/dev/.claude/skills")


def calling(name: str, arguments: object) -> Message:
    return Message(
        role="assistant", tool_calls=(ToolCall(name=name, arguments=compact_arguments(arguments)),)
    )


def test_skill_loading_tool_calls_of_each_agent() -> None:
    messages = [
        calling("Skill", {"skill": "pytest-fixtures"}),
        calling("Skill", {"command": "/release-notes"}),  # older Claude Code builds
        calling("skill", {"name": "deploy"}),  # DSH
        calling("skill_view", {"name": "triage"}),  # Hermes Agent
        calling("Skill", {"skill": "pytest-fixtures", "args": "-k slow"}),
    ]

    assert infer_skill_uses(messages, None) == [
        "pytest-fixtures",
        "release-notes",
        "deploy",
        "triage",
        "pytest-fixtures",
    ]


def test_reads_of_skill_files_count_as_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/dev")  # so that ~ and $HOME spell the skills dir
    messages = [
        calling("Read", {"file_path": f"{SKILLS}/pytest-fixtures/SKILL.md"}),
        calling("read_file", {"path": f"{SKILLS}/flat-skill.md"}),
        calling("view", {"path": f"{SKILLS}/viewed/SKILL.md", "view_range": [1, 40]}),
        calling("shell", {"command": ["bash", "-lc", f"cat {SKILLS}/from-shell/SKILL.md"]}),
        calling("Bash", {"command": "sed -n '1,80p' ~/.claude/skills/tilde/SKILL.md"}),
        calling("exec_command", {"cmd": "head -40 $HOME/.claude/skills/home-var/SKILL.md"}),
    ]

    uses = infer_skill_uses(messages, SKILLS)

    assert uses == ["pytest-fixtures", "flat-skill", "viewed", "from-shell", "tilde", "home-var"]


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
def test_things_that_are_not_uses(message: Message) -> None:
    assert infer_skill_uses([message], SKILLS) == []


def test_without_skills_dir_only_tool_calls_count() -> None:
    messages = [
        calling("Read", {"file_path": f"{SKILLS}/pytest-fixtures/SKILL.md"}),
        calling("skill", {"name": "deploy"}),
    ]

    assert infer_skill_uses(messages, None) == ["deploy"]


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
