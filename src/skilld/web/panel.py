"""The panel's routes: pages rendered from `skilld.reports`, actions through the functions the
CLI calls, and `/api/` answering exactly what the matching `--json` command prints.

Each request opens the state and the libraries afresh (as the MCP server does), so the panel
shows what the daemon and the CLI changed in the meantime, and never holds a library's lock
between requests. What it keeps is what a listing learned of each skill file (its hash and
quick check, `FileFacts`), valid only while the file's identity stays the same.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from jinja2 import Environment, PackageLoader
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from skilld import actions, versions
from skilld.app import App, open_app
from skilld.config import Config
from skilld.errors import LibraryError, NotFound, SkilldError, UsageError
from skilld.fsutil import read_tree_file
from skilld.reports.curator import curator_report
from skilld.reports.effect import effect_rows, effect_week, skill_verdicts
from skilld.reports.events import count_option, event_page
from skilld.reports.listing import (
    learned_on,
    learned_on_text,
    listed_skills,
    skill_row,
    skill_rows,
)
from skilld.reports.skill import skill_effect, skill_report
from skilld.reports.status import (
    daemon_stale,
    llm_daily,
    outcome_counts_text,
    review_items,
    status_problems,
    status_report,
)
from skilld.reports.week import one_line, week_report
from skilld.skills.layout import SKILL_FILE
from skilld.skills.library import FileFacts, Library
from skilld.state import EVENT_KINDS
from skilld.web import acting, failures
from skilld.web.present import (
    FLASH_COOKIE,
    FLASH_SECONDS,
    Flash,
    calls_text,
    event_row,
    human_count,
    time_tag,
)
from skilld.web.render import (
    bar_chart,
    markdown,
    proposal_diff,
    split_frontmatter,
    unified_diff,
)
from skilld.web.responses import JSON, refusal_status
from skilld.web.security import (
    CSRF_FIELD,
    PUBLIC_PATHS,
    Access,
    Guard,
    LoginThrottle,
    secret_matches,
    set_session_cookie,
)
from skilld.web.skills_table import (
    SORTS,
    VERDICTS,
    chosen_sort,
    matches,
    sort_rows,
    table_row,
    verdict_rank,
)

PAGE_SIZE = 50
#: `/api/events` without a `limit`: the newest 100.
API_EVENTS = 100
#: The live events view asks the log for new events this often (never more often).
LIVE_POLL_SECONDS = 1.0
#: The navigation: each page's path and name (the current one is marked `aria-current`).
NAV = (
    ("/", "Overview"),
    ("/skills", "Skills"),
    ("/review", "Review"),
    ("/events", "Events"),
    ("/failures", "Failures"),
    ("/curator", "Curator"),
    ("/write", "Write a skill"),
)


class Panel:
    def __init__(self, config: Config, access: Access, throttle: LoginThrottle) -> None:
        self.config = config
        self.access = access
        self.throttle = throttle
        self.templates = Environment(
            loader=PackageLoader("skilld.web", "templates"), autoescape=True
        )
        self.templates.globals.update(csrf_field=CSRF_FIELD, nav=NAV)
        self.templates.filters.update(
            learned_on=learned_on_text,
            outcome_counts=outcome_counts_text,
            count=human_count,
            calls=calls_text,
            ago=time_tag,
        )
        #: What the skills page learned of each skill file, for as long as the panel runs.
        self._file_facts: FileFacts = {}
        #: Each skill file's description and body: path -> ((mtime, size), (description, body)).
        self._texts: dict[str, tuple[tuple[float, int], tuple[str, str]]] = {}

    # -- plumbing ----------------------------------------------------------------------------

    def page(self, request: Request, template: str, code: int = 200, **values: Any) -> HTMLResponse:
        """`template` rendered, with the navigation's current page, the path an action's form
        comes back to, the outcome of the action that redirected here (shown once), and the
        per-process secret, on a page the guard let through with a login only."""
        flash = Flash.decode(request.cookies.get(FLASH_COOKIE))
        back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        csrf = "" if request.url.path in PUBLIC_PATHS else self.access.secret
        html = self.templates.get_template(template).render(
            here=request.url.path, back=back, flash=flash, csrf=csrf, **values
        )
        response = HTMLResponse(html, status_code=code)
        if FLASH_COOKIE in request.cookies:
            response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    def redirect(self, to: str, flash: Flash) -> Response:
        """Post/redirect/get: a 303 to the page the action came from, carrying its outcome in
        a short-lived cookie (a reload of that page never repeats the action)."""
        response = RedirectResponse(to, 303)
        response.set_cookie(
            FLASH_COOKIE,
            flash.encode(),
            max_age=FLASH_SECONDS,
            path="/",
            httponly=True,
            samesite="strict",
        )
        return response

    async def with_app(self, function: Callable[[App], Any]) -> Any:
        """`function` of the state and libraries opened afresh, in a worker thread (SQLite and
        the files block; the event loop keeps serving the live view meanwhile)."""

        def run() -> Any:
            with open_app(self.config, file_facts=self._file_facts) as app:
                return function(app)

        return await run_in_threadpool(run)

    async def form(self, request: Request) -> FormData:
        form = await request.form()
        if not secret_matches(_text(form.get(CSRF_FIELD)), self.access.secret):
            raise _Refusal(403, "refused: the form did not carry the panel's secret")
        return form

    def refusal(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.page(
            request, "outcome.html", status, title="Refused", heading="Refused", message=message
        )

    # -- pages -------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        from skilld.curator.holdout import holdout_overview

        def build(app: App) -> dict[str, Any]:
            # The listing first: it fills the file facts the cap's count then reads.
            counts: dict[str, dict[str, int]] = {}
            for skill in (s for lib in app.all_libraries() for s in listed_skills(lib)):
                count = counts.setdefault(skill.library, {})
                for key in (skill.owner, skill.state, "pinned" if skill.pinned else ""):
                    if key:
                        count[key] = count.get(key, 0) + 1
            status = status_report(app)
            daily = llm_daily(app)
            return {
                "status": status,
                "problems": status_problems(status),
                "recent": week_report(app),
                "counts": counts,
                "stale": daemon_stale(status),
                "daily": daily,
                "calls_chart": bar_chart(
                    [(d["day"], d["calls"]) for d in daily], title="LLM calls per day"
                ),
                "tokens_chart": bar_chart(
                    [(d["day"], d["prompt_tokens"] + d["completion_tokens"]) for d in daily],
                    title="LLM tokens per day",
                ),
                "kept": app.state.kept_proposals(),
                "week": effect_week(app),
                "holdout": holdout_overview(app),
                "watched": watched_folders(app),
            }

        values = await self.with_app(build)
        return self.page(request, "overview.html", title="Overview", **values)

    async def skills(self, request: Request) -> Response:
        query = request.query_params
        library, owner, state = (query.get(k) or None for k in ("library", "owner", "state"))
        repository, branch = (query.get(k) or None for k in ("repository", "branch"))
        verdict = query.get("verdict") or None
        search = (query.get("q") or "").strip().lower()
        words = search.split()
        sort, descending = chosen_sort(query.get("sort"), query.get("order"))
        page = _int(query.get("page"), 1)

        def build(app: App) -> dict[str, Any]:
            libraries = [lib.name for lib in app.all_libraries()]
            chosen = [app.select(library)] if library in libraries else app.all_libraries()
            library_of = {lib.name: lib for lib in chosen}
            problems: list[str] = []
            skills = [
                skill
                for lib in chosen
                for skill in listed_skills(lib, problems)
                if (owner is None or skill.owner == owner)
                and (state is None or skill.state == state or (state == "pinned" and skill.pinned))
                and (
                    not words
                    or matches(words, skill.name, *self.text(lib, skill.path, skill.broken))
                )
            ]
            if repository is not None or branch is not None:
                skills = [
                    skill
                    for skill in skills
                    if learned_on(skill_row(skill)["git"], repository, branch)
                ]
            # Filtering or sorting by verdict needs every listed skill's; else the page's only.
            every = verdict is not None or sort == "verdict"
            verdicts: dict[tuple[str, str], dict[str, Any]] = {}
            if every:
                verdicts = skill_verdicts(app, [(s.library, s.name) for s in skills])
            if verdict is not None:
                skills = [
                    skill
                    for skill in skills
                    if (verdicts.get((skill.library, skill.name)) or {}).get("verdict") == verdict
                ]
            pages = max(1, -(-len(skills) // PAGE_SIZE))
            start = (min(page, pages) - 1) * PAGE_SIZE
            if sort == "name":
                # The table's default order needs no row: only the page shown is built.
                skills.sort(key=lambda skill: (skill.name, skill.library), reverse=descending)
                shown = [table_row(skill) for skill in skills[start : start + PAGE_SIZE]]
            else:
                rows = [table_row(skill) for skill in skills]
                for row in rows if every else ():
                    found = verdicts.get((row["library"], row["name"])) or {}
                    row["verdict_rank"] = verdict_rank(found.get("verdict"))
                shown = sort_rows(rows, sort, descending)[start : start + PAGE_SIZE]
            if not every:
                verdicts = skill_verdicts(app, [(row["library"], row["name"]) for row in shown])
            for row in shown:
                row["verdict"] = (verdicts.get((row["library"], row["name"])) or {}).get("verdict")
                row["description"] = one_line(
                    self.text(library_of[row["library"]], row["path"], row["broken"])[0]
                )
            return {
                "rows": shown,
                "total": len(skills),
                "pages": pages,
                "libraries": libraries,
                "problems": problems,
            }

        values = await self.with_app(build)
        filters = {
            "q": search, "library": library or "", "owner": owner or "", "state": state or "",
            "repository": repository or "", "branch": branch or "", "verdict": verdict or "",
        }  # fmt: skip
        return self.page(
            request, "skills.html", title="Skills", page=page, filters=filters, sort=sort,
            order="desc" if descending else "asc", sorts=SORTS, verdicts=VERDICTS, **values,
        )  # fmt: skip

    def text(self, library: Library, path: str, broken: str | None) -> tuple[str, str]:
        """The description and body of the skill file at `path` (what the search reads),
        read once per file version, through the library's tree guard (no link on the way, no
        FIFO, nothing over the bound), and never for a broken entry."""
        from skilld.skills.document import parse_skill

        if broken:
            return "", ""
        try:
            stat = os.stat(path, follow_symlinks=False)
            relpath = Path(path).relative_to(library.root).as_posix()
        except (OSError, ValueError):
            return "", ""
        mark = (stat.st_mtime, stat.st_size)
        cached = self._texts.get(path)
        if cached is not None and cached[0] == mark:
            return cached[1]
        try:
            doc = parse_skill(read_tree_file(library.root, relpath) or b"")
            text = (doc.description, doc.body)
        except (OSError, ValueError):  # UnsafePath and SkillParseError are ValueErrors
            text = ("", "")
        self._texts[path] = (mark, text)
        return text

    async def skill(self, request: Request) -> Response:
        library_name, name = request.path_params["library"], request.path_params["name"]
        before, after = request.query_params.get("a"), request.query_params.get("b")

        def build(app: App) -> dict[str, Any] | None:
            library = app.select(library_name)
            entry = library.get(name)
            archived = library.archived().get(name)
            if entry is None and archived is None:
                return None
            record = library.listed_usage()[0].get(name) or {}
            if entry is None:
                assert archived is not None
                file = archived / SKILL_FILE if archived.is_dir() else archived
                report = {"name": name, "library": library.name, "owner": "archived"}
                text = _archived_text(library, file)
                effect = skill_effect(app, library, name, record=record)
            else:
                if entry.error:
                    raise LibraryError(f"{entry.name} is broken: {entry.error}")
                report = skill_report(app, name, library.name, record=record)
                text, effect = report["text"], report["effect"]

            saved = versions.snapshots_by_digest(library, name)
            numbered = effect["versions"]
            current = effect["current"]

            def version_text(version: str | None) -> str | None:
                if version in (None, "", "current"):
                    return text
                number = versions.version_number(version)
                if number is None or not 1 <= number <= len(numbered):
                    return None
                snapshot = saved.get(numbered[number - 1]["sha256"])
                if snapshot is None:
                    return None
                data = library.version_bytes(name, snapshot.version)
                return data.decode("utf-8", errors="replace")

            diff = None
            if before is not None or after is not None:
                old, new = version_text(before), version_text(after)
                if old is not None and new is not None:
                    diff = unified_diff(
                        old, new, before_name=_named(before), after_name=_named(after)
                    )
            frontmatter, body = split_frontmatter(text)
            daily = _last_days(effect["uses_by_day"])
            return {
                "report": report,
                "pinned": record.get("pinned") is True,
                "frontmatter": frontmatter,
                "body": markdown(body),
                "effect": effect,
                "provenance": app.state.provenance(library.name, name),
                "choices": versions.labelled(
                    numbered, set(saved), entry.sha256 if entry is not None else None
                ),
                "current": current,
                "diff": diff,
                "chart": bar_chart(daily, title="Uses by day"),
                "charted": sum(count for _, count in daily),
                "undated": max(0, effect["uses"] - sum(effect["uses_by_day"].values())),
                "archived": entry is None,
                "offered": acting.offered(
                    report["owner"],
                    pinned=record.get("pinned") is True,
                    archived=entry is None,
                    held=((effect.get("outcome") or {}).get("holdout") or {}).get("state")
                    == "running",
                ),
            }

        try:
            values = await self.with_app(build)
        except SkilldError as exc:
            return self.refusal(request, refusal_status(exc), str(exc))
        if values is None:
            return self.refusal(request, 404, f"no skill named {name} in library {library_name}")
        return self.page(
            request, "skill.html", title=f"Skill {name}", a=before or "", b=after or "", **values
        )

    # The failures' pages and API: `skilld.web.failures`.

    async def failures(self, request: Request) -> Response:
        return await failures.failures_page(self, request)

    async def failure(self, request: Request) -> Response:
        return await failures.failure_page(self, request)

    async def api_failures(self, request: Request) -> Response:
        return await failures.api_failures(self, request)

    async def api_failure(self, request: Request) -> Response:
        return await failures.api_failure(self, request)

    async def review(self, request: Request) -> Response:
        def build(app: App) -> dict[str, Any]:
            from skilld.gitinfo import from_json
            from skilld.skills.document import SkillDoc, render_skill, same_text

            items = []
            for item in review_items(app):
                target = actions.staged_library(app, item["library"], item["project_root"])
                doc = SkillDoc(
                    name=item["name"],
                    description=item["description"],
                    when_to_use=item["when_to_use"],
                    body=item["content"],
                )
                proposal = render_skill(doc, target.dialect)
                entry = target.get(item["name"])
                broken, current = None, None
                if entry is not None:
                    try:  # a broken entry is never read; an unreadable one is shown as broken
                        current = entry.text()
                    except LibraryError as exc:
                        broken = str(exc)
                taught = item["origin"]
                # Staged before skilld left such proposals out: approving would change nothing.
                unchanged = (
                    entry is not None
                    and entry.doc is not None
                    and same_text(entry.doc, doc, target.form)
                )
                diff = proposal_diff(current, proposal) if current is not None else None
                # Shown only: a sidecar the guard refuses shows no pin; an approval reads it.
                record = target.listed_usage()[0].get(entry.name) if entry is not None else None
                blocked = target.protection(entry, record) if entry is not None else None
                items.append(
                    {
                        **item,
                        "target": target.name,
                        "proposal": proposal,
                        "diff": diff,
                        "broken": broken,
                        "pinned": bool(record and record.get("pinned")),
                        "blocked": blocked,
                        "unchanged": unchanged,
                        "session": taught.get("session"),
                        "git": git.as_json() if (git := from_json(taught.get("git"))) else None,
                    }
                )
            return {"items": items, "publish": app.config.evolve.publish}

        values = await self.with_app(build)
        return self.page(request, "review.html", title="Review", **values)

    async def events(self, request: Request) -> Response:
        query = request.query_params
        filters = _event_filters(request)
        before = _int(query.get("before"), 0) or None

        def build(app: App) -> tuple[list[dict[str, Any]], int | None, dict[str, str]]:
            events, older = event_page(app, **filters, before=before, size=PAGE_SIZE)
            return events, older, library_roots(app)

        try:
            events, older, roots = await self.with_app(build)
        except UsageError as exc:
            return self.refusal(request, 400, str(exc))
        shown = {
            "kind": ",".join(filters["kinds"]),
            "library": filters["library"] or "",
            "skill": filters["skill"] or "",
            "since": filters["since"] or "",
            "session": filters["session"] or "",
        }
        newest = events[0]["id"] if events else 0
        now = datetime.now(UTC)
        return self.page(
            request, "events.html", title="Events",
            rows=Markup("".join(event_row(event, roots, now) for event in events)),
            older=older, filters=shown, kinds=sorted(EVENT_KINDS),
            live=f"/events/live?after={newest}&{request.url.query}",
        )  # fmt: skip

    async def live(self, request: Request) -> Response:
        """New events as Server-Sent Events, read from the log once a second."""
        filters = _event_filters(request)
        after = _int(request.query_params.get("after"), 0)

        def newer(app: App, after_id: int) -> list[Any]:
            return app.state.events(
                kinds=filters["kinds"],
                skill=filters["skill"],
                library=filters["library"],
                session=filters["session"],
                after_id=after_id,
                limit=PAGE_SIZE,
            )

        async def stream() -> AsyncIterator[str]:
            last = after
            while True:
                found = await self.with_app(functools.partial(newer, after_id=last))
                for event in found:
                    last = max(last, event.id)
                    yield f"id: {event.id}\ndata: {json.dumps(event.as_dict(), default=str)}\n\n"
                if not found:
                    yield ": waiting\n\n"
                await anyio.sleep(LIVE_POLL_SECONDS)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"cache-control": "no-store"}
        )

    async def curator(self, request: Request) -> Response:
        def build(app: App) -> dict[str, Any]:
            return {
                "report": curator_report(app),
                "preview": acting.curate_now(app, dry_run=True),
                "consolidate": app.config.curator.consolidate,
            }

        values = await self.with_app(build)
        return self.page(request, "curator.html", title="Curator", **values)

    async def write_form(self, request: Request) -> Response:
        """A new skill (`/write`), or an existing one to edit (`/skills/LIB/NAME/edit`)."""
        library_name = request.path_params.get("library")
        name = request.path_params.get("name")

        def build(app: App) -> dict[str, Any] | None:
            libraries = [lib.name for lib in app.all_libraries()]
            if name is None:
                return {"libraries": libraries, "skill": None}
            entry = app.select(library_name).entry(name)
            if entry is None or entry.doc is None:
                return None
            return {"libraries": libraries, "skill": {
                "library": library_name, "name": entry.name, "owner": entry.owner,
                "description": entry.doc.description, "when_to_use": entry.doc.when_to_use or "",
                "body": entry.doc.body,
            }}  # fmt: skip

        try:
            values = await self.with_app(build)
        except SkilldError as exc:
            return self.refusal(request, refusal_status(exc), str(exc))
        if values is None:
            return self.refusal(request, 404, f"no readable skill named {name} to edit")
        title = f"Edit {name}" if name else "Write a skill"
        return self.page(request, "write.html", title=title, **values)

    # -- login -------------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.page(request, "login.html", title="Log in")
        # No per-process secret here: this page is shown before any login, and the token
        # itself is what a forged post would lack (the guard checks the origin, too).
        form = await request.form()
        matched = await self.throttle.matches(_text(form.get("token")) or "", self.access.token)
        if not matched:
            return self.page(request, "login.html", 401 if matched is False else 429,
                             title="Log in", failed=True)  # fmt: skip
        response = RedirectResponse("/", 303)
        set_session_cookie(response, self.access.token)
        return response

    # -- actions -----------------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        """An action from a button: done through the CLI's function, recorded as a `web`
        event, then a redirect to the page it came from with its outcome (post/redirect/get).
        A refused write shows its form again, with what was typed."""
        verb = request.path_params["verb"]
        form = await self.form(request)
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        name, library = fields.get("name", ""), fields.get("library") or None
        if verb not in acting.VERBS or (verb != "curate" and not name):
            return self.refusal(request, 400, f"unknown action {verb!r}, or no skill named")

        def record(app: App, outcome: str, message: str, where: str | None) -> None:
            app.state.add_event(
                "web",
                library=where,
                skill=name or None,
                source=acting.PANEL.source,
                reason=verb,
                detail={"action": verb, "outcome": outcome, "message": message},
            )

        def run(app: App) -> tuple[bool, str, str | None]:
            try:
                message, where = acting.perform(app, verb, fields)
            except SkilldError as exc:
                message = f"{verb.capitalize()} refused: {exc}"
                record(app, "refused", str(exc), library)
                return False, message, library
            record(app, "done", message, where)
            return True, message, where

        done, message, where = await self.with_app(run)
        if verb == "write" and not done:
            libraries = await self.with_app(lambda app: [lib.name for lib in app.all_libraries()])
            skill = {**fields, "when_to_use": fields.get("when", ""), "owner": None}
            return self.page(
                request, "write.html", 409, title="Write a skill", libraries=libraries,
                skill=skill if fields.get("new") != "1" else None, typed=fields,
                refused=message,
            )  # fmt: skip
        back = acting.back_to(verb, fields.get("back"), where, name, done)
        return self.redirect(back, Flash("done" if done else "refused", message))

    # -- the JSON API ------------------------------------------------------------------------

    async def api_status(self, request: Request) -> Response:
        return JSON(await self.with_app(status_report))

    async def api_skills(self, request: Request) -> Response:
        """`skills list --json`, or the page of it `offset` and `limit` give (default: all)."""
        query = request.query_params
        try:
            offset = count_option(query.get("offset"), "offset") or 0
            limit = count_option(query.get("limit"), "limit")
            rows = await self.with_app(lambda app: skill_rows(app, query.get("library")))
        except UsageError as exc:
            return JSON({"error": str(exc)}, 400)
        return JSON(rows[offset : None if limit is None else offset + limit])

    async def api_skill(self, request: Request) -> Response:
        library, name = request.path_params["library"], request.path_params["name"]
        try:
            return JSON(await self.with_app(lambda app: skill_report(app, name, library)))
        except SkilldError as exc:
            return JSON({"error": str(exc)}, 404)

    async def api_events(self, request: Request) -> Response:
        """The newest `limit` (default `API_EVENTS`) events matching the filters of `skilld
        events`, newest first, older than the event `before` when given: the last one's id
        asks for the next page."""
        filters = _event_filters(request)
        query = request.query_params
        filters.pop("session")  # the page's filter: `events --json` has none
        try:
            limit = count_option(query.get("limit"), "limit")
            before = count_option(query.get("before"), "before")
            events, _ = await self.with_app(
                lambda app: event_page(
                    app, **filters, before=before, size=API_EVENTS if limit is None else limit
                )
            )
        except UsageError as exc:
            return JSON({"error": str(exc)}, 400)
        return JSON(events)

    async def api_unknown(self, request: Request) -> Response:
        return JSON({"error": f"no API path {request.url.path}"}, 404)

    async def api_review(self, request: Request) -> Response:
        return JSON(await self.with_app(review_items))

    async def api_effect(self, request: Request) -> Response:
        library = request.query_params.get("library")
        try:
            return JSON(await self.with_app(lambda app: effect_rows(app, library)))
        except UsageError as exc:
            return JSON({"error": str(exc)}, 400)

    async def api_holdout(self, request: Request) -> Response:
        """`skilld holdout --json`: the skills withheld now, and until when."""
        from skilld.curator.holdout import withheld_now

        return JSON(await self.with_app(withheld_now))


class _Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def library_roots(app: App) -> dict[str, str]:
    """Each library's folder -> its name, to shorten the paths an event names."""
    return {str(library.root): library.name for library in app.all_libraries()}


