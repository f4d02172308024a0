"""The holdout step of a tick (DESIGN.md §14): withhold a learned skill on its blocks, put it
back at the block's end, and judge each holdout as its blocks pass.

Withholding moves the skill's folder (or flat file) to `<skills dir>/.skilld/withheld/` with
the library's guarded move (`fsutil.move_in_tree`: no link followed at either end), under the
library's writer lock; its usage record, history and stale clock are left alone (the curator
does not count a withheld day toward staleness: `_lifecycle.LiveSkill.withheld`). Every agent
loads only its skills dir's direct children and skips dot-folders (Codex walks deeper but
skips every dot-entry; Hermes walks its category folders and skips a fixed list, `.archive`
among them: `HERMES_WITHHELD_DIR`), so a withheld skill is in no listing
(docs/learning.md#holdout).

Each move is an intent committed to state.db, the move, then the move's record (state, span,
provenance path, event) in one transaction. A process killed between two of them leaves an
intent that `repair` settles by where the skill is found: it is in exactly one place after
the next tick, and its record says which.

Cheap at most ticks: the full pass (discovery, the anchors of every learned skill, each
running holdout's arms) runs once per block and library; a later tick of the same block reads
one meta value per library.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skilld.app import App
from skilld.effect import holdout_store as store
from skilld.effect.holdout import (
    ArmCounts,
    Prevented,
    block_end,
    block_start,
    ineligible_reason,
    is_withheld,
    next_state,
    prevented,
)
from skilld.errors import LibraryError
from skilld.fsutil import UnsafePath, move_in_tree
from skilld.skills.layout import ARCHIVE_DIR, SKILL_FILE
from skilld.skills.library import Library
from skilld.skills.outcomes import Origin

HOLDOUT = Origin(source="holdout")
#: Where a withheld skill waits, inside its skills dir: a dot-folder no agent loads.
WITHHELD_DIR = ".skilld/withheld"
#: Hermes's scanners walk every folder but a fixed list (`.archive`, `.hub`, `.git` ...), so
#: a `.skilld/` there would be listed; its withheld skills wait under `.archive/`, which it
#: skips (and skilld's archive listing skips its dot-folders).
HERMES_WITHHELD_DIR = ".archive/.skilld/withheld"
#: state.db meta, per library: the block the last full pass ran for, and the config it ran
#: with (a changed share or block length runs the pass again at once).
BLOCK_KEY = "holdout_block"
#: Test hook: `before-move` or `after-move` kills the process there (tests/test_holdout.py).
FAULT_ENV = "SKILLD_HOLDOUT_FAULT"


@dataclass
class HoldoutReport:
    withheld: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def run_holdout(app: App, now: datetime) -> HoldoutReport:
    """One holdout step over every library."""
    report = HoldoutReport()
    conn = app.state.conn
    with app.state.transaction():
        store.ensure(conn)
    effect = app.config.effect
    start = block_start(now, effect.holdout_block_hours)
    stamp = [store.iso(start), effect.holdout, effect.holdout_block_hours]
    secret: bytes | None = None
    for library in app.all_libraries():
        key = f"{BLOCK_KEY}:{library.name}"
        moving = store.in_flight(conn, library.name)
        if app.state.get_meta(key) == stamp and not moving:
            continue
        with library.locked():
            for skill in moving:
                repair(app, library, skill, now, report)
            if secret is None and effect.holdout > 0:
                secret = store.load_secret(app.config.state.dir)
            _pass(app, library, now, secret, report)
        app.state.set_meta(key, stamp)
    return report


def _pass(
    app: App, library: Library, now: datetime, secret: bytes | None, report: HoldoutReport
) -> None:
    """The block's pass over one library (its lock held)."""
    from skilld.effect.report import skill_anchors

    conn = app.state.conn
    effect = app.config.effect
    hours = effect.holdout_block_hours
    start = block_start(now, hours)
    until = block_end(start, hours)
    held = store.held_skills(conn, library.name)
    entries = {e.name: e for e in library.entries(parse=False) if not e.broken}
    names = set(held) | {name for name, e in entries.items() if e.owner == "managed"}
    anchors = skill_anchors(conn, [library.name]) if names else {}
    all_spans = store.spans(conn, library.name)
    team = library.team is not None or library.spec.remote is not None
    pins = _Pins(library)
    for name in sorted(names):
        skill = held.get(name)
        entry = entries.get(name)
        failures = anchors.get((library.name, name), [])
        owner = entry.owner if entry is not None else "managed"
        why_not = ineligible_reason(
            owner=owner, pinned=False, source_failures=len(failures), team=team
        )
        if why_not is None and (skill is not None or effect.holdout > 0):
            # The sidecar is read only for a skill that could be held out: a library with
            # nothing to hold out is never touched (no lock file made in it).
            why_not = pins.why_not(name)
        if skill is None:
            learned = min((failure.at for failure in failures), default=None)
            # A skill enters at the first block that starts after it was learned: the block
            # it was learned in is neither arm.
            fresh = learned is None or learned >= store.iso(start)
            if why_not is not None or effect.holdout <= 0 or entry is None or fresh:
                continue
            with app.state.transaction():
                skill = store.start(conn, library.name, name, start)
        if skill.state == "running" and why_not is None:
            present, withheld = store.arm_counts(
                conn, failures, all_spans.get(name, []), started=skill.started,
                stopped=None, now=now,
            )  # fmt: skip
            state = next_state(
                skill.state, present, withheld, started=skill.started, now=now,
                max_days=effect.holdout_max_days,
            )  # fmt: skip
            if state != skill.state:
                with app.state.transaction():
                    store.set_state(conn, library.name, name, state, now)
                (report.decided if state == "decided" else report.ended).append(name)
                skill = skill._replace(state=state)
        wanted = (
            why_not is None
            and skill.state == "running"
            and secret is not None
            and is_withheld(secret, library.name, name, start, effect.holdout)
        )
        try:
            if wanted and skill.withheld is None and entry is not None:
                withhold(app, library, name, until, now, report)
            elif not wanted and skill.withheld is not None:
                restore(app, library, skill, now, report)
            elif wanted and skill.withheld is not None and skill.until != until:
                with app.state.transaction():  # withheld again in the next block: one span
                    conn.execute(
                        "UPDATE holdout_skills SET until = ? WHERE library = ? AND name = ?",
                        (store.iso(until), library.name, name),
                    )
        except (LibraryError, UnsafePath, OSError) as exc:
            report.failures.append(f"{library.name}/{name}: {exc}")
            app.state.add_event(
                "error", library=library.name, skill=name, source=HOLDOUT.source,
                reason=f"holdout could not move {name}: {exc}",
            )  # fmt: skip


