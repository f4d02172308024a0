"""LLM fault campaign: a loopback server that answers every way a real one can go wrong.

Each request draws (seeded) one of: 429 with and without `Retry-After`, 500, 503, a hang longer
than the timeout, a reset connection, HTML with 200, a truncated body, truncated JSON content,
fenced JSON, a `<think>` block before the JSON, empty content, `finish_reason: length`, a
refusal, 6 MiB of text (within what the client reads of a reply), a plain skip and a plain
skill.

Two drivers, both audited the same way:
- in-process, the daemon's own Evolver with a clock the test owns and millisecond backoff, so
  that a thousand requests take seconds;
- the real `skilld run` subprocess (it must stay up and stop cleanly on SIGTERM), then
  `skilld once` until every window is settled.

Proved: every window ends as created, updated, unchanged, skipped, invalid or error (given up),
or is still pending with an error or deferral on record; every session's settled windows tile
its messages with no gap and no overlap; no chat call makes more than `max_retries + 1` HTTP
attempts (plus the documented response-format fallbacks); no request echoes a huge reply back.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from skilld.app import open_app
from skilld.config import build_config
from skilld.evolve.supervisor import Evolver
from skilld.evolve.wiring import bind_sources, llm_settings
from skilld.llm import LLMClient
from skilld.state import Held, SessionState, StateDB
from tests.campaigns.harness import (
    TICK_RAISES_EVERY_OTHER_TIME,
    fault_shim,
    last_event_id,
    log_problems,
    running,
    skilld_argv,
    tick_failure_events,
)
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, completion

SEED = 424242
SESSION_POOL = 16
#: `skilld run` lives: each stops at its share of the requests or after this long.
RUN_LIFE_SECONDS = 15.0
RUN_REQUESTS_PER_LIFE = 50
MAX_RETRIES = 2
SUBPROCESS_MAX_RETRIES = 1
MAX_ATTEMPTS = 3
TIMEOUT_SECONDS = 0.3
HANG_SECONDS = 0.7
#: A request is bounded by the window, the prompt and the skill list; anything near this size
#: carries a reply echoed back whole.
REQUEST_BYTES_LIMIT = 1_000_000
#: Outcomes that settle a window (an error settles it only once the attempts are used up).
SETTLED_KINDS = frozenset(
    {"created", "updated", "unchanged", "skipped", "invalid", "error", "kept"}
)
ALL_WINDOW_KINDS = SETTLED_KINDS | {"cap", "protected", "staged"}

FAULTS = (
    "429 retry-after",
    "429",
    "500",
    "503",
    "hang",
    "reset",
    "html 200",
    "truncated body",
    "truncated json",
    "fenced json",
    "think json",
    "empty",
    "length",
    "refusal",
    "6 MiB",
    "skip",
    "skill",
)

SKILL_NAMES = ("rebuild-the-index", "restart-the-worker", "pin-a-dependency")
_MARKER = re.compile(r"^(Merge into \S+: s|S)ession (\S+) \((\S+)\), messages (\d+)\D(\d+)[:.]")
_HUGE_TEXT = ("All work and no play makes Jack a dull boy. " * 240_000)[: 6 * 1024 * 1024]
_HUGE_BODY = json.dumps(completion(_HUGE_TEXT)).encode()


def proposal(rng: random.Random) -> str:
    name = rng.choice(SKILL_NAMES)
    step = rng.randrange(3)
    return json.dumps(
        {
            "evolve": True,
            "name": name,
            "description": f"How to {name.replace('-', ' ')} safely.",
            "whenToUse": "When it is stuck.",
            "content": f"1. Check the state.\n2. Step {step}.\n```bash\necho '{{ok}}'\n```\n",
            "reason": "It took several tries.",
        }
    )


def fault_reply(fault: str, rng: random.Random, retry_after: str) -> Reply:
    skill = proposal(rng)
    if fault == "429 retry-after":
        return Reply(status=429, body='{"error": {"message": "slow down"}}',
                     headers={"Retry-After": retry_after})  # fmt: skip
    if fault == "429":
        return Reply(status=429, body='{"error": {"message": "rate limited"}}')
    if fault in ("500", "503"):
        return Reply(status=int(fault), body='{"error": {"message": "overloaded"}}')
    if fault == "hang":
        return Reply(hang_seconds=HANG_SECONDS, body=completion(skill))
    if fault == "reset":
        return Reply(reset=True)
    if fault == "html 200":
        return Reply(body="<html><body>502 Bad Gateway</body></html>",
                     headers={"Content-Type": "text/html"})  # fmt: skip
    if fault == "truncated body":
        whole = json.dumps(completion(skill))
        return Reply(body=whole[: len(whole) // 2])
    if fault == "truncated json":
        return Reply(body=completion(skill[: len(skill) // 2]))
    if fault == "fenced json":
        return Reply(body=completion(f"Here it is:\n```json\n{skill}\n```\n"))
    if fault == "think json":
        think = '<think>Maybe {"evolve": false, "reason": "draft"}? No.</think>\n'
        return Reply(body=completion(think + skill))
    if fault == "empty":
        return Reply(body=completion(""))
    if fault == "length":
        return Reply(body=completion(skill[: len(skill) // 3], finish_reason="length"))
    if fault == "refusal":
        body = completion("")
        body["choices"][0]["message"] = {
            "role": "assistant",
            "content": None,
            "refusal": "I can't help with that.",
        }
        return Reply(body=body)
    if fault == "6 MiB":
        return Reply(body=_HUGE_BODY)
    if fault == "skip":
        return Reply(body=completion(json.dumps({"evolve": False, "reason": "Nothing new."})))
    return Reply(body=completion(skill))


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it."""

    phase: int
    session: str
    first: int
    chat: int  # 0: the first ask of a window, 1: its repair request
    response_format: str
    size: int
    fault: str


