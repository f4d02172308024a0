"""The curator's lifecycle pass over 100, 1,000 and 10,000 managed skills, against a baseline.

Run: `python bench/curator.py [--sizes 100,1000,10000] [--dir PATH] [--smoke]`
(`--smoke`: 100 skills, to check that it still runs.)

Each size is built once: N managed skills (rendered skill files plus the provenance rows that
make them skilld's, exactly what `Library.write` records), and a usage sidecar whose last
activity is spread evenly over the past 91 days. Two scenarios are timed on fresh copies:

* `daily`: the steady state. The states already reflect yesterday's pass, so today's pass moves
  the ~1/91 of the skills that crossed 30 days (stale) and the ~1/91 that crossed 90 (archived).
* `catch-up`: the first pass over that library with every record still `active`: about two
  thirds of the skills go stale and one in ninety is archived.

`skilld` is `skilld.curator.passes.run_lifecycle`: one discovery, one read of the sidecar, one
usage transaction. The baseline is the pattern that made a peer's pass quadratic (about 19 s for
400 skills): for every skill it re-reads the whole sidecar from disk, decides, and applies each
change on its own (one sidecar rewrite per state change). Decisions and library calls are the
same ones, so the difference is the access pattern alone. A baseline run that would take more
than `--baseline-budget` seconds is timed over a sample and extrapolated (marked `~`): every
k-th skill of the pass, so the sample holds the pass's own mix of skills that move and skills
that stay (the library's last uses are spread evenly over its names).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from skilld.app import App
from skilld.config import build_config
from skilld.curator._lifecycle import LiveSkill, Thresholds, decide
from skilld.curator.passes import CURATOR, run_lifecycle
from skilld.digest import sha256_hex
from skilld.log import configure_logging
from skilld.routing import resolve
from skilld.skills.document import SkillDoc, render_skill
from skilld.skills.library import Library
from skilld.skills.usage import USAGE_FILE, UsageStore, format_timestamp, new_record
from skilld.state import StateDB

LIBRARY = "default"

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SPREAD_DAYS = 91
BODY = "1. Run `make test`.\n2. Read the first failure.\n3. Fix it and run again.\n"


def build(root: Path, size: int, *, steady: bool) -> None:
    """N managed skills whose last use is spread evenly over the past `SPREAD_DAYS` days."""
    skills, state_dir = root / "skills", root / "state"
    skills.mkdir(parents=True)
    state = StateDB(state_dir / "state.db")
    stale_before = NOW - timedelta(days=1) - timedelta(days=30)
    with state.transaction():
        records = {}
        for index in range(size):
            name = f"skill-{index:05d}"
            doc = SkillDoc(
                name=name,
                description=f"How to do task {index}.",
                when_to_use="When the task comes up.",
                body=BODY,
                metadata={"managed-by": "skilld", "version": "1"},
            )
            data = render_skill(doc, "dsh").encode()
            folder = skills / name
            folder.mkdir()
            (folder / "SKILL.md").write_bytes(data)
            state.put_provenance(
                LIBRARY, name, path=str(folder / "SKILL.md"), sha256=sha256_hex(data)
            )
            last_used = NOW - timedelta(days=SPREAD_DAYS * (index + 0.5) / size)
            record = new_record(NOW - timedelta(days=365), created_by="agent")
            record.update(use_count=3, last_used_at=format_timestamp(last_used))
            if steady and last_used < stale_before:
                record["state"] = "stale"
            records[name] = record
    state.close()
    usage = UsageStore(skills)
    with usage.transaction() as current:
        current.update(records)
    usage.close()


def open_app(root: Path) -> App:
    config = build_config(
        {"skills": {"dir": str(root / "skills")}, "state": {"dir": str(root / "state")}}
    )
    state = StateDB(config.state.dir / "state.db")
    routing = resolve(config)
    library = Library(
        routing.libraries[LIBRARY],
        state,
        UsageStore(config.skills.dir, clock=lambda: NOW),
        history_dir=config.state.dir / "history" / f"@{LIBRARY}",
        locks_dir=config.state.dir / "locks",
        clock=NOW.timestamp,
    )
    return App(config, routing, state, {LIBRARY: library})


def skilld_pass(app: App) -> int:
    return len(run_lifecycle(app, app.library, now=NOW).transitions)


def baseline_pass(app: App, *, every: int = 1) -> int:
    """The peer's pattern: the whole sidecar re-read for every skill, each change on its own.
    `every` k-th skill only: a sample with the pass's own mix."""
    thresholds = Thresholds.from_days(30, 90)
    sidecar = app.library.root / USAGE_FILE
    managed = [e for e in app.library.discover(parse=False) if e.owner == "managed"]
    moved = 0
    for entry in managed[::every]:
        records = json.loads(sidecar.read_bytes())
        transition = decide(
            LiveSkill(entry.name, entry.owner, records.get(entry.name)), NOW, thresholds
        )
        if transition is None:
            continue
        moved += 1
        if transition.kind == "archived":
            app.library.archive(entry.name, CURATOR, reason=transition.reason)
        else:
            app.library.usage.set_state(entry.name, transition.to_state)
            app.state.add_event(
                transition.kind, library=LIBRARY, skill=entry.name, source=CURATOR.source
            )
    return moved


def timed(template: Path, work: Path, run: Callable[[App], int]) -> tuple[float, int]:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(template, work, symlinks=True)
    app = open_app(work)
    try:
        start = time.perf_counter()
        moved = run(app)
        return time.perf_counter() - start, moved
    finally:
        app.library.usage.close()
        app.state.close()


def measure_baseline(
    template: Path, work: Path, size: int, budget: float
) -> tuple[float, int | None]:
    """Seconds for the full baseline pass and the skills it moved, or an extrapolation from a
    sample (moved: None): every k-th skill, so the sample moves the same share of skills as the
    pass."""
    every = max(1, size // 200)
    seconds, moved = timed(template, work, lambda app: baseline_pass(app, every=every))
    projected = seconds * every
    if every == 1 or projected <= budget:
        if every > 1:
            seconds, moved = timed(template, work, baseline_pass)
        return seconds, moved
    return projected, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--dir", help="where to build (default: a temp dir, removed after)")
    parser.add_argument("--baseline-budget", type=float, default=120.0)
    parser.add_argument("--smoke", action="store_true", help="100 skills only")
    args = parser.parse_args()
    configure_logging("json", "warning")  # event lines on stderr would time the terminal
    sizes = [100] if args.smoke else [int(s) for s in args.sizes.split(",")]
    disagreements = 0
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="skilld-bench-curator-"))
    print(f"{'scenario':<9} {'skills':>6} {'moved':>6} {'skilld':>9} {'baseline':>10} {'ratio':>7}")
    try:
        for scenario in ("daily", "catch-up"):
            for size in sizes:
                template = base / f"{scenario}-{size}"
                if not template.exists():
                    build(template, size, steady=scenario == "daily")
                work = base / "work"
                ours, moved = timed(template, work, skilld_pass)
                theirs, their_moved = measure_baseline(template, work, size, args.baseline_budget)
                mark = "~" if their_moved is None else " "
                print(
                    f"{scenario:<9} {size:>6} {moved:>6} {ours:>8.2f}s {mark}{theirs:>8.2f}s"
                    f" {theirs / ours:>6.1f}x",
                    flush=True,
                )
                if their_moved is not None and their_moved != moved:
                    print(f"  the baseline moved {their_moved} skills, skilld {moved}")
                    disagreements += 1
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print("~ = extrapolated from every k-th skill of the pass (~200 skills; over the budget)")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
