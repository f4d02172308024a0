"""Write-fault campaign: the skills dir refuses writes in each way a real one does.

- EEXIST: a plain file where a skill's folder goes;
- EACCES: a read-only skills dir (the daemon runs as an unprivileged user: root writes through
  permission bits);
- ENOSPC: a full disk (the skills dir is a small tmpfs, filled up; where no mount is possible
  the fault is injected at the write call instead).

A write that fails is that window's `error` only: other sessions' skills of the same tick land,
the judged proposal is kept and retried on later ticks without a new LLM call (a merge already
made is not made again), no file is half-written, and every skill is written once the fault
clears. The daemon is `skilld run`, with the faults set and cleared between its ticks.

Normal size: each fault once, for a few ticks. `--full`: each fault three times, each lasting
twenty ticks.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from skilld.fsutil import TEMP_MARKER
from skilld.skills.document import parse_skill
from skilld.state import StateDB
from tests.campaigns.harness import (
    DaemonRun,
    Proposer,
    Unprivileged,
    body_of,
    fault_shim,
    running,
    shared_tmp_dir,
    tick_failure_events,
    unprivileged,
    wait_for,
)
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM

TMPFS_BYTES = 256 * 1024
#: The fallback where no tmpfs can be mounted: the write call fails while this file exists.
DISK_FULL_SHIM = """
import errno
import os

import skilld.skills.library as _library

_real_write_tree_file = _library.write_tree_file
_flag = os.environ["SKILLD_TEST_DISK_FULL"]
_root = os.environ["SKILLD_TEST_DISK_ROOT"]


def _write_tree_file(root, relpath, data, **kwargs):
    if os.path.exists(_flag) and str(root / relpath).startswith(_root):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(root / relpath))
    return _real_write_tree_file(root, relpath, data, **kwargs)


_library.write_tree_file = _write_tree_file
"""


@dataclass
class Disk:
    """Fills the skills dir's filesystem (a tmpfs) or, without one, raises ENOSPC through the
    shim's flag."""

    root: Path
    mounted: bool
    flag: Path
    filler: Path | None = None

    def fill(self) -> None:
        if not self.mounted:
            self.flag.write_text("full")
            return
        self.filler = self.root / ".filler"
        with self.filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 4096)

    def clear(self) -> None:
        if self.filler is not None:
            self.filler.unlink()
            self.filler = None
        self.flag.unlink(missing_ok=True)


