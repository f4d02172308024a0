"""The switchback holdout (DESIGN.md §14) through the CLI, on a clock the test sets
(`SKILLD_NOW`): `skilld once` withholds a learned skill exactly on its drawn blocks and puts it
back after; a person's, a pinned and a team library's skill never move; `holdout = 0` moves
nothing; a daemon killed (SIGKILL) in the middle of a move leaves the skill in exactly one
place after the next tick; and the pure pieces (blocks, the draw, the arms, the interval)."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skilld.app import open_app
from skilld.config import load_config
from skilld.curator._lifecycle import LiveSkill, decide
from skilld.effect import holdout_store as store
from skilld.effect.extract import Failure, ToolRun
from skilld.effect.holdout import (
    ArmCounts,
    Span,
    arm_of,
    block_end,
    block_start,
    decided,
    ineligible_reason,
    is_withheld,
    newcombe,
    next_state,
    wilson,
)
from skilld.effect.store import SessionFacts, record_read
from skilld.skills.document import SkillDoc
from skilld.skills.outcomes import Origin
from tests.conftest import Workspace
from tests.effect_history import REPOSITORY
from tests.test_curator import T0, THRESHOLDS, record

SECRET = b"f" * 64
WITHHELD = ".skilld/withheld"
#: Noon UTC on day 0 (the tests run at TZ=UTC: blocks start at 04:00 UTC): two days from now,
#: so that a skill learned now (its event's time is the real one) is held out from day 0.
DAY0 = (datetime.now(UTC) + timedelta(days=2)).replace(hour=12, minute=0, second=0, microsecond=0)
LEARNED = "push-upstream"


def learn(
    workspace: Workspace, name: str, *, pinned: bool = False, library: str = "default"
) -> None:
    """skilld writes `name`, learned from a session whose `git push` failed and was fixed."""
    with open_app(load_config(workspace.config_path)) as app:
        app.libraries[library].apply(
            SkillDoc(name=name, description=f"How to {name}.", body="Run `git push -u`.\n"),
            Origin(source="evolve", session=f"claude-code:src-{name}"),
        )
        session = f"claude-code:src-{name}"
        started = (DAY0 - timedelta(days=2)).isoformat()
        facts = SessionFacts(session, "claude-code", "default", REPOSITORY, started)
        failure = Failure(1, None, "Bash", "git push", "fatal: no upstream", "sig-push", "real",
                          128, True)  # fmt: skip
        runs = [ToolRun(n, None, "Bash", "git push", n == 2) for n in (1, 2)]
        with app.state.transaction() as conn:
            record_read(conn, facts, runs, [failure])
        git = {"repository": REPOSITORY, "branch": "main", "commit": None, "how": "recorded"}
        app.state.add_event(
            "created", library=library, skill=name, session=session, source="claude-code",
            detail={"messages": [0, 5], "git": git},
        )  # fmt: skip
        if pinned:
            app.libraries[library].set_pinned(name, True, Origin(source="cli"))


def places(root: Path, name: str) -> list[str]:
    """Where `name`'s folder is: live, withheld, archived (each one found)."""
    found = [p for p in (name, f"{WITHHELD}/{name}") if (root / p / "SKILL.md").is_file()]
    archive = root / ".archive"
    if archive.is_dir():
        found += [f".archive/{p.name}" for p in archive.iterdir() if p.name.startswith(name)]
    return found


def at(day: int) -> datetime:
    return DAY0 + timedelta(days=day)


def tick(workspace: Workspace, day: int, **env: str) -> int:
    result = workspace.cli("once", SKILLD_NOW=at(day).isoformat(), TZ="UTC", **env)
    assert result.returncode in (0, -signal.SIGKILL), result.stderr
    return result.returncode


def drawn(day: int, name: str = LEARNED) -> bool:
    return is_withheld(SECRET, "default", name, block_start(at(day), 24), 0.5)


@pytest.fixture
def held(workspace: Workspace) -> Workspace:
    workspace.settings["effect"] = {"holdout": 0.5}
    workspace.write_config()
    workspace.state.mkdir(parents=True, exist_ok=True)
    (workspace.state / store.SECRET_FILE).write_bytes(SECRET)
    learn(workspace, LEARNED)
    return workspace


