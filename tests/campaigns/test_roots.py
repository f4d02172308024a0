"""Vanishing-roots campaign: source roots renamed away and back between ticks, many times.

An unmounted volume, a sidecar whose mount arrives late, a synced folder being replaced: the
root of a source is gone for a tick and then back, with the same files (and the sessions went on
while it was away). Two sources: a `jsonl` root named directly, and a `claude-code` projects root
named through a symlink (which dangles while its target is away). Every turn carries a unique
marker, so the server can count how often each was sent: a root that comes back must not be read
again from the start (each marker reflected exactly once), a session key must not change, and
nothing written may be lost (every marker reflected).

Normal size: 50 cycles of `skilld run` (a tick with the roots away, a tick with them back), and
1 cycle of `skilld once` (cursors reloaded from state.db by every process). `--full`: 500
cycles of `skilld run` and 50 of `skilld once`.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from skilld.state import StateDB
from tests.campaigns.harness import (
    log_problems,
    running,
    skilld_argv,
    tick_failure_events,
    wait_for,
    window_of,
)
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply

SEED = 20261202
NORMAL_RUN_CYCLES = 50
FULL_RUN_CYCLES = 500
NORMAL_ONCE_CYCLES = 1
FULL_ONCE_CYCLES = 50
SESSIONS_PER_SOURCE = 3
_TURN = re.compile(r"#T(\d+)#")


@dataclass
class Counting:
    """Answers every window (a skip or a new skill) and counts the turns each answer covered.
    Records only: the test asserts."""

    seen: list[tuple[str, frozenset[int]]] = field(default_factory=list)
    unparsed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: dict[str, Any]) -> Reply:
        window = window_of(request)
        if window is None or window.merge or window.repair:
            with self.lock:
                self.unparsed += 1
            return skip_reply("Not a first ask.")
        turns = frozenset(int(t) for t in _TURN.findall(request["messages"][1]["content"]))
        with self.lock:
            self.seen.append((window.session, turns))
        if min(turns, default=0) % 2:
            return skip_reply("Nothing reusable.")
        name = f"turns-{min(turns, default=0)}-{window.first}"
        seed = uuid.uuid5(uuid.NAMESPACE_URL, f"{window.session}/{name}").hex
        return skill_reply(
            name,
            content=f"1. Open the {seed[:12]} runbook.\n2. Verify {seed[12:24]}.\n",
            description=f"Procedure {seed[24:]}.",
        )

    def turns_asked(self) -> Counter[int]:
        with self.lock:
            return Counter(turn for _, turns in self.seen for turn in turns)


@dataclass
class Roots:
    """The two source roots of a workspace, their sessions, and the turns written into them."""

    base: Path
    rng: random.Random
    turns: int = 0
    written: set[int] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    away: bool = False
    cycles: int = 0

    @property
    def jsonl(self) -> Path:
        return self.base / "sessions"

    @property
    def claude(self) -> Path:
        return self.base / "claude" / "projects"

    @property
    def claude_link(self) -> Path:
        return self.base / "claude-link"

    def create(self) -> list[dict[str, Any]]:
        self.jsonl.mkdir(parents=True)
        (self.claude / "-home-dev-proj").mkdir(parents=True)
        self.claude_link.symlink_to(self.claude)
        for index in range(SESSIONS_PER_SOURCE):
            self.grow("jsonl", index)
            self.grow("claude", index)
        return [
            {"kind": "jsonl", "path": str(self.jsonl)},
            {"kind": "claude-code", "path": str(self.claude_link)},
        ]

    def _where(self, root: Path) -> Path:
        return root.with_name(root.name + ".away") if self.away else root

    def grow(self, kind: str | None = None, index: int | None = None) -> None:
        """One more turn in a session (a new one sometimes), wherever its root is now."""
        kind = kind or self.rng.choice(["jsonl", "claude"])
        index = self.rng.randrange(SESSIONS_PER_SOURCE + 1) if index is None else index
        self.turns += 1
        turn = self.turns
        self.written.add(turn)
        question, answer = f"Please fix #T{turn}#.", f"Fixed #T{turn}#: run make test first."
        if kind == "jsonl":
            path = self._where(self.jsonl) / f"s{index}.jsonl"
            records: list[dict[str, Any]] = [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
            self.keys.add(f"jsonl:s{index}")
        else:
            session_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"roots/{index}"))
            path = self._where(self.claude) / "-home-dev-proj" / f"{session_id}.jsonl"
            common = {"sessionId": session_id, "timestamp": "2026-11-30T10:00:00Z", "cwd": "/p"}
            records = [
                {"type": "user", "uuid": f"u{turn}", **common,
                 "message": {"role": "user", "content": question}},
                {"type": "assistant", "uuid": f"a{turn}", **common,
                 "message": {"id": f"msg_{turn}", "role": "assistant",
                             "content": [{"type": "text", "text": answer}]}},
            ]  # fmt: skip
            self.keys.add(f"claude-code:{session_id}")
        with path.open("a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(record) + "\n" for record in records))

    def toggle(self) -> None:
        """Both roots renamed away, or back."""
        for root in (self.jsonl, self.claude):
            away = root.with_name(root.name + ".away")
            os.rename(*((root, away) if not self.away else (away, root)))
        self.away = not self.away
        self.cycles += not self.away


def new_workspace(root: Path, fake: FakeLLM, rng: random.Random) -> tuple[Workspace, Roots]:
    workspace = Workspace(root, llm_url=fake.base_url)
    workspace.skills.mkdir(parents=True)
    roots = Roots(root, rng)
    workspace.sources = roots.create()
    workspace.settings = {
        "evolve": {"interval_seconds": 0.01, "cooldown_seconds": 0, "min_messages": 2},
        "llm": {"max_calls_per_hour": 0},
    }
    workspace.write_config()
    return workspace, roots


@dataclass
class Outcome:
    cycles: int = 0
    ticks: int = 0
    turns: int = 0
    asks: int = 0
    reflected_twice: int = 0
    lost: int = 0
    violations: list[str] = field(default_factory=list)


def audit(workspace: Workspace, roots: Roots, counting: Counting, outcome: Outcome) -> None:
    asked = counting.turns_asked()
    outcome.turns += len(roots.written)
    outcome.asks += len(counting.seen)
    twice = sorted(turn for turn, count in asked.items() if count > 1)
    lost = sorted(roots.written - asked.keys())
    outcome.reflected_twice += len(twice)
    outcome.lost += len(lost)
    if twice:
        outcome.violations.append(f"turns reflected more than once: {twice[:20]}")
    if lost:
        outcome.violations.append(f"turns never reflected: {lost[:20]}")
    if counting.unparsed:
        outcome.violations.append(f"{counting.unparsed} requests were not a window's first ask")
    with StateDB(workspace.state / "state.db") as state:
        keys = {row["key"] for row in state.conn.execute("SELECT key FROM sessions")}
        pending = state.sessions_with_pending()
    if keys != roots.keys:
        outcome.violations.append(
            f"session keys changed: new {sorted(keys - roots.keys)},"
            f" gone {sorted(roots.keys - keys)}"
        )
    if pending:
        outcome.violations.append(f"sessions still pending: {pending}")
    outcome.violations += tick_failure_events(workspace.state / "state.db")


def by_run(root: Path, fake: FakeLLM, cycles: int, rng: random.Random) -> Outcome:
    counting = Counting()
    fake.responder = counting
    workspace, roots = new_workspace(root, fake, rng)
    outcome = Outcome()
    with running(skilld_argv("run"), workspace.env()) as daemon:
        for _ in range(2 * cycles):
            if not daemon.notify.wait_full_tick():
                outcome.violations.append("the daemon stopped ticking")
                break
            roots.toggle()
            if rng.random() < 0.2:
                roots.grow()
        if roots.away:
            roots.toggle()
        written = len(roots.written)
        if not wait_for(lambda: len(counting.turns_asked()) >= written, 60, poll=0.05):
            outcome.violations.append("not every turn was reflected within a minute")
        # One more tick after the last answer: a re-read would be asked for now.
        daemon.notify.wait_full_tick()
        outcome.ticks = daemon.notify.all_ticks()
    outcome.violations += daemon.problems()
    outcome.cycles = roots.cycles
    audit(workspace, roots, counting, outcome)
    return outcome


def by_once(root: Path, fake: FakeLLM, cycles: int, rng: random.Random) -> Outcome:
    counting = Counting()
    fake.responder = counting
    workspace, roots = new_workspace(root, fake, rng)
    outcome = Outcome()

    def once() -> None:
        result = workspace.cli("once")
        outcome.ticks += 1
        if result.returncode != 0:
            outcome.violations.append(f"skilld once exited {result.returncode}")
        outcome.violations += [f"once: {problem}" for problem in log_problems(result.stderr)]

    for _ in range(cycles):
        once()
        roots.toggle()
        roots.grow()
        once()
        roots.toggle()
    once()
    outcome.cycles = roots.cycles
    audit(workspace, roots, counting, outcome)
    return outcome


@pytest.mark.slow
def test_vanishing_roots_campaign(
    tmp_path: Path, fake_llm: FakeLLM, full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    rng = random.Random(SEED)
    run = by_run(
        tmp_path / "run", fake_llm, FULL_RUN_CYCLES if full_size else NORMAL_RUN_CYCLES, rng
    )
    once = by_once(
        tmp_path / "once", fake_llm, FULL_ONCE_CYCLES if full_size else NORMAL_ONCE_CYCLES, rng
    )
    violations = run.violations + once.violations
    campaign_figures(
        "vanishing roots",
        run_cycles=run.cycles,
        run_ticks=run.ticks,
        once_cycles=once.cycles,
        once_ticks=once.ticks,
        turns=run.turns + once.turns,
        asks=run.asks + once.asks,
        reflected_twice=run.reflected_twice + once.reflected_twice,
        lost=run.lost + once.lost,
        violations=len(violations),
    )
    assert run.cycles >= (FULL_RUN_CYCLES if full_size else NORMAL_RUN_CYCLES)
    assert not violations, "\n".join(violations[:40])


def test_roots_audit_sees_a_turn_asked_twice_and_one_never(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    roots = Roots(tmp_path, random.Random(1), written={1, 2, 3}, keys={"jsonl:s0"})
    counting = Counting(seen=[("jsonl:s0", frozenset({1, 2})), ("jsonl:s0", frozenset({2}))])
    outcome = Outcome()
    audit(workspace, roots, counting, outcome)
    assert (outcome.reflected_twice, outcome.lost) == (1, 1)
    assert any("session keys changed" in violation for violation in outcome.violations)
