"""The `dsh` source over real session files (zstd frames, plain lines) and a real SQLite store."""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from skilld.transcripts.dsh import DshSource
from skilld.transcripts.dsh import files as dsh_files
from skilld.transcripts.dsh.digest import OPEN_TURN_RELEASE_SECONDS
from skilld.transcripts.dsh.frames import FrameFormatError, frame_end
from skilld.transcripts.model import Message, ScanResult, SessionRead, ToolCall
from skilld.transcripts.signals import SkillSignal, skill_signals

T0 = 1_786_000_000_000  # epoch ms


# --------------------------------------------------------------------------------------------
# Writing sessions the way DSH does


def zstd_frame(records: list[dict[str, Any]], *, content_size: bool = True) -> bytes:
    data = "".join(json.dumps(record) + "\n" for record in records).encode()
    compressor = zstandard.ZstdCompressor(write_checksum=True, write_content_size=content_size)
    return compressor.compress(data)


class DshSession:
    """One DSH session file: a header frame (or line), then one frame (or lines) per batch."""

    def __init__(
        self,
        root: Path,
        session_id: str,
        *,
        compressed: bool = True,
        project: str = "--home-me-proj--",
        **header: Any,
    ) -> None:
        self.id = session_id
        self.compressed = compressed
        directory = root / project / session_id
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / ("session.jsonl.zstd" if compressed else "session.jsonl")
        self.seq = 0
        self.header = {
            "type": "session",
            "version": 0,
            "id": session_id,
            "createdAt": T0,
            "cwd": "/home/me/proj",
            "delegationDepth": 0,
            **header,
        }
        self.path.write_bytes(self.encode([self.header]))

    @property
    def key(self) -> str:
        return f"dsh:{self.id}"

    def encode(self, records: list[dict[str, Any]]) -> bytes:
        if self.compressed:
            return zstd_frame(records)
        return "".join(json.dumps(record) + "\n" for record in records).encode()

    def event(self, event_type: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
        record = {"type": event_type, "seq": self.seq, "time": T0 + self.seq, "data": data, **extra}
        self.seq += 1
        return record

    def append(self, *records: dict[str, Any]) -> bytes:
        """Writes one batch (one frame when compressed); returns the bytes written."""
        data = self.encode(list(records))
        with open(self.path, "ab") as file:
            file.write(data)
        return data

    def append_raw(self, data: bytes) -> None:
        with open(self.path, "ab") as file:
            file.write(data)

    # -- event builders --

    def user(self, text: str, kind: str = "user") -> dict[str, Any]:
        content = [{"type": "text", "text": text}]
        data = {"role": "user", "content": content, "source": {"kind": kind}}
        return self.event("user/message", data, surfaceOp="append")

    def assistant(
        self, text: str = "", *, calls: tuple[tuple[str, str, str], ...] = (), reasoning: str = ""
    ) -> dict[str, Any]:
        blocks: list[dict[str, Any]] = []
        if reasoning:
            blocks.append({"type": "reasoning", "text": reasoning})
        if text:
            blocks.append({"type": "text", "text": text})
        blocks += [{"type": "tool-call", "id": i, "name": n, "arguments": a} for i, n, a in calls]
        message = {"role": "assistant", "content": blocks, "source": {"kind": "model"}}
        return self.event(
            "assistant/message", {"turn": 1, "step": 0, "message": message}, surfaceOp="append"
        )

    def tool_call(self, call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
        data = {"turn": 1, "step": 0, "callId": call_id, "name": name, "arguments": arguments}
        return self.event("tool/call", data)

    def tool_result(self, call_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
        block = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": [{"type": "text", "text": text}],
            "isError": error,
        }
        message = {
            "role": "user",
            "source": {"kind": "tool", "callId": call_id},
            "content": [block],
        }
        return self.event(
            "tool/result", {"turn": 1, "step": 0, "message": message}, surfaceOp="append"
        )

    def turn_start(self) -> dict[str, Any]:
        return self.event("turn/start", {"turn": 1})

    def turn_end(self, kind: str = "completed") -> dict[str, Any]:
        return self.event("turn/end", {"turn": 1, "reason": {"kind": kind}})

    def simple_turn(self, question: str, answer: str) -> list[dict[str, Any]]:
        return [self.turn_start(), self.user(question), self.assistant(answer), self.turn_end()]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    return sessions


def cursors_of(result: ScanResult) -> dict[str, dict[str, Any]]:
    return {read.session: read.cursor for read in result.reads}


def cursor_of(read: SessionRead) -> dict[str, dict[str, Any]]:
    return {read.session: read.cursor}


def only_read(result: ScanResult) -> SessionRead:
    assert result.errors == []
    assert len(result.reads) == 1, result.reads
    return result.reads[0]


def texts(read: SessionRead) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in read.messages]


# --------------------------------------------------------------------------------------------
# Normalisation


def test_messages_are_extracted_and_harness_text_dropped(root: Path) -> None:
    session = DshSession(root, "session-a")
    session.append(
        session.turn_start(),
        session.user("[skills] pdf: read PDFs", kind="plugin"),
        session.user("convert report.pdf to text"),
        session.user("ship the converter by friday " + "x" * 400, kind="goal"),
        session.event("step/start", {"turn": 1, "step": 0}),
        session.assistant(
            "I'll read it first.",
            reasoning="secret chain of thought",
            calls=(("c1", "read", '{"file_path":"report.pdf"}'),),
        ),
        session.tool_call("c1", "read", '{"file_path":"report.pdf"}'),
        session.tool_result("c1", "R" * 50),
        session.event("step/end", {"turn": 1, "step": 0}),
        session.assistant("Here is the text."),
        session.event("session/title", {"title": "PDF"}),
        session.turn_end(),
    )
    read = only_read(DshSource(root, tool_result_max_chars=10).scan({}))

    assert read.session == "dsh:session-a"
    assert read.source == "dsh"
    assert read.label is None
    user, goal, call, result, answer = read.messages
    assert (user.role, user.text) == ("user", "convert report.pdf to text")
    assert user.timestamp == "2026-08-06T07:06:40.002Z"
    assert goal.role == "system"
    assert goal.text.startswith("[goal] ship the converter by friday")
    assert len(goal.text) <= 300 + len("…[cut 000 chars]")
    assert call == Message(
        "assistant",
        "I'll read it first.",
        (ToolCall("read", '{"file_path":"report.pdf"}', "c1"),),
        timestamp=call.timestamp,
    )
    assert not call.finishes_turn
    assert result.role == "tool"
    assert (result.tool_call_id, result.tool_name) == ("c1", "read")
    assert result.text == "RRRRRRRRRR…[cut 40 chars]"
    assert answer.role == "assistant" and answer.text == "Here is the text."
    assert answer.finishes_turn
    every_text = " ".join(m.text for m in read.messages)
    assert "secret chain of thought" not in every_text
    assert "[skills]" not in every_text
    assert read.cursor["seq"] == session.seq - 1
    assert read.cursor["offset"] == session.path.stat().st_size


def test_error_results_are_marked(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(
        session.turn_start(),
        session.user("run it"),
        session.assistant(calls=(("c9", "bash", '{"command":"false"}'),)),
        session.tool_call("c9", "bash", '{"command":"false"}'),
        session.tool_result("c9", "exit 1", error=True),
        session.assistant("It failed."),
        session.turn_end(),
    )
    read = only_read(DshSource(root).scan({}))
    assert [m.text for m in read.messages if m.role == "tool"] == ["[error] exit 1"]


def test_tool_call_in_block_and_event_appears_once(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(
        session.turn_start(),
        session.user("list files"),
        session.assistant("Listing.", calls=(("c1", "bash", '{"command":"ls"}'),)),
        session.tool_call("c1", "bash", '{"command":"ls"}'),
        session.tool_result("c1", "a b"),
        session.assistant("Two files."),
        session.turn_end(),
    )
    read = only_read(DshSource(root).scan({}))
    calls = [call for m in read.messages for call in m.tool_calls]
    assert calls == [ToolCall("bash", '{"command":"ls"}', "c1")]


def test_tool_call_event_without_block_joins_the_preceding_assistant_message(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(
        session.turn_start(),
        session.user("list files"),
        session.assistant("Listing."),
        session.tool_call("c1", "bash", '{"command":"ls"}'),
        session.tool_result("c1", "a b"),
        session.assistant("Two files."),
        session.turn_end(),
    )
    read = only_read(DshSource(root).scan({}))
    assert read.messages[1].text == "Listing."
    assert read.messages[1].tool_calls == (ToolCall("bash", '{"command":"ls"}', "c1"),)
    assert not read.messages[1].finishes_turn
    assert read.messages[2].tool_name == "bash"


def test_chunk_rows_never_reach_a_message(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(session.turn_start(), session.user("hi"))
    session.append(
        {"type": "assistant/chunk", "seq": session.seq, "time": T0, "data": {"text": "CHUNKTEXT"}},
        {"type": "text-chunks", "seq0": session.seq + 1, "time0": T0, "texts": ["CHUNK", "ROW"]},
        {"type": "reasoning-chunks", "seq0": session.seq + 3, "time0": T0, "texts": ["THINKROW"]},
        {"type": "tool-call-chunks", "seq0": session.seq + 4, "time0": T0, "args": ["ARGSROW"]},
    )
    session.seq += 5
    session.append(session.assistant("hello"), session.turn_end())
    read = only_read(DshSource(root).scan({}))
    assert texts(read) == [("user", "hi"), ("assistant", "hello")]
    assert read.skipped_lines == 0
    rendered = repr(read.messages)
    for noise in ("CHUNKTEXT", "CHUNK", "ROW", "THINKROW", "ARGSROW"):
        assert noise not in rendered


def test_skill_tool_calls_stay_tool_calls_and_signal_once(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(
        session.turn_start(),
        session.user("make a pdf"),
        session.assistant(calls=(("c1", "skill", '{"name":"pdf-tools"}'),)),
        session.tool_call("c1", "skill", '{"name":"pdf-tools"}'),
        session.tool_result("c1", "skill loaded"),
        session.tool_call("c2", "skill", '{"name":"release-notes"}'),
        session.tool_result("c2", "skill loaded"),
        session.tool_call("c3", "bash", '{"name":"not-a-skill"}'),
        session.tool_result("c3", "ok"),
        session.assistant("Done."),
        session.turn_end(),
    )
    read = only_read(DshSource(root).scan({}))
    assert not read.signals  # the calls are in the messages: skill_signals counts them there
    signals = skill_signals(read, [])
    assert [signal._replace(at=None) for signal in signals] == [
        SkillSignal("pdf-tools", "use"),
        SkillSignal("release-notes", "use"),
    ]
    # Each dated when its call was made (the message's time), not when it was read.
    called_at = [m.timestamp for m in read.messages for c in m.tool_calls if c.name == "skill"]
    assert [signal.at for signal in signals] == called_at and None not in called_at


def test_a_turn_that_ends_without_a_final_answer_is_closed(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(
        session.turn_start(),
        session.user("delete the logs"),
        session.assistant(calls=(("c1", "bash", '{"command":"rm *.log"}'),)),
        session.tool_call("c1", "bash", '{"command":"rm *.log"}'),
        session.tool_result("c1", "removed"),
        session.turn_end("aborted"),
    )
    read = only_read(DshSource(root).scan({}))
    assert read.messages[-1] == Message(
        "assistant", "[turn ended: aborted]", timestamp=read.messages[-1].timestamp
    )
    assert read.messages[-1].finishes_turn
    assert read.cursor["open"] is False


def test_surface_rewrites_are_not_new_messages(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q", "a"))
    rewrite = session.tool_result("c0", "pruned")
    rewrite["surfaceOp"] = {"op": "replace", "startSeq": 1, "endSeq": 2}
    summary = session.user("summary of everything so far")
    summary["surfaceOp"] = {"op": "replace", "startSeq": 1, "endSeq": 2}
    session.append(rewrite, summary)
    read = only_read(DshSource(root).scan({}))
    assert texts(read) == [("user", "q"), ("assistant", "a")]


# --------------------------------------------------------------------------------------------
# Incremental reading of zstd frames


def test_appended_frame_yields_only_new_events(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("first question", "first answer"))
    source = DshSource(root)
    first = only_read(source.scan({}))
    assert texts(first) == [("user", "first question"), ("assistant", "first answer")]

    session.append(*session.simple_turn("second question", "second answer"))
    second = only_read(source.scan(cursor_of(first)))
    assert texts(second) == [("user", "second question"), ("assistant", "second answer")]
    assert second.reset is False
    assert second.cursor["offset"] == session.path.stat().st_size


def test_unchanged_file_is_answered_from_stat_without_opening_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q", "a"))
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))
    opened: list[str] = []

    def spying_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(dsh_files, "open", spying_open, raising=False)
    # A fresh source (a restarted daemon) must manage with the stored cursors alone.
    result = DshSource(root).scan(cursors)
    assert result.reads == []
    assert result.seen == {session.key}
    assert opened == []


def test_half_written_frame_waits_until_complete(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q1", "a1"))
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))
    offset_before = cursors[session.key]["offset"]

    frame = session.encode(session.simple_turn("q2", "a2"))
    session.append_raw(frame[: len(frame) // 2])
    partial = source.scan(cursors)
    for read in partial.reads:
        assert read.messages == []
        assert read.skipped_lines == 0
        assert read.cursor["offset"] == offset_before
    cursors.update(cursors_of(partial))

    session.append_raw(frame[len(frame) // 2 :])
    done = only_read(source.scan(cursors))
    assert texts(done) == [("user", "q2"), ("assistant", "a2")]


def test_frames_without_content_size_and_with_many_blocks_are_read(root: Path) -> None:
    session = DshSession(root, "s")
    big_result = "".join(f"{i:08x}" for i in range(60_000))  # ~480 KB: several 128 KB blocks
    records = [
        session.turn_start(),
        session.user("dump it"),
        session.assistant(calls=(("c1", "bash", "{}"),)),
        session.tool_call("c1", "bash"),
        session.tool_result("c1", big_result),
        session.assistant("dumped"),
        session.turn_end(),
    ]
    session.append_raw(zstd_frame(records, content_size=False))
    read = only_read(DshSource(root, tool_result_max_chars=16).scan({}))
    assert texts(read)[-1] == ("assistant", "dumped")
    assert read.messages[2].text.startswith(big_result[:16])


def test_corrupt_frame_followed_by_a_valid_frame_is_skipped(root: Path) -> None:
    session = DshSession(root, "s")
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))

    corrupt = bytearray(session.encode(session.simple_turn("lost", "lost answer")))
    corrupt[len(corrupt) // 2] ^= 0xFF  # inside the frame: its checksum no longer matches
    session.append_raw(bytes(corrupt))
    at_end = only_read(source.scan(cursors))
    # At the end of the file it may still be mid-write: counted, not passed, retried.
    assert at_end.messages == []
    assert at_end.skipped_lines == 1
    assert at_end.cursor["offset"] == cursors[session.key]["offset"]
    assert at_end.cursor["retry"] is True
    cursors.update(cursor_of(at_end))
    retried = only_read(source.scan(cursors))
    assert retried.skipped_lines == 1

    session.append(*session.simple_turn("kept", "kept answer"))
    after = only_read(source.scan(cursors))
    assert texts(after) == [("user", "kept"), ("assistant", "kept answer")]
    assert after.skipped_lines == 1
    assert after.cursor["offset"] == session.path.stat().st_size
    assert after.cursor["retry"] is False


def test_garbage_between_frames_is_skipped_at_the_next_frame(root: Path) -> None:
    session = DshSession(root, "s")
    session.append_raw(b"this is not a zstd frame at all")
    session.append(*session.simple_turn("q", "a"))
    read = only_read(DshSource(root).scan({}))
    assert texts(read) == [("user", "q"), ("assistant", "a")]
    assert read.skipped_lines == 1


def test_malformed_and_oversize_lines_are_counted(root: Path) -> None:
    session = DshSession(root, "s")
    good = session.simple_turn("q", "a")
    payload = b"{not json\n" + b'{"type":"user/message"}\n' + b'["an array"]\n'
    payload += json.dumps(session.user("y" * 5000)).encode() + b"\n"
    payload += "".join(json.dumps(r) + "\n" for r in good).encode()
    session.append_raw(zstandard.ZstdCompressor(write_checksum=True).compress(payload))
    read = only_read(DshSource(root, max_line_bytes=1000).scan({}))
    assert texts(read) == [("user", "q"), ("assistant", "a")]
    assert read.skipped_lines == 4


def test_changed_first_frame_resets(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q", "a"))
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))

    # Same file, same inode, rewritten in place with a different header frame.
    content = session.path.read_bytes()
    header_end = frame_end(content, 0)
    assert header_end is not None
    # Same length, so offsets and the bytes before the cursor stay exactly where they were:
    # only the header fingerprint can tell the file changed.
    new_header = zstd_frame([{**session.header, "createdAt": T0 + 8}])
    assert len(new_header) == header_end
    with open(session.path, "r+b") as file:
        file.write(new_header + content[header_end:])
        file.truncate()
    read = only_read(source.scan(cursors))
    assert read.reset is True
    assert texts(read) == [("user", "q"), ("assistant", "a")]


def test_file_repacked_in_place_resets(root: Path) -> None:
    session = DshSession(root, "s")
    first_turn = session.simple_turn("q1", "a1")
    second_turn = session.simple_turn("q2", "a2")
    session.append(*first_turn)
    session.append(*second_turn)
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))

    # Same inode and header frame, but the batches are repacked into one frame (what DSH
    # repair tools do) plus a new turn: the cursor offset now points into the middle of it.
    third_turn = session.simple_turn("q3", os.urandom(600).hex())  # incompressible: file grows
    repacked = session.encode([session.header]) + session.encode(
        first_turn + second_turn + third_turn
    )
    assert len(repacked) >= cursors[session.key]["offset"]
    with open(session.path, "r+b") as file:
        file.write(repacked)
        file.truncate()
    read = only_read(source.scan(cursors))
    assert read.reset is True
    assert [text for role, text in texts(read) if role == "user"] == ["q1", "q2", "q3"]


def test_replaced_or_truncated_file_resets(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q", "a"))
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))

    replacement = session.path.with_suffix(".new")
    replacement.write_bytes(
        session.encode([session.header]) + session.encode(session.simple_turn("x", "y"))
    )
    os.replace(replacement, session.path)
    read = only_read(source.scan(cursors))
    assert read.reset is True
    assert texts(read) == [("user", "x"), ("assistant", "y")]

    cursors = cursor_of(read)
    with open(session.path, "r+b") as file:
        file.truncate(frame_end(session.path.read_bytes(), 0))
    truncated = only_read(source.scan(cursors))
    assert truncated.reset is True
    assert truncated.messages == []


def test_duplicate_or_stale_seq_is_not_sent_again(root: Path) -> None:
    session = DshSession(root, "s")
    turn = session.simple_turn("q", "a")
    session.append(*turn)
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))
    session.append(*turn)  # a writer replaying a batch
    again = source.scan(cursors)
    assert [m for read in again.reads for m in read.messages] == []


def test_start_new_at_end_before_starts_old_sessions_at_their_end(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("old", "old answer"))
    session.append(*session.simple_turn("old2", "old2 answer"))
    source = DshSource(root)
    result = source.scan({}, start_new_at_end_before=time.time() + 60)
    read = only_read(result)
    assert read.messages == []
    assert read.cursor["offset"] == session.path.stat().st_size
    assert read.cursor["seq"] == session.seq - 1

    session.append(*session.simple_turn("new", "new answer"))
    after = only_read(source.scan(cursors_of(result), start_new_at_end_before=time.time() + 60))
    assert texts(after) == [("user", "new"), ("assistant", "new answer")]


def test_recent_sessions_are_read_from_their_start_despite_the_backfill_cutoff(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q", "a"))
    old = time.time() - 3600
    read = only_read(DshSource(root).scan({}, start_new_at_end_before=old))
    assert texts(read) == [("user", "q"), ("assistant", "a")]


# --------------------------------------------------------------------------------------------
# Open turns


def test_an_answer_without_turn_end_is_held_until_the_turn_ends(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(session.turn_start(), session.user("q"), session.assistant("partial answer"))
    source = DshSource(root)
    first = only_read(source.scan({}))
    assert texts(first) == [("user", "q")]
    assert first.cursor["held"] is True

    # The agent continues the same turn (a goal nudges it on), then ends it.
    session.append(
        session.user("keep going", kind="goal"),
        session.assistant("final answer"),
        session.turn_end(),
    )
    second = only_read(source.scan(cursor_of(first)))
    assert texts(second) == [
        ("assistant", "partial answer"),
        ("system", "[goal] keep going"),
        ("assistant", "final answer"),
    ]
    assert second.cursor["held"] is False


def test_an_idle_open_turn_is_released(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(session.turn_start(), session.user("q"), session.assistant("last words"))
    source = DshSource(root)
    first = only_read(source.scan({}))
    assert texts(first) == [("user", "q")]

    past = time.time() - OPEN_TURN_RELEASE_SECONDS - 5
    os.utime(session.path, (past, past))
    cursors = cursor_of(first)
    cursors[session.key]["mtime_ns"] = session.path.stat().st_mtime_ns  # nothing was appended
    cursors[session.key]["size"] = session.path.stat().st_size
    released = only_read(source.scan(cursors))
    assert texts(released) == [("assistant", "last words")]
    assert released.messages[-1].finishes_turn
    assert released.cursor["held"] is False


# --------------------------------------------------------------------------------------------
# Plain session.jsonl


def test_plain_jsonl_sessions_are_read_incrementally(root: Path) -> None:
    session = DshSession(root, "plain", compressed=False)
    session.append(*session.simple_turn("q1", "a1"))
    source = DshSource(root)
    first = only_read(source.scan({}))
    assert texts(first) == [("user", "q1"), ("assistant", "a1")]
    cursors = cursor_of(first)

    turn_start = session.encode([session.turn_start()])
    line = (json.dumps(session.user("q2")) + "\n").encode()
    session.append_raw(turn_start + line[:10])
    partial = source.scan(cursors)
    assert [m for read in partial.reads for m in read.messages] == []
    cursors.update(cursors_of(partial))

    session.append_raw(line[10:] + session.encode([session.assistant("a2"), session.turn_end()]))
    second = only_read(source.scan(cursors))
    assert texts(second) == [("user", "q2"), ("assistant", "a2")]
    assert second.cursor["offset"] == session.path.stat().st_size


def test_plain_oversize_line_is_skipped_without_stalling(root: Path) -> None:
    session = DshSession(root, "plain", compressed=False)
    source = DshSource(root, max_line_bytes=2000)
    cursors = cursors_of(source.scan({}))
    session.append_raw(b'{"type":"tool/result","seq":0,"data":"' + b"z" * 5000)  # no newline yet
    growing = only_read(source.scan(cursors))
    assert growing.skipped_lines == 1
    assert growing.cursor["discard"] is True
    cursors.update(cursor_of(growing))

    session.append_raw(b'z"}\n')
    session.seq = 1
    session.append(*session.simple_turn("q", "a"))
    after = only_read(source.scan(cursors))
    assert texts(after) == [("user", "q"), ("assistant", "a")]
    assert after.skipped_lines == 0


def test_plain_start_at_end(root: Path) -> None:
    session = DshSession(root, "plain", compressed=False)
    session.append(*session.simple_turn("q", "a"))
    read = only_read(DshSource(root).scan({}, start_new_at_end_before=time.time() + 60))
    assert read.messages == []
    assert read.cursor["offset"] == session.path.stat().st_size
    assert read.cursor["seq"] == session.seq - 1


# --------------------------------------------------------------------------------------------
# Subagents, discovery, bad files


def test_subagents_are_labelled_and_included_only_on_request(root: Path) -> None:
    parent = DshSession(root, "session-parent")
    parent.append(*parent.simple_turn("delegate", "delegated"))
    child = DshSession(
        root, "session-child", origin="subagent", parentSession="session-parent", delegationDepth=1
    )
    child.append(*child.simple_turn("subtask", "subtask done"))

    without = DshSource(root).scan({})
    assert without.seen == {parent.key}
    assert [read.session for read in without.reads] == [parent.key]

    with_subagents = DshSource(root, include_subagents=True).scan({})
    assert with_subagents.seen == {parent.key, child.key}
    labels = {read.session: read.label for read in with_subagents.reads}
    assert labels == {parent.key: None, child.key: "subagent of session-parent"}

    # A cursor kept from an earlier run with subagents does not bring the session back.
    excluded = DshSource(root).scan(cursors_of(with_subagents))
    assert excluded.seen == {parent.key}


def test_bad_files_are_recorded_never_raised(root: Path) -> None:
    good = DshSession(root, "good")
    good.append(*good.simple_turn("q", "a"))
    (root / "--p--" / "dir-instead").mkdir(parents=True)
    (root / "--p--" / "dir-instead" / "session.jsonl.zstd").mkdir()
    (root / "--p--" / "not-a-header").mkdir()
    (root / "--p--" / "not-a-header" / "session.jsonl.zstd").write_bytes(
        zstd_frame([{"type": "user/message"}])
    )
    (root / "--p--" / "garbage").mkdir()
    (root / "--p--" / "garbage" / "session.jsonl.zstd").write_bytes(b"\x00" * 64)
    (root / "--p--" / "starting").mkdir()
    (root / "--p--" / "starting" / "session.jsonl.zstd").write_bytes(
        zstd_frame([{"type": "session"}])[:5]
    )

    result = DshSource(root).scan({})
    assert result.seen == {good.key}
    assert len(result.errors) == 3
    assert result.skipped_lines == 2  # the two unreadable headers: they belong to no session
    assert any("directory where a session file should be" in error for error in result.errors)
    assert [read.session for read in result.reads] == [good.key]


def test_unreadable_file_keeps_its_cursor(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q", "a"))
    cursors = cursors_of(DshSource(root).scan({}))
    session.append(*session.simple_turn("q2", "a2"))

    def denied(file: Any, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(file))

    # Permission bits do not stop root, so the refusal comes from open() itself.
    monkeypatch.setattr(dsh_files, "open", denied, raising=False)
    result = DshSource(root).scan(cursors)
    assert result.seen == {session.key}
    assert result.reads == []
    assert result.errors == [f"{session.path}: Permission denied"]


def test_missing_root_is_an_error_not_an_exception(tmp_path: Path) -> None:
    result = DshSource(tmp_path / "nowhere").scan({})
    assert result.reads == [] and result.seen == set()
    assert len(result.errors) == 1


def test_a_root_moved_away_keeps_every_cursor(root: Path) -> None:
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q", "a"))
    cursors = cursors_of(DshSource(root).scan({}))
    cursors["jsonl:other"] = {}  # another kind's: not this source's to keep

    away = root.with_name("away")
    root.rename(away)
    gone = DshSource(root).scan(cursors)
    assert (gone.reads, gone.seen) == ([], {session.key})

    away.rename(root)
    back = DshSource(root).scan(cursors)
    assert (back.reads, back.seen) == ([], {session.key})


def test_a_deleted_session_is_forgotten_a_missing_project_is_not(root: Path) -> None:
    deleted = DshSession(root, "deleted", project="--a--")
    deleted.append(*deleted.simple_turn("q", "a"))
    kept = DshSession(root, "kept", project="--a--")
    kept.append(*kept.simple_turn("q", "a"))
    away = DshSession(root, "away", project="--b--")
    away.append(*away.simple_turn("q", "a"))
    cursors = cursors_of(DshSource(root).scan({}))

    # DSH removes a session with its own directory; the project directory stays.
    deleted.path.unlink()
    deleted.path.parent.rmdir()
    (root / "--b--").rename(root.with_name("b-away"))
    result = DshSource(root).scan(cursors)

    assert result.seen == {kept.key, away.key}


def test_cursors_name_their_file_relative_to_the_root(tmp_path: Path) -> None:
    """However the root is spelled (a symlink, `~`), a cursor means the same file."""
    real = tmp_path / "sessions"
    session = DshSession(real, "s")
    session.append(*session.simple_turn("q1", "a1"))
    (tmp_path / "link").symlink_to(real)
    first = only_read(DshSource(tmp_path / "link").scan({}))
    assert first.cursor["file"] == "--home-me-proj--/s/session.jsonl.zstd"

    session.append(*session.simple_turn("q2", "a2"))
    second = only_read(DshSource(real).scan(cursor_of(first)))
    assert (second.reset, texts(second)) == (False, [("user", "q2"), ("assistant", "a2")])


def test_a_cursor_written_before_files_were_named_relatively_reads_on(root: Path) -> None:
    """Older cursors spelled the absolute path; their content mark still holds."""
    session = DshSession(root, "s")
    session.append(*session.simple_turn("q1", "a1"))
    cursors = cursors_of(DshSource(root).scan({}))
    older = {key: value for key, value in cursors[session.key].items() if key != "file"}
    older["path"] = str(session.path)

    session.append(*session.simple_turn("q2", "a2"))
    read = only_read(DshSource(root).scan({session.key: older}))

    assert (read.reset, texts(read)) == (False, [("user", "q2"), ("assistant", "a2")])
    assert read.cursor["file"] == "--home-me-proj--/s/session.jsonl.zstd"
    assert "path" not in read.cursor


@pytest.mark.parametrize("compressed", [True, False])
def test_a_restored_copy_is_read_on_not_again(root: Path, compressed: bool) -> None:
    """Same bytes under a new inode (copied and renamed over, a remount): no reset."""
    session = DshSession(root, "s", compressed=compressed)
    session.append(*session.simple_turn("q1", "a1"))
    source = DshSource(root)
    cursors = cursors_of(source.scan({}))

    copy = session.path.with_name("copy")
    copy.write_bytes(session.path.read_bytes())
    os.replace(copy, session.path)
    session.append(*session.simple_turn("q2", "a2"))
    cursors[session.key]["dev"] += 1  # and another device, as after a remount
    read = only_read(source.scan(cursors))

    assert read.reset is False
    assert texts(read) == [("user", "q2"), ("assistant", "a2")]
    assert read.cursor["ino"] == session.path.stat().st_ino


def test_the_session_cwd_comes_from_its_header(root: Path) -> None:
    session = DshSession(root, "s", cwd="/home/me/shop")
    session.append(*session.simple_turn("q", "a"))
    assert only_read(DshSource(root).scan({})).cwd == "/home/me/shop"


def test_same_session_in_two_files_is_read_once(root: Path) -> None:
    first = DshSession(root, "twin", project="--a--")
    first.append(*first.simple_turn("q", "a"))
    second = DshSession(root, "twin", project="--b--")
    second.append(*second.simple_turn("q", "a"))
    result = DshSource(root).scan({})
    assert [read.session for read in result.reads] == ["dsh:twin"]
    assert len(result.errors) == 1


def test_default_sessions_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skilld.routing import default_path

    monkeypatch.setenv("DSH_HOME", str(tmp_path))
    assert default_path("dsh") == tmp_path / "sessions"
    monkeypatch.delenv("DSH_HOME")
    assert default_path("dsh") == Path.home() / ".dsh" / "sessions"


# --------------------------------------------------------------------------------------------
# SQLite persistence

SCHEMA = """
CREATE TABLE sessions (
  id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL, cwd TEXT,
  parent_session TEXT, seed_length INTEGER, origin TEXT, delegation_depth INTEGER,
  agent_preset TEXT, incarnation TEXT NOT NULL, revision INTEGER NOT NULL
) STRICT;
CREATE TABLE events (
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data ANY NOT NULL,
  source_event_seqs ANY, surface_op TEXT,
  ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)
) STRICT;
"""


class Store:
    """A DSH SQLite store written by a separate connection, as the harness would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with closing_connection(path) as connection:
            connection.executescript(SCHEMA)

    def add_session(
        self, session_id: str, *, origin: str | None = None, parent: str | None = None
    ) -> None:
        with closing_connection(self.path) as connection:
            connection.execute(
                "INSERT INTO sessions VALUES (?, 0, ?, '/p', ?, NULL, ?, 0, NULL, 'inc-1', 0)",
                (session_id, T0, parent, origin),
            )

    def add_events(
        self, session_id: str, records: list[dict[str, Any]], *, compress: bool = False
    ) -> None:
        with closing_connection(self.path) as connection:
            for record in records:
                text = json.dumps(record["data"])
                data = zstandard.ZstdCompressor().compress(text.encode()) if compress else text
                connection.execute(
                    "INSERT INTO events (session_id, seq, type, time, data, surface_op)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        session_id,
                        record["seq"],
                        record["type"],
                        record["time"],
                        data,
                        record.get("surfaceOp"),
                    ),
                )


class closing_connection:
    def __init__(self, path: Path) -> None:
        self.connection = sqlite3.connect(path)

    def __enter__(self) -> sqlite3.Connection:
        return self.connection

    def __exit__(self, *exc: object) -> None:
        self.connection.commit()
        self.connection.close()


def digest_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sqlite_store_is_read_only_and_incremental(tmp_path: Path) -> None:
    store = Store(tmp_path / "sessions.db")
    store.add_session("session-db")
    builder = DshSession(tmp_path / "scratch", "session-db")  # only used to build events
    store.add_events("session-db", builder.simple_turn("db question", "db answer"))
    store.path.chmod(0o444)
    before = digest_of(store.path)

    source = DshSource(store.path)
    first = only_read(source.scan({}))
    assert first.session == "dsh:session-db"
    assert first.cwd == "/p"
    assert texts(first) == [("user", "db question"), ("assistant", "db answer")]
    assert digest_of(store.path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch", "sessions.db"]

    cursors = cursor_of(first)
    unchanged = source.scan(cursors)
    assert unchanged.reads == [] and unchanged.seen == {"dsh:session-db"}

    store.path.chmod(0o644)
    store.add_events("session-db", builder.simple_turn("again", "big " + "b" * 9000), compress=True)
    second = only_read(source.scan(cursors))
    assert texts(second) == [("user", "again"), ("assistant", "big " + "b" * 9000)]
    assert second.cursor["seq"] == builder.seq - 1


def test_sqlite_subagents_and_bad_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "sessions.db")
    store.add_session("parent")
    store.add_session("child", origin="subagent", parent="parent")
    builder = DshSession(tmp_path / "scratch", "x")
    store.add_events("parent", builder.simple_turn("q", "a"))
    with closing_connection(store.path) as connection:
        connection.execute(
            "INSERT INTO events (session_id, seq, type, time, data)"
            " VALUES ('parent', 99, 'user/message', 0, '{broken')"
        )
    store.add_events("child", builder.simple_turn("sub q", "sub a"))

    without = DshSource(store.path).scan({})
    assert without.seen == {"dsh:parent"}
    assert without.reads[0].skipped_lines == 1
    assert without.skipped_lines == 0  # counted once, on the session's read

    with_subagents = DshSource(store.path, include_subagents=True).scan({})
    labels = {read.session: read.label for read in with_subagents.reads}
    assert labels == {"dsh:parent": None, "dsh:child": "subagent of parent"}


def test_a_store_moved_away_keeps_its_cursors(tmp_path: Path) -> None:
    store = Store(tmp_path / "sessions.db")
    store.add_session("session-db")
    store.add_events("session-db", DshSession(tmp_path / "scratch", "x").simple_turn("q", "a"))
    cursors = cursors_of(DshSource(store.path).scan({}))

    store.path.rename(tmp_path / "moved.db")
    result = DshSource(store.path).scan(cursors)
    assert (result.reads, result.seen) == ([], {"dsh:session-db"})


def test_a_file_that_is_neither_directory_nor_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    result = DshSource(path).scan({})
    assert result.reads == [] and len(result.errors) == 1


# --------------------------------------------------------------------------------------------
# Frame boundaries


def frames_strategy() -> st.SearchStrategy[list[tuple[bytes, bool, bool, int]]]:
    payload = st.binary(min_size=0, max_size=3000) | st.builds(
        lambda b, n: b * n, st.binary(min_size=1, max_size=4), st.integers(1, 70_000)
    )
    return st.lists(
        st.tuples(payload, st.booleans(), st.booleans(), st.integers(1, 6)), min_size=1, max_size=5
    )


def build(frame: tuple[bytes, bool, bool, int]) -> bytes:
    data, checksum, content_size, level = frame
    compressor = zstandard.ZstdCompressor(
        level=level, write_checksum=checksum, write_content_size=content_size
    )
    return compressor.compress(data)


def boundaries(data: bytes) -> Iterator[int]:
    pos = 0
    while pos < len(data):
        end = frame_end(data, pos)
        assert end is not None
        yield end
        pos = end


@settings(max_examples=60, deadline=None)
@given(frames_strategy(), st.integers(0, 10_000))
def test_frame_end_finds_every_boundary(
    frames: list[tuple[bytes, bool, bool, int]], cut: int
) -> None:
    encoded = [build(frame) for frame in frames]
    skippable = (0x184D2A53).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    blob = encoded[0] + skippable + b"".join(encoded[1:])
    expected = [len(encoded[0]), len(encoded[0]) + len(skippable)]
    for frame in encoded[1:]:
        expected.append(expected[-1] + len(frame))
    assert list(boundaries(blob)) == expected
    last_start = expected[-2]
    truncated = blob[: last_start + cut % (len(blob) - last_start)]
    assert frame_end(truncated, last_start) is None


def test_frame_end_rejects_non_frames() -> None:
    with pytest.raises(FrameFormatError):
        frame_end(b"not a frame", 0)
    assert frame_end(b"\x28\xb5", 0) is None


def test_versioned_session_files_of_newer_dsh_releases_are_read(tmp_path: Path) -> None:
    """DSH 0.1.5 names its file `session.v3.jsonl.zstd`, 0.2.x `session.v4.jsonl.zstd`."""
    for version, compressed in (("v3", True), ("v4", True), ("v4", False)):
        root = tmp_path / f"{version}-{compressed}"
        session = DshSession(root, f"session-{version}", compressed=compressed)
        session.append(session.user("hello"), session.turn_end())
        suffix = ".jsonl.zstd" if compressed else ".jsonl"
        session.path.rename(session.path.with_name(f"session.{version}{suffix}"))
        read = only_read(DshSource(root).scan({}))
        assert read.session == f"dsh:session-{version}"
        assert [m.text for m in read.messages if m.role == "user"] == ["hello"]
