"""What skilld reports about its libraries, its daemon and its event log, as plain values.

One function per report: the CLI prints them (as text, or as the `--json` object), the MCP
server returns them to an agent, and the web panel renders them and serves them under `/api/`.
Each is a function of an opened `App` (or a `Library`) and returns lists and dicts of plain
values, so the three faces agree by construction.

`skills list` and `status` are one-shot commands: this module imports nothing at load time
beyond what they already load, and each report imports what it needs when it runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from skilld.config import parse_duration
from skilld.errors import Failure, UsageError

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.effect.report import Kept, SkillEffect
    from skilld.gitinfo import GitContext
    from skilld.skills.library import Library


# -- skills ----------------------------------------------------------------------------------


class ListedSkill(NamedTuple):
    """A skill as a listing first finds it: what the skills table filters on, before its row
    (`skill_row`) is built."""

    library: str
    name: str
    owner: str
    #: "active", "stale" or "archived".
    state: str
    pinned: bool
    path: str
    broken: str | None
    #: Its usage record ({} when it has none).
    record: Mapping[str, Any]
    #: The git context its current version was learned in, as state.db keeps it (JSON).
    git: str | None


def listed_skills(library: Library) -> list[ListedSkill]:
    """Every skill of `library` (live or archived), by name: `library_rows` before the rows."""
    from skilld.skills.layout import SKILL_FILE

    usage = library.usage_records()
    provenance = library.state.all_provenance(library.name)
    entries: list[tuple[str, str, str, str | None]] = [
        (e.name, e.owner, e.file, e.error)
        for e in library.discover(parse=False, provenance=provenance)
    ]
    live = {name for name, *_ in entries}
    for name, archived in library.archived().items():
        if name not in live:
            file = archived / SKILL_FILE if archived.is_dir() else archived
            owner = "managed" if name in provenance else "human"
            entries.append((name, owner, str(file), None))
    archive = str(library.root / ".archive")
    listed = []
    for name, owner, path, error in sorted(entries):
        record = usage.get(name, {})
        known = provenance.get(name)
        listed.append(
            ListedSkill(
                library=library.name,
                name=name,
                owner=owner,
                state="archived" if path.startswith(archive) else record.get("state") or "active",
                pinned=bool(record.get("pinned", False)),
                path=path,
                broken=error,
                record=record,
                git=known.git if known is not None else None,
            )
        )
    return listed


def skill_row(skill: ListedSkill) -> dict[str, Any]:
    """The row `skills list --json` prints for `skill`."""
    from skilld.skills.usage import latest_activity_at

    record = skill.record
    latest = latest_activity_at(record) if record else None
    return {
        "name": skill.name,
        "library": skill.library,
        "owner": skill.owner,
        "state": skill.state,
        "pinned": skill.pinned,
        "use_count": int(record.get("use_count", 0) or 0),
        "view_count": int(record.get("view_count", 0) or 0),
        "patch_count": int(record.get("patch_count", 0) or 0),
        "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
        "path": skill.path,
        "broken": skill.broken,
        "git": _git_json(_stored_git(skill.git)),
    }


def library_rows(library: Library) -> list[dict[str, Any]]:
    """One row per skill of `library` (live or archived), with its usage and where its
    current version was learned (`git`, null when unknown)."""
    return [skill_row(skill) for skill in listed_skills(library)]


def skill_rows(
    app: App,
    library: str | None = None,
    *,
    repository: str | None = None,
    branch: str | None = None,
) -> list[dict[str, Any]]:
    """`skills list --json`: every skill of `library`, or of every library; with `repository`
    or `branch`, only those whose current version was learned there."""
    libraries = [app.select(library)] if library is not None else app.all_libraries()
    rows = [row for lib in libraries for row in library_rows(lib)]
    if repository is None and branch is None:
        return rows
    return [row for row in rows if learned_on(row["git"], repository, branch)]


def learned_on(git: dict[str, Any] | None, repository: str | None, branch: str | None) -> bool:
    """Whether a skill learned in `git` passes `skills list --repository R --branch B` (each a
    glob; the repository is compared in its normal form, so any spelling of a remote works)."""
    from fnmatch import fnmatchcase

    from skilld.gitinfo import normalise_repository

    if repository is not None:
        repository = normalise_repository(repository) or repository
    for key, pattern in (("repository", repository), ("branch", branch)):
        value = git.get(key) if git is not None else None
        if pattern is not None and (value is None or not fnmatchcase(value, pattern)):
            return False
    return True


def _stored_git(text: str | None) -> GitContext | None:
    """A git context as state.db keeps it (JSON), read back as untrusted."""
    if not text:
        return None  # learned outside a repository, or before skilld kept where
    from skilld.gitinfo import from_json

    try:
        return from_json(json.loads(text))
    except ValueError:
        return None


def _git_json(git: GitContext | None) -> dict[str, str | None] | None:
    return git.as_json() if git is not None else None


def effect(
    app: App,
    library: Library,
    name: str,
    *,
    record: Mapping[str, Any] | None = None,
    on_disk: str | None = None,
) -> dict[str, Any]:
    """What the library knows of a skill's effect: uses (in all, and per UTC day when each
    happened, `uses_by_day`, whoever counted it), the sessions that used it, and each
    version v1…vN with the reason given for it and where it was learned (`git`, null when
    unknown); `current` is the version whose text is on disk (`on_disk`: its sha256, when
    known; see `skilld.versions`). `record` is the skill's usage record, when the caller has
    read the library's already (the sidecar is the costly read)."""
    from skilld.skills.usage import latest_activity_at, uses_by_day
    from skilld.versions import VERSION_KINDS, current_version, numbered_versions

    if record is None:
        record = library.usage_records().get(name) or {}
    latest = latest_activity_at(record) if record else None
    sessions = app.state.skill_sessions(library.name, name)
    measured = effect_records(
        app, [library.name], names=[(library.name, name)], with_recurrences=True
    )
    versions = numbered_versions(
        app.state.events(kinds=VERSION_KINDS, skill=name, library=library.name)
    )
    return {
        "uses": int(record.get("use_count", 0) or 0),
        "views": int(record.get("view_count", 0) or 0),
        "created_at": record.get("created_at"),
        "last_used_at": record.get("last_used_at"),
        "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
        "sessions": [{"session": s, "uses": n, "last_at": at} for s, n, at in sessions],
        "uses_by_day": uses_by_day(record),
        "versions": versions,
        "current": current_version(versions, on_disk),
        "outcome": measured[0].row() if measured else None,
        "recurrences": recurrence_rows(app, measured[0]) if measured else [],
    }


