"""A team library over git: convergence of many hosts, and the cost of one sync round.

Run: `/work/venv/bin/python bench/sync.py [--hosts 10] [--skills 100] [--per-round 10]
      [--library 1000] [--repeat 7] [--dir PATH]`

1. Convergence. `--hosts` hosts (skills dirs) share one bare repository. In each round every
   host, in its own process and all at once, creates `--per-round` new skills (one commit each,
   as the Library does: file, manifest entry, commit) and then runs one `sync()`. When every
   host has created `--skills`, rounds of sync alone follow until every host's tree equals the
   remote's. Printed: rounds until then, sync rounds that failed (a push rejected more often
   than the retry budget: the next round catches up), lost skills (expected but missing on the
   remote or on any host), duplicates (a skill created twice, or a `created` commit twice).

2. One round for a library of `--library` skills, on a host in step with the remote, timed
   `--repeat` times (median) in three cases: nothing changed (the target: under 2 s), one
   local change to push, one teammate's change to pull. Every round publishes the host's usage
   for all skills, as the daemon does. The baseline, in the same process and on the same work
   tree, is what any sync must at least do: `git fetch origin` + `git status --porcelain`. The
   ratios are the figure to compare across machines; this one is noisy.

The public API is driven directly (`TeamRepo.setup/change/sync`); the `skilld sync` CLI will
replace it once the integration lands.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skilld.fsutil import atomic_write
from skilld.log import configure_logging
from skilld.sync import ManifestEntry, TeamRepo

MAX_ROUNDS = 50


def skill_bytes(name: str, body: str) -> bytes:
    return f"---\nname: {name}\ndescription: {body}\n---\n1. {body}\n".encode()


def create(repo: TeamRepo, name: str, body: str, *, event: str = "created") -> None:
    relpath = f"{name}/SKILL.md"
    data = skill_bytes(name, body)
    entry = ManifestEntry(relpath, hashlib.sha256(data).hexdigest())
    with repo.change(repo.change_message(event, name), [relpath], manifest={name: entry}):
        (repo.root / name).mkdir(exist_ok=True)
        atomic_write(repo.root / relpath, data)


def host_name(index: int) -> str:
    return f"host-{index:02d}"


def open_host(base: Path, remote: Path, index: int) -> TeamRepo:
    name = host_name(index)
    return TeamRepo(base / name, str(remote), host=name)


def host_round(job: tuple[Path, Path, int, list[str]]) -> tuple[bool, str | None]:
    """One host's round in a worker process: create its share, then sync."""
    base, remote, index, names = job
    configure_logging("json", "error")
    repo = open_host(base, remote, index)
    for name in names:
        create(repo, name, f"Learned by {host_name(index)}.")
    report = repo.sync()
    return report.ok, report.error