def watched_folders(app: App) -> list[tuple[str, str]]:
    """The folders skilld reads sessions from (kind, folder); with none configured or found,
    where it looks for each agent's."""
    from skilld.routing import AGENTS

    if app.routing.routes:
        return [(route.source.kind, str(route.source.path)) for route in app.routing.routes]
    return [(kind, str(agent.sessions())) for kind, agent in AGENTS.items()]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _named(version: str | None) -> str:
    """A compared version as the diff names it: `v3`, or `current`."""
    number = versions.version_number(version or "")
    return f"v{number}" if number is not None else "current"


def _int(value: str | None, default: int) -> int:
    try:
        return max(0, int(value)) if value else default
    except ValueError:
        return default


def _event_filters(request: Request) -> dict[str, Any]:
    query = request.query_params
    kinds = tuple(
        kind.strip() for value in query.getlist("kind") for kind in value.split(",") if kind.strip()
    )
    return {
        "kinds": kinds,
        "library": query.get("library") or None,
        "skill": query.get("skill") or None,
        "since": query.get("since") or None,
        "session": query.get("session") or None,
    }


def _last_days(uses_by_day: dict[str, int], days: int = 30) -> list[tuple[str, float]]:
    """Uses on each of the last `days` UTC days, each on the day it happened."""
    today = datetime.now(UTC).date()
    return [
        (day, float(uses_by_day.get(day, 0)))
        for day in ((today - timedelta(days=n)).isoformat() for n in range(days - 1, -1, -1))
    ]


