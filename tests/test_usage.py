"""The `.usage.json` sidecar: Hermes field compatibility, journal, corruption, concurrency."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skilld.skills import usage
from skilld.skills.usage import (
    CORRUPT_PREFIX,
    JOURNAL_FILE,
    TEMP_PREFIX,
    FoldMarker,
    PendingBump,
    UsageStore,
    activity_count,
    decode_usage,
    encode_usage,
    journal_line,
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


# -- bumps and the journal ---------------------------------------------------------------------


def test_bumps_are_counted_and_visible_to_read_before_any_fold(
    store: UsageStore, clock: FakeClock, tmp_path: Path
) -> None:
    store.bump("alpha", "use")
    clock.advance(seconds=0.5)
    store.bump("alpha", "use")
    store.bump("alpha", "view")
    store.bump("beta", "patch")

    assert not (tmp_path / ".usage.json").exists()  # still only in the journal
    alpha = store.get("alpha")
    assert alpha is not None
    assert (alpha["use_count"], alpha["view_count"], alpha["patch_count"]) == (2, 1, 0)
    assert alpha["last_used_at"] == "2026-03-01T12:00:00.500000+00:00"
    assert alpha["created_at"] == "2026-03-01T12:00:00.000000+00:00"
    assert set(alpha) == HERMES_FIELDS
    assert store.read()["beta"]["patch_count"] == 1
    assert store.get("gamma") is None

    store.flush()
    on_disk = read_file(tmp_path)
    assert on_disk["alpha"]["use_count"] == 2
    assert on_disk["beta"]["patch_count"] == 1
    assert (tmp_path / JOURNAL_FILE).stat().st_size == 0


def test_read_does_not_rewrite_the_file(store: UsageStore, tmp_path: Path) -> None:
    store.bump("alpha", "use")
    store.flush()
    before = (tmp_path / ".usage.json").stat()
    store.bump("alpha", "use")
    assert store.read()["alpha"]["use_count"] == 2
    after = (tmp_path / ".usage.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_journal_folds_into_the_file_at_the_threshold(tmp_path: Path, clock: FakeClock) -> None:
    store = UsageStore(tmp_path, clock=clock, fold_threshold_bytes=400)
    line_size = len(journal_line(PendingBump("alpha", "use", usage.format_timestamp(T0))))
    per_fold = -(-400 // line_size)
    for _ in range(per_fold):
        store.bump("alpha", "use")
    assert read_file(tmp_path)["alpha"]["use_count"] == per_fold
    assert (tmp_path / JOURNAL_FILE).stat().st_size == 0
    store.bump("alpha", "use")
    assert read_file(tmp_path)["alpha"]["use_count"] == per_fold  # the next one waits
    assert must_get(store, "alpha")["use_count"] == per_fold + 1


def test_journal_folds_when_the_oldest_bump_is_too_old(tmp_path: Path, clock: FakeClock) -> None:
    store = UsageStore(tmp_path, clock=clock, max_pending_seconds=60)
    store.bump("alpha", "use")
    clock.advance(seconds=30)
    store.bump("alpha", "view")
    assert not (tmp_path / ".usage.json").exists()
    clock.advance(seconds=31)
    store.bump("alpha", "patch")
    record = read_file(tmp_path)["alpha"]
    assert (record["use_count"], record["view_count"], record["patch_count"]) == (1, 1, 1)


def test_a_torn_journal_line_is_ignored(store: UsageStore, tmp_path: Path) -> None:
    store.bump("alpha", "use")
    store.bump("alpha", "use")
    with open(tmp_path / JOURNAL_FILE, "ab") as journal:
        journal.write(b'\n["use","alpha","2026-03-01T1')  # power loss mid-write
    assert must_get(store, "alpha")["use_count"] == 2
    store.bump("alpha", "use")  # must not glue onto the fragment
    assert must_get(store, "alpha")["use_count"] == 3
    store.flush()
    assert read_file(tmp_path)["alpha"]["use_count"] == 3


def test_a_fold_interrupted_before_its_replace_keeps_the_journal(
    store: UsageStore, tmp_path: Path
) -> None:
    hermes_style_write(tmp_path, {"alpha": new_record(T0, created_by=None)})
    temp_name = f"{TEMP_PREFIX}{'a' * 16}"
    (tmp_path / temp_name).write_text("{}")  # the crashed fold's temp file, never renamed
    at = usage.format_timestamp(T0)
    lines = [journal_line(PendingBump("alpha", "use", at)) for _ in range(3)]
    (tmp_path / JOURNAL_FILE).write_bytes(b"".join([*lines, journal_line(FoldMarker(temp_name))]))

    assert must_get(store, "alpha")["use_count"] == 3
    store.flush()
    assert read_file(tmp_path)["alpha"]["use_count"] == 3
    assert not (tmp_path / temp_name).exists()  # swept once the journal was folded


def test_a_fold_interrupted_after_its_replace_is_not_counted_twice(
    store: UsageStore, tmp_path: Path
) -> None:
    folded = new_record(T0, created_by=None) | {"use_count": 3}
    hermes_style_write(tmp_path, {"alpha": folded})  # the replace happened
    at = usage.format_timestamp(T0)
    marker = journal_line(FoldMarker(f"{TEMP_PREFIX}{'b' * 16}"))  # its temp file is gone
    before = [journal_line(PendingBump("alpha", "use", at)) for _ in range(3)]
    after = [journal_line(PendingBump("alpha", "view", at))]
    (tmp_path / JOURNAL_FILE).write_bytes(b"".join([*before, marker, *after]))

    record = store.get("alpha")
    assert record is not None
    assert (record["use_count"], record["view_count"]) == (3, 1)
    store.flush()
    assert (
        read_file(tmp_path)["alpha"]["use_count"],
        read_file(tmp_path)["alpha"]["view_count"],
    ) == (3, 1)


def test_a_fold_by_another_writer_is_not_double_counted(tmp_path: Path, clock: FakeClock) -> None:
    ours = UsageStore(tmp_path, clock=clock)
    theirs = UsageStore(tmp_path, clock=clock)  # another process, as far as files go
    for _ in range(3):
        ours.bump("alpha", "use")
    assert must_get(ours, "alpha")["use_count"] == 3
    theirs.bump("alpha", "use")
    theirs.bump("beta", "view")
    theirs.flush()  # folds our three lines too
    ours.bump("alpha", "use")
    assert must_get(ours, "alpha")["use_count"] == 5
    assert ours.read()["beta"]["view_count"] == 1
    ours.flush()
    theirs.bump("beta", "view")
    assert theirs.read()["alpha"]["use_count"] == 5
    assert must_get(theirs, "beta")["view_count"] == 2


def test_bump_many_is_one_read_modify_write(
    store: UsageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.bump("alpha", "use")  # pending in the journal, folded by the batch
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
    assert (tmp_path / JOURNAL_FILE).stat().st_size == 0


def test_invalid_bumps_are_refused(store: UsageStore) -> None:
    with pytest.raises(ValueError):
        store.bump("alpha", "run")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.bump("", "use")
    with pytest.raises(ValueError):
        store.set_state("alpha", "gone")  # type: ignore[arg-type]


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
    assert list(tmp_path.glob(f"{TEMP_PREFIX}*")) == []


def test_a_bump_inside_a_transaction_lands_in_it(store: UsageStore, tmp_path: Path) -> None:
    with store.transaction() as records:
        records["alpha"] = new_record(T0, created_by="agent")
        store.bump("alpha", "use")
        assert records["alpha"]["use_count"] == 1
    assert read_file(tmp_path)["alpha"]["use_count"] == 1
    assert not (tmp_path / JOURNAL_FILE).exists()


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
    record = store.get("alpha")
    assert record is not None
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
            "last_used_at": usage.format_timestamp(T0 - timedelta(days=120)),
            "state": "archived",
            "archived_at": usage.format_timestamp(T0 - timedelta(days=1)),
        }
    store.restore("alpha")
    record = store.get("alpha")
    assert record is not None
    assert (record["state"], record["archived_at"]) == ("active", None)
    assert latest_activity_at(record) == T0  # a pass right now sees fresh activity
    assert (record["use_count"], record["view_count"]) == (4, 0)

    clock.advance(days=1)
    store.touch_anchor("alpha")
    assert latest_activity_at(must_get(store, "alpha")) == T0 + timedelta(days=1)


def test_pin_and_forget(store: UsageStore, tmp_path: Path) -> None:
    store.set_pinned("alpha", True)
    assert read_file(tmp_path)["alpha"]["pinned"] is True
    store.set_pinned("alpha", False)
    assert read_file(tmp_path)["alpha"]["pinned"] is False
    store.bump("alpha", "use")
    store.forget("alpha")
    assert store.get("alpha") is None
    assert "alpha" not in read_file(tmp_path)


def test_report_rows(store: UsageStore, clock: FakeClock) -> None:
    store.ensure("beta", created_by="agent")
    store.set_pinned("beta", True)
    clock.advance(minutes=5)
    store.bump("alpha", "use")
    store.bump("alpha", "view")
    rows = store.report_rows()
    assert [row["name"] for row in rows] == ["alpha", "beta"]
    alpha, beta = rows
    assert (alpha["use_count"], alpha["view_count"], alpha["activity_count"]) == (1, 1, 2)
    assert alpha["latest_activity_at"] == T0 + timedelta(minutes=5)
    assert (alpha["state"], alpha["pinned"], alpha["created_by"]) == ("active", False, None)
    assert (beta["latest_activity_at"], beta["created_at"], beta["pinned"]) == (None, T0, True)


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
    store.flush()
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
    store.flush()
    data = read_file(tmp_path)  # Hermes's load_usage(): any JSON object
    data["alpha"]["use_count"] += 1
    data["alpha"]["pinned"] = True
    hermes_style_write(tmp_path, data)
    record = store.get("alpha")
    assert record is not None
    assert (record["use_count"], record["pinned"]) == (2, True)


def test_an_unchanged_file_is_parsed_once(
    store: UsageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hermes_style_write(tmp_path, {"alpha": new_record(T0, created_by=None)})
    decoded: list[bytes] = []
    real_decode = usage.decode_usage

    def counting_decode(raw: bytes, **kwargs: Any) -> usage.Decoded:
        decoded.append(raw)
        return real_decode(raw, **kwargs)

    monkeypatch.setattr(usage, "decode_usage", counting_decode)
    store.read()
    store.get("alpha")
    store.bump("alpha", "use")
    store.read()
    assert len(decoded) == 1
    store.flush()  # our own write is cached too
    store.read()
    assert len(decoded) == 1


def test_line_by_line_decoding_equals_a_full_parse() -> None:
    records = {f"s{i}": new_record(T0, created_by=None) | {"use_count": i} for i in range(5)}
    payload, lines = encode_usage(records, {"schema": 2})
    changed = dict(records) | {"s2": records["s2"] | {"use_count": 99}}
    new_payload, _ = encode_usage(changed, {"schema": 2}, reuse=lines)
    by_line = decode_usage(new_payload, known=lines)
    whole = decode_usage(new_payload)
    assert by_line.records == whole.records == changed
    assert by_line.extras == whole.extras == {"schema": 2}
    assert json.loads(payload) == records | {"schema": 2}

    spliced = new_payload.replace(b",\n", b",\n,\n", 1)  # each line parses, the file does not
    assert decode_usage(spliced, known=lines).problem is not None


# -- corruption --------------------------------------------------------------------------------


def test_a_corrupt_file_is_copied_aside_and_pins_are_recovered(
    tmp_path: Path, clock: FakeClock
) -> None:
    pinned = new_record(T0, created_by="agent") | {"pinned": True, "use_count": 7}
    text = json.dumps({"alpha": pinned, "beta": new_record(T0, created_by=None)}, indent=2)
    damaged = text[: text.index('"beta"') + 40].encode()  # cut inside beta
    (tmp_path / ".usage.json").write_bytes(damaged)
    reports: list[tuple[Path, str]] = []
    store = UsageStore(tmp_path, clock=clock, on_corrupt=lambda p, r: reports.append((p, r)))

    store.bump("gamma", "use")
    records = store.read()
    assert records["alpha"] == pinned
    assert "beta" not in records
    assert len(reports) == 1
    copy_path, reason = reports[0]
    assert copy_path == tmp_path / f"{CORRUPT_PREFIX}20260301T120000Z"
    assert copy_path.read_bytes() == damaged
    assert "not valid JSON" in reason and "recovered 1" in reason
    assert read_file(tmp_path)["alpha"]["pinned"] is True  # rebuilt file is valid JSON
    store.read()
    assert len(reports) == 1


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
        payload, _ = encode_usage(records, {})
    else:
        payload = json.dumps(records, indent=indent, ensure_ascii=False).encode()
    damaged = payload[: int(len(payload) * cut)]
    decoded = decode_usage(damaged)
    for name, record in decoded.records.items():
        assert records[name] == record
    if decoded.problem is None:
        assert decoded.records == records or not damaged.strip()


# -- concurrency, across real processes --------------------------------------------------------

STORE_WORKER = """
import sys, time
from pathlib import Path
from skilld.skills.usage import UsageStore
skills_dir, name, count, gate = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
store = UsageStore(skills_dir, fold_threshold_bytes=4096)
gate.touch()
while len(list(gate.parent.glob("ready-*"))) < int(sys.argv[5]):
    time.sleep(0.001)
