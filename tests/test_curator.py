"""The curator's lifecycle: pure decisions, the pass over a real library, the schedule, the CLI.

Time is a clock the test moves; the library, the usage store and the state all read it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skilld.app import App, open_app
from skilld.config import Config, build_config, load_config
from skilld.curator._lifecycle import LiveSkill, Thresholds, decide, plan_pass
from skilld.curator.passes import DISABLED_KEY, LAST_RUN_KEY, run_lifecycle
from skilld.curator.schedule import ScheduledCurator, curate, schedule_decision
from skilld.daemon import Daemon
from skilld.digest import sha256_hex
from skilld.routing import resolve
from skilld.skills.document import SkillDoc, parse_skill, render_skill
from skilld.skills.library import Library
from skilld.skills.outcomes import Origin
from skilld.skills.usage import UsageStore, format_timestamp, new_record
from skilld.state import StateDB
from tests.conftest import Workspace

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ME = Origin(source="cli")
THRESHOLDS = Thresholds.from_days(30, 90)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **span: float) -> datetime:
        self.now += timedelta(**span)
        return self.now


def make_config(tmp_path: Path, **curator: Any) -> Config:
    skills: dict[str, Any] = {"dir": str(tmp_path / "skills")}
    if "dialect" in curator:
        skills["dialect"] = curator.pop("dialect")
    if "extra_dirs" in curator:
        skills["extra_dirs"] = curator.pop("extra_dirs")
    return build_config(
        {"skills": skills, "state": {"dir": str(tmp_path / "state")}, "curator": curator}
    )


@contextlib.contextmanager
def clocked_app(config: Config, clock: Clock) -> Iterator[App]:
    state = StateDB(config.state.dir / "state.db", clock=lambda: clock().timestamp())
    usage = UsageStore(config.skills.dir, clock=clock)
    routing = resolve(config)
    library = Library(
        routing.libraries["default"],
        state,
        usage,
        history_dir=config.state.dir / "history" / "@default",
        locks_dir=config.state.dir / "locks",
        clock=lambda: clock().timestamp(),
    )
    library.prepare()
    try:
        yield App(config, routing, state, {"default": library})
    finally:
        usage.close()
        state.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(tmp_path: Path, clock: Clock) -> Iterator[App]:
    with clocked_app(make_config(tmp_path), clock) as opened:
        yield opened


def write(app: App, name: str, body: str = "1. Run `make test`.\n") -> None:
    app.library.apply(SkillDoc(name=name, description=f"How to {name}.", body=body), ME)


def state_of(app: App, name: str) -> str | None:
    record = app.library.usage.get(name)
    return record.get("state") if record else None


def curator_events(app: App) -> list[tuple[str, str | None]]:
    return [(e.kind, e.skill) for e in app.state.events() if e.source == "curator"]


def tree_digest(root: Path) -> dict[str, str]:
    """Every path under `root` with the sha256 of its bytes (directories marked as such)."""
    return {
        str(path.relative_to(root)): (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        )
        for path in sorted(root.rglob("*"))
    }


# -- pure decisions -----------------------------------------------------------------------------


def record(**fields: Any) -> dict[str, Any]:
    base = new_record(T0, created_by="agent")
    base.update(fields)
    return base


def test_decide_ages_from_latest_activity_else_created_at_else_provenance() -> None:
    used = record(last_used_at=format_timestamp(T0 + timedelta(days=20)))
    assert decide(LiveSkill("a", "managed", used), T0 + timedelta(days=49), THRESHOLDS) is None
    stale = decide(LiveSkill("a", "managed", used), T0 + timedelta(days=51), THRESHOLDS)
    assert stale is not None and (stale.kind, stale.to_state) == ("stale", "stale")
    assert stale.anchor == T0 + timedelta(days=20) and stale.age_days == 31

    assert decide(LiveSkill("b", "managed", record()), T0 + timedelta(days=30), THRESHOLDS) is None
    archived = decide(LiveSkill("b", "managed", record()), T0 + timedelta(days=91), THRESHOLDS)
    assert archived is not None and archived.kind == "archived"

    orphan = LiveSkill("c", "managed", None, provenance_created_at=T0)
    moved = decide(orphan, T0 + timedelta(days=31), THRESHOLDS)
    assert moved is not None and moved.anchor == T0
    assert decide(LiveSkill("d", "managed", None), T0 + timedelta(days=400), THRESHOLDS) is None


def test_decide_stale_reactivates_on_activity_and_stays_stale_otherwise() -> None:
    now = T0 + timedelta(days=60)
    quiet = record(state="stale")
    assert decide(LiveSkill("a", "managed", quiet), now, THRESHOLDS) is None
    busy = record(state="stale", last_viewed_at=format_timestamp(now - timedelta(hours=1)))
    back = decide(LiveSkill("a", "managed", busy), now, THRESHOLDS)
    assert back is not None and (back.kind, back.to_state, back.from_state) == (
        "reactivated",
        "active",
        "stale",
    )
    returned = decide(LiveSkill("a", "managed", record(state="archived")), now, THRESHOLDS)
    assert returned is not None and returned.kind == "reactivated" and returned.refresh_anchor


@pytest.mark.parametrize("owner", ["human", "bundled", "hub", "external"])
def test_decide_leaves_other_owners_and_pins_alone(owner: str) -> None:
    ancient = T0 + timedelta(days=1000)
    assert decide(LiveSkill("a", owner, record()), ancient, THRESHOLDS) is None
    assert decide(LiveSkill("a", "managed", record(pinned=True)), ancient, THRESHOLDS) is None


def test_plan_rewrites_only_where_wanted_and_dialect_allows() -> None:
    now = T0 + timedelta(days=40)
    candidates = [
        LiveSkill("going-stale", "managed", record()),
        LiveSkill("still-stale", "managed", record(state="stale")),
        LiveSkill("fresh", "managed", record(last_used_at=format_timestamp(now))),
        LiveSkill("was-hidden", "managed", record(last_used_at=format_timestamp(now))),
    ]
    plan = plan_pass(
        candidates, now, THRESHOLDS, disabled={"still-stale", "was-hidden"}, disable_stale=True
    )
    assert plan.disable == ["going-stale"] and plan.enable == ["was-hidden"]
    off = plan_pass(candidates, now, THRESHOLDS, disabled={"still-stale"}, disable_stale=False)
    assert off.disable == [] and off.enable == ["still-stale"]
    agentskills = plan_pass(candidates, now, THRESHOLDS, disable_stale=True, dialect="agentskills")
    assert agentskills.disable == []


def test_schedule_decision() -> None:
    day = timedelta(hours=24)
    assert schedule_decision(None, T0, day) == "defer"
    assert schedule_decision(T0, T0 + timedelta(hours=23), day) == "wait"
    assert schedule_decision(T0, T0 + day, day) == "due"


# -- the pass over a real library ---------------------------------------------------------------


def test_stale_after_30_days_archived_after_90(app: App, clock: Clock) -> None:
    write(app, "deploy-staging")
    write(app, "busy-skill")
    clock.advance(days=29)
    assert run_lifecycle(app, app.library, now=clock()).transitions == []

    clock.advance(days=2)
    app.library.usage.bump("busy-skill", "use")
    report = run_lifecycle(app, app.library, now=clock())
    assert [(t.kind, t.name) for t in report.transitions] == [("stale", "deploy-staging")]
    assert state_of(app, "deploy-staging") == "stale" and state_of(app, "busy-skill") == "active"
    event = app.state.events(kinds=("stale",))[-1]
    assert (event.skill, event.source, event.detail["age_days"]) == (
        "deploy-staging",
        "curator",
        31,
    )

    clock.advance(days=30)
    assert (
        run_lifecycle(app, app.library, now=clock()).transitions == []
    )  # stale already: no second event

    clock.advance(days=30)  # day 91; busy-skill, used on day 31, has been idle for 60 days
    report = run_lifecycle(app, app.library, now=clock())
    assert {(t.kind, t.name) for t in report.transitions} == {
        ("archived", "deploy-staging"),
        ("stale", "busy-skill"),
    }
    archived_file = app.library.root / ".archive" / "deploy-staging" / "SKILL.md"
    assert archived_file.is_file() and not (app.library.root / "deploy-staging").exists()
    usage = app.library.usage.get("deploy-staging")
    assert usage is not None and usage["state"] == "archived"
    assert usage["archived_at"] is not None and usage["archived_at"].startswith("2026-04-02")
    assert curator_events(app) == [
        ("stale", "deploy-staging"),
        ("archived", "deploy-staging"),
        ("stale", "busy-skill"),
    ]
    assert state_of(app, "busy-skill") == "stale"


def test_new_activity_reactivates_a_stale_skill(app: App, clock: Clock) -> None:
    write(app, "flaky-tests")
    clock.advance(days=31)
    run_lifecycle(app, app.library, now=clock())
    assert state_of(app, "flaky-tests") == "stale"
    clock.advance(days=1)
    app.library.usage.bump("flaky-tests", "view")
    report = run_lifecycle(app, app.library, now=clock())
    assert [(t.kind, t.from_state, t.to_state) for t in report.transitions] == [
        ("reactivated", "stale", "active")
    ]
    assert state_of(app, "flaky-tests") == "active"
    assert app.state.events(kinds=("reactivated",))[-1].source == "curator"


def test_pinned_skill_never_moves(app: App, clock: Clock) -> None:
    write(app, "keep-me")
    app.library.set_pinned("keep-me", True, ME)
    clock.advance(days=400)
    assert run_lifecycle(app, app.library, now=clock()).transitions == []
    assert (app.library.root / "keep-me" / "SKILL.md").is_file()
    assert state_of(app, "keep-me") == "active" and curator_events(app) == []


def test_a_pass_reads_the_sidecar_and_lists_the_library_once(
    app: App, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 managed skills, 50 of them idle past the archive threshold: the pass reads the
    usage sidecar and lists the library a constant number of times, not once per archive."""
    library = app.library
    records = {}
    # One rendering, renamed: YAML would otherwise take most of the test's time.
    doc = SkillDoc(name="skill-xxxx", description="How to do a task.", body="1. Do it.\n")
    template = render_skill(doc, library.dialect)
    with app.state.transaction():
        for index in range(1000):
            name = f"skill-{index:04d}"
            data = template.replace("skill-xxxx", name).encode()
            (library.root / name).mkdir()
            (library.root / name / "SKILL.md").write_bytes(data)
            path = str(library.root / name / "SKILL.md")
            app.state.put_provenance("default", name, path=path, sha256=sha256_hex(data))
            idle_days = 100 if index % 20 == 0 else 40 if index % 20 == 1 else 5
            last_used = format_timestamp(clock() - timedelta(days=idle_days))
            records[name] = record(use_count=1, last_used_at=last_used)
    with library.usage.transaction() as current:
        current.update(records)

    sidecar_reads: list[str] = []
    listings: list[str] = []
    real_load, real_scandir = UsageStore._load, os.scandir

    def counted_load(store: UsageStore) -> Any:
        sidecar_reads.append(str(store.path))
        return real_load(store)

    def counted_scandir(path: Any) -> Any:
        if Path(path) == library.root:
            listings.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(UsageStore, "_load", counted_load)
    monkeypatch.setattr(os, "scandir", counted_scandir)
    report = run_lifecycle(app, library, now=clock())
    monkeypatch.undo()

    kinds = Counter(t.kind for t in report.transitions)
    assert kinds == {"archived": 50, "stale": 50}
    assert len(list((library.root / ".archive").iterdir())) == 50
    # One read to decide, one read-modify-write to record the pass's states.
    assert len(sidecar_reads) <= 2, sidecar_reads
    assert len(listings) == 1, listings
    assert state_of(app, "skill-0000") == "archived" and state_of(app, "skill-0001") == "stale"


