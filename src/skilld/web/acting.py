"""What the panel's buttons do: each through the function the CLI calls for the same verb, with
an outcome that names skills (never full paths), and the page the browser goes back to.

A person's skill written in the panel (`write`) is theirs: `actions.write_by_hand`; an edit is
saved as theirs, or (`save=managed`) left to skilld to keep improving. Archive, Roll back and
Delete are a person's acts: they take a human skill too (`force`), never a pinned one or one
the agent's bundle, a hub or another folder owns; the skill page offers only what is accepted
(`offered`). Run now (`curate`) is `skilld curate`'s lifecycle pass, and its preview `skilld
curate --dry-run`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from skilld import actions
from skilld.errors import UsageError
from skilld.skills.outcomes import Origin
from skilld.web.present import safe_back

if TYPE_CHECKING:
    from skilld.app import App

#: Changes made through the panel are attributed to "panel" in the event log.
PANEL = Origin(source="panel")
SKILL_ACTIONS = ("pin", "unpin", "archive", "restore", "rollback", "delete", "stop-holdout")
REVIEW_ACTIONS = ("approve", "reject")
#: Every verb `/act/{verb}` takes; all but `curate` name a skill.
VERBS = (*SKILL_ACTIONS, *REVIEW_ACTIONS, "write", "curate")
#: The owners whose skill a person may edit, archive, roll back or delete from the panel.
CHANGEABLE = ("managed", "human")


def offered(owner: str, *, pinned: bool, archived: bool, held: bool = False) -> set[str]:
    """The buttons a skill's page shows (`edit` and `SKILL_ACTIONS`' verbs): each one the panel
    accepts for a skill of `owner`, pinned or not, live or `archived`, in a running holdout
    (`held`) or not."""
    if archived:
        return {"restore", "rollback"}
    shown = {"unpin" if pinned else "pin"} | ({"stop-holdout"} if held else set())
    if owner in CHANGEABLE and not pinned:
        shown |= {"edit", "archive", "rollback", "delete"}
    return shown


def perform(app: App, verb: str, fields: Mapping[str, str]) -> tuple[str, str | None]:
    """Do `verb` to the skill `fields` name: (the outcome in words, the library it was done
    in). Raises SkilldError for a refusal."""
    name, library = fields.get("name", ""), fields.get("library") or None
    if verb == "approve":
        result = actions.approve(app, name, PANEL, library)
        return f"Approved {name}: {result.kind}.", library
    if verb == "reject":
        actions.reject(app, name, PANEL, library)
        return f"Rejected {name}: the proposal is dropped.", library
    if verb == "curate":
        moved = curate_now(app, dry_run=False)
        return f"The curator ran: {moved_text(moved)}.", None
    if verb == "write":
        return write(app, fields)
    if verb == "stop-holdout":
        return stop_holding_out(app, name, library)
    chosen = app.select(library, skill=name)
    if verb in ("pin", "unpin"):
        chosen.set_pinned(name, verb == "pin", PANEL)
        message = (
            f"Pinned {name}: skilld will not change or retire it."
            if verb == "pin"
            else f"Unpinned {name}: skilld may change it again."
        )
    elif verb == "archive":
        chosen.archive(name, PANEL, reason="by hand", force=True)
        message = f"Archived {name}: Restore brings it back."
    elif verb == "restore":
        chosen.restore(name, PANEL)
        message = f"Restored {name}."
    elif verb == "rollback":
        actions.rollback(app, chosen, name, PANEL, fields.get("version") or None, force=True)
        message = f"Rolled {name} back to the chosen version."
    else:
        deleted = chosen.delete(name, PANEL, force=True)
        message = f"Deleted {name}: its last version stays in history."
        if deleted.kept:
            message += f" Kept {', '.join(deleted.kept)}: not written by skilld."
    return message, chosen.name


def stop_holding_out(app: App, name: str, library: str | None) -> tuple[str, str]:
    """End `name`'s holdout: put back now if withheld, present from then on. The library is
    named by the form: a withheld skill is in none of the listings `select` looks in."""
    from skilld.clock import utc_now
    from skilld.curator.holdout import stop_holdout

    chosen = app.select(library)
    if not stop_holdout(app, chosen, name, utc_now()):
        raise UsageError(f"{name} is not being held out")
    return f"Stopped holding {name} out: it stays present from now on.", chosen.name


def write(app: App, fields: Mapping[str, str]) -> tuple[str, str]:
    """A person's new skill (`new` set), or their edit of one: theirs from then on, or with
    `save=managed` still skilld's to improve (the edit a version approved by the panel)."""
    from skilld.skills.document import SkillDoc

    name = fields.get("name", "").strip()
    description = fields.get("description", "").strip()
    if not name or not description:
        raise UsageError("a skill needs a name and a description")
    library = app.select(fields.get("library") or None, skill=name)
    doc = SkillDoc(
        name=name,
        description=description,
        when_to_use=fields.get("when", "").strip() or None,
        body=fields.get("body", "").replace("\r\n", "\n"),
    )
    new = fields.get("new") == "1"
    managed = not new and fields.get("save") == "managed"
    result = actions.write_by_hand(library, doc, PANEL, new=new, managed=managed)
    verb = "Wrote" if result.kind == "created" else "Saved" if result.kind == "updated" else "Kept"
    if managed:
        return f"{verb} {result.name}: skilld keeps improving it.", library.name
    return f"{verb} {result.name}: it is yours, and skilld will not change it.", library.name


def curate_now(app: App, *, dry_run: bool) -> list[dict[str, Any]]:
    """The curator's lifecycle pass now over every library (`skilld curate`, or with
    `dry_run` `skilld curate --dry-run`): each move it made, or would make."""
    import anyio

    from skilld.curator.schedule import curate, utc_now

    async def run() -> list[dict[str, Any]]:
        result = await curate(app, now=utc_now(), dry_run=dry_run)
        return [
            {
                "library": lifecycle.library,
                "name": t.name,
                "kind": t.kind,
                "from": t.from_state,
                "to": t.to_state,
                "reason": t.reason,
            }
            for lifecycle in result.lifecycle
            for t in lifecycle.transitions
        ]

    return anyio.run(run)


def moved_text(moved: list[dict[str, Any]]) -> str:
    """`2 stale, 1 archived`, or `nothing moved`."""
    counts: dict[str, int] = {}
    for move in moved:
        counts[move["kind"]] = counts.get(move["kind"], 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing moved"


def back_to(verb: str, back: str | None, where: str | None, name: str, done: bool) -> str:
    """The page an action redirects to: the one its form came from (a path on this panel),
    else its verb's own page; never the page of a skill that was just deleted, and a written
    skill's own page."""
    default = {"approve": "/review", "reject": "/review", "curate": "/curator"}.get(
        verb, f"/skills/{quote(where)}/{quote(name)}" if where and name else "/skills"
    )
    if verb == "write" and done and where:
        return f"/skills/{quote(where)}/{quote(name)}"
    chosen = safe_back(back, default)
    if verb == "delete" and done and chosen.split("?")[0].startswith("/skills/"):
        return "/skills"
    return chosen