def effect_records(
    app: App,
    libraries: list[str] | None = None,
    *,
    names: list[tuple[str, str]] | None = None,
    with_recurrences: bool = False,
) -> list[SkillEffect]:
    """Each learned skill's effect (`skilld effect`), in `libraries` or in every library."""
    from skilld.effect.report import effect_records as records_of

    if libraries is None:
        libraries = [library.name for library in app.all_libraries()]
    return records_of(
        app.state.conn,
        libraries,
        min_exposures=app.config.effect.min_exposures,
        names=names,
        with_recurrences=with_recurrences,
    )


def effect_rows(app: App, library: str | None = None) -> list[dict[str, Any]]:
    """`skilld effect --json` and `/api/effect`: one row per learned skill of `library`
    (`--library`), or of every library."""
    if library is not None:
        chosen = [app.select(library).name]
    else:
        chosen = [each.name for each in app.all_libraries()]
    return _measured(app, chosen).rows


def _measured(app: App, libraries: list[str], *, windowed: bool = False) -> Kept:
    """Each learned skill's row and last exposure (`effect.report.Kept`): the daemon's last
    measurement while it holds, else measured now (with `windowed`, only the skills learned
    from a window: those with something to measure)."""
    from skilld.effect.report import Kept, kept_measurement, windowed_skills

    kept = kept_measurement(
        app.state.conn, libraries, min_exposures=app.config.effect.min_exposures
    )
    if kept is not None:
        return kept
    names = windowed_skills(app.state.conn, libraries) if windowed else None
    records = effect_records(app, libraries, names=names) if names != [] else []
    return Kept([r.row() for r in records], [r.measured.last_exposure for r in records])


def recurrence_rows(app: App, record: SkillEffect) -> list[dict[str, Any]]:
    """Where a learned skill's failure came back (oldest first), each with the id of the
    `failure_recurred` event that recorded it (None until the daemon has)."""
    recorded = {
        (event.session, event.detail.get("signature")): event.id
        for event in app.state.events(
            kinds=("failure_recurred",), skill=record.name, library=record.library
        )
    }
    return [
        {
            "signature": r.signature,
            "session": r.session,
            "started": r.first_ts,
            "loaded": r.loaded,
            "event": recorded.get((r.session, r.signature)),
        }
        for r in record.recurrences
    ]


