"""A session's identity includes its source (issue 39, item 7): two sources of one kind that
hold same-named files keep two sessions, each reflected alone into its own library."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply
from tests.test_sources import Hermes

TOPICS = {"alpha": "the alpha build", "beta": "the beta deploy"}


def write_session(path: Path, messages: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")


def two_sources(workspace: Workspace, fake_llm: FakeLLM) -> Workspace:
    workspace.llm_url = fake_llm.base_url
    workspace.libraries = [
        {"name": name, "dir": str(workspace.root / f"{name}-skills")} for name in TOPICS
    ]
    workspace.sources = [
        {"kind": "jsonl", "path": str(workspace.root / name), "library": name} for name in TOPICS
    ]
    workspace.write_config()
    return workspace


def skill_text(workspace: Workspace, library: str, name: str) -> str:
    return (workspace.root / f"{library}-skills" / name / "SKILL.md").read_text(encoding="utf-8")


def lesson_by_topic(request: dict[str, Any]) -> Reply:
    window = request["messages"][-1]["content"]
    for name, topic in TOPICS.items():
        if topic in window:
            return skill_reply(
                f"{name}-lesson",
                f"1. Look at {topic} logs.\n2. Check the {name} settings.\n",
                description=f"Repair {topic} when it breaks.",
                when=f"When {topic} fails.",
            )
    return skip_reply()


def test_same_named_files_of_two_jsonl_sources_are_two_sessions_in_two_libraries(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    two_sources(workspace, fake_llm)
    for name, topic in TOPICS.items():
        write_session(workspace.root / name / "same.jsonl", conversation(topic))
    fake_llm.responder = lesson_by_topic

    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr

    windows = [request["messages"][-1]["content"] for request in fake_llm.requests]
    assert len(windows) == 2
    for window in windows:
        assert sum(topic in window for topic in TOPICS.values()) == 1, window
    for name in TOPICS:
        library = workspace.root / f"{name}-skills"
        assert sorted(p.name for p in library.iterdir() if not p.name.startswith(".")) == [
            f"{name}-lesson"
        ]
    sessions = {event["skill"]: event["session"] for event in workspace.events("created")}
    # The first source to store the key keeps it; the other's is qualified by its source.
    assert sessions["alpha-lesson"] == "jsonl:same"
    assert re.fullmatch(r"jsonl@beta-[0-9a-f]{8}:same", sessions["beta-lesson"])
    for name in TOPICS:
        text = skill_text(workspace, name, f"{name}-lesson")
        assert f"source-session: {sessions[f'{name}-lesson']}\n" in text


def test_a_session_stored_before_a_second_source_came_keeps_its_key_and_watermark(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """A state.db from before keys were qualified: alpha's `jsonl:same` is read and reflected
    with alpha alone. Then beta (with its own `same.jsonl`) is added and alpha's file grows:
    alpha's session goes on from its watermark under its old key, beta's is a session apart."""
    workspace.llm_url = fake_llm.base_url
    workspace.libraries = [
        {"name": name, "dir": str(workspace.root / f"{name}-skills")} for name in TOPICS
    ]
    workspace.sources = [
        {"kind": "jsonl", "path": str(workspace.root / "alpha"), "library": "alpha"}
    ]
    workspace.write_config()
    alpha = workspace.root / "alpha" / "same.jsonl"
    write_session(alpha, conversation(TOPICS["alpha"]))
    fake_llm.responder = lesson_by_topic
    assert workspace.cli("once").returncode == 0
    [first] = fake_llm.requests
    assert first["messages"][-1]["content"].startswith("Session jsonl:same (jsonl), messages 0–7")

    two_sources(workspace, fake_llm)
    write_session(workspace.root / "beta" / "same.jsonl", conversation(TOPICS["beta"]))
    with alpha.open("a", encoding="utf-8") as handle:
        for message in conversation("the alpha release"):
            handle.write(json.dumps(message) + "\n")
    fake_llm.requests.clear()
    assert workspace.cli("once").returncode == 0

    windows = sorted(request["messages"][-1]["content"] for request in fake_llm.requests)
    assert len(windows) == 2, windows
    # The transcripts only: since issue 39 the library's descriptions follow them as data.
    grown, beta = (window.split("<skills-", 1)[0] for window in windows)
    assert grown.startswith("Session jsonl:same (jsonl), messages 8–15")
    assert "the alpha release" in grown and TOPICS["alpha"] not in grown
    assert TOPICS["beta"] not in grown
    assert re.match(r"Session jsonl@beta-[0-9a-f]{8}:same \(jsonl\), messages 0–7", beta)
    assert TOPICS["beta"] in beta and "alpha" not in beta
    assert (workspace.root / "beta-skills" / "beta-lesson" / "SKILL.md").exists()
    assert not (workspace.root / "alpha-skills" / "beta-lesson").exists()


def test_a_root_file_named_like_a_nested_one_is_a_session_of_its_own(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """`nested/same.jsonl` holds `jsonl:same`; a later `same.jsonl` at the root, whose path key
    is that same `jsonl:same`, gets a key of its own: the nested file keeps its cursor and is
    never read again."""
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    write_session(workspace.sessions / "nested" / "same.jsonl", conversation(TOPICS["alpha"]))
    fake_llm.responder = lesson_by_topic
    assert workspace.cli("once").returncode == 0
    write_session(workspace.sessions / "same.jsonl", conversation(TOPICS["beta"]))
    assert workspace.cli("once").returncode == 0
    assert workspace.cli("once").returncode == 0

    windows = [request["messages"][-1]["content"] for request in fake_llm.requests]
    assert len(windows) == 2, windows  # each transcript once, nothing read twice
    assert windows[0].startswith("Session jsonl:same (jsonl)") and TOPICS["alpha"] in windows[0]
    assert windows[1].startswith("Session jsonl:same~2 (jsonl)") and TOPICS["beta"] in windows[1]


def test_one_session_id_in_two_hermes_databases_is_two_sessions(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """Hermes keys a session by its row id in its database, not by a file: the same id in two
    Hermes homes is still two sessions."""
    workspace.llm_url = fake_llm.base_url
    workspace.libraries = [
        {"name": name, "dir": str(workspace.root / f"{name}-skills")} for name in TOPICS
    ]
    workspace.sources = []
    for name, topic in TOPICS.items():
        database = Hermes(workspace.root / f"{name}.db")
        database.session("same")
        database.message("same", "user", f"Please fix {topic}.")
        database.message("same", "assistant", f"Fixed {topic}: run make test first.")
        database.close()
        workspace.sources.append(
            {"kind": "hermes", "path": str(workspace.root / f"{name}.db"), "library": name}
        )
    workspace.write_config()
    fake_llm.responder = lesson_by_topic

    assert workspace.cli("once").returncode == 0

    windows = [request["messages"][-1]["content"] for request in fake_llm.requests]
    assert len(windows) == 2, windows
    for window in windows:
        assert sum(topic in window for topic in TOPICS.values()) == 1, window
    for name in TOPICS:
        assert (workspace.root / f"{name}-skills" / f"{name}-lesson" / "SKILL.md").exists()
        assert not (workspace.root / f"{name}-skills" / f"{other(name)}-lesson").exists()


def other(name: str) -> str:
    return next(each for each in TOPICS if each != name)
