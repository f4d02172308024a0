from __future__ import annotations

import builtins
import hashlib
import io
import os
import tracemalloc
from pathlib import Path

import pytest

from skilld.transcripts._fileid import ContentMark, continues
from skilld.transcripts._tailer import (
    FileVanished,
    TailError,
    read_appended_lines,
)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def bump_mtime(path: Path, seconds: int = 5) -> None:
    """Move mtime forward explicitly: coarse kernel timestamps can hide two quick writes."""
    current = os.stat(path).st_mtime_ns
    os.utime(path, ns=(current, current + seconds * 1_000_000_000))


def test_reads_complete_lines_then_only_what_was_appended(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b'{"a": 1}\n{"b": 2}\n')

    first = read_appended_lines(log, None)
    assert first.lines == [b'{"a": 1}', b'{"b": 2}']
    assert first.reset is False
    assert first.cursor["offset"] == 18
    assert first.cursor["size"] == 18

    append(log, b'{"c": 3}\n')
    second = read_appended_lines(log, first.cursor)
    assert second.lines == [b'{"c": 3}']
    assert second.reset is False
    assert second.cursor["offset"] == 27


def test_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b'{"a": 1}\n{"b": ')

    first = read_appended_lines(log, None)
    assert first.lines == [b'{"a": 1}']
    assert first.cursor["offset"] == 9

    # Still partial: nothing new, the offset stays before it.
    append(log, b"2")
    waiting = read_appended_lines(log, first.cursor)
    assert waiting.lines == []
    assert waiting.cursor["offset"] == 9

    append(log, b"}\n")
    completed = read_appended_lines(log, waiting.cursor)
    assert completed.lines == [b'{"b": 2}']
    assert completed.reset is False

    again = read_appended_lines(log, completed.cursor)
    assert again.lines == []


def test_truncated_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\ntwo\nthree\n")
    first = read_appended_lines(log, None)

    with open(log, "r+b") as handle:
        handle.truncate(0)
        handle.write(b"new\n")
    result = read_appended_lines(log, first.cursor)

    assert result.reset is True
    assert result.lines == [b"new"]
    assert result.cursor["offset"] == 4


