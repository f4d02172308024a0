"""Bad-transcripts campaign: every way a transcript can be broken, for every source kind.

Each file kind (jsonl, claude-code, codex, dsh with zstd frames and plain lines) gets the same
damage: binary junk, a whole file of junk, invalid UTF-8, a line far over `max_line_bytes`, a
record cut short with more written after it (and a partial record still being written), a
directory where the session file should be, a symlink loop and a FIFO. Hermes gets a garbage
`state.db`, a corrupt one, one held locked by a writer, a directory, and an SQLite file that is
not Hermes's. Permission denied is staged in-process for each kind (permission bits do not stop
root) and met for real by a `skilld once` run as an unprivileged user; files replaced or
truncated while being read are staged in-process (the moment inside a read cannot be timed from
outside).

The promise checked: nothing crashes; every bad record is a counted skip and every bad file a
reported error, the same numbers in-process and in `skilld status --json` after a real
`skilld once`; the good session beside the damage still produces its skill; a skip is counted
once, not on every tick; a locked database heals on the next tick.

Normal size uses a 9 MiB line (just over the 8 MiB default limit) and a few junk lines; `--full`
uses a 50 MiB line and thousands of junk lines.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import random
import re
import sqlite3
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zstandard

from skilld.transcripts import _tailer as tailer
from skilld.transcripts.dsh import files as dsh_files
from skilld.transcripts.model import ScanResult, Source
from skilld.transcripts.registry import build_source
from tests.campaigns.harness import (
    Proposer,
    Tally,
    body_of,
    log_problems,
    shared_tmp_dir,
    tick_failure_events,
    unprivileged,
)
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply

SEED = 20261130
NORMAL_HUGE_LINE_BYTES = 9 * 1024 * 1024
FULL_HUGE_LINE_BYTES = 50 * 1024 * 1024
NORMAL_JUNK_LINES = 20
FULL_JUNK_LINES = 4000
T0_MS = 1_786_000_000_000
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Size:
    huge_line_bytes: int
    junk_lines: int


@pytest.fixture
def size(full_size: bool) -> Size:
    if full_size:
        return Size(FULL_HUGE_LINE_BYTES, FULL_JUNK_LINES)
    return Size(NORMAL_HUGE_LINE_BYTES, NORMAL_JUNK_LINES)


# ------------------------------------------------------------------------------------------
# Writing sessions in each format


def session_uuid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"skilld-campaign/{name}"))


class Writer:
    """One session file of one format: its path, key, and how its records are written."""

    def __init__(self, fmt: Format, name: str) -> None:
        self.fmt = fmt
        self.name = name
        self.path = fmt.path(name)
        self.key = fmt.key(name)
        self.seq = 0
        self.count = 0

    # -- records of the format (one JSON line each) --

    def record(self, role: str, text: str) -> dict[str, Any]:
        self.count += 1
        kind = self.fmt.kind
        if kind == "jsonl":
            return {"role": role, "content": text}
        if kind == "claude-code":
            content = text if role == "user" else [{"type": "text", "text": text}]
            message = {"id": f"msg_{self.count}", "role": role, "content": content}
            return {
                "type": role,
                "uuid": f"u{self.count}",
                "sessionId": session_uuid(self.name),
                "timestamp": "2026-01-20T11:57:18.000Z",
                "message": message,
            }
        if kind == "codex":
            block = "input_text" if role == "user" else "output_text"
            payload = {"type": "message", "role": role, "content": [{"type": block, "text": text}]}
            return {
                "timestamp": "2026-01-02T00:00:00Z",
                "type": "response_item",
                "payload": payload,
            }
        return self.event(
            "user/message" if role == "user" else "assistant/message",
            {
                "role": "user",
                "content": [{"type": "text", "text": text}],
                "source": {"kind": "user"},
            }
            if role == "user"
            else {"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}},
        )

    def event(self, event_type: str, data: dict[str, Any]) -> dict[str, Any]:
        record = {"type": event_type, "seq": self.seq, "time": T0_MS + self.seq, "data": data}
        self.seq += 1
        return record

    def turn(self, question: str, answer: str) -> list[bytes]:
        records = [self.record("user", question), self.record("assistant", answer)]
        if self.fmt.kind == "dsh":
            records.append(self.event("turn/end", {"reason": {"kind": "completed"}}))
        return [json.dumps(record).encode() for record in records]

    def huge(self, size: int) -> bytes:
        return json.dumps(self.record("user", "x" * size)).encode()

    def header(self) -> bytes:
        return json.dumps({"type": "session", "version": 0, "id": self.name}).encode()

    # -- writing --

    def encode(self, lines: list[bytes]) -> bytes:
        """Complete lines as the format stores one write batch (one frame when compressed)."""
        payload = b"".join(line + b"\n" for line in lines)
        if self.fmt.compressed:
            return zstandard.ZstdCompressor(write_checksum=True).compress(payload)
        return payload

    def create(self, *chunks: bytes) -> Path:
        """Writes the file: a DSH header first, then the raw chunks."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        head = self.encode([self.header()]) if self.fmt.kind == "dsh" else b""
        self.path.write_bytes(head + b"".join(chunks))
        return self.path


