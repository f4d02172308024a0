"""The panel's failures (DESIGN.md §13): the Failures page, grouped so that what still recurs
comes first, a page per failure with its occurrences, and `/api/failures` answering what
`skilld failures --json` and `failures show --json` print.

The groups are a pure decision over `failure_report`'s rows and the verdicts of the skills
that target them (`failure_groups`); the handlers read, decide, render.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from skilld.errors import NotFound, SkilldError, UsageError
from skilld.reports.effect import failure_detail, failure_report, skill_verdicts
from skilld.web.responses import JSON, refusal_status

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response

    from skilld.app import App


class Pages(Protocol):
    """What these handlers need of the panel (`skilld.web.panel.Panel`)."""

    async def with_app(self, function: Callable[[App], Any]) -> Any: ...

    def page(
        self, request: Request, template: str, code: int = 200, **values: Any
    ) -> HTMLResponse: ...

    def refusal(self, request: Request, status: int, message: str) -> HTMLResponse: ...


#: Rows of each group the page shows (the rest: `skilld failures --json`, `/api/failures`).
GROUP_ROWS = 100
#: Occurrences a failure's page shows at once, oldest first (`?page=N` for the next ones).
OCCURRENCE_ROWS = 200

Verdicts = Mapping[tuple[str, str], Mapping[str, Any]]


class Group(NamedTuple):
    key: str
    heading: str
    #: What a person does about the failures of this group.
    hint: str
    rows: list[dict[str, Any]]
    total: int


#: The groups, in the order the page shows them: what still recurs first.
GROUPS = (
    ("still", "Recurring though a skill targets them",
     "The skill is not ending the failure: its verdict says whether to fix its routing or its"
     " content."),
    ("uncovered", "Recurring, no skill covers them",
     "Nothing has been learned from these yet."),
    ("ended", "Targeted, not seen since the skill",
     "Seen only before the skill that targets them was written."),
    ("once", "Seen in one session", "Not recurring."),
)  # fmt: skip


def with_skills(row: Mapping[str, Any], verdicts: Verdicts) -> dict[str, Any]:
    """`row` with each targeting skill's verdict and since (None: not measured)."""
    skills = [
        {**skill, **(verdicts.get((skill["library"], skill["name"])) or {})}
        for skill in row["skills"]
    ]
    return {**row, "skills": skills}


def recurs_after(row: Mapping[str, Any]) -> bool:
    """Whether the failure of `row` (with its skills' `since`) was seen after a skill that
    targets it was written (a skill not measured yet counts as written before)."""
    last = row["last_seen"]
    return any(not skill.get("since") or (last or "") > skill["since"] for skill in row["skills"])


def group_of(row: Mapping[str, Any]) -> str:
    recurring = row["sessions"] >= 2
    if row["skills"]:
        return "still" if recurring and recurs_after(row) else "ended"
    return "uncovered" if recurring else "once"


def failure_groups(
    rows: Sequence[Mapping[str, Any]], verdicts: Verdicts, limit: int = GROUP_ROWS
) -> list[Group]:
    """`failure_report`'s rows (most sessions first) in `GROUPS`, each its first `limit`."""
    found: dict[str, list[dict[str, Any]]] = {key: [] for key, _, _ in GROUPS}
    totals = dict.fromkeys(found, 0)
    for row in rows:
        if not row["skills"]:
            key = "uncovered" if row["sessions"] >= 2 else "once"
            totals[key] += 1
            if len(found[key]) < limit:
                found[key].append(dict(row))
            continue
        full = with_skills(row, verdicts)
        key = group_of(full)
        totals[key] += 1
        if len(found[key]) < limit:
            found[key].append(full)
    return [Group(key, heading, hint, found[key], totals[key]) for key, heading, hint in GROUPS]


def skills_then(
    occurrence: Mapping[str, Any], skills: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The targeting `skills` that existed when `occurrence` happened (their `since` before
    its time): the ones it recurred despite."""
    at = occurrence.get("at") or ""
    return [skill for skill in skills if skill.get("since") and skill["since"] <= at]


def _int(value: str | None) -> int:
    try:
        return max(1, int(value)) if value else 1
    except ValueError:
        return 1


async def failures_page(panel: Pages, request: Request) -> Response:
    """Every failure, grouped: recurring though targeted, recurring and uncovered, ended, once."""

    def build(app: App) -> dict[str, Any]:
        rows = failure_report(app)
        names = sorted({(s["library"], s["name"]) for row in rows for s in row["skills"]})
        verdicts = skill_verdicts(app, names) if names else {}
        return {"groups": failure_groups(rows, verdicts), "total": len(rows)}

    values = await panel.with_app(build)
    return panel.page(request, "failures.html", title="Failures", **values)


async def failure_page(panel: Pages, request: Request) -> Response:
    """One failure and where it happened: its occurrences, oldest first, a page at a time,
    each with the skills that targeted it then."""
    key = request.path_params["failure"]
    page = _int(request.query_params.get("page"))

    def build(app: App) -> dict[str, Any]:
        detail = failure_detail(app, key)
        names = sorted({(s["library"], s["name"]) for s in detail["skills"]})
        full = with_skills(detail, skill_verdicts(app, names) if names else {})
        occurrences = full["occurrences"]
        pages = max(1, -(-len(occurrences) // OCCURRENCE_ROWS))
        chosen = min(page, pages)
        start = (chosen - 1) * OCCURRENCE_ROWS
        shown = [
            {**o, "skills": skills_then(o, full["skills"])}
            for o in occurrences[start : start + OCCURRENCE_ROWS]
        ]
        return {
            "failure": full,
            "shown": shown,
            "page": chosen,
            "pages": pages,
            "per_page": OCCURRENCE_ROWS,
        }

    try:
        values = await panel.with_app(build)
    except SkilldError as exc:
        return panel.refusal(request, refusal_status(exc), str(exc))
    return panel.page(request, "failure.html", title=f"Failure {key}", **values)


async def api_failures(panel: Pages, request: Request) -> Response:
    """`skilld failures --json` with the same filters."""
    query = request.query_params
    since, repository = query.get("since") or None, query.get("repository") or None
    recurring = query.get("recurring", "") not in ("", "0", "false")

    def build(app: App) -> list[dict[str, Any]]:
        return failure_report(app, since=since, repository=repository, recurring=recurring)

    try:
        return JSON(await panel.with_app(build))
    except UsageError as exc:
        return JSON({"error": str(exc)}, 400)


async def api_failure(panel: Pages, request: Request) -> Response:
    """`skilld failures show ID --json`."""
    key = request.path_params["failure"]
    try:
        return JSON(await panel.with_app(lambda app: failure_detail(app, key)))
    except NotFound as exc:
        return JSON({"error": str(exc)}, 404)
