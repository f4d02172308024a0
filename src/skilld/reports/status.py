"""The daemon's health (`status`, the panel's overview): its last tick and heartbeat, the
backlog, each library against its cap, team sync, the LLM, what `status --check` fails on; and
the proposals waiting for a person (`review list`)."""

# Annotations are not postponed here: a NamedTuple's string annotations are compiled (typing's
# ForwardRef), and the first `compile()` in a process builds Python's AST types, a millisecond
# of a one-shot command's start (tests/test_startup.py checks that none compiles).
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from skilld.app import App


def library_status(app: "App") -> list[dict[str, Any]]:
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


def status_report(app: "App") -> dict[str, Any]:
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
        "llm_tokens": tokens_today(app, now),
        "malformed_lines_skipped": state.get_meta("skipped_lines_total", 0),
        "source_errors": state.get_meta("source_errors", []),
        "source_errors_total": state.get_meta("source_errors_total", 0),
        "recent_errors": [
            e.as_dict() for e in state.events(kinds=("error", "usage_corrupt"), limit=3)
        ],
    }


def format_line(llm: Mapping[str, Any]) -> str:
    """The `response_format` level the client uses, and whether a reply confirmed it."""
    level = llm.get("response_format")
    if level is None:
        return "not negotiated yet (no call made)"
    confirmed = "confirmed by a reply" if llm.get("response_format_confirmed") else "not confirmed"
    return f"response_format {level}, {confirmed}"


def context_line(llm: Mapping[str, Any]) -> str:
    """The model's context windows are fitted to, and where it was learned."""
    context = llm.get("context_tokens")
    if not context:
        return "unknown (windows are cut at evolve.window_max_chars alone)"
    source = llm.get("context_source") or "config"
    return f"{context} tokens (from {source}); windows are split to fit it"


def tokens_today(app: "App", now: float) -> dict[str, Any]:
    """The tokens the LLM reported today (UTC) against `llm.max_tokens_per_day` (0: none)."""
    from datetime import UTC, datetime

    # `skilld.evolve.report.TOKENS_KEY`, named here: that module loads the LLM client.
    record = app.state.get_meta("llm_tokens_today", None) or {}
    today = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
    tokens = record.get("tokens", 0) if record.get("day") == today else 0
    cap = app.config.llm.max_tokens_per_day
    return {"today": tokens, "max_tokens_per_day": cap, "at_cap": bool(cap) and tokens >= cap}


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
    from skilld.state.lock import process_alive

    age = report["heartbeat_age_seconds"]
    return (
        age is None
        or age > 3 * report["interval_seconds"]
        or not process_alive(report["daemon_pid"])
    )


def llm_daily(app: "App") -> list[dict[str, Any]]:
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


def review_items(app: "App") -> list[dict[str, Any]]:
    """`review list --json`: every staged proposal, by library then name."""
    from skilld.evolve.review import ReviewQueue

    queue = ReviewQueue(app.config.state.dir / "pending")
    return [item._asdict() for _, item in queue.staged()]
