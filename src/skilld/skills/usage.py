"""The `.usage.json` sidecar: per-skill usage telemetry, field-compatible with Hermes Agent.

The file is a JSON object mapping a skill name to a record (docs/design.md). Field names, the
lock file (an OS `flock` on `<skills_dir>/.usage.json.lock`) and the meaning of every field are
Hermes Agent's (`tools/skill_usage.py`), so either tool reads and writes what the other wrote,
and both can write at the same time without losing an update.

Every change is one locked read-modify-write, Hermes's own protocol: lock, read the whole
file, change it, write a temp file beside it, fsync, replace, fsync the directory, unlock. So
Hermes sees a bump as soon as `bump()` returns, and a crash leaves the old file or the new one.
That is all skilld's two paths need (`bench/usage.py` measures them): the agent hook is one
process per bump, whose start-up costs far more than the write, and the daemon records a tick's
uses as one `bump_many` batch, a single read-modify-write for the lot.

The file is written one entry per line, keys sorted, with the C encoder (Hermes indents with the
pure-Python one: the same JSON, slower). Every file is created with mode 0o666 less the umask,
so `UMask=0002` in a service unit gives the agent's group write access. A corrupt `.usage.json`
is copied aside to `.usage.json.corrupt-<UTC stamp>`, reported to `on_corrupt`, and rebuilt from
the records that can still be decoded; it never silently becomes empty.
"""

import _thread
import contextlib
import errno
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, get_args

from skilld.boundedjson import MAX_DEPTH, blanked, nesting
from skilld.boundedjson import loads as bounded_loads
from skilld.fsutil import UnsafePath, fsync_dir, read_tree_file
from skilld.log import get_logger

USAGE_FILE: Final = ".usage.json"
#: The largest usage sidecar read: host-local and one record per skill, so larger than a skill.
MAX_USAGE_BYTES: Final = 64 << 20
LOCK_FILE: Final = ".usage.json.lock"
#: One fixed name: temp files are written only under the lock, so one writer at a time uses it.
TEMP_FILE: Final = ".usage.json.tmp"
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
#: A record's uses per UTC day, {"2026-12-01": 3}: each use on the day it happened (a
#: transcript's use on its message's day), whoever counted it. skilld's own key (Hermes keeps
#: unknown keys; `use_count` stays the total).
USES_BY_DAY: Final = "uses_by_day"
#: How many days of uses a record keeps (the newest ones).
DAYS_KEPT: Final = 30
COUNT_FIELDS: Final = ("use_count", "view_count", "patch_count")
#: A decoded object with one of these keys is taken for a usage record when salvaging.
_RECORD_MARKERS: Final = frozenset(
    (*COUNT_FIELDS, *ACTIVITY_FIELDS, "created_at", "created_by", "state", "pinned")
)

#: A key before an object (group 1), or else a whole string, or the text up to the next one:
#: read from the start of a text whose escapes are blanked out (boundedjson), so a key is never
#: taken from inside a string. Compiled on first use.
_KEY_BEFORE_OBJECT = r'"([^"\n]*)"\s*:\s*(?=\{)|"[^"]*+"?|[^"]++'
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, sort_keys=True)
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Let the umask decide: a fixed 0o644 would take group write away from a shared skills dir.
_FILE_MODE: Final = 0o666

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


def apply_bump(records: dict[str, Record], name: str, kind: str, at: datetime) -> None:
    """Count one bump in `records` in place, creating the record if the skill has none; a use
    is also counted on its UTC day (`USES_BY_DAY`).

    The timestamp only moves forward: a writer whose clock lags (Hermes on another host of a
    shared dir) does not pull `last_*_at` back.
    """
    record = records.get(name)
    if not isinstance(record, dict):
        record = records[name] = new_record(at, created_by=None)
    count_key, at_key = BUMP_FIELDS[kind]
    record[count_key] = count_of(record, count_key) + 1
    current = parse_timestamp(record.get(at_key))
    if current is None or at > current:
        record[at_key] = format_timestamp(at)
    if kind == "use":
        record[USES_BY_DAY] = count_on_day(record.get(USES_BY_DAY), at)


