"""Usage bumps on skilld's product paths against Hermes Agent's own bump, same process, same disk.

Run: `python bench/usage.py [--quick] [--rounds N] [--dir PATH] [--smoke]`
(`--smoke`: 20 skills, a few rounds and contenders' operations, to check that it still runs)

skilld records a use on two paths, and this measures both, at 200 and 1,000 skills:

* (a) the agent hook: one `skilld usage use NAME` process per bump (the MCP server's `view` is
  the same bump in a process already running). Timed as wall time per bump, beside Hermes's
  in-process bump and beside a bare `python -c pass`, so the interpreter's start-up shows apart
  from skilld's own cost.
* (b) what that process pays beyond start-up: one locked read-modify-write of `.usage.json` by
  a fresh `UsageStore` (the hook has no warm state), against one Hermes bump.
* (c) the daemon: one `bump_many` batch of 50 uses (one tick's worth) against 50 Hermes bumps.

Every figure is the median of `--rounds` rounds in which skilld and its baseline run
alternately, so a noisy neighbour slows both. skilld and Hermes each work on their own copy of
the same seeded file (written the way Hermes writes it), so each reads what it writes itself.
Afterwards every count on disk is checked against the bumps made.

(d) counts under concurrency: Hermes bumps (two processes), skilld bumps, `bump_many` batches
and `skilld usage use` processes all hit one file at once, on the same names; "exact" means
every final count equals the bumps made, so no writer lost another's update.

The baseline reproduces the bump path of Hermes Agent's `tools/skill_usage.py` (as read at
commit 460b943): `_usage_file_lock()` (flock on `.usage.json.lock`, opened "a+" each time),
`load_usage()` (exists check, read, parse, keep dict values), the record mutation, and
`save_usage()` (`mkstemp`, `json.dump(indent=2, sort_keys=True, ensure_ascii=False)`, flush,
fsync, replace); `_mutate` checks no provenance for a plain bump.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from skilld.skills.usage import USAGE_FILE, UsageStore

SKILL_COUNTS = (200, 1000)
BATCH = 50

# -- Hermes Agent, tools/skill_usage.py (bump path), reproduced faithfully ----------------------


def _hermes_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()  # noqa: UP017 - Hermes's own spelling


def _hermes_empty_record() -> dict[str, Any]:
    return {
        "created_by": None,
        "use_count": 0,
        "view_count": 0,
        "last_used_at": None,
        "last_viewed_at": None,
        "patch_count": 0,
        "last_patched_at": None,
        "created_at": _hermes_now_iso(),
        "state": "active",
        "pinned": False,
        "archived_at": None,
    }


@contextlib.contextmanager
def _hermes_usage_file_lock(usage_file: Path) -> Iterator[None]:
    lock_path = usage_file.with_suffix(".json.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - mirrors Hermes
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        fd.close()


def _hermes_load_usage(usage_file: Path) -> dict[str, dict[str, Any]]:
    if not usage_file.exists():
        return {}
    try:
        data = json.loads(usage_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def _hermes_save_usage(usage_file: Path, data: dict[str, dict[str, Any]]) -> None:
    usage_file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(dir=str(usage_file.parent), prefix=".usage_", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, usage_file)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise


def hermes_bump_use(skills_dir: Path, skill_name: str) -> None:
    usage_file = skills_dir / USAGE_FILE
    with _hermes_usage_file_lock(usage_file):
        data = _hermes_load_usage(usage_file)
        record = data.get(skill_name)
        if not isinstance(record, dict):
            record = _hermes_empty_record()
        record["use_count"] = int(record.get("use_count") or 0) + 1
        record["last_used_at"] = _hermes_now_iso()
        data[skill_name] = record
        _hermes_save_usage(usage_file, data)


# -- the paths measured ------------------------------------------------------------------------


def skilld_hook_command() -> list[str]:
    """What an agent hook runs: the `skilld` script beside this interpreter, else `-m skilld`."""
    script = Path(sys.executable).with_name("skilld")
    return [str(script)] if script.exists() else [sys.executable, "-m", "skilld"]


class Hook:
    """`skilld usage use NAME` as a hook runs it, configured for one skills dir."""

    def __init__(self, root: Path, skills_dir: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        config = root / "config.toml"
        config.write_text(
            f'[skills]\ndir = "{skills_dir}"\n[state]\ndir = "{root / "state"}"\n'
            f'[[sources]]\nkind = "jsonl"\npath = "{root / "sessions"}"\n',
            encoding="utf-8",
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLD_")}
        self.env["SKILLD_CONFIG"] = str(config)
        self.command = skilld_hook_command()

    def bump(self, name: str) -> None:
        done = subprocess.run(
            [*self.command, "usage", "use", name], env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"skilld usage use {name} failed: {done.stderr.strip()}")


def bare_interpreter() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def skilld_locked_bump(skills_dir: Path, name: str) -> None:
    """The hook's work once started: a fresh store, one locked read-modify-write."""
    store = UsageStore(skills_dir)
    store.bump(name, "use")
    store.close()


