"""What the transcripts say of the skills (DESIGN.md §13): each learned skill's effect
(`skilld effect`), the week's learning on the overview, and the failures (`skilld failures`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from skilld.errors import NotFound
from skilld.reports.events import since_timestamp

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.effect.report import Kept, SkillEffect


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
    app.backfill_targets()
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
    from skilld.effect.report import Kept, windowed_skills

    kept = kept_measurement_of(app, libraries)
    if kept is not None:
        return kept
    names = windowed_skills(app.state.conn, libraries) if windowed else None
    records = effect_records(app, libraries, names=names) if names != [] else []
    return Kept([r.row() for r in records], [r.measured.last_exposure for r in records])


def skill_verdicts(
    app: App, names: list[tuple[str, str]] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """(library, name) -> `{"verdict", "since"}` of each learned skill (of `names`, else of
    every library): the daemon's last measurement while it holds, else those skills measured
    now. What the panel's tables show beside a failure or a skill."""
    libraries = [library.name for library in app.all_libraries()]
    if names is not None:
        libraries = sorted({library for library, _ in names} & set(libraries))
        if not libraries or not names:
            return {}
    kept = kept_measurement_of(app, libraries)
    if kept is not None:
        rows = kept.rows
    else:
        rows = [record.row() for record in effect_records(app, libraries, names=names)]
    wanted = None if names is None else set(names)
    return {
        (row["library"], row["name"]): {"verdict": row["verdict"], "since": row["since"]}
        for row in rows
        if wanted is None or (row["library"], row["name"]) in wanted
    }


def kept_measurement_of(app: App, libraries: list[str]) -> Kept | None:
    """The daemon's last measurement of `libraries`, while nothing it read has changed (the
    versions written before targets were recorded worked out first: that changes it)."""
    from skilld.effect.report import kept_measurement

    app.backfill_targets()
    return kept_measurement(
        app.state.conn, libraries, min_exposures=app.config.effect.min_exposures
    )


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
    that stopped recurring (a `helps` skill's failure, seen before it, not again in the
    sessions since), those still recurring though a skill targets them (any other verdict,
    failed again since the skill), and recurring failures no skill covers that failed again."""
    from skilld.effect.report import has_stopped, instant, row_counts, uncovered_recurring
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
        # Only a decided `helps` is a failure a skill ended; every other skill whose failure
        # came back after it is still recurring, whatever its verdict says of why.
        "stopped": [
            row
            for row, last in zip(measured.rows, measured.last_exposures, strict=True)
            if row["verdict"] == "helps" and has_stopped(row, last, since=since)
        ],
        "recurring": [
            row
            for row, last in zip(measured.rows, measured.last_exposures, strict=True)
            if row["verdict"] != "helps"
            and row["after"]["failures"] > 0
            and last is not None
            and last >= (instant(since) or since)
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


def failure_report(
    app: App, *, since: str | None = None, repository: str | None = None, recurring: bool = False
) -> list[dict[str, Any]]:
    """`skilld failures --json` and `/api/failures`: one entry per failure signature (DESIGN.md
    §13). Raises UsageError for a bad `since`."""
    from skilld.effect.report import covering_skills
    from skilld.effect.store import failure_rows

    conn = app.state.conn
    covered = covering_skills(conn, None)
    return failure_rows(
        conn,
        since=since_timestamp(since),
        repository=repository or None,
        recurring=recurring,
        covered=covered,
        verdicts=_verdicts(app, sorted({key for keys in covered.values() for key in keys})),
    )


def _verdicts(app: App, names: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(library, name) -> the verdict of each of `names` that skilld measures."""
    if not names:
        return {}
    return {key: value["verdict"] for key, value in skill_verdicts(app, names).items()}


def failure_detail(app: App, key: str) -> dict[str, Any]:
    """`skilld failures show ID|SIGNATURE --json` and `/api/failures/{id}`: the failure's row
    of `failure_report` and its occurrences, oldest first. Raises NotFound for an id or
    signature no failure has."""
    from skilld.effect.extract import COUNTED_CLASSES
    from skilld.effect.report import skills_covering
    from skilld.effect.store import failure_occurrences

    conn = app.state.conn
    detail = failure_occurrences(conn, key)
    if detail is None:
        raise NotFound(f"no failure with id or signature {key!r} (see `skilld failures`)")
    sessions = {
        occurrence["session"]
        for occurrence in detail["occurrences"]
        if occurrence["class"] in COUNTED_CLASSES
    }
    covering = skills_covering(conn, detail["signature"], sessions)
    verdicts = _verdicts(app, covering)
    detail["skills"] = [
        {"library": library, "name": name, "verdict": verdicts.get((library, name))}
        for library, name in covering
    ]
    return detail