@dataclass
class FaultLLM:
    rng: random.Random
    retry_after: str
    phase: int = 0
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or [{}, {}]
        match = _MARKER.match(str(messages[1].get("content", "")) if len(messages) > 1 else "")
        response_format = (request.get("response_format") or {}).get("type", "none")
        size = len(json.dumps(request))
        with self.lock:
            fault = self.rng.choice(FAULTS)
            reply = fault_reply(fault, self.rng, self.retry_after)
            self.seen.append(
                Seen(
                    self.phase,
                    match.group(2) if match else "?",
                    int(match.group(4)) if match else -1,
                    # 0/1: a window's ask and its repair; 2/3: a merge and its repair
                    (2 if match and match.group(1) != "S" else 0)
                    + (0 if len(messages) <= 2 else 1),
                    response_format,
                    size,
                    fault,
                )
            )
        return reply


def attempt_bound_violations(seen: list[Seen], phases: set[int], max_retries: int) -> list[str]:
    """In a phase of one tick, each (window, chat) group is one chat() call."""
    groups: dict[tuple[int, str, int, int], list[Seen]] = defaultdict(list)
    for request in seen:
        if request.phase in phases:
            groups[(request.phase, request.session, request.first, request.chat)].append(request)
    violations = []
    for key, requests in groups.items():
        fallbacks = len({r.response_format for r in requests}) - 1
        if len(requests) > max_retries + 1 + fallbacks:
            violations.append(
                f"chat call {key} made {len(requests)} requests"
                f" (bound {max_retries + 1} + {fallbacks} fallbacks):"
                f" {[r.fault for r in requests]}"
            )
    return violations


