"""When the curator runs: inside `skilld run` every `curator.interval_hours`, and on demand.

The first pass after a fresh install only starts the clock (`curator_last_run` in state meta):
nothing is archived on day one, when usage records imported from another tool, or created
before skilld tracked anything, would make every skill look ancient.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from skilld.app import App
from skilld.clock import utc_now
from skilld.curator.passes import LifecycleReport, read_last_run, run_lifecycle, write_last_run
from skilld.fsutil import PRIVATE_FILE_MODE, atomic_write, private_dir
from skilld.log import get_logger
from skilld.skills.library import Library

if TYPE_CHECKING:
    from skilld.curator.consolidate import ConsolidationReport
    from skilld.llm import LLMClient

Clock = Callable[[], datetime]
Decision = Literal["defer", "due", "wait"]


def schedule_decision(last_run: datetime | None, now: datetime, interval: timedelta) -> Decision:
    """`defer` on the first pass ever, `due` once an interval has passed, else `wait`."""
    if last_run is None:
        return "defer"
    return "due" if now - last_run >= interval else "wait"


@dataclass
class CuratorRun:
    started_at: datetime
    dry_run: bool
    #: Set on the first pass ever: when the first real one will run.
    deferred_until: datetime | None = None
    #: One report per library, in the order the libraries were curated.
    lifecycle: list[LifecycleReport] = field(default_factory=list)
    consolidation: list[ConsolidationReport] = field(default_factory=list)
    report_path: Path | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "dry_run": self.dry_run,
            "deferred_until": (
                self.deferred_until.isoformat(timespec="seconds") if self.deferred_until else None
            ),
            "lifecycle": [report.as_dict() for report in self.lifecycle],
            "consolidation": [report.as_dict() for report in self.consolidation],
            "report": str(self.report_path) if self.report_path else None,
        }


async def curate(
    app: App,
    *,
    now: datetime,
    dry_run: bool = False,
    llm: LLMClient | None = None,
    scheduled: bool = False,
    libraries: Sequence[Library] | None = None,
) -> CuratorRun:
    """One curator run over each library: the lifecycle pass, then consolidation when an `llm`
    is given.

    A dry run reports what would happen and changes nothing, not even the schedule. The
    daemon's first `scheduled` pass only starts the clock (installing skilld never archives a
    library at once); a person's run always acts, exactly as its dry run said.
    """
    run = CuratorRun(now, dry_run)
    interval = timedelta(hours=app.config.curator.interval_hours)
    first = schedule_decision(read_last_run(app), now, interval) == "defer"
    if scheduled and first and not dry_run:
        write_last_run(app, now)
        run.deferred_until = now + interval
        return run
    if not dry_run:
        # Claimed before the pass: a pass that keeps failing costs one error per interval,
        # not one per daemon tick.
        write_last_run(app, now)
    if llm is not None:
        from skilld.curator.consolidate import consolidate  # a pass a day: not at every start
    for library in app.all_libraries() if libraries is None else libraries:
        lifecycle = run_lifecycle(app, library, now=now, dry_run=dry_run)
        run.lifecycle.append(lifecycle)
        if llm is not None and lifecycle.refused is None:
            run.consolidation.append(await consolidate(app, library, llm, dry_run=dry_run))
    if llm is not None and not dry_run:
        write_report(app.config.state.dir / "reports", run)
    return run


def write_report(folder: Path, run: CuratorRun) -> Path:
    """`<state_dir>/reports/curate-<UTC stamp>.json`, never overwriting an earlier one; the
    report names its own path (`run.report_path` is set before it is written)."""
    private_dir(folder)
    stamp = run.started_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = folder / f"curate-{stamp}.json"
    suffix = 1
    while os.path.lexists(path):
        path = folder / f"curate-{stamp}-{suffix}.json"
        suffix += 1
    run.report_path = path
    from skilld.redact import redact_strings  # the report quotes the model's rationale

    report = redact_strings(run.as_dict())
    text = json.dumps(report, ensure_ascii=False, indent=2, default=str) + "\n"
    atomic_write(path, text, mode=PRIVATE_FILE_MODE)
    return path


class ScheduledCurator:
    """The daemon's hook: runs `curate` when an interval has passed since the last run."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self.clock = clock
        self.log = get_logger("skilld.curator")

    async def __call__(self, app: App, llm: LLMClient) -> None:
        now = self.clock()
        curator = app.config.curator  # the daemon reloads its config on SIGHUP
        if not curator.enabled:
            return
        interval = timedelta(hours=curator.interval_hours)
        if schedule_decision(read_last_run(app), now, interval) == "wait":
            return
        run = await curate(app, now=now, llm=llm if curator.consolidate else None, scheduled=True)
        if run.deferred_until is not None:
            self.log.info("curator_deferred", until=run.deferred_until.isoformat())
            return
        self.log.info(
            "curator_pass",
            libraries=len(run.lifecycle),
            transitions=sum(len(report.transitions) for report in run.lifecycle),
            failures=sum(len(report.failures) for report in run.lifecycle),
            consolidation=[report.status for report in run.consolidation],
        )
