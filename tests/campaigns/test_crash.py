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
import secrets
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import defaultdict
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
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply

SEED = 20261130
NORMAL_KILLS = 20
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


@dataclass
class TickCounter:
    """Counts `STATUS=tick …` datagrams the daemon sends to `$NOTIFY_SOCKET` (sd_notify)."""

    name: str = field(default_factory=lambda: f"skilld-crash-{secrets.token_hex(6)}")
    ticks: int = 0
    starts: int = 0

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name)
        self.sock.setblocking(False)

    @property
    def address(self) -> str:
        return "@" + self.name

    def drain(self) -> int:
        """Read what arrived; returns the ticks counted so far."""
        while True:
            try:
                payload = self.sock.recv(65536).decode("utf-8", "replace")
            except BlockingIOError:
                return self.ticks
            for line in payload.splitlines():
                self.ticks += line.startswith("STATUS=tick ")
                self.starts += line == "READY=1"

    def close(self) -> None:
        self.sock.close()


def skill_files_snapshot(skills: Path) -> dict[str, tuple[int, int]]:
    snapshot = {}
    for path in skills.glob("*/SKILL.md"):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        snapshot[str(path)] = (stat.st_ino, stat.st_mtime_ns)
    return snapshot


def wait_for(condition: Callable[[], bool], timeout: float, poll: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll)
    return False


@dataclass
class Campaign:
    workspace: Workspace
    llm: FakeLLM
    rng: random.Random
    counter: TickCounter
    kills: int = 0
    aims: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    violations: list[str] = field(default_factory=list)
    appended: int = 0

    def grow_sessions(self) -> None:
        name = f"session-{self.rng.randrange(SESSION_POOL)}"
        self.appended += 1
        self.workspace.add_session(name, conversation(f"topic {self.appended}", turns=1))

    def one_life(self) -> None:
        """Start the daemon, aim a kill at one moment, SIGKILL it, drain its output."""
        for _ in range(2):  # two windows: a skip in one still leaves a write to aim at
            self.grow_sessions()
        aim = self.rng.choices(
            ["anytime", "mid_request", "after_write", "between_ticks"], weights=[3, 3, 3, 1]
        )[0]
        ticks_before = self.counter.ticks
        requests_before = len(self.llm.requests)
        files_before = skill_files_snapshot(self.workspace.skills)
        daemon = self.workspace.popen("run", NOTIFY_SOCKET=self.counter.address)
        try:
            if self.rng.random() < 0.3:
                self.grow_sessions()  # content that arrives while the daemon runs
            if aim == "anytime":
                time.sleep(self.rng.uniform(0.0, 2.0))
            elif aim == "mid_request":
                wait_for(
                    lambda: len(self.llm.requests) > requests_before, AIM_TIMEOUT_SECONDS, 0.01
                )
                time.sleep(self.rng.uniform(0.0, 0.3))
            elif aim == "after_write":
                wait_for(
                    lambda: skill_files_snapshot(self.workspace.skills) != files_before,
                    AIM_TIMEOUT_SECONDS,
                    0.0005,
                )
            else:
                wait_for(lambda: self.counter.drain() > ticks_before, AIM_TIMEOUT_SECONDS, 0.01)
                time.sleep(self.rng.uniform(0.0, 0.5))
            exited_by_itself = daemon.poll()
            daemon.kill()
            _, stderr = daemon.communicate(timeout=30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.communicate(timeout=30)
        if exited_by_itself is not None:
            self.violations.append(
                f"the daemon exited by itself with {exited_by_itself}: {stderr[-500:]!r}"
            )
        self.kills += 1
        self.aims[aim] += 1
        self.counter.drain()


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

    figures = {
        "skills": len(skill_files),
        "created_or_updated_events": len(writes),
        "recovered": sum(1 for event in writes if event.detail.get("recovered")),
        "recorded_a_tick": int(ticks),
    }
    return violations, figures


def test_crash_campaign(
    workspace: Workspace,
    fake_llm: FakeLLM,
    full_size: bool,
    campaign_figures: Callable[..., str],
) -> None:
    rng = random.Random(SEED)
    fake_llm.responder = CrashLLM(random.Random(rng.random()))
    workspace.llm_url = fake_llm.base_url
    workspace.settings = {
        "evolve": {"interval_seconds": 0.3, "cooldown_seconds": 0, "min_messages": 2},
        "llm": {"timeout_seconds": 2, "max_retries": 1},
        "skills": {"history_keep": 100000},
    }
    workspace.write_config()
    counter = TickCounter()
    campaign = Campaign(workspace, fake_llm, rng, counter)
    try:
        for _ in range(FULL_KILLS if full_size else NORMAL_KILLS):
            campaign.one_life()
    finally:
        counter.close()

    fake_llm.responder = CrashLLM(random.Random(rng.random()), slow=False)
    final = workspace.cli("once")
    assert final.returncode == 0, final.stderr[-2000:]
    violations, figures = audit(workspace)
    violations = campaign.violations + violations
    campaign_figures(
        "crash",
        kills=campaign.kills,
        ticks=counter.ticks,
        starts=counter.starts,
        aimed=dict(campaign.aims),
        llm_requests=len(fake_llm.requests),
        skills=figures["skills"],
        writes=figures["created_or_updated_events"],
        recovered_writes=figures["recovered"],
        violations=len(violations),
    )
    assert figures["recorded_a_tick"] == 1
    assert figures["skills"] > 0
    assert not violations, "\n".join(violations[:40])


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