def test_bundled_hub_human_and_external_skills_never_move(tmp_path: Path, clock: Clock) -> None:
    extra = tmp_path / "project-skills"
    (extra / "project-one").mkdir(parents=True)
    (extra / "project-one" / "SKILL.md").write_text(
        "---\nname: project-one\ndescription: From the project.\n---\nbody\n"
    )
    config = make_config(tmp_path, extra_dirs=[str(extra)])
    with clocked_app(config, clock) as app:
        for name in ("from-bundle", "from-hub", "edited-by-hand", "still-ours"):
            write(app, name)
        root = app.library.root
        (root / ".bundled_manifest").write_text("from-bundle:abc\n")
        (root / ".hub").mkdir()
        (root / ".hub" / "lock.json").write_text(
            json.dumps({"version": 1, "installed": {"from-hub": {}}})
        )
        edited = root / "edited-by-hand" / "SKILL.md"
        edited.write_text(edited.read_text() + "\nMy own note.\n")
        (root / "written-by-hand").mkdir()
        (root / "written-by-hand" / "SKILL.md").write_text(
            "---\nname: written-by-hand\ndescription: Mine.\n---\nbody\n"
        )
        with app.library.usage.transaction() as records:
            for name in ("written-by-hand", "project-one"):
                records[name] = new_record(T0 - timedelta(days=500), created_by="agent")
        before = tree_digest(root)
        clock.advance(days=400)
        report = run_lifecycle(app, app.library, now=clock())
        assert [(t.kind, t.name) for t in report.transitions] == [("archived", "still-ours")]
        del before["still-ours"], before["still-ours/SKILL.md"]
        after = {k: v for k, v in tree_digest(root).items() if not k.startswith(".")}
        assert after == {k: v for k, v in before.items() if not k.startswith(".")}
        assert (extra / "project-one" / "SKILL.md").is_file()
        for name in ("from-bundle", "from-hub", "edited-by-hand", "written-by-hand"):
            assert state_of(app, name) == "active", name


