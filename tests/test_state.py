from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skilld.errors import StateError
from skilld.state import SCHEMA_VERSION, Held, SessionState, StateDB
from skilld.state.db import _V1
from skilld.state.lock import DaemonLock


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


def test_count_kinds_counts_each_kind_since_a_time(tmp_path: Path) -> None:
    clock = iter([100.0, 200.0, 300.0, 400.0, 500.0]).__next__
    with StateDB(tmp_path / "state.db", clock=clock) as db:
        for kind in ("created", "created", "updated", "skipped", "created"):
            db.add_event(kind, skill="a")
        since = "1970-01-01T00:03:00+00:00"  # the second event (at 200 s) on
        assert db.count_kinds(("created", "updated"), since=since) == {"created": 2, "updated": 1}
        assert db.count_kinds(("created", "merged"), since="1970-01-01T00:00:00+00:00") == {
            "created": 3,
            "merged": 0,
        }
        assert db.count_kinds(("created",), since="1970-01-01T01:00:00+00:00") == {"created": 0}


def test_a_skill_s_events_are_read_by_the_skill_s_index(tmp_path: Path) -> None:
    """With a skill named, neither the library's nor a kind's index (every event of a
    library) is walked: at 1,000,000 events that was 3 s for `skills show`."""
    db = StateDB(tmp_path / "state.db")
    for n in range(200):
        db.add_event("created", library="default", skill=f"s{n % 20}")
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    found = db.events(kinds=("created", "updated"), skill="s3", library="default", before_id=150)
    assert [e.skill for e in found] == ["s3"] * 8
    (query,) = [s for s in statements if s.startswith("SELECT * FROM events")]
    plan = " ".join(row[3] for row in db.conn.execute(f"EXPLAIN QUERY PLAN {query}"))
    assert "events_skill" in plan, plan
    page = db.events(library="default", limit=5, before_id=100)
    assert [e.id for e in page] == [95, 96, 97, 98, 99]
    db.close()


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
        held = Held(start=0, size=1, chars=2, conversational=1, last_append_at=1.0)
        pending = SessionState("jsonl:a", "src", {"offset": 5}, held, None, 0, None, 1.0, "/w")
        idle = SessionState("jsonl:b", "src", {"offset": 9}, Held(start=3), 5.0, 0, None, 2.0)
        db.save_session(pending)
        db.append_held("jsonl:a", 0, [{"role": "user", "text": "hi"}])
        db.save_session(idle)
        assert db.cursors("src") == {"jsonl:a": {"offset": 5}, "jsonl:b": {"offset": 9}}
        assert db.sessions_with_pending() == ["jsonl:a"]
        loaded = db.session("jsonl:a")
        assert loaded is not None and loaded.held == held and loaded.cwd == "/w"
        assert db.held_messages("jsonl:a", 0, 1) == [{"role": "user", "text": "hi"}]
        # Neither is seen any more: the idle one is forgotten, the pending one is kept.
        assert db.forget_sessions("src", {"jsonl:a", "jsonl:b"}) == ["jsonl:b"]
        assert db.session("jsonl:b") is None
        assert db.session("jsonl:a") is not None
        assert db.session_stats()["deferred"] == 1


def test_provenance_keeps_previous_hash(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as db:
        db.put_provenance("lib", "a", path="/x", sha256="h1", session="s", model="m")
        db.put_provenance("lib", "a", path="/x", sha256="h2", prev_sha256="h1")
        record = db.provenance("lib", "a")
        assert record is not None
        assert (record.sha256, record.prev_sha256, record.session, record.model) == (
            "h2", "h1", "s", "m",
        )  # fmt: skip
        assert db.provenance("other", "a") is None
        # A later write settles only its own hash: an older commit never clears a newer one.
        db.settle_provenance("lib", "a", "h1")
        assert db.provenance("lib", "a").prev_sha256 == "h1"  # type: ignore[union-attr]
        db.settle_provenance("lib", "a", "h2")
        assert db.provenance("lib", "a").prev_sha256 is None  # type: ignore[union-attr]


def test_a_failed_commit_leaves_no_transaction_open(tmp_path: Path) -> None:
    with StateDB(tmp_path / "state.db") as db:
        db.set_meta("k", 1)
        # A deferred foreign-key check fails only at COMMIT: the commit itself raises.
        db.conn.execute("PRAGMA foreign_keys = ON")
        db.conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        db.conn.execute(
            "CREATE TABLE child (id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
        )
        with pytest.raises(sqlite3.IntegrityError), db.transaction():
            db.conn.execute("INSERT INTO child VALUES (1)")
            db.set_meta("k", 2)
        assert not db.conn.in_transaction
        assert db.get_meta("k") == 1
        with db.transaction():  # the connection is usable again
            db.set_meta("k", 3)
        assert db.get_meta("k") == 3


def test_schema_1_is_migrated_with_its_held_messages_and_provenance(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(_V1 + "PRAGMA user_version = 1;")
    conn.execute(
        "INSERT INTO sessions(key, source, cursor, reflected, pending, pending_count,"
        " updated_at) VALUES ('jsonl:a', 'src', '{}', 4, ?, 2, 0)",
        ('[{"role": "user", "text": "one"}, {"role": "assistant", "text": "two"}]',),
    )
    conn.execute(
        "INSERT INTO provenance(name, path, sha256, created_at, updated_at)"
        " VALUES ('fix', '/skills/fix/SKILL.md', 'h', 't', 't')"
    )
    conn.commit()
    conn.close()
    with StateDB(path) as db:
        session = db.session("jsonl:a")
        assert session is not None and session.held.start == 4 and session.held.size == 2
        assert session.held.conversational == -1  # summarised from its rows on first use
        assert [m["text"] for m in db.held_messages("jsonl:a", 4, 6)] == ["one", "two"]
        assert db.adopt_provenance("default", Path("/skills"), [""]) == [("", "fix")]
        assert db.provenance("default", "fix") is not None


def test_one_daemon_per_state_dir_names_the_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from skilld.state.lock import DaemonLock;"
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


@pytest.mark.slow
def test_many_openers_of_a_new_state_db_all_get_it_in_wal_mode(tmp_path: Path) -> None:
    """Converting a file to WAL needs it to itself and SQLite answers "busy" at once rather
    than wait: without a retry about one round in thirty lost an opener here."""
    failures: list[str] = []
    for round_ in range(150):
        path = tmp_path / f"{round_}" / "state.db"
        start = threading.Barrier(12)

        def open_and_close(path: Path = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                StateDB(path).close()
            except StateError as exc:
                failures.append(str(exc))

        openers = [threading.Thread(target=open_and_close) for _ in range(12)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join()
        check = sqlite3.connect(path)
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        check.close()
    assert failures == []