class _Pins:
    """The library's pins, read from its usage sidecar once, when first asked. A sidecar that
    cannot be read (a link, a read-only folder) pins every skill: nothing is held out on a
    guess, and a withheld skill goes back."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._records: Mapping[str, Mapping[str, Any]] | None = None
        self._refused: str | None = None

    def why_not(self, name: str) -> str | None:
        if self._records is None and self._refused is None:
            try:
                self._records = self.library.usage_records()
            except (UnsafePath, OSError) as exc:
                self._refused = f"usage not read: {exc}"
        if self._refused is not None:
            return self._refused
        assert self._records is not None
        return "pinned" if (self._records.get(name) or {}).get("pinned") else None


def _fault(point: str) -> None:
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _relative(library: Library, path: Path) -> str:
    return path.relative_to(library.root).as_posix()


def _withheld_place(library: Library, name: str, flat: bool) -> str:
    folder = HERMES_WITHHELD_DIR if library.spec.agent == "hermes" else WITHHELD_DIR
    return f"{folder}/{name}.md" if flat else f"{folder}/{name}"


def withhold(
    app: App, library: Library, name: str, until: datetime, now: datetime, report: HoldoutReport
) -> None:
    """Move `name` out of its agent's sight until `until`."""
    entry = library.entry(name, parse=False)
    if entry is None or entry.owner != "managed":
        return
    flat = entry.layout != "dir"
    home = _relative(library, entry.path if flat else entry.path.parent)
    target = _withheld_place(library, name, flat)
    if os.path.lexists(library.root / target):
        raise LibraryError(f"{library.root / target} exists already")
    with app.state.transaction():
        store.intend(app.state.conn, library.name, name, "withhold", home)
    _fault("before-move")
    move_in_tree(library.root, home, target)
    _fault("after-move")
    _record_withheld(app, library, name, home, target, until, now)
    report.withheld.append(name)


def _record_withheld(
    app: App, library: Library, name: str, home: str, target: str, until: datetime, now: datetime
) -> None:
    skill_file = library.root / target / ("" if target.endswith(".md") else SKILL_FILE)
    with app.state.transaction():
        store.mark_withheld(
            app.state.conn, library.name, name, withheld=target, home=home, until=until, at=now
        )
        library.state.move_provenance(library.name, name, str(skill_file).rstrip("/"))
        library.state.add_event(
            "withheld",
            library=library.name,
            skill=name,
            source=HOLDOUT.source,
            reason=f"holdout block until {until.astimezone(UTC).isoformat(timespec='seconds')}",
            detail={"path": target, "until": store.iso(until)},
        )


