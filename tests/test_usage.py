"""The `.usage.json` sidecar: Hermes field compatibility, locking, corruption, concurrency."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skilld.skills.usage import (
    CORRUPT_PREFIX,
    DAYS_KEPT,
    LOCK_FILE,
    TEMP_FILE,
    UsageStore,
    activity_count,
    apply_bump,
    decode_usage,
    encode_usage,
    format_timestamp,
    latest_activity_at,
    new_record,
)

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
HERMES_FIELDS = {
    "created_by",
    "use_count",
    "view_count",
    "patch_count",
    "last_used_at",
    "last_viewed_at",
    "last_patched_at",
    "created_at",
    "state",
    "pinned",
    "archived_at",
}


class FakeClock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def read_file(skills_dir: Path) -> dict[str, Any]:
    """What Hermes sees: `.usage.json` alone."""
    return json.loads((skills_dir / ".usage.json").read_text(encoding="utf-8"))


def hermes_style_write(skills_dir: Path, data: dict[str, Any]) -> None:
    (skills_dir / ".usage.json").write_text(
        json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False), encoding="utf-8"
    )


def must_get(store: UsageStore, name: str) -> dict[str, Any]:
    record = store.get(name)
    assert record is not None, f"no usage record for {name}"
    return record


def identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def lock_is_free(skills_dir: Path) -> bool:
    """Whether another open of the lock file (another process, as flock sees it) gets it now."""
    fd = os.open(skills_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> UsageStore:
    return UsageStore(tmp_path, clock=clock)


# -- pure record functions ---------------------------------------------------------------------


def test_new_record_has_exactly_the_hermes_fields() -> None:
    record = new_record(T0, created_by="agent")
    assert set(record) == HERMES_FIELDS
    assert record["created_by"] == "agent"
    assert record["created_at"] == "2026-03-01T12:00:00.000000+00:00"
    assert (record["state"], record["pinned"], record["archived_at"]) == ("active", False, None)
    assert (record["use_count"], record["view_count"], record["patch_count"]) == (0, 0, 0)


def test_latest_activity_at_ignores_created_at() -> None:
    record = new_record(T0, created_by="agent")
    assert latest_activity_at(record) is None  # created, never active

    record["last_viewed_at"] = "2026-01-01T00:00:00+00:00"  # older than created_at
    assert latest_activity_at(record) == datetime(2026, 1, 1, tzinfo=UTC)

    record["last_used_at"] = "2026-02-01T00:00:00Z"
    record["last_patched_at"] = "2026-01-15T00:00:00"  # naive: read as UTC, like Hermes
    assert latest_activity_at(record) == datetime(2026, 2, 1, tzinfo=UTC)

    record["last_used_at"] = "not a time"
    assert latest_activity_at(record) == datetime(2026, 1, 15, tzinfo=UTC)


def test_activity_count_sums_counters_and_tolerates_junk() -> None:
    record = {"use_count": 3, "view_count": "2", "patch_count": None, "created_at": "x"}
    assert activity_count(record) == 5
    assert activity_count({"use_count": "many", "view_count": [1]}) == 0


def test_apply_bump_counts_and_never_moves_a_timestamp_back() -> None:
    records: dict[str, Any] = {"junk": {"use_count": "x", "last_used_at": "never"}}
    apply_bump(records, "alpha", "use", T0)
    assert set(records["alpha"]) == HERMES_FIELDS | {"uses_by_day"}
    assert records["alpha"]["uses_by_day"] == {T0.date().isoformat(): 1}
    assert (records["alpha"]["use_count"], records["alpha"]["created_at"]) == (
        1,
        format_timestamp(T0),
    )
    apply_bump(records, "alpha", "use", T0 - timedelta(hours=1))  # a writer whose clock lags
    assert records["alpha"]["use_count"] == 2
    assert records["alpha"]["last_used_at"] == format_timestamp(T0)
    apply_bump(records, "junk", "use", T0)
    assert (records["junk"]["use_count"], records["junk"]["last_used_at"]) == (
        1,
        format_timestamp(T0),
    )


def test_a_use_counts_on_its_day_and_a_record_keeps_the_newest_days() -> None:
    records: dict[str, Any] = {"alpha": {"use_count": 5, "uses_by_day": {"x": "junk"}}}
    for back in range(DAYS_KEPT + 5):
        apply_bump(records, "alpha", "use", T0 - timedelta(days=back))
    apply_bump(records, "alpha", "use", T0)
    days = records["alpha"]["uses_by_day"]
    assert len(days) == DAYS_KEPT and days[T0.date().isoformat()] == 2
    assert min(days) == (T0 - timedelta(days=DAYS_KEPT - 1)).date().isoformat()
    apply_bump(records, "alpha", "view", T0)
    assert records["alpha"]["uses_by_day"] == days  # a view is no use


# -- bumps -------------------------------------------------------------------------------------


def test_every_bump_is_in_the_file_when_it_returns(
    store: UsageStore, clock: FakeClock, tmp_path: Path
) -> None:
    store.bump("alpha", "use")
    assert read_file(tmp_path)["alpha"]["use_count"] == 1  # Hermes sees it at once
    clock.advance(seconds=0.5)
    store.bump("alpha", "use")
    store.bump("alpha", "view")
    store.bump("beta", "patch")

    alpha = read_file(tmp_path)["alpha"]
    assert (alpha["use_count"], alpha["view_count"], alpha["patch_count"]) == (2, 1, 0)
    assert alpha["last_used_at"] == "2026-03-01T12:00:00.500000+00:00"
    assert alpha["created_at"] == "2026-03-01T12:00:00.000000+00:00"
    assert set(alpha) == HERMES_FIELDS | {"uses_by_day"}
    assert alpha["uses_by_day"] == {"2026-03-01": 2}
    assert must_get(store, "beta")["patch_count"] == 1
    assert store.get("gamma") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [".usage.json", LOCK_FILE]


def test_reading_never_rewrites_the_file(store: UsageStore, tmp_path: Path) -> None:
    store.bump("alpha", "use")
    before = identity(tmp_path / ".usage.json")
    assert store.read()["alpha"]["use_count"] == 1
    assert store.get("alpha") is not None
    with store.transaction() as records:
        assert records["alpha"]["use_count"] == 1  # a transaction that changes nothing
    assert identity(tmp_path / ".usage.json") == before


def test_bump_many_is_one_read_modify_write(
    store: UsageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.bump("alpha", "use")
    replaced: list[str] = []
    real_replace = os.replace

    def counting_replace(src: Any, dst: Any) -> None:
        replaced.append(str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", counting_replace)
    store.bump_many([("alpha", "use"), ("beta", "view"), ("alpha", "patch")] * 20)
    assert replaced == [str(tmp_path / ".usage.json")]
    on_disk = read_file(tmp_path)
    assert (on_disk["alpha"]["use_count"], on_disk["alpha"]["patch_count"]) == (21, 20)
    assert on_disk["beta"]["view_count"] == 20
    store.bump_many([])
    assert len(replaced) == 1  # an empty batch writes nothing


def test_invalid_bumps_are_refused_and_write_nothing(store: UsageStore, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        store.bump("alpha", "run")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.bump("", "use")
    with pytest.raises(ValueError):
        store.bump_many([("alpha", "use"), ("beta", "ran")])
    with pytest.raises(ValueError):
        store.set_state("alpha", "gone")  # type: ignore[arg-type]
    assert not (tmp_path / ".usage.json").exists()


def test_a_crashed_writes_temp_file_does_not_block_the_next(
    store: UsageStore, tmp_path: Path
) -> None:
    (tmp_path / TEMP_FILE).write_text('{"half": ')  # a writer killed before its replace
    store.bump("alpha", "use")
    assert read_file(tmp_path)["alpha"]["use_count"] == 1
    assert not (tmp_path / TEMP_FILE).exists()


# -- transactions and the convenience calls ----------------------------------------------------


def test_transaction_writes_atomically_and_an_exception_writes_nothing(
    store: UsageStore, tmp_path: Path
) -> None:
    with store.transaction() as records:
        records["alpha"] = new_record(T0, created_by="agent")
    assert read_file(tmp_path)["alpha"]["created_by"] == "agent"
    before = (tmp_path / ".usage.json").read_bytes()

    with pytest.raises(RuntimeError), store.transaction() as records:
        records["alpha"]["pinned"] = True
        raise RuntimeError("changed my mind")
    assert (tmp_path / ".usage.json").read_bytes() == before
    assert must_get(store, "alpha")["pinned"] is False
    assert not (tmp_path / TEMP_FILE).exists()

    with pytest.raises(TypeError), store.transaction() as records:
        records["beta"] = ["not", "a", "record"]  # type: ignore[assignment]
    assert (tmp_path / ".usage.json").read_bytes() == before


def test_an_empty_transaction_on_no_file_creates_none(store: UsageStore, tmp_path: Path) -> None:
    with store.transaction() as records:
        assert records == {}
    assert store.read() == {}
    assert not (tmp_path / ".usage.json").exists()


def test_calls_inside_a_transaction_share_it(store: UsageStore, tmp_path: Path) -> None:
    with store.transaction() as records:
        records["alpha"] = new_record(T0, created_by="agent")
        store.bump("alpha", "use")
        store.set_pinned("alpha", True)
        assert records["alpha"]["use_count"] == 1 and records["alpha"]["pinned"] is True
        seen = store.read()
        seen["alpha"]["use_count"] = 99  # a private copy
        assert not (tmp_path / ".usage.json").exists()  # one write, at the end
    assert (read_file(tmp_path)["alpha"]["use_count"], must_get(store, "alpha")["pinned"]) == (
        1,
        True,
    )


def test_ensure_creates_and_only_fills_a_null_created_by(store: UsageStore) -> None:
    store.bump("alpha", "view")  # telemetry before the skill was written
    assert store.ensure("alpha", created_by="agent")["created_by"] == "agent"
    assert must_get(store, "alpha")["view_count"] == 1
    with store.transaction() as records:
        records["beta"] = new_record(T0, created_by="user")
    assert store.ensure("beta", created_by="agent")["created_by"] == "user"
    assert store.ensure("gamma", created_by=None)["created_by"] is None


def test_set_state_follows_hermes_rules(store: UsageStore, clock: FakeClock) -> None:
    store.ensure("alpha", created_by="agent")
    store.set_state("alpha", "archived", archived_at="2026-03-01T13:00:00+00:00")
    assert must_get(store, "alpha")["archived_at"] == "2026-03-01T13:00:00.000000+00:00"
    store.set_state("alpha", "stale")
    assert must_get(store, "alpha")["archived_at"] == "2026-03-01T13:00:00.000000+00:00"
    store.set_state("alpha", "active")
    assert must_get(store, "alpha")["archived_at"] is None
    clock.advance(hours=1)
    store.set_state("alpha", "archived")
    record = must_get(store, "alpha")
    assert (record["state"], record["archived_at"]) == (
        "archived",
        "2026-03-01T13:00:00.000000+00:00",
    )
    with pytest.raises(ValueError):
        store.set_state("alpha", "archived", archived_at="yesterday")


def test_restore_refreshes_the_anchor_without_inventing_counts(
    store: UsageStore, clock: FakeClock
) -> None:
    with store.transaction() as records:
        records["alpha"] = new_record(T0 - timedelta(days=200), created_by="agent") | {
            "use_count": 4,
            "last_used_at": format_timestamp(T0 - timedelta(days=120)),
            "state": "archived",
            "archived_at": format_timestamp(T0 - timedelta(days=1)),
        }
    store.restore("alpha")
    record = must_get(store, "alpha")
    assert (record["state"], record["archived_at"]) == ("active", None)
    assert latest_activity_at(record) == T0  # a pass right now sees fresh activity
    assert (record["use_count"], record["view_count"]) == (4, 0)


def test_pin_and_forget(store: UsageStore, tmp_path: Path) -> None:
    store.set_pinned("alpha", True)
    assert read_file(tmp_path)["alpha"]["pinned"] is True
    store.set_pinned("alpha", False)
    assert read_file(tmp_path)["alpha"]["pinned"] is False
    store.bump("alpha", "use")
    store.forget("alpha")
    assert store.get("alpha") is None
    assert "alpha" not in read_file(tmp_path)


# -- compatibility and preservation ------------------------------------------------------------


def test_unknown_keys_and_entries_are_preserved_on_every_write(
    store: UsageStore, tmp_path: Path
) -> None:
    alpha = new_record(T0, created_by="agent") | {
        "negative_claims": [{"id": "c1", "status": "active"}],
        "absorbed_into": None,
        "agent_created": True,
    }
    hermes_style_write(
        tmp_path,
        {
            "alpha": alpha,
            "beta": new_record(T0, created_by=None),
            "schema": 2,
            "notes": ["kept"],
            "x-tool": {"whatever": 1},
        },
    )
    store.bump("alpha", "use")
    store.set_pinned("beta", True)
    store.forget("beta")
    store.bump_many([("gamma", "view")])

    on_disk = read_file(tmp_path)
    assert on_disk["alpha"]["negative_claims"] == [{"id": "c1", "status": "active"}]
    assert on_disk["alpha"]["agent_created"] is True
    assert "absorbed_into" in on_disk["alpha"]
    assert on_disk["alpha"]["use_count"] == 1
    assert (on_disk["schema"], on_disk["notes"], on_disk["x-tool"]) == (
        2,
        ["kept"],
        {"whatever": 1},
    )
    assert "beta" not in on_disk
    assert "schema" not in store.read()  # not a record


def test_hermes_reads_what_skilld_writes_and_skilld_sees_hermes_writes(
    store: UsageStore, tmp_path: Path
) -> None:
    store.ensure("alpha", created_by="agent")
    store.bump("alpha", "use")
    data = read_file(tmp_path)  # Hermes's load_usage(): any JSON object
    data["alpha"]["use_count"] += 1
    data["alpha"]["pinned"] = True
    hermes_style_write(tmp_path, data)
    record = must_get(store, "alpha")
    assert (record["use_count"], record["pinned"]) == (2, True)


def test_the_file_is_one_entry_per_line_and_decodes_back() -> None:
    records = {f"s{i}": new_record(T0, created_by=None) | {"use_count": i} for i in range(3)}
    payload = encode_usage(records | {"é": {"use_count": 1}}, {"schema": 2, "s1": "shadowed"})
    lines = payload.decode().splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and len(lines) == 2 + 5
    assert lines[1].startswith('"s0": {"archived_at": null,')  # keys sorted, like Hermes
    assert '"é": ' in payload.decode()  # not \u-escaped, like Hermes
    decoded = decode_usage(payload)
    assert decoded.records == records | {"é": {"use_count": 1}}
    assert (decoded.extras, decoded.problem) == ({"schema": 2}, None)
    assert encode_usage({}, {}) == b"{}\n"


# -- corruption --------------------------------------------------------------------------------


def test_a_corrupt_file_is_copied_aside_and_pins_are_recovered(
    tmp_path: Path, clock: FakeClock
) -> None:
    pinned = new_record(T0, created_by="agent") | {"pinned": True, "use_count": 7}
    text = json.dumps({"alpha": pinned, "beta": new_record(T0, created_by=None)}, indent=2)
    damaged = text[: text.index('"beta"') + 40].encode()  # cut inside beta
    (tmp_path / ".usage.json").write_bytes(damaged)
    reports: list[tuple[Path, str, bool]] = []
    store = UsageStore(
        tmp_path,
        clock=clock,
        on_corrupt=lambda p, r: reports.append((p, r, lock_is_free(tmp_path))),
    )

    store.bump("gamma", "use")
    records = store.read()
    assert records["alpha"] == pinned
    assert records["gamma"]["use_count"] == 1
    assert "beta" not in records
    assert len(reports) == 1
    copy_path, reason, unlocked = reports[0]
    assert unlocked  # reported after the read-modify-write let go of the lock
    assert copy_path == tmp_path / f"{CORRUPT_PREFIX}20260301T120000Z"
    assert copy_path.read_bytes() == damaged
    assert "not valid JSON" in reason and "recovered 1" in reason
    assert read_file(tmp_path)["alpha"]["pinned"] is True  # rebuilt file is valid JSON
    store.read()
    assert len(reports) == 1


def test_a_corrupt_file_is_rebuilt_by_a_read_too(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / ".usage.json").write_bytes(b'{"alpha": {"pinned": true}, "beta": {"use_')
    reports: list[tuple[Path, str]] = []
    store = UsageStore(tmp_path, clock=clock, on_corrupt=lambda p, r: reports.append((p, r)))
    assert store.read() == {"alpha": {"pinned": True}}
    assert read_file(tmp_path) == {"alpha": {"pinned": True}}
    assert [p.name for p, _ in reports] == [f"{CORRUPT_PREFIX}20260301T120000Z"]


def test_a_file_that_is_not_an_object_is_kept_aside_not_lost(
    tmp_path: Path, clock: FakeClock
) -> None:
    (tmp_path / ".usage.json").write_text('["alpha"]')
    (tmp_path / f"{CORRUPT_PREFIX}20260301T120000Z").write_text("an earlier copy")
    reports: list[tuple[Path, str]] = []
    store = UsageStore(tmp_path, clock=clock, on_corrupt=lambda p, r: reports.append((p, r)))
    assert store.read() == {}
    assert [(p.name, p.read_text()) for p, _ in reports] == [
        (f"{CORRUPT_PREFIX}20260301T120000Z-1", '["alpha"]')
    ]
    assert "list" in reports[0][1]
    assert read_file(tmp_path) == {}


def test_a_missing_or_empty_file_is_simply_empty(tmp_path: Path) -> None:
    reports: list[tuple[Path, str]] = []
    store = UsageStore(tmp_path, on_corrupt=lambda p, r: reports.append((p, r)))
    assert store.read() == {}
    (tmp_path / ".usage.json").write_text("")
    assert store.read() == {}
    assert reports == []


record_values = st.fixed_dictionaries(
    {
        "use_count": st.integers(0, 10**6),
        "pinned": st.booleans(),
        "state": st.sampled_from(["active", "stale", "archived"]),
        "note": st.text(max_size=12),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    records=st.dictionaries(st.text(min_size=1, max_size=10), record_values, max_size=6),
    cut=st.floats(0, 1),
    indent=st.sampled_from([None, 2]),
)
def test_salvage_never_invents_a_record(
    records: dict[str, dict[str, Any]], cut: float, indent: int | None
) -> None:
    if indent is None:
        payload = encode_usage(records, {})
    else:
        payload = json.dumps(records, indent=indent, ensure_ascii=False).encode()
    damaged = payload[: int(len(payload) * cut)]
    decoded = decode_usage(damaged)
    for name, record in decoded.records.items():
        assert records[name] == record
    if decoded.problem is None:
        assert decoded.records == records or not damaged.strip()


# -- the lock ----------------------------------------------------------------------------------


def test_the_lock_is_held_for_the_read_modify_write_only(store: UsageStore, tmp_path: Path) -> None:
    store.bump("alpha", "use")
    assert lock_is_free(tmp_path)
    with store.transaction() as records:
        assert not lock_is_free(tmp_path)
        records["alpha"]["pinned"] = True
    assert lock_is_free(tmp_path)
    store.read()
    assert lock_is_free(tmp_path)


HOLDER = """
import fcntl, json, sys, time
from pathlib import Path
skills_dir = Path(sys.argv[1])
lock = open(skills_dir / ".usage.json.lock", "a+")  # Hermes's open: creates a missing file
fcntl.flock(lock, fcntl.LOCK_EX)
data = json.loads((skills_dir / ".usage.json").read_text())
(skills_dir.parent / "held").touch()
while not (skills_dir.parent / "go").exists():
    time.sleep(0.001)
