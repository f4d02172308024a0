"""Where each failure happened (DESIGN.md §13 "Occurrences"): `skilld failures` rows carry a
stable id, `skilld failures show ID|SIGNATURE` lists the occurrences oldest first with the
agent's own call ids, and `/api/failures/{id}` and the panel's failure pages show the same.

Real transcripts (JSONL and Claude Code) in real git checkouts, `skilld once` and `skilld
failures` in subprocesses, the panel through HTTP."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Workspace
from tests.test_backfill import HOUR, age
from tests.test_failures_tick import NO_UPSTREAM, PUSH_SIGNATURE, call, checkout, push_session
from tests.test_web import client_for

PUSH_ID = hashlib.sha256(PUSH_SIGNATURE.encode()).hexdigest()[:12]
CLAUDE_SESSION = "5f1c2b7e-0d3a-4c8e-9b61-2a7d4e8f0c13"
TOOL_USE_ID = "toolu_01HXq9ZtY3mVb7Kc2LwR8sNd"


def failing_push(call_id: str, branch: str, day: int, *, hour: int = 10) -> list[dict[str, Any]]:
    """A `git push` that fails for want of an upstream on `branch`, at `day`/`hour`."""
    ts = f"2026-01-{day:02d}T{hour:02d}:00:00Z"
    return [
        {"role": "assistant", "content": "", "tool_calls": [call(call_id, "git push")]},
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": NO_UPSTREAM.format(branch=branch),
            "error": True,
            "timestamp": ts,
        },
    ]


def pushes(cwd: str, day: int, *calls: tuple[str, str, int]) -> list[dict[str, Any]]:
    """A session in `cwd` on `day` whose pushes (call id, branch, hour) all fail."""
    ts = f"2026-01-{day:02d}T09:00:00Z"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Push my work please.", "timestamp": ts, "cwd": cwd}
    ]
    for call_id, branch, hour in calls:
        messages += failing_push(call_id, branch, day, hour=hour)
    messages.append({"role": "assistant", "content": "I could not push.", "timestamp": ts})
    return messages


def claude_session(root: Path, cwd: str) -> None:
    """A Claude Code session whose `git push` fails: its call is named by its `tool_use` id."""
    envelope = {
        "parentUuid": None, "isSidechain": False, "userType": "external", "cwd": cwd,
        "sessionId": CLAUDE_SESSION, "version": "2.1.12", "gitBranch": "feat-claude",
        "timestamp": "2026-01-05T08:00:00.000Z",
    }  # fmt: skip
    records = [
        {**envelope, "type": "user", "uuid": "u1",
         "message": {"role": "user", "content": "Push it."}},
        {**envelope, "type": "assistant", "uuid": "u2",
         "message": {"id": "msg_1", "type": "message", "role": "assistant",
                     "model": "claude-opus-4-5", "stop_reason": None,
                     "content": [{"type": "tool_use", "id": TOOL_USE_ID, "name": "Bash",
                                  "input": {"command": "git push"}}]}},
        {**envelope, "type": "user", "uuid": "u3",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": TOOL_USE_ID, "is_error": True,
              "content": "Exit code 128\n" + NO_UPSTREAM.format(branch="feat-claude")}]}},
        {**envelope, "type": "assistant", "uuid": "u4",
         "message": {"id": "msg_2", "type": "message", "role": "assistant",
                     "model": "claude-opus-4-5", "stop_reason": "end_turn",
                     "content": [{"type": "text", "text": "It has no upstream."}]}},
    ]  # fmt: skip
    project = root / "-home-dev-shop"
    project.mkdir(parents=True)
    lines = "".join(json.dumps(record) + "\n" for record in records)
    (project / f"{CLAUDE_SESSION}.jsonl").write_text(lines, encoding="utf-8")


@pytest.fixture
def recorded(workspace: Workspace) -> Workspace:
    """Three JSONL sessions (one pushing twice) in two checkouts, and a Claude Code session,
    read by `skilld once` (no reflection: recording needs none)."""
    shop = checkout(workspace.root / "shop", "git@github.com:acme/shop.git")
    subprocess.run(["git", "-C", str(shop), "checkout", "-q", "-b", "feat-shop"], check=True)
    other = str(checkout(workspace.root / "other", "https://gitlab.com/acme/other.git"))
    claude_root = workspace.root / "claude"
    claude_session(claude_root, str(shop))
    workspace.sources = [
        {"kind": "jsonl", "path": str(workspace.sessions)},
        {"kind": "claude-code", "path": str(claude_root)},
    ]
    workspace.settings["evolve"] = {"min_messages": 1000}
    workspace.write_config()
    # Written out of order: the occurrences are listed by when they happened.
    workspace.add_session("late", pushes(other, 3, ("call_late_1", "feat-3", 10)))
    workspace.add_session(
        "early", pushes(str(shop), 1, ("call_early_1", "feat-1", 10), ("call_early_2", "f1", 11))
    )
    workspace.add_session("middle", pushes(str(shop), 2, ("call_middle_1", "feat-2", 10)))
    once = workspace.cli("once")
    assert once.returncode == 0, once.stderr
    return workspace


def cli_json(workspace: Workspace, *args: str) -> Any:
    result = workspace.cli(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_failures_rows_carry_their_id_and_show_lists_every_occurrence_oldest_first(
    recorded: Workspace,
) -> None:
    rows = {row["signature"]: row for row in cli_json(recorded, "failures", "--json")}
    push = rows[PUSH_SIGNATURE]
    assert push["id"] == PUSH_ID
    assert (push["sessions"], push["occurrences"]) == (3, 4)
    for signature, row in rows.items():
        assert row["id"] == hashlib.sha256(signature.encode()).hexdigest()[:12]

    shown = cli_json(recorded, "failures", "show", PUSH_ID, "--json")
    occurrences = shown.pop("occurrences")
    # The row, its count of occurrences given as the list of them.
    assert shown == {key: value for key, value in push.items() if key != "occurrences"}
    assert len(occurrences) == push["occurrences"]
    assert [(o["session"], o["call_id"], o["at"]) for o in occurrences] == [
        ("jsonl:early", "call_early_1", "2026-01-01T10:00:00+00:00"),
        ("jsonl:early", "call_early_2", "2026-01-01T11:00:00+00:00"),
        ("jsonl:middle", "call_middle_1", "2026-01-02T10:00:00+00:00"),
        ("jsonl:late", "call_late_1", "2026-01-03T10:00:00+00:00"),
    ]
    first = occurrences[0]
    assert first == {
        "session": "jsonl:early",
        "source": "jsonl",
        "at": "2026-01-01T10:00:00+00:00",
        "message": 2,
        "call_id": "call_early_1",
        "command": "git push",
        "error": "fatal: The current branch feat-1 has no upstream branch.",
        "class": "real",
        "resolved": False,
        "repository": "github.com/acme/shop",
        "branch": "feat-shop",
    }
    # The error line as read, each with its own branch name; the signature has a placeholder.
    assert [o["error"] for o in occurrences[1:]] == [
        "fatal: The current branch f1 has no upstream branch.",
        "fatal: The current branch feat-2 has no upstream branch.",
        "fatal: The current branch feat-3 has no upstream branch.",
    ]
    assert [o["repository"] for o in occurrences] == [
        "github.com/acme/shop", "github.com/acme/shop", "github.com/acme/shop",
        "gitlab.com/acme/other",
    ]  # fmt: skip
    assert occurrences[1]["message"] == 4

    # By its signature, the same answer.
    assert cli_json(recorded, "failures", "show", PUSH_SIGNATURE, "--json") == {
        **shown,
        "occurrences": occurrences,
    }


def test_a_claude_code_failure_is_named_by_its_tool_use_id_and_its_branch(
    recorded: Workspace,
) -> None:
    (row,) = [r for r in cli_json(recorded, "failures", "--json") if r["tool"] == "Bash"]
    (occurrence,) = cli_json(recorded, "failures", "show", row["id"], "--json")["occurrences"]
    assert occurrence["session"] == f"claude-code:{CLAUDE_SESSION}"
    assert occurrence["call_id"] == TOOL_USE_ID
    assert (occurrence["command"], occurrence["branch"]) == ("git push", "feat-claude")
    assert occurrence["error"] == "fatal: The current branch feat-claude has no upstream branch."


def test_a_call_replayed_in_a_later_read_is_one_occurrence(workspace: Workspace) -> None:
    """A transcript that replays its history after a tick read it (a resumed session writes
    the same tool call again): the same id failing the same way is the call already kept."""
    claude_root = workspace.root / "claude"
    claude_session(claude_root, str(workspace.root))
    workspace.sources = [{"kind": "claude-code", "path": str(claude_root)}]
    workspace.settings["evolve"] = {"min_messages": 1000}
    workspace.write_config()
    assert workspace.cli("once").returncode == 0
    (session,) = (claude_root / "-home-dev-shop").glob("*.jsonl")
    replayed = [json.loads(line) for line in session.read_text(encoding="utf-8").splitlines()]
    for record in replayed:
        record["uuid"] += "-again"
        record["timestamp"] = "2026-01-05T09:00:00.000Z"
    with session.open("a", encoding="utf-8") as file:
        file.writelines(json.dumps(record) + "\n" for record in replayed)
    assert workspace.cli("once").returncode == 0
    (row,) = cli_json(workspace, "failures", "--json")
    assert row["occurrences"] == 1
    (occurrence,) = cli_json(workspace, "failures", "show", row["id"], "--json")["occurrences"]
    assert occurrence["call_id"] == TOOL_USE_ID
    # Control: another call failing the same way later in the session is an occurrence.
    again = [dict(record, uuid=record["uuid"] + "-new") for record in replayed]
    for record in again:
        text = json.dumps(record).replace(TOOL_USE_ID, "toolu_01Another")
        with session.open("a", encoding="utf-8") as file:
            file.write(text + "\n")
    assert workspace.cli("once").returncode == 0
    (row,) = cli_json(workspace, "failures", "--json")
    assert row["occurrences"] == 2


def test_show_reads_where_it_happened_and_an_unknown_failure_is_refused(
    recorded: Workspace,
) -> None:
    table = recorded.cli("failures")
    assert table.returncode == 0, table.stderr
    assert f"{PUSH_ID}         3     4  real" in table.stdout

    text = recorded.cli("failures", "show", PUSH_ID)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"{PUSH_ID}  {PUSH_SIGNATURE}"
    assert "real, 4 times in 3 sessions" in lines[1]
    early = lines.index("2026-01-01T10:00:00  jsonl:early (message 2, call call_early_1)")
    assert lines[early + 1 : early + 4] == [
        "  in github.com/acme/shop@feat-shop; real, not resolved",
        "  $ git push",
        "  ! fatal: The current branch feat-1 has no upstream branch.",
    ]
    assert text.stdout.index("jsonl:middle") < text.stdout.index("jsonl:late")

    for unknown in ("0123456789ab", "bash | git pull | nothing"):
        refused = recorded.cli("failures", "show", unknown)
        assert refused.returncode == 1
        assert refused.stdout == ""
        assert refused.stderr == (
            f"skilld: no failure with id or signature {unknown!r} (see `skilld failures`)\n"
        )
    assert recorded.cli("failures", "show").returncode == 2  # no id: a usage error


def test_api_failure_equals_the_cli_json_and_an_unknown_one_is_a_json_404(
    recorded: Workspace,
) -> None:
    shown = cli_json(recorded, "failures", "show", PUSH_ID, "--json")
    with client_for(recorded) as panel:
        answer = panel.get(f"/api/failures/{PUSH_ID}")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json() == shown
        missing = panel.get("/api/failures/0123456789ab")
        assert missing.status_code == 404
        assert missing.json() == {
            "error": "no failure with id or signature '0123456789ab' (see `skilld failures`)"
        }
        assert panel.get("/api/failures").json() == cli_json(recorded, "failures", "--json")


def test_the_failures_page_links_each_failure_to_its_page_of_occurrences(
    recorded: Workspace,
) -> None:
    with client_for(recorded) as panel:
        listing = panel.get("/failures")
        assert listing.status_code == 200
        assert f'<a href="/failures/{PUSH_ID}"><code>git push</code></a>' in listing.text
        page = panel.get(f"/failures/{PUSH_ID}")
        assert page.status_code == 200
        html = page.text
        assert html.count('<tr><td class="nowrap"><time') == 4
        assert "jsonl:early" in html and "call call_early_2" in html
        assert "<code>git push</code>" in html
        assert "fatal: The current branch feat-3 has no upstream branch." in html
        assert "github.com/acme/shop@feat-shop" in html and "gitlab.com/acme/other" in html
        assert html.index("call_early_1") < html.index("call_middle_1") < html.index("call_late_1")
        missing = panel.get("/failures/0123456789ab")
        assert missing.status_code == 404
        assert "no failure with id or signature" in missing.text


def test_the_failure_page_escapes_what_a_transcript_wrote(workspace: Workspace) -> None:
    hostile = "<script>alert(1)</script>"
    workspace.settings["evolve"] = {"min_messages": 1000}
    messages = pushes(str(workspace.root), 1, ("call_<b>x</b>", "feat-1", 10))
    messages[1]["tool_calls"][0]["function"]["arguments"] = json.dumps(
        {"command": f"echo '{hostile}' && false"}
    )
    messages[2]["content"] = f"error: {hostile}"
    workspace.add_session("hostile", messages)
    assert workspace.cli("once").returncode == 0
    (row,) = cli_json(workspace, "failures", "--json")
    with client_for(workspace) as panel:
        for path in ("/failures", f"/failures/{row['id']}"):
            html = panel.get(path).text
            assert "<script>alert" not in html and "<b>x</b>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "call_&lt;b&gt;x&lt;/b&gt;" in html


def test_a_state_db_of_schema_4_gains_the_ids_of_its_failures(workspace: Workspace) -> None:
    """The migration gives the rows recorded before it their failure's id: `show` finds them,
    with no command, line or call id (they were not kept)."""
    workspace.state.mkdir(mode=0o700)
    from skilld.state.db import _MIGRATIONS, _statements

    with sqlite3.connect(workspace.state / "state.db") as conn:
        for script in _MIGRATIONS[:4]:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 4")
        conn.execute(
            "INSERT INTO effect_sessions VALUES ('jsonl:old', 'jsonl', NULL, NULL,"
            " '2025-12-01T00:00:00+00:00')"
        )
        conn.execute(
            "INSERT INTO effect_failures(session, seq, ts, tool, command, signature, error,"
            " class, source, session_ts) VALUES ('jsonl:old', 3, '2025-12-01T00:00:05+00:00',"
            " 'bash', 'git push', ?, 'e', 'real', 'jsonl', '2025-12-01T00:00:00+00:00')",
            (PUSH_SIGNATURE,),
        )
    (row,) = cli_json(workspace, "failures", "--json")
    assert row["id"] == PUSH_ID
    (occurrence,) = cli_json(workspace, "failures", "show", PUSH_ID, "--json")["occurrences"]
    assert (occurrence["session"], occurrence["message"]) == ("jsonl:old", 3)
    assert (occurrence["call_id"], occurrence["command"], occurrence["error"]) == (None, None, None)


def test_a_secret_in_a_failing_command_is_nowhere_in_state_db(workspace: Workspace) -> None:
    """What the occurrence keeps of a session's history (read once for its failures, never held
    for reflection: a held message is another matter, docs/security.md)."""
    secret = "ghp_" + "Zq8Lw3Nv5Rt7Yp1Xk9Mb2Hc4Jd6Fg0Sa8Ue"
    workspace.settings["evolve"] = {"min_messages": 1000, "backfill": "24h"}
    messages = pushes(str(workspace.root), 1, ("call_secret", "feat-1", 10))
    # Long enough to be cut (by the reader, and again to 500 characters after redaction).
    command = f"git push https://x:{secret}@github.com/acme/shop.git " + "-o ci.skip " * 60
    messages[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"command": command})
    messages[2]["content"] = f"fatal: Authentication failed, token {secret}\nExit code 128"
    age(workspace.add_session("leaky", messages), 48 * HOUR)
    assert workspace.cli("once").returncode == 0
    (row,) = cli_json(workspace, "failures", "--json")
    (occurrence,) = cli_json(workspace, "failures", "show", row["id"], "--json")["occurrences"]
    assert occurrence["command"].startswith("git push https://x:[REDACTED:")
    assert len(occurrence["command"]) <= 500
    assert occurrence["error"].startswith("fatal: Authentication failed, token [REDACTED:")
    with sqlite3.connect(workspace.state / "state.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for file in workspace.state.iterdir():
        if file.is_file():
            assert secret.encode() not in file.read_bytes(), file.name


def test_show_prints_an_escape_sequence_a_transcript_wrote_as_text(workspace: Workspace) -> None:
    workspace.settings["evolve"] = {"min_messages": 1000}
    messages = pushes(str(workspace.root), 1, ("call_\x1b]52;c;aGk=\x07", "feat-1", 10))
    messages[1]["tool_calls"][0]["function"]["arguments"] = json.dumps(
        {"command": "git push \x1b[2J"}
    )
    messages[2]["content"] = "error: \x1b]0;owned\x07 cannot push"
    workspace.add_session("escapes", messages)
    assert workspace.cli("once").returncode == 0
    (row,) = cli_json(workspace, "failures", "--json")
    shown = workspace.cli("failures", "show", row["id"])
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "  $ git push \\x1b[2J" in shown.stdout
    assert "  ! error: \\x1b]0;owned\\x07 cannot push" in shown.stdout
    assert "call call_\\x1b]52;c;aGk=\\x07)" in shown.stdout
    listed = workspace.cli("failures")
    assert "\x1b" not in listed.stdout and "\\x1b]<n>;owned" in listed.stdout
    # --json keeps the text exact.
    (occurrence,) = cli_json(workspace, "failures", "show", row["id"], "--json")["occurrences"]
    assert occurrence["command"] == "git push \x1b[2J"


def test_the_skill_learned_from_a_failure_is_named_with_its_verdict(workspace: Workspace) -> None:
    """`failures show` reads only the skills learned in the failure's sessions, and names the
    same ones as `failures --json`; the failure's page links each with its verdict."""
    workspace.settings["evolve"] = {"min_messages": 1000}
    workspace.add_session("one", push_session(branch="feat-1", day=1))
    workspace.add_session("two", push_session(branch="feat-2", day=2))
    assert workspace.cli("once").returncode == 0
    with sqlite3.connect(workspace.state / "state.db") as conn:
        for name, session in (("push-upstream", "jsonl:one"), ("unrelated", "jsonl:none")):
            conn.execute(
                "INSERT INTO provenance(library, name, path, sha256, session, first_message,"
                " last_message, created_at, updated_at) VALUES ('default', ?, 'p', 'h', ?, 0, 5,"
                " '2026-01-01T11:00:00+00:00', '2026-01-01T11:00:00+00:00')",
                (name, session),
            )
        # Each version's event says what it targets: the push failure of its window.
        (signature,) = conn.execute("SELECT DISTINCT signature FROM effect_failures").fetchone()
        for name, session in (("push-upstream", "jsonl:one"), ("unrelated", "jsonl:none")):
            conn.execute(
                "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
                " VALUES ('2026-01-01T11:00:00+00:00', 'created', 'default', ?, ?, 'jsonl',"
                " 'learned', ?)",
                (name, session, json.dumps({"messages": [0, 5], "targets": [signature]})),
            )
    (row,) = cli_json(workspace, "failures", "--json")
    (effect,) = [r for r in cli_json(workspace, "effect", "--json") if r["name"] == "push-upstream"]
    assert row["skills"] == [
        {"library": "default", "name": "push-upstream", "verdict": effect["verdict"]}
    ]
    shown = cli_json(workspace, "failures", "show", row["id"], "--json")
    assert shown["skills"] == row["skills"]
    plain = workspace.cli("failures", "show", row["id"]).stdout
    assert f"(targeted by: default/push-upstream {effect['verdict']})" in plain
    with client_for(workspace) as panel:
        html = panel.get(f"/failures/{row['id']}").text
        link = '<a href="/skills/default/push-upstream">push-upstream</a>'
        verdict = f'<span class="verdict">{effect["verdict"]}</span>'
        assert f"{link} (default) {verdict}" in html
        listing = panel.get("/failures").text
        assert f"push-upstream</a> (default) {verdict}" in listing