def happened_at(written: str | None, now: datetime) -> datetime:
    """When a use a transcript shows happened: its message's time (`written`), else (none,
    unreadable, or still to come) `now`."""
    moment = parse_timestamp(written)
    return moment if moment is not None and moment <= now else now


def count_on_day(days: object, at: datetime) -> dict[str, int]:
    """`days` (a record's `USES_BY_DAY`) with one more use on `at`'s UTC day, keeping the
    newest `DAYS_KEPT` days (the sidecar stays small, however long a skill lives)."""
    counts = {
        day: count
        for day, count in (days.items() if isinstance(days, dict) else ())
        if isinstance(day, str) and isinstance(count, int) and not isinstance(count, bool)
    }
    day = at.astimezone(UTC).date().isoformat()
    counts[day] = counts.get(day, 0) + 1
    return dict(sorted(counts.items())[-DAYS_KEPT:])


def uses_by_day(record: Mapping[str, Any]) -> dict[str, int]:
    """A record's uses per UTC day (`YYYY-MM-DD`), as far as they were counted by day."""
    days = record.get(USES_BY_DAY)
    if not isinstance(days, dict):
        return {}
    return {
        day: count
        for day, count in sorted(days.items())
        if isinstance(day, str) and isinstance(count, int) and not isinstance(count, bool)
    }


# -- decoding and encoding `.usage.json` -------------------------------------------------------


class Decoded:
    """`.usage.json` as `decode_usage` read it. (A plain class: a named tuple would cost a
    hook's `usage use` a tenth of a millisecond to define.)"""

    __slots__ = ("extras", "problem", "records")

    def __init__(
        self, records: dict[str, Record], extras: dict[str, Any], problem: str | None = None
    ) -> None:
        self.records = records
        #: Top-level entries that are not records (not objects); kept as they are on every write.
        self.extras = extras
        #: Why the file is corrupt, or None when it decoded cleanly.
        self.problem = problem


def salvage_records(text: str) -> dict[str, Record]:
    """Every `"name": {record}` that still decodes in a damaged file (truncated, spliced); none
    in a file nested too deep for a decoder (boundedjson)."""
    if nesting(text, ceiling=MAX_DEPTH) > MAX_DEPTH:
        return {}
    decoder = json.JSONDecoder()
    records: dict[str, Record] = {}
    resume = 0
    # As long as the text: a match's positions are the text's.
    for match in re.finditer(_KEY_BEFORE_OBJECT, blanked(text)):
        if match.start() < resume or match.group(1) is None:
            continue  # inside a record decoded already, or no key before an object
        try:
            name = json.loads(text[match.start(1) - 1 : match.end(1) + 1])
            value, end = decoder.raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(value, dict) and _RECORD_MARKERS.intersection(value):
            records[name] = value
            resume = end
    return records


def decode_usage(raw: bytes) -> Decoded:
    """`.usage.json` decoded, in any JSON layout; what a damaged file still holds, and why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        return Decoded(salvage_records(text), {}, f"not UTF-8 ({exc.reason} at byte {exc.start})")
    if not text.strip():
        return Decoded({}, {})
    try:
        value = bounded_loads(text, limit=MAX_USAGE_BYTES)
    except ValueError as exc:
        return Decoded(salvage_records(text), {}, f"not valid JSON ({exc})")
    if not isinstance(value, dict):
        return Decoded({}, {}, f"top level is a JSON {type(value).__name__}, not an object")
    records: dict[str, Record] = {}
    extras: dict[str, Any] = {}
    for name, entry in value.items():
        if isinstance(entry, dict):
            records[name] = entry
        else:
            extras[name] = entry
    return Decoded(records, extras)


def encode_usage(records: Mapping[str, Record], extras: Mapping[str, Any]) -> bytes:
    """The file's bytes: one entry per line, sorted; a record wins over an extra of its name."""
    merged: dict[str, object] = {**extras, **records}
    if not merged:
        return b"{}\n"
    encode = _ENCODER.encode
    body = ",\n".join(f"{encode(name)}: {encode(merged[name])}" for name in sorted(merged))
    return f"{{\n{body}\n}}\n".encode()


