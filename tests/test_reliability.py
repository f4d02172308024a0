"""Issue 12, as a user meets it: nothing lost, nothing repeated.

Each test drives the real `skilld` command line in a subprocess, with a real HTTP server on
127.0.0.1 as the LLM and real files, through one of the problems the issue found: an LLM
outage, a source root that goes away, a write that fails, a full library, replies that were
refused, the claude dialect rewriting unchanged skills, deletes, shadowing extra dirs, held
sessions, explicit curation, and the smaller ones. Each failed before the fix.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.campaigns.harness import Unprivileged, shared_tmp_dir, unprivileged
from tests.campaigns.test_bad_transcripts import Format, Writer
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, completion, skill_reply, skip_reply
from tests.loopback import free_port

# -- helpers -----------------------------------------------------------------------------------


def configure(ws: Workspace, server: FakeLLM | None, **sections: dict[str, Any]) -> None:
    """Point `ws` at `server` and merge `sections` into its config (written now)."""
    if server is not None:
        ws.llm_url = server.base_url
    for name, values in sections.items():
        ws.settings.setdefault(name, {}).update(values)
    ws.write_config()


def once(ws: Workspace) -> None:
    result = ws.cli("once")
    assert result.returncode == 0, result.stderr


def window_text(request: dict[str, Any]) -> str:
    """The request's first user message: the window it reflects, or the merge it asks for."""
    return str(request["messages"][1]["content"])


def by_topic(replies: dict[str, Reply]) -> Callable[[dict[str, Any]], Reply]:
    """A responder answering each request with the reply of the topic its window names."""

    def respond(request: dict[str, Any]) -> Reply:
        text = window_text(request)
        for topic, reply in replies.items():
            if topic in text:
                return reply
        return skip_reply()

    return respond


