"""The `.usage.json` sidecar: per-skill usage telemetry, field-compatible with Hermes Agent.

The file is a JSON object mapping a skill name to a record (DESIGN.md §4). Field names, the
lock file (an OS `flock` on `<skills_dir>/.usage.json.lock`) and the meaning of every field are
Hermes Agent's (`tools/skill_usage.py`), so either tool reads and writes what the other wrote,
and both can write at the same time without losing an update.

Why a journal. Hermes bumps a counter by locking, reading the whole file, re-encoding it with
the pure-Python indenting encoder, fsyncing and replacing it: one full rewrite per bump. Here a
bump appends one short line (`["use", "name", "<ISO time>"]`) to `<skills_dir>/.usage.journal`
under the same lock, with no fsync: a few microseconds. The journal is *folded* into
`.usage.json` (one atomic, fsynced rewrite for many bumps) when

* it reaches `fold_threshold_bytes` (16 KiB by default: at most ~360 bumps, typically 250),
* the oldest pending bump is older than `max_pending_seconds` (60 s) when the next bump lands,
* any batch (`bump_many`) or transaction (pin, state, create, forget, ...) runs,
* `flush()` is called (the daemon calls it every tick, the CLI after its bump).

`read()`/`get()` replay the pending journal in memory, so skilld's own readers always see every
bump. Hermes reads only `.usage.json`, so it sees skilld's bumps late by at most one fold
interval: the bound above. Hermes's own bumps go straight to `.usage.json`; a fold re-reads the
file under the lock and adds the journal on top, so no update of either tool is lost.

Crash semantics. A bump survives a crash of any process once `bump()` returns (the line is in
the kernel); after a power loss, bumps since the last fold may be lost (the price of not
fsyncing every bump). They are never counted twice: before replacing `.usage.json`, a fold
appends and fsyncs a marker naming its temp file. After a crash, a marker whose temp file still
exists means the replace never happened (the journal is still pending); a marker whose temp file
is gone means it did (the lines before the marker are already in the file). Usage temp files are
created only under the lock, so the sweep after a fold removes those a crash left behind.

A torn journal line (power loss mid-write) is ignored: every line starts with a newline, so a
fragment never glues itself to the next record, and a fragment is never valid JSON. A corrupt
`.usage.json` is copied aside to `.usage.json.corrupt-<UTC stamp>`, reported to `on_corrupt`,
and rebuilt from the records that can still be decoded; it never silently becomes empty.

`.usage.json` is written one record per line with the C encoder (`sort_keys`, like Hermes);
encoded lines of unchanged records are reused, so a fold costs in proportion to what changed.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, Final, Literal, get_args

from skilld.fsutil import fsync_dir
from skilld.log import get_logger

USAGE_FILE: Final = ".usage.json"
LOCK_FILE: Final = ".usage.json.lock"
JOURNAL_FILE: Final = ".usage.journal"
TEMP_PREFIX: Final = ".usage.json.tmp-"
CORRUPT_PREFIX: Final = ".usage.json.corrupt-"

BumpKind = Literal["use", "view", "patch"]
State = Literal["active", "stale", "archived"]
STATES: Final[tuple[str, ...]] = get_args(State)
Record = dict[str, Any]

#: Counter and timestamp each kind of bump advances.
BUMP_FIELDS: Final[dict[str, tuple[str, str]]] = {
    "use": ("use_count", "last_used_at"),
    "view": ("view_count", "last_viewed_at"),
    "patch": ("patch_count", "last_patched_at"),
}
ACTIVITY_FIELDS: Final = ("last_used_at", "last_viewed_at", "last_patched_at")
COUNT_FIELDS: Final = ("use_count", "view_count", "patch_count")
#: A decoded object with one of these keys is taken for a usage record when salvaging.
_RECORD_MARKERS: Final = frozenset(
    (*COUNT_FIELDS, *ACTIVITY_FIELDS, "created_at", "created_by", "state", "pinned")
)

_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{16}")
_KEY_BEFORE_OBJECT = re.compile(r'"((?:[^"\\\n]|\\.)*)"\s*:\s*(?=\{)')
_OPEN_FLAGS: Final = os.O_CLOEXEC | os.O_NOFOLLOW
_FIRST_LINE_PROBE: Final = 4096
_AGE_CHECK_EVERY: Final = timedelta(seconds=1)
_JOURNAL_APPEND: Final = os.O_RDWR | os.O_APPEND | os.O_CREAT | _OPEN_FLAGS

CorruptHandler = Callable[[Path, str], None]


def _utc_now() -> datetime:
    return datetime.now(UTC)


# -- pure functions over records ---------------------------------------------------------------


def format_timestamp(moment: datetime) -> str:
    """ISO-8601 UTC with microseconds, the shape Hermes writes (`datetime.isoformat()`)."""
    if moment.tzinfo is None:
        raise ValueError("usage timestamps must be timezone-aware")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def parse_timestamp(value: object) -> datetime | None:
    """A record's timestamp as an aware datetime; naive values are UTC (as Hermes reads them)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def new_record(now: datetime, *, created_by: str | None) -> Record:
    """A fresh record with every Hermes field; `created_by="agent"` marks it curator-managed."""
    return {
        "created_by": created_by,
        "use_count": 0,
        "view_count": 0,
        "patch_count": 0,
        "last_used_at": None,
        "last_viewed_at": None,
        "last_patched_at": None,
        "created_at": format_timestamp(now),
        "state": "active",
        "pinned": False,
        "archived_at": None,
    }


