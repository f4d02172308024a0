"""The panel's skills table: its rows (`skills list --json`'s, with the day each skill was
created) and their order, chosen by the page's `sort` and `order` query values.

Pure functions over plain values.
"""

from __future__ import annotations

from typing import Any

from skilld.reports.listing import ListedSkill, skill_row

#: The table's sorts: the row's field, and whether the largest comes first by default (each
#: column sorts both ways: `sort=uses&order=asc`).
SORTS: dict[str, tuple[str, bool]] = {
    "name": ("name", False),
    "uses": ("use_count", True),
    "last-use": ("last_activity_at", True),
    "created": ("created_at", True),  # the newest first
    "verdict": ("verdict_rank", False),  # what most needs a person first
}
#: Every verdict `skilld effect` gives, in the order the table sorts them: those asking a
#: person to act first, then those still waiting for sessions, `helps` last.
VERDICTS = (
    "worse", "no-change", "not-triggered", "helps-when-loaded", "too-early", "no-failure",
    "helps",
)  # fmt: skip


def verdict_rank(verdict: str | None) -> int | None:
    """Where `verdict` sorts (`VERDICTS`' order; an unknown one after them); None: none."""
    if verdict is None:
        return None
    return VERDICTS.index(verdict) if verdict in VERDICTS else len(VERDICTS)


def matches(words: list[str], *texts: str) -> bool:
    """Whether every one of `words` (lower case) is in one of `texts` (name, description,
    body): a search for `push upstream` finds the skill whose body says both."""
    joined = "\n".join(texts).lower()
    return all(word in joined for word in words)


def chosen_sort(sort: str | None, order: str | None) -> tuple[str, bool]:
    """The `SORTS` key asked for (else `name`), and whether it runs largest first: `order`
    when it says `asc` or `desc`, else the sort's own default."""
    sort = sort if sort in SORTS else "name"
    return sort, (SORTS[sort][1] if order not in ("asc", "desc") else order == "desc")


def sort_rows(rows: list[dict[str, Any]], sort: str, descending: bool) -> list[dict[str, Any]]:
    """`rows` by `sort` (a `SORTS` key), largest first when `descending`; rows without a value
    last either way, then by name."""
    key = SORTS.get(sort, SORTS["name"])[0]
    by_name = sorted(rows, key=lambda row: (row["name"], row["library"]))
    present = [row for row in by_name if row.get(key) is not None]
    present.sort(key=lambda row: row[key], reverse=descending)
    return present + [row for row in by_name if row.get(key) is None]


def table_row(skill: ListedSkill) -> dict[str, Any]:
    """A row of the skills table: `skills list --json`'s, with the day it was created."""
    return {**skill_row(skill), "created_at": skill.record.get("created_at")}