def tool_call(call_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style tool call, as the jsonl and Hermes transcripts carry them."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }


def skill_md(ws: Workspace, name: str) -> Path:
    return ws.skills / name / "SKILL.md"


def status(ws: Workspace) -> dict[str, Any]:
    result = ws.cli("status", "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def skill_rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    result = ws.cli("skills", "list", "--json")
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


# -- 1. an outage never spends max_attempts --------------------------------------------------

OUTAGES = {
    "401": Reply(status=401, body={"error": {"message": "Incorrect API key provided"}}),
    "404": Reply(status=404, body={"error": {"message": "The model test-model does not exist"}}),
    "503": Reply(status=503, body={"error": {"message": "Service Unavailable"}}),
    "timeout": Reply(hang_seconds=2.0, body=completion("{}")),
    "port closed": Reply(),  # the config points at a port nothing listens on
}


@pytest.mark.parametrize("outage", list(OUTAGES))
def test_every_pending_window_is_reflected_after_an_outage_of_any_kind(
    workspace: Workspace, fake_llm: FakeLLM, outage: str
) -> None:
    """Twice `max_attempts` ticks of `skilld once` against an LLM that cannot answer, then the
    key is fixed (or the server is back): the window waiting all along is reflected."""
    configure(
        workspace,
        fake_llm,
        evolve={"max_attempts": 1},
        llm={"max_retries": 0, "timeout_seconds": 0.5},
    )
    if outage == "port closed":
        workspace.llm_url = f"http://127.0.0.1:{free_port()}/v1"
        workspace.write_config()
    else:
        fake_llm.default = OUTAGES[outage]
    workspace.add_session("waiting", conversation("the outage"))

    for _ in range(2):
        once(workspace)

    configure(workspace, fake_llm)  # the key fixed, the model named right, the server back
    fake_llm.default = skill_reply("survive-the-outage")
    before = len(fake_llm.requests)
    once(workspace)

    assert len(fake_llm.requests) == before + 1
    assert window_text(fake_llm.requests[-1]).startswith(
        "Session jsonl:waiting (jsonl), messages 0–7:"
    )
    assert skill_md(workspace, "survive-the-outage").is_file()


@dataclass
class AsNobody(Workspace):
    """A workspace whose commands run as an unprivileged user (tests run as root, and root
    writes through permission bits)."""

    user: Unprivileged = field(default_factory=unprivileged)

    def cli(self, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        if not self.config_path.exists():
            self.write_config()
        return subprocess.run(
            self.user.skilld(*args),
            env=self.env(HOME=str(self.root), **env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture
def as_nobody() -> Iterator[AsNobody]:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user")
    with shared_tmp_dir() as root:
        ws = AsNobody(root)
        for folder in (ws.skills, ws.sessions, ws.state):
            folder.mkdir()
        for path in (root, ws.skills, ws.sessions, ws.state):
            os.chown(path, ws.user.uid, ws.user.gid)
        yield ws


# -- 2. a source tree that goes away for a while keeps its cursors ---------------------------
# The root moved away and back, a second file with the same name, a source path through a
# symlink (each format): tests/test_continuity.py, through `skilld once`. What it leaves out:
# a sub-tree, rather than the root, missing or unreadable for a tick.


def test_a_project_folder_missing_or_unreadable_for_a_tick_is_not_read_again(
    as_nobody: AsNobody, fake_llm: FakeLLM
) -> None:
    ws = as_nobody
    root = ws.root / "projects"
    fmt = Format("claude-code", root)
    moved, locked = Writer(fmt, "moved"), Writer(fmt, "locked")
    moved.path = root / "-home-dev-moved" / moved.path.name
    locked.path = root / "-home-dev-locked" / locked.path.name
    for writer, topic in ((moved, "the moved build"), (locked, "the locked cache")):
        writer.create(writer.encode(writer.turn(f"How is {topic} fixed?", "Run make test.")))
    ws.user.own(root)
    ws.sources = [{"kind": "claude-code", "path": str(root)}]
    configure(ws, fake_llm)
    once(ws)
    assert len(fake_llm.requests) == 2

    away = ws.root / "moved-away"
    moved.path.parent.rename(away)  # a project folder moved away for a tick
    locked.path.parent.chmod(0)  # and another one unreadable for the same tick
    once(ws)
    away.rename(moved.path.parent)
    locked.path.parent.chmod(0o755)
    once(ws)
    assert len(fake_llm.requests) == 2

    with moved.path.open("ab") as handle:
        handle.write(moved.encode(moved.turn("And the docs?", "Build them with make docs.")))
    once(ws)
    assert len(fake_llm.requests) == 3
    assert "make docs" in window_text(fake_llm.requests[-1])
    assert "make test" not in window_text(fake_llm.requests[-1])


# -- 3. a failed write is an error for its window only ---------------------------------------


def lands_once_the_fault_clears(
    ws: Workspace, llm: FakeLLM, skill: str, session: str, fault: str, clear: Callable[[], None]
) -> list[dict[str, Any]]:
    """One more tick with the fault (its window answered already), then one without it: the
    kept proposal is written then, with no new LLM call, after exactly one `error` event naming
    the fault. Returns the events."""
    calls = len(llm.requests)
    once(ws)
    assert len(llm.requests) == calls and not skill_md(ws, skill).exists()
    clear()
    once(ws)
    assert len(llm.requests) == calls
    assert skill_md(ws, skill).is_file()
    events = ws.events()
    errors = [e for e in events if e["kind"] == "error"]
    assert [(e["skill"], e["session"]) for e in errors] == [(skill, session)]
    assert fault in errors[0]["reason"]
    return events


def test_a_file_in_the_way_of_one_skill_fails_only_that_write_and_it_lands_later(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm, llm={"max_retries": 0})
    fake_llm.responder = by_topic(
        {
            "the blocked build": skill_reply("blocked-skill", "1. Clear the blocked build.\n"),
            "the free docs": skill_reply(
                "free-skill", "1. Build the docs with `make docs`.\n", when="When docs break."
            ),
        }
    )
    in_the_way = workspace.skills / "blocked-skill"
    in_the_way.write_text("a plain file where the folder goes\n")
    workspace.add_session("blocked", conversation("the blocked build"))
    workspace.add_session("free", conversation("the free docs"))

    once(workspace)  # exits 0; the other session's skill is written in the same tick
    assert len(fake_llm.requests) == 2
    assert skill_md(workspace, "free-skill").is_file()

    events = lands_once_the_fault_clears(
        workspace, fake_llm, "blocked-skill", "jsonl:blocked", "could not write", in_the_way.unlink
    )
    assert "Clear the blocked build" in skill_md(workspace, "blocked-skill").read_text()
    created = {e["skill"]: e["detail"]["messages"] for e in events if e["kind"] == "created"}
    assert created == {"blocked-skill": [0, 7], "free-skill": [0, 7]}


def test_a_read_only_skills_dir_is_an_error_then_the_skill_lands_without_a_new_call(
    as_nobody: AsNobody, fake_llm: FakeLLM
) -> None:
    ws = as_nobody
    configure(ws, fake_llm, llm={"max_retries": 0})
    fake_llm.default = skill_reply("read-only-skill")
    ws.add_session("s1", conversation("the read-only dir"))
    ws.user.own(ws.sessions / "s1.jsonl")
    os.chown(ws.skills, 0, 0)  # mode 755: only root may write there

    once(ws)
    assert len(fake_llm.requests) == 1

    def writable() -> None:
        os.chown(ws.skills, ws.user.uid, ws.user.gid)

    lands_once_the_fault_clears(
        ws, fake_llm, "read-only-skill", "jsonl:s1", "Permission denied", writable
    )


@pytest.fixture
def small_filesystem(workspace: Workspace) -> Iterator[Path]:
    """The skills dir on a 64 KiB tmpfs, filled up."""
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(workspace.skills)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem: {mount.stderr.strip()}")
    try:
        filler = workspace.skills / ".filler"
        with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"x" * 4096)
        yield filler
    finally:
        subprocess.run(["umount", "-l", str(workspace.skills)], check=True)


def test_a_full_disk_is_an_error_then_the_skill_lands_without_a_new_call(
    workspace: Workspace, fake_llm: FakeLLM, small_filesystem: Path
) -> None:
    configure(workspace, fake_llm, llm={"max_retries": 0})
    fake_llm.default = skill_reply("full-disk-skill", "1. Free some space.\n" * 40)
    workspace.add_session("s1", conversation("the full disk"))

    once(workspace)
    assert len(fake_llm.requests) == 1
    assert [p.name for p in workspace.skills.rglob("*skilld-tmp*")] == []  # nothing half-written

    space = small_filesystem.unlink
    lands_once_the_fault_clears(
        workspace, fake_llm, "full-disk-skill", "jsonl:s1", "No space left on device", space
    )
    assert skill_md(workspace, "full-disk-skill").read_text().count("Free some space") == 40


# -- 4. the cap keeps the proposal and lets the session go on ------------------------------


def write_skill(ws: Workspace, name: str, content: str = "1. Step one.\n") -> None:
    result = ws.cli(
        "skills", "write", name, "--description", f"About {name}.", "--when", "Often.",
        "--content", content,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def new_skill(name: str, topic: str) -> Reply:
    """A proposal unlike any other in these tests (no near-duplicate redirects)."""
    return skill_reply(
        name,
        f"1. For {topic}, open the {name} runbook.\n2. Follow its {len(name)} steps.\n",
        description=f"Handle {topic} the {name} way.",
        when=f"When {topic} comes up.",
    )


def test_a_full_library_keeps_the_new_skill_and_the_sessions_later_update_lands(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm, skills={"max_managed": 1})
    write_skill(workspace, "alpha")
    fake_llm.responder = by_topic(
        {
            "Merge into alpha": skill_reply("alpha", "1. Step one.\n2. Then check the logs.\n"),
            "the new thing": new_skill("beta", "the new thing"),
            "the alpha logs": skill_reply("alpha", "1. Check the logs.\n"),
        }
    )
    session = workspace.add_session("s1", conversation("the new thing"))

    once(workspace)
    assert len(fake_llm.requests) == 1 and not skill_md(workspace, "beta").exists()

    with session.open("a", encoding="utf-8") as handle:
        for message in conversation("the alpha logs"):
            handle.write(json.dumps(message) + "\n")
    once(workspace)

    assert "Then check the logs" in skill_md(workspace, "alpha").read_text()
    events = workspace.events()
    assert [e["skill"] for e in events if e["kind"] == "cap"] == ["beta"]
    updated = [e for e in events if e["kind"] == "updated"]
    assert [(e["skill"], e["session"], e["detail"]["messages"]) for e in updated] == [
        ("alpha", "jsonl:s1", [8, 15])
    ]
    assert not skill_md(workspace, "beta").exists()
    library = status(workspace)["libraries"][0]  # the kept proposal waits for room
    assert (library["proposals_at_cap"], library["proposals_waiting"]) == (1, 1)


def test_kept_proposals_land_without_a_new_call_after_a_delete_an_archive_and_a_raised_cap(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm, skills={"max_managed": 1})
    write_skill(workspace, "alpha")
    names = {"beta": "the beta rollout", "gamma": "the gamma cache", "delta": "the delta queue"}
    fake_llm.responder = by_topic({topic: new_skill(name, topic) for name, topic in names.items()})
    for name, topic in names.items():
        workspace.add_session(name, conversation(topic))
    once(workspace)
    calls = len(fake_llm.requests)
    assert calls == 3

    def landed() -> set[str]:
        return {name for name in names if skill_md(workspace, name).is_file()}

    assert workspace.cli("skills", "delete", "alpha").returncode == 0
    once(workspace)
    first = landed()
    assert len(first) == 1

    (archived,) = first
    assert workspace.cli("skills", "archive", archived).returncode == 0
    once(workspace)
    second = landed()
    assert len(second) == 1 and second != first

    configure(workspace, None, skills={"max_managed": 3})
    once(workspace)
    assert landed() | first == set(names)

    assert len(fake_llm.requests) == calls
    events = workspace.events()
    assert sorted(e["skill"] for e in events if e["kind"] == "cap") == sorted(names)
    created = [e["skill"] for e in events if e["kind"] == "created" and e["skill"] != "alpha"]
    assert sorted(created) == sorted(names)


# -- 5. valid replies are accepted ---------------------------------------------------------


def proposal_text(name: str, content: str) -> str:
    return json.dumps(
        {
            "evolve": True,
            "name": name,
            "description": f"How to {name.replace('-', ' ')}.",
            "whenToUse": "When it comes up.",
            "content": content,
            "reason": "A reusable procedure.",
        }
    )


def test_a_reply_with_a_raw_newline_inside_a_string_is_accepted(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm)
    content = "1. Run `make lint`.\n2. Fix what it reports.\n"
    # A local server without JSON mode: the newlines in the string are not escaped.
    raw = proposal_text("lint-first", content).replace("\\n", "\n")
    fake_llm.default = Reply(body=completion(raw))
    workspace.add_session("s1", conversation("the lint"))

    once(workspace)

    assert len(fake_llm.requests) == 1  # no repair request
    assert skill_md(workspace, "lint-first").read_text().endswith(content)


def test_a_reply_whose_prose_holds_an_example_object_is_accepted(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm)
    answer = proposal_text("real-answer", "1. Do the real thing.\n")
    reply = f'An example of a name: {{"name": "a"}}. My answer: {answer}'
    fake_llm.default = Reply(body=completion(reply))
    workspace.add_session("s1", conversation("the example"))

    once(workspace)

    assert len(fake_llm.requests) == 1
    assert skill_md(workspace, "real-answer").is_file()
    assert not (workspace.skills / "a").exists()


# -- 6. the claude dialect keeps an unchanged skill unchanged ---------------------------------


def test_the_same_claude_skill_proposed_twice_is_unchanged(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm, skills={"dialect": "claude"})
    bodies = {
        "bang-command": "1. See the branch with !`git branch --show-current`.\n2. Push it.\n",
        "crlf-lines": "1. Open the report.\r\n2. Read the totals.\r\n",
    }
    fake_llm.responder = by_topic(
        {f"the {name}": skill_reply(name, body) for name, body in bodies.items()}
    )
    for name in bodies:
        workspace.add_session(name, conversation(f"the {name}"))
    once(workspace)
    assert len(fake_llm.requests) == 2
    texts = {name: skill_md(workspace, name).read_bytes() for name in bodies}

    for name in bodies:  # each session goes on and proposes the very same skill
        workspace.add_session(name, conversation(f"the {name}"))
    once(workspace)

    assert len(fake_llm.requests) == 4  # no merge asked for
    written = [(e["kind"], e["skill"]) for e in workspace.events("created", "updated", "unchanged")]
    assert sorted(written) == sorted(
        [("created", name) for name in bodies] + [("unchanged", name) for name in bodies]
    )
    assert {name: skill_md(workspace, name).read_bytes() for name in bodies} == texts
    rows = skill_rows(workspace)
    assert {name: rows[name]["patch_count"] for name in bodies} == dict.fromkeys(bodies, 0)
    for name in bodies:
        history = workspace.cli("skills", "history", name, "--json")
        assert json.loads(history.stdout) == [], name


# -- 7. one owner for skill signals ----------------------------------------------------------
# A DSH `skill` call counted once, a Claude Code Skill call with its attachment counted once:
# tests/test_signals.py::test_the_daemon_counts_each_signal_once_with_its_kind (`skilld once`).

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_hermes_skill_view_counts_as_a_view_not_a_use(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """Hermes counts `skill_view` as a view in its own `.usage.json`; so must skilld, reading
    Hermes's `state.db`."""
    database = workspace.root / "hermes" / "state.db"
    made = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_hermes_db.py"), str(database)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    view = [tool_call("v1", "skill_view", {"name": "triage"})]
    rows = [
        ("user", "How do we triage a page?", None, None, None),
        ("assistant", "", None, json.dumps(view), None),
        ("tool", "---\nname: triage\n---\n1. Look.", "v1", None, "skill_view"),
        ("assistant", "Look first, then act.", None, None, None),
    ]
    with contextlib.closing(sqlite3.connect(database)) as hermes, hermes:
        hermes.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES ('viewer', 'cli', 1750000000)"
        )
        hermes.executemany(
            "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls,"
            " tool_name, timestamp) VALUES ('viewer', ?, ?, ?, ?, ?, 1750000001)",
            rows,
        )
    workspace.sources = [{"kind": "hermes", "path": str(database)}]
    configure(workspace, fake_llm)
    write_skill(workspace, "triage")

    once(workspace)

    assert len(fake_llm.requests) == 2  # both sessions were read
    row = skill_rows(workspace)["triage"]
    assert (row["use_count"], row["view_count"]) == (0, 1)


# -- 8. a delete removes only what skilld wrote --------------------------------------------


def add_by_hand(ws: Workspace, name: str) -> dict[str, bytes]:
    """Files a person puts beside a skill's SKILL.md."""
    folder = ws.skills / name
    added = {
        "scripts/run.sh": b"#!/bin/sh\nmake test\n",
        "references/notes.md": b"# Notes kept by hand\n",
    }
    for relative, data in added.items():
        (folder / relative).parent.mkdir(exist_ok=True)
        (folder / relative).write_bytes(data)
    return added


def test_delete_keeps_the_files_a_person_added_and_rollback_brings_the_skill_back(
    workspace: Workspace,
) -> None:
    write_skill(workspace, "with-scripts", "1. Run scripts/run.sh.\n")
    written = skill_md(workspace, "with-scripts").read_bytes()
    added = add_by_hand(workspace, "with-scripts")

    deleted = workspace.cli("skills", "delete", "with-scripts")

    assert deleted.returncode == 0, deleted.stderr
    folder = workspace.skills / "with-scripts"
    assert {relative: (folder / relative).read_bytes() for relative in added} == added
    assert not skill_md(workspace, "with-scripts").exists()
    assert "scripts/run.sh" in deleted.stderr and "references/notes.md" in deleted.stderr

    rolled = workspace.cli("skills", "rollback", "with-scripts")
    assert rolled.returncode == 0, rolled.stderr
    assert skill_md(workspace, "with-scripts").read_bytes() == written
    assert skill_rows(workspace)["with-scripts"]["owner"] == "managed"


@pytest.mark.anyio
async def test_the_mcp_skill_delete_keeps_the_files_a_person_added(workspace: Workspace) -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import TextContent

    configure(workspace, None, log={"level": "warning"})
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "skilld", "--config", str(workspace.config_path), "mcp"],
        env=workspace.env(),
    )
    with (workspace.root / "server.err").open("w") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            made = await session.call_tool(
                "skill_write", {"name": "tool-made", "description": "Made.", "content": "1. Go."}
            )
            assert not made.is_error
            added = add_by_hand(workspace, "tool-made")
            result = await session.call_tool("skill_delete", {"name": "tool-made"})
    text = "".join(block.text for block in result.content if isinstance(block, TextContent))
    assert not result.is_error, text
    folder = workspace.skills / "tool-made"
    assert {relative: (folder / relative).read_bytes() for relative in added} == added
    assert not (folder / "SKILL.md").exists()
    reply = result.structured_content or json.loads(text)
    assert sorted(reply["kept"]) == sorted(added)


# -- 9. an extra dir never shadows skilld's own skill ----------------------------------------


def test_a_project_skill_of_the_same_name_shadows_nothing_skilld_manages(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    project = workspace.root / "project-skills"
    configure(workspace, fake_llm, skills={"extra_dirs": [str(project)], "max_managed": 1})
    write_skill(workspace, "shared-name")
    (project / "shared-name").mkdir(parents=True)
    theirs = "---\nname: shared-name\ndescription: The project's own.\n---\n1. Theirs.\n"
    (project / "shared-name" / "SKILL.md").write_text(theirs)
    fake_llm.responder = by_topic(
        {
            "Merge into shared-name": skill_reply("shared-name", "1. Step one.\n2. Step two.\n"),
            "the shared thing": skill_reply("shared-name", "1. Step two.\n"),
        }
    )
    workspace.add_session("s1", conversation("the shared thing"))

    once(workspace)

    written = [(e["kind"], e["skill"]) for e in workspace.events("updated", "protected")]
    assert written == [("updated", "shared-name")]
    assert "2. Step two." in skill_md(workspace, "shared-name").read_text()
    assert (project / "shared-name" / "SKILL.md").read_text() == theirs
    age(workspace, "shared-name", days=365)
    planned = workspace.cli("curate", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    transitions = json.loads(planned.stdout)["lifecycle"][0]["transitions"]
    assert [(t["kind"], t["name"]) for t in transitions] == [("archived", "shared-name")]
    assert status(workspace)["skills_managed"] == 1


def age(ws: Workspace, name: str, *, days: int) -> None:
    """Make a skill look unused for `days` (its usage record, as Hermes would have it)."""
    sidecar = ws.skills / ".usage.json"
    records = json.loads(sidecar.read_text())
    then = datetime.now(UTC) - timedelta(days=days)
    records[name]["created_at"] = then.isoformat(timespec="microseconds")
    for key in ("last_used_at", "last_viewed_at", "last_patched_at"):
        records[name][key] = None
    sidecar.write_text(json.dumps(records))


# -- 10. held sessions: appends cost what they add; an unfinished turn is not held forever ----


def unfinished_turn(calls: int, start: int = 0) -> list[dict[str, Any]]:
    """Tool calls and their results with no final answer: the turn is not finished."""
    messages: list[dict[str, Any]] = []
    for number in range(start, start + calls):
        call = tool_call(f"c{number}", "bash", {"cmd": f"make step-{number}"})
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{number}", "content": f"step {number} ok"},
        ]
    return messages


def test_an_append_to_a_held_session_writes_only_what_it_adds(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm)
    session = workspace.add_session(
        "busy", [{"role": "user", "content": "Run every step."}, *unfinished_turn(300)]
    )
    once(workspace)
    assert fake_llm.requests == []  # the turn is not finished: held
    database = workspace.state / "state.db"
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        db.executescript(
            """
            CREATE TABLE test_held_writes (op TEXT NOT NULL);
            CREATE TRIGGER test_insert AFTER INSERT ON pending
                BEGIN INSERT INTO test_held_writes VALUES ('insert'); END;
            CREATE TRIGGER test_update AFTER UPDATE ON pending
                BEGIN INSERT INTO test_held_writes VALUES ('update'); END;
            CREATE TRIGGER test_delete AFTER DELETE ON pending
                BEGIN INSERT INTO test_held_writes VALUES ('delete'); END;
            """
        )

    with session.open("a", encoding="utf-8") as handle:
        for message in unfinished_turn(2, start=300):
            handle.write(json.dumps(message) + "\n")
    once(workspace)

    assert fake_llm.requests == []
    with contextlib.closing(sqlite3.connect(database)) as db:
        writes = [op for (op,) in db.execute("SELECT op FROM test_held_writes")]
        held = db.execute("SELECT count(*) FROM pending WHERE session = 'jsonl:busy'").fetchone()
        summary = db.execute(
            "SELECT pending_count FROM sessions WHERE key = 'jsonl:busy'"
        ).fetchone()
    assert writes == ["insert"] * 4
    assert held == (605,) and summary == (605,)


def test_a_turn_that_never_finishes_is_reflected_after_the_turn_timeout(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    configure(workspace, fake_llm, evolve={"turn_timeout_seconds": 1})
    fake_llm.default = skill_reply("crashed-agent")
    workspace.add_session(
        "crashed", [{"role": "user", "content": "Run every step."}, *unfinished_turn(3)]
    )
    once(workspace)
    assert fake_llm.requests == []  # the agent may still be working: held

    for _ in range(100):  # wait on the condition: the timeout passes between runs
        once(workspace)
        if fake_llm.requests:
            break
    assert len(fake_llm.requests) == 1
    assert "make step-2" in window_text(fake_llm.requests[0])
    created = workspace.events("created")
    assert [(e["skill"], e["detail"]["messages"]) for e in created] == [("crashed-agent", [0, 6])]


# -- 11. a person's first `skilld curate` acts as its dry run said ---------------------------


def test_curate_on_a_fresh_state_dir_does_what_its_dry_run_said(workspace: Workspace) -> None:
    for name in ("ancient", "aging"):
        write_skill(workspace, name)
    age(workspace, "ancient", days=365)
    age(workspace, "aging", days=45)

    dry = workspace.cli("curate", "--dry-run")
    done = workspace.cli("curate")

    assert dry.returncode == 0 and done.returncode == 0, dry.stderr + done.stderr
    planned = sorted(line.removeprefix("would be ") for line in dry.stdout.splitlines()[:-1])
    assert planned == sorted(done.stdout.splitlines()[:-1])
    assert [line.split()[:2] for line in planned] == [["archived", "ancient"], ["stale", "aging"]]
    assert "clock started" not in done.stdout
    assert (workspace.skills / ".archive" / "ancient" / "SKILL.md").is_file()
    states = {name: row["state"] for name, row in skill_rows(workspace).items()}
    assert states == {"ancient": "archived", "aging": "stale"}


# -- 12. the smaller ones --------------------------------------------------------------------
# A failed COMMIT: tests/test_state.py::test_a_failed_commit_leaves_no_transaction_open.
# Two processes writing one skill: tests/test_library.py::
# test_concurrent_writers_never_make_a_skill_look_human.


def test_a_name_reused_after_archiving_is_active_and_the_archived_one_restorable(
    workspace: Workspace,
) -> None:
    write_skill(workspace, "reused", "1. The first take.\n")
    assert workspace.cli("skills", "archive", "reused").returncode == 0
    write_skill(workspace, "reused", "1. The second take.\n")

    assert skill_rows(workspace)["reused"]["state"] == "active"
    assert workspace.cli("skills", "delete", "reused").returncode == 0
    restored = workspace.cli("skills", "restore", "reused")
    assert restored.returncode == 0, restored.stderr
    assert "The first take" in skill_md(workspace, "reused").read_text()


#: Runs `python -m skilld …` and, at every move into `.archive` and every SQLite COMMIT, tries
#: to take `.usage.json.lock` as Hermes would (another open file description, so a lock this
#: very process holds counts as taken). Writes one JSON line per probe to $PROBE_LOG.
LOCK_PROBE = """
import fcntl, json, os, runpy, sqlite3, sys

LOCK = os.path.join(os.environ["PROBE_SKILLS_DIR"], ".usage.json.lock")


def probe(moment):
    try:
        fd = os.open(LOCK, os.O_RDWR)
    except FileNotFoundError:
        free = True
    else:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
        except BlockingIOError:
            free = False
        finally:
            os.close(fd)
    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(json.dumps({"moment": moment, "free": free}) + "\\n")


real_replace = os.replace


def replace(source, target, *args, **kwargs):
    folder = kwargs.get("dst_dir_fd")  # the tree guard moves by folder descriptor and name
    where = os.fspath(target)
    if folder is not None:
        where = os.path.join(os.readlink(f"/proc/self/fd/{folder}"), where)
    if "/.archive/" in where:
        probe("move")
    return real_replace(source, target, *args, **kwargs)


real_connect = sqlite3.connect


def connect(*args, **kwargs):
    connection = real_connect(*args, **kwargs)
    connection.set_trace_callback(
        lambda sql: probe("commit") if sql.strip().upper().startswith("COMMIT") else None
    )
    return connection


os.replace = replace
sqlite3.connect = connect
sys.argv[0] = "skilld"
runpy.run_module("skilld", run_name="__main__", alter_sys=True)
"""


def test_the_curator_never_holds_the_usage_lock_across_a_move_or_a_commit(
    workspace: Workspace,
) -> None:
    for name in ("old-one", "old-two"):
        write_skill(workspace, name)
    assert workspace.cli("curate").returncode == 0  # a pass with nothing to do comes first
    for name in ("old-one", "old-two"):
        age(workspace, name, days=365)
    probe = workspace.root / "probe.py"
    probe.write_text(LOCK_PROBE)
    log = workspace.root / "probes.jsonl"

    result = subprocess.run(
        [sys.executable, str(probe), "curate"],
        env=workspace.env(PROBE_SKILLS_DIR=str(workspace.skills), PROBE_LOG=str(log)),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (workspace.skills / ".archive").iterdir()) == [
        "old-one",
        "old-two",
    ]
    probes = [json.loads(line) for line in log.read_text().splitlines()]
    moments = {p["moment"] for p in probes}
    assert moments == {"move", "commit"}, probes
    assert [p for p in probes if not p["free"]] == []


def test_the_spend_cap_survives_a_restart(workspace: Workspace, fake_llm: FakeLLM) -> None:
    configure(workspace, fake_llm, llm={"max_calls_per_hour": 2})
    for number in range(3):
        workspace.add_session(f"s{number}", conversation(f"topic {number}"))
        once(workspace)  # each run is a new process

    assert len(fake_llm.requests) == 2
    assert status(workspace)["backlog"]["windows"] == 1  # the third waits, not lost


def test_a_linked_archive_never_moves_a_skill_out_of_the_root(workspace: Workspace) -> None:
    write_skill(workspace, "stay-home")
    elsewhere = workspace.root / "elsewhere"
    elsewhere.mkdir()
    (workspace.skills / ".archive").symlink_to(elsewhere)

    archived = workspace.cli("skills", "archive", "stay-home")
    age(workspace, "stay-home", days=365)
    curated = workspace.cli("curate")

    assert archived.returncode == 1 and ".archive" in archived.stderr
    assert curated.returncode == 0, curated.stderr
    assert "stay-home" in curated.stdout and ".archive" in curated.stdout
    assert skill_md(workspace, "stay-home").is_file()
    assert list(elsewhere.iterdir()) == []


def test_files_follow_the_process_umask(workspace: Workspace) -> None:
    """`UMask=0002` in a service unit gives the agent's group write access to what skilld
    writes (and nobody else)."""

    def as_service(*args: str) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "skilld", *args],
            env=workspace.env(),
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=lambda: os.umask(0o002),
        )
        assert result.returncode == 0, result.stderr

    workspace.write_config()
    as_service("skills", "write", "shared", "--description", "For the group.", "--content", "1.")
    as_service("usage", "use", "shared")

    for path in (
        skill_md(workspace, "shared"),
        workspace.skills / ".usage.json",
        workspace.skills / ".usage.json.lock",
    ):
        assert path.stat().st_mode & 0o777 == 0o664, path


# -- the daemon, for what only a long-running process shows ----------------------------------


class Running:
    """`skilld run` in the background, its log lines collected as they come."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.process = ws.popen("run")
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Poll `condition` until it holds (the daemon must stay up meanwhile)."""
        for _ in range(3000):  # a hung daemon fails the test instead of hanging it
            if condition():
                return
            assert self.process.poll() is None, "".join(self.log)
            time.sleep(0.02)
        raise AssertionError(f"never happened: {what}\n{''.join(self.log)}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        self._reader.join(timeout=5)


def meta(ws: Workspace, key: str) -> Any:
    try:
        with contextlib.closing(sqlite3.connect(ws.state / "state.db", timeout=5)) as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError:
        return None  # not created yet
    return json.loads(row[0]) if row else None


def test_a_reload_keeps_the_temp_file_of_a_write_still_in_flight(workspace: Workspace) -> None:
    configure(workspace, None, evolve={"interval_seconds": 0.2}, log={"level": "info"})
    write_skill(workspace, "busy")
    daemon = Running(workspace)
    try:
        daemon.wait_for(lambda: meta(workspace, "last_tick") is not None, "a first tick")
        gone = subprocess.Popen(["true"])
        gone.wait()
        folder = workspace.skills / "busy"
        # A CLI write in flight (this process is alive) and one whose writer is gone.
        in_flight = folder / f".SKILL.md.skilld-tmp-{os.getpid()}-0123456789ab"
        crashed = folder / f".SKILL.md.skilld-tmp-{gone.pid}-0123456789ab"
        for temp in (in_flight, crashed):
            temp.write_text("---\nname: busy\n")

        daemon.process.send_signal(signal.SIGHUP)
        daemon.wait_for(lambda: not crashed.exists(), "the reload's sweep of stray temp files")

        assert in_flight.exists()
    finally:
        daemon.stop()


def skill_call(name: str, number: int) -> list[dict[str, Any]]:
    """A finished turn in which the agent loads skill `name` with a `skill` tool call."""
    call = tool_call(f"k{number}", "skill", {"name": name})
    return [
        {"role": "user", "content": f"Use {name} (turn {number})."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"k{number}", "content": f"{name} loaded"},
        {"role": "assistant", "content": "Done as the skill says."},
    ]


def uses(ws: Workspace, name: str) -> int:
    records = json.loads((ws.skills / ".usage.json").read_text())
    return int(records.get(name, {}).get("use_count", 0))


def lock_waiters(inode: int, pid: int) -> bool:
    """Whether `pid` is blocked waiting for a flock on `inode` (/proc/locks)."""
    with open("/proc/locks") as locks:
        return any(
            line.split()[1] == "->" and line.split()[5] == str(pid) and f":{inode} " in line
            for line in locks
        )


def test_a_usage_lock_file_replaced_under_the_daemon_is_locked_anew(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """Hermes (or a person) deletes and recreates `.usage.json.lock` while the daemon keeps a
    descriptor of the old one: the daemon must then wait for whoever holds the new one."""
    configure(workspace, fake_llm, evolve={"interval_seconds": 0.2}, log={"level": "info"})
    write_skill(workspace, "watched")
    session = workspace.add_session("s1", skill_call("watched", 0))
    daemon = Running(workspace)
    try:
        daemon.wait_for(lambda: uses(workspace, "watched") == 1, "the first use counted")
        lock = workspace.skills / ".usage.json.lock"
        replacement = lock.with_name("replacement.lock")
        replacement.write_bytes(b"")
        os.replace(replacement, lock)
        held = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)  # another writer's read-modify-write
            with session.open("a", encoding="utf-8") as handle:
                for message in skill_call("watched", 1):
                    handle.write(json.dumps(message) + "\n")
            inode = os.fstat(held).st_ino
            daemon.wait_for(
                lambda: lock_waiters(inode, daemon.process.pid) or uses(workspace, "watched") > 1,
                "the daemon waiting for the lock, or writing without it",
            )
            assert uses(workspace, "watched") == 1  # nothing written under another's lock
        finally:
            os.close(held)
        daemon.wait_for(lambda: uses(workspace, "watched") == 2, "the second use counted")
    finally:
        daemon.stop()