data["alpha"]["use_count"] += 1
(skills_dir / ".usage.json").write_text(json.dumps(data))
"""


def _waits_on_flock(path: Path) -> bool:
    """Whether /proc/locks shows some process blocked in flock on the file at `path`."""
    inode = f":{path.stat().st_ino} "
    return any("-> FLOCK" in line and inode in line for line in Path("/proc/locks").open())


def test_a_lock_file_replaced_under_a_cached_descriptor_is_reopened(tmp_path: Path) -> None:
    skills_dir = tmp_path / "skills"
    store = UsageStore(skills_dir)
    store.bump("alpha", "use")  # the store now caches a descriptor of the lock file
    (skills_dir / LOCK_FILE).unlink()  # someone cleans the dir up
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER), str(skills_dir)])
    try:
        while not (tmp_path / "held").exists():
            assert holder.poll() is None
            time.sleep(0.001)
        bumper = threading.Thread(target=store.bump, args=("alpha", "use"))
        bumper.start()
        # Locking the orphaned inode would let the bump through now, and lose the holder's.
        while bumper.is_alive() and not _waits_on_flock(skills_dir / LOCK_FILE):
            time.sleep(0.001)
        (tmp_path / "go").touch()
        bumper.join()
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
    assert read_file(skills_dir)["alpha"]["use_count"] == 3


UMASK_WORKER = """
import os, sys
from pathlib import Path
from skilld.skills.usage import UsageStore
os.umask(int(sys.argv[2], 8))
store = UsageStore(Path(sys.argv[1]))
store.read()  # the file is corrupt: copied aside, rebuilt
store.bump("alpha", "use")
"""


@pytest.mark.parametrize(("umask", "mode"), [("002", 0o664), ("077", 0o600), ("022", 0o644)])
def test_files_honour_the_umask(tmp_path: Path, umask: str, mode: int) -> None:
    skills_dir = tmp_path / "skills"
    skills_dir.mkdir()
    (skills_dir / ".usage.json").write_text("{broken")
    os.chmod(skills_dir / ".usage.json", 0o600)
    worker = [sys.executable, "-c", textwrap.dedent(UMASK_WORKER), str(skills_dir), umask]
    subprocess.run(worker, check=True)
    made = {p.name: stat.S_IMODE(p.stat().st_mode) for p in skills_dir.iterdir()}
    copies = [name for name in made if name.startswith(CORRUPT_PREFIX)]
    assert len(copies) == 1 and set(made) == {".usage.json", LOCK_FILE, *copies}
    assert set(made.values()) == {mode}
    assert read_file(skills_dir)["alpha"]["use_count"] == 1


# -- concurrency, across real processes --------------------------------------------------------

STORE_WORKER = """
import sys, time
from pathlib import Path
from skilld.skills.usage import UsageStore
skills_dir, name, count, gate = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
store = UsageStore(skills_dir)
gate.touch()
while len(list(gate.parent.glob("ready-*"))) < int(sys.argv[5]):
    time.sleep(0.001)
