"""Crash campaign: `skilld run` SIGKILLed at random moments, restarted, and audited afterwards.

The daemon runs as a real subprocess against a loopback LLM that creates and updates a few
skills, skips some windows and answers slowly now and then, so that kills land before, during
and just after a reflection. Sessions grow between kills. A kill is aimed at one of four
moments: any time (start-up included), shortly after an LLM request arrived (mid-tick), the
instant a skill file changed on disk (between the write and the commit of its event), and
shortly after a tick completed.

Afterwards a clean `skilld once` runs, then the audit: every skill parses, no temp file is left
or listed, SQLite is intact, `.usage.json` parses, every created/updated event matches a file
(its current or an earlier version) that skilld still owns, and no window produced two
different skills or a skill without its event.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from skilld.app import open_app
from skilld.config import build_config
from skilld.evolve.supervisor import Evolver
from skilld.evolve.wiring import bind_sources, llm_settings
from skilld.fsutil import TEMP_MARKER
from skilld.llm import LLMClient
from skilld.skills.document import parse_skill
from skilld.state import StateDB
from tests.campaigns.harness import (
    TICK_RAISES_EVERY_OTHER_TIME,
    fault_shim,
    log_problems,
    running,
    skilld_argv,
    tick_failure_events,
    wait_for,
)
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply

SEED = 20261130
NORMAL_KILLS = 14
FULL_KILLS = 200
SESSION_POOL = 6
#: How long a kill waits for the moment it aims at before it fires anyway.
AIM_TIMEOUT_SECONDS = 6.0

#: A small set of names, each with a few bodies: repeats become updates or `unchanged`.
SKILLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "deploy-to-staging": (
        "Deploy the service to the staging cluster.",
        (
            "1. Export `STAGING_HOST`.\n2. Run `./deploy.sh staging`.\n",
            "1. Export `STAGING_HOST`.\n2. Run `./deploy.sh staging`.\n3. Check `/healthz`.\n",
            "1. Run `make release`.\n2. Run `./deploy.sh staging --wait`.\n",
        ),
    ),
    "rotate-nginx-logs": (
        "Rotate and compress the nginx access logs.",
        (
            "1. Run `logrotate -f /etc/logrotate.d/nginx`.\n",
            "1. Run `logrotate -f /etc/logrotate.d/nginx`.\n2. Reload nginx.\n",
        ),
    ),
    "bisect-a-regression": (
        "Find the commit that introduced a regression with git bisect.",
        (
            "1. `git bisect start`.\n2. Mark good and bad.\n3. `git bisect run make test`.\n",
            "1. `git bisect start HEAD v1.0`.\n2. `git bisect run pytest -x`.\n",
        ),
    ),
    "vacuum-the-database": (
        "Reclaim space in the SQLite database file.",
        (
            "```sql\nVACUUM;\n```\nRun it while the service is stopped.\n",
            "```sql\nPRAGMA wal_checkpoint(TRUNCATE);\nVACUUM;\n```\n",
        ),
    ),
}


@dataclass
class CrashLLM:
    """Seeded answers: mostly skills from the small set, some skips, some slow."""

    rng: random.Random
    slow: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self.lock:
            roll = self.rng.random()
            name = self.rng.choice(sorted(SKILLS))
            body_index = self.rng.randrange(len(SKILLS[name][1]))
            hang = self.rng.uniform(0.05, 0.3) if self.slow and self.rng.random() < 0.4 else 0.0
        if roll < 0.3:
            reply = skip_reply("Nothing reusable in this window.")
        else:
            description, bodies = SKILLS[name]
            reply = skill_reply(name, bodies[body_index], description=description)
        reply.hang_seconds = hang
        return reply


def skill_files_snapshot(skills: Path) -> dict[str, tuple[int, int]]:
    snapshot = {}
    for path in skills.glob("*/SKILL.md"):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        snapshot[str(path)] = (stat.st_ino, stat.st_mtime_ns)
    return snapshot


#: Where a kill is aimed; the first is not a moment, so it cannot miss.
AIMS = ("anytime", "mid_request", "after_write", "between_ticks")


@dataclass
class Campaign:
    workspace: Workspace
    llm: FakeLLM
    rng: random.Random
    #: Added to every daemon's environment (a fault shim, for the audit's own test).
    env: dict[str, str] = field(default_factory=dict)
    kills: int = 0
    ticks: int = 0
    starts: int = 0
    aims: Counter[str] = field(default_factory=Counter)
    #: Kills that fired at the moment they were aimed at (not on the aim's timeout).
    hits: Counter[str] = field(default_factory=Counter)
    #: Skill files written by a daemon killed before it committed their event: (name, sha).
    in_the_gap: set[tuple[str, str]] = field(default_factory=set)
    log_lines_checked: int = 0
    violations: list[str] = field(default_factory=list)
    appended: int = 0

    def grow_sessions(self) -> None:
        name = f"session-{self.rng.randrange(SESSION_POOL)}"
        self.appended += 1
        self.workspace.add_session(name, conversation(f"topic {self.appended}", turns=1))

    def one_life(self, aim: str | None = None) -> None:
        """Start the daemon, aim a kill at one moment, SIGKILL it, read what it left."""
        for _ in range(2):  # two windows: a skip in one still leaves a write to aim at
            self.grow_sessions()
        aim = aim or self.rng.choices(AIMS, weights=[3, 3, 3, 1])[0]
        requests_before = len(self.llm.requests)
        files_before = skill_files_snapshot(self.workspace.skills)
        with running(skilld_argv("run"), self.workspace.env(**self.env)) as daemon:
            if self.rng.random() < 0.3:
                self.grow_sessions()  # content that arrives while the daemon runs
            if aim == "anytime":
                time.sleep(self.rng.uniform(0.0, 2.0))
                hit = True
            elif aim == "mid_request":
                hit = wait_for(
                    lambda: len(self.llm.requests) > requests_before, AIM_TIMEOUT_SECONDS, 0.01
                )
                time.sleep(self.rng.uniform(0.0, 0.3))
            elif aim == "after_write":
                hit = wait_for(
                    lambda: skill_files_snapshot(self.workspace.skills) != files_before,
                    AIM_TIMEOUT_SECONDS,
                    0.0005,
                )
            else:
                hit = daemon.notify.wait_ticks(1, AIM_TIMEOUT_SECONDS)
                time.sleep(self.rng.uniform(0.0, 0.5))
            exited_by_itself = daemon.process.poll()
            daemon.process.kill()
        self.kills += 1
        self.aims[aim] += 1
        self.hits[aim] += hit
        self.ticks += daemon.notify.ticks
        self.starts += daemon.notify.starts
        self.log_lines_checked += len(daemon.stderr.splitlines())
        if exited_by_itself is not None:
            self.violations.append(
                f"the daemon exited by itself with {exited_by_itself}: {daemon.stderr[-500:]!r}"
            )
        # Whatever the daemon logged before the kill counts: a tick that raised is logged
        # and the daemon goes on, so its exit code would never tell.
        self.violations += [
            f"life {self.kills}: {problem}" for problem in log_problems(daemon.stderr, killed=True)
        ]
        if daemon.notify.failed_ticks:
            self.violations.append(f"life {self.kills}: {daemon.notify.failed_ticks} ticks failed")
        if aim == "after_write" and hit:
            self.in_the_gap |= writes_without_event(self.workspace)


def writes_without_event(workspace: Workspace) -> set[tuple[str, str]]:
    """Skill files whose current text no created/updated event records: a kill between the
    write and the commit of its event."""
    with StateDB(workspace.state / "state.db") as state:
        recorded = {
            (event.skill, event.detail.get("sha256"))
            for event in state.events(kinds=("created", "updated"))
        }
    current = {
        (path.parent.name, sha256_file(path)) for path in workspace.skills.glob("*/SKILL.md")
    }
    return current - recorded


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def audit(workspace: Workspace) -> tuple[list[str], dict[str, int]]:
    """Every invariant the crash campaign proves; returns (violations, figures)."""
    violations: list[str] = []
    skills_dir, state_dir = workspace.skills, workspace.state

    for path in [*skills_dir.rglob("*"), *state_dir.rglob("*")]:
        if TEMP_MARKER in path.name:
            violations.append(f"temp file left after a clean start: {path}")
    listing = workspace.cli("skills", "list", "--json")
    if listing.returncode != 0:
        violations.append(f"skills list failed: {listing.stderr[-300:]}")
    elif TEMP_MARKER in listing.stdout:
        violations.append("a temp file is listed as a skill")

    skill_files = sorted(skills_dir.glob("*/SKILL.md"))
    for path in skill_files:
        try:
            doc = parse_skill(path.read_bytes())
        except Exception as exc:  # any failure to parse is the violation being counted
            violations.append(f"{path} does not parse: {exc}")
            continue
        if doc.name != path.parent.name:
            violations.append(f"{path} is named {doc.name!r}")

    with sqlite3.connect(state_dir / "state.db") as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    if integrity != "ok":
        violations.append(f"state.db integrity_check: {integrity}")

    usage: dict[str, Any] = {}
    try:
        usage = json.loads((skills_dir / ".usage.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        violations.append(f".usage.json does not parse: {exc}")
    if not isinstance(usage, dict):
        violations.append(".usage.json is not a JSON object")
        usage = {}

    with StateDB(state_dir / "state.db") as state:
        writes = state.events(kinds=("created", "updated"))
        provenance = state.all_provenance("default")
        ticks = state.get_meta("last_tick") is not None

    history_hashes: dict[str, set[str]] = defaultdict(set)
    for version in (state_dir / "history" / "@default").glob("*/*.md"):
        history_hashes[version.parent.name].add(sha256_file(version))

    current: dict[str, str] = {path.parent.name: sha256_file(path) for path in skill_files}
    for name, digest in current.items():
        record = provenance.get(name)
        if record is None or digest not in (record.sha256, record.prev_sha256):
            violations.append(f"{name} on disk is no longer recognised as skilld's")

    written_hashes: dict[str, set[str]] = defaultdict(set)
    windows: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for event in writes:
        name, digest = event.skill or "", event.detail.get("sha256")
        written_hashes[name].add(str(digest))
        if name not in current:
            violations.append(f"event {event.id} {event.kind} {name}: no such skill on disk")
        elif digest != current[name] and digest not in history_hashes[name]:
            violations.append(
                f"event {event.id} {event.kind} {name}: sha256 {digest} is neither the file"
                " nor one of its saved versions"
            )
        first, last = event.detail["messages"]
        windows[event.session or ""].append((first, last, name))
        if event.kind == "created" and usage.get(name, {}).get("created_by") != "agent":
            violations.append(f"{name} was created but its usage record does not say so")

    # A file whose content no event accounts for was written by a window that then settled
    # differently (or not at all): the event log would be lying about it.
    for name, digest in current.items():
        if digest not in written_hashes[name]:
            record = provenance.get(name)
            window = (
                (record.first_message, record.last_message, name)
                if record and record.first_message is not None and record.last_message is not None
                else None
            )
            violations.append(f"{name} on disk was written without a created/updated event")
            if record is not None and record.session and window is not None:
                windows[record.session].append(window)

    for session, spans in windows.items():
        spans.sort()
        reach, reach_name = -1, ""
        for first, last, name in spans:
            if first <= reach and name != reach_name:
                violations.append(
                    f"a window of {session} produced two skills: {reach_name} (up to message"
                    f" {reach}) and {name} ({first}-{last})"
                )
            if last > reach:
                reach, reach_name = last, name

    violations += tick_failure_events(state_dir / "state.db")
    figures = {
        "skills": len(skill_files),
        "created_or_updated_events": len(writes),
        "recovered": sum(1 for event in writes if event.detail.get("recovered")),
        "recorded_a_tick": int(ticks),
    }
    return violations, figures


def recovered_writes(workspace: Workspace) -> set[tuple[str, str]]:
    with StateDB(workspace.state / "state.db") as state:
        return {
            (event.skill or "", str(event.detail.get("sha256")))
            for event in state.events(kinds=("created", "updated"))
            if event.detail.get("recovered")
        }


def crash_campaign(
    workspace: Workspace, fake_llm: FakeLLM, rng: random.Random, **env: str
) -> Campaign:
    fake_llm.responder = CrashLLM(random.Random(rng.random()))
    workspace.llm_url = fake_llm.base_url
    workspace.settings = {
        "evolve": {"interval_seconds": 0.3, "cooldown_seconds": 0, "min_messages": 2},
        "llm": {"timeout_seconds": 2, "max_retries": 1},
        "skills": {"history_keep": 100000},
    }
    workspace.write_config()
    return Campaign(workspace, fake_llm, rng, env=env)


def finish(campaign: Campaign) -> tuple[list[str], dict[str, int]]:
    """A clean `skilld once`, then the audit; every write a kill caught before its event's
    commit must have been recovered as that write."""
    workspace = campaign.workspace
    campaign.llm.responder = CrashLLM(random.Random(campaign.rng.random()), slow=False)
    final = subprocess.run(
        skilld_argv("once"),
        env=workspace.env(**campaign.env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    violations = list(campaign.violations)
    if final.returncode != 0:
        violations.append(f"the final skilld once exited {final.returncode}")
    violations += [f"final once: {problem}" for problem in log_problems(final.stderr)]
    audited, figures = audit(workspace)
    violations += audited
    recovered = recovered_writes(workspace)
    for name, digest in sorted(campaign.in_the_gap - recovered):
        violations.append(f"{name} ({digest[:12]}) was written before a kill, never recovered")
    figures["in_the_gap"] = len(campaign.in_the_gap)
    figures["gap_recovered"] = len(campaign.in_the_gap & recovered)
    return violations, figures


@pytest.mark.slow
def test_crash_campaign(
    workspace: Workspace,
    fake_llm: FakeLLM,
    full_size: bool,
    campaign_figures: Callable[..., str],
) -> None:
    campaign = crash_campaign(workspace, fake_llm, random.Random(SEED))
    for _ in range(FULL_KILLS if full_size else NORMAL_KILLS):
        campaign.one_life()
    violations, figures = finish(campaign)
    campaign_figures(
        "crash",
        kills=campaign.kills,
        ticks=campaign.ticks,
        starts=campaign.starts,
        aimed=dict(campaign.aims),
        hit=dict(campaign.hits),
        log_lines_checked=campaign.log_lines_checked,
        llm_requests=len(fake_llm.requests),
        skills=figures["skills"],
        writes=figures["created_or_updated_events"],
        killed_between_write_and_event=figures["in_the_gap"],
        recovered_writes=figures["recovered"],
        violations=len(violations),
    )
    assert figures["recorded_a_tick"] == 1
    assert figures["skills"] > 0
    # The kills reached the moments they were aimed at: mid-request, between ticks, and
    # between a file's write and its event's commit (recovered afterwards as that write).
    assert all(campaign.hits[aim] > 0 for aim in AIMS), campaign.hits
    assert figures["in_the_gap"] > 0 and figures["gap_recovered"] == figures["in_the_gap"]
    assert not violations, "\n".join(violations[:40])


def test_crash_audit_sees_ticks_that_raise(workspace: Workspace, fake_llm: FakeLLM) -> None:
    """A tick that raises inside `skilld run` is logged and the daemon goes on; the campaign
    must see it anyway (here every other tick raises, through a shim)."""
    shim = fault_shim(workspace.root / "shim", TICK_RAISES_EVERY_OTHER_TIME)
    campaign = crash_campaign(workspace, fake_llm, random.Random(SEED), **shim)
    for _ in range(2):
        campaign.one_life("between_ticks")
    violations, _ = finish(campaign)
    assert any("tick_failed" in violation for violation in violations), violations
    assert any("ticks failed" in violation for violation in violations), violations
    assert any("tick failed: RuntimeError" in violation for violation in violations), violations


def test_audit_catches_a_write_without_its_event(workspace: Workspace) -> None:
    """The audit can fail: a skill file no event accounts for is a violation."""
    workspace.write_config()
    assert workspace.cli("once").returncode == 0
    folder = workspace.skills / "hand-made"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: hand-made\ndescription: Mine.\n---\nBody.\n")
    (workspace.skills / f".x{TEMP_MARKER}1-abc").write_text("half")
    violations, _ = audit(workspace)
    assert any("no longer recognised" in v for v in violations)
    assert any("without a created/updated event" in v for v in violations)
    assert any("temp file left" in v for v in violations)


class SimulatedCrash(Exception):
    pass


@pytest.mark.anyio
async def test_a_write_whose_event_was_lost_settles_as_that_write(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """A crash between a skill's write and its event's commit, replayed deterministically:
    the next tick records the write as the window's outcome instead of asking again (the model
    could name another skill for the same window)."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "s1.jsonl").write_text(
        "".join(json.dumps(m) + "\n" for m in conversation()), encoding="utf-8"
    )
    config = build_config(
        {
            "skills": {"dir": str(tmp_path / "skills")},
            "state": {"dir": str(tmp_path / "state")},
            "evolve": {"cooldown_seconds": 0, "min_messages": 2, "backfill": "all"},
            "llm": {"base_url": fake_llm.base_url, "model": "test-model", "max_retries": 0},
            "sources": [{"kind": "jsonl", "path": str(sessions)}],
        },
        environ={},
    )
    with open_app(config, prepare=True) as app:
        async with LLMClient(llm_settings(config)) as llm:
            evolver = Evolver(app, llm, bind_sources(config, app.routing))
            commit = app.library.commit

            def crash_in_commit(*args: Any, **kwargs: Any) -> Any:
                raise SimulatedCrash  # inside the commit's transaction: rolled back

            app.library.commit = crash_in_commit  # type: ignore[method-assign]
            fake_llm.push(skill_reply("first-answer"))
            with pytest.raises(BaseException) as crash:
                await evolver.tick()
            assert crash.type is SimulatedCrash or crash.group_contains(SimulatedCrash)
            assert app.state.events(kinds=("created",)) == []
            # The answer was kept, with the window, before the write: nothing is re-asked.
            assert [p.body["name"] for p in app.state.kept_proposals()] == ["first-answer"]
            assert (tmp_path / "skills" / "first-answer" / "SKILL.md").is_file()

            app.library.commit = commit  # type: ignore[method-assign]
            fake_llm.push(skill_reply("second-answer"))
            report = await evolver.tick()
            assert dict(report.outcomes) == {"created": 1}
            assert len(fake_llm.requests) == 1  # not asked again
            created = app.state.events(kinds=("created",))
            assert [e.skill for e in created] == ["first-answer"]
            assert created[0].detail["messages"] == [0, len(conversation()) - 1]
            assert "recovered" in created[0].detail
            assert app.library.usage.get("first-answer")["created_by"] == "agent"
            assert app.state.sessions_with_pending() == []
    assert not (tmp_path / "skills" / "second-answer").exists()


def test_a_crash_in_a_history_write_leaves_no_temp_after_start(workspace: Workspace) -> None:
    workspace.write_config()
    crashed = subprocess.Popen([sys.executable, "-c", "pass"])
    crashed.wait()  # a writer that is gone
    stray = (
        workspace.state
        / "history"
        / "@default"
        / "some-skill"
        / f".20261130T0000Z-ab.md{TEMP_MARKER}{crashed.pid}-0f"
    )
    stray.parent.mkdir(parents=True)
    stray.write_text("half a version")
    assert workspace.cli("once").returncode == 0
    assert not stray.exists()
