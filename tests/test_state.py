from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from skilld.state import SCHEMA_VERSION, DaemonLock, SessionState, StateDB, StateError


def test_schema_version_and_wal(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as db:
        assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newer_schema_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    StateDB(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StateError, match="newer"):
        StateDB(path)


def test_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StateError, match="not a usable state database"):
        StateDB(path)


def test_events_filter_and_order(tmp_path: Path) -> None:
    clock = iter([100.0, 200.0, 300.0]).__next__
    with StateDB(tmp_path / "state.db", clock=clock) as db:
        db.add_event("created", skill="a", detail={"n": 1})
        db.add_event("skipped", session="s1", reason="nothing")
        db.add_event("updated", skill="a")
        assert [e.kind for e in db.events()] == ["created", "skipped", "updated"]
        assert [e.kind for e in db.events(skill="a")] == ["created", "updated"]
        assert [e.kind for e in db.events(kinds=("skipped",))] == ["skipped"]
        assert [e.kind for e in db.events(limit=1)] == ["updated"]
        assert db.events(kinds=("created",))[0].detail == {"n": 1}
        assert [e.kind for e in db.events(since="1970-01-01T00:04:00+00:00")] == ["updated"]
        with pytest.raises(ValueError):
            db.add_event("made-up-kind")


def test_transaction_rolls_back_everything(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as db:
        with pytest.raises(RuntimeError), db.transaction():
            db.add_event("created", skill="x")
            db.set_meta("k", 1)
            raise RuntimeError("boom")
        assert db.events() == []
        assert db.get_meta("k") is None


def test_sessions_roundtrip_and_forgetting(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as db:
        pending = SessionState("jsonl:a", "src", {"offset": 5}, 0, [{"role": "user", "text": "hi"}],
                               None, 0, None, 1.0)  # fmt: skip
        idle = SessionState("jsonl:b", "src", {"offset": 9}, 3, [], 5.0, 0, None, 2.0)
        db.save_session(pending)
        db.save_session(idle)
        assert db.cursors("src") == {"jsonl:a": {"offset": 5}, "jsonl:b": {"offset": 9}}
        assert db.sessions_with_pending() == ["jsonl:a"]
        loaded = db.session("jsonl:a")
        assert loaded is not None and loaded.pending == [{"role": "user", "text": "hi"}]
        # Neither is seen any more: the idle one is forgotten, the pending one is kept.
        assert db.forget_sessions("src", {"jsonl:a", "jsonl:b"}) == ["jsonl:b"]
        assert db.session("jsonl:b") is None
        assert db.session("jsonl:a") is not None
        assert db.session_stats()["deferred"] == 1


def test_provenance_keeps_previous_hash(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as db:
        db.put_provenance("a", path="/x", sha256="h1", session="s", model="m")
        db.put_provenance("a", path="/x", sha256="h2", prev_sha256="h1")
        record = db.provenance("a")
        assert record is not None
        assert (record.sha256, record.prev_sha256, record.session, record.model) == (
            "h2", "h1", "s", "m",
        )  # fmt: skip


def test_one_daemon_per_state_dir_names_the_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from skilld.state import DaemonLock;"
         "DaemonLock(Path(sys.argv[1])).acquire(); print('locked', flush=True); time.sleep(30)",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StateError, match=f"pid {holder.pid}"):
            DaemonLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    with DaemonLock(tmp_path):
        pass


def test_detail_keys_may_repeat_column_names(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as db:
        db.add_event("archived", skill="a", reason="r", detail={"reason": "x", "event": "y"})
        event = db.events()[0]
        assert event.reason == "r" and event.detail == {"reason": "x", "event": "y"}
