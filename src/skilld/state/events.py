"""The event log (`events`): what skilld did and why, written in the transaction of the change
it records, logged as it is written, and queried by kind, skill, library and time."""

import json
import sqlite3
from collections.abc import Mapping
from functools import cached_property
from typing import Any, NamedTuple

from skilld.log import get_logger
from skilld.state.db import Database, utc_now_iso

#: Event kinds (docs/design.md plus the library's own operations).
EVENT_KINDS = frozenset(
    {
        # evolution outcomes
        "created",
        "updated",
        "unchanged",
        "skipped",
        "invalid",
        "cap",
        "protected",
        "error",
        "redacted",
        "deferred",
        "staged",
        # library operations
        "written",
        "deleted",
        "pinned",
        "unpinned",
        "archived",
        "restored",
        "rolled_back",
        "approved",
        "rejected",
        "usage_corrupt",
        "warning",
        # the daemon
        "agent_found",
        # curator
        "stale",
        "reactivated",
        "merged",
        "consolidation_refused",
        # team libraries
        "conflict",
        "synced",
        # an action taken through the web panel (what, on which skill)
        "web",
        "sync_refused",
        # the state dir was open to other users: its modes were set to its owner's alone
        "permissions_repaired",
        # a skill's effect (DESIGN.md §13): its failure came back; its verdict moved
        "failure_recurred",
        "verdict_changed",
        # the switchback holdout (DESIGN.md §14): a skill moved out of its agent's sight, back
        "withheld",
        "restored_from_holdout",
    }
)


class Event(NamedTuple):
    id: int
    ts: str
    kind: str
    skill: str | None
    session: str | None
    source: str | None
    reason: str | None
    detail: dict[str, Any]
    library: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "library": self.library,
            "skill": self.skill,
            "session": self.session,
            "source": self.source,
            "reason": self.reason,
            "detail": self.detail,
        }


class EventLog(Database):
    @cached_property
    def _log(self) -> Any:
        return get_logger("skilld.events")

    def add_event(
        self,
        kind: str,
        *,
        library: str | None = None,
        skill: str | None = None,
        session: str | None = None,
        source: str | None = None,
        reason: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        # Every event is redacted where it is stored: a reason or a detail may quote what a
        # model or a server said (a reply, an error body), and those may quote a secret.
        from skilld.redact import redact, redact_strings  # not for the commands that only read

        if reason is not None:
            reason = redact(reason).text
        detail = redact_strings(dict(detail or {}))
        ts = utc_now_iso(self._clock())
        detail_json = json.dumps(detail, ensure_ascii=False, default=str)
        with self.transaction():
            cursor = self.conn.execute(
                "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (ts, kind, library, skill, session, source, reason, detail_json),
            )
        level = (
            "error" if kind in ("error", "usage_corrupt", "conflict", "sync_refused") else "info"
        )
        fields = {
            "library": library,
            "skill": skill,
            "session": session,
            "source": source,
            "reason": reason,
        }
        line = {k: v for k, v in fields.items() if v is not None}
        for key, value in detail.items():
            # A detail key may repeat a column's name (or structlog's "event"): keep both.
            line[f"detail_{key}" if key in fields or key == "event" else key] = value
        getattr(self._log, level)(kind, **line)
        return int(cursor.lastrowid or 0)

    def events(
        self,
        *,
        kinds: tuple[str, ...] = (),
        skill: str | None = None,
        library: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        after_id: int = 0,
        before_id: int | None = None,
        session: str | None = None,
    ) -> list[Event]:
        """Newest last. `limit` keeps the newest `limit` matching events (those before
        `before_id`, when given: a page of a log read newest first); `session`: only that
        session's."""
        clauses: list[str] = ["id > ?"]
        params: list[Any] = [after_id]
        if before_id is not None:
            clauses.append("id < ?")
            params.append(before_id)
        # A skill names few events: with one given, only its index is used (a unary `+` keeps
        # SQLite from walking a library's or a kind's events instead, 1,000x slower at 1M).
        unindexed = "+" if skill is not None else ""
        if kinds:
            clauses.append(f"{unindexed}kind IN ({','.join('?' * len(kinds))})")
            params.extend(kinds)
        if skill is not None:
            clauses.append("skill = ?")
            params.append(skill)
        if library is not None:
            clauses.append(f"{unindexed}library = ?")
            params.append(library)
        if since is not None:
            clauses.append("ts >= ?")
            params.append(since)
        if session is not None:
            clauses.append("session = ?")
            params.append(session)
        sql = f"SELECT * FROM events WHERE {' AND '.join(clauses)} ORDER BY id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self.conn.execute(sql, params).fetchall()
        return [_event(row) for row in reversed(rows)]

    def count_kinds(self, kinds: tuple[str, ...], *, since: str) -> dict[str, int]:
        """How many events of each of `kinds` were recorded since `since` (ISO)."""
        # The log is appended in time order: from the first event since then on, each kind is
        # an index range to count, not every event of the week to look at.
        first = self.conn.execute(
            "SELECT id FROM events WHERE ts >= ? ORDER BY ts, id LIMIT 1", (since,)
        ).fetchone()
        counts = dict.fromkeys(kinds, 0)
        if first is None:
            return counts
        rows = self.conn.execute(
            f"SELECT kind, COUNT(*) FROM events WHERE kind IN ({','.join('?' * len(kinds))})"
            " AND id >= ? GROUP BY kind",
            (*kinds, first[0]),
        ).fetchall()
        return counts | dict(rows)


def _event(row: sqlite3.Row) -> Event:
    detail = json.loads(row["detail"]) if row["detail"] else {}
    return Event(
        id=row["id"],
        ts=row["ts"],
        kind=row["kind"],
        skill=row["skill"],
        session=row["session"],
        source=row["source"],
        reason=row["reason"],
        detail=detail,
        library=row["library"],
    )
