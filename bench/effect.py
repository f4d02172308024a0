"""`skilld effect --json` against `skilld skills list --json` over the same library, and
`skilld failures show` of a failure that happened `--hot` times.

Run: `python bench/effect.py [--skills 10000] [--failures 1000000] [--hot 10000] [--runs 3]
[--keep DIR]`,
or `python bench/effect.py --smoke` (100 skills, 10,000 failures, one run: seconds). With
`--keep DIR` the library is built once (minutes) and timed again by each later run.

The library holds `--skills` managed skills (rendered files, provenance, a usage record each,
and the `created` event naming the window each was learned from). state.db holds what ticks
record (`skilld.effect.store`'s tables) for `--failures` failing tool calls: sessions of one
agent over a year in 50 repositories, each running 16 of 1,000 command heads and failing 8
times (real, hook, test, benign ...), and loading two skills. Each skill was learned from one
session's window that showed its signature fail and resolve; the skills' signatures are among
the failures every session draws, so each skill has exposures and recurrences before and
after it.

The daemon measures every skill after each tick that reads sessions and keeps the rows
(`skilld.effect.watch`), and `skilld effect` prints them while nothing they were measured from
has changed. So the library is measured once as a tick does (timed: what a tick pays), and
then the commands run in this process (`skilld.cli.main`: parser, config, read, JSON printed
to a buffer), taking turns, each the best of `--runs`, so the machine's other load weighs on
every side: `skills list --json`, `effect --json` as the daemon leaves it, and `effect --json`
measuring afresh (the kept rows dropped first: a skill written since the last tick).
Target: effect as the daemon leaves it within 2x of skills list (exits 1 when it is not).

The holdout (DESIGN.md §14) runs at every tick: its block's pass (a fifth of the skills moved
out of sight, each holdout judged) once per block and library, then a check of one meta value
per library at each later tick of the block. Both are timed, and the later tick's measurement
again once a fifth of the skills are in holdout (their rows carry arm counts): the step and
the measurement's growth, against the later tick's measurement before. Target: the holdout
adds at most 10% to a later tick (exits 1 when it adds more).

One more signature failed `--hot` times, spread over the sessions (one in five resolved: the
skills learned in those sessions are read for the ones learned from it): `failures show ID
--json` of it lists every occurrence (target: under 200 ms; exits 1 when it is not), timed beside
`failures --json` (every signature's row).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from skilld import cli as skilld_cli
from skilld.config import EffectConfig
from skilld.digest import sha256_hex
from skilld.effect import failure_id, store, watch
from skilld.effect.extract import ToolRun, tally
from skilld.effect.report import MEASUREMENT_KEY, SkillEffect
from skilld.log import configure_logging
from skilld.skills.document import SkillDoc, render_skill
from skilld.skills.usage import UsageStore, format_timestamp, new_record
from skilld.state import StateDB

LIBRARY = "default"
MIN_EXPOSURES = EffectConfig().min_exposures
SOURCE = "claude-code"
START = datetime(2025, 12, 1, tzinfo=UTC)
COMMANDS = 1000
REPOSITORIES = 50
RUNS_PER_SESSION = 16
FAILURES_PER_SESSION = 8
CLASSES = ("real",) * 6 + ("hook", "test", "benign", "cascade")
BODY = "1. Run `git push -u origin HEAD` on a new branch.\n2. Then push as usual.\n"
HOT_SIGNATURE = "Bash | git push | fatal: The current branch <branch> has no upstream branch."
#: `failures show` of the hot signature answers within this.
SHOW_TARGET_MS = 200
#: The holdout's share of a later tick, at most.
HOLDOUT_TARGET = 0.10


def build(root: Path, skills: int, failures: int, hot: int, seed: int = 7) -> Path:
    """The library, its usage sidecar, state.db and a config naming them; returns the config."""
    rng = random.Random(seed)
    skills_dir, state_dir = root / "skills", root / "state"
    skills_dir.mkdir(parents=True)
    sessions = max(skills, failures // FAILURES_PER_SESSION)
    state = StateDB(state_dir / "state.db")
    conn = state.conn
    session_rows: list[tuple[str, str, str, str, str]] = []
    run_rows: list[tuple[object, ...]] = []
    failure_rows: list[tuple[object, ...]] = []
    load_rows: list[tuple[str, str, str]] = []
    # Each skill's signature belongs to one command; each command has several signatures.
    skill_command = [index % COMMANDS for index in range(skills)]
    by_command: dict[int, list[int]] = {}
    for index, command in enumerate(skill_command):
        by_command.setdefault(command, []).append(index)
    span = 365 * 86400
    for n in range(sessions):
        key = f"{SOURCE}:s{n:07d}"
        started = START + timedelta(seconds=span * n / sessions)
        repository = f"github.com/acme/repo{n % REPOSITORIES}"
        stamp = started.isoformat(timespec="seconds")
        session_rows.append((key, SOURCE, LIBRARY, repository, stamp))
        facts = (SOURCE, repository, stamp)  # what record_read copies onto each row
        commands = rng.sample(range(COMMANDS), RUNS_PER_SESSION)
        for command in commands:
            run_rows.append((key, f"tool{command} run", 3, 1, stamp, *facts))
        for seq, command in enumerate(commands[:FAILURES_PER_SESSION]):
            owners = by_command.get(command)
            if owners and rng.random() < 0.5:
                signature = f"sig-{rng.choice(owners)}"
            else:
                signature = f"noise-{command}-{rng.randrange(20)}"
            failure_rows.append(
                (key, 100 + seq, stamp, "Bash", f"tool{command} run", signature,
                 "error: <path> not found", rng.choice(CLASSES), 1, int(rng.random() < 0.8),
                 *facts)
            )  # fmt: skip
        for _ in range(2):
            load_rows.append((key, LIBRARY, f"skill-{rng.randrange(skills):05d}"))
    for n in range(hot):  # the hot signature, once in each session, round after round
        key, _, _, repository, stamp = session_rows[n % sessions]
        failure_rows.append(
            (key, 1000 + n // sessions, stamp, "Bash", "git push", HOT_SIGNATURE,
             "fatal: The current branch <branch> has no upstream branch.", "real", 128,
             int(n % 5 == 0), SOURCE, repository, stamp)
        )  # fmt: skip
    records: dict[str, dict[str, object]] = {}
    events: list[tuple[str, ...]] = []
    provenance: list[tuple[object, ...]] = []
    for index in range(skills):
        name = f"skill-{index:05d}"
        source = (index * sessions) // skills
        key = f"{SOURCE}:s{source:07d}"
        _, _, _, repository, stamp = session_rows[source]
        learned = START + timedelta(seconds=span * source / sessions + 3600)
        head = f"tool{skill_command[index]} run"
        failure_rows.append(
            (key, 1, stamp, "Bash", head, f"sig-{index}", "fatal: no upstream", "real",
             128, 1, SOURCE, repository, stamp)
        )  # fmt: skip
        run_rows.append((key, head, 1, 1, stamp, SOURCE, repository, stamp))
        doc = SkillDoc(
            name=name,
            description=f"How to push branch {index} the first time.",
            when_to_use="When git push says there is no upstream branch.",
            body=BODY,
            metadata={"managed-by": "skilld", "version": "1"},
        )
        data = render_skill(doc, "dsh").encode()
        folder = skills_dir / name
        folder.mkdir()
        (folder / "SKILL.md").write_bytes(data)
        at = learned.isoformat(timespec="seconds")
        git = {"repository": repository, "branch": "main"}
        provenance.append(
            (LIBRARY, name, str(folder / "SKILL.md"), sha256_hex(data), key, 0, 9, at, at,
             json.dumps(git))
        )  # fmt: skip
        detail = json.dumps(
            {"messages": [0, 9], "git": git, "version": 1, "targets": [f"sig-{index}"]}
        )
        events.append((at, "created", LIBRARY, name, key, SOURCE, "learned", detail))
        record = new_record(learned, created_by="agent")
        record.update(use_count=3, last_used_at=format_timestamp(learned))
        records[name] = record
    with state.transaction():
        conn.executemany(
            "INSERT OR IGNORE INTO effect_sessions VALUES (?, ?, ?, ?, ?)", session_rows
        )
        conn.executemany(
            "INSERT OR IGNORE INTO effect_runs(session, command, ok, failed, first_ts, source,"
            " repository, session_ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            run_rows,
        )
        conn.executemany(
            "INSERT OR IGNORE INTO effect_failures(session, seq, ts, tool, command, signature,"
            " error, class, exit_code, resolved, source, repository, session_ts, failure_id,"
            " call_id, run, line, branch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " ?, ?, ?, 'main')",
            [
                (*row, failure_id(str(row[5])), f"toolu_{index:024d}", f"{row[4]} --verbose",
                 f"{row[6]} (as read)")
                for index, row in enumerate(failure_rows)
            ],
        )  # fmt: skip
        conn.executemany("INSERT OR IGNORE INTO effect_loads VALUES (?, ?, ?)", load_rows)
        conn.executemany(
            "INSERT INTO provenance(library, name, path, sha256, session, first_message,"
            " last_message, created_at, updated_at, git) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            provenance,
        )
        conn.executemany(
            "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            events,
        )
    state.conn.execute("ANALYZE")
    state.close()
    usage = UsageStore(skills_dir)
    with usage.transaction() as current:
        current.update(records)
    usage.close()
    config = root / "config.toml"
    config.write_text(f'[skills]\ndir = "{skills_dir}"\n\n[state]\ndir = "{state_dir}"\n')
    return config


def command(config: Path, *args: str) -> Callable[[], None]:
    line = ["--config", str(config), *args]

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            if skilld_cli.main(line) != 0:
                raise RuntimeError(f"skilld {' '.join(args)} failed")

    return run


def measure_as_a_tick(state_dir: Path) -> float:
    """Measure every skill and keep the rows, as a tick that read sessions does; its ms."""
    state = StateDB(state_dir / "state.db")
    try:
        start = time.perf_counter()
        observation = watch.observe(state, [LIBRARY], min_exposures=MIN_EXPOSURES)
        watch.record(state, observation)
        return 1000 * (time.perf_counter() - start)
    finally:
        state.close()


def measure_a_later_tick(state_dir: Path, seed: int = 11) -> tuple[float, int]:
    """A later tick's measurement: one more session read, which ran as many command heads
    as every session does, measured as the tick measures it (only the skills its writes
    reach); its ms, and how many skills it measured."""
    rng = random.Random(seed)
    state = StateDB(state_dir / "state.db")
    try:
        reach = watch.Reach(store.generation(state.conn))
        stamp = (START + timedelta(days=400)).isoformat(timespec="seconds")
        runs = [
            ToolRun(seq, stamp, "Bash", f"tool{command} run", True)
            for seq, command in enumerate(rng.sample(range(COMMANDS), RUNS_PER_SESSION))
        ]
        facts = store.SessionFacts(
            f"{SOURCE}:later", SOURCE, LIBRARY, "github.com/acme/repo0", stamp
        )
        with state.transaction() as conn:
            reach.record(conn, [store.ReadRecord(facts, tally(runs), [])])
        measured: list[int] = []
        real = watch.effect_records

        def counting(*args: Any, **kwargs: Any) -> list[SkillEffect]:
            records = real(*args, **kwargs)
            measured.append(len(records))
            return records

        watch.effect_records = counting
        start = time.perf_counter()
        try:
            observation = watch.observe(state, [LIBRARY], min_exposures=MIN_EXPOSURES, reach=reach)
            watch.record(state, observation)
        finally:
            watch.effect_records = real
        return 1000 * (time.perf_counter() - start), measured[0]
    finally:
        state.close()


def measure_the_holdout(config: Path, runs: int) -> tuple[float, int, float]:
    """The holdout step as a tick runs it: its block's pass (ms, skills withheld), then the
    best of `runs` later ticks of the same block (ms)."""
    from skilld.app import open_app
    from skilld.config import load_config
    from skilld.curator.holdout import BLOCK_KEY, run_holdout

    now = START + timedelta(days=400)
    with open_app(load_config(config)) as app:
        with app.state.transaction() as conn:  # a kept library: its block's pass runs again
            conn.execute("DELETE FROM meta WHERE key LIKE ?", (f"{BLOCK_KEY}:%",))
        start = time.perf_counter()
        report = run_holdout(app, now)
        block = 1000 * (time.perf_counter() - start)
        later = []
        for _ in range(runs):
            start = time.perf_counter()
            run_holdout(app, now + timedelta(minutes=5))
            later.append(1000 * (time.perf_counter() - start))
    return block, len(report.withheld), min(later)


def unkept(state_dir: Path, run: Callable[[], None]) -> Callable[[], None]:
    """`run` with the daemon's kept measurement dropped first, so it measures afresh."""

    def afresh() -> None:
        conn = sqlite3.connect(state_dir / "state.db")
        with conn:
            conn.execute("DELETE FROM meta WHERE key = ?", (MEASUREMENT_KEY,))
        conn.close()
        run()

    return afresh


