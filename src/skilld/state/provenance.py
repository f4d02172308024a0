"""Provenance (`provenance`): which skills skilld wrote, with the hash it wrote and where the
current version was learned. A file whose hash is no longer skilld's is someone else's."""

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from skilld.state.db import Database, utc_now_iso

#: The hash a row keeps once a person took the skill over (`disown_provenance`): no file
#: hashes to it, so the skill is `human` whatever its text, while the row still says where it
#: was learned (its measurement continues, DESIGN.md §13).
DISOWNED = "disowned"


class Provenance(NamedTuple):
    library: str
    name: str
    path: str
    sha256: str
    prev_sha256: str | None
    session: str | None
    first_message: int | None
    last_message: int | None
    model: str | None
    prompt_version: str | None
    created_at: str
    updated_at: str
    #: The git context (JSON) of the window that wrote the current version; None when unknown
    #: or written by hand.
    git: str | None = None


class ProvenanceTable(Database):
    def provenance(self, library: str, name: str) -> Provenance | None:
        row = self.conn.execute(
            "SELECT * FROM provenance WHERE library = ? AND name = ?", (library, name)
        ).fetchone()
        return Provenance(**dict(row)) if row else None

    def all_provenance(self, library: str) -> dict[str, Provenance]:
        # The columns named in the record's order, so each row becomes one without a dict
        # (listing 10,000 skills reads 10,000 rows).
        rows = self.conn.execute(
            f"SELECT {', '.join(Provenance._fields)} FROM provenance WHERE library = ?",
            (library,),
        )
        return {row[1]: Provenance._make(row) for row in rows.fetchall()}

    def adopt_provenance(
        self, library: str, root: Path, orphans: Iterable[str]
    ) -> list[tuple[str, str]]:
        """Give the rows of libraries no longer configured (`orphans`; '' for rows written
        before libraries existed) to `library` when its root holds their file: a library
        renamed, or a `[skills] dir` replaced by the agent's own library over the same folder,
        keeps knowing which skills are skilld's. Returns (old library, name) of each."""
        prefix = str(root).rstrip("/") + "/"
        adopted: list[tuple[str, str]] = []
        for orphan in orphans:
            rows = self.conn.execute(
                "SELECT name, path FROM provenance WHERE library = ?", (orphan,)
            ).fetchall()
            adopted += [(orphan, row["name"]) for row in rows if row["path"].startswith(prefix)]
        if adopted:
            with self.transaction():
                self.conn.executemany(
                    "UPDATE OR IGNORE provenance SET library = ? WHERE library = ? AND name = ?",
                    [(library, orphan, name) for orphan, name in adopted],
                )
        return adopted

    def library_names(self) -> list[str]:
        """Every library skilld has written into (provenance names it; '' is the library of
        the rows written before libraries existed)."""
        rows = self.conn.execute("SELECT DISTINCT library FROM provenance")
        return sorted(row["library"] for row in rows.fetchall())

    def put_provenance(
        self,
        library: str,
        name: str,
        *,
        path: str,
        sha256: str,
        prev_sha256: str | None = None,
        session: str | None = None,
        first_message: int | None = None,
        last_message: int | None = None,
        model: str | None = None,
        prompt_version: str | None = None,
        git: Mapping[str, Any] | None = None,
    ) -> None:
        now = utc_now_iso(self._clock())
        with self.transaction():
            self.conn.execute(
                """
                INSERT INTO provenance(library, name, path, sha256, prev_sha256, session,
                                       first_message, last_message, model, prompt_version,
                                       created_at, updated_at, git)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(library, name) DO UPDATE SET
                    path = excluded.path, sha256 = excluded.sha256,
                    prev_sha256 = excluded.prev_sha256,
                    session = COALESCE(excluded.session, provenance.session),
                    first_message = COALESCE(excluded.first_message, provenance.first_message),
                    last_message = COALESCE(excluded.last_message, provenance.last_message),
                    model = COALESCE(excluded.model, provenance.model),
                    prompt_version = COALESCE(excluded.prompt_version, provenance.prompt_version),
                    updated_at = excluded.updated_at, git = excluded.git
                """,
                (
                    library,
                    name,
                    path,
                    sha256,
                    prev_sha256,
                    session,
                    first_message,
                    last_message,
                    model,
                    prompt_version,
                    now,
                    now,
                    json.dumps(dict(git), separators=(",", ":")) if git is not None else None,
                ),
            )

    def settle_provenance(self, library: str, name: str, sha256: str) -> None:
        """The file now holds `sha256` for good: forget the hash it replaced. A no-op when a
        later write has recorded another hash meanwhile."""
        with self.transaction():
            self.conn.execute(
                "UPDATE provenance SET prev_sha256 = NULL"
                " WHERE library = ? AND name = ? AND sha256 = ?",
                (library, name, sha256),
            )

    def restore_provenance(
        self, library: str, name: str, sha256: str, origin: Mapping[str, Any]
    ) -> None:
        """The file holding `sha256` came back from an earlier version (a rollback): where it
        came from is that version's `origin` (session, first_message, last_message, model,
        prompt_version, git), each null when the version had none."""
        git = origin.get("git")
        with self.transaction():
            self.conn.execute(
                "UPDATE provenance SET session = ?, first_message = ?, last_message = ?,"
                " model = ?, prompt_version = ?, git = ?"
                " WHERE library = ? AND name = ? AND sha256 = ?",
                (
                    origin.get("session"),
                    origin.get("first_message"),
                    origin.get("last_message"),
                    origin.get("model"),
                    origin.get("prompt_version"),
                    json.dumps(dict(git), separators=(",", ":")) if git else None,
                    library,
                    name,
                    sha256,
                ),
            )

    def move_provenance(self, library: str, name: str, path: str) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE provenance SET path = ? WHERE library = ? AND name = ?",
                (path, library, name),
            )

    def disown_provenance(self, library: str, name: str) -> None:
        """A person took `name` over: skilld never changes it again (no file hashes to
        `DISOWNED`), and the row keeps where it was learned, so its effect is still measured."""
        with self.transaction():
            self.conn.execute(
                "UPDATE provenance SET sha256 = ?, prev_sha256 = ? WHERE library = ? AND name = ?",
                (DISOWNED, DISOWNED, library, name),
            )

    def drop_provenance(self, library: str, name: str) -> None:
        with self.transaction():
            self.conn.execute(
                "DELETE FROM provenance WHERE library = ? AND name = ?", (library, name)
            )
