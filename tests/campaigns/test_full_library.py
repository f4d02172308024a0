"""Full-library campaign: `max_managed` reached, and room made again in each way a person can.

With the library full, a new skill is refused (`cap`, one event) and its judged proposal kept;
the session goes on: its later windows, and other sessions' updates of existing skills, still
land. When room appears (`skilld skills delete`, `skilld skills archive`, a raised cap through the
config and SIGHUP) the kept proposal is written by the running daemon without a new LLM call.

Normal size: each way once. `--full`: each way five times over.
"""

from __future__ import annotations

import functools
import json
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from skilld.state import StateDB
from tests.campaigns.harness import (
    DaemonRun,
    Proposer,
    body_of,
    running,
    skilld_argv,
    tick_failure_events,
    wait_for,
)
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM

ROOMS = ("delete", "archive", "raise the cap")


@dataclass
class Campaign:
    workspace: Workspace
    proposer: Proposer
    daemon: DaemonRun
    cap: int
    sessions: int = 0
    checks: int = 0
    kept_at_cap: int = 0
    updates_at_cap: int = 0
    rooms: Counter[str] = field(default_factory=Counter)
    written_after_room: int = 0
    calls_after_room: int = 0
    windows: Counter[str] = field(default_factory=Counter)
    updates: Counter[str] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def propose(self, name: str, version: int = 1, session: str | None = None) -> str:
        """A window proposing `name` (v`version`): a new session, or more of `session`."""
        if session is None:
            self.sessions += 1
            session = f"jsonl:s{self.sessions}"
        with self.proposer.lock:
            self.proposer.wanted[session] = body_of(name, version)
        self.windows[session] += 1
        self.updates[session] += version > 1
        self.workspace.add_session(session.split(":")[1], conversation(f"{name} v{version}"))
        return session

    def text(self, name: str) -> str | None:
        path = self.workspace.skills / name / "SKILL.md"
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def written(self, name: str, version: int = 1) -> bool:
        text = self.text(name)
        return text is not None and body_of(name, version)["content"] in text

    def kept(self) -> list[str]:
        with StateDB(self.workspace.state / "state.db") as state:
            return [p.body["name"] for p in state.kept_proposals() if p.status == "cap"]

    def wait(self, condition: Callable[[], bool], what: str) -> bool:
        self.checks += 1
        if wait_for(lambda: condition() or not self.daemon.alive, 60, poll=0.05) and (
            self.daemon.alive
        ):
            return True
        self.violations.append(f"{what}: never happened")
        return False

    def managed(self) -> list[str]:
        return sorted(p.parent.name for p in self.workspace.skills.glob("*/SKILL.md"))

    def fill(self, prefix: str) -> None:
        """New skills until the library is full."""
        for index in range(self.cap - len(self.managed())):
            name = f"{prefix}-{index}"
            self.propose(name)
            self.wait(functools.partial(self.written, name), f"{name} created")

    def at_cap(self, name: str) -> str:
        """A new skill proposed to the full library: kept, with one `cap` event."""
        session = self.propose(name)
        if self.wait(lambda: name in self.kept(), f"{name} kept at the cap"):
            self.kept_at_cap += 1
        self.checks += 1
        if self.written(name):
            self.violations.append(f"{name} was written past the cap")
        if self.kept_at_cap == 1:  # once is enough to see that a person is told
            self.checks += 1
            status = json.loads(self.workspace.cli("status", "--json").stdout)
            waiting = [library["proposals_at_cap"] for library in status["libraries"]]
            if waiting != [1]:
                self.violations.append(f"status shows {waiting} proposals at the cap, not 1")
        return session

    def update_at_cap(self, name: str, session: str | None = None) -> None:
        """An update of an existing skill (to a text it never had) lands although the library
        is full."""
        version = self.versions[name] = max(self.versions[name], 1) + 1
        self.propose(name, version, session)
        if self.wait(lambda: self.written(name, version), f"{name} v{version} at the cap"):
            self.updates_at_cap += 1

    def make_room(self, how: str, victim: str, kept: str) -> None:
        """Room made `how`; the kept proposal `kept` is written with no new LLM call."""
        calls = self.proposer.calls
        if how == "delete":
            done = self.workspace.cli("skills", "delete", victim)
        elif how == "archive":
            done = self.workspace.cli("skills", "archive", victim)
        else:
            self.cap += 1
            self.workspace.settings["skills"] = {"max_managed": self.cap}
            self.workspace.write_config()
            self.daemon.process.send_signal(signal.SIGHUP)
            done = None
        self.checks += 1
        if done is not None and done.returncode != 0:
            self.violations.append(f"skills {how} {victim} failed: {done.stderr[-300:]}")
        self.rooms[how] += 1
        if self.wait(lambda: self.written(kept), f"{kept} written after {how}"):
            self.written_after_room += 1
        self.calls_after_room += self.proposer.calls - calls