def latest_activity_at(record: Mapping[str, Any]) -> datetime | None:
    """Newest of the three `last_*_at` values; `created_at` is an anchor, never activity.

    `None` means the skill was never really used, viewed or patched.
    """
    moments = [m for key in ACTIVITY_FIELDS if (m := parse_timestamp(record.get(key)))]
    return max(moments, default=None)


def count_of(record: Mapping[str, Any], key: str) -> int:
    """A counter as an int; a missing or unreadable value counts as 0 (Hermes does the same)."""
    try:
        return int(record.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def activity_count(record: Mapping[str, Any]) -> int:
    return sum(count_of(record, key) for key in COUNT_FIELDS)


def report_row(name: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """The row `skills list`, the curator and the consolidation prompt read."""
    state = record.get("state")
    return {
        "name": name,
        "created_by": record.get("created_by"),
        "use_count": count_of(record, "use_count"),
        "view_count": count_of(record, "view_count"),
        "patch_count": count_of(record, "patch_count"),
        "activity_count": activity_count(record),
        "latest_activity_at": latest_activity_at(record),
        "created_at": parse_timestamp(record.get("created_at")),
        "state": state if state in STATES else "active",
        "pinned": record.get("pinned") is True,
        "archived_at": parse_timestamp(record.get("archived_at")),
    }


def _copy_record(record: Mapping[str, Any]) -> Record:
    # Values are scalars except under unknown keys (Hermes keeps lists there); deep-copying
    # only those is several times cheaper than `copy.deepcopy` of the whole record.
    return {k: copy.deepcopy(v) if isinstance(v, (dict, list)) else v for k, v in record.items()}


def copy_records(records: Mapping[str, Mapping[str, Any]]) -> dict[str, Record]:
    return {name: _copy_record(record) for name, record in records.items()}


# -- the journal -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingBump:
    name: str
    kind: str
    at: str


@dataclass(frozen=True, slots=True)
class FoldMarker:
    """Written (and fsynced) just before a fold replaces `.usage.json` with `temp_name`."""

    temp_name: str


JournalEntry = PendingBump | FoldMarker


def journal_line(entry: JournalEntry) -> bytes:
    if isinstance(entry, PendingBump):
        # Kind and time are plain ASCII already; only the name needs JSON escaping.
        text = f'\n["{entry.kind}",{encode_basestring(entry.name)},"{entry.at}"]'
    else:
        text = "\n" + json.dumps({"fold": entry.temp_name})
    return text.encode("utf-8")


def parse_journal_line(segment: bytes) -> JournalEntry | None:
    """One journal line, or None for a torn or foreign line."""
    try:
        value = json.loads(segment)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 3:
        kind, name, at = value
        if (
            kind in BUMP_FIELDS
            and isinstance(name, str)
            and name
            and isinstance(at, str)
            and parse_timestamp(at) is not None
        ):
            return PendingBump(name, kind, at)
    elif isinstance(value, dict) and isinstance(temp := value.get("fold"), str):
        return FoldMarker(temp)
    return None


def parse_journal(data: bytes) -> list[JournalEntry]:
    return [
        entry
        for segment in data.split(b"\n")
        if segment.strip() and (entry := parse_journal_line(segment)) is not None
    ]


def pending_bumps(
    entries: Iterable[JournalEntry],
    fold_committed: Callable[[FoldMarker], bool],
    *,
    after: Iterable[PendingBump] = (),
) -> list[PendingBump]:
    """Bumps not yet in `.usage.json`: those after the last fold that did replace it.

    `after` are the bumps pending before `entries` (from an earlier part of the journal).
    """
    pending = list(after)
    for entry in entries:
        if isinstance(entry, PendingBump):
            pending.append(entry)
        elif fold_committed(entry):
            pending.clear()
    return pending


def apply_bump(records: dict[str, Record], bump: PendingBump) -> None:
    """Add one bump to `records` in place, creating the record if the skill has none."""
    record = records.get(bump.name)
    if not isinstance(record, dict):
        at = parse_timestamp(bump.at)
        assert at is not None  # parse_journal_line and UsageStore only build valid bumps
        record = records[bump.name] = new_record(at, created_by=None)
    count_key, at_key = BUMP_FIELDS[bump.kind]
    record[count_key] = count_of(record, count_key) + 1
    current = parse_timestamp(record.get(at_key))
    bumped = parse_timestamp(bump.at)
    if current is None or (bumped is not None and bumped > current):
        record[at_key] = bump.at


def apply_bumps(records: Mapping[str, Record], bumps: Iterable[PendingBump]) -> dict[str, Record]:
    """`records` plus `bumps`, copy-on-write: the input is untouched, unbumped records shared."""
    result = dict(records)
    copied: set[str] = set()
    for bump in bumps:
        if bump.name not in copied:
            copied.add(bump.name)
            if isinstance(existing := result.get(bump.name), dict):
                result[bump.name] = _copy_record(existing)
        apply_bump(result, bump)
    return result


# -- decoding and encoding `.usage.json` -------------------------------------------------------


#: Per top-level key: (value, its encoded line) as last written or read.
LineCache = dict[str, tuple[object, str]]


@dataclass(frozen=True, slots=True)
class Decoded:
    records: dict[str, Record]
    #: Top-level entries that are not records (not objects); kept as they are on every write.
    extras: dict[str, Any]
    #: Why the file is corrupt, or None when it decoded cleanly.
    problem: str | None = None
    #: Lines of a one-entry-per-line file, to reuse when it is next written or read.
    lines: LineCache = field(default_factory=dict)


def salvage_records(text: str) -> dict[str, Record]:
    """Every `"name": {record}` that still decodes in a damaged file (truncated, spliced)."""
    decoder = json.JSONDecoder()
    records: dict[str, Record] = {}
    resume = 0
    for match in _KEY_BEFORE_OBJECT.finditer(text):
        if match.start() < resume:
            continue  # inside a record decoded already
        try:
            name = json.loads(f'"{match.group(1)}"')
            value, end = decoder.raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(value, dict) and _RECORD_MARKERS.intersection(value):
            records[name] = value
            resume = end
    return records


def decode_usage(raw: bytes, *, known: LineCache | None = None) -> Decoded:
    """`.usage.json` decoded; `known` lines (from the last read or write) skip re-parsing.

    Another process's fold rewrites the whole file but changes only a few lines of it, so a
    file in skilld's one-entry-per-line shape is decoded line by line, parsing only new lines.
    Any other shape (Hermes indents) is parsed whole.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        return Decoded(salvage_records(text), {}, f"not UTF-8 ({exc.reason} at byte {exc.start})")
    if not text.strip():
        return Decoded({}, {})
    if known and text.startswith("{\n") and text.endswith("\n}\n"):
        by_line = _decode_by_line(
            text[2:-3], {line: (name, value) for name, (value, line) in known.items()}
        )
        if by_line is not None:
            return by_line
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Decoded(salvage_records(text), {}, f"not valid JSON ({exc})")
    if not isinstance(value, dict):
        return Decoded({}, {}, f"top level is a JSON {type(value).__name__}, not an object")
    return _split_entries(value.items(), {})


def _decode_by_line(body: str, known: Mapping[str, tuple[str, object]]) -> Decoded | None:
    # Each line `"name": value` must parse on its own as `{line}`; then the whole file is
    # exactly those members in order, so this equals a full parse. Otherwise: None.
    entries: list[tuple[str, object]] = []
    lines: LineCache = {}
    for line in body.split(",\n"):
        hit = known.get(line)
        if hit is not None:
            entries.append(hit)
            lines[hit[0]] = (hit[1], line)
            continue
        if not line.strip():
            return None  # `{"a": 1,\n,\n"b": 2}` parses per line but is not JSON
        try:
            member = json.loads("{" + line + "}")
        except ValueError:
            return None
        if not isinstance(member, dict):
            return None
        entries.extend(member.items())
        if len(member) == 1:
            ((name, value),) = member.items()
            lines[name] = (value, line)
    return _split_entries(entries, lines)


def _split_entries(entries: Iterable[tuple[str, object]], lines: LineCache) -> Decoded:
    records: dict[str, Record] = {}
    extras: dict[str, Any] = {}
    for name, value in entries:
        records.pop(name, None)
        extras.pop(name, None)
        if isinstance(value, dict):
            records[name] = value
        else:
            extras[name] = value
    return Decoded(records, extras, None, lines)


def encode_entry(name: str, value: object) -> str:
    return (
        json.dumps(name, ensure_ascii=False)
        + ": "
        + json.dumps(value, ensure_ascii=False, sort_keys=True)
    )


def encode_usage(
    records: Mapping[str, Record],
    extras: Mapping[str, Any],
    *,
    reuse: LineCache | None = None,
) -> tuple[bytes, LineCache]:
    """The file's bytes (one entry per line, keys sorted) and the line cache for next time.

    `reuse` maps a key to (value, encoded line) from the previous write; a line is reused when
    the value is the same object or equal, so unchanged records cost nothing to re-encode.
    """
    merged: dict[str, object] = {k: v for k, v in extras.items() if k not in records}
    merged.update(records)
    reuse = reuse or {}
    lines: LineCache = {}
    for name in sorted(merged):
        value = merged[name]
        previous = reuse.get(name)
        if previous is not None and (previous[0] is value or previous[0] == value):
            lines[name] = (value, previous[1])
        else:
            lines[name] = (value, encode_entry(name, value))
    if not lines:
        return b"{}\n", lines
    body = ",\n".join(line for _, line in lines.values())
    return ("{\n" + body + "\n}\n").encode("utf-8"), lines


# -- the store ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Snapshot:
    """`.usage.json` as last read or written, keyed on the file's identity."""

    identity: tuple[int, int, int, int] | None
    records: dict[str, Record]
    extras: dict[str, Any]
    lines: LineCache = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _JournalView:
    """The journal as far as it was parsed, valid while `key` (file identities) holds."""

    key: tuple[tuple[int, int, int, int] | None, int, int]
    size: int
    pending: list[PendingBump]
    saw_marker: bool


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_fd_from(fd: int, start: int, end: int) -> bytes:
    chunks: list[bytes] = []
    offset = start
    while offset < end:
        chunk = os.pread(fd, end - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class UsageStore:
    """Reads and writes `<skills_dir>/.usage.json` safely beside Hermes and other processes.

    Thread-safe. Process-safe through `flock` on `.usage.json.lock`. One instance per process
    and skills dir is enough; two instances in one thread must not nest their calls (each holds
    its own lock file descriptor, so the inner call would wait on the outer forever).
    """

    def __init__(
        self,
        skills_dir: Path,
        *,
        clock: Callable[[], datetime] = _utc_now,
        on_corrupt: CorruptHandler | None = None,
        fold_threshold_bytes: int = 16 * 1024,
        max_pending_seconds: float = 60.0,
    ) -> None:
        self.skills_dir = Path(skills_dir)
        self.path = self.skills_dir / USAGE_FILE
        self.lock_path = self.skills_dir / LOCK_FILE
        self.journal_path = self.skills_dir / JOURNAL_FILE
        self._clock = clock
        self._on_corrupt = on_corrupt
        self._fold_threshold = fold_threshold_bytes
        self._max_pending = max_pending_seconds
        self._log = get_logger("skilld.usage")
        self._mutex = threading.RLock()
        self._depth = 0
        self._lock_fd: int | None = None
        self._lock_pid = 0
        self._snapshot: _Snapshot | None = None
        self._journal_view: _JournalView | None = None
        self._transaction: dict[str, Record] | None = None
        self._corrupt_reports: list[tuple[Path, str]] = []
        self._swept = False
        self._last_age_check: datetime | None = None

    # -- public API ----------------------------------------------------------------------------

    def read(self) -> dict[str, Record]:
        """Every record, pending bumps included; a private copy the caller may change."""
        with self._locked():
            if self._transaction is not None:
                return copy_records(self._transaction)
            snapshot = self._load()
            return copy_records(apply_bumps(snapshot.records, self._pending()[0]))

    def get(self, name: str) -> Record | None:
        with self._locked():
            if self._transaction is not None:
                record = self._transaction.get(name)
                return _copy_record(record) if record is not None else None
            snapshot = self._load()
            mine = [b for b in self._pending()[0] if b.name == name]
            base = snapshot.records.get(name)
            if not mine:
                return _copy_record(base) if base is not None else None
            return apply_bumps({name: base} if base is not None else {}, mine)[name]

    def bump(self, name: str, kind: BumpKind) -> None:
        """Record one use, view or patch: one appended journal line under the lock."""
        now = self._clock()
        entry = self._new_bump(name, kind, now)
        line = journal_line(entry)
        self._acquire()  # not `with self._locked()`: this is the hot path
        try:
            if self._transaction is not None:
                apply_bump(self._transaction, entry)
                return
            fd = os.open(self.journal_path, _JOURNAL_APPEND, 0o644)
            try:
                _write_fd(fd, line)
                size = os.fstat(fd).st_size
                if self._fold_due(fd, size, len(line), now):
                    self._fold(fd)
            finally:
                os.close(fd)
        finally:
            self._release()

    def bump_many(self, bumps: Iterable[tuple[str, str]]) -> None:
        """Apply a batch in one locked read-modify-write (which also folds the journal)."""
        now = self._clock()
        entries = [self._new_bump(name, kind, now) for name, kind in bumps]
        if not entries:
            return
        with self.transaction() as records:
            for entry in entries:
                apply_bump(records, entry)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[dict[str, Record]]:
        """The records, pending bumps folded in, to change in place under the lock.

        On a normal exit the result is written atomically (and the journal emptied); on an
        exception nothing is written. Nested transactions and bumps inside one share its dict.
        Values must be objects (dicts); non-record top-level entries are kept out of the dict
        and preserved.
        """
        with self._locked():
            if self._transaction is not None:
                yield self._transaction
                return
            journal_fd = self._open_journal_for_fold()
            try:
                snapshot = self._load()
                pending, journal_size, saw_marker = self._pending(journal_fd)
                working = copy_records(apply_bumps(snapshot.records, pending))
                self._transaction = working
                try:
                    yield working
                finally:
                    self._transaction = None
                for name, record in working.items():
                    if not isinstance(name, str) or not isinstance(record, dict):
                        raise TypeError(f"usage record {name!r} must be a dict keyed by a str")
                if journal_size or working != snapshot.records:
                    self._commit(
                        copy_records(working),
                        snapshot,
                        journal_fd=journal_fd if journal_size else None,
                        sweep=saw_marker or not self._swept,
                    )
            finally:
                if journal_fd is not None:
                    os.close(journal_fd)

    def flush(self) -> None:
        """Fold pending bumps into `.usage.json` now, so Hermes sees them."""
        with self._locked():
            if self._transaction is not None:
                return  # the open transaction folds on exit
            journal_fd = self._open_journal_for_fold()
            if journal_fd is None:
                return
            try:
                if os.fstat(journal_fd).st_size:
                    self._fold(journal_fd)
            finally:
                os.close(journal_fd)

    def ensure(self, name: str, *, created_by: str | None) -> Record:
        """The record for `name`, created if missing; sets `created_by` only where it is null."""
        with self.transaction() as records:
            record = records.get(name)
            if record is None:
                record = records[name] = new_record(self._clock(), created_by=created_by)
            elif created_by is not None and record.get("created_by") is None:
                record["created_by"] = created_by
            return _copy_record(record)

    def set_pinned(self, name: str, pinned: bool) -> None:
        with self.transaction() as records:
            self._record_in(records, name)["pinned"] = bool(pinned)

    def set_state(
        self, name: str, state: State, *, archived_at: datetime | str | None = None
    ) -> None:
        """Hermes's rule: `archived` stamps `archived_at`, `active` clears it, `stale` keeps it."""
        if state not in STATES:
            raise ValueError(f"invalid usage state {state!r}; expected one of {STATES}")
        stamp: str | None = None
        if state == "archived":
            moment = parse_timestamp(archived_at) if archived_at is not None else self._clock()
            if moment is None:
                raise ValueError(f"archived_at is not an ISO-8601 time: {archived_at!r}")
            stamp = format_timestamp(moment)
        with self.transaction() as records:
            record = self._record_in(records, name)
            record["state"] = state
            if state != "stale":
                record["archived_at"] = stamp

    def touch_anchor(self, name: str) -> None:
        """Refresh the curator's anchor (after a restore) without inventing activity counts.

        Both curators (skilld's and Hermes's) anchor on `latest_activity_at` before
        `created_at`, so only an activity timestamp keeps a skill with old activity from being
        archived again at the next pass; refreshing `created_at` would not. `last_viewed_at` is
        the weakest signal, and the counters stay untouched, so `use/view` remain honest.
        """
        with self.transaction() as records:
            self._touch(self._record_in(records, name))

    def restore(self, name: str) -> None:
        """Mark a skill restored from the archive: active, not archived, anchor refreshed."""
        with self.transaction() as records:
            record = self._record_in(records, name)
            record["state"] = "active"
            record["archived_at"] = None
            self._touch(record)

    def forget(self, name: str) -> None:
        """Drop a skill's record (it was deleted). A later bump starts a new record."""
        with self.transaction() as records:
            records.pop(name, None)

    def report_rows(self) -> list[dict[str, Any]]:
        """One row per record, sorted by name; see `report_row`."""
        return [report_row(name, record) for name, record in sorted(self.read().items())]

    def close(self) -> None:
        with self._mutex:
            if self._lock_fd is not None and self._lock_pid == os.getpid():
                os.close(self._lock_fd)
            self._lock_fd = None

    # -- helpers -------------------------------------------------------------------------------

    def _new_bump(self, name: str, kind: str, now: datetime) -> PendingBump:
        if kind not in BUMP_FIELDS:
            raise ValueError(f"invalid bump kind {kind!r}; expected use, view or patch")
        if not isinstance(name, str) or not name:
            raise ValueError("a bump needs a skill name")
        return PendingBump(name, kind, format_timestamp(now))

    def _record_in(self, records: dict[str, Record], name: str) -> Record:
        record = records.get(name)
        if record is None:
            record = records[name] = new_record(self._clock(), created_by=None)
        return record

    def _touch(self, record: Record) -> None:
        now = self._clock()
        current = parse_timestamp(record.get("last_viewed_at"))
        if current is None or now > current:
            record["last_viewed_at"] = format_timestamp(now)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._acquire()
        try:
            yield
        finally:
            self._release()

    def _acquire(self) -> None:
        self._mutex.acquire()
        if self._depth == 0:
            try:
                fcntl.flock(self._lock_fd_here(), fcntl.LOCK_EX)
            except BaseException:
                self._mutex.release()
                raise
        self._depth += 1

    def _release(self) -> None:
        self._depth -= 1
        if self._depth:
            self._mutex.release()
            return
        assert self._lock_fd is not None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            reports, self._corrupt_reports = self._corrupt_reports, []
            self._mutex.release()
        # Reported outside the lock: the handler may log to SQLite and must not stall Hermes.
        for copy_path, reason in reports:
            if self._on_corrupt is not None:
                self._on_corrupt(copy_path, reason)

    def _lock_fd_here(self) -> int:
        # A forked child shares its parent's open file description, and with it the flock:
        # it needs its own descriptor to be excluded from the parent.
        pid = os.getpid()
        if self._lock_fd is None or self._lock_pid != pid:
            self.skills_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
            self._lock_pid = pid
        return self._lock_fd

    def _open_journal_for_fold(self) -> int | None:
        try:
            return os.open(self.journal_path, os.O_RDWR | os.O_APPEND | _OPEN_FLAGS)
        except FileNotFoundError:
            return None

    def _pending(self, journal_fd: int | None = None) -> tuple[list[PendingBump], int, bool]:
        """(pending bumps, journal size, whether a fold marker was seen); after `_load()`.

        Only the part of the journal appended since the last look is parsed: every fold
        replaces `.usage.json` before it empties the journal, so while the file's identity is
        unchanged the journal has only grown.
        """
        if journal_fd is None:
            try:
                fd = os.open(self.journal_path, os.O_RDONLY | _OPEN_FLAGS)
            except FileNotFoundError:
                return [], 0, False
        else:
            fd = journal_fd
        try:
            st = os.fstat(fd)
            assert self._snapshot is not None
            key = (self._snapshot.identity, st.st_dev, st.st_ino)
            view = self._journal_view
            if view is None or view.key != key or view.size > st.st_size:
                view = _JournalView(key, 0, [], False)
            if st.st_size > view.size:
                entries = parse_journal(_read_fd_from(fd, view.size, st.st_size))
                view = _JournalView(
                    key,
                    st.st_size,
                    pending_bumps(entries, self._fold_committed, after=view.pending),
                    view.saw_marker or any(isinstance(e, FoldMarker) for e in entries),
                )
            self._journal_view = view
        finally:
            if journal_fd is None:
                os.close(fd)
        return view.pending, view.size, view.saw_marker

    def _fold_committed(self, marker: FoldMarker) -> bool:
        # A fold's temp file exists until its replace; afterwards the name is gone for good.
        if not _TEMP_NAME.fullmatch(marker.temp_name):
            return False
        return not os.path.lexists(self.skills_dir / marker.temp_name)

    def _fold_due(self, fd: int, size: int, appended: int, now: datetime) -> bool:
        if size >= self._fold_threshold:
            return True
        if size <= appended:
            return False  # this bump is the only one pending
        # Reading the oldest line costs more than the rest of a bump: look once a second.
        last = self._last_age_check
        if last is not None and timedelta(0) <= now - last < _AGE_CHECK_EVERY:
            return False
        self._last_age_check = now
        head = os.pread(fd, min(size, _FIRST_LINE_PROBE), 0)
        end = head.find(b"\n", 1)
        first = parse_journal_line(head[1:] if end < 0 else head[1:end])
        if not isinstance(first, PendingBump):
            return True  # a marker or a torn line: fold to clean the journal up
        oldest = parse_timestamp(first.at)
        assert oldest is not None
        return (now - oldest).total_seconds() >= self._max_pending

    def _fold(self, journal_fd: int) -> None:
        snapshot = self._load()
        pending, _, saw_marker = self._pending(journal_fd)
        records = apply_bumps(snapshot.records, pending)
        sweep = saw_marker or not self._swept
        self._commit(records, snapshot, journal_fd=journal_fd, sweep=sweep)

    def _load(self) -> _Snapshot:
        """`.usage.json` under the lock, parsed only when its identity changed."""
        try:
            identity = _identity(os.stat(self.path))
        except FileNotFoundError:
            identity = None
        cached = self._snapshot
        if cached is not None and cached.identity == identity:
            return cached
        if identity is None:
            self._snapshot = _Snapshot(None, {}, {})
            return self._snapshot
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            raw = _read_fd_from(fd, 0, st.st_size)
        finally:
            os.close(fd)
        previous = self._snapshot.lines if self._snapshot is not None else {}
        decoded = decode_usage(raw, known=previous)
        # Lines of a file parsed whole still match equal records on the next write.
        lines = decoded.lines or previous
        self._snapshot = _Snapshot(_identity(st), decoded.records, decoded.extras, lines)
        if decoded.problem is not None:
            self._recover(raw, decoded)
        return self._snapshot

    def _recover(self, raw: bytes, decoded: Decoded) -> None:
        """Keep the corrupt bytes aside, then write back what could be decoded from them."""
        copy_path = self._copy_aside(raw)
        reason = f"{decoded.problem}; recovered {len(decoded.records)} record(s)"
        self._log.error(
            "usage_file_corrupt", path=str(self.path), copy=str(copy_path), reason=reason
        )
        self._corrupt_reports.append((copy_path, reason))
        # The journal stays pending on top of the rebuilt file, and may hold a fold marker
        # whose temp file must survive: no sweep here.
        self._commit(
            decoded.records, _Snapshot(None, {}, decoded.extras), journal_fd=None, sweep=False
        )

    def _copy_aside(self, raw: bytes) -> Path:
        stamp = self._clock().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        for attempt in range(1000):
            suffix = stamp if attempt == 0 else f"{stamp}-{attempt}"
            target = self.skills_dir / f"{CORRUPT_PREFIX}{suffix}"
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o644)
            except FileExistsError:
                continue
            try:
                _write_fd(fd, raw)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.skills_dir)
            return target
        raise FileExistsError(f"no free name for a copy of the corrupt {self.path}")

    def _commit(
        self,
        records: dict[str, Record],
        base: _Snapshot,
        *,
        journal_fd: int | None,
        sweep: bool,
    ) -> None:
        """Atomically replace `.usage.json` with `records`; empty the journal if given one.

        `records` becomes the cached snapshot, so callers hand over a dict nobody else mutates.
        `sweep` says the journal is empty afterwards, so no fold marker names a temp file and
        leftover temp files may go (done after a marker was seen, and once per instance).
        """
        payload, lines = encode_usage(records, base.extras, reuse=base.lines)
        temp_name = f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        temp = self.skills_dir / temp_name
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o644)
        marker_offset: int | None = None
        try:
            try:
                _write_fd(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            if journal_fd is not None:
                marker_offset = os.fstat(journal_fd).st_size
                _write_fd(journal_fd, journal_line(FoldMarker(temp_name)))
                os.fsync(journal_fd)
            os.replace(temp, self.path)
        except BaseException:
            if journal_fd is not None and marker_offset is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(journal_fd, marker_offset)
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
            raise
        fsync_dir(self.skills_dir)
        if journal_fd is not None:
            # No fsync needed: should the truncation be lost, the marker says it was folded.
            os.ftruncate(journal_fd, 0)
        extras = {k: v for k, v in base.extras.items() if k not in records}
        self._snapshot = _Snapshot(_identity(os.stat(self.path)), records, extras, lines)
        if sweep:
            self._sweep_temps()

    def _sweep_temps(self) -> None:
        # Usage temp files are created only under the lock we hold and no marker refers to one
        # any more (the journal was just emptied), so any left is a crash's leftover.
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.skills_dir):
                if _TEMP_NAME.fullmatch(entry.name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
        self._swept = True
