"""Which sessions used which skill (`skill_uses`), for `skills show` and the panel."""

from collections.abc import Mapping

from skilld.state.db import Database


class SkillUseTable(Database):
    def record_uses(
        self,
        library: str,
        uses: Mapping[tuple[str, str], int],
        at: Mapping[tuple[str, str], str],
    ) -> None:
        """Add `count` uses of skill `name` by `session` for each ((name, session), count),
        the last of them at `at[(name, session)]` (ISO, when the session used it)."""
        rows = [
            (library, name, session, n, at[name, session]) for (name, session), n in uses.items()
        ]
        with self.transaction():
            self.conn.executemany(
                "INSERT INTO skill_uses(library, name, session, uses, last_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(library, name, session) DO UPDATE SET"
                " uses = uses + excluded.uses, last_at = MAX(last_at, excluded.last_at)",
                rows,
            )

    def skill_sessions(self, library: str, name: str) -> list[tuple[str, int, str]]:
        """(session, uses, last use) for every session that used the skill, newest first."""
        rows = self.conn.execute(
            "SELECT session, uses, last_at FROM skill_uses WHERE library = ? AND name = ?"
            " ORDER BY last_at DESC",
            (library, name),
        ).fetchall()
        return [(row["session"], row["uses"], row["last_at"]) for row in rows]