def test_restored_skill_survives_the_next_pass(app: App, clock: Clock) -> None:
    write(app, "old-habit")
    clock.advance(days=91)
    run_lifecycle(app, app.library, now=clock())
    assert state_of(app, "old-habit") == "archived"

    clock.advance(days=1)
    restored = app.library.restore("old-habit", ME)
    entry = app.library.get("old-habit")
    assert entry is not None and entry.owner == "managed" and entry.path == restored
    assert state_of(app, "old-habit") == "active"

    clock.advance(days=1)
    assert run_lifecycle(app, app.library, now=clock()).transitions == []
    assert restored.is_file() and state_of(app, "old-habit") == "active"
    clock.advance(days=30)  # 31 days after the restore refreshed the anchor
    assert [t.kind for t in run_lifecycle(app, app.library, now=clock()).transitions] == ["stale"]


def test_restore_of_a_copy_edited_in_the_archive_is_human(app: App, clock: Clock) -> None:
    write(app, "tampered")
    clock.advance(days=91)
    run_lifecycle(app, app.library, now=clock())
    archived = app.library.root / ".archive" / "tampered" / "SKILL.md"
    archived.write_text(archived.read_text() + "\nEdited while archived.\n")
    app.library.restore("tampered", ME)
    entry = app.library.get("tampered")
    assert entry is not None and entry.owner == "human"


