from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from skilld.config import SOURCE_KINDS
from skilld.routing import default_path
from skilld.transcripts._filesource import SessionFile, Whereabouts, may_forget, settle_keys
from skilld.transcripts.claude_code import ClaudeCodeSource
from skilld.transcripts.codex import CodexSource
from skilld.transcripts.hermes import HermesSource
from skilld.transcripts.jsonl import JsonlSource
from skilld.transcripts.model import Message, ScanResult, SessionRead, Source
from skilld.transcripts.registry import build_source
from skilld.transcripts.signals import SkillSignal

# --------------------------------------------------------------------------- helpers


class Store:
    """What the supervisor does with scans: keep cursors of seen sessions, forget the rest."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.cursors: dict[str, dict[str, Any]] = {}

    def scan(self, **options: Any) -> ScanResult:
        result = self.source.scan(dict(self.cursors), **options)
        for read in result.reads:
            # Cursors are stored as JSON: every one must survive the round trip.
            self.cursors[read.session] = json.loads(json.dumps(read.cursor))
            assert self.cursors[read.session] == read.cursor
        self.cursors = {key: value for key, value in self.cursors.items() if key in result.seen}
        return result


def write_lines(path: Path, records: list[Any], mode: str = "w") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as handle:
        for record in records:
            handle.write((record if isinstance(record, str) else json.dumps(record)) + "\n")


def only_read(result: ScanResult) -> SessionRead:
    assert len(result.reads) == 1, result.reads
    return result.reads[0]


def shape(messages: list[Message]) -> list[tuple[str, str, tuple[str, ...], str | None]]:
    return [
        (
            message.role,
            message.text,
            tuple(call.name for call in message.tool_calls),
            message.tool_name,
        )
        for message in messages
    ]


def set_mtime(path: Path, epoch: float) -> None:
    os.utime(path, (epoch, epoch))


# --------------------------------------------------------------------------- jsonl

CHAT = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Rename the config loader", "timestamp": "2025-03-01T10:00:00Z"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "src/config.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "def load():\n" + "x" * 5000},
    {"role": "assistant", "content": [{"type": "text", "text": "Renamed to load_config."}]},
]


def test_jsonl_normalises_a_chat_session(tmp_path: Path) -> None:
    write_lines(tmp_path / "s1.jsonl", CHAT)
    source = JsonlSource(tmp_path, tool_result_max_chars=100)

    result = source.scan({})

    read = only_read(result)
    assert read.session == "jsonl:s1"
    assert read.source == "jsonl"
    assert result.seen == {"jsonl:s1"}
    assert shape(read.messages) == [
        ("user", "Rename the config loader", (), None),
        ("assistant", "", ("read_file",), None),
        ("tool", read.messages[2].text, (), "read_file"),
        ("assistant", "Renamed to load_config.", (), None),
    ]
    assert read.messages[0].timestamp == "2025-03-01T10:00:00Z"
    assert read.messages[1].tool_calls[0].arguments == '{"path":"src/config.py"}'
    assert read.messages[1].tool_calls[0].call_id == "call_1"
    tool_text = read.messages[2].text
    assert tool_text.startswith("def load():\nxxx")
    assert tool_text.endswith("…[cut 4912 chars]")
    assert read.messages[2].tool_call_id == "call_1"
    assert read.messages[-1].finishes_turn
    assert read.mtime == pytest.approx(os.stat(tmp_path / "s1.jsonl").st_mtime)


def test_jsonl_appended_lines_yield_only_new_messages(tmp_path: Path) -> None:
    session = tmp_path / "s1.jsonl"
    write_lines(session, CHAT[:2])
    store = Store(JsonlSource(tmp_path))
    assert len(only_read(store.scan()).messages) == 1

    write_lines(session, [{"role": "assistant", "content": "Done."}], mode="a")
    read = only_read(store.scan())

    assert shape(read.messages) == [("assistant", "Done.", (), None)]
    assert read.reset is False
    unchanged = store.scan()
    assert unchanged.reads == []
    assert unchanged.seen == {"jsonl:s1"}


def test_jsonl_tool_name_is_joined_across_reads(tmp_path: Path) -> None:
    session = tmp_path / "s1.jsonl"
    write_lines(session, CHAT[:3])
    store = Store(JsonlSource(tmp_path))
    store.scan()
    assert store.cursors["jsonl:s1"]["state"] == {"calls": {"call_1": "read_file"}}

    write_lines(session, [CHAT[3]], mode="a")
    read = only_read(store.scan())

    assert read.messages[0].tool_name == "read_file"
    assert "state" not in read.cursor  # the answered call is forgotten


def test_jsonl_partial_line_waits_for_completion(tmp_path: Path) -> None:
    session = tmp_path / "s1.jsonl"
    session.write_text('{"role": "user", "content": "first"}\n{"role": "assistant", "con')
    store = Store(JsonlSource(tmp_path))
    assert shape(only_read(store.scan()).messages) == [("user", "first", (), None)]

    with open(session, "a") as handle:
        handle.write('tent": "second"}\n')
    read = only_read(store.scan())

    assert shape(read.messages) == [("assistant", "second", (), None)]
    assert read.skipped_lines == 0


def test_jsonl_truncated_file_is_reread_with_reset(tmp_path: Path) -> None:
    session = tmp_path / "s1.jsonl"
    write_lines(session, CHAT)
    store = Store(JsonlSource(tmp_path))
    store.scan()

    write_lines(session, [{"role": "user", "content": "fresh start"}])
    read = only_read(store.scan())

    assert read.reset is True
    assert shape(read.messages) == [("user", "fresh start", (), None)]


def test_jsonl_malformed_lines_are_counted_never_fatal(tmp_path: Path) -> None:
    write_lines(
        tmp_path / "s1.jsonl",
        [
            "{not json",
            "[1, 2, 3]",
            "[" * 100_000,
            "",
            {"role": "narrator", "content": "unknown role: skipped silently"},
            {"role": "user", "content": "still read"},
        ],
    )

    result = JsonlSource(tmp_path).scan({})

    read = only_read(result)
    assert shape(read.messages) == [("user", "still read", (), None)]
    assert read.skipped_lines == 3
    assert result.skipped_lines == 0  # counted once, on the session's read


def test_jsonl_colliding_stems_use_relative_paths(tmp_path: Path) -> None:
    write_lines(tmp_path / "a" / "chat.jsonl", [{"role": "user", "content": "a"}])
    write_lines(tmp_path / "b" / "chat.jsonl", [{"role": "user", "content": "b"}])
    write_lines(tmp_path / "c" / "solo.jsonl", [{"role": "user", "content": "c"}])
    (tmp_path / "notes.txt").write_text("not a session")

    result = JsonlSource(tmp_path).scan({})

    assert result.seen == {"jsonl:a/chat", "jsonl:b/chat", "jsonl:solo"}
    texts = {read.session: read.messages[0].text for read in result.reads}
    assert texts == {"jsonl:a/chat": "a", "jsonl:b/chat": "b", "jsonl:solo": "c"}


def test_jsonl_single_file_and_custom_glob(tmp_path: Path) -> None:
    write_lines(tmp_path / "one.jsonl", [{"role": "user", "content": "x"}])
    write_lines(tmp_path / "deep" / "two.log", [{"role": "user", "content": "y"}])

    assert JsonlSource(tmp_path / "one.jsonl").scan({}).seen == {"jsonl:one"}
    assert JsonlSource(tmp_path, glob="**/*.log").scan({}).seen == {"jsonl:two"}
    assert JsonlSource(tmp_path, glob="*.jsonl").scan({}).seen == {"jsonl:one"}


def test_jsonl_missing_root_is_empty_not_an_error(tmp_path: Path) -> None:
    result = JsonlSource(tmp_path / "nowhere").scan({})

    assert (result.reads, result.seen, result.skipped_lines, result.errors) == ([], set(), 0, [])


def test_vanished_files_drop_out_of_seen(tmp_path: Path) -> None:
    write_lines(tmp_path / "keep.jsonl", [{"role": "user", "content": "k"}])
    write_lines(tmp_path / "gone.jsonl", [{"role": "user", "content": "g"}])
    store = Store(JsonlSource(tmp_path))
    assert store.scan().seen == {"jsonl:keep", "jsonl:gone"}

    (tmp_path / "gone.jsonl").unlink()
    result = store.scan()

    assert result.seen == {"jsonl:keep"}
    assert result.errors == []
    assert set(store.cursors) == {"jsonl:keep"}


def test_start_new_at_end_before_skips_old_history_and_reads_new_sessions(
    tmp_path: Path,
) -> None:
    old = tmp_path / "old.jsonl"
    write_lines(old, CHAT)
    set_mtime(old, time.time() - 7200)
    fresh = tmp_path / "fresh.jsonl"
    write_lines(fresh, [{"role": "user", "content": "new session"}])
    store = Store(JsonlSource(tmp_path))

    result = store.scan(start_new_at_end_before=time.time() - 3600)

    reads = {read.session: read for read in result.reads}
    assert reads["jsonl:old"].messages == []
    assert reads["jsonl:old"].cursor["offset"] == os.stat(old).st_size
    assert shape(reads["jsonl:fresh"].messages) == [("user", "new session", (), None)]

    write_lines(old, [{"role": "user", "content": "continued"}], mode="a")
    later = store.scan(start_new_at_end_before=time.time() - 3600)
    assert shape(only_read(later).messages) == [("user", "continued", (), None)]


def test_bad_files_are_recorded_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "directory.jsonl").mkdir()
    (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"role": "user", "content": "caf\xe9"}\n')
    locked = tmp_path / "locked.jsonl"
    write_lines(locked, [{"role": "user", "content": "secret"}])
    write_lines(tmp_path / "good.jsonl", [{"role": "user", "content": "fine"}])

    real_open = os.open

    def deny_locked(path: Any, *args: Any, **kwargs: Any) -> int:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny_locked)
    result = JsonlSource(tmp_path).scan({})

    texts = {read.session: read.messages[0].text for read in result.reads}
    assert texts == {"jsonl:good": "fine", "jsonl:latin1": "caf\ufffd"}
    assert len(result.errors) == 3
    assert any("directory.jsonl: is a directory" in error for error in result.errors)
    assert any("loop.jsonl" in error for error in result.errors)
    assert any("locked.jsonl: Permission denied" in error for error in result.errors)
    # Unreadable-now sessions stay seen so a stored cursor is not forgotten.
    assert "jsonl:locked" in result.seen


def test_symlinked_directories_are_not_followed(tmp_path: Path) -> None:
    write_lines(tmp_path / "real" / "s.jsonl", [{"role": "user", "content": "once"}])
    (tmp_path / "real" / "again").symlink_to(tmp_path / "real")

    result = JsonlSource(tmp_path).scan({})

    assert result.seen == {"jsonl:s"}
    assert result.errors == []


def test_a_missing_root_keeps_every_cursor(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    write_lines(root / "a" / "one.jsonl", [{"role": "user", "content": "one"}])
    store = Store(JsonlSource(root))
    store.scan()
    store.cursors["codex:other"] = {}  # another kind's cursor is none of this source's business

    root.rename(tmp_path / "away")
    result = JsonlSource(root).scan(store.cursors)

    assert (result.reads, result.seen, result.skipped_lines, result.errors) == (
        [],
        {"jsonl:one"},
        0,
        [],
    )


def test_an_unreadable_root_or_sub_tree_keeps_the_cursors_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_lines(tmp_path / "a" / "one.jsonl", [{"role": "user", "content": "one"}])
    write_lines(tmp_path / "b" / "two.jsonl", [{"role": "user", "content": "two"}])
    store = Store(JsonlSource(tmp_path))
    store.scan()
    real_scandir = os.scandir

    def refusing(denied: set[Path]) -> Any:
        def scandir(path: Any = ".") -> Any:
            if Path(path) in denied:
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        return scandir

    # Permission bits do not stop root, so the refusal comes from listing itself.
    monkeypatch.setattr(os, "scandir", refusing({tmp_path / "a"}))
    sub_tree = JsonlSource(tmp_path).scan(store.cursors)
    assert sub_tree.seen == {"jsonl:one", "jsonl:two"}
    assert any("Permission denied" in error for error in sub_tree.errors)

    monkeypatch.setattr(os, "scandir", refusing({tmp_path}))
    whole_root = JsonlSource(tmp_path).scan(store.cursors)
    assert whole_root.seen == {"jsonl:one", "jsonl:two"}


def test_a_missing_sub_tree_keeps_its_cursors_a_deleted_file_does_not(tmp_path: Path) -> None:
    write_lines(tmp_path / "a" / "one.jsonl", [{"role": "user", "content": "one"}])
    write_lines(tmp_path / "b" / "two.jsonl", [{"role": "user", "content": "two"}])
    write_lines(tmp_path / "b" / "three.jsonl", [{"role": "user", "content": "three"}])
    store = Store(JsonlSource(tmp_path))
    store.scan()

    (tmp_path / "a").rename(tmp_path.parent / f"{tmp_path.name}-a-away")
    (tmp_path / "b" / "three.jsonl").unlink()
    result = store.scan()

    assert result.seen == {"jsonl:one", "jsonl:two"}
    assert set(store.cursors) == {"jsonl:one", "jsonl:two"}


def test_an_empty_mount_point_is_not_the_directory_that_held_the_files(tmp_path: Path) -> None:
    """An unmounted volume leaves its mount point, empty, on another device."""
    write_lines(tmp_path / "one.jsonl", [{"role": "user", "content": "one"}])
    store = Store(JsonlSource(tmp_path))
    store.scan()
    from_the_volume = {"jsonl:one": {**store.cursors["jsonl:one"], "dev": -1}}

    (tmp_path / "one.jsonl").unlink()
    result = JsonlSource(tmp_path).scan(from_the_volume)

    assert result.seen == {"jsonl:one"}


def test_may_forget_only_gone_files_of_directories_still_there() -> None:
    same_device = 7
    assert may_forget(Whereabouts(file_there=False, holder_device=7), same_device)
    assert may_forget(Whereabouts(file_there=True, holder_device=7), same_device)
    assert may_forget(Whereabouts(file_there=True, holder_device=9), same_device)
    assert not may_forget(Whereabouts(file_there=False, holder_device=9), same_device)
    assert not may_forget(Whereabouts(file_there=False, holder_device=None), same_device)
    assert may_forget(None, None)  # a cursor that names no file, under a listed root


def test_a_second_file_with_the_same_stem_does_not_rekey_the_first(tmp_path: Path) -> None:
    first = tmp_path / "a" / "chat.jsonl"
    write_lines(first, [{"role": "user", "content": "first"}])
    store = Store(JsonlSource(tmp_path))
    assert store.scan().seen == {"jsonl:chat"}

    write_lines(tmp_path / "b" / "chat.jsonl", [{"role": "user", "content": "second"}])
    write_lines(first, [{"role": "assistant", "content": "more"}], mode="a")
    result = store.scan()

    texts = {read.session: [m.text for m in read.messages] for read in result.reads}
    assert texts == {"jsonl:chat": ["more"], "jsonl:b/chat": ["second"]}
    # A fresh source (a restarted daemon) settles the same keys from the cursors alone.
    assert JsonlSource(tmp_path).scan(store.cursors).seen == {"jsonl:chat", "jsonl:b/chat"}


def test_a_key_held_by_a_file_away_for_now_is_not_given_to_a_newcomer(tmp_path: Path) -> None:
    write_lines(tmp_path / "a" / "chat.jsonl", [{"role": "user", "content": "first"}])
    store = Store(JsonlSource(tmp_path))
    store.scan()

    (tmp_path / "a").rename(tmp_path.parent / f"{tmp_path.name}-away")
    write_lines(tmp_path / "b" / "chat.jsonl", [{"role": "user", "content": "second"}])

    assert store.scan().seen == {"jsonl:chat", "jsonl:b/chat"}


def test_a_cursor_that_names_no_file_gets_its_name_without_a_reread(tmp_path: Path) -> None:
    """Cursors written before they named their file: one quiet read names it."""
    write_lines(tmp_path / "one.jsonl", [{"role": "user", "content": "one"}])
    store = Store(JsonlSource(tmp_path))
    store.scan()
    older = {key: value for key, value in store.cursors["jsonl:one"].items() if key != "file"}

    read = only_read(JsonlSource(tmp_path).scan({"jsonl:one": older}))

    assert (read.messages, read.reset) == ([], False)
    assert read.cursor == store.cursors["jsonl:one"]


def test_settle_keys_is_deterministic_for_new_files() -> None:
    files = [
        SessionFile(Path("/r/a/chat.jsonl"), "jsonl:chat", relative="a/chat.jsonl"),
        SessionFile(Path("/r/b/chat.jsonl"), "jsonl:chat", relative="b/chat.jsonl"),
        SessionFile(Path("/r/c/solo.jsonl"), "jsonl:solo", relative="c/solo.jsonl"),
    ]
    fresh = [file.key for file in settle_keys(files, {})]
    assert fresh == ["jsonl:a/chat", "jsonl:b/chat", "jsonl:solo"]
    assert [file.key for file in settle_keys(files[::-1], {})] == fresh[::-1]
    owned = settle_keys(files, {"b/chat.jsonl": "jsonl:chat"})
    assert [file.key for file in owned] == ["jsonl:a/chat", "jsonl:chat", "jsonl:solo"]


def test_cursors_name_their_file_however_the_root_is_spelled(tmp_path: Path) -> None:
    real = tmp_path / "real"
    write_lines(real / "a" / "one.jsonl", [{"role": "user", "content": "one"}])
    (tmp_path / "link").symlink_to(real)
    store = Store(JsonlSource(tmp_path / "link"))
    store.scan()
    assert store.cursors["jsonl:one"]["file"] == "a/one.jsonl"

    write_lines(real / "a" / "one.jsonl", [{"role": "user", "content": "two"}], mode="a")
    read = only_read(JsonlSource(real).scan(store.cursors))
    assert (read.reset, [m.text for m in read.messages]) == (False, ["two"])


# --------------------------------------------------------------------------- claude-code

SESSION = "5f1c2e9a-7c1b-4c53-9d55-1a2b3c4d5e6f"
ENVELOPE = {
    "parentUuid": None,
    "isSidechain": False,
    "userType": "external",
    "cwd": "/home/dev/shop",
    "sessionId": SESSION,
    "version": "2.1.12",
    "gitBranch": "main",
}


def claude(record_type: str, message: Any = None, **fields: Any) -> dict[str, Any]:
    record = {**ENVELOPE, "type": record_type, "uuid": f"u{len(fields)}", **fields}
    record.setdefault("timestamp", "2026-01-20T11:57:18.000Z")
    if message is not None:
        record["message"] = message
    return record


def assistant(message_id: str, *content: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return claude(
        "assistant",
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-5",
            "content": list(content),
            "stop_reason": None,
        },
        **fields,
    )


CLAUDE_SESSION = [
    {
        "type": "queue-operation",
        "operation": "dequeue",
        "timestamp": "2026-01-20T11:57:17Z",
        "sessionId": SESSION,
    },
    {
        "type": "file-history-snapshot",
        "messageId": "m0",
        "snapshot": {"trackedFileBackups": {}},
        "isSnapshotUpdate": False,
    },
    claude(
        "user",
        {
            "role": "user",
            "content": "<local-command-caveat>Caveat: generated by local commands"
            "</local-command-caveat>",
        },
        isMeta=True,
    ),
    claude("user", {"role": "user", "content": "Fix the failing checkout test"}),
    assistant("msg_1", {"type": "thinking", "thinking": "Look first.", "signature": "sig"}),
    assistant("msg_1", {"type": "text", "text": "I'll read the test."}),
    assistant(
        "msg_1",
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "Read",
            "input": {"file_path": "/home/dev/shop/tests/test_checkout.py"},
        },
    ),
    {"type": "progress", "data": {"type": "hook_progress"}, "toolUseID": "toolu_1"},
    claude(
        "user",
        {
            "role": "user",
            "content": [
                {
                    "tool_use_id": "toolu_1",
                    "type": "tool_result",
                    "content": "1→def test_total():" + "z" * 500,
                },
            ],
        },
        toolUseResult={"type": "text"},
    ),
    assistant(
        "msg_2",
        {
            "type": "tool_use",
            "id": "toolu_2",
            "name": "Skill",
            "input": {"skill": "pytest-fixtures"},
        },
    ),
    claude(
        "user",
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "Launching skill: pytest-fixtures"}],
                },
            ],
        },
    ),
    claude(
        "user",
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Base directory for this skill: /home/dev/.claude/skills/...",
                },
            ],
        },
        isMeta=True,
        sourceToolUseID="toolu_2",
    ),
    claude(
        "attachment",
        attachment={
            "type": "invoked_skills",
            "skills": [
                {
                    "name": "pytest-fixtures",
                    "path": "userSettings:pytest-fixtures",
                    "content": "...",
                },
                {"name": "deploy-notes", "path": "userSettings:deploy-notes", "content": "..."},
            ],
        },
    ),
    claude("attachment", attachment={"type": "skill_listing", "content": "- a: b"}),
    claude("user", {"role": "user", "content": "subagent prompt"}, isSidechain=True),
    claude("system", subtype="turn_duration", durationMs=1234),
    assistant("msg_3", {"type": "text", "text": "Fixed: the test passes now."}),
    claude(
        "assistant",
        {
            "id": "e",
            "model": "<synthetic>",
            "role": "assistant",
            "content": [{"type": "text", "text": "API Error: 500"}],
        },
        isApiErrorMessage=True,
    ),
    claude("user", {"role": "user", "content": "<local-command-stdout>ok</local-command-stdout>"}),
    {"type": "summary", "summary": "Fix checkout test", "leafUuid": "u1"},
    {"type": "custom-title", "sessionId": SESSION, "customTitle": "checkout"},
]


def claude_project(root: Path) -> Path:
    project = root / "-home-dev-shop"
    write_lines(project / f"{SESSION}.jsonl", CLAUDE_SESSION)
    return project


def test_claude_code_normalises_a_session(tmp_path: Path) -> None:
    claude_project(tmp_path)

    result = ClaudeCodeSource(tmp_path, tool_result_max_chars=50).scan({})

    read = only_read(result)
    assert read.session == f"claude-code:{SESSION}"
    assert read.label is None
    assert result.errors == []
    assert shape(read.messages) == [
        ("user", "Fix the failing checkout test", (), None),
        ("assistant", "I'll read the test.", ("Read",), None),
        ("tool", read.messages[2].text, (), "Read"),
        ("assistant", "", ("Skill",), None),
        ("tool", "Launching skill: pytest-fixtures", (), "Skill"),
        ("assistant", "Fixed: the test passes now.", (), None),
    ]
    assert read.messages[1].tool_calls[0].arguments == (
        '{"file_path":"/home/dev/shop/tests/test_checkout.py"}'
    )
    assert read.messages[2].text.endswith("…[cut 469 chars]")
    assert read.messages[2].tool_call_id == "toolu_1"
    # The Skill call is visible in messages (skill_signals counts it there); the attachment
    # adds only the skill not already counted.
    # Dated when the session used it (the attachment record's time), not when it was read.
    assert read.signals == [SkillSignal("deploy-notes", "use", at="2026-01-20T11:57:18.000Z")]
    assert read.cwd == "/home/dev/shop"
    assert read.skipped_lines == 0
    assert read.messages[0].timestamp == "2026-01-20T11:57:18.000Z"


def test_claude_code_joins_results_and_remembers_skills_across_reads(tmp_path: Path) -> None:
    project = tmp_path / "-home-dev-shop"
    session = project / f"{SESSION}.jsonl"
    write_lines(session, CLAUDE_SESSION[:7])
    store = Store(ClaudeCodeSource(tmp_path))
    store.scan()

    write_lines(session, CLAUDE_SESSION[7:], mode="a")
    read = only_read(store.scan())
    assert read.messages[0].tool_name == "Read"
    assert read.signals == [SkillSignal("deploy-notes", "use", at="2026-01-20T11:57:18.000Z")]

    # A compaction re-injects the same skills: they are not counted again.
    write_lines(session, [CLAUDE_SESSION[12]], mode="a")
    again = only_read(store.scan())
    assert not again.signals


SUBAGENT = [
    claude(
        "user",
        {"role": "user", "content": "Find the flaky test"},
        isSidechain=True,
        agentId="a1b2c3",
    ),
    assistant(
        "msg_9",
        {"type": "text", "text": "test_total is flaky."},
        isSidechain=True,
        agentId="a1b2c3",
    ),
]


def test_claude_code_subagents_only_when_asked(tmp_path: Path) -> None:
    project = claude_project(tmp_path)
    write_lines(project / SESSION / "subagents" / "agent-a1b2c3.jsonl", SUBAGENT)
    write_lines(project / "agent-legacy01.jsonl", SUBAGENT)
    write_lines(project / SESSION / "tool-results" / "big.jsonl", SUBAGENT)

    without = ClaudeCodeSource(tmp_path).scan({})
    with_subagents = ClaudeCodeSource(tmp_path, include_subagents=True).scan({})

    assert without.seen == {f"claude-code:{SESSION}"}
    assert with_subagents.seen == {
        f"claude-code:{SESSION}",
        f"claude-code:{SESSION}/agent-a1b2c3",
        "claude-code:agent-legacy01",
    }
    reads = {read.session: read for read in with_subagents.reads}
    subagent = reads[f"claude-code:{SESSION}/agent-a1b2c3"]
    assert subagent.label == f"subagent of {SESSION}"
    assert shape(subagent.messages) == [
        ("user", "Find the flaky test", (), None),
        ("assistant", "test_total is flaky.", (), None),
    ]
    assert reads["claude-code:agent-legacy01"].label == "subagent"


def test_claude_code_path_may_be_one_project(tmp_path: Path) -> None:
    project = claude_project(tmp_path)

    assert ClaudeCodeSource(project).scan({}).seen == {f"claude-code:{SESSION}"}
    assert ClaudeCodeSource(project / f"{SESSION}.jsonl").scan({}).seen == {
        f"claude-code:{SESSION}"
    }


# --------------------------------------------------------------------------- codex

CODEX_ID = "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"


def codex(record_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2025-10-29T00:59:38.317Z", "type": record_type, "payload": payload}


def item(**payload: Any) -> dict[str, Any]:
    return codex("response_item", payload)


def text_message(role: str, text: str) -> dict[str, Any]:
    block = "output_text" if role == "assistant" else "input_text"
    return item(type="message", role=role, content=[{"type": block, "text": text}])


CODEX_FIRST = [
    codex(
        "session_meta",
        {
            "id": CODEX_ID,
            "timestamp": "2025-10-29T00:59:38.308Z",
            "cwd": "/work/x",
            "originator": "codex_cli_rs",
            "cli_version": "0.46.0",
            "instructions": None,
            "source": "cli",
        },
    ),
    text_message("developer", "<permissions instructions>sandboxed</permissions instructions>"),
    text_message(
        "user", "# AGENTS.md instructions for /work/x\n\n<INSTRUCTIONS>\nbe terse\n</INSTRUCTIONS>"
    ),
    text_message("user", "<environment_context>\n  <cwd>/work/x</cwd>\n</environment_context>"),
    text_message(
        "user",
        "<skill>\n<name>release-notes</name>\n"
        "<path>/home/dev/.codex/skills/release-notes/SKILL.md</path>\nbody\n</skill>",
    ),
    text_message("user", "List the files and summarise them"),
    codex("event_msg", {"type": "user_message", "message": "List the files", "kind": "plain"}),
    codex("turn_context", {"cwd": "/work/x", "approval_policy": "never", "model": "gpt-5-codex"}),
    item(
        type="reasoning",
        summary=[{"type": "summary_text", "text": "**Listing**"}],
        content=None,
        encrypted_content="gAAAA",
    ),
    text_message("assistant", "Let me look."),
    item(
        type="function_call",
        name="shell",
        arguments='{"command":["bash","-lc","ls"],"workdir":"/work/x"}',
        call_id="call_1",
    ),
]
CODEX_SECOND = [
    item(
        type="function_call_output",
        call_id="call_1",
        output=json.dumps({"output": "a.txt\nb.txt\n", "metadata": {"exit_code": 0}}),
    ),
    item(
        type="custom_tool_call",
        status="completed",
        call_id="call_2",
        name="apply_patch",
        input="*** Begin Patch\n*** Update File: a.txt\n+hello\n*** End Patch",
    ),
    item(
        type="custom_tool_call_output",
        call_id="call_2",
        output="Success. Updated the following files:\nM a.txt\n",
    ),
    item(
        type="local_shell_call",
        call_id="call_3",
        status="completed",
        action={
            "type": "exec",
            "command": ["cat", "a.txt"],
            "working_directory": "/work/x",
            "env": {"API_TOKEN": "hunter2"},
        },
    ),
    item(
        type="function_call_output",
        call_id="call_3",
        output=[{"type": "input_text", "text": "hello"}],
    ),
    text_message("assistant", "Two files: a.txt and b.txt."),
    codex("event_msg", {"type": "agent_message", "message": "Two files: a.txt and b.txt."}),
    "{truncated garbage",
]


def codex_rollout(root: Path, records: list[Any]) -> Path:
    path = root / "2025" / "10" / "29" / f"rollout-2025-10-29T00-59-38-{CODEX_ID}.jsonl"
    write_lines(path, records, mode="a")
    return path


def test_codex_normalises_and_joins_call_outputs_across_reads(tmp_path: Path) -> None:
    rollout = codex_rollout(tmp_path, CODEX_FIRST)
    store = Store(CodexSource(tmp_path))

    first = only_read(store.scan())
    assert first.session == f"codex:{CODEX_ID}"
    assert shape(first.messages) == [
        ("user", "List the files and summarise them", (), None),
        ("assistant", "Let me look.", ("shell",), None),
    ]
    assert first.messages[1].tool_calls[0].call_id == "call_1"
    assert first.signals == [SkillSignal("release-notes", "use", at="2025-10-29T00:59:38.317Z")]
    assert first.cursor["state"] == {"calls": {"call_1": "shell"}, "cwd": "/work/x"}
    assert first.cwd == "/work/x"

    codex_rollout(tmp_path, CODEX_SECOND)
    second = only_read(store.scan())

    assert shape(second.messages) == [
        ("tool", "a.txt\nb.txt\n", (), "shell"),
        ("assistant", "", ("apply_patch",), None),
        ("tool", "Success. Updated the following files:\nM a.txt\n", (), "apply_patch"),
        ("assistant", "", ("local_shell",), None),
        ("tool", "hello", (), "local_shell"),
        ("assistant", "Two files: a.txt and b.txt.", (), None),
    ]
    assert second.messages[0].tool_call_id == "call_1"
    shell_arguments = second.messages[3].tool_calls[0].arguments
    assert shell_arguments == '{"command":["cat","a.txt"],"workdir":"/work/x"}'
    assert "hunter2" not in repr(second.messages)
    assert second.skipped_lines == 1
    assert second.cursor["state"] == {"cwd": "/work/x"}  # the answered call is forgotten
    assert second.cwd == "/work/x"  # carried: only the first line and turn contexts name it
    assert rollout.exists()


def test_codex_cwd_follows_turn_contexts(tmp_path: Path) -> None:
    codex_rollout(tmp_path, CODEX_FIRST)
    store = Store(CodexSource(tmp_path))
    assert only_read(store.scan()).cwd == "/work/x"

    codex_rollout(
        tmp_path,
        [codex("turn_context", {"cwd": "/work/y"}), text_message("user", "now over here")],
    )
    assert only_read(store.scan()).cwd == "/work/y"


def test_codex_session_id_from_session_meta_when_the_name_has_none(tmp_path: Path) -> None:
    named = tmp_path / "rollout-custom.jsonl"
    named.write_text("")
    source = CodexSource(tmp_path)
    # No first line yet: the session is not listed (its key is not known).
    assert source.scan({}).seen == set()

    write_lines(named, [*CODEX_FIRST[:1], text_message("user", "hi")])
    result = source.scan({})
    assert result.seen == {f"codex:{CODEX_ID}"}

    write_lines(tmp_path / "rollout-plain.jsonl", [text_message("user", "no meta")])
    assert "codex:rollout-plain" in source.scan({}).seen


def test_codex_reads_older_rollouts_without_the_envelope(tmp_path: Path) -> None:
    write_lines(
        tmp_path / f"rollout-2025-05-07-{CODEX_ID}.jsonl",
        [
            {"id": CODEX_ID, "timestamp": "2025-05-07T17:24:21.123Z", "instructions": None},
            {"record_type": "state"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "old style"}],
            },
            {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c"},
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": {"content": "done", "success": True},
            },
        ],
    )

    read = only_read(CodexSource(tmp_path).scan({}))

    assert shape(read.messages) == [
        ("user", "old style", (), None),
        ("assistant", "", ("shell",), None),
        ("tool", "done", (), "shell"),
    ]


# --------------------------------------------------------------------------- hermes

HERMES_SCHEMA = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, model TEXT, model_config TEXT,
    system_prompt TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, message_count INTEGER DEFAULT 0, title TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT, reasoning TEXT,
    active INTEGER NOT NULL DEFAULT 1, display_kind TEXT
);
CREATE INDEX idx_messages_session_id ON messages(session_id, id);
"""