def effect_week(app: App, days: int = 7) -> dict[str, Any]:
    """The overview's learning of the last `days` days: skills created and updated, failures
    that stopped recurring (a skill's failure, seen before it, not again in the sessions
    since), and recurring failures no skill covers that failed again."""
    from skilld.effect.report import has_stopped, row_counts, uncovered_recurring
    from skilld.effect.verdict import pool
    from skilld.state import utc_now_iso

    since = utc_now_iso(time.time() - days * 86400)
    names = [lib.name for lib in app.all_libraries()]
    # The week pools and lists only skills learned from a failure: from a window.
    measured = _measured(app, names, windowed=True)
    learned = app.state.count_kinds(("created", "updated"), since=since)
    figure = pool(row_counts(row) for row in measured.rows)
    return {
        "since": since,
        "created": learned["created"],
        "updated": learned["updated"],
        "stopped": [
            row
            for row, last in zip(measured.rows, measured.last_exposures, strict=True)
            if has_stopped(row, last, since=since)
        ],
        "uncovered": uncovered_recurring(
            app.state.conn,
            names,
            since=since,
            covered={f["signature"] for row in measured.rows for f in row["source_failures"]},
        ),
        "before_per_100": figure.before_per_100,
        "after_per_100": figure.after_per_100,
    }


def learned_on_text(git: Mapping[str, Any]) -> str:
    """`learned on <repository>@<branch> (<short commit>)`, `?` for what is unknown."""
    commit = f" ({git['commit'][:7]})" if git["commit"] else ""
    return f"learned on {git['repository'] or '?'}@{git['branch'] or '?'}{commit}"