@dataclass(frozen=True)
class Format:
    kind: str
    root: Path
    compressed: bool = False

    @property
    def label(self) -> str:
        if self.kind != "dsh":
            return self.kind
        return "dsh-zstd" if self.compressed else "dsh-plain"

    def path(self, name: str) -> Path:
        if self.kind == "jsonl":
            return self.root / f"{name}.jsonl"
        if self.kind == "claude-code":
            return self.root / "-home-dev-proj" / f"{session_uuid(name)}.jsonl"
        if self.kind == "codex":
            file_name = f"rollout-2026-01-02T00-00-00-{session_uuid(name)}.jsonl"
            return self.root / "2026" / "01" / "02" / file_name
        file_name = "session.jsonl.zstd" if self.compressed else "session.jsonl"
        return self.root / "--home-dev-proj--" / name / file_name

    def key(self, name: str) -> str:
        if self.kind in ("jsonl", "dsh"):
            return f"{self.kind}:{name}"
        return f"{self.kind}:{session_uuid(name)}"

    def session(self, name: str) -> Writer:
        prefix = "z-" if self.kind == "dsh" and self.compressed else ""
        return Writer(self, prefix + name)

    def source(self) -> Source:
        return build_source(self.kind, self.root)


def file_formats(base: Path) -> list[Format]:
    return [
        Format("jsonl", base / "jsonl"),
        Format("claude-code", base / "claude"),
        Format("codex", base / "codex"),
        Format("dsh", base / "dsh", compressed=True),
        Format("dsh", base / "dsh", compressed=False),
    ]


# ------------------------------------------------------------------------------------------
# The damage


@dataclass
class Expect:
    """What a scan must report for one case."""

    skips: int = 0  # malformed or oversize records counted
    errors: tuple[Path, ...] = ()  # files that must be named in the scan's errors
    survivors: tuple[str, ...] = ()  # texts written after the damage that must still be read
    key: str | None = None  # the session the survivors belong to
    #: Skips that belong to no session (an unreadable header): reported again on every scan.
    recount: int = 0


def junk_line(rng: random.Random, width: int) -> bytes:
    """Binary junk that is one non-blank line (no newline) and no Zstandard frame."""
    data = bytes(rng.getrandbits(8) for _ in range(width))
    return b"\xff" + data.replace(b"\n", b"\x00").replace(_ZSTD_MAGIC, b"\x00\x00\x00\x00")


def case_junk_lines(fmt: Format, size: Size, rng: random.Random) -> Expect:
    writer = fmt.session("junk-lines")
    junk = [junk_line(rng, 64) for _ in range(size.junk_lines)]
    survivors = writer.turn("after the junk", "still read")
    if fmt.compressed:
        # Junk between frames: one run of bytes that is not a frame, then a valid frame.
        writer.create(b"\n".join(junk), writer.encode(survivors))
        skips = 1
    else:
        writer.create(writer.encode(junk + survivors))
        skips = size.junk_lines
    return Expect(skips=skips, survivors=("after the junk", "still read"), key=writer.key)


def case_junk_file(fmt: Format, size: Size, rng: random.Random) -> Expect:
    writer = fmt.session("junk-file")
    writer.path.parent.mkdir(parents=True, exist_ok=True)
    writer.path.write_bytes(b"\n".join(junk_line(rng, 256) for _ in range(size.junk_lines)) + b"\n")
    if fmt.kind == "dsh":
        # No header: the file belongs to no session, so it is an error and a skip every scan.
        return Expect(skips=1, errors=(writer.path,), recount=1)
    return Expect(skips=size.junk_lines)