def best_ms(commands: list[Callable[[], None]], runs: int) -> list[float]:
    """Each command's best time of `runs`, the commands taking turns (so that a burst of the
    machine's other load weighs on both)."""
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(runs):
        for run, spent in zip(commands, times, strict=True):
            start = time.perf_counter()
            run()
            spent.append(time.perf_counter() - start)
    return [1000 * min(spent) for spent in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--skills", type=int, default=10_000)
    parser.add_argument("--failures", type=int, default=1_000_000)
    parser.add_argument(
        "--hot", type=int, default=10_000, help="occurrences of the failure `show` lists"
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (the best)")
    parser.add_argument("--smoke", action="store_true", help="100 skills, 10,000 failures")
    parser.add_argument("--dir", type=Path, help="where to build (default: a temp dir)")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="build into DIR once and keep it; a later run with the same DIR times it again",
    )
    args = parser.parse_args()
    configure_logging("json", "error")
    skills, failures = (100, 10_000) if args.smoke else (args.skills, args.failures)
    runs = 1 if args.smoke else args.runs
    base = args.keep or Path(tempfile.mkdtemp(prefix="skilld-bench-effect-", dir=args.dir))
    try:
        config = base / "config.toml"
        if not config.exists():
            start = time.perf_counter()
            config = build(base, skills, failures, args.hot)
            spent = time.perf_counter() - start
            print(
                f"built {skills:,} skills, {failures:,} failures (and {args.hot:,} of one)"
                f" in {spent:.1f}s"
            )
        tick = measure_as_a_tick(base / "state")
        later, reached = measure_a_later_tick(base / "state")
        # The holdout's block pass, then the same measurements with a fifth of the skills in
        # holdout: what its rows' holdout objects add to a tick, beside its own step.
        block, withheld, held_step = measure_the_holdout(config, max(runs, 5))
        measure_as_a_tick(base / "state")
        held_later, _ = measure_a_later_tick(base / "state")  # the same session, read again
        added = max(0.0, held_later - later) + held_step
        listing, effect, afresh = best_ms(
            [
                command(config, "skills", "list", "--json"),
                command(config, "effect", "--json"),
                unkept(base / "state", command(config, "effect", "--json")),
            ],
            runs,
        )
        hot = failure_id(HOT_SIGNATURE)
        listed, shown = best_ms(
            [
                command(config, "failures", "--json"),
                command(config, "failures", "show", hot, "--json"),
            ],
            runs,
        )
        ratio = effect / listing
        print(
            f"{'skills':>7} {'failures':>10} {'list ms':>8} {'effect ms':>10} {'ratio':>6}"
            f" {'afresh ms':>10} {'ratio':>6} {'tick ms':>8} {'next tick ms':>13}"
        )
        print(
            f"{skills:>7,} {failures:>10,} {listing:>8.1f} {effect:>10.1f} {ratio:>5.2f}x"
            f" {afresh:>10.1f} {afresh / listing:>5.2f}x {tick:>8.1f}"
            f" {later:>8.1f} ({reached:,} skills)"
        )
        print(
            f"holdout: block pass {block:.1f} ms ({withheld:,} skills withheld); a later tick's"
            f" step {held_step:.2f} ms; the later tick's measurement {held_later:.1f} ms in"
            f" holdout against {later:.1f} ms before: {added / later:.1%} added"
            f" (target: at most {HOLDOUT_TARGET:.0%})"
        )
        print(
            f"failures --json {listed:.1f} ms; failures show {hot} --json"
            f" ({args.hot:,} occurrences) {shown:.1f} ms (target: under {SHOW_TARGET_MS} ms)"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    missed = []
    if ratio >= 2:
        missed.append(f"effect --json took {ratio:.2f}x skills list --json (target: under 2x)")
    if shown >= SHOW_TARGET_MS:
        missed.append(f"failures show took {shown:.1f} ms (target: under {SHOW_TARGET_MS} ms)")
    if added > HOLDOUT_TARGET * later:
        missed.append(
            f"the holdout added {added / later:.1%} to a later tick"
            f" (target: at most {HOLDOUT_TARGET:.0%})"
        )
    for line in missed:
        print(line)
    return 1 if missed and not args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