def restore(
    app: App, library: Library, skill: store.HeldSkill, now: datetime, report: HoldoutReport
) -> None:
    """Put a withheld skill back where it was. A skill of the same name written meanwhile (a
    new lesson while it was away) stays; the withheld copy goes to the archive."""
    assert skill.withheld is not None and skill.home is not None
    with app.state.transaction():
        store.intend(app.state.conn, library.name, skill.name, "restore")
    _fault("before-move")
    target = skill.home
    superseded = os.path.lexists(library.root / target)
    if superseded:
        stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        suffix = ".md" if skill.withheld.endswith(".md") else ""
        target = f"{ARCHIVE_DIR}/{skill.name}-{stamp}{suffix}"
    move_in_tree(library.root, skill.withheld, target)
    _fault("after-move")
    _record_present(app, library, skill.name, target, now, superseded=superseded)
    report.restored.append(skill.name)


def _record_present(
    app: App, library: Library, name: str, target: str, now: datetime, *, superseded: bool
) -> None:
    skill_file = library.root / target
    if not target.endswith(".md"):
        skill_file = skill_file / SKILL_FILE
    detail: dict[str, Any] = {"path": target}
    with app.state.transaction():
        store.mark_present(app.state.conn, library.name, name, now)
        if superseded:
            detail["superseded"] = True  # the live skill of that name is newer: kept
        else:
            library.state.move_provenance(library.name, name, str(skill_file))
        library.state.add_event(
            "restored_from_holdout",
            library=library.name,
            skill=name,
            source=HOLDOUT.source,
            detail=detail,
        )


def repair(
    app: App, library: Library, skill: store.HeldSkill, now: datetime, report: HoldoutReport
) -> None:
    """Settle a move a killed process left in flight, by where the skill is."""
    root = library.root
    conn = app.state.conn
    if skill.moving == "withhold" and skill.home is not None:
        target = _withheld_place(library, skill.name, skill.home.endswith(".md"))
        if not os.path.lexists(root / skill.home) and os.path.lexists(root / target):
            # Moved, not recorded: recorded now, withheld until the end of this block.
            until = block_end(
                block_start(now, app.config.effect.holdout_block_hours),
                app.config.effect.holdout_block_hours,
            )
            _record_withheld(app, library, skill.name, skill.home, target, until, now)
        else:
            with app.state.transaction():
                store.clear_intent(conn, library.name, skill.name)
    elif skill.moving == "restore" and skill.withheld is not None and skill.home is not None:
        if not os.path.lexists(root / skill.withheld) and os.path.lexists(root / skill.home):
            _record_present(app, library, skill.name, skill.home, now, superseded=False)
        else:
            with app.state.transaction():
                store.clear_intent(conn, library.name, skill.name)
    else:
        with app.state.transaction():
            store.clear_intent(conn, library.name, skill.name)
    report.repaired.append(skill.name)


def library_figure(app: App) -> Prevented:
    """Failures prevented per 100 sessions, with its interval, over every skill in holdout
    (running or decided) of every library."""
    from skilld.clock import utc_now
    from skilld.effect.report import skill_anchors

    conn = app.state.conn
    anchors = skill_anchors(conn, [library.name for library in app.all_libraries()])
    objects = store.holdout_objects(conn, anchors, now=utc_now())
    return prevented(
        (_arm(held["present"]), _arm(held["withheld"]))
        for held in objects.values()
        if held["state"] in ("running", "decided")
    )


def _arm(counts: object) -> ArmCounts:
    assert isinstance(counts, dict)
    return ArmCounts(int(counts["sessions"]), int(counts["failures"]))


def withheld_now(app: App) -> list[dict[str, Any]]:
    """`skilld holdout --json` and `/api/holdout`: the skills withheld now and until when,
    with each holdout's state, by library and name."""
    rows = []
    for skill in store.held_skills(app.state.conn).values():
        if skill.withheld is None:
            continue
        rows.append(
            {
                "library": skill.library,
                "name": skill.name,
                "state": skill.state,
                "since": store.iso(skill.started),
                "until": store.iso(skill.until) if skill.until else None,
                "path": skill.withheld,
            }
        )
    return rows


def stop_holdout(app: App, library: Library, name: str, now: datetime) -> bool:
    """A person's "stop holding this out": the skill is put back now when it is withheld, and
    its holdout ends, so it stays present from then on (its arms so far are kept). False when
    it is not in a running holdout."""
    conn = app.state.conn
    with app.state.transaction():
        store.ensure(conn)
    skill = store.held_skills(conn, library.name).get(name)
    if skill is None or (skill.state != "running" and skill.withheld is None):
        return False
    with library.locked():
        if skill.withheld is not None:
            restore(app, library, skill, now, HoldoutReport())
        with app.state.transaction():
            store.set_state(conn, library.name, name, "ended", now)
    return True


def holdout_overview(app: App) -> dict[str, Any] | None:
    """What the panel's overview shows of the holdout: the skills withheld today and the
    library figure; None while no skill was ever held out (nothing is measured then)."""
    conn = app.state.conn
    if not store.has_tables(conn) or not store.held_skills(conn):
        return None
    return {"withheld": withheld_now(app), "figure": library_figure(app)._asdict()}