def test_a_learned_skill_is_absent_exactly_on_its_withheld_blocks(held: Workspace) -> None:
    learn(held, "pinned-push", pinned=True)
    learn(held, "edited-push")
    edited = held.skills / "edited-push" / "SKILL.md"
    edited.write_text(edited.read_text() + "\nA person's line.\n")  # now a person's
    days = range(8)
    assert {drawn(d) for d in days} == {True, False}  # both arms in the span tested
    for day in days:
        tick(held, day)
        expected = [f"{WITHHELD}/{LEARNED}"] if drawn(day) else [LEARNED]
        assert places(held.skills, LEARNED) == expected, day
        # Never moved: a person's skill, a pinned one.
        assert places(held.skills, "edited-push") == ["edited-push"]
        assert places(held.skills, "pinned-push") == ["pinned-push"]
        listed = json.loads(held.cli("holdout", "--json").stdout)
        assert [row["name"] for row in listed] == ([LEARNED] if drawn(day) else [])
        if drawn(day):
            assert listed[0]["until"] == store.iso(block_end(block_start(at(day), 24), 24))
    withheld = held.events("withheld")
    restored = held.events("restored_from_holdout")
    flips = sum(drawn(d) and (d == 0 or not drawn(d - 1)) for d in days)
    assert len(withheld) == flips and {e["skill"] for e in withheld} == {LEARNED}
    assert len(restored) == sum(drawn(d - 1) and not drawn(d) for d in days if d > 0)
    # The usage record is untouched by the moves: no use, no view, still active.
    usage = json.loads((held.skills / ".usage.json").read_text())
    record = usage.get("skills", usage).get(LEARNED)
    assert record is not None and record.get("state", "active") == "active"
    assert not record.get("use_count") and not record.get("last_used_at")
    # The effect rows carry each holdout (the SKILLD_NOW the last tick ran at).
    effect = held.cli("effect", "--json", SKILLD_NOW=at(7).isoformat(), TZ="UTC")
    rows = {row["name"]: row["holdout"] for row in json.loads(effect.stdout)}
    assert rows[LEARNED]["state"] == "running"
    assert rows[LEARNED]["present"] == {"sessions": 0, "failures": 0}
    assert rows["pinned-push"]["state"] == rows["edited-push"]["state"] == "off"


def test_a_team_library_skill_is_never_moved(workspace: Workspace, tmp_path: Path) -> None:
    import subprocess

    remote = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    team = workspace.root / "team"
    workspace.libraries = [
        {"name": "default", "dir": str(workspace.skills)},
        {"name": "team", "dir": str(team), "remote": str(remote)},
    ]
    workspace.sources = [{"kind": "jsonl", "path": str(workspace.sessions), "library": "default"}]
    workspace.settings["effect"] = {"holdout": 0.5}
    workspace.write_config()
    workspace.state.mkdir(parents=True, exist_ok=True)
    (workspace.state / store.SECRET_FILE).write_bytes(SECRET)
    tick(workspace, 0)  # the team library becomes its remote's work tree
    learn(workspace, LEARNED, library="team")
    learn(workspace, "local-push")
    days = range(1, 7)
    assert {drawn(d, "local-push") for d in days} == {True, False}
    assert True in {is_withheld(SECRET, "team", LEARNED, block_start(at(d), 24), 0.5) for d in days}
    for day in days:
        tick(workspace, day)
        assert places(team, LEARNED) == [LEARNED], day
        local = [f"{WITHHELD}/local-push"] if drawn(day, "local-push") else ["local-push"]
        assert places(workspace.skills, "local-push") == local, day
    assert {e["skill"] for e in workspace.events("withheld")} == {"local-push"}


def first(wanted: bool, start: int = 0) -> int:
    return next(d for d in range(start, 400) if drawn(d) == wanted)