def with_raw(line: bytes, placeholder: bytes, raw: bytes) -> bytes:
    assert placeholder in line
    return line.replace(placeholder, raw)


def case_invalid_utf8(fmt: Format, size: Size, rng: random.Random) -> Expect:
    writer = fmt.session("invalid-utf8")
    broken = [
        b'{"role\xff": \xfe"user"}',  # invalid bytes where JSON needs structure
        b"\xc3\x28\xa0\xa1",
        b"\xed\xa0\x80\xed\xbf\xbf",  # an encoded surrogate pair
    ]
    inside_a_string = with_raw(
        json.dumps(writer.record("user", "caf@@ au lait")).encode(), b"@@", b"\xe9"
    )
    lines = [*broken, inside_a_string, *writer.turn("valid after utf-8 damage", "read on")]
    writer.create(writer.encode(lines))
    if fmt.kind == "dsh":
        # DSH events are decoded strictly: a bad byte anywhere drops the whole event.
        return Expect(skips=4, survivors=("valid after utf-8 damage", "read on"), key=writer.key)
    # The line-oriented sources replace bad bytes inside strings and keep the record.
    survivors = ("caf\ufffd au lait", "valid after utf-8 damage", "read on")
    return Expect(skips=3, survivors=survivors, key=writer.key)


def case_huge_line(fmt: Format, size: Size, rng: random.Random) -> Expect:
    writer = fmt.session("huge-line")
    lines = [writer.huge(size.huge_line_bytes), *writer.turn("after the huge line", "kept")]
    writer.create(writer.encode(lines))
    return Expect(skips=1, survivors=("after the huge line", "kept"), key=writer.key)