def audit(campaign: Campaign) -> None:
    """Each window asked once, each update merged once, one `cap` event and one `created`
    event per kept proposal, nothing kept at the end."""
    proposer, violations = campaign.proposer, campaign.violations
    if proposer.other:
        violations.append(f"{proposer.other} unexpected requests")
    for session, windows in campaign.windows.items():
        if proposer.asks[session] != windows:
            violations.append(f"{session}: {proposer.asks[session]} asks for {windows} windows")
        if proposer.merges[session] != campaign.updates[session]:
            violations.append(
                f"{session}: {proposer.merges[session]} merges for"
                f" {campaign.updates[session]} updates"
            )
    with StateDB(campaign.workspace.state / "state.db") as state:
        caps = Counter(e.skill for e in state.events(kinds=("cap",)))
        created = Counter(e.skill for e in state.events(kinds=("created",)))
        kept = state.kept_proposals()
    for name, count in caps.items():
        if count != 1:
            violations.append(f"{name}: {count} cap events")
        if created[name] != 1:
            violations.append(f"{name}: kept at the cap, then created {created[name]} times")
    if kept:
        violations.append(f"proposals still kept: {[p.body['name'] for p in kept]}")
    violations += tick_failure_events(campaign.workspace.state / "state.db")


def test_full_library_campaign(
    tmp_path: Path, fake_llm: FakeLLM, full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    workspace = Workspace(tmp_path, llm_url=fake_llm.base_url)
    workspace.skills.mkdir()
    workspace.sessions.mkdir()
    cap = 2
    workspace.settings = {
        "evolve": {"interval_seconds": 0.01, "cooldown_seconds": 0, "min_messages": 2},
        "llm": {"max_calls_per_hour": 0},
        "skills": {"max_managed": cap},
    }
    workspace.write_config()
    proposer = Proposer()
    fake_llm.responder = proposer
    with running(skilld_argv("run"), workspace.env()) as daemon:
        campaign = Campaign(workspace, proposer, daemon, cap)
        for round_ in range(5 if full_size else 1):
            for how in ROOMS:
                step = f"r{round_}-{how.split()[0]}"
                campaign.fill(f"{step}-full")
                first_existing = campaign.managed()[0]
                waiting = f"{step}-waiting"
                session = campaign.at_cap(waiting)
                # The session whose proposal waits goes on: its next window updates a skill.
                campaign.update_at_cap(first_existing, session)
                # Another session's update of an existing skill lands too.
                campaign.update_at_cap(campaign.managed()[-1])
                campaign.make_room(how, first_existing, waiting)
    audit(campaign)
    violations = campaign.violations + daemon.problems()
    campaign_figures(
        "full library",
        rooms=dict(campaign.rooms),
        kept_at_cap=campaign.kept_at_cap,
        updates_at_cap=campaign.updates_at_cap,
        written_after_room=campaign.written_after_room,
        llm_calls=proposer.calls,
        calls_after_room=campaign.calls_after_room,
        checks=campaign.checks,
        violations=len(violations),
    )
    assert sum(campaign.rooms.values()) == len(ROOMS) * (5 if full_size else 1)
    assert campaign.calls_after_room == 0
    assert not violations, "\n".join(violations[:40])
