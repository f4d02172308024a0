"""Failures as the tick records them (DESIGN.md §13): every read, resolution across reads, the
one-time backfill, redaction, the [history] line, and `skilld failures` / `/api/failures`.

Real files, a real state.db, real git checkouts (their origin is the repository), a loopback
LLM, and `skilld` in a subprocess."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from skilld.app import App
from skilld.effect import store
from skilld.effect.report import covering_skills
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, skip_reply
from tests.test_backfill import HOUR, Clock, age, evolver, windows_sent, write_session
from tests.test_web import client_for

NO_UPSTREAM = "fatal: The current branch {branch} has no upstream branch."
PUSH_SIGNATURE = "bash | git push | fatal: The current branch <branch> has no upstream branch."


def call(call_id: str, command: str, name: str = "bash") -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def push_session(
    *, branch: str, day: int, cwd: str | None = None, fixed: bool = True, extra: str = ""
) -> list[dict[str, Any]]:
    """A session on `day` (of January 2026) whose `git push` fails for want of an upstream,
    then (when `fixed`) succeeds with one."""
    ts = f"2026-01-{day:02d}T10:00:00Z"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Push my work please.", "timestamp": ts},
        {"role": "assistant", "content": "", "tool_calls": [call("p1", "git push")]},
        {
            "role": "tool",
            "tool_call_id": "p1",
            "content": NO_UPSTREAM.format(branch=branch) + extra,
            "error": True,
            "timestamp": ts,
        },
    ]
    if cwd is not None:
        messages[0]["cwd"] = cwd
    if fixed:
        messages += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("p2", f"git push -u origin {branch}")],
            },
            {"role": "tool", "tool_call_id": "p2", "content": "set up to track", "timestamp": ts},
        ]
    messages.append({"role": "assistant", "content": "Pushed.", "timestamp": ts})
    return messages


def checkout(root: Path, origin: str) -> Path:
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "remote", "add", "origin", origin], check=True)
    return root


def failure_rows(app: App) -> list[tuple[Any, ...]]:
    return app.state.conn.execute(
        "SELECT session, seq, command, class, resolved, error FROM effect_failures ORDER BY id"
    ).fetchall()


pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_every_read_is_recorded_and_resolution_arrives_in_a_later_read(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    sessions = tmp_path / "sessions"
    path = write_session(sessions, "s1", push_session(branch="feat-a", day=1, fixed=False))
    fake_llm.push(skip_reply())
    async with evolver(tmp_path, fake_llm, backfill="all", clock=Clock()) as (app, loop):
        await loop.tick()
        assert [row[:5] for row in failure_rows(app)] == [("jsonl:s1", 2, "git push", "real", 0)]
        runs = app.state.conn.execute("SELECT command, ok, failed FROM effect_runs").fetchall()
        assert [tuple(run) for run in runs] == [("git push", 0, 1)]
        # A later read of the same session runs the same head successfully.
        write_session(
            sessions,
            "s1",
            [
                {"role": "user", "content": "try again"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [call("p9", "git push -u origin feat-a")],
                },
                {"role": "tool", "tool_call_id": "p9", "content": "ok"},
                {"role": "assistant", "content": "Done."},
            ],
        )
        fake_llm.push(skip_reply())
        await loop.tick()
        assert [row[:5] for row in failure_rows(app)] == [("jsonl:s1", 2, "git push", "real", 1)]
        session_row = app.state.conn.execute("SELECT source, first_ts FROM effect_sessions")
        assert tuple(session_row.fetchone()) == ("jsonl", "2026-01-01T10:00:00+00:00")
    assert path.exists()


async def test_a_recurring_failure_is_named_inside_the_window_delimiters(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    shop = str(checkout(tmp_path / "shop", "https://github.com/acme/shop.git"))
    other = str(checkout(tmp_path / "other", "https://github.com/acme/other.git"))
    sessions = tmp_path / "sessions"
    write_session(sessions, "a-first", push_session(branch="feat-a", day=1, cwd=shop))
    write_session(sessions, "b-second", push_session(branch="fix/b-2", day=2, cwd=shop))
    write_session(sessions, "c-elsewhere", push_session(branch="feat-c", day=3, cwd=other))
    fake_llm.push(skip_reply(), skip_reply(), skip_reply())
    async with evolver(tmp_path, fake_llm, backfill="all", clock=Clock()) as (app, loop):
        await loop.tick()
        repositories = app.state.conn.execute(
            "SELECT session, repository FROM effect_sessions ORDER BY session"
        ).fetchall()
    assert [tuple(row) for row in repositories] == [
        ("jsonl:a-first", "github.com/acme/shop"),
        ("jsonl:b-second", "github.com/acme/shop"),
        ("jsonl:c-elsewhere", "github.com/acme/other"),
    ]
    windows = {text.split("\n", 1)[0]: text for text in windows_sent(fake_llm)}
    line = f"[history] this failure recurred in 1 earlier sessions: {PUSH_SIGNATURE}"
    second = next(text for head, text in windows.items() if "b-second" in head)
    opening, closing = second.index("<transcript-"), second.index("</transcript-")
    assert opening < second.index(line) < closing
    # The first session has no earlier one; another repository's failure is not this one's.
    assert sum("[history]" in text for text in windows.values()) == 1


async def test_history_the_backfill_skips_is_recorded_once_without_the_llm(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    sessions = tmp_path / "sessions"
    old = write_session(sessions, "old", push_session(branch="feat-o", day=1, fixed=False))
    age(old, 48 * HOUR)
    async with evolver(tmp_path, fake_llm, backfill="24h", clock=Clock()) as (app, loop):
        await loop.tick()
        assert fake_llm.requests == []
        assert app.state.conn.execute("SELECT COUNT(*) FROM pending").fetchone()[0] == 0
        # Numbered before the messages the tick will hold from 0 on.
        assert [row[:5] for row in failure_rows(app)] == [("jsonl:old", -2, "git push", "real", 0)]
        # The session goes on: its success resolves the history's failure.
        write_session(
            sessions,
            "old",
            [
                {"role": "user", "content": "again"},
                {"role": "assistant", "content": "", "tool_calls": [call("q", "git push -u o x")]},
                {"role": "tool", "tool_call_id": "q", "content": "ok"},
                {"role": "assistant", "content": "Done."},
            ],
        )
        fake_llm.push(skip_reply())
        await loop.tick()
        assert [row[:5] for row in failure_rows(app)] == [("jsonl:old", -2, "git push", "real", 1)]
        app.state.conn.execute("DELETE FROM effect_failures")
    # A restart reads no history again: the backfill happens once.
    async with evolver(tmp_path, fake_llm, backfill="24h", clock=Clock()) as (app, loop):
        await loop.tick()
        assert failure_rows(app) == []


async def test_a_secret_in_a_failing_output_is_nowhere_in_state_db(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    secret = "ghp_" + "Zq8Lw3Nv5Rt7Yp1Xk9Mb2Hc4Jd6Fg0Sa8Ue"
    sessions = tmp_path / "sessions"
    leaky = push_session(branch="feat-s", day=1, fixed=False, extra=f" token={secret}")
    leaky[2]["content"] = f"remote: Invalid credentials token={secret}\n" + leaky[2]["content"]
    age(write_session(sessions, "leaky", leaky), 48 * HOUR)  # history: recorded, never held
    async with evolver(tmp_path, fake_llm, backfill="24h", clock=Clock()) as (app, loop):
        await loop.tick()
        (row,) = failure_rows(app)
        # The error line is git's `fatal:` line, its token redacted too.
        assert row[5].startswith("fatal: The current branch <branch> has no upstream branch.")
        assert "token=[REDACTED:" in row[5]
        app.state.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for file in (tmp_path / "state").iterdir():
        if file.is_file():
            assert secret.encode() not in file.read_bytes(), file.name


# -- the command and the API -----------------------------------------------------------------


def test_skilld_failures_after_skilld_once(workspace: Workspace) -> None:
    shop = str(checkout(workspace.root / "shop", "git@github.com:acme/shop.git"))
    other = str(checkout(workspace.root / "other", "https://gitlab.com/acme/other.git"))
    workspace.settings["evolve"] = {"min_messages": 1000}  # no reflection: failures need none
    workspace.write_config()
    workspace.cli_here(
        "skills", "write", "push-upstream", "--description", "Push a new branch.",
        "--content", "Use git push -u origin BRANCH.",
    )  # fmt: skip
    reader = {"role": "assistant", "content": "", "tool_calls": [call("r", "x", "read_file")]}
    reader["tool_calls"][0]["function"]["arguments"] = json.dumps(
        {"path": str(workspace.skills / "push-upstream" / "SKILL.md")}
    )
    workspace.add_session("one", push_session(branch="feat-1", day=1, cwd=shop))
    workspace.add_session(
        "two",
        [*push_session(branch="feat-2", day=2, cwd=shop), reader,
         {"role": "tool", "tool_call_id": "r", "content": "Use git push -u"}],
    )  # fmt: skip
    workspace.add_session("three", push_session(branch="feat-3", day=3, cwd=other, fixed=False))
    once = workspace.cli("once")
    assert once.returncode == 0, once.stderr

    listed = workspace.cli("failures", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row == {
        "id": hashlib.sha256(PUSH_SIGNATURE.encode()).hexdigest()[:12],
        "signature": PUSH_SIGNATURE,
        "tool": "bash",
        "command": "git push",
        "error": "fatal: The current branch <branch> has no upstream branch.",
        "class": "real",
        "sessions": 3,
        "occurrences": 3,
        "first_seen": "2026-01-01T10:00:00+00:00",
        "last_seen": "2026-01-03T10:00:00+00:00",
        "repositories": ["github.com/acme/shop", "gitlab.com/acme/other"],
        "skills": [],
    }
    only_gitlab = json.loads(
        workspace.cli("failures", "--json", "--repository", "gitlab.com/*").stdout
    )
    assert [(r["sessions"], r["repositories"]) for r in only_gitlab] == [
        (1, ["gitlab.com/acme/other"])
    ]
    assert (
        json.loads(
            workspace.cli(
                "failures", "--json", "--recurring", "--repository", "gitlab.com/*"
            ).stdout
        )
        == []
    )
    assert json.loads(workspace.cli("failures", "--json", "--since", "1d").stdout) == []
    table = workspace.cli("failures", "--recurring")
    assert table.returncode == 0 and PUSH_SIGNATURE in table.stdout
    assert workspace.cli("failures", "--since", "yesterday").returncode == 2

    with sqlite3.connect(workspace.state / "state.db") as conn:
        loads = conn.execute("SELECT session, library, name FROM effect_loads").fetchall()
    assert loads == [("jsonl:two", "default", "push-upstream")]

    with client_for(workspace) as panel:
        assert panel.get("/api/failures").json() == json.loads(listed.stdout)
        query = "/api/failures?recurring=1&repository=github.com/*&since=3650d"
        assert panel.get(query).json() == json.loads(
            workspace.cli(
                "failures", "--json", "--recurring", "--repository", "github.com/*",
                "--since", "3650d",
            ).stdout
        )  # fmt: skip
        assert panel.get("/api/failures?since=soon").status_code == 400


def test_a_skill_learned_from_a_window_names_the_failures_it_targets(
    workspace: Workspace,
) -> None:
    """`skills`: the skills that target the signature (their version's window showed it, and
    the version names it)."""
    workspace.settings["evolve"] = {"min_messages": 1000}
    workspace.add_session("one", push_session(branch="feat-1", day=1))
    assert workspace.cli("once").returncode == 0
    with sqlite3.connect(workspace.state / "state.db") as conn:
        conn.execute(
            "INSERT INTO provenance(library, name, path, sha256, session, first_message,"
            " last_message, created_at, updated_at) VALUES ('default', 'push-upstream', 'p',"
            " 'h', 'jsonl:one', 0, 5, '2026-01-01', '2026-01-01')"
        )
        conn.execute(
            "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
            " VALUES ('2026-01-01T11:00:00+00:00', 'created', 'default', 'push-upstream',"
            " 'jsonl:one', 'jsonl', 'learned', ?)",
            (json.dumps({"messages": [0, 5], "targets": [PUSH_SIGNATURE]}),),
        )
        rows = store.failure_rows(
            conn, covered=covering_skills(conn, None),
            verdicts={("default", "push-upstream"): "too-early"},
        )  # fmt: skip
    assert rows[0]["skills"] == [
        {"library": "default", "name": "push-upstream", "verdict": "too-early"}
    ]
    assert json.loads(workspace.cli("failures", "--json").stdout) == rows