def test_holdout_zero_puts_it_back_and_moves_nothing(held: Workspace) -> None:
    day = first(True)
    tick(held, day)
    assert places(held.skills, LEARNED) == [f"{WITHHELD}/{LEARNED}"]
    held.settings["effect"] = {"holdout": 0.0}
    held.write_config()
    tick(held, day)  # the same block, the share changed: back at once
    assert places(held.skills, LEARNED) == [LEARNED]
    for later in range(day + 1, day + 6):
        tick(held, later)
        assert places(held.skills, LEARNED) == [LEARNED]
    assert len(held.events("withheld")) == 1
    assert held.cli("holdout").stdout.strip() == "no skill is withheld now (holdout is off)"


@pytest.mark.parametrize("point", ["before-move", "after-move"])
def test_a_kill_during_a_move_leaves_the_skill_in_one_place(held: Workspace, point: str) -> None:
    withheld_day = first(True)
    fault = {"SKILLD_HOLDOUT_FAULT": point}
    assert tick(held, withheld_day, **fault) == -signal.SIGKILL
    after_kill = places(held.skills, LEARNED)
    assert len(after_kill) == 1
    tick(held, withheld_day)  # the next tick repairs, then carries on
    assert places(held.skills, LEARNED) == [f"{WITHHELD}/{LEARNED}"]
    assert len(held.events("withheld")) == 1
    present_day = first(False, withheld_day + 1)
    assert tick(held, present_day, **fault) == -signal.SIGKILL  # killed putting it back
    assert len(places(held.skills, LEARNED)) == 1
    tick(held, present_day)
    assert places(held.skills, LEARNED) == [LEARNED]
    assert len(held.events("restored_from_holdout")) == 1
    assert json.loads(held.cli("holdout", "--json").stdout) == []


def test_the_secret_is_private_and_made_once(tmp_path: Path) -> None:
    made = store.load_secret(tmp_path)
    assert len(made) == 64 and store.load_secret(tmp_path) == made
    assert os.stat(tmp_path / store.SECRET_FILE).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [store.SECRET_FILE]


def test_blocks_start_at_four_in_the_morning_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Paris")
    import time

    time.tzset()
    try:
        night = datetime(2026, 7, 1, 1, 30, tzinfo=UTC)  # 03:30 in Paris: yesterday's block
        assert block_start(night, 24) == datetime(2026, 6, 30, 2, tzinfo=UTC)
        morning = datetime(2026, 7, 1, 2, 30, tzinfo=UTC)  # 04:30 in Paris
        assert block_start(morning, 24) == datetime(2026, 7, 1, 2, tzinfo=UTC)
        assert block_start(morning, 6) == datetime(2026, 7, 1, 2, tzinfo=UTC)
        assert block_start(datetime(2026, 7, 1, 21, tzinfo=UTC), 10) == datetime(
            2026, 7, 1, 12, tzinfo=UTC
        )
        # 10-hour blocks: 04:00, 14:00, and a short one from 00:00 to the next 04:00.
        late = block_start(datetime(2026, 7, 1, 23, tzinfo=UTC), 10)
        assert late == datetime(2026, 7, 1, 22, tzinfo=UTC)
        assert block_end(late, 10) == datetime(2026, 7, 2, 2, tzinfo=UTC)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_who_is_never_held_out() -> None:
    ok = {"owner": "managed", "pinned": False, "source_failures": 1, "team": False}
    assert ineligible_reason(**ok) is None  # type: ignore[arg-type]
    for change, reason in [
        ({"owner": "human"}, "owned by human"),
        ({"owner": "hub"}, "owned by hub"),
        ({"owner": "bundled"}, "owned by bundled"),
        ({"pinned": True}, "pinned"),
        ({"source_failures": 0}, "no source failures"),
        ({"team": True}, "team library"),
    ]:
        assert ineligible_reason(**{**ok, **change}) == reason  # type: ignore[arg-type]