def window_violations(
    state_db: Path, *, last_tick_after: int
) -> tuple[list[str], Counter[str], int]:
    """Every session's settled windows tile its messages; what is unsettled has a reason.

    A window counts once, by its last event: a kept proposal's window may carry a `cap` or a
    failed write first and its `created` later, and until then it is kept (in state.db). A
    session still pending at the end needs a reason from the last tick (its events are those
    after `last_tick_after`): its own failed attempt at its watermark, or a deferral that tick
    counted. An outage's event names no session, so it excuses only as many sessions as the
    tick reported waiting, never every pending one.

    Returns (violations, final outcome per window, sessions still pending).
    """
    violations: list[str] = []
    outcomes: Counter[str] = Counter()
    with StateDB(state_db) as state:
        keys = [row["key"] for row in state.conn.execute("SELECT key FROM sessions")]
        events = state.events(kinds=tuple(sorted(ALL_WINDOW_KINDS)))
        last_tick = state.get_meta("last_tick") or {}
        sessions = {key: state.session(key) for key in keys}
        # A kept proposal's window is judged and paid for; its write waits (the cap, a merge
        # whose LLM call hit an outage): it is settled as far as the window is concerned.
        kept = {
            (p.session, p.first_message, p.last_message)
            for p in state.kept_proposals()
            if p.session is not None
        }
    # (session, first, last) -> the kind of its latest event that settled or kept it
    windows: dict[tuple[str, int, int], str] = {}
    for event in events:
        window = event.detail.get("messages")
        if event.session is None:
            continue
        if not (isinstance(window, list) and len(window) == 2):
            violations.append(f"event {event.id} {event.kind} names no window: {event.detail}")
            continue
        if event.kind == "error" and not (event.detail.get("gave_up") or "kept" in event.detail):
            continue  # an attempt the window caused: it is still pending
        kind = "kept" if "kept" in event.detail else event.kind
        windows[(event.session, window[0], window[1])] = kind
    for window in kept:
        if windows.get(window) not in (None, "kept"):
            violations.append(f"{window} is settled ({windows[window]}) but still kept")
        windows[window] = "kept"  # a merge the LLM could not make yet leaves no event
    for window, kind in windows.items():
        if kind == "kept" and window not in kept:
            violations.append(f"{window}: kept ({kind}), then neither written nor kept")
    by_session: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for (session, first, last), kind in windows.items():
        by_session[session].append((first, last, kind))

    last_tick_errors = {
        (e.session, e.detail["messages"][0])
        for e in events
        if e.id > last_tick_after and e.kind == "error" and e.session and e.detail.get("messages")
    }
    unexcused: list[str] = []
    still_pending = 0
    for key, session in sessions.items():
        assert session is not None
        expected = 0
        # One window may carry several records (`cap` then `created`, or `cap` and still
        # kept): it counts once, as its most settled record says.
        windows: dict[tuple[int, int], str] = {}
        for first, last, kind in by_session.get(key, []):
            current = windows.get((first, last))
            if current is None or (current not in SETTLED_KINDS and kind in SETTLED_KINDS):
                windows[(first, last)] = kind
        for (first, last), kind in sorted(windows.items()):
            if first != expected or last < first:
                violations.append(
                    f"{key}: window {first}-{last} ({kind}) does not follow message {expected - 1}"
                )
            if kind not in SETTLED_KINDS | {"kept"}:
                violations.append(f"{key}: window {first}-{last} ended as {kind}")
            outcomes[kind] += 1
            expected = last + 1
        if expected != session.held.start:
            violations.append(
                f"{key}: settled windows end at {expected}, watermark is {session.held.start}"
            )
        if session.held.size:
            still_pending += 1
            if (key, session.held.start) not in last_tick_errors:
                unexcused.append(key)
    deferred = sum((last_tick.get("deferred") or {}).values())
    if len(unexcused) > deferred:
        violations.append(
            f"{len(unexcused)} sessions pending with no reason of their own, the last tick"
            f" deferred {deferred} windows: {unexcused[:10]}"
        )
    return violations, outcomes, still_pending


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def add_round(sessions: Path, rng: random.Random, count: int) -> None:
    """One finished conversation appended to each of `count` sessions drawn from the pool."""
    for _ in range(count):
        name = f"session-{rng.randrange(SESSION_POOL)}"
        with (sessions / f"{name}.jsonl").open("a", encoding="utf-8") as handle:
            for message in conversation(f"task {rng.randrange(10**6)}", turns=1):
                handle.write(json.dumps(message) + "\n")