def test_replaced_file_with_other_content_is_read_again(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\ntwo\n")
    first = read_appended_lines(log, None)

    replacement = tmp_path / "next.jsonl"
    replacement.write_bytes(b"one\nTWO\nthree\n")  # longer, same head, other bytes before
    os.replace(replacement, log)
    result = read_appended_lines(log, first.cursor)

    assert result.reset is True
    assert result.lines == [b"one", b"TWO", b"three"]
    assert result.cursor["ino"] == os.stat(log).st_ino


def test_same_content_under_a_new_inode_is_read_on_from_the_offset(tmp_path: Path) -> None:
    """A file copied and renamed over itself (or restored from a backup) with more appended."""
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\ntwo\n")
    first = read_appended_lines(log, None)

    replacement = tmp_path / "next.jsonl"
    replacement.write_bytes(b"one\ntwo\nthree\n")
    os.replace(replacement, log)
    assert os.stat(log).st_ino != first.cursor["ino"]
    result = read_appended_lines(log, first.cursor)

    assert result.reset is False
    assert result.lines == [b"three"]
    assert result.cursor["ino"] == os.stat(log).st_ino


def test_a_new_device_with_the_same_content_is_no_reset(tmp_path: Path) -> None:
    """A remount gives every file a new st_dev: the bytes decide, not the device."""
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\ntwo\n")
    first = read_appended_lines(log, None)
    elsewhere = {**first.cursor, "dev": first.cursor["dev"] + 1}

    append(log, b"three\n")
    result = read_appended_lines(log, elsewhere)

    assert result.reset is False
    assert result.lines == [b"three"]
    assert result.cursor["dev"] == os.stat(log).st_dev


def test_bytes_changed_just_before_the_offset_are_read_again(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"x" * 100 + b"\nlast line\n")
    first = read_appended_lines(log, None)

    with open(log, "r+b") as handle:  # same inode, same head, a later byte rewritten
        handle.seek(101)
        handle.write(b"L")
    append(log, b"more\n")
    result = read_appended_lines(log, first.cursor)

    assert result.reset is True
    assert result.lines == [b"x" * 100, b"Last line", b"more"]


def test_a_cursor_without_a_tail_trusts_its_inode(tmp_path: Path) -> None:
    """Cursors written before tails were kept: the inode decides, as it did then."""
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\ntwo\n")
    first = read_appended_lines(log, None)
    older = {key: value for key, value in first.cursor.items() if key != "tail"}
    older["head"] = hashlib.sha256(b"one\ntwo\n").hexdigest()  # the whole digest, as then

    append(log, b"three\n")
    same_inode = read_appended_lines(log, older)
    assert (same_inode.reset, same_inode.lines) == (False, [b"three"])
    assert "tail" in same_inode.cursor

    replacement = tmp_path / "next.jsonl"
    replacement.write_bytes(log.read_bytes())
    os.replace(replacement, log)
    new_inode = read_appended_lines(log, older)
    assert (new_inode.reset, new_inode.lines) == (True, [b"one", b"two", b"three"])


def test_same_size_rewrite_in_place_is_read_again(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"alpha\nbeta\n")
    first = read_appended_lines(log, None)
    inode = os.stat(log).st_ino

    with open(log, "r+b") as handle:
        handle.write(b"gamma\ndelt\n")
    bump_mtime(log)
    assert os.stat(log).st_ino == inode
    assert os.stat(log).st_size == first.cursor["size"]

    result = read_appended_lines(log, first.cursor)
    assert result.reset is True
    assert result.lines == [b"gamma", b"delt"]


def test_unchanged_file_is_answered_from_stat_without_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\n")
    first = read_appended_lines(log, None)

    opened: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        opened.append(args[0])
        raise AssertionError(f"opened {args[0]}")

    monkeypatch.setattr(os, "open", refuse)
    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(io, "open", refuse)

    unchanged = read_appended_lines(log, first.cursor)
    assert unchanged.lines == []
    assert unchanged.cursor == first.cursor
    assert opened == []

    # The guard is real: a changed file must be opened.
    bump_mtime(log)
    with pytest.raises(AssertionError):
        read_appended_lines(log, first.cursor)
    assert opened == [log]


def test_oversize_line_is_skipped_and_counted_without_holding_it(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    huge = b"x" * (5 * 1024 * 1024)
    log.write_bytes(b"before\n" + huge + b"\nafter\n")

    tracemalloc.start()
    try:
        result = read_appended_lines(log, None, max_line_bytes=1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert result.lines == [b"before", b"after"]
    assert result.skipped_oversize == 1
    assert result.cursor["offset"] == len(huge) + 14
    assert peak < 1024 * 1024


def test_oversize_line_still_being_written_is_discarded_across_reads(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"ok\n" + b"y" * 4096)

    first = read_appended_lines(log, None, max_line_bytes=1024)
    assert first.lines == [b"ok"]
    assert first.skipped_oversize == 0
    # Its start is already discarded; the cursor resumes past it, not before it.
    assert first.cursor["skipping"] is True
    assert first.cursor["offset"] == 3 + 4096

    append(log, b"y" * 100 + b"\nlast\n")
    second = read_appended_lines(log, first.cursor, max_line_bytes=1024)
    assert second.lines == [b"last"]
    assert second.skipped_oversize == 1
    assert "skipping" not in second.cursor


def test_line_of_exactly_max_bytes_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"a" * 1024 + b"\n" + b"b" * 1025 + b"\n")

    result = read_appended_lines(log, None, max_line_bytes=1024)

    assert result.lines == [b"a" * 1024]
    assert result.skipped_oversize == 1


def test_start_at_end_returns_nothing_and_resumes_at_the_last_complete_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"old\nolder\npart")

    start = read_appended_lines(log, None, start_at_end=True)
    assert start.lines == []
    assert start.cursor["offset"] == 10

    append(log, b"ial\nnew\n")
    result = read_appended_lines(log, start.cursor)
    assert result.lines == [b"partial", b"new"]


def test_start_at_end_without_any_newline_starts_at_zero(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"no newline yet")

    start = read_appended_lines(log, None, start_at_end=True)

    assert start.lines == []
    assert start.cursor["offset"] == 0


def test_malformed_cursor_reads_again_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\n")

    result = read_appended_lines(log, {"offset": "nonsense"})

    assert result.reset is True
    assert result.lines == [b"one"]


def test_empty_file_yields_a_cursor_at_zero(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"")

    result = read_appended_lines(log, None)

    assert result.lines == []
    assert result.cursor["offset"] == 0
    assert result.cursor["size"] == 0


def test_vanished_file_raises_file_vanished(tmp_path: Path) -> None:
    with pytest.raises(FileVanished):
        read_appended_lines(tmp_path / "gone.jsonl", None)


def test_directory_raises_tail_error(tmp_path: Path) -> None:
    directory = tmp_path / "dir.jsonl"
    directory.mkdir()

    with pytest.raises(TailError, match="is a directory"):
        read_appended_lines(directory, None)


def test_symlink_loop_raises_tail_error(tmp_path: Path) -> None:
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)

    with pytest.raises(TailError) as raised:
        read_appended_lines(loop, None)
    assert not isinstance(raised.value, FileVanished)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)

    with pytest.raises(TailError, match="not a regular file"):
        read_appended_lines(fifo, None)