done = 0
# count < 0: keep bumping until the other worker says it is done, so the two overlap throughout
while done < count or (count < 0 and not (gate.parent / "done").exists()):
    store.bump(name, "use")
    store.bump(f"{name}-own", "view")
    done += 1
store.flush()
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
    assert [process.wait(timeout=60) for process in processes] == [0] * len(workers)
    return [
        int((gates / f"bumped-ready-{index}").read_text())
        for index, (script, _, _) in enumerate(workers)
        if script is STORE_WORKER
    ]


def test_two_processes_lose_no_bump(tmp_path: Path) -> None:
    run_together(tmp_path, [(STORE_WORKER, "shared", 500), (STORE_WORKER, "other", 500)])
    skills_dir = tmp_path / "skills"
    UsageStore(skills_dir).flush()
    on_disk = read_file(skills_dir)
    assert on_disk["shared"]["use_count"] == 500
    assert on_disk["other"]["use_count"] == 500
    assert on_disk["shared-own"]["view_count"] == 500
    assert on_disk["other-own"]["view_count"] == 500


def test_two_processes_bumping_one_skill_lose_no_bump(tmp_path: Path) -> None:
    run_together(tmp_path, [(STORE_WORKER, "shared", 500), (STORE_WORKER, "shared", 500)])
    on_disk = read_file(tmp_path / "skills")
    assert on_disk["shared"]["use_count"] == 1000
    assert on_disk["shared-own"]["view_count"] == 1000
    assert list((tmp_path / "skills").glob(f"{TEMP_PREFIX}*")) == []


def test_a_hermes_writer_and_skilld_together_lose_no_update(tmp_path: Path) -> None:
    (skilld_bumps,) = run_together(
        tmp_path, [(HERMES_WORKER, "shared", 60), (STORE_WORKER, "shared", -1)]
    )
    skills_dir = tmp_path / "skills"
    assert skilld_bumps > 0
    store = UsageStore(skills_dir)
    assert must_get(store, "shared")["use_count"] == 60 + skilld_bumps
    store.flush()
    on_disk = read_file(skills_dir)  # what Hermes reads
    assert on_disk["shared"]["use_count"] == 60 + skilld_bumps
    assert on_disk["shared-own"]["view_count"] == skilld_bumps