async def run_in_process(
    tmp_path: Path, fake: FakeLLM, faults: FaultLLM, rng: random.Random, target_requests: int
) -> dict[str, Any]:
    sessions = tmp_path / "sessions"
    sessions.mkdir(parents=True)
    config = build_config(
        {
            "skills": {"dir": str(tmp_path / "skills")},
            "state": {"dir": str(tmp_path / "state")},
            "evolve": {
                "cooldown_seconds": 0,
                "min_messages": 2,
                "backfill": "all",
                "max_attempts": MAX_ATTEMPTS,
            },
            "llm": {
                "base_url": fake.base_url,
                "model": "test-model",
                "timeout_seconds": TIMEOUT_SECONDS,
                "max_retries": MAX_RETRIES,
                "max_concurrency": 4,
                "max_calls_per_hour": 0,
            },
            "sources": [{"kind": "jsonl", "path": str(sessions)}],
        },
        environ={},
    )
    settings = replace(
        llm_settings(config),
        backoff_base_seconds=0.001,
        backoff_max_seconds=0.01,
        circuit_reset_seconds=5,
    )
    clock = Clock()
    ticks = last_tick_after = 0
    with open_app(config, prepare=True) as app:
        async with LLMClient(settings, clock=clock) as llm:
            evolver = Evolver(app, llm, bind_sources(config, app.routing), clock=clock)
            while len(faults.seen) < target_requests:
                add_round(sessions, rng, 8)
                for _ in range(4 * MAX_ATTEMPTS):
                    ticks += 1
                    faults.phase = ticks
                    newest = app.state.events(limit=1)
                    last_tick_after = newest[0].id if newest else 0
                    await evolver.tick()  # raising here is the daemon going down
                    clock.now += 10  # past the circuit's reset: the next tick may probe
                    fake.requests.clear()
                    fake.raw_bodies.clear()
                    if not app.state.sessions_with_pending() and not app.state.kept_proposals():
                        break
    violations, outcomes, pending = window_violations(
        tmp_path / "state" / "state.db", last_tick_after=last_tick_after
    )
    violations += attempt_bound_violations(faults.seen, set(range(1, ticks + 1)), MAX_RETRIES)
    return {"ticks": ticks, "violations": violations, "outcomes": outcomes, "pending": pending}


def run_subprocess(
    workspace: Workspace, fake: FakeLLM, faults: FaultLLM, rng: random.Random, requests: int
) -> dict[str, Any]:
    workspace.llm_url = fake.base_url
    workspace.settings = {
        "evolve": {
            "interval_seconds": 0.2,
            "cooldown_seconds": 0,
            "min_messages": 2,
            "max_attempts": MAX_ATTEMPTS,
        },
        "llm": {
            "timeout_seconds": TIMEOUT_SECONDS,
            "max_retries": SUBPROCESS_MAX_RETRIES,
            "max_calls_per_hour": 0,
        },
        "log": {"level": "warning"},
    }
    workspace.write_config()
    violations: list[str] = []
    lives = 3 if requests > RUN_REQUESTS_PER_LIFE else 1
    for life in range(1, lives + 1):
        violations += one_daemon_life(
            workspace, faults, rng, phase=-life, requests=requests // lives
        )
    run_requests = len(faults.seen)
    violations += run_phase_bound_violations(workspace, faults.seen, SUBPROCESS_MAX_RETRIES)

    onces = 0
    state_db = workspace.state / "state.db"
    last_tick_after = last_event_id(state_db)
    for phase in range(1, 9):
        with StateDB(state_db) as state:
            if not state.sessions_with_pending() and not state.kept_proposals():
                break
        faults.phase = phase
        last_tick_after = last_event_id(state_db)
        result = workspace.cli("once")
        onces += 1
        if result.returncode != 0:
            violations.append(f"skilld once exited {result.returncode}: {result.stderr[-500:]}")
        violations += [f"once {phase}: {problem}" for problem in log_problems(result.stderr)]
    violations += attempt_bound_violations(
        faults.seen, set(range(1, onces + 1)), SUBPROCESS_MAX_RETRIES
    )
    window_problems, outcomes, pending = window_violations(
        state_db, last_tick_after=last_tick_after
    )
    return {
        "violations": violations + window_problems,
        "outcomes": outcomes,
        "pending": pending,
        "run_requests": run_requests,
        "onces": onces,
    }


def one_daemon_life(
    workspace: Workspace,
    faults: FaultLLM,
    rng: random.Random,
    *,
    phase: int,
    requests: int,
    env: dict[str, str] | None = None,
) -> list[str]:
    """`skilld run` under faults until it made `requests` requests or its time is up; it must
    still be running then, and stop with 0 on SIGTERM. Sessions grow while it runs. A tick that
    raised is a violation too: the daemon logs it and goes on, so only its log lines, its
    sd_notify status and its events tell."""
    violations = []
    faults.phase = phase
    made_before = len(faults.seen)
    state_db = workspace.state / "state.db"
    events_before = last_event_id(state_db) if state_db.exists() else 0
    with running(skilld_argv("run"), workspace.env(**(env or {}))) as daemon:
        deadline = time.monotonic() + RUN_LIFE_SECONDS
        next_round = 0.0
        while time.monotonic() < deadline and len(faults.seen) - made_before < requests:
            if not daemon.alive:
                violations.append(f"skilld run exited with {daemon.process.returncode}")
                break
            if time.monotonic() >= next_round:
                add_round(workspace.sessions, rng, 3)
                next_round = time.monotonic() + 1.0
            time.sleep(0.05)
    violations += daemon.problems()
    violations += tick_failure_events(state_db, after_id=events_before)
    return violations