@contextlib.contextmanager
def small_filesystem(path: Path, user: Unprivileged) -> Iterator[bool]:
    """A tmpfs at `path` owned by `user`, if one can be mounted here; yields whether it was."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={TMPFS_BYTES},mode=0755,uid={user.uid},gid={user.gid}"
    if os.geteuid() != 0:
        yield False
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    try:
        yield mounted.returncode == 0
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


@dataclass
class Campaign:
    workspace: Workspace
    proposer: Proposer
    daemon: DaemonRun
    disk: Disk
    sessions: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    violations: list[str] = field(default_factory=list)

    def propose(self, name: str, version: int = 1) -> str:
        """A new session (or more of an existing one) that proposes `name`."""
        self.sessions += 1
        session = f"s{self.sessions}"
        with self.proposer.lock:
            self.proposer.wanted[f"jsonl:{session}"] = body_of(name, version)
        self.workspace.add_session(session, conversation(f"{name} v{version}"))
        return f"jsonl:{session}"

    def skill_text(self, name: str) -> str | None:
        path = self.workspace.skills / name / "SKILL.md"
        try:
            return path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def written(self, name: str, version: int) -> bool:
        text = self.skill_text(name)
        return text is not None and body_of(name, version)["content"] in text

    def no_half_written_files(self, when: str) -> None:
        """No temp file left behind and no skill file that does not parse. A kept proposal's
        write is tried again every tick, so a temp file may be there for the instant a write
        lasts: one left behind is one still there a full tick later."""
        self.checks += 1
        temps = [path for path in self.workspace.skills.rglob("*") if TEMP_MARKER in path.name]
        if temps and not self.daemon.notify.wait_full_tick():
            self.violations.append(f"{when}: the daemon stopped ticking")
        for path in temps:
            if path.exists():
                self.violations.append(f"{when}: temp file left: {path}")
        for path in self.workspace.skills.rglob("SKILL.md"):
            try:
                parse_skill(path.read_bytes())
            except Exception as exc:  # a file that does not parse is what is counted
                self.violations.append(f"{when}: {path} does not parse: {exc}")

    def blocked(
        self, fault: str, names: dict[str, int], ticks: int, *, landing: dict[str, int]
    ) -> None:
        """With the fault in place: `landing` skills are written, `names` are not; after the
        first failure, `ticks` more ticks make no LLM call and record no new event."""
        self.faults[fault] += 1
        notify = self.daemon.notify
        wanted = {**names, **landing}
        if not self._wait(lambda: self._settled_or_failed(wanted)):
            self.violations.append(f"{fault}: the proposals were never judged")
        # The tick that failed the write records its events after the state says `failed`:
        # count from the end of that tick on.
        if not notify.wait_full_tick():
            self.violations.append(f"{fault}: the daemon stopped ticking")
        calls, events = self.proposer.calls, self._event_count()
        for _ in range(ticks):
            if not notify.wait_full_tick():
                self.violations.append(f"{fault}: the daemon stopped ticking")
                break
        self.checks += 1
        if self.proposer.calls != calls:
            self.violations.append(
                f"{fault}: {self.proposer.calls - calls} LLM calls while the fault lasted"
            )
        if self._event_count() != events:
            self.violations.append(f"{fault}: new events while the fault lasted")
        for name, version in names.items():
            self.checks += 1
            if self.written(name, version):
                self.violations.append(f"{fault}: {name} v{version} was written through it")
        for name, version in landing.items():
            self.checks += 1
            if not self.written(name, version):
                self.violations.append(f"{fault}: {name} v{version} (no fault) did not land")
        self.no_half_written_files(f"during {fault}")

    def cleared(self, fault: str, names: dict[str, int]) -> None:
        for name, version in names.items():
            self.checks += 1
            if not self._wait(functools.partial(self.written, name, version)):
                self.violations.append(f"{fault}: {name} v{version} not written once cleared")
        self.no_half_written_files(f"after {fault}")

    def _wait(self, condition: Callable[[], bool]) -> bool:
        """Until `condition` holds, or the daemon is gone (a violation of its own)."""
        return wait_for(lambda: condition() or not self.daemon.alive, 60, poll=0.05) and (
            self.daemon.alive or condition()
        )

    def _settled_or_failed(self, names: dict[str, int]) -> bool:
        """Every name written, or waiting as a failed write."""
        with StateDB(self.workspace.state / "state.db") as state:
            failed = {p.body["name"] for p in state.kept_proposals() if p.status == "failed"}
        return all(self.written(n, v) or n in failed for n, v in names.items())

    def _event_count(self) -> int:
        with StateDB(self.workspace.state / "state.db") as state:
            return len(state.events())


def audit(campaign: Campaign) -> dict[str, int]:
    """After the run: each window asked once, each merge made once, one `could not write`
    event per skill and reason, every skill's history free of repeats."""
    proposer, workspace = campaign.proposer, campaign.workspace
    violations = campaign.violations
    for session, count in proposer.asks.items():
        if count != 1:
            violations.append(f"{session} was asked about {count} times")
    for session, count in proposer.merges.items():
        if count != 1:
            violations.append(f"{session} was merged {count} times")
    if proposer.other:
        violations.append(f"{proposer.other} unexpected requests")
    with StateDB(workspace.state / "state.db") as state:
        failures = [
            e for e in state.events(kinds=("error",)) if (e.reason or "").startswith("could not")
        ]
        kept = state.kept_proposals()
    reasons = Counter((e.skill, e.reason) for e in failures)
    for (skill, reason), count in reasons.items():
        if count != 1:
            violations.append(f"{skill}: {count} events for {reason}")
    if kept:
        violations.append(f"{len(kept)} proposals still kept: {[p.body['name'] for p in kept]}")
    history = workspace.state / "history" / "@default"
    for folder in history.glob("*"):
        digests = Counter(path.stem.rsplit("-", 1)[-1] for path in folder.glob("*.md"))
        repeated = {digest: n for digest, n in digests.items() if n > 1}
        if repeated:
            violations.append(f"history of {folder.name} repeats a version: {repeated}")
    violations += tick_failure_events(workspace.state / "state.db")
    return {"write_failed_events": len(failures), "distinct_reasons": len(reasons)}