# -- measuring ---------------------------------------------------------------------------------


def _names(count: int) -> list[str]:
    return [f"skill-{index:04d}" for index in range(count)]


def _seed(skills_dir: Path, skills: int) -> None:
    skills_dir.mkdir(parents=True)
    _hermes_save_usage(
        skills_dir / USAGE_FILE, {name: _hermes_empty_record() for name in _names(skills)}
    )


def alternate(rounds: int, **actions: Callable[[int], None]) -> dict[str, float]:
    """Median seconds of each action over `rounds` rounds that run them in turn."""
    samples: dict[str, list[float]] = {label: [] for label in actions}
    for index in range(rounds):
        for label, action in actions.items():
            started = time.perf_counter()
            action(index)
            samples[label].append(time.perf_counter() - started)
    return {label: statistics.median(times) for label, times in samples.items()}


def use_counts(skills_dir: Path) -> Counter[str]:
    records = json.loads((skills_dir / USAGE_FILE).read_text(encoding="utf-8"))
    return Counter({name: record["use_count"] for name, record in records.items()})


def check(skills_dir: Path, made: Counter[str], what: str) -> None:
    on_disk = use_counts(skills_dir)
    if +on_disk != +made:
        raise SystemExit(f"{what}: counts on disk differ from the bumps made")


class Cell:
    """Two copies of one seeded file (Hermes's, skilld's) and the bumps made on each."""

    def __init__(self, root: Path, skills: int) -> None:
        self.names = _names(skills)
        self.hermes_dir = root / "hermes" / "skills"
        self.skilld_dir = root / "skilld" / "skills"
        _seed(self.hermes_dir, skills)
        _seed(self.skilld_dir, skills)
        self.hook = Hook(root / "skilld", self.skilld_dir)
        self.hermes_made: Counter[str] = Counter()
        self.skilld_made: Counter[str] = Counter()

    def name(self, index: int) -> str:
        return self.names[index * 7 % len(self.names)]

    def hermes(self, index: int) -> None:
        name = self.name(index)
        hermes_bump_use(self.hermes_dir, name)
        self.hermes_made[name] += 1

    def hermes_batch(self, index: int) -> None:
        for offset in range(BATCH):
            self.hermes(index * BATCH + offset)

    def skilld_hook(self, index: int) -> None:
        name = self.name(index)
        self.hook.bump(name)
        self.skilld_made[name] += 1

    def skilld_rmw(self, index: int) -> None:
        name = self.name(index)
        skilld_locked_bump(self.skilld_dir, name)
        self.skilld_made[name] += 1

    def skilld_batch(self, store: UsageStore, index: int) -> None:
        names = [self.name(index * BATCH + offset) for offset in range(BATCH)]
        store.bump_many((name, "use") for name in names)
        self.skilld_made.update(names)

    def verify(self) -> None:
        check(self.hermes_dir, self.hermes_made, "hermes")
        check(self.skilld_dir, self.skilld_made, "skilld")