done = 0
# count < 0: keep bumping until the other worker says it is done, so the two overlap throughout
while done < count or (count < 0 and not (gate.parent / "done").exists()):
    if done % 2:
        store.bump(name, "use")
        store.bump(f"{name}-own", "view")
    else:
        store.bump_many([(name, "use"), (f"{name}-own", "view")])
    done += 1
(gate.parent / f"bumped-{gate.name}").write_text(str(done))
"""

HERMES_WORKER = """
import fcntl, json, os, sys, tempfile, time
from datetime import datetime, timezone
from pathlib import Path
skills_dir, name, count, gate = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
usage_file = skills_dir / ".usage.json"
gate.touch()
while len(list(gate.parent.glob("ready-*"))) < int(sys.argv[5]):
    time.sleep(0.001)
for _ in range(count):
    with open(usage_file.with_suffix(".json.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(usage_file.read_text()) if usage_file.exists() else {}
        record = data.get(name) or {"use_count": 0}
        record["use_count"] = int(record.get("use_count") or 0) + 1
        record["last_used_at"] = datetime.now(timezone.utc).isoformat()
        data[name] = record
        fd, tmp = tempfile.mkstemp(dir=skills_dir, prefix=".usage_", suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, usage_file)
        fcntl.flock(lock, fcntl.LOCK_UN)
(gate.parent / "done").touch()
"""


def run_together(tmp_path: Path, workers: list[tuple[str, str, int]]) -> list[int]:
    """Start every (script, name, count) worker at once; how many bumps each store worker did."""
    skills_dir = tmp_path / "skills"
    skills_dir.mkdir(exist_ok=True)
    gates = tmp_path / "gates"
    gates.mkdir()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(script),
                str(skills_dir),
                name,
                str(count),
                str(gates / f"ready-{index}"),
                str(len(workers)),
            ]
        )
        for index, (script, name, count) in enumerate(workers)
    ]
    assert [process.wait(timeout=120) for process in processes] == [0] * len(workers)
    return [
        int((gates / f"bumped-ready-{index}").read_text())
        for index, (script, _, _) in enumerate(workers)
        if script is STORE_WORKER
    ]


def test_two_processes_lose_no_bump(tmp_path: Path) -> None:
    run_together(tmp_path, [(STORE_WORKER, "shared", 200), (STORE_WORKER, "other", 200)])
    on_disk = read_file(tmp_path / "skills")
    assert on_disk["shared"]["use_count"] == 200
    assert on_disk["other"]["use_count"] == 200
    assert on_disk["shared-own"]["view_count"] == 200
    assert on_disk["other-own"]["view_count"] == 200


def test_two_processes_bumping_one_skill_lose_no_bump(tmp_path: Path) -> None:
    run_together(tmp_path, [(STORE_WORKER, "shared", 200), (STORE_WORKER, "shared", 200)])
    on_disk = read_file(tmp_path / "skills")
    assert on_disk["shared"]["use_count"] == 400
    assert on_disk["shared-own"]["view_count"] == 400
    assert not (tmp_path / "skills" / TEMP_FILE).exists()


def test_a_hermes_writer_and_skilld_together_lose_no_update(tmp_path: Path) -> None:
    (skilld_bumps,) = run_together(
        tmp_path, [(HERMES_WORKER, "shared", 60), (STORE_WORKER, "shared", -1)]
    )
    assert skilld_bumps > 0
    on_disk = read_file(tmp_path / "skills")  # what Hermes reads
    assert on_disk["shared"]["use_count"] == 60 + skilld_bumps
    assert on_disk["shared-own"]["view_count"] == skilld_bumps


def test_a_transcript_use_happened_at_its_message_time_never_in_the_future() -> None:
    from skilld.skills.usage import happened_at

    earlier = T0 - timedelta(days=3)
    assert happened_at(earlier.isoformat(), T0) == earlier
    assert happened_at("2026-02-26T12:00:00Z", T0) == datetime(2026, 2, 26, 12, tzinfo=UTC)
    for written in (None, "", "yesterday", (T0 + timedelta(hours=1)).isoformat()):
        assert happened_at(written, T0) == T0