def git_out(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def converged(remote: Path, repos: list[TeamRepo]) -> bool:
    tree = git_out("rev-parse", "main^{tree}", cwd=remote)
    return all(
        git_out("rev-parse", "HEAD^{tree}", cwd=repo.root) == tree and repo.status().ahead == 0
        for repo in repos
    )


def convergence(base: Path, hosts: int, skills: int, per_round: int) -> dict[str, Any]:
    remote = base / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    repos = [open_host(base, remote, index) for index in range(hosts)]
    for repo in repos:
        repo.setup()
    expected = {f"{host_name(h)}-skill-{i:03d}" for h in range(hosts) for i in range(skills)}
    failed = rounds = 0
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(hosts) as pool:
        while rounds < MAX_ROUNDS:
            share = range(rounds * per_round, min((rounds + 1) * per_round, skills))
            jobs = [
                (base, remote, h, [f"{host_name(h)}-skill-{i:03d}" for i in share])
                for h in range(hosts)
            ]
            creating = any(names for *_, names in jobs)
            results = pool.map(host_round, jobs)
            rounds += 1
            failed += sum(1 for ok, _ in results if not ok)
            if not creating and converged(remote, repos):
                break
    elapsed = time.perf_counter() - started
    tree = git_out("ls-tree", "-r", "--name-only", "main", cwd=remote).splitlines()
    on_remote = {path.split("/")[0] for path in tree if path.endswith("/SKILL.md")}
    on_hosts = [{p.parent.name for p in repo.root.glob("*/SKILL.md")} for repo in repos]
    lost = len(expected - on_remote) + sum(len(expected - present) for present in on_hosts)
    subjects = Counter(git_out("log", "--format=%s", "main", cwd=remote).splitlines())
    duplicates = sum(count - 1 for subject, count in subjects.items()
                     if subject.startswith("created ") and count > 1)  # fmt: skip
    duplicates += len(on_remote - expected)
    return {
        "rounds": rounds,
        "failed": failed,
        "lost": lost,
        "duplicates": duplicates,
        "commits": sum(subjects.values()),
        "seconds": elapsed,
        "converged": converged(remote, repos),
    }


def median_seconds(
    action: Callable[[], object], repeat: int, before: Callable[[], object]
) -> float:
    times = []
    for _ in range(repeat):
        before()
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def one_round(base: Path, size: int, repeat: int) -> list[tuple[str, float, float]]:
    remote = base / "big.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    seed = TeamRepo(base / "seed", str(remote), host="seed")
    managed = {}
    for index in range(size):
        name = f"skill-{index:05d}"
        data = skill_bytes(name, f"Step {index}.")
        (seed.root / name).mkdir(parents=True)
        (seed.root / name / "SKILL.md").write_bytes(data)
        managed[name] = ManifestEntry(f"{name}/SKILL.md", hashlib.sha256(data).hexdigest())
    seed.setup(managed=managed)
    assert seed.sync().ok
    host = TeamRepo(base / "host", str(remote), host="host")
    host.setup()
    assert host.sync().ok
    usage = {
        name: {"use_count": 1, "last_used_at": "2025-01-01T00:00:00+00:00"} for name in managed
    }
    assert host.sync(usage=usage).ok
    counter = iter(range(10**6))

    def sync() -> None:
        report = host.sync(usage=usage)
        assert report.ok, report.error

    def baseline() -> None:
        host.git.run("fetch", "--quiet", "origin", network=True)
        host.git.run("status", "--porcelain")

    def nothing() -> None:
        return None

    def local_change() -> None:
        create(host, "skill-00000", f"Local change {next(counter)}.", event="updated")

    def remote_change() -> None:
        create(seed, "skill-00001", f"Teammate's change {next(counter)}.", event="updated")
        assert seed.sync().ok

    reference = median_seconds(baseline, repeat, nothing)
    cases = [("nothing changed", nothing), ("one local change", local_change),
             ("one remote change", remote_change)]  # fmt: skip
    return [(label, median_seconds(sync, repeat, setup), reference) for label, setup in cases]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--skills", type=int, default=100, help="skills each host creates")
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--library", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    configure_logging("json", "error")
    base = Path(tempfile.mkdtemp(prefix="skilld-bench-sync-", dir=args.dir))
    try:
        result = convergence(base / "team", args.hosts, args.skills, args.per_round)
        print(f"convergence: {args.hosts} hosts x {args.skills} skills, {args.per_round} per "
              f"host per round, hosts in parallel processes")  # fmt: skip
        print(f"  rounds until all converge  {result['rounds']:>6}"
              f"{'' if result['converged'] else '  (NOT converged)'}")  # fmt: skip
        print(f"  failed sync rounds         {result['failed']:>6}")
        print(f"  lost                       {result['lost']:>6}")
        print(f"  duplicates                 {result['duplicates']:>6}")
        print(f"  commits on the remote      {result['commits']:>6}")
        print(f"  wall time                  {result['seconds']:>6.1f} s")
        print(f"\none sync round, library of {args.library} skills (median of {args.repeat}):")
        print(f"  {'case':<18} {'sync':>8} {'fetch+status':>13} {'ratio':>6}")
        for label, seconds, reference in one_round(base / "round", args.library, args.repeat):
            print(f"  {label:<18} {seconds * 1000:>6.0f} ms {reference * 1000:>10.0f} ms "
                  f"{seconds / reference:>6.1f}")  # fmt: skip
        ok = result["converged"] and result["lost"] == 0 and result["duplicates"] == 0
        return 0 if ok else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