class Hermes:
    """A writer standing in for Hermes Agent, with its own connection in WAL mode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection = sqlite3.connect(path, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.executescript(HERMES_SCHEMA)

    def session(
        self,
        session_id: str,
        *,
        parent: str | None = None,
        model_config: dict[str, Any] | None = None,
    ) -> None:
        self.connection.execute(
            "INSERT INTO sessions (id, source, model_config, parent_session_id, started_at) "
            "VALUES (?, 'cli', ?, ?, ?)",
            (session_id, json.dumps(model_config or {}), parent, time.time()),
        )

    def message(
        self,
        session_id: str,
        role: str,
        content: str | None = None,
        *,
        when: float | None = None,
        **columns: Any,
    ) -> None:
        names = ["session_id", "role", "content", "timestamp", *columns]
        values = [session_id, role, content, when or time.time(), *columns.values()]
        self.connection.execute(
            f"INSERT INTO messages ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
            values,
        )

    def close(self) -> None:
        self.connection.close()


def hermes_conversation(db: Hermes, session_id: str) -> None:
    db.message(session_id, "system", "You are Hermes.")
    db.message(session_id, "user", "What's in notes.md?")
    db.message(
        session_id,
        "assistant",
        None,
        tool_calls=json.dumps(
            [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "notes.md"}'},
                },
            ]
        ),
    )
    db.message(
        session_id, "tool", "# Notes\n" + "n" * 300, tool_call_id="call_a", tool_name="read_file"
    )
    db.message(session_id, "assistant", "It lists three todos.", display_kind=None)
    db.message(session_id, "user", "scaffolding", display_kind="hidden")
    db.message(session_id, "user", "Review the conversation above and update the skill library.")


def test_hermes_reads_incrementally(tmp_path: Path) -> None:
    db = Hermes(tmp_path / "state.db")
    db.session("20260101_a")
    hermes_conversation(db, "20260101_a")
    store = Store(HermesSource(tmp_path / "state.db", tool_result_max_chars=40))

    first = only_read(store.scan())
    assert first.session == "hermes:20260101_a"
    assert shape(first.messages) == [
        ("user", "What's in notes.md?", (), None),
        ("assistant", "", ("read_file",), None),
        ("tool", first.messages[2].text, (), "read_file"),
        ("assistant", "It lists three todos.", (), None),
    ]
    assert first.messages[1].tool_calls[0].arguments == '{"path":"notes.md"}'
    assert first.messages[2].text.endswith("…[cut 268 chars]")
    assert first.cursor == {"last_id": 7}
    assert first.messages[0].timestamp is not None

    db.message("20260101_a", "user", "Thanks, and the second file?")
    db.session("20260102_b")
    db.message("20260102_b", "user", "A new session")
    second = store.scan()
    reads = {read.session: read for read in second.reads}
    assert shape(reads["hermes:20260101_a"].messages) == [
        ("user", "Thanks, and the second file?", (), None)
    ]
    assert reads["hermes:20260101_a"].cursor == {"last_id": 8}
    assert shape(reads["hermes:20260102_b"].messages) == [("user", "A new session", (), None)]

    idle = store.scan()
    assert idle.reads == []
    assert idle.seen == {"hermes:20260101_a", "hermes:20260102_b"}
    db.close()


def test_hermes_reports_the_session_cwd_when_its_schema_has_one(tmp_path: Path) -> None:
    db = Hermes(tmp_path / "state.db")
    db.session("older")
    db.message("older", "user", "no cwd column yet")
    assert only_read(HermesSource(tmp_path / "state.db").scan({})).cwd is None

    db.connection.execute("ALTER TABLE sessions ADD COLUMN cwd TEXT")
    db.connection.execute("UPDATE sessions SET cwd = '/home/dev/notes'")
    assert only_read(HermesSource(tmp_path / "state.db").scan({})).cwd == "/home/dev/notes"
    db.close()


def test_hermes_opens_the_database_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    db = Hermes(path)
    db.session("s1")
    hermes_conversation(db, "s1")
    db.close()  # checkpoints: everything is in the main file now
    before = (hashlib.sha256(path.read_bytes()).hexdigest(), os.stat(path).st_mtime_ns)

    uris: list[str] = []
    real_connect = sqlite3.connect

    def recording_connect(database: str, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        uris.append(database)
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", recording_connect)
    store = Store(HermesSource(path))
    assert len(only_read(store.scan()).messages) == 4
    store.scan()

    assert (hashlib.sha256(path.read_bytes()).hexdigest(), os.stat(path).st_mtime_ns) == before
    assert uris and all(uri.startswith("file:") and uri.endswith("?mode=ro") for uri in uris)


def test_hermes_reads_while_the_writer_holds_the_database(tmp_path: Path) -> None:
    db = Hermes(tmp_path / "state.db")
    db.session("s1")
    db.message("s1", "user", "hello")
    db.connection.execute("BEGIN IMMEDIATE")  # a write in progress
    db.message("s1", "assistant", "uncommitted")

    read = only_read(HermesSource(tmp_path / "state.db").scan({}))

    assert shape(read.messages) == [("user", "hello", (), None)]
    db.connection.execute("COMMIT")
    db.close()


def test_hermes_subagents_only_when_asked(tmp_path: Path) -> None:
    db = Hermes(tmp_path / "state.db")
    db.session("parent")
    db.message("parent", "user", "delegate the search")
    db.session("child", parent="parent", model_config={"_delegate_from": "parent"})
    db.message("child", "user", "search the repo")
    db.session("continued", parent="parent")
    db.message("continued", "user", "after compression")

    without = HermesSource(tmp_path / "state.db").scan({})
    with_subagents = HermesSource(tmp_path / "state.db", include_subagents=True).scan({})

    assert without.seen == {"hermes:parent", "hermes:continued"}
    labels = {read.session: read.label for read in with_subagents.reads}
    assert labels == {
        "hermes:parent": None,
        "hermes:child": "subagent of parent",
        "hermes:continued": "child of parent",
    }
    db.close()


def test_hermes_start_new_at_end_before(tmp_path: Path) -> None:
    db = Hermes(tmp_path / "state.db")
    db.session("old")
    db.message("old", "user", "long ago", when=time.time() - 7200)
    db.session("new")
    db.message("new", "user", "just now")
    store = Store(HermesSource(tmp_path / "state.db"))

    result = store.scan(start_new_at_end_before=time.time() - 3600)

    reads = {read.session: read for read in result.reads}
    assert reads["hermes:old"].messages == []
    assert reads["hermes:old"].cursor == {"last_id": 1}
    assert shape(reads["hermes:new"].messages) == [("user", "just now", (), None)]
    db.message("old", "user", "back again")
    assert shape(only_read(store.scan()).messages) == [("user", "back again", (), None)]
    db.close()


def test_hermes_missing_database_keeps_cursors_and_is_no_error(tmp_path: Path) -> None:
    """A database moved away (or on a mount not there yet): when it is back, nothing is read
    twice."""
    result = HermesSource(tmp_path / "state.db").scan({"hermes:x": {"last_id": 3}, "codex:y": {}})

    assert (result.reads, result.seen, result.skipped_lines, result.errors) == (
        [],
        {"hermes:x"},
        0,
        [],
    )
    assert not (tmp_path / "state.db").exists()


def test_hermes_unreadable_database_keeps_cursors(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"this is not sqlite" * 100)

    result = HermesSource(tmp_path / "state.db").scan({"hermes:x": {"last_id": 3}, "codex:y": {}})

    assert result.reads == []
    assert result.seen == {"hermes:x"}
    assert len(result.errors) == 1


# --------------------------------------------------------------------------- registry


def test_registry_builds_every_file_kind(tmp_path: Path) -> None:
    assert SOURCE_KINDS == ("jsonl", "dsh", "claude-code", "codex", "hermes")
    kinds = {
        "jsonl": JsonlSource,
        "claude-code": ClaudeCodeSource,
        "codex": CodexSource,
        "hermes": HermesSource,
    }
    for kind, source_class in kinds.items():
        source = build_source(kind, tmp_path, include_subagents=True, tool_result_max_chars=10)
        assert isinstance(source, source_class)
        assert source.kind == kind
    with pytest.raises(ValueError, match="unknown source kind"):
        build_source("vim", tmp_path)


def test_registry_imports_dsh_only_when_asked(tmp_path: Path) -> None:
    # A fresh interpreter: this process may have imported the dsh module already.
    probe = (
        "import sys\n"
        "from skilld.transcripts.registry import build_source\n"
        f"build_source('jsonl', {str(tmp_path)!r})\n"
        "print('skilld.transcripts.dsh' in sys.modules)\n"
        f"print(build_source('dsh', {str(tmp_path)!r}).kind)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )

    assert completed.stdout.split() == ["False", "dsh"]


def test_default_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DSH_HOME", raising=False)
    for variable in ("HERMES_HOME", "CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(variable, raising=False)
    assert default_path("claude-code") == tmp_path / ".claude" / "projects"
    assert default_path("codex") == tmp_path / ".codex" / "sessions"
    assert default_path("hermes") == tmp_path / ".hermes" / "state.db"
    assert default_path("dsh") == tmp_path / ".dsh" / "sessions"
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh-home"))
    assert default_path("dsh") == tmp_path / "dsh-home" / "sessions"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))
    assert default_path("hermes") == tmp_path / "hermes-home" / "state.db"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-home"))
    assert default_path("claude-code") == tmp_path / "claude-home" / "projects"
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    assert default_path("codex") == tmp_path / "codex-home" / "sessions"
    with pytest.raises(ValueError, match="no default path"):
        default_path("jsonl")