def test_a_session_arm_is_the_state_at_its_first_message() -> None:
    t = DAY0
    spans = [Span(t, t + timedelta(days=1))]
    now = t + timedelta(days=3)
    hour = timedelta(hours=1)
    assert arm_of(t + hour, t + 2 * hour, spans, now=now) == "withheld"
    assert arm_of(t - 2 * hour, t - hour, spans, now=now) == "present"
    assert arm_of(t - hour, t + hour, spans, now=now) is None  # withheld during it
    day = timedelta(days=1)
    assert arm_of(t + day - hour, t + day + hour, spans, now=now) is None  # put back during it
    assert arm_of(t + day, t + day + hour, spans, now=now) == "present"
    assert arm_of(t + 5 * hour, t + 6 * hour, [Span(t, None)], now=now) == "withheld"


def test_newcombe_matches_the_published_examples() -> None:
    # Newcombe (1998), Table II, method 10: 56/70 - 48/80 = 0.2, 95% CI 0.0524 to 0.3339;
    # 9/10 - 3/10 = 0.6, CI 0.1705 to 0.8090.
    difference, low, high = newcombe(ArmCounts(70, 56), ArmCounts(80, 48)) or (0, 0, 0)
    assert round(difference, 4) == 0.2 and (round(low, 4), round(high, 4)) == (0.0524, 0.3339)
    _, low, high = newcombe(ArmCounts(10, 9), ArmCounts(10, 3)) or (0, 0, 0)
    assert (round(low, 4), round(high, 4)) == (0.1705, 0.8090)
    assert wilson(0, 10)[0] == 0 and newcombe(ArmCounts(), ArmCounts(3, 1)) is None


def test_decided_when_the_interval_excludes_zero_ended_after_max_days() -> None:
    started = DAY0
    helps = (ArmCounts(40, 1), ArmCounts(10, 7))
    assert decided(*helps)
    state = next_state("running", *helps, started=started, now=started, max_days=60)
    assert state == "decided"
    alike = (ArmCounts(40, 10), ArmCounts(10, 3))
    assert not decided(*alike)
    late = started + timedelta(days=60)
    assert next_state("running", *alike, started=started, now=late, max_days=60) == "ended"
    assert next_state("decided", *alike, started=started, now=late, max_days=60) == "decided"
    assert not decided(ArmCounts(40, 0), ArmCounts(4, 4))  # too few withheld sessions


def test_a_withheld_day_is_no_unused_day() -> None:
    quiet = LiveSkill("push-upstream", "managed", record())

    assert decide(quiet, T0 + timedelta(days=31), THRESHOLDS) is not None  # stale
    away = tuple(Span(T0 + timedelta(days=d), T0 + timedelta(days=d + 1)) for d in range(1, 8, 2))
    assert decide(replace(quiet, withheld=away), T0 + timedelta(days=31), THRESHOLDS) is None
    assert decide(replace(quiet, withheld=away), T0 + timedelta(days=35), THRESHOLDS) is not None


def test_the_arms_are_counted_from_the_sessions_state_db_holds(tmp_path: Path) -> None:
    from skilld.effect.report import skill_anchors
    from skilld.state import StateDB
    from tests.effect_history import Clock, learn_skill, record_session

    state = StateDB(tmp_path / "state.db")
    clock = Clock()
    record_session(state, "claude-code:src", DAY0 - timedelta(days=1), failed=True)
    learn_skill(state, clock, LEARNED, "claude-code:src", DAY0 - timedelta(hours=12))
    conn = state.conn
    with state.transaction():
        store.ensure(conn)
        store.start(conn, "default", LEARNED, DAY0)
        # Withheld on days 2 and 5.
        for day in (2, 5):
            store.intend(conn, "default", LEARNED, "withhold", LEARNED)
            until = at(day) + timedelta(days=1)
            store.mark_withheld(
                conn, "default", LEARNED, withheld=f"{WITHHELD}/{LEARNED}", home=LEARNED,
                until=until, at=at(day),
            )  # fmt: skip
            store.mark_present(conn, "default", LEARNED, until)
    hour = timedelta(hours=1)
    for day in range(7):  # one session a day at noon + 1h; failing on withheld days
        record_session(state, f"claude-code:s{day}", at(day) + hour, failed=day in (2, 5))
    record_session(state, "claude-code:other", at(3) + hour, failed=True, command="make test",
                   signature="sig-make")  # fmt: skip
    record_session(state, "claude-code:old", DAY0 - timedelta(days=3), failed=True)
    anchors = skill_anchors(conn, ["default"])[("default", LEARNED)]
    assert [(a.signature, a.command) for a in anchors] == [("sig-push", "git push")]
    held = store.holdout_for(conn, "default", LEARNED, anchors, now=at(7))
    assert held["state"] == "running"
    assert held["present"] == {"sessions": 5, "failures": 0}
    assert held["withheld"] == {"sessions": 2, "failures": 2}
    assert held["difference"] == -1.0
    ci = held["ci95"]
    assert isinstance(ci, list) and ci[1] < 0
    assert store.holdout_for(conn, "default", "never-held", anchors, now=at(7)) == {
        "state": "off", "present": {"sessions": 0, "failures": 0},
        "withheld": {"sessions": 0, "failures": 0}, "difference": None, "ci95": None,
    }  # fmt: skip
    state.close()


