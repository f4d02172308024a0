"""The measurement a tick keeps (skilld.effect.watch): measuring only the skills a tick's
writes reach gives what measuring every skill gives, and only those are measured."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skilld.effect import store, watch
from skilld.effect.extract import Failure, ToolRun, tally
from skilld.effect.report import effect_records
from skilld.effect.watch import MEASUREMENT_KEY, Reach, observe, revisable
from skilld.state import StateDB
from tests.effect_history import LIBRARY, REPOSITORY, Clock, day, learn_skill, push_failure
from tests.fakellm import FakeLLM, skip_reply
from tests.test_backfill import Clock as BackfillClock
from tests.test_backfill import evolver, write_session
from tests.test_failures_tick import PUSH_SIGNATURE, call, checkout

MIN_EXPOSURES = 3
#: (command head, signature) of each skill's source failure; "ls" is no skill's.
COMMANDS = (("git push", "sig-push"), ("npm run", "sig-npm"), ("cargo test", "sig-cargo"))
SKILLS = ("push-upstream", "npm-scripts", "cargo-tests")
NO_UPSTREAM = "fatal: The current branch feat-x has no upstream branch."


def record_as_a_tick(
    state: StateDB,
    reach: Reach,
    session: str,
    when: str,
    command: str,
    signature: str | None,
    loaded: tuple[str, ...] = (),
    repository: str | None = REPOSITORY,
    *,
    first: int = 1,
    fixed: bool = True,
) -> None:
    """A read of `session` (its messages from `first` on) recorded as a tick's Recorder
    records it, into `reach`: it ran `command`, failing first with `signature` when one is
    given, then running it again (`fixed`), and loaded `loaded`."""
    runs = [ToolRun(first + 1, when, "Bash", command, True)] if fixed else []
    failures: list[Failure] = []
    if signature is not None:
        runs.append(ToolRun(first, when, "Bash", command, False))
        failure = push_failure(first, resolved=fixed, signature=signature)
        failures.append(failure._replace(ts=when, command=command))
    facts = store.SessionFacts(session, "claude-code", LIBRARY, repository, when)
    read = store.ReadRecord(facts, tally(runs), failures)
    with state.transaction() as conn:
        reach.record(conn, [read])
        if loaded:
            store.record_loads(conn, session, LIBRARY, loaded)
            reach.skills.update((LIBRARY, name) for name in loaded)


def learned_skills(state: StateDB, clock: Clock) -> None:
    """Each skill of SKILLS learned on day 10 from a session that failed its command and
    then ran it; one more skill learned from a session with no failure."""
    reach = Reach(0)
    for n, (name, (command, signature)) in enumerate(zip(SKILLS, COMMANDS, strict=True)):
        session = f"claude-code:src-{n}"
        record_as_a_tick(state, reach, session, day(10).isoformat(), command, signature)
        learn_skill(state, clock, name, session, day(10.5))
    record_as_a_tick(state, reach, "claude-code:src-x", day(10).isoformat(), "ls", None)
    learn_skill(state, clock, "no-failure", "claude-code:src-x", day(10.5))


def look(state: StateDB, reach: Reach | None) -> watch.Observation:
    observation = observe(state, [LIBRARY], min_exposures=MIN_EXPOSURES, reach=reach)
    watch.record(state, observation)
    return observation


def full(
    state: StateDB, min_exposures: int = MIN_EXPOSURES
) -> tuple[list[dict[str, Any]], list[str | None]]:
    records = effect_records(state.conn, [LIBRARY], min_exposures=min_exposures)
    return [r.row() for r in records], [r.measured.last_exposure for r in records]


@pytest.fixture
def measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int | None]]:
    """How many skills each measurement of a look measured (None: every skill)."""
    sizes: list[int | None] = []
    real = watch.effect_records

    def counting(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("with_recurrences"):
            names = kwargs.get("names")
            sizes.append(None if names is None else len(list(names)))
        return real(*args, **kwargs)

    monkeypatch.setattr(watch, "effect_records", counting)
    yield sizes


def test_a_tick_measures_only_the_skills_its_writes_reach(
    tmp_path: Path, measured: list[int | None]
) -> None:
    clock = Clock()
    state = StateDB(tmp_path / "state.db", clock=clock)
    learned_skills(state, clock)
    look(state, None)
    assert measured == [None]
    # A tick whose sessions pushed (one failing) and loaded the npm skill: those two skills.
    reach = Reach(store.generation(state.conn))
    record_as_a_tick(state, reach, "claude-code:a1", day(11).isoformat(), "git push", "sig-push")
    record_as_a_tick(
        state, reach, "claude-code:a2", day(11).isoformat(), "ls", None, ("npm-scripts",)
    )
    kept = look(state, reach)
    assert measured[-1] == 2
    assert (kept.measurement["rows"], kept.measurement["last_exposures"]) == full(state)
    # A tick that ran what no skill was learned from measures none, and keeps every row.
    reach = Reach(store.generation(state.conn))
    record_as_a_tick(state, reach, "claude-code:a3", day(11.5).isoformat(), "ls", None)
    look(state, reach)
    assert measured[-1] == 0
    # A measurement that missed a write (another writer, a tick that read nothing) is not
    # built on: every skill is measured.
    record_as_a_tick(state, Reach(0), "claude-code:a4", day(12).isoformat(), "cargo test", None)
    reach = Reach(store.generation(state.conn))
    record_as_a_tick(state, reach, "claude-code:a5", day(12).isoformat(), "ls", None)
    kept = look(state, reach)
    assert measured[-1] is None
    assert (kept.measurement["rows"], kept.measurement["last_exposures"]) == full(state)
    state.close()


def test_a_session_that_learns_its_repository_reaches_what_it_ran(
    tmp_path: Path, measured: list[int | None]
) -> None:
    """A session read again with the repository it lacked changes the rows of every command
    it ran before: those reach their skills (here the push it ran earlier, not this read's)."""
    clock = Clock()
    state = StateDB(tmp_path / "state.db", clock=clock)
    learned_skills(state, clock)
    reach = Reach(store.generation(state.conn))
    when = day(11).isoformat()
    record_as_a_tick(state, reach, "claude-code:b", when, "git push", None, repository=None)
    look(state, reach)
    reach = Reach(store.generation(state.conn))
    record_as_a_tick(state, reach, "claude-code:b", when, "ls", None, first=10)
    assert reach.sessions == {"claude-code:b"}
    kept = look(state, reach)
    assert measured[-1] == 1
    assert kept.measurement["rows"] == full(state)[0]
    state.close()


def test_a_failure_resolved_later_reaches_the_skill_learned_before_the_fix(
    tmp_path: Path, measured: list[int | None]
) -> None:
    """A skill learned from a window whose failure was not yet fixed targets it already; the
    session's later read fixes it, and the skill learned there is measured again."""
    clock = Clock()
    state = StateDB(tmp_path / "state.db", clock=clock)
    learned_skills(state, clock)
    source, when = "claude-code:late", day(10).isoformat()
    make = ("make build", "sig-make")
    record_as_a_tick(state, Reach(0), source, when, *make, fixed=False)
    learn_skill(state, clock, "make-build", source, day(10.5))
    (before,) = [
        row for row in look(state, None).measurement["rows"] if row["name"] == "make-build"
    ]
    assert [failure["signature"] for failure in before["source_failures"]] == ["sig-make"]
    reach = Reach(store.generation(state.conn))
    record_as_a_tick(state, reach, source, day(10.6).isoformat(), make[0], None, first=10)
    kept = look(state, reach)
    assert measured[-1] == 1
    assert kept.measurement["rows"] == full(state)[0]
    (after,) = [row for row in kept.measurement["rows"] if row["name"] == "make-build"]
    assert [failure["signature"] for failure in after["source_failures"]] == ["sig-make"]
    state.close()


SESSION = st.tuples(
    st.integers(0, len(COMMANDS)),  # the command: a skill's, or "ls"
    st.booleans(),  # failed first
    st.booleans(),  # ran it again
    st.sets(st.sampled_from(SKILLS), max_size=2),  # loaded
    st.integers(-3, 30),  # the day
    st.sampled_from([REPOSITORY, "github.com/acme/other", None]),
    st.integers(0, 9),  # below 5: read a session again (the lower, the older; 0: a source)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(SESSION, min_size=1, max_size=4), min_size=1, max_size=5))
def test_the_kept_rows_are_a_fresh_measurement(
    tmp_path_factory: pytest.TempPathFactory, ticks: list[list[Any]]
) -> None:
    """Ticks of sessions of any commands, failing or not, fixed or not, loading skills or not,
    before and after the skills, new or read again (a source session too: its failures
    resolved, its repository learned): after each, the kept rows, last exposures, verdicts and
    revision offers are what measuring every skill gives."""
    clock = Clock()
    state = StateDB(tmp_path_factory.mktemp("watch") / "state.db", clock=clock)
    learned_skills(state, clock)
    look(state, None)
    sessions = [f"claude-code:src-{n}" for n in range(len(SKILLS))]
    for number, tick in enumerate(ticks):
        reach = Reach(store.generation(state.conn))
        for n, (command, failed, fixed, loaded, when, repository, again) in enumerate(tick):
            head, signature = COMMANDS[command] if command < len(COMMANDS) else ("ls", "sig-ls")
            if again < 5:  # a later read: its repository learned, an earlier failure resolved
                session = sessions[again * len(sessions) // 5]
            else:
                session = f"claude-code:t{number}-{n}"
                sessions.append(session)
            record_as_a_tick(
                state,
                reach,
                session,
                day(when).isoformat(),
                head,
                signature if failed else None,
                tuple(sorted(loaded)),
                repository,
                first=100 * (number + 1) + 10 * n,
                fixed=fixed,
            )
        observation = look(state, reach)
        rows, last_exposures = full(state)
        assert observation.measurement["rows"] == rows
        assert observation.measurement["last_exposures"] == last_exposures
        assert observation.verdicts == {f"{r['library']}/{r['name']}": r["verdict"] for r in rows}
        assert observation.revise == revisable(rows)
        assert state.get_meta(MEASUREMENT_KEY)["rows"] == rows
    state.close()


def timed(messages: list[dict[str, Any]], moment: datetime, cwd: str | None) -> list[Any]:
    """`messages` stamped at `moment`, the first naming `cwd` when given."""
    stamp = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    stamped = [{**message, "timestamp": stamp} for message in messages]
    if cwd is not None:
        stamped[0]["cwd"] = cwd
    return stamped


def pushed(*, fails: bool, fixes: bool = True) -> list[dict[str, Any]]:
    """`git push` failing for want of an upstream (`fails`), then with one (`fixes`)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Push my work please."}]
    if fails:
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call("p1", "git push")]},
            {"role": "tool", "tool_call_id": "p1", "content": NO_UPSTREAM, "error": True},
        ]
    if fixes:
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call("p2", "git push -u o x")]},
            {"role": "tool", "tool_call_id": "p2", "content": "set up to track"},
        ]
    return [*messages, {"role": "assistant", "content": "Done."}]


def listed() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "What is here?"},
        {"role": "assistant", "content": "", "tool_calls": [call("l1", "ls -la")]},
        {"role": "tool", "tool_call_id": "l1", "content": "README.md"},
        {"role": "assistant", "content": "A readme."},
    ]


@pytest.mark.anyio
async def test_the_ticks_keep_a_fresh_measurement(
    tmp_path: Path, fake_llm: FakeLLM, measured: list[int | None]
) -> None:
    """Real ticks (the Recorder's reach, the loads, the watch): after each the kept rows are a
    fresh measurement, and a tick measures the skills its writes reach, those of what a
    session whose earlier rows changed ran (a resolution, a repository learned) included,
    and every skill only when the skills changed."""
    shop = str(checkout(tmp_path / "shop", "https://github.com/acme/shop.git"))
    sessions = tmp_path / "sessions"
    now = datetime.now(UTC)
    clock = BackfillClock()
    fake_llm.responder = lambda request: skip_reply()
    async with evolver(tmp_path, fake_llm, backfill="all", clock=clock) as (app, loop):

        async def tick(expected: int | None) -> None:
            await loop.tick()
            kept = app.state.get_meta(MEASUREMENT_KEY)
            threshold = app.config.effect.min_exposures
            assert (kept["rows"], kept["last_exposures"]) == full(app.state, threshold)
            assert measured[-1] == expected

        write_session(sessions, "src", timed(pushed(fails=True), now - timedelta(hours=2), shop))
        await tick(None)  # no measurement kept yet
        source = {"session": "jsonl:src", "first_message": 0, "last_message": 5}
        app.state.put_provenance(
            LIBRARY, "push-upstream", path="/s/SKILL.md", sha256="0" * 64, git=None, **source
        )
        app.state.add_event(
            "created",
            library=LIBRARY,
            skill="push-upstream",
            session="jsonl:src",
            source="jsonl",
            reason="learned",
            detail={"messages": [0, 5], "targets": [PUSH_SIGNATURE]},
        )
        write_session(sessions, "a1", timed(pushed(fails=True, fixes=False), now, shop))
        await tick(None)  # a skill written since the last measurement
        write_session(sessions, "a1", timed(pushed(fails=False), now, shop))
        await tick(1)  # a1's failure resolved by a later read: what a1 ran, the push
        write_session(sessions, "a2", timed(listed(), now + timedelta(hours=1), shop))
        await tick(0)  # what no skill was learned from
        write_session(sessions, "a3", timed(pushed(fails=False), now + timedelta(hours=2), None))
        await tick(1)  # a push: the skill
        write_session(sessions, "a3", timed(listed(), now + timedelta(hours=2), shop))
        await tick(1)  # a3's repository learned: what a3 ran, the push