def build_app(config: Config, access: Access, throttle: LoginThrottle) -> Starlette:
    panel = Panel(config, access, throttle)

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _Refusal)
        return panel.refusal(request, exc.status, str(exc))

    async def not_found(request: Request, exc: Exception) -> Response:
        return panel.refusal(request, 404, "no such page")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return panel.refusal(
            request, 405, "refused: an action is a POST from the panel's own button"
        )

    static = Path(__file__).parent / "static"
    routes = [
        Route("/", panel.overview),
        Route("/skills", panel.skills),
        Route("/skills/{library:path}/{name}/edit", panel.write_form),
        Route("/skills/{library:path}/{name}", panel.skill),
        Route("/write", panel.write_form),
        Route("/review", panel.review),
        Route("/events", panel.events),
        Route("/events/live", panel.live),
        Route("/failures", panel.failures),
        Route("/failures/{failure}", panel.failure),
        Route("/curator", panel.curator),
        Route("/login", panel.login, methods=["GET", "POST"]),
        Route("/act/{verb}", panel.act, methods=["POST"]),
        Route("/api/status", panel.api_status),
        Route("/api/skills", panel.api_skills),
        Route("/api/skills/{library:path}/{name}", panel.api_skill),
        Route("/api/events", panel.api_events),
        Route("/api/review", panel.api_review),
        Route("/api/failures", panel.api_failures),
        Route("/api/failures/{failure}", panel.api_failure),
        Route("/api/effect", panel.api_effect),
        Route("/api/holdout", panel.api_holdout),
        Route("/api/{rest:path}", panel.api_unknown, methods=["GET", "HEAD", "POST"]),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={_Refusal: refused, 404: not_found, 405: not_allowed},
    )
    return app


def guarded_app(config: Config, access: Access) -> Guard:
    """The panel behind its guard: what the server serves. One throttle for both ways of
    giving the token (the login URL or form, and `Authorization: Bearer`)."""
    throttle = LoginThrottle()
    return Guard(build_app(config, access, throttle), access, throttle)


def _archived_text(library: Library, file: Path) -> str:
    """An archived skill file's text, read through the library's tree guard (no link on the
    way, no FIFO, nothing over the bound). Raises LibraryError saying why it is not shown."""
    try:
        data = read_tree_file(library.root, file.relative_to(library.root).as_posix())
    except (OSError, ValueError) as exc:  # UnsafePath is a ValueError
        raise LibraryError(f"{file} is not shown: {exc}") from None
    if data is None:
        raise NotFound(f"{file} is gone")
    return data.decode("utf-8", errors="replace")