def one_round(campaign: Campaign, round_: int, ticks: int, user: Unprivileged) -> None:
    """Each fault once, lasting `ticks` ticks after the first failure, then cleared."""
    skills, disk = campaign.workspace.skills, campaign.disk

    # EEXIST: a plain file where one skill's folder goes; another lands beside it.
    blocked, beside = f"exists-{round_}", f"beside-{round_}"
    obstacle = skills / blocked
    obstacle.write_text("not a folder")
    os.chown(obstacle, user.uid, user.gid)
    campaign.propose(blocked)
    campaign.propose(beside)
    campaign.blocked("EEXIST", {blocked: 1}, ticks, landing={beside: 1})
    obstacle.unlink()
    campaign.cleared("EEXIST", {blocked: 1})

    # EACCES: the skills dir read-only for the daemon's user.
    denied = f"denied-{round_}"
    skills.chmod(0o555)
    campaign.propose(denied)
    campaign.blocked("EACCES", {denied: 1}, ticks, landing={})
    skills.chmod(0o755)
    campaign.cleared("EACCES", {denied: 1})

    # ENOSPC: a full disk, for a new skill and for an update (whose merge is made once).
    full = f"full-{round_}"
    disk.fill()
    campaign.propose(full)
    campaign.propose(beside, version=2)
    campaign.blocked("ENOSPC", {full: 1, beside: 2}, ticks, landing={})
    disk.clear()
    campaign.cleared("ENOSPC", {full: 1, beside: 2})


def test_write_fault_campaign(
    tmp_path: Path, fake_llm: FakeLLM, full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    user = unprivileged()
    rounds, ticks = (3, 20) if full_size else (1, 3)
    with shared_tmp_dir() as base, small_filesystem(base / "ws" / "skills", user) as mounted:
        workspace = Workspace(base / "ws", llm_url=fake_llm.base_url)
        workspace.sessions.mkdir(parents=True)
        workspace.settings = {
            "evolve": {"interval_seconds": 0.01, "cooldown_seconds": 0, "min_messages": 2},
            "llm": {"max_calls_per_hour": 0},
        }
        workspace.write_config()
        disk = Disk(workspace.skills, mounted, base / "disk-full")
        env = workspace.env(HOME=str(workspace.root))
        if not mounted:
            env.update(fault_shim(base / "shim", DISK_FULL_SHIM))
            env.update(SKILLD_TEST_DISK_FULL=str(disk.flag), SKILLD_TEST_DISK_ROOT=str(disk.root))
        user.own(workspace.root)
        proposer = Proposer()
        fake_llm.responder = proposer
        with running(user.skilld("run"), env) as daemon:
            campaign = Campaign(workspace, proposer, daemon, disk)
            # The daemon creates state.db: this process reads it only once it is there (a file
            # root created would be root's, and closed to the daemon's user).
            if daemon.notify.wait_ticks(1):
                for round_ in range(rounds):
                    one_round(campaign, round_, ticks, user)
            else:
                campaign.violations.append("the daemon never ticked")
        figures = audit(campaign)
        problems = daemon.problems()
    violations = campaign.violations + problems
    campaign_figures(
        "write faults",
        faults=dict(campaign.faults),
        disk="tmpfs" if mounted else "injected",
        sessions=campaign.sessions,
        llm_calls=proposer.calls,
        asks=sum(proposer.asks.values()),
        merges=sum(proposer.merges.values()),
        **figures,
        checks=campaign.checks,
        violations=len(violations),
    )
    assert campaign.faults == {"EEXIST": rounds, "EACCES": rounds, "ENOSPC": rounds}
    assert not violations, "\n".join(violations[:40])