def measure(root: Path, skills: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"usage-{skills}-", dir=root) as tmp:
        cell = Cell(Path(tmp), skills)
        cell.hook.bump(cell.name(0))  # creates the state dir: not a first run per round
        cell.skilld_made[cell.name(0)] += 1
        hook = alternate(
            max(rounds // 5, 5),
            hermes=cell.hermes,
            bare=lambda _: bare_interpreter(),
            hook=cell.skilld_hook,
        )
        rmw = alternate(rounds, hermes=cell.hermes, skilld=cell.skilld_rmw)
        store = UsageStore(cell.skilld_dir)
        batch = alternate(
            max(rounds // 10, 3),
            hermes=cell.hermes_batch,
            skilld=lambda index: cell.skilld_batch(store, index),
        )
        store.close()
        cell.verify()
    return {
        "hook_hermes": hook["hermes"],
        "hook_bare": hook["bare"],
        "hook": hook["hook"],
        "rmw_hermes": rmw["hermes"],
        "rmw": rmw["skilld"],
        "batch_hermes": batch["hermes"],
        "batch": batch["skilld"],
    }


# -- (d) concurrency ---------------------------------------------------------------------------


def _contender(
    kind: str, skills_dir: Path, names: list[str], ops: int, start_gun: Barrier, results: Any
) -> None:
    made: Counter[str] = Counter()
    store = UsageStore(skills_dir) if kind in ("bump", "bump_many") else None
    hook = Hook(skills_dir.parent / f"hook-{os.getpid()}", skills_dir) if kind == "hook" else None
    start_gun.wait()
    for index in range(ops):
        if kind == "bump_many":
            batch = [names[(index * 10 + offset) % len(names)] for offset in range(10)]
            assert store is not None
            store.bump_many((name, "use") for name in batch)
            made.update(batch)
            continue
        name = names[(index * 3 + len(kind)) % len(names)]
        if kind == "hermes":
            hermes_bump_use(skills_dir, name)
        elif kind == "bump":
            assert store is not None
            store.bump(name, "use")
        else:
            assert hook is not None
            hook.bump(name)
        made[name] += 1
    if store is not None:
        store.close()
    results.put(made)


Contenders = tuple[tuple[str, int], ...]
CONTENDERS: Contenders = (
    ("hermes", 150), ("hermes", 150), ("bump", 150), ("bump_many", 30), ("hook", 15)
)  # fmt: skip
SMOKE_CONTENDERS: Contenders = (
    ("hermes", 5), ("hermes", 5), ("bump", 5), ("bump_many", 2), ("hook", 2)
)  # fmt: skip


def contend(root: Path, skills: int, contenders: Contenders) -> tuple[int, bool]:
    """(bumps made, whether every count on disk is exact) with every writer at once."""
    with tempfile.TemporaryDirectory(prefix=f"usage-contend-{skills}-", dir=root) as tmp:
        skills_dir = Path(tmp) / "skills"
        _seed(skills_dir, skills)
        names = _names(skills)[:40]  # few names: the writers collide on the same records
        context = multiprocessing.get_context("fork")
        start_gun = context.Barrier(len(contenders))
        results = context.Queue()
        workers = [
            context.Process(
                target=_contender, args=(kind, skills_dir, names, ops, start_gun, results)
            )
            for kind, ops in contenders
        ]
        for worker in workers:
            worker.start()
        made: Counter[str] = Counter()
        for _ in workers:
            made.update(results.get())
        for worker in workers:
            worker.join()
        if any(worker.exitcode != 0 for worker in workers):
            raise RuntimeError("a contender failed")
        return sum(made.values()), +use_counts(skills_dir) == +made


# -- report ------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (60 instead of 200)")
    parser.add_argument("--rounds", type=int, help="rounds of (b); (a) runs 1/5, (c) 1/10")
    parser.add_argument("--dir", type=Path, help="where to put the skills dirs (which disk)")
    parser.add_argument("--smoke", action="store_true", help="20 skills, few rounds")
    args = parser.parse_args(argv)
    rounds = 1 if args.smoke else args.rounds or (60 if args.quick else 200)
    skill_counts = (20,) if args.smoke else SKILL_COUNTS
    contenders = SMOKE_CONTENDERS if args.smoke else CONTENDERS
    root = args.dir or Path(tempfile.gettempdir())
    print(f"usage bumps, medians over alternating rounds, skills dirs under {root}")
    print(f"hook command: {' '.join(skilld_hook_command())} usage use NAME")
    results = {skills: measure(root, skills, rounds) for skills in skill_counts}

    print("\n(a) hook path, one process per bump, ms per bump")
    print(f"{'skills':>6} {'hermes':>8} {'py -c pass':>11} {'skilld hook':>12}  ", end="")
    print(f"{'hook/hermes':>11} {'hook/pass':>9} {'(hook-pass)/hermes':>18}")
    for skills, r in results.items():
        beyond = (r["hook"] - r["hook_bare"]) / r["hook_hermes"]
        print(
            f"{skills:>6} {_ms(r['hook_hermes']):>8} {_ms(r['hook_bare']):>11} "
            f"{_ms(r['hook']):>12}  {r['hook'] / r['hook_hermes']:>10.1f}x "
            f"{r['hook'] / r['hook_bare']:>8.1f}x {beyond:>17.1f}x"
        )
    print("\n(b) one locked read-modify-write in-process (fresh store), ms per bump")
    print(f"{'skills':>6} {'hermes':>8} {'skilld':>8}  {'hermes/skilld':>13}")
    for skills, r in results.items():
        print(
            f"{skills:>6} {_ms(r['rmw_hermes']):>8} {_ms(r['rmw']):>8}  "
            f"{r['rmw_hermes'] / r['rmw']:>12.1f}x"
        )
    print(f"\n(c) daemon tick: {BATCH} uses, ms per batch")
    print(f"{'skills':>6} {f'{BATCH} hermes':>10} {'bump_many':>10}  {'hermes/skilld':>13}")
    for skills, r in results.items():
        print(
            f"{skills:>6} {_ms(r['batch_hermes']):>10} {_ms(r['batch']):>10}  "
            f"{r['batch_hermes'] / r['batch']:>12.1f}x"
        )
    print("\n(d) every writer at once: " + ", ".join(f"{k} x{n}" for k, n in contenders))
    all_exact = True
    for skills in skill_counts:
        made, exact = contend(root, skills, contenders)
        all_exact = all_exact and exact
        print(f"{skills:>6} skills: {made} bumps, counts {'exact' if exact else 'WRONG'}")
    return 0 if all_exact else 1


if __name__ == "__main__":
    sys.exit(main())
