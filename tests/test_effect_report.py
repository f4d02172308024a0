"""`skilld effect` over a real state.db: rows as DESIGN.md §13 names them, versions and their
windows from the event log, exposures by agent and repository, the loaded split, the
recurring failures no skill covers, and the CLI after real ticks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skilld.effect import failure_id
from skilld.effect.report import (
    covering_skills,
    effect_records,
    effect_rows,
    has_stopped,
    uncovered_recurring,
)
from skilld.state import StateDB
from tests.effect_history import (
    LIBRARY,
    REPOSITORY,
    Clock,
    day,
    learn_skill,
    push_failure,
    record_session,
)

ROW_KEYS = {
    "library",
    "name",
    "since",
    "version",
    "source_failures",
    "before",
    "after",
    "verdict",
    "evidence",
    "holdout",
}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(tmp_path: Path, clock: Clock) -> StateDB:
    db = StateDB(tmp_path / "state.db", clock=clock)
    yield db  # type: ignore[misc]
    db.close()


def learned_push_skill(state: StateDB, clock: Clock, name: str = "push-upstream") -> None:
    """The source session (day 10) failed `git push` and then pushed; the skill was written
    from its messages 0..5 on day 10.5."""
    record_session(state, "claude-code:src", day(10), failed=True)
    learn_skill(state, clock, name, "claude-code:src", day(10.5))


def rows(state: StateDB, min_exposures: int = 10) -> list[dict[str, object]]:
    return effect_rows(state.conn, [LIBRARY], min_exposures=min_exposures)


def test_row_shape_and_helps(state: StateDB, clock: Clock) -> None:
    for n in range(12):  # before: 9 of 12 sessions failed to push
        record_session(state, f"claude-code:b{n}", day(n / 2), failed=n % 4 != 0)
    learned_push_skill(state, clock)
    for n in range(12):  # after: none failed, 10 loaded the skill
        loaded = ("push-upstream",) if n < 10 else ()
        record_session(state, f"claude-code:a{n}", day(11 + n), loaded=loaded)
    (row,) = rows(state)
    assert set(row) == ROW_KEYS
    assert row["library"] == LIBRARY and row["name"] == "push-upstream"
    assert row["since"] == day(10.5).isoformat(timespec="seconds")
    assert row["version"] == 1
    assert row["source_failures"] == [
        {"id": failure_id("sig-push"), "signature": "sig-push", "class": "real",
         "command": "git push"}
    ]  # fmt: skip
    assert row["before"] == {"sessions": 12, "failures": 9}
    assert row["after"] == {
        "sessions": 12,
        "failures": 0,
        "loaded_sessions": 10,
        "loaded_failures": 0,
    }
    assert row["verdict"] == "helps"
    assert row["evidence"] == (
        "loaded in 10 of 12 later sessions that ran `git push`; failed again in 0 of those 10"
        " and in 0 of the other 2; before: failed in 9 of 12"
    )


def test_too_early_until_min_exposures(state: StateDB, clock: Clock) -> None:
    learned_push_skill(state, clock)
    for n in range(3):
        record_session(state, f"claude-code:a{n}", day(11 + n))
    assert rows(state)[0]["verdict"] == "too-early"
    assert rows(state, min_exposures=3)[0]["verdict"] == "no-change"


def test_not_triggered_and_content_problem(state: StateDB, clock: Clock) -> None:
    learned_push_skill(state, clock, "push-upstream")
    assert rows(state, 10)[0]["verdict"] == "too-early"
    for n in range(10):  # before it: pushes went through
        record_session(state, f"claude-code:b{n}", day(n / 2))
    for n in range(10):  # fails again in 4 sessions, none of which loaded it
        record_session(state, f"claude-code:a{n}", day(11 + n), failed=n < 4)
    assert rows(state, 10)[0]["verdict"] == "not-triggered"
    record_session(state, "claude-code:late", day(30), failed=True, loaded=("push-upstream",))
    # Loaded once in 11 sessions: too few to tell what it does where it is loaded.
    assert rows(state, 10)[0]["verdict"] == "not-triggered"
    for n in range(5):  # then loaded, and failing there too: its steps do not end it
        record_session(
            state, f"claude-code:l{n}", day(31 + n), failed=True, loaded=("push-upstream",)
        )
    (row,) = rows(state, 10)
    assert row["after"] == {
        "sessions": 16, "failures": 10, "loaded_sessions": 6, "loaded_failures": 6,
    }  # fmt: skip
    assert row["verdict"] == "worse"


def test_exposures_keep_to_the_agent_and_repository(state: StateDB, clock: Clock) -> None:
    learned_push_skill(state, clock)
    record_session(state, "codex:x", day(12), failed=True, source="codex")
    record_session(state, "claude-code:y", day(12), failed=True, repository="github.com/o/other")
    record_session(state, "claude-code:z", day(12), failed=True)
    record_session(state, "claude-code:quiet", day(13), ran=False, loaded=("push-upstream",))
    record_session(state, "claude-code:old", day(2), failed=True)  # before the skill
    (record,) = effect_records(state.conn, [LIBRARY], min_exposures=10, with_recurrences=True)
    counts = record.measured.counts
    assert (counts.after_sessions, counts.after_failures) == (1, 1)
    assert (counts.before_sessions, counts.before_failures) == (1, 1)
    assert counts.loaded_sessions == 0  # it loaded the skill but never pushed
    assert [(r.session, r.loaded) for r in record.recurrences] == [("claude-code:z", False)]


def test_no_failure_and_untargeted_windows(state: StateDB, clock: Clock) -> None:
    record_session(state, "claude-code:prefs", day(1))
    learn_skill(state, clock, "tabs-not-spaces", "claude-code:prefs", day(1.5))
    with state.transaction() as conn:
        from skilld.effect.store import SessionFacts, record_read

        facts = SessionFacts(
            "claude-code:stuck", "claude-code", LIBRARY, REPOSITORY, day(2).isoformat()
        )
        record_read(conn, facts, [], [push_failure(1, resolved=False)])
    # A window full of a failure the skill is not about: it targets none of it.
    learn_skill(state, clock, "dialyzer-warnings", "claude-code:stuck", day(2.5), targets=())
    # A skill meant to end a failure the window never resolved still targets it.
    learn_skill(state, clock, "stuck", "claude-code:stuck", day(2.6))
    verdicts = {row["name"]: row["verdict"] for row in rows(state)}
    assert verdicts == {
        "tabs-not-spaces": "no-failure", "dialyzer-warnings": "no-failure", "stuck": "too-early",
    }  # fmt: skip


def test_a_version_window_outside_the_failure_learns_nothing(state: StateDB, clock: Clock) -> None:
    record_session(state, "claude-code:src", day(10), failed=True)  # failure at message 1
    learn_skill(state, clock, "later-lesson", "claude-code:src", day(10.5), window=(2, 9))
    assert rows(state)[0]["source_failures"] == []


def test_covering_and_uncovered_recurring(state: StateDB, clock: Clock) -> None:
    learned_push_skill(state, clock)
    for n in range(3):  # `make` fails in three sessions and no skill was learned from it
        record_session(
            state,
            f"claude-code:m{n}",
            day(20 + n),
            failed=True,
            signature="sig-make",
            command="make",
        )
    record_session(
        state, "claude-code:once", day(20), failed=True, signature="sig-once", command="npm ci"
    )
    record_session(state, "claude-code:p", day(21), failed=True)
    assert covering_skills(state.conn, [LIBRARY]) == {"sig-push": [(LIBRARY, "push-upstream")]}
    uncovered = uncovered_recurring(state.conn, [LIBRARY])
    assert [(row["signature"], row["sessions"], row["repository"]) for row in uncovered] == [
        ("sig-make", 3, REPOSITORY)
    ]
    assert uncovered_recurring(state.conn, [LIBRARY], since=day(30).isoformat()) == []


def test_stopped_recurring_is_a_decided_helps(state: StateDB, clock: Clock) -> None:
    for n in range(6):  # before: every push failed
        record_session(state, f"claude-code:b{n}", day(1 + n / 2), failed=True)
    learned_push_skill(state, clock)
    record_session(state, "claude-code:a", day(20))

    def stopped_recurring(since: str, min_exposures: int) -> list[str]:
        records = effect_records(state.conn, [LIBRARY], min_exposures=min_exposures)
        return [
            r.name for r in records if has_stopped(r.row(), r.measured.last_exposure, since=since)
        ]

    # One clean session after six failures: not come back yet, but too early to say it ended.
    assert stopped_recurring(since=day(19).isoformat(), min_exposures=10) == []
    for n in range(4):
        record_session(state, f"claude-code:a{n}", day(21 + n))
    assert stopped_recurring(since=day(19).isoformat(), min_exposures=5) == ["push-upstream"]
    assert stopped_recurring(since=day(30).isoformat(), min_exposures=5) == []


def test_json_is_the_cli_output(state: StateDB, clock: Clock, tmp_path: Path) -> None:
    learned_push_skill(state, clock)
    assert json.loads(json.dumps(rows(state))) == rows(state)