def test_skill_moved_back_by_hand_is_reactivated_not_archived_again(app: App, clock: Clock) -> None:
    write(app, "moved-back")
    clock.advance(days=91)
    run_lifecycle(app, app.library, now=clock())
    (app.library.root / ".archive" / "moved-back").rename(app.library.root / "moved-back")
    clock.advance(days=1)
    report = run_lifecycle(app, app.library, now=clock())
    assert [(t.kind, t.refresh_anchor) for t in report.transitions] == [("reactivated", True)]
    clock.advance(days=1)
    assert run_lifecycle(app, app.library, now=clock()).transitions == []
    assert (app.library.root / "moved-back" / "SKILL.md").is_file()


@pytest.mark.anyio
async def test_first_pass_is_deferred_one_interval(app: App, clock: Clock) -> None:
    write(app, "imported")
    with app.library.usage.transaction() as records:
        records["imported"]["created_at"] = format_timestamp(T0 - timedelta(days=365))
    assert app.state.get_meta(LAST_RUN_KEY) is None

    first = await curate(app, now=clock(), scheduled=True)
    assert first.deferred_until == T0 + timedelta(hours=24) and first.lifecycle == []
    assert (app.library.root / "imported" / "SKILL.md").is_file()
    assert app.state.get_meta(LAST_RUN_KEY) == T0.isoformat(timespec="seconds")
    assert curator_events(app) == []

    clock.advance(hours=24)
    second = await curate(app, now=clock(), scheduled=True)
    assert [t.kind for t in second.lifecycle[0].transitions] == ["archived"]