def run_phase_bound_violations(
    workspace: Workspace, seen: list[Seen], max_retries: int
) -> list[str]:
    """`skilld run` ticks are not visible to the server, so the bound is per window: each ask
    that failed left an error event, and one more ask settled it or was cut by SIGTERM."""
    with StateDB(workspace.state / "state.db") as state:
        error_events = state.events(kinds=("error",))
        errors = Counter(
            (e.session, e.detail["messages"][0])
            for e in error_events
            if e.session and e.detail.get("messages")
        )
        # An outage stops a tick with one event for every window it leaves waiting.
        outages = sum(1 for e in error_events if e.session is None)
    per_window: dict[tuple[int, str, int], list[Seen]] = defaultdict(list)
    for request in seen:
        if request.phase < 0:
            per_window[(request.phase, request.session, request.first)].append(request)
    violations = []
    for window, requests in per_window.items():
        asks = errors[window[1:]] + outages + 1
        fallbacks = len({r.response_format for r in requests}) - 1
        bound = asks * 4 * (max_retries + 1) + fallbacks  # ask, repair, merge, its repair
        if len(requests) > bound:
            violations.append(f"window {window} made {len(requests)} requests in {asks} asks")
    return violations


@pytest.mark.slow
@pytest.mark.anyio
async def test_llm_fault_campaign(
    tmp_path: Path,
    fake_llm: FakeLLM,
    full_size: bool,
    campaign_figures: Callable[..., str],
) -> None:
    rng = random.Random(SEED)
    in_process = FaultLLM(random.Random(rng.random()), retry_after="1")
    fake_llm.responder = in_process
    target = 1000 if full_size else 100
    evolver = await run_in_process(tmp_path / "in-process", fake_llm, in_process, rng, target)

    workspace = Workspace(tmp_path / "subprocess")
    workspace.skills.mkdir(parents=True)
    workspace.sessions.mkdir()
    subprocess_faults = FaultLLM(random.Random(rng.random()), retry_after="1")
    fake_llm.responder = subprocess_faults
    daemon = run_subprocess(workspace, fake_llm, subprocess_faults, rng, 150 if full_size else 40)

    every = in_process.seen + subprocess_faults.seen
    oversized = [r for r in every if r.size > REQUEST_BYTES_LIMIT]
    violations = evolver["violations"] + daemon["violations"]
    violations += [f"request of {r.size} bytes for {r.session}" for r in oversized[:5]]
    outcomes = evolver["outcomes"] + daemon["outcomes"]
    campaign_figures(
        "llm-faults",
        requests=len(every),
        in_process_requests=len(in_process.seen),
        daemon_run_requests=daemon["run_requests"],
        daemon_once_requests=len(subprocess_faults.seen) - daemon["run_requests"],
        ticks=evolver["ticks"],
        onces=daemon["onces"],
        faults=len(set(r.fault for r in every)),
        windows=sum(outcomes.values()),
        outcomes=dict(sorted(outcomes.items())),
        pending=evolver["pending"] + daemon["pending"],
        largest_request_kb=max(r.size for r in every) // 1024,
        violations=len(violations),
    )
    assert len(in_process.seen) >= target
    assert set(FAULTS) <= {r.fault for r in every}
    assert not violations, "\n".join(violations[:40])


def save_session(state: StateDB, key: str, *, start: int, count: int = 0) -> None:
    held = Held(start=start, size=count, conversational=count)
    state.save_session(SessionState(key, "jsonl:x", {}, held, None, 0, None, None))


def test_window_audit_can_fail(tmp_path: Path) -> None:
    """The tiling check sees a gap: a watermark past what the events account for."""
    state_db = tmp_path / "state.db"
    with StateDB(state_db) as state:
        save_session(state, "jsonl:a", start=8)
        state.add_event("skipped", session="jsonl:a", detail={"messages": [0, 3]})
    violations, outcomes, _ = window_violations(state_db, last_tick_after=0)
    assert outcomes == {"skipped": 1}
    assert violations == ["jsonl:a: settled windows end at 4, watermark is 8"]


