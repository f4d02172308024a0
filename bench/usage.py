"""Usage-bump throughput: Hermes Agent 0.19.0's `.usage.json` writer against skilld's UsageStore.

Run: `/work/venv/bin/python bench/usage.py [--quick] [--seconds S] [--dir PATH]`

Both run in the same process tree, on the same disk, against the same seeded file (written the
way Hermes writes it). Every cell starts fresh: N skills, P worker processes, each bumping
`use` round-robin over its own share of the names for a fixed time. skilld's workers end with
`flush()` inside the timed window, so every bump is in `.usage.json` (what Hermes reads) when
the clock stops. The parent then re-reads the file and checks every count against what the
workers report: "exact" means no bump was lost or doubled.

The baseline below reproduces Hermes Agent's `tools/skill_usage.py` (0.19.0) bump path:
`_usage_file_lock()` (flock on `.usage.json.lock`, opened "a+" each time), `load_usage()`
(exists check, read, parse, keep dict values), the record mutation, and `save_usage()`
(`mkstemp`, `json.dump(indent=2, sort_keys=True, ensure_ascii=False)`, flush, fsync, replace).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from skilld.skills.usage import UsageStore

SKILL_COUNTS = (200, 1000)
PROCESS_COUNTS = (1, 4)
IMPLEMENTATIONS = ("hermes", "skilld")

# -- Hermes Agent 0.19.0, tools/skill_usage.py (bump path), reproduced faithfully --------------


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


def hermes_bump_use(usage_file: Path, skill_name: str) -> None:
    with _hermes_usage_file_lock(usage_file):
        data = _hermes_load_usage(usage_file)
        record = data.get(skill_name)
        if not isinstance(record, dict):
            record = _hermes_empty_record()
        record["use_count"] = int(record.get("use_count") or 0) + 1
        record["last_used_at"] = _hermes_now_iso()
        data[skill_name] = record
        _hermes_save_usage(usage_file, data)


# -- the benchmark -----------------------------------------------------------------------------


def _names(count: int) -> list[str]:
    return [f"skill-{index:04d}" for index in range(count)]


def _worker(
    implementation: str,
    skills_dir: Path,
    names: list[str],
    seconds: float,
    start_gun: Barrier,
    results: Any,
) -> None:
    usage_file = skills_dir / ".usage.json"
    store = UsageStore(skills_dir) if implementation == "skilld" else None
    bump: Callable[[str], None] = (
        functools.partial(store.bump, kind="use")
        if store is not None
        else functools.partial(hermes_bump_use, usage_file)
    )
    counts = dict.fromkeys(names, 0)
    start_gun.wait()
    started = time.monotonic()
    deadline = started + seconds
    index = 0
    while time.monotonic() < deadline:
        name = names[index % len(names)]
        bump(name)
        counts[name] += 1
        index += 1
    if store is not None:
        store.flush()
        store.close()
    results.put((started, time.monotonic(), counts))


def run_cell(
    implementation: str, skills: int, processes: int, seconds: float, root: Path
) -> tuple[float, bool]:
    """(bumps per second over all processes, whether every final count is exact)."""
    with tempfile.TemporaryDirectory(prefix=f"usage-{implementation}-", dir=root) as tmp:
        skills_dir = Path(tmp)
        names = _names(skills)
        _hermes_save_usage(
            skills_dir / ".usage.json", {name: _hermes_empty_record() for name in names}
        )
        context = multiprocessing.get_context("fork")
        start_gun = context.Barrier(processes)
        results = context.Queue()
        workers = [
            context.Process(
                target=_worker,
                args=(implementation, skills_dir, names[p::processes], seconds, start_gun, results),
            )
            for p in range(processes)
        ]
        for worker in workers:
            worker.start()
        reports = [results.get() for _ in workers]
        for worker in workers:
            worker.join()
        if any(worker.exitcode != 0 for worker in workers):
            raise RuntimeError(f"a {implementation} worker failed")
        expected: dict[str, int] = {}
        for _, _, counts in reports:
            expected.update(counts)
        on_disk = json.loads((skills_dir / ".usage.json").read_text(encoding="utf-8"))
        exact = len(on_disk) == skills and all(
            on_disk[name]["use_count"] == expected[name] for name in names
        )
        elapsed = max(end for _, end, _ in reports) - min(start for start, _, _ in reports)
        return sum(expected.values()) / elapsed, exact


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s per cell instead of 2.5 s")
    parser.add_argument("--seconds", type=float, help="seconds each cell bumps for")
    parser.add_argument("--dir", type=Path, help="where to put the skills dirs (which disk)")
    args = parser.parse_args(argv)
    seconds = args.seconds or (0.5 if args.quick else 2.5)
    root = args.dir or Path(tempfile.gettempdir())
    print(f"usage bumps/s, {seconds:g} s per cell, skills dirs under {root}")
    print(
        f"{'skills':>6} {'procs':>5} {'hermes 0.19.0/s':>16} {'skilld/s':>10} {'ratio':>8}  counts"
    )
    all_exact = True
    for skills in SKILL_COUNTS:
        for processes in PROCESS_COUNTS:
            hermes_rate, hermes_exact = run_cell("hermes", skills, processes, seconds, root)
            skilld_rate, skilld_exact = run_cell("skilld", skills, processes, seconds, root)
            exact = hermes_exact and skilld_exact
            all_exact = all_exact and exact
            verdict = (
                "exact"
                if exact
                else (
                    f"WRONG (hermes {'ok' if hermes_exact else 'lost'}, "
                    f"skilld {'ok' if skilld_exact else 'lost'})"
                )
            )
            print(
                f"{skills:>6} {processes:>5} {hermes_rate:>16.1f} {skilld_rate:>10.1f} "
                f"{skilld_rate / hermes_rate:>7.1f}x  {verdict}"
            )
            sys.stdout.flush()
    return 0 if all_exact else 1


if __name__ == "__main__":
    sys.exit(main())