@pytest.mark.anyio
async def test_a_persons_first_curate_acts_as_its_dry_run_said(app: App, clock: Clock) -> None:
    write(app, "ancient")
    with app.library.usage.transaction() as records:
        records["ancient"]["created_at"] = format_timestamp(T0 - timedelta(days=365))
    planned = await curate(app, now=clock(), dry_run=True)
    assert [(t.kind, t.name) for t in planned.lifecycle[0].transitions] == [("archived", "ancient")]
    done = await curate(app, now=clock())
    assert done.deferred_until is None
    assert [(t.kind, t.name) for t in done.lifecycle[0].transitions] == [("archived", "ancient")]
    assert (app.library.root / ".archive" / "ancient" / "SKILL.md").is_file()


@pytest.mark.anyio
async def test_dry_run_leaves_the_tree_byte_identical(tmp_path: Path, clock: Clock) -> None:
    with clocked_app(make_config(tmp_path, disable_stale=True), clock) as app:
        for name in ("to-archive", "to-stale", "to-reactivate"):
            write(app, name)
        clock.advance(days=40)
        for name in ("to-archive", "to-stale"):  # active after the pass below; not to-reactivate
            app.library.usage.bump(name, "use")
        run_lifecycle(app, app.library, now=clock())
        assert state_of(app, "to-reactivate") == "stale"
        clock.advance(days=100)
        app.library.usage.bump("to-reactivate", "use")
        with app.library.usage.transaction() as records:
            records["to-stale"]["last_used_at"] = format_timestamp(clock() - timedelta(days=45))
        events_before = len(app.state.events())
        meta_before = app.state.get_meta(DISABLED_KEY)
        before = tree_digest(app.library.root)

        run = await curate(app, now=clock(), dry_run=True)

        assert tree_digest(app.library.root) == before
        assert len(app.state.events()) == events_before
        assert app.state.get_meta(LAST_RUN_KEY) is None
        assert app.state.get_meta(DISABLED_KEY) == meta_before
        planned = {(t.kind, t.name) for t in run.lifecycle[0].transitions}
        assert planned == {
            ("archived", "to-archive"),
            ("stale", "to-stale"),
            ("reactivated", "to-reactivate"),
        }
        assert run.lifecycle[0].disabled == ["to-stale"]
        assert run.lifecycle[0].enabled == ["to-reactivate"]


@pytest.mark.parametrize("dialect", ["dsh", "claude"])
def test_disable_stale_round_trip(tmp_path: Path, clock: Clock, dialect: str) -> None:
    config = make_config(tmp_path, disable_stale=True, dialect=dialect)
    with clocked_app(config, clock) as app:
        write(app, "rare-task")
        path = app.library.root / "rare-task" / "SKILL.md"
        clock.advance(days=31)
        report = run_lifecycle(app, app.library, now=clock())
        assert report.disabled == ["rare-task"] and state_of(app, "rare-task") == "stale"
        assert "disable-model-invocation: true" in path.read_text()
        entry = app.library.get("rare-task")
        assert entry is not None and entry.owner == "managed"
        assert entry.doc is not None and entry.doc.disable_model_invocation
        usage = app.library.usage.get("rare-task")
        assert usage is not None and usage["patch_count"] == 0 and usage["last_patched_at"] is None
        assert app.state.get_meta(DISABLED_KEY) == ["rare-task"]
        updated = app.state.events(kinds=("updated",))[-1]
        assert updated.source == "curator" and updated.skill == "rare-task"

        clock.advance(days=1)
        assert (
            run_lifecycle(app, app.library, now=clock()).transitions == []
        )  # the rewrite was no activity

        app.library.usage.bump("rare-task", "use")
        report = run_lifecycle(app, app.library, now=clock())
        assert [t.kind for t in report.transitions] == ["reactivated"]
        assert report.enabled == ["rare-task"]
        assert "disable-model-invocation" not in path.read_text()
        assert parse_skill(path.read_bytes(), dialect=dialect).body == "1. Run `make test`.\n"
        entry = app.library.get("rare-task")
        assert entry is not None and entry.owner == "managed"
        assert app.state.get_meta(DISABLED_KEY) == []