def test_an_outage_excuses_only_the_windows_its_tick_kept_waiting(tmp_path: Path) -> None:
    """An outage's event names no session: it no longer excuses every pending session, only
    as many as the last tick reported waiting; an attempt of an earlier tick excuses none."""
    state_db = tmp_path / "state.db"
    with StateDB(state_db) as state:
        for key in ("jsonl:a", "jsonl:b", "jsonl:c"):
            save_session(state, key, start=0, count=4)
        old_attempt = state.add_event(
            "error", session="jsonl:c", detail={"messages": [0, 3], "gave_up": False}
        )
        state.add_event("error", reason="server error", detail={"windows_waiting": 1})
        state.set_meta("last_tick", {"deferred": {"llm unavailable": 1}, "outage": "down"})
    violations, _, pending = window_violations(state_db, last_tick_after=old_attempt)
    assert pending == 3
    assert violations == [
        "3 sessions pending with no reason of their own, the last tick deferred 1 windows:"
        " ['jsonl:a', 'jsonl:b', 'jsonl:c']"
    ]
    assert window_violations(state_db, last_tick_after=old_attempt - 1)[0] == [
        "2 sessions pending with no reason of their own, the last tick deferred 1 windows:"
        " ['jsonl:a', 'jsonl:b']"
    ]


def test_a_kept_window_counts_once(tmp_path: Path) -> None:
    """A proposal kept at the cap and created later: two events, one window. One still kept
    has its window accounted for by state.db, and one that vanished is a violation."""
    state_db = tmp_path / "state.db"
    with StateDB(state_db) as state:
        save_session(state, "jsonl:a", start=12)
        kept = {"messages": [0, 3], "kept": "written when there is room"}
        state.add_event("cap", session="jsonl:a", detail=kept)
        state.add_event("created", session="jsonl:a", detail={"messages": [0, 3]})
        state.add_event("cap", session="jsonl:a", detail={**kept, "messages": [4, 7]})
        state.keep_proposal(
            "default", {}, session="jsonl:a", source="jsonl", first_message=4, last_message=7
        )
        failed = {"messages": [8, 11], "kept": "written once the fault is gone"}
        state.add_event("error", session="jsonl:a", reason="could not write: full", detail=failed)
    violations, outcomes, _ = window_violations(state_db, last_tick_after=0)
    assert outcomes == {"created": 1, "kept": 2}
    assert violations == ["('jsonl:a', 8, 11): kept (kept), then neither written nor kept"]


@pytest.mark.anyio
async def test_llm_fault_audit_sees_ticks_that_raise(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """A tick that raises inside `skilld run` is logged and the daemon goes on: the daemon's
    life must still count as failed (here every other tick raises, through a shim)."""
    workspace = Workspace(tmp_path / "ws", llm_url=fake_llm.base_url)
    workspace.skills.mkdir(parents=True)
    workspace.sessions.mkdir()
    workspace.settings = {"evolve": {"interval_seconds": 0.05}, "log": {"level": "warning"}}
    workspace.write_config()
    faults = FaultLLM(random.Random(SEED), retry_after="1")
    fake_llm.responder = faults
    shim = fault_shim(tmp_path / "shim", TICK_RAISES_EVERY_OTHER_TIME)
    violations = one_daemon_life(
        workspace, faults, random.Random(SEED), phase=-1, requests=3, env=shim
    )
    assert any("tick_failed" in violation for violation in violations), violations
    assert any("ticks failed" in violation for violation in violations), violations
    assert any("tick failed: RuntimeError" in violation for violation in violations), violations


def test_attempt_bound_can_fail() -> None:
    """Four requests for one chat call with max_retries=2 is one too many; a format fallback
    (a second response_format in the group) buys exactly one more."""
    one_call = [Seen(1, "jsonl:a", 0, 0, "json_schema", 10, "500") for _ in range(4)]
    assert len(attempt_bound_violations(one_call, {1}, 2)) == 1
    with_fallback = [*one_call[:3], replace(one_call[3], response_format="json_object")]
    assert attempt_bound_violations(with_fallback, {1}, 2) == []
    assert attempt_bound_violations(one_call, {2}, 2) == []  # another phase is not audited
