"""The curator and a skill's effect: a `helps` skill does not go stale while sessions keep
running its command; a `worse` skill is reported, never moved for it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from skilld.app import App
from skilld.curator._lifecycle import LiveSkill, decide
from skilld.curator.passes import run_lifecycle
from skilld.effect.extract import Failure, ToolRun
from skilld.effect.store import SessionFacts, record_read
from tests.effect_history import LIBRARY, REPOSITORY, record_session
from tests.test_curator import T0, THRESHOLDS, Clock, app, clock, record, state_of, write

__all__ = ["app", "clock"]  # the fixtures, used by name


def test_an_exposure_of_a_helping_skill_is_activity() -> None:
    quiet = LiveSkill("push-upstream", "managed", record())
    assert decide(quiet, T0 + timedelta(days=40), THRESHOLDS) is not None
    exposed = replace(quiet, exposed_at=T0 + timedelta(days=35))
    assert decide(exposed, T0 + timedelta(days=40), THRESHOLDS) is None
    stale = decide(exposed, T0 + timedelta(days=66), THRESHOLDS)
    assert stale is not None and stale.anchor == T0 + timedelta(days=35)


def learned_from_failure(app: App, name: str, session: str, command: str, signature: str) -> None:
    """`name` learned at T0 from `session`'s window, which failed `command` and resolved it."""
    started = (T0 - timedelta(days=1)).isoformat()
    facts = SessionFacts(session, "claude-code", LIBRARY, REPOSITORY, started)
    failure = Failure(1, None, "Bash", command, "error", signature, "real", 1, True)
    runs = [ToolRun(1, None, "Bash", command, False), ToolRun(2, None, "Bash", command, True)]
    with app.state.transaction() as conn:
        record_read(conn, facts, runs, [failure])
    write(app, name)
    git = {"repository": REPOSITORY, "branch": "main", "commit": None, "how": "recorded"}
    app.state.add_event(
        "created", library=LIBRARY, skill=name, session=session, source="claude-code",
        detail={"messages": [0, 5], "git": git, "targets": [signature]},
    )  # fmt: skip


def test_helps_keeps_a_skill_active_and_worse_is_reported(app: App, clock: Clock) -> None:
    learned_from_failure(app, "push-upstream", "claude-code:src-push", "git push", "sig-push")
    migrate = "sig-make migrate"
    learned_from_failure(app, "run-migrations", "claude-code:src-migrate", "make migrate", migrate)
    write(app, "never-measured")
    state = app.state
    for n in range(12):  # before: pushes failed in 9 of 12, migrations in 1 of 12
        before = T0 - timedelta(days=30 - n)
        record_session(state, f"claude-code:bp{n}", before, failed=n % 4 != 0)
        record_session(
            state, f"claude-code:bm{n}", before, failed=n == 0,
            signature=migrate, command="make migrate",
        )  # fmt: skip
    for n in range(12):  # after: pushes never fail; migrations fail in 10 of 12, loaded
        after = T0 + timedelta(days=3 + 3 * n)
        record_session(state, f"claude-code:ap{n}", after)
        record_session(
            state, f"claude-code:am{n}", after, failed=n < 10, loaded=("run-migrations",),
            signature=migrate, command="make migrate",
        )  # fmt: skip
    clock.now = T0 + timedelta(days=40)
    report = run_lifecycle(app, app.library, now=clock.now)
    moved = {t.name: t.kind for t in report.transitions}
    # No use of any of them for 40 days: the one whose failure stopped coming back stays.
    assert moved == {"run-migrations": "stale", "never-measured": "stale"}
    assert state_of(app, "push-upstream") in (None, "active")
    (worse,) = report.worse
    assert worse["name"] == "run-migrations"
    assert worse["evidence"].startswith(
        "loaded in 12 of 12 later sessions that ran `make migrate`; failed again in 10 of them"
    )
    assert report.as_dict()["worse"] == report.worse
    assert (app.library.root / "run-migrations" / "SKILL.md").is_file()
