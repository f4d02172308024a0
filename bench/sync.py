"""A team library over git, through the commands users run: convergence of many hosts, and the
cost of one `skilld sync`.

Run: `python bench/sync.py [--hosts 10] [--skills 100] [--per-round 10] [--repeat 5]
      [--dir PATH] [--smoke]` (`--smoke`: 2 hosts, one skill each, one run per case)

Each host is its own skilld installation (config, state dir, skills dir, `[sync] host`) whose
`[skills]` library has the same bare repository as `remote`. Every skill is created with
`skilld skills write` and every round is `skilld sync`, each a subprocess, as a person or an
agent's hook would run them.

1. Convergence. In each round every host, all at once (one chain of subprocesses per host),
   writes `--per-round` new skills and then runs `skilld sync`. When every host has written
   `--skills`, rounds of `skilld sync` alone follow until every host's HEAD is the remote's.
   Printed: rounds until then, `skilld sync` runs that exited 1 (a push rejected more often
   than the retry budget: the next round catches up), lost skills (expected but missing on the
   remote or on any host), duplicates (a `created` commit twice, a name nobody wrote, or one
   skill at two paths).

2. One `skilld sync` of the library the convergence left (`--hosts` x `--skills` skills) on
   host 0, median of `--repeat`, in three cases: nothing changed (the target: under 2 s), one
   local change to push (`skilld skills write` of one skill before each run, not timed), one
   teammate's change to pull (host 1 writes and syncs before each run, not timed). The
   baseline, in the same process and on the same work tree, is the least any sync does:
   `git fetch origin` + `git status --porcelain`. The floor of any `skilld` command (an
   interpreter starting and importing skilld: `skilld --version`) is printed beside it. The
   ratios are the figures to compare across machines; the absolute times are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MAX_ROUNDS = 50
#: git as a person runs it: no user config (the baseline, and the bench's own checks).
GIT_ENV = {
    **{key: value for key, value in os.environ.items() if not key.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass
class Host:
    """One skilld installation of the team, driven through its command line."""

    root: Path
    name: str
    remote: Path

    @property
    def skills(self) -> Path:
        return self.root / "skills"

    def write_config(self) -> None:
        self.root.mkdir(parents=True)
        (self.root / "sessions").mkdir()
        config: dict[str, dict[str, object]] = {
            "skills": {"dir": self.skills, "remote": self.remote, "max_managed": 100_000},
            "state": {"dir": self.root / "state"},
            "sync": {"host": self.name},
            "log": {"format": "json", "level": "error"},
        }
        config["[sources]"] = {"kind": "jsonl", "path": self.root / "sessions"}
        lines = []
        for section, values in config.items():
            lines += [f"[{section}]", *(f"{k} = {_toml(v)}" for k, v in values.items())]
        (self.root / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def skilld(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("SKILLD_")}
        env["SKILLD_CONFIG"] = str(self.root / "config.toml")
        return subprocess.run(
            [sys.executable, "-m", "skilld", *args], env=env, capture_output=True, text=True
        )

    def write(self, skill: str, content: str) -> None:
        result = self.skilld("skills", "write", skill, "--description", f"Bench {skill}.",
                             "--content", content)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"{self.name}: skills write {skill}: {result.stderr.strip()}")

    def sync(self) -> bool:
        """One `skilld sync`: True when it exited 0; a failure other than a round's is raised."""
        result = self.skilld("sync")
        if result.returncode not in (0, 1):
            raise RuntimeError(f"{self.name}: sync exited {result.returncode}: {result.stderr}")
        return result.returncode == 0

    def round(self, names: Sequence[str]) -> bool:
        for name in names:
            self.write(name, f"1. Learned by {self.name}.")
        return self.sync()

    def head(self) -> str:
        return git("rev-parse", "HEAD", cwd=self.skills)


def _toml(value: object) -> str:
    return str(value) if isinstance(value, int) else json.dumps(str(value))


def host_name(index: int) -> str:
    return f"host-{index:02d}"


def skill_name(host: int, index: int) -> str:
    return f"{host_name(host)}-skill-{index:03d}"


def open_team(base: Path, hosts: int) -> tuple[Path, list[Host]]:
    remote = base / "team.git"
    base.mkdir(parents=True)
    git("init", "-q", "--bare", "-b", "main", str(remote), cwd=base)
    team = [Host(base / host_name(index), host_name(index), remote) for index in range(hosts)]
    for host in team:
        host.write_config()
    return remote, team


def converged(remote: Path, team: list[Host]) -> bool:
    tip = git("rev-parse", "--verify", "-q", "main", cwd=remote)
    return all(host.head() == tip for host in team)