def test_permission_error_raises_tail_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"one\n")

    def denied(*args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied", str(args[0]))

    # Tests run as root, where chmod 000 does not stop a read: simulate the refusal.
    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(TailError, match="Permission denied"):
        read_appended_lines(log, None)


def test_symlink_to_a_file_is_followed(tmp_path: Path) -> None:
    target = tmp_path / "real.jsonl"
    target.write_bytes(b"one\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)

    result = read_appended_lines(link, None)

    assert result.lines == [b"one"]
    assert result.cursor["ino"] == os.stat(target).st_ino


MARK = ContentMark(offset=100, head="h" * 32, tail="ab" * 16)


@pytest.mark.parametrize(
    ("size", "head", "tail", "same_inode", "expected"),
    [
        (100, "h" * 32, "ab" * 16, True, True),  # nothing appended
        (150, "h" * 32, "ab" * 16, False, True),  # appended, under a new inode or device
        (99, "h" * 32, "ab" * 16, True, False),  # shrunk below the offset
        (150, "g" * 32, "ab" * 16, True, False),  # rewritten in place: another head
        (150, "h" * 32, "cd" * 16, True, False),  # rewritten in place: other bytes before
    ],
)
def test_content_decides_whether_a_file_continues(
    size: int, head: str, tail: str, same_inode: bool, expected: bool
) -> None:
    assert continues(MARK, size=size, head=head, tail=tail, same_inode=same_inode) is expected


def test_a_mark_without_a_tail_is_vouched_for_by_its_inode() -> None:
    older = ContentMark(offset=100, head="h" * 32, tail=None)
    assert continues(older, size=150, head="h" * 32, tail="cd" * 16, same_inode=True)
    assert not continues(older, size=150, head="h" * 32, tail="ab" * 16, same_inode=False)


def test_marks_round_trip_through_cursors_and_reject_what_is_not_one() -> None:
    assert ContentMark.from_cursor(MARK.to_cursor()) == MARK
    whole_digest = {**MARK.to_cursor(), "head": "h" * 64}  # older cursors kept all of SHA-256
    assert ContentMark.from_cursor(whole_digest) == MARK
    for broken in ({"offset": -1}, {"offset": True}, {"head": "short"}, {"tail": 3}):
        assert ContentMark.from_cursor({**MARK.to_cursor(), **broken}) is None