def test_a_hermes_library_withholds_under_the_archive_hermes_skips() -> None:
    from types import SimpleNamespace
    from typing import Any, cast

    from skilld.curator.holdout import _withheld_place

    def library(agent: str | None) -> Any:
        return cast(Any, SimpleNamespace(spec=SimpleNamespace(agent=agent)))

    # Hermes skips `.archive` (and a fixed list), not every dot-folder: docs/learning.md#holdout.
    assert _withheld_place(library("hermes"), "push", False) == ".archive/.skilld/withheld/push"
    assert _withheld_place(library("claude-code"), "push", False) == ".skilld/withheld/push"
    assert _withheld_place(library("dsh"), "push", True) == ".skilld/withheld/push.md"


def test_the_library_figure_pools_the_arms_of_every_skill_in_holdout() -> None:
    from skilld.effect.holdout import prevented

    figure = prevented([(ArmCounts(20, 1), ArmCounts(5, 3)), (ArmCounts(11, 0), ArmCounts(4, 3))])
    assert figure.skills == 2
    assert figure.present == ArmCounts(31, 1) and figure.withheld == ArmCounts(9, 6)
    assert figure.per_100 == 63.4 and figure.ci95 == (29.6, 84.9)
    assert prevented([]).per_100 is None


def test_the_panel_shows_today_s_holdout_and_stops_it(
    held: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overview lists the skill withheld today with "Stop holding this out"; pressing it
    puts the skill back, ends its holdout, and no later withheld block moves it again."""
    from tests.test_web import ORIGIN, client_for
    from tests.test_web import SECRET as PANEL_SECRET

    withheld_day = next(d for d in range(20) if drawn(d))
    tick(held, withheld_day)
    assert places(held.skills, LEARNED) == [f"{WITHHELD}/{LEARNED}"]
    monkeypatch.setenv("SKILLD_NOW", at(withheld_day).isoformat())
    with client_for(held) as panel:
        overview = panel.get("/").text
        assert 'id="withheld"' in overview and "Stop holding this out" in overview
        assert f"<li>{LEARNED} (default)" in overview
        done = panel.post(
            "/act/stop-holdout",
            data={"csrf": PANEL_SECRET, "library": "default", "name": LEARNED, "back": "/"},
            headers={"origin": ORIGIN},
        )
        assert done.status_code == 200 and "Stopped holding" in done.text
        page = panel.get(f"/skills/default/{LEARNED}").text
        assert "Stop holding this out" not in page  # ended: nothing to stop
        again = panel.post(
            "/act/stop-holdout",
            data={"csrf": PANEL_SECRET, "library": "default", "name": LEARNED, "back": "/"},
            headers={"origin": ORIGIN},
        )
        assert "is not being held out" in again.text
    assert places(held.skills, LEARNED) == [LEARNED]
    (row,) = [r for r in json.loads(held.cli("effect", "--json").stdout) if r["name"] == LEARNED]
    assert row["holdout"]["state"] == "ended"
    later = next(d for d in range(withheld_day + 1, 40) if drawn(d))
    tick(held, later)
    assert places(held.skills, LEARNED) == [LEARNED]
    assert [e["detail"]["action"] for e in held.events("web")] == ["stop-holdout"] * 2