def convergence(
    remote: Path, team: list[Host], skills: int, per_round: int
) -> dict[str, float | int | bool]:
    failed = rounds = 0
    started = time.perf_counter()
    with ThreadPoolExecutor(len(team)) as pool:
        while rounds < MAX_ROUNDS:
            share = range(rounds * per_round, min((rounds + 1) * per_round, skills))
            jobs = [[skill_name(h, i) for i in share] for h in range(len(team))]
            results = list(pool.map(lambda host, names: host.round(names), team, jobs))
            rounds += 1
            failed += results.count(False)
            if not share and converged(remote, team):
                break
    elapsed = time.perf_counter() - started
    expected = {skill_name(h, i) for h in range(len(team)) for i in range(skills)}
    tree = git("ls-tree", "-r", "--name-only", "main", cwd=remote).splitlines()
    paths = Counter(p.split("/")[0] for p in tree if p.endswith("/SKILL.md"))
    paths.update(p.removesuffix(".md") for p in tree if "/" not in p and p.endswith(".md"))
    on_hosts = [{p.parent.name for p in host.skills.glob("*/SKILL.md")} for host in team]
    lost = len(expected - set(paths)) + sum(len(expected - present) for present in on_hosts)
    subjects = Counter(git("log", "--format=%s", "main", cwd=remote).splitlines())
    duplicates = sum(count - 1 for subject, count in subjects.items()
                     if subject.startswith("created ") and count > 1)  # fmt: skip
    duplicates += len(set(paths) - expected) + sum(count - 1 for count in paths.values())
    return {
        "rounds": rounds,
        "failed": failed,
        "lost": lost,
        "duplicates": duplicates,
        "commits": sum(subjects.values()),
        "seconds": elapsed,
        "converged": converged(remote, team),
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


def one_round(team: list[Host], repeat: int) -> tuple[list[tuple[str, float]], float, float]:
    """The three timed cases of `skilld sync` on host 0, the fetch + status baseline and the
    floor of any skilld command."""
    host, teammate = team[0], team[1]
    counter = iter(range(10**6))
    local_skill, remote_skill = skill_name(0, 0), skill_name(1, 0)

    def sync() -> None:
        if not host.sync():
            raise RuntimeError(f"{host.name}: skilld sync failed: {host.skilld('sync').stderr}")

    def baseline() -> None:
        git("fetch", "--quiet", "origin", cwd=host.skills)
        git("status", "--porcelain", cwd=host.skills)

    def floor() -> None:
        host.skilld("--version")

    def nothing() -> None:
        return None

    def local_change() -> None:
        host.write(local_skill, f"1. Changed here ({next(counter)}).")

    def remote_change() -> None:
        teammate.write(remote_skill, f"1. Changed by a teammate ({next(counter)}).")
        assert teammate.sync()

    sync()  # in step with the remote before timing
    reference = median_seconds(baseline, repeat, nothing)
    startup = median_seconds(floor, repeat, nothing)
    cases = [("nothing changed", nothing), ("one local change", local_change),
             ("one remote change", remote_change)]  # fmt: skip
    timed = [(label, median_seconds(sync, repeat, before)) for label, before in cases]
    return timed, reference, startup


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--skills", type=int, default=100, help="skills each host writes")
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="2 hosts, 1 skill each, 1 run")
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.skills, args.per_round, args.repeat = 2, 1, 1, 1
    base = Path(tempfile.mkdtemp(prefix="skilld-bench-sync-", dir=args.dir))
    try:
        remote, team = open_team(base / "team", max(args.hosts, 2))
        result = convergence(remote, team, args.skills, args.per_round)
        print(f"convergence: {len(team)} hosts x {args.skills} skills, {args.per_round} per host "
              f"per round; `skilld skills write` + `skilld sync`, hosts in parallel")  # fmt: skip
        print(f"  rounds until all converge  {result['rounds']:>6}"
              f"{'' if result['converged'] else '  (NOT converged)'}")  # fmt: skip
        print(f"  `skilld sync` that failed  {result['failed']:>6}")
        print(f"  lost                       {result['lost']:>6}")
        print(f"  duplicates                 {result['duplicates']:>6}")
        print(f"  commits on the remote      {result['commits']:>6}")
        print(f"  wall time                  {result['seconds']:>6.1f} s")
        size = len(team) * args.skills
        cases, reference, startup = one_round(team, args.repeat)
        print(f"\none `skilld sync`, library of {size} skills (median of {args.repeat}); "
              f"baseline git fetch + git status {reference * 1000:.0f} ms, "
              f"`skilld --version` {startup * 1000:.0f} ms")  # fmt: skip
        print(f"  {'case':<18} {'skilld sync':>11} {'x baseline':>11} {'x --version':>12}")
        for label, seconds in cases:
            print(f"  {label:<18} {seconds * 1000:>8.0f} ms {seconds / reference:>11.1f} "
                  f"{seconds / startup:>12.1f}")  # fmt: skip
        ok = result["converged"] and result["lost"] == 0 and result["duplicates"] == 0
        return 0 if ok else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
