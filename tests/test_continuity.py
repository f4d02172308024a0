"""Cursors survive what happens to the files around them, through the real `skilld once`.

A source root that goes away for a while (an unmounted volume, a sidecar whose mount arrives
late, `mv projects away; mv back`), a second file that shares a session's name, a source path
spelled through a symlink whose target is restored elsewhere, a file copied and renamed over
itself: none of these may make skilld read a session again from its start and pay the LLM for
content it already reflected.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.campaigns.test_bad_transcripts import Format, Writer
from tests.conftest import Workspace
from tests.fakellm import FakeLLM

#: Each file format: its source kind and whether its frames are compressed.
FORMATS = {
    "jsonl": ("jsonl", False),
    "claude-code": ("claude-code", False),
    "codex": ("codex", False),
    "dsh-zstd": ("dsh", True),
    "dsh-plain": ("dsh", False),
}
LABELS = list(FORMATS)


def windows(llm: FakeLLM) -> list[str]:
    return [request["messages"][1]["content"] for request in llm.requests]


def started(workspace: Workspace, llm: FakeLLM, label: str, root: Path) -> Writer:
    """A workspace reading one source of `label` at `root`, one finished session in it, and a
    first `skilld once` that reflected its one window."""
    kind, compressed = FORMATS[label]
    workspace.llm_url = llm.base_url
    workspace.sources = [{"kind": kind, "path": str(root)}]
    workspace.write_config()
    writer = Format(kind, root.resolve(), compressed).session("kept")
    writer.create(writer.encode(writer.turn("How is the build fixed?", "Run make test first.")))
    once(workspace)
    assert len(llm.requests) == 1
    return writer


def once(workspace: Workspace) -> None:
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr


def sessions_tracked(workspace: Workspace) -> int:
    status = workspace.cli("status", "--json")
    assert status.returncode == 0, status.stderr
    return int(json.loads(status.stdout)["sessions_tracked"])


def append_turn(writer: Writer, question: str, answer: str) -> None:
    with writer.path.open("ab") as handle:
        handle.write(writer.encode(writer.turn(question, answer)))


def only_new_turns_are_sent(workspace: Workspace, llm: FakeLLM, writer: Writer) -> None:
    """A turn appended to the session is its only content sent again: the cursor held."""
    sent = len(llm.requests)
    append_turn(writer, "And the docs?", "Build them with make docs.")
    once(workspace)
    assert len(llm.requests) == sent + 1
    assert "make docs" in windows(llm)[-1]
    assert "make test" not in windows(llm)[-1]


@pytest.mark.parametrize("label", LABELS)
def test_a_root_moved_away_and_back_is_not_read_again(
    workspace: Workspace, fake_llm: FakeLLM, label: str
) -> None:
    root = workspace.root / "transcripts"
    writer = started(workspace, fake_llm, label, root)

    away = workspace.root / "transcripts.away"
    root.rename(away)
    once(workspace)
    assert sessions_tracked(workspace) == 1  # the cursor outlived the absence
    away.rename(root)
    once(workspace)

    assert len(fake_llm.requests) == 1
    only_new_turns_are_sent(workspace, fake_llm, writer)


def test_a_hermes_database_moved_away_and_back_is_not_read_again(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    database = workspace.root / "hermes" / "state.db"
    database.parent.mkdir()
    with sqlite3.connect(database) as connection:
        connection.executescript(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, model_config TEXT, cwd TEXT);"
            "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT,"
            " role TEXT, content TEXT, timestamp REAL);"
            "INSERT INTO sessions VALUES ('h1', '{}', '/home/dev/shop');"
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES"
            " ('h1', 'user', 'How is the build fixed?', 1),"
            " ('h1', 'assistant', 'Run make test first.', 2);"
        )
    connection.close()
    workspace.llm_url = fake_llm.base_url
    workspace.sources = [{"kind": "hermes", "path": str(database)}]
    once(workspace)
    assert len(fake_llm.requests) == 1

    away = database.with_name("state.db.away")
    database.rename(away)
    once(workspace)
    away.rename(database)
    once(workspace)

    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize("kind", ["jsonl", "claude-code"])
def test_a_second_file_with_the_same_name_does_not_rekey_the_first(
    workspace: Workspace, fake_llm: FakeLLM, kind: str
) -> None:
    root = workspace.root / "transcripts"
    fmt = Format(kind, root)
    first, second = Writer(fmt, "first"), Writer(fmt, "second")
    if kind == "jsonl":
        first.path, second.path = root / "a" / "chat.jsonl", root / "b" / "chat.jsonl"
    else:  # one session id in two projects (a session copied between projects)
        first.path = root / "-home-dev-a" / "5f1c2e9a-7c1b-4c53-9d55-1a2b3c4d5e6f.jsonl"
        second.path = root / "-home-dev-b" / first.path.name
    workspace.llm_url = fake_llm.base_url
    workspace.sources = [{"kind": kind, "path": str(root)}]
    first.create(first.encode(first.turn("How is the build fixed?", "Run make test first.")))
    once(workspace)
    assert len(fake_llm.requests) == 1

    second.create(second.encode(second.turn("Why is the cache cold?", "Warm it with make warm.")))
    append_turn(first, "And the docs?", "Build them with make docs.")
    once(workspace)

    later = windows(fake_llm)[1:]
    assert len(later) == 2, later
    docs = [window for window in later if "make docs" in window]
    assert len(docs) == 1 and "make test" not in docs[0]
    assert any("make warm" in window for window in later)


@pytest.mark.parametrize("label", LABELS)
def test_a_source_path_through_a_symlink_survives_a_restore_elsewhere(
    workspace: Workspace, fake_llm: FakeLLM, label: str
) -> None:
    """`path = ~/link`, and between two runs the sessions come back as a copy in another place
    (a restored backup, a volume mounted anew): same content, new inodes, same spelling."""
    real = workspace.root / "volume-1"
    real.mkdir()
    link = workspace.root / "link"
    link.symlink_to(real)
    writer = started(workspace, fake_llm, label, link)

    restored = workspace.root / "volume-2"
    shutil.copytree(real, restored)
    swap = workspace.root / "link.new"
    swap.symlink_to(restored)
    os.replace(swap, link)
    shutil.rmtree(real)
    once(workspace)
    assert len(fake_llm.requests) == 1

    writer.path = restored / writer.path.relative_to(real)
    only_new_turns_are_sent(workspace, fake_llm, writer)


@pytest.mark.parametrize("label", LABELS)
def test_a_file_copied_and_renamed_over_itself_is_not_read_again(
    workspace: Workspace, fake_llm: FakeLLM, label: str
) -> None:
    writer = started(workspace, fake_llm, label, workspace.root / "transcripts")

    inode = writer.path.stat().st_ino
    copy = writer.path.with_name("copy.tmp")
    shutil.copyfile(writer.path, copy)
    os.replace(copy, writer.path)
    assert writer.path.stat().st_ino != inode
    once(workspace)
    assert len(fake_llm.requests) == 1

    only_new_turns_are_sent(workspace, fake_llm, writer)