def skill_report(
    app: App,
    name: str,
    library: str | None = None,
    *,
    record: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`skills show --json`: the file, its owner and its effect (`record`: as for `effect`).
    Raises Failure for a skill that is missing or broken."""
    chosen = app.select(library, skill=name)
    entry = chosen.get(name)
    if entry is None:
        raise Failure(f"no skill named {name} in library {chosen.name}")
    if entry.error:
        raise Failure(f"{entry.name} is broken: {entry.error}")
    return {
        "name": entry.name,
        "library": chosen.name,
        "owner": entry.owner,
        "path": str(entry.path),
        "text": entry.text(),
        "effect": effect(app, chosen, entry.name, record=record, on_disk=entry.sha256),
    }


def tool_skill_rows(library: Library) -> list[dict[str, Any]]:
    """The MCP server's `skill_list`: the live skills of one library, with descriptions."""
    from skilld.skills.usage import report_row

    records = library.usage_records()
    skills = []
    for entry in library.discover():
        row = report_row(entry.name, records.get(entry.name) or {})
        latest = row["latest_activity_at"]
        skills.append(
            {
                "name": entry.name,
                "owner": entry.owner,
                "managed": entry.owner == "managed",
                "state": row["state"],
                "pinned": row["pinned"],
                "description": entry.doc.description if entry.doc else None,
                "use_count": row["use_count"],
                "view_count": row["view_count"],
                "patch_count": row["patch_count"],
                "last_activity_at": latest.isoformat(timespec="seconds") if latest else None,
                "path": str(entry.path),
                "broken": entry.error,
            }
        )
    return skills


# -- status ----------------------------------------------------------------------------------


def library_status(app: App) -> list[dict[str, Any]]:
    """Each library's managed skills against its cap, and the proposals kept for it."""
    kept = app.state.proposal_counts()
    rows = []
    for library in app.all_libraries():
        waiting = kept.get(library.name, {})
        rows.append(
            {
                "name": library.name,
                "dir": str(library.root),
                "dialect": library.dialect,
                "managed": len(library.managed_names()),
                "max_managed": library.max_managed,
                "proposals_at_cap": waiting.get("cap", 0),
                "proposals_failed": waiting.get("failed", 0),
                "proposals_waiting": sum(waiting.values()),
            }
        )
    return rows


def status_report(app: App) -> dict[str, Any]:
    """`status --json`: the daemon's last tick and heartbeat, the backlog, the libraries, team
    sync, the LLM's health and the recent errors."""
    from skilld.evolve.backlog import backlog
    from skilld.evolve.review import ReviewQueue
    from skilld.team import sync_status

    state = app.state
    now = time.time()
    heartbeat = state.get_meta("heartbeat")
    daemon = state.get_meta("daemon") or {}
    interval = daemon.get("interval", app.config.evolve.interval_seconds)
    stats = state.session_stats()
    libraries = library_status(app)
    return {
        "last_tick": state.get_meta("last_tick"),
        "heartbeat_age_seconds": round(now - heartbeat, 1) if heartbeat else None,
        "interval_seconds": interval,
        "daemon_pid": daemon.get("pid"),
        "sessions_tracked": stats["tracked"],
        "windows_deferred": stats["deferred"],
        "backlog": backlog(app),
        "libraries": libraries,
        "skills_managed": sum(row["managed"] for row in libraries),
        "max_managed": sum(row["max_managed"] for row in libraries),
        "proposals_waiting": sum(row["proposals_waiting"] for row in libraries),
        "pending_review": len(ReviewQueue(app.config.state.dir / "pending").staged()),
        "sync": sync_status(app),
        "llm": state.get_meta("llm_health"),
        "malformed_lines_skipped": state.get_meta("skipped_lines_total", 0),
        "source_errors": state.get_meta("source_errors", []),
        "source_errors_total": state.get_meta("source_errors_total", 0),
        "recent_errors": [
            e.as_dict() for e in state.events(kinds=("error", "usage_corrupt"), limit=3)
        ],
    }


#: A backlog that needs more than this many hours at the spend cap is stuck: it will not clear
#: on its own soon enough to matter.
STUCK_BACKLOG_HOURS = 24


class Problem(NamedTuple):
    """Something `status --check` fails on, in words, and what it concerns: "daemon",
    "sync", "sources", "llm" or "backlog"."""

    kind: str
    text: str


def status_problems(report: Mapping[str, Any]) -> list[Problem]:
    """What `status --check` fails on (and the panel's overview shows first), from a
    `status_report`: no daemon running, a team library that cannot sync, source errors in the
    last tick, an LLM outage (the circuit open), and a backlog stuck behind the spend cap."""
    problems = [
        Problem("sync", f"sync {row['library']}: {finding}")
        for row in report["sync"]
        for finding in row["findings"]
    ]
    if daemon_stale(report):
        problems.append(
            Problem("daemon", "no daemon is running (no heartbeat within three intervals)")
        )
    errors = report["source_errors"]
    if errors:
        total = report["source_errors_total"] or len(errors)
        problems.append(
            Problem(
                "sources",
                f"{total} source error{'s' if total != 1 else ''} in the last tick: {errors[0]}",
            )
        )
    llm = report["llm"] or {}
    if llm.get("circuit") == "open":
        last = (llm.get("last_error") or {}).get("message") or "no answer"
        problems.append(Problem("llm", f"LLM outage: calls are paused (last error: {last})"))
    hours = report["backlog"].get("min_hours_at_spend_cap")
    if hours is not None and hours > STUCK_BACKLOG_HOURS:
        problems.append(
            Problem(
                "backlog",
                f"backlog stuck: {report['backlog']['windows']} windows need at least"
                f" {hours:.0f} h at {report['backlog']['max_calls_per_hour']} calls/hour"
                " (raise llm.max_calls_per_hour or narrow the backfill)",
            )
        )
    return problems


def outcome_counts_text(outcomes: Mapping[str, Any] | None) -> str:
    """A tick's outcome counts in words, the most frequent first: `3 created, 1 skipped`, or
    `none`."""
    counts = [
        (count, str(kind))
        for kind, count in (outcomes or {}).items()
        if isinstance(count, int) and not isinstance(count, bool) and count > 0
    ]
    counts.sort(key=lambda item: (-item[0], item[1]))
    return ", ".join(f"{count} {kind}" for count, kind in counts) or "none"


def daemon_stale(report: Mapping[str, Any]) -> bool:
    """Whether `report` shows no live `skilld run`: no heartbeat within three intervals, or its
    process gone (`skilld once` beats the heart too)."""
    from skilld.state import process_alive

    age = report["heartbeat_age_seconds"]
    return (
        age is None
        or age > 3 * report["interval_seconds"]
        or not process_alive(report["daemon_pid"])
    )


def llm_daily(app: App) -> list[dict[str, Any]]:
    """LLM calls and tokens per UTC day for the last 30 days, oldest first (0 where none)."""
    from datetime import UTC, datetime, timedelta

    from skilld.evolve.report import DAILY_SPEND_DAYS, DAILY_SPEND_KEY

    recorded = app.state.get_meta(DAILY_SPEND_KEY, {})
    today = datetime.now(UTC).date()
    days = [(today - timedelta(days=n)).isoformat() for n in range(DAILY_SPEND_DAYS - 1, -1, -1)]
    return [
        {
            "day": day,
            "calls": int((recorded.get(day) or {}).get("calls", 0)),
            "prompt_tokens": int((recorded.get(day) or {}).get("prompt_tokens", 0)),
            "completion_tokens": int((recorded.get(day) or {}).get("completion_tokens", 0)),
        }
        for day in days
    ]


# -- failures ------------------------------------------------------------------------------


def failure_report(
    app: App, *, since: str | None = None, repository: str | None = None, recurring: bool = False
) -> list[dict[str, Any]]:
    """`skilld failures --json` and `/api/failures`: one entry per failure signature (DESIGN.md
    §13). Raises UsageError for a bad `since`."""
    from skilld.effect.report import covering_skills
    from skilld.effect.store import failure_rows

    conn = app.state.conn
    return failure_rows(
        conn,
        since=since_timestamp(since),
        repository=repository or None,
        recurring=recurring,
        covered=covering_skills(conn, None),
    )


# -- events ----------------------------------------------------------------------------------


def since_timestamp(since: str | None) -> str | None:
    """The ISO time `since` (e.g. "30m", "7d") before now. Raises UsageError naming it."""
    from skilld.state import utc_now_iso

    if not since:
        return None
    try:
        return utc_now_iso(time.time() - parse_duration(since))
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from None


def count_option(value: str | int | None, name: str) -> int | None:
    """A count a query takes (`events --limit`, the API's `limit`, `offset`, `before`): a whole
    number, 0 or more; None when absent. Raises UsageError naming `name`: the CLI and the API
    refuse the same values with the same words."""
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{name}: not a whole number: {value!r}") from None
    if number < 0:
        raise UsageError(f"{name}: must be 0 or more, not {number}")
    return number


def known_kinds(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """`kinds`, each an event kind the log records. Raises UsageError naming the others (a
    misspelt kind would otherwise match nothing, silently)."""
    from skilld.state import EVENT_KINDS

    unknown = [kind for kind in kinds if kind not in EVENT_KINDS]
    if unknown:
        raise UsageError(
            f"--kind: no event kind {', '.join(map(repr, unknown))}"
            f" (kinds: {', '.join(sorted(EVENT_KINDS))})"
        )
    return kinds


def event_rows(
    app: App,
    *,
    kinds: tuple[str, ...] = (),
    skill: str | None = None,
    library: str | None = None,
    since: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """`events --json`, oldest first: the events matching the filters (`since` as
    `since_timestamp` reads it), the newest `limit` of them. Raises UsageError for an unknown
    kind, a bad `since` or a negative `limit`."""
    limit = count_option(limit, "--limit")
    kinds = known_kinds(kinds)
    events = app.state.events(
        kinds=kinds, skill=skill, library=library, since=since_timestamp(since), limit=limit
    )
    return [event.as_dict() for event in events]


# -- review ----------------------------------------------------------------------------------


def review_items(app: App) -> list[dict[str, Any]]:
    """`review list --json`: every staged proposal, by library then name."""
    from skilld.evolve.review import ReviewQueue

    queue = ReviewQueue(app.config.state.dir / "pending")
    return [item._asdict() for _, item in queue.staged()]


def event_page(
    app: App,
    *,
    kinds: tuple[str, ...] = (),
    skill: str | None = None,
    library: str | None = None,
    since: str | None = None,
    session: str | None = None,
    before: int | None = None,
    size: int = 50,
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the event log, newest first: the `size` events before the event `before`
    (else the newest), and the id to pass as `before` for the next page (None: no older
    events); `session`: only that session's. One query with a LIMIT, however long the log
    is."""
    events = app.state.events(
        kinds=known_kinds(kinds),
        skill=skill,
        library=library,
        since=since_timestamp(since),
        limit=size + 1,
        before_id=before,
        session=session,
    )
    newest_first = [event.as_dict() for event in reversed(events)]
    older = newest_first[size - 1]["id"] if size and len(newest_first) > size else None
    return newest_first[:size], older


# -- curator ---------------------------------------------------------------------------------

#: The events of the curator's moves, and of a restore (which undoes one).
CURATOR_KINDS = ("stale", "reactivated", "archived", "merged", "restored")


def curator_report(app: App, *, runs: int = 10) -> dict[str, Any]:
    """The curator's last runs and what each moved, what its next pass will move and when,
    and every archived skill (each restorable)."""
    from datetime import timedelta

    from skilld.curator.passes import read_last_run, run_lifecycle
    from skilld.curator.schedule import utc_now

    curator = app.config.curator
    last_run = read_last_run(app)
    now = utc_now()
    next_run = last_run + timedelta(hours=curator.interval_hours) if last_run else None
    at = max(next_run, now) if next_run else now
    moved: dict[str, list[dict[str, Any]]] = {}
    for event in reversed(app.state.events(kinds=CURATOR_KINDS, limit=500)):
        if event.source == "curator" and (event.ts in moved or len(moved) < runs):
            moved.setdefault(event.ts, []).append(event.as_dict())
    upcoming = []
    archived = []
    for library in app.all_libraries():
        plan = run_lifecycle(app, library, now=at, dry_run=True)
        upcoming += [
            {
                "library": library.name,
                "name": t.name,
                "kind": t.kind,
                "from": t.from_state,
                "to": t.to_state,
                "reason": t.reason,
            }
            for t in plan.transitions
        ]
        archived += [
            {"library": library.name, "name": name, "path": str(path)}
            for name, path in sorted(library.archived().items())
        ]
    return {
        "enabled": curator.enabled,
        "interval_hours": curator.interval_hours,
        "stale_after_days": curator.stale_after_days,
        "archive_after_days": curator.archive_after_days,
        "last_run": last_run.isoformat(timespec="seconds") if last_run else None,
        "next_run": next_run.isoformat(timespec="seconds") if next_run else None,
        "runs": [{"at": ts, "moves": moves} for ts, moves in moved.items()],
        "upcoming": upcoming,
        "archived": archived,
    }


# -- the week --------------------------------------------------------------------------------

#: What the overview calls learned: a skill a session (or a person) created or changed.
LEARNED_KINDS = ("created", "updated")


def week_report(app: App, *, days: int = 7, limit: int = 20) -> dict[str, Any]:
    """What happened over the last `days` days, newest first: the skills created and updated
    (one row per skill: its latest change, its description, the session, repository and branch
    it came from), the proposals waiting for a person, and what the curator moved. Each list
    holds at most `limit` rows; `more` says the learned list was cut there."""
    from skilld.gitinfo import from_json

    since = since_timestamp(f"{days}d")
    libraries = {library.name: library for library in app.all_libraries()}
    learned: dict[tuple[str, str], dict[str, Any]] = {}
    events = app.state.events(kinds=LEARNED_KINDS, since=since, limit=limit * 5)
    for event in reversed(events):
        key = (event.library or "", event.skill or "")
        if key in learned or not event.skill or len(learned) == limit:
            continue
        git = from_json(event.detail.get("git"))
        library = libraries.get(event.library or "")
        entry = library.get(event.skill) if library is not None else None
        description = entry.doc.description if entry is not None and entry.doc else None
        learned[key] = {
            "name": event.skill,
            "library": event.library,
            "kind": event.kind,
            "at": event.ts,
            "session": event.session,
            "source": event.source,
            "repository": git.repository if git is not None else None,
            "branch": git.branch if git is not None else None,
            "description": one_line(description),
            "exists": entry is not None,
        }
    moved = [
        event.as_dict()
        for event in reversed(app.state.events(kinds=CURATOR_KINDS, since=since, limit=limit))
        if event.source == "curator"
    ]
    return {
        "days": days,
        "learned": list(learned.values()),
        "more": len(learned) == limit,
        "review": review_items(app),
        "kept": len(app.state.kept_proposals()),
        "curator": moved,
    }


def one_line(text: str | None, width: int = 140) -> str | None:
    """`text`'s first line, cut at a word to `width` characters (an ellipsis says so)."""
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= width:
        return line
    return line[:width].rsplit(" ", 1)[0].rstrip(",;:") + "…"