# -- the store ---------------------------------------------------------------------------------


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


_JSON = TypeVar("_JSON")


def _copied(value: _JSON) -> _JSON:
    """A deep copy of JSON values (what records are): `copy.deepcopy` would cost a hook its
    import, and is slower on them than this round trip."""
    copied: _JSON = json.loads(json.dumps(value))
    return copied


class UsageStore:
    """Reads and writes `<skills_dir>/.usage.json` safely beside Hermes and other processes.

    Thread-safe. Process-safe through `flock` on `.usage.json.lock`, held only for one
    read-modify-write (or one `transaction()` body). One instance per process and skills dir is
    enough; two instances in one thread must not nest their calls (each holds its own lock file
    descriptor, so the inner call would wait on the outer forever).
    """

    def __init__(
        self,
        skills_dir: Path,
        *,
        clock: Callable[[], datetime] = _utc_now,
        on_corrupt: CorruptHandler | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.skills_dir = Path(skills_dir)
        #: Called before every read and write (a project library's check that its skills dir
        #: is real folders inside the project); what it raises stops the operation.
        self._guard = guard
        self.path = self.skills_dir / USAGE_FILE
        self.lock_path = self.skills_dir / LOCK_FILE
        self._clock = clock
        self._on_corrupt = on_corrupt
        self._log = get_logger("skilld.usage")
        # The C lock `threading.RLock()` returns; importing `threading` would cost a hook a
        # millisecond it needs for nothing else.
        self._mutex = _thread.RLock()
        self._lock_fd: int | None = None
        self._lock_pid = 0
        self._transaction: dict[str, Record] | None = None
        self._corrupt_reports: list[tuple[Path, str]] = []

    # -- public API ----------------------------------------------------------------------------

    def read(self) -> dict[str, Record]:
        """Every record; a private copy the caller may change."""
        with self._mutex:
            if self._transaction is not None:
                return _copied(self._transaction)
            with self._file_locked():
                return self._load()[1].records

    def read_listed(self) -> tuple[dict[str, Record], str | None]:
        """`read()` for what only shows records (a listing, a page): the records and None, or,
        when the tree guard refuses the sidecar or its lock (a link, not a regular file, over
        the bound), no records and the reason. Anything that decides from records (the curator,
        a write) uses `read()`, which raises UnsafePath for it: no record is not no use."""
        try:
            return self.read(), None
        except UnsafePath as refused:
            return {}, str(refused)

    def get(self, name: str) -> Record | None:
        return self.read().get(name)

    def bump(self, name: str, kind: BumpKind) -> None:
        """Record one use, view or patch: one locked read-modify-write."""
        self.bump_many([(name, kind)])

    def bump_many(self, bumps: Iterable[tuple[str, str]]) -> None:
        """Record a batch, all stamped now, in one locked read-modify-write."""
        self.bump_dated([(name, kind, None) for name, kind in bumps])

    def bump_dated(self, bumps: Iterable[tuple[str, str, datetime | None]]) -> None:
        """Record a batch, each stamped when it happened (None, or a time still to come:
        now), in one locked read-modify-write."""
        checked = [(*_checked_bump(name, kind), at) for name, kind, at in bumps]
        if not checked:
            return
        now = self._clock()
        with self._rewrite(skip_if_unchanged=False) as records:
            for name, kind, at in checked:
                apply_bump(records, name, kind, now if at is None or at > now else at)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[dict[str, Record]]:
        """The records, to change in place under the lock: one read-modify-write for them all.

        On a normal exit the result is written atomically, unless nothing changed; on an
        exception nothing is written. Nested transactions and bumps inside one share its dict.
        Values must be objects (dicts); non-record top-level entries are kept out of the dict
        and preserved.
        """
        with self._rewrite(skip_if_unchanged=True) as records:
            yield records

    def ensure(self, name: str, *, created_by: str | None) -> Record:
        """The record for `name`, created if missing; sets `created_by` only where it is null."""
        with self.transaction() as records:
            record = records.get(name)
            if record is None:
                record = records[name] = new_record(self._clock(), created_by=created_by)
            elif created_by is not None and record.get("created_by") is None:
                record["created_by"] = created_by
            return _copied(record)

    def set_pinned(self, name: str, pinned: bool) -> None:
        with self.transaction() as records:
            self._record_in(records, name)["pinned"] = bool(pinned)

    def set_state(
        self, name: str, state: State, *, archived_at: datetime | str | None = None
    ) -> None:
        """Hermes's rule: `archived` stamps `archived_at`, `active` clears it, `stale` keeps it."""
        self.set_states({name: state}, archived_at=archived_at)

    def set_states(
        self, states: Mapping[str, State], *, archived_at: datetime | str | None = None
    ) -> None:
        """`set_state` for many skills in one read-modify-write."""
        for state in states.values():
            if state not in STATES:
                raise ValueError(f"invalid usage state {state!r}; expected one of {STATES}")
        stamp: str | None = None
        if "archived" in states.values():
            moment = parse_timestamp(archived_at) if archived_at is not None else self._clock()
            if moment is None:
                raise ValueError(f"archived_at is not an ISO-8601 time: {archived_at!r}")
            stamp = format_timestamp(moment)
        with self.transaction() as records:
            for name, state in states.items():
                record = self._record_in(records, name)
                record["state"] = state
                if state != "stale":
                    record["archived_at"] = stamp if state == "archived" else None

    def restore(self, name: str) -> None:
        """Mark a skill restored from the archive: active, not archived, anchor refreshed.

        Both curators (skilld's and Hermes's) anchor on `latest_activity_at` before
        `created_at`, so only an activity timestamp keeps a skill with old activity from being
        archived again at the next pass. `last_viewed_at` is the weakest signal, and the
        counters stay untouched, so `use/view` remain honest.
        """
        now = self._clock()
        with self.transaction() as records:
            record = self._record_in(records, name)
            record["state"] = "active"
            record["archived_at"] = None
            current = parse_timestamp(record.get("last_viewed_at"))
            if current is None or now > current:
                record["last_viewed_at"] = format_timestamp(now)

    def forget(self, name: str) -> None:
        """Drop a skill's record (it was deleted). A later bump starts a new record."""
        with self.transaction() as records:
            records.pop(name, None)

    def close(self) -> None:
        with self._mutex:
            if self._lock_fd is not None and self._lock_pid == os.getpid():
                os.close(self._lock_fd)
            self._lock_fd = None

    # -- the read-modify-write -----------------------------------------------------------------

    @contextlib.contextmanager
    def _rewrite(self, *, skip_if_unchanged: bool) -> Iterator[dict[str, Record]]:
        with self._mutex:
            if self._transaction is not None:
                yield self._transaction
                return
            with self._file_locked():
                raw, decoded = self._load()
                records = decoded.records
                self._transaction = records
                try:
                    yield records
                finally:
                    self._transaction = None
                for name, record in records.items():
                    if not isinstance(name, str) or not isinstance(record, dict):
                        raise TypeError(f"usage record {name!r} must be a dict keyed by a str")
                if skip_if_unchanged and records == (decode_usage(raw).records if raw else {}):
                    return
                self._write(encode_usage(records, decoded.extras))

    def _load(self) -> tuple[bytes | None, Decoded]:
        """The file's bytes (None if missing) and contents; a corrupt file is rebuilt first."""
        # Through the tree guard: a `.usage.json` that is a link (into another agent's library,
        # or a key) is refused, never read.
        raw = read_tree_file(self.skills_dir, USAGE_FILE, limit=MAX_USAGE_BYTES)
        if raw is None:
            return None, Decoded({}, {})
        decoded = decode_usage(raw)
        if decoded.problem is None:
            return raw, decoded
        copy_path = self._copy_aside(raw)
        reason = f"{decoded.problem}; recovered {len(decoded.records)} record(s)"
        self._log.error(
            "usage_file_corrupt", path=str(self.path), copy=str(copy_path), reason=reason
        )
        self._corrupt_reports.append((copy_path, reason))
        rebuilt = encode_usage(decoded.records, decoded.extras)
        self._write(rebuilt)
        return rebuilt, Decoded(decoded.records, decoded.extras)

    def _copy_aside(self, raw: bytes) -> Path:
        stamp = self._clock().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        for attempt in range(1000):
            suffix = stamp if attempt == 0 else f"{stamp}-{attempt}"
            target = self.skills_dir / f"{CORRUPT_PREFIX}{suffix}"
            try:
                fd = os.open(target, _CREATE_FLAGS, _FILE_MODE)
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

    def _write(self, payload: bytes) -> None:
        """Replace `.usage.json` atomically and durably; the caller holds the lock.

        Not `fsutil.atomic_write`: its temp files are swept by any skilld process starting up,
        which could delete this one between its write and its replace in another process.
        """
        temp = self.skills_dir / TEMP_FILE
        try:
            fd = os.open(temp, _CREATE_FLAGS, _FILE_MODE)
        except FileExistsError:
            temp.unlink()  # a crashed write's leftover: nobody else writes it without the lock
            fd = os.open(temp, _CREATE_FLAGS, _FILE_MODE)
        try:
            try:
                _write_fd(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
            raise
        fsync_dir(self.skills_dir)

    # -- the lock ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _file_locked(self) -> Iterator[None]:
        if self._guard is not None:
            self._guard()
        fd = self._lock()
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            reports, self._corrupt_reports = self._corrupt_reports, []
            # Reported after unlocking: the handler may log to SQLite and must not stall Hermes.
            for copy_path, reason in reports:
                if self._on_corrupt is not None:
                    self._on_corrupt(copy_path, reason)

    def _lock(self) -> int:
        """Hold `flock` on the file now at `.usage.json.lock`; its descriptor.

        A lock file deleted or replaced under a held descriptor would leave this process
        locking an inode nobody else opens any more, so after each `flock` the descriptor is
        checked against the path, and reopened until they agree.
        """
        while True:
            fd = self._lock_fd_here()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if _same_file(os.fstat(fd), os.stat(self.lock_path)):
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)  # also drops the lock on the orphaned inode
            self._lock_fd = None

    def _lock_fd_here(self) -> int:
        # A forked child shares its parent's open file description, and with it the flock:
        # it needs its own descriptor to be excluded from the parent.
        pid = os.getpid()
        if self._lock_fd is None or self._lock_pid != pid:
            self.skills_dir.mkdir(parents=True, exist_ok=True)
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                self._lock_fd = os.open(self.lock_path, flags, _FILE_MODE)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                message = f"{LOCK_FILE} is a symbolic link inside {self.skills_dir}"
                raise UnsafePath(message) from None
            self._lock_pid = pid
        return self._lock_fd

    def _record_in(self, records: dict[str, Record], name: str) -> Record:
        record = records.get(name)
        if record is None:
            record = records[name] = new_record(self._clock(), created_by=None)
        return record


def _checked_bump(name: str, kind: str) -> tuple[str, str]:
    if kind not in BUMP_FIELDS:
        raise ValueError(f"invalid bump kind {kind!r}; expected use, view or patch")
    if not isinstance(name, str) or not name:
        raise ValueError("a bump needs a skill name")
    return name, kind