def case_truncated(fmt: Format, size: Size, rng: random.Random) -> Expect:
    """A record cut short by a crash, the agent writing on after it, and a record mid-write."""
    writer = fmt.session("truncated")
    before = writer.turn("before the cut", "answer before")
    cut = writer.turn("lost in the cut", "lost answer")
    after = writer.turn("after the cut", "answer after")
    pending = writer.turn("still being written", "not yet")
    if fmt.compressed:
        cut_frame = writer.encode(cut)
        pending_frame = writer.encode(pending)
        writer.create(
            writer.encode(before),
            cut_frame[: len(cut_frame) // 2],
            writer.encode(after),
            pending_frame[: len(pending_frame) // 2],
        )
    else:
        writer.create(
            writer.encode(before),
            cut[0][: len(cut[0]) // 2] + b"\n",
            writer.encode(after),
            pending[0][: len(pending[0]) // 2],
        )
    survivors = ("before the cut", "answer before", "after the cut", "answer after")
    return Expect(skips=1, survivors=survivors, key=writer.key)


def case_directory(fmt: Format, size: Size, rng: random.Random) -> Expect:
    writer = fmt.session("a-directory")
    writer.path.mkdir(parents=True)
    return Expect(errors=(writer.path,))


def case_symlink_loop(fmt: Format, size: Size, rng: random.Random) -> Expect:
    first, second = fmt.session("loop-a"), fmt.session("loop-b")
    first.path.parent.mkdir(parents=True, exist_ok=True)
    second.path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(second.path, first.path)
    os.symlink(first.path, second.path)
    return Expect(errors=(first.path, second.path))


def case_fifo(fmt: Format, size: Size, rng: random.Random) -> Expect:
    writer = fmt.session("a-fifo")
    writer.path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(writer.path)
    return Expect(errors=(writer.path,))


CASES: dict[str, Callable[[Format, Size, random.Random], Expect]] = {
    "junk-lines": case_junk_lines,
    "junk-file": case_junk_file,
    "invalid-utf8": case_invalid_utf8,
    "huge-line": case_huge_line,
    "truncated": case_truncated,
    "directory": case_directory,
    "symlink-loop": case_symlink_loop,
    "fifo": case_fifo,
}


def add_good_session(fmt: Format) -> Writer:
    writer = fmt.session("good")
    writer.create(
        writer.encode(writer.turn(f"good {fmt.label} question", f"good {fmt.label} answer"))
    )
    return writer


# ------------------------------------------------------------------------------------------
# Hermes databases

HERMES_SCHEMA = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, model_config TEXT, parent_session_id TEXT,
    started_at REAL NOT NULL
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, role TEXT NOT NULL,
    content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL NOT NULL,
    display_kind TEXT
);
"""


def hermes_db(path: Path, session_id: str, *, padding_rows: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.executescript(HERMES_SCHEMA)
        connection.execute("INSERT INTO sessions VALUES (?, 'cli', '{}', NULL, 0)", (session_id,))
        rows = [("user", f"hermes question in {session_id}"), ("assistant", "hermes answer")]
        rows += [("tool", "p" * 900)] * padding_rows
        connection.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, 1)",
            [(session_id, role, content) for role, content in rows],
        )
    finally:
        connection.close()
    return path


def corrupt_pages(path: Path, rng: random.Random) -> None:
    """Keeps the SQLite header and schema page, overwrites every later page's b-tree header."""
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for page_start in range(page_size, len(data), page_size):
        data[page_start : page_start + 12] = bytes(rng.getrandbits(8) | 0x80 for _ in range(12))
    path.write_bytes(bytes(data))


@dataclass
class HermesCases:
    good: Path
    locked: Path
    bad: dict[str, Path] = field(default_factory=dict)


def build_hermes(base: Path, rng: random.Random) -> HermesCases:
    cases = HermesCases(
        good=hermes_db(base / "good" / "state.db", "good-session"),
        locked=hermes_db(base / "locked" / "state.db", "locked-session"),
    )
    garbage = base / "garbage" / "state.db"
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(bytes(rng.getrandbits(8) for _ in range(8192)))
    cases.bad["garbage"] = garbage
    corrupt = hermes_db(base / "corrupt" / "state.db", "corrupt-session", padding_rows=40)
    corrupt_pages(corrupt, rng)
    cases.bad["corrupt"] = corrupt
    directory = base / "directory" / "state.db"
    directory.mkdir(parents=True)
    cases.bad["directory"] = directory
    foreign = base / "foreign" / "state.db"
    foreign.parent.mkdir(parents=True)
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    cases.bad["not-hermes"] = foreign
    return cases


@dataclass
class HeldLock:
    connection: sqlite3.Connection

    def release(self) -> None:
        self.connection.rollback()
        self.connection.close()


def hold_exclusive_lock(path: Path) -> HeldLock:
    """A writer holding the database locked (rollback journal, EXCLUSIVE transaction)."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.execute("BEGIN EXCLUSIVE")
    connection.execute("UPDATE sessions SET source = source")
    return HeldLock(connection)


# ------------------------------------------------------------------------------------------
# Checking scans


def total_skips(result: ScanResult) -> int:
    return result.skipped_lines + sum(read.skipped_lines for read in result.reads)


def texts_by_session(result: ScanResult) -> dict[str, list[str]]:
    texts: dict[str, list[str]] = {}
    for read in result.reads:
        texts.setdefault(read.session, []).extend(message.text for message in read.messages)
    return texts


def named(errors: list[str], path: Path) -> bool:
    return any(error.startswith(f"{path}:") for error in errors)


def stored(result: ScanResult) -> dict[str, Any]:
    return {read.session: json.loads(json.dumps(read.cursor)) for read in result.reads}


# ------------------------------------------------------------------------------------------
# In-process: each case alone beside a good session


def test_each_case_is_counted_in_process(tmp_path: Path, size: Size, campaign_figures: Any) -> None:
    rng = random.Random(SEED)
    tally = Tally()
    skips = errors = 0

    def check_case(fmt: Format, name: str, build: Callable[..., Expect]) -> None:
        nonlocal skips, errors
        good = add_good_session(fmt)
        expect = build(fmt, size, rng)
        where = f"{fmt.label}/{name}"

        first = fmt.source().scan({})
        assert total_skips(first) == expect.skips, where
        for path in expect.errors:
            assert named(first.errors, path), (where, first.errors)
        assert len(first.errors) == len(expect.errors), (where, first.errors)
        texts = texts_by_session(first)
        assert texts.get(good.key) == [
            f"good {fmt.label} question",
            f"good {fmt.label} answer",
        ], where
        if expect.key is not None:
            assert [t for t in texts.get(expect.key, []) if t in expect.survivors] == list(
                expect.survivors
            ), (where, texts.get(expect.key))

        again = fmt.source().scan(stored(first))
        assert total_skips(again) == expect.recount, where
        assert all(not read.messages for read in again.reads), where
        assert len(again.errors) == len(expect.errors), (where, again.errors)
        skips += expect.skips
        errors += len(expect.errors)

    for fmt_index, template in enumerate(file_formats(tmp_path)):
        for name, build in CASES.items():
            fmt = Format(template.kind, tmp_path / f"{fmt_index}-{name}", template.compressed)
            tally.run(check_case, fmt, name, build)

    hermes = build_hermes(tmp_path / "hermes", rng)

    def check_locked() -> None:
        nonlocal errors
        lock = hold_exclusive_lock(hermes.locked)
        try:
            locked = build_source("hermes", hermes.locked).scan({})
        finally:
            lock.release()
        assert named(locked.errors, hermes.locked) and "locked" in locked.errors[0]
        healed = build_source("hermes", hermes.locked).scan({})
        assert texts_by_session(healed) == {
            "hermes:locked-session": ["hermes question in locked-session", "hermes answer"]
        }
        errors += 1

    def check_bad_database(name: str, path: Path) -> None:
        nonlocal errors
        result = build_source("hermes", path).scan({})
        assert result.reads == [], name
        assert len(result.errors) == 1 and named(result.errors, path), (name, result.errors)
        errors += 1

    tally.run(check_locked)
    for name, path in hermes.bad.items():
        tally.run(check_bad_database, name, path)
    campaign_figures(
        "bad transcripts in-process",
        cases=tally.checked,
        kinds=len(file_formats(tmp_path)) + 1,
        skips_counted=skips,
        errors_reported=errors,
        failed=tally.failed,
    )
    tally.raise_held()


# -- damage that happens during a read --------------------------------------------------------


@pytest.mark.parametrize("label", ["jsonl", "claude-code", "codex", "dsh-zstd", "dsh-plain"])
def test_permission_denied_is_an_error_and_heals(
    tmp_path: Path, label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fmt = next(f for f in file_formats(tmp_path) if f.label == label)
    good = add_good_session(fmt)
    denied = fmt.session("denied")
    denied.create(denied.encode(denied.turn("secret plans", "kept private")))
    real_os_open, real_open = os.open, builtins.open

    def refuse(path: Any) -> None:
        if Path(os.fsdecode(path)) == denied.path:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))

    def os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        refuse(path)
        return real_os_open(path, *args, **kwargs)

    def open_(path: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, str | bytes | os.PathLike):
            refuse(path)
        return real_open(path, *args, **kwargs)

    # Permission bits do not stop root, so the refusal comes from the open calls themselves.
    with monkeypatch.context() as patch:
        patch.setattr(os, "open", os_open)
        patch.setattr(builtins, "open", open_)
        result = fmt.source().scan({})
    assert [error for error in result.errors if "Permission denied" in error] == [
        f"{denied.path}: Permission denied"
    ]
    assert denied.key not in texts_by_session(result)
    assert good.key in texts_by_session(result)
    healed = fmt.source().scan(stored(result))
    assert texts_by_session(healed) == {denied.key: ["secret plans", "kept private"]}


def test_permission_denied_for_an_unprivileged_daemon(fake_llm: FakeLLM) -> None:
    """Permission bits as they really are: `skilld once` as an unprivileged user, one session
    file unreadable to it (mode 000). It is reported by name, the other session still learns,
    and once readable it is read and learnt from."""
    user = unprivileged()
    proposer = Proposer()
    fake_llm.responder = proposer
    with shared_tmp_dir() as base:
        workspace = Workspace(base / "ws", llm_url=fake_llm.base_url)
        workspace.skills.mkdir(parents=True)
        for name in ("readable", "denied"):
            workspace.add_session(name, conversation(f"the {name} build"))
            proposer.wanted[f"jsonl:{name}"] = body_of(f"learned-{name}")
        denied = workspace.sessions / "denied.jsonl"
        workspace.write_config()
        user.own(workspace.root)
        denied.chmod(0)

        def as_user(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                user.skilld(*args),
                env=workspace.env(HOME=str(workspace.root)),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )

        first = as_user("once")
        errors = json.loads(as_user("status", "--json").stdout)["source_errors"]
        learned_first = sorted(p.parent.name for p in workspace.skills.glob("*/SKILL.md"))
        denied.chmod(0o644)
        second = as_user("once")
        learned = sorted(p.parent.name for p in workspace.skills.glob("*/SKILL.md"))
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert errors == [f"{denied}: Permission denied"]
    assert learned_first == ["learned-readable"]
    assert learned == ["learned-denied", "learned-readable"]
    assert dict(proposer.asks) == {"jsonl:readable": 1, "jsonl:denied": 1}


READERS = {
    "jsonl": [(tailer, "_read_lines")],
    "claude-code": [(tailer, "_read_lines")],
    "codex": [(tailer, "_read_lines")],
    "dsh-zstd": [(dsh_files, "_read_zstd_tail")],
    "dsh-plain": [(dsh_files, "_read_plain_tail")],
}


@contextlib.contextmanager
def during_read(label: str, damage: Callable[[], None]) -> Iterator[None]:
    """Runs `damage` once, inside the read, after the file was opened and measured."""
    done = False
    with pytest.MonkeyPatch.context() as patch:
        for module, name in READERS[label]:
            real = getattr(module, name)

            def wrapped(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
                nonlocal done
                if not done:
                    done = True
                    damage()
                return _real(*args, **kwargs)

            patch.setattr(module, name, wrapped)
        yield
    assert done, "the damage never ran: the reader was not called"


def original_and_rewrite(writer: Writer) -> tuple[bytes, bytes]:
    """A long original file and a shorter rewrite of the same session."""
    original = b"".join(
        writer.encode(writer.turn(f"original question {index}", f"original answer {index}"))
        for index in range(20)
    )
    rewrite = writer.encode(writer.turn("rewritten question", "rewritten answer"))
    return original, rewrite


@pytest.mark.parametrize("label", ["jsonl", "claude-code", "codex", "dsh-zstd", "dsh-plain"])
def test_file_replaced_while_being_read(tmp_path: Path, label: str) -> None:
    fmt = next(f for f in file_formats(tmp_path) if f.label == label)
    writer = fmt.session("replaced")
    original, rewrite = original_and_rewrite(writer)
    writer.create(original)
    replacement = writer.path.with_name("replacement.tmp")

    def replace() -> None:
        head = writer.encode([writer.header()]) if fmt.kind == "dsh" else b""
        replacement.write_bytes(head + rewrite)
        os.replace(replacement, writer.path)

    with during_read(label, replace):
        first = fmt.source().scan({})
    # The open handle still reads the file it opened: the original, complete.
    assert texts_by_session(first)[writer.key][-1] == "original answer 19"
    second = fmt.source().scan(stored(first))
    (read,) = second.reads
    assert read.reset is True
    assert [m.text for m in read.messages] == ["rewritten question", "rewritten answer"]
    assert second.errors == [] and total_skips(second) == 0


@pytest.mark.parametrize("label", ["jsonl", "claude-code", "codex", "dsh-zstd", "dsh-plain"])
def test_file_truncated_while_being_read(tmp_path: Path, label: str) -> None:
    fmt = next(f for f in file_formats(tmp_path) if f.label == label)
    writer = fmt.session("shrinking")
    original, rewrite = original_and_rewrite(writer)
    writer.create(original)

    def truncate_in_place() -> None:
        head = writer.encode([writer.header()]) if fmt.kind == "dsh" else b""
        with writer.path.open("r+b") as handle:  # same inode, fewer bytes
            handle.truncate(0)
            handle.write(head + rewrite)

    with during_read(label, truncate_in_place):
        first = fmt.source().scan({})
    cursors = stored(first)
    second = fmt.source().scan(cursors)
    cursors.update(stored(second))
    third = fmt.source().scan(cursors)
    seen = [
        text
        for result in (first, second, third)
        for text in texts_by_session(result).get(writer.key, [])
    ]
    # Whatever the read caught mid-shrink, the rewrite ends up read exactly once.
    assert seen.count("rewritten question") == 1 and seen.count("rewritten answer") == 1, seen
    assert all(not result.errors for result in (first, second, third))


# ------------------------------------------------------------------------------------------
# End to end: the real daemon over a workspace holding every case at once

GOOD_SKILLS = {
    "jsonl": "good-jsonl",
    "claude-code": "good-claude-code",
    "codex": "good-codex",
    "dsh-zstd": "good-dsh-zstd",
    "dsh-plain": "good-dsh-plain",
    "hermes": "good-hermes",
}
_SESSION_IN_PROMPT = re.compile(r"^Session (\S+) \(", re.MULTILINE)


def test_daemon_survives_every_case_and_counts_them(
    tmp_path: Path, size: Size, fake_llm: FakeLLM, campaign_figures: Any
) -> None:
    rng = random.Random(SEED + 1)
    workspace = Workspace(tmp_path / "ws", llm_url=fake_llm.base_url)
    workspace.skills.mkdir(parents=True)
    base = tmp_path / "transcripts"
    formats = file_formats(base)
    skills_for: dict[str, str] = {}
    expected_skips = expected_recount = 0
    expected_errors: list[Path] = []
    for fmt in formats:
        skills_for[add_good_session(fmt).key] = GOOD_SKILLS[fmt.label]
        for build in CASES.values():
            expect = build(fmt, size, rng)
            expected_skips += expect.skips
            expected_recount += expect.recount
            expected_errors += expect.errors
    hermes = build_hermes(base / "hermes", rng)
    skills_for["hermes:good-session"] = GOOD_SKILLS["hermes"]
    skills_for["hermes:locked-session"] = "healed-hermes"
    expected_errors += [*hermes.bad.values(), hermes.locked]

    roots = {(fmt.kind, fmt.root) for fmt in formats}
    workspace.sources = [{"kind": kind, "path": str(root)} for kind, root in sorted(roots)]
    workspace.sources += [
        {"kind": "hermes", "path": str(path)}
        for path in (hermes.good, hermes.locked, *hermes.bad.values())
    ]
    workspace.write_config()

    def respond(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][1]["content"]
        match = _SESSION_IN_PROMPT.search(prompt)
        name = skills_for.get(match.group(1)) if match else None
        if name is None:
            return skip_reply()
        # Distinct texts, so that the near-duplicate guard keeps each skill apart.
        seed = uuid.uuid5(uuid.NAMESPACE_URL, name).hex
        return skill_reply(
            name,
            content=f"1. Open the {seed[:12]} checklist.\n2. Verify {seed[12:24]}.\n",
            description=f"Procedure {seed[24:]} learned from {name}.",
        )

    fake_llm.responder = respond
    lock = hold_exclusive_lock(hermes.locked)
    try:
        first = workspace.cli("once", timeout=300)
    finally:
        lock.release()
    status = json.loads(workspace.cli("status", "--json").stdout)
    skills = {row["name"] for row in json.loads(workspace.cli("skills", "list", "--json").stdout)}
    written = {name for name in skills if (workspace.skills / name / "SKILL.md").is_file()}

    # The next tick: the lock is gone, nothing is counted twice, the damage is still reported.
    second = workspace.cli("once", timeout=300)
    healed_status = json.loads(workspace.cli("status", "--json").stdout)
    healed = {row["name"] for row in json.loads(workspace.cli("skills", "list", "--json").stdout)}
    failures = [
        f"tick {tick}: {problem}"
        for tick, result in enumerate((first, second), 1)
        for problem in [
            *([f"exit {result.returncode}"] if result.returncode else []),
            *log_problems(result.stderr),
        ]
    ] + tick_failure_events(workspace.state / "state.db")
    reported = status["source_errors"]
    missing = [str(path) for path in expected_errors if not named(reported, path)]
    campaign_figures(
        "bad transcripts daemon",
        sources=len(workspace.sources),
        cases=len(CASES) * len(formats) + len(hermes.bad) + 1,
        huge_line_mib=size.huge_line_bytes // (1024 * 1024),
        skipped_counted=status["malformed_lines_skipped"],
        source_errors=status["source_errors_total"],
        errors_not_named=len(missing),
        good_skills=f"{len(written & set(GOOD_SKILLS.values()))}/{len(GOOD_SKILLS)}",
        healed_after_lock=int("healed-hermes" in healed),
        failed_ticks=len(failures),
    )
    assert failures == [], failures
    assert status["malformed_lines_skipped"] == expected_skips
    assert missing == [], reported
    assert status["source_errors_total"] == len(expected_errors), reported
    assert skills == written == set(GOOD_SKILLS.values())
    assert healed_status["malformed_lines_skipped"] == expected_skips + expected_recount
    assert healed_status["source_errors_total"] == len(expected_errors) - 1  # the lock healed
    assert healed == {*GOOD_SKILLS.values(), "healed-hermes"}