def test_a_hidden_skill_is_archived_shown_so_a_restore_brings_it_back_usable(
    tmp_path: Path, clock: Clock
) -> None:
    with clocked_app(make_config(tmp_path, disable_stale=True), clock) as app:
        write(app, "seldom")
        clock.advance(days=31)
        run_lifecycle(app, app.library, now=clock())
        clock.advance(days=60)
        report = run_lifecycle(app, app.library, now=clock())
        assert report.enabled == ["seldom"] and [t.kind for t in report.transitions] == ["archived"]
        restored = app.library.restore("seldom", ME)
        assert "disable-model-invocation" not in restored.read_text()


def test_agentskills_dialect_is_never_rewritten(tmp_path: Path, clock: Clock) -> None:
    with clocked_app(
        make_config(tmp_path, disable_stale=True, dialect="agentskills"), clock
    ) as app:
        write(app, "plain")
        before = (app.library.root / "plain" / "SKILL.md").read_bytes()
        clock.advance(days=31)
        report = run_lifecycle(app, app.library, now=clock())
        assert [t.kind for t in report.transitions] == ["stale"] and report.disabled == []
        assert (app.library.root / "plain" / "SKILL.md").read_bytes() == before


# -- the daemon hook ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_daemon_hook_runs_when_due(tmp_path: Path, clock: Clock) -> None:
    with clocked_app(make_config(tmp_path / "off", enabled=False), clock) as app:
        await ScheduledCurator(clock)(app, None)  # type: ignore[arg-type]
        assert app.state.get_meta(LAST_RUN_KEY) is None  # disabled: not even deferred
    config = make_config(tmp_path, interval_hours=24)
    hook = ScheduledCurator(clock)
    with clocked_app(config, clock) as app:
        write(app, "nightly")
        llm: Any = None  # consolidation is off: the hook never touches the client
        await hook(app, llm)  # first pass: deferred
        assert app.state.get_meta(LAST_RUN_KEY) == T0.isoformat(timespec="seconds")
        clock.advance(days=31)
        app.state.set_meta(LAST_RUN_KEY, (clock() - timedelta(hours=23)).isoformat())
        await hook(app, llm)
        assert state_of(app, "nightly") == "active"  # not due yet
        clock.advance(hours=1)
        await hook(app, llm)
        assert state_of(app, "nightly") == "stale"
        assert app.state.get_meta(LAST_RUN_KEY) == clock().isoformat(timespec="seconds")


@pytest.mark.anyio
async def test_the_daemon_runs_the_hook_after_its_tick(workspace: Workspace) -> None:
    workspace.settings = {"log": {"level": "warning"}}
    config = load_config(workspace.write_config())
    result = await Daemon(config, curator_pass=ScheduledCurator(Clock())).run(once=True)
    assert result.ticks == 1
    state = StateDB(workspace.state / "state.db")
    assert state.get_meta(LAST_RUN_KEY) == T0.isoformat(timespec="seconds")
    state.close()


# -- the command line ---------------------------------------------------------------------------


def test_cli_curate_marks_stale_and_skills_list_shows_it(workspace: Workspace) -> None:
    workspace.settings = {"log": {"level": "warning"}}
    now = datetime.now(UTC)
    with open_app(load_config(workspace.write_config())) as app:
        for name in ("old-one", "new-one"):
            write(app, name)
        with app.library.usage.transaction() as records:
            records["old-one"]["created_at"] = format_timestamp(now - timedelta(days=45))
        app.state.set_meta(LAST_RUN_KEY, (now - timedelta(days=2)).isoformat(timespec="seconds"))

    dry = workspace.cli("curate", "--dry-run")
    assert dry.returncode == 0 and "would be stale" in dry.stdout and "old-one" in dry.stdout

    result = workspace.cli("curate", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(t["kind"], t["name"]) for t in report["lifecycle"][0]["transitions"]] == [
        ("stale", "old-one")
    ]
    listing = workspace.cli("skills", "list", "--json")
    states = {row["name"]: row["state"] for row in json.loads(listing.stdout)}
    assert states == {"old-one": "stale", "new-one": "active"}
    state = StateDB(workspace.state / "state.db")
    assert [(e.skill, e.source) for e in state.events(kinds=("stale",))] == [("old-one", "curator")]
    state.close()
