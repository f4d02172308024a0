"""Kept proposals (`proposals`): judged answers waiting to be written (room under the cap, a
write fault fixed), kept in the transaction that moves their window's watermark."""

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, NamedTuple

from skilld.state.db import Database


class KeptProposal(NamedTuple):
    """A judged proposal waiting to be written (room under the cap, a write fault fixed)."""

    id: int
    library: str
    session: str | None
    source: str | None
    first_message: int | None
    last_message: int | None
    body: dict[str, Any]
    status: str  # "new", "cap", "failed"
    note: str | None
    created_at: float


class ProposalTable(Database):
    def keep_proposal(
        self,
        library: str,
        body: Mapping[str, Any],
        *,
        session: str | None,
        source: str | None,
        first_message: int | None,
        last_message: int | None,
    ) -> int:
        now = self._clock()
        with self.transaction():
            cursor = self.conn.execute(
                "INSERT INTO proposals(library, session, source, first_message, last_message,"
                " body, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'new', ?, ?)",
                (
                    library,
                    session,
                    source,
                    first_message,
                    last_message,
                    json.dumps(dict(body), ensure_ascii=False),
                    now,
                    now,
                ),
            )
        return int(cursor.lastrowid or 0)

    def kept_proposals(self, library: str | None = None) -> list[KeptProposal]:
        sql, params = "SELECT * FROM proposals", []
        if library is not None:
            sql, params = sql + " WHERE library = ?", [library]
        rows = self.conn.execute(sql + " ORDER BY id", params).fetchall()
        return [_proposal(row) for row in rows]

    def update_proposal(
        self,
        proposal_id: int,
        *,
        status: str,
        note: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE proposals SET status = ?, note = ?, updated_at = ?,"
                " body = COALESCE(?, body) WHERE id = ?",
                (
                    status,
                    note,
                    self._clock(),
                    json.dumps(dict(body), ensure_ascii=False) if body is not None else None,
                    proposal_id,
                ),
            )

    def drop_proposal(self, proposal_id: int) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM proposals WHERE id = ?", (proposal_id,))

    def proposal_counts(self) -> dict[str, dict[str, int]]:
        """library -> status -> how many proposals wait."""
        counts: dict[str, dict[str, int]] = {}
        rows = self.conn.execute(
            "SELECT library, status, COUNT(*) AS n FROM proposals GROUP BY library, status"
        )
        for row in rows.fetchall():
            counts.setdefault(row["library"], {})[row["status"]] = row["n"]
        return counts


def _proposal(row: sqlite3.Row) -> KeptProposal:
    return KeptProposal(
        id=row["id"],
        library=row["library"],
        session=row["session"],
        source=row["source"],
        first_message=row["first_message"],
        last_message=row["last_message"],
        body=json.loads(row["body"]),
        status=row["status"],
        note=row["note"],
        created_at=row["created_at"],
    )
