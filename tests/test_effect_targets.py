"""What a skill targets (DESIGN.md §13): the window's `[failure F<n>]` lines, a reply's `ends`,
the head named in the body without it, `no-failure` when neither, versions written before
targets were recorded worked out once, and a skill that helps only where it is loaded.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from skilld.effect.extract import Failure
from skilld.effect.targets import failure_lines, listed_failures, mentions, targeted
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply
from tests.test_effect_loop import push_session, stamp
from tests.test_failures_tick import PUSH_SIGNATURE, call, checkout

LINT_MARK = "Lint and push the branch."


def failure(seq: int, signature: str, head: str, cls: str = "real", **extra: Any) -> Failure:
    return Failure(seq, None, "bash", head, "error: no", signature, cls, 1, True, **extra)


def test_a_window_lists_each_counted_failure_once_numbered() -> None:
    shown = [
        failure(3, "sig-lint", "mix lint", run="mix lint --strict", line="error: 2 warnings"),
        failure(4, "sig-red", "pytest", cls="test"),  # a red test is not a failure to end
        failure(5, "sig-lint", "mix lint"),  # the same failure again
        failure(7, "sig-push", "git push", cls="masked"),
    ]
    listed = listed_failures(shown)
    assert [(item.label, item.signature) for item in listed] == [
        ("F1", "sig-lint"),
        ("F2", "sig-push"),
    ]
    assert failure_lines(listed).splitlines() == [
        "[failure F1] bash | mix lint --strict | error: 2 warnings (resolved later in the session)",
        "[failure F2] bash | git push | error: no (resolved later in the session)",
    ]


def test_ends_names_the_targets_else_the_heads_the_body_names() -> None:
    listed = listed_failures(
        [failure(1, "sig-dialyzer", "mix dialyzer"), failure(2, "sig-push", "git push")]
    )
    body = "1. Run `mix dialyzer` and read each warning.\n"
    assert targeted(listed, ["F2"], body) == ["sig-push"]
    assert targeted(listed, None, body) == ["sig-dialyzer"]
    assert targeted(listed, [], "1. Fix the warnings.\n") == []


def test_a_head_is_named_as_words_of_its_own() -> None:
    assert mentions("run `git  push -u origin HEAD`", "git push")
    assert not mentions("see git pushd", "git push")
    assert not mentions("legit push", "git push")
    assert not mentions("make", "")


# -- through the daemon ------------------------------------------------------------------------


def lint_and_push(moment: datetime, cwd: str) -> list[dict[str, Any]]:
    """A session whose `mix lint` fails and is fixed, then whose push fails and is fixed."""
    ts = stamp(moment)
    return [
        {"role": "user", "content": LINT_MARK, "timestamp": ts, "cwd": cwd},
        {"role": "assistant", "content": "", "tool_calls": [call("l1", "mix lint")]},
        {
            "role": "tool",
            "tool_call_id": "l1",
            "content": "** (CompileError) lib/a.ex:3: undefined",
            "error": True,
            "timestamp": ts,
        },
        {"role": "assistant", "content": "", "tool_calls": [call("l2", "mix lint")]},
        {"role": "tool", "tool_call_id": "l2", "content": "ok", "timestamp": ts},
        *push_session(moment, cwd, fails=True)[1:],
    ]


def answered_by(
    workspace: Workspace, fake_llm: FakeLLM, responder: Callable[[dict[str, Any]], Reply]
) -> str:
    """The workspace's model answers with `responder`; the checkout its sessions work in."""
    fake_llm.responder = responder
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    return str(checkout(workspace.root / "shop", "https://github.com/acme/shop.git"))


def window_of(fake_llm: FakeLLM) -> str:
    (text,) = [r["messages"][1]["content"] for r in fake_llm.requests if LINT_MARK in str(r)]
    return text


def effect_rows(workspace: Workspace) -> dict[str, dict[str, Any]]:
    result = workspace.cli("effect", "--json")
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_the_reply_names_what_the_skill_ends(workspace: Workspace, fake_llm: FakeLLM) -> None:
    def responder(request: dict[str, Any]) -> Reply:
        user = request["messages"][1]["content"]
        if LINT_MARK not in user:
            return skip_reply()
        push = re.search(r"\[failure (F[0-9]+)\] bash \| git push", user)
        assert push is not None, user
        # A skill about the push names the push; its body mentions lint too.
        return skill_reply(
            "push-upstream",
            "1. After `mix lint` passes, run `git push -u origin HEAD`.\n",
            ends=[push.group(1)],
        )

    shop = answered_by(workspace, fake_llm, responder)
    workspace.add_session("src", lint_and_push(datetime.now(UTC) - timedelta(hours=1), shop))
    assert workspace.cli("once").returncode == 0
    lines = [line for line in window_of(fake_llm).splitlines() if line.startswith("[failure ")]
    assert [line.split("]")[0] for line in lines] == ["[failure F1", "[failure F2"]
    (created,) = workspace.events("created")
    assert created["detail"]["targets"] == [PUSH_SIGNATURE]
    row = effect_rows(workspace)["push-upstream"]
    assert [f["signature"] for f in row["source_failures"]] == [PUSH_SIGNATURE]


def test_a_skill_about_nothing_the_window_failed_targets_nothing(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    def responder(request: dict[str, Any]) -> Reply:
        if LINT_MARK not in request["messages"][1]["content"]:
            return skip_reply()
        return skill_reply("tabs-not-spaces", "1. Indent with two spaces in Elixir files.\n")

    shop = answered_by(workspace, fake_llm, responder)
    workspace.add_session("src", lint_and_push(datetime.now(UTC) - timedelta(hours=1), shop))
    assert workspace.cli("once").returncode == 0
    assert "[failure F2]" in window_of(fake_llm)
    (created,) = workspace.events("created")
    assert created["detail"]["targets"] == []
    row = effect_rows(workspace)["tabs-not-spaces"]
    assert row["source_failures"] == [] and row["verdict"] == "no-failure"


def test_an_unknown_failure_id_is_refused_like_any_invalid_field(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    def responder(request: dict[str, Any]) -> Reply:
        if LINT_MARK not in str(request["messages"]):
            return skip_reply()
        return skill_reply("push-upstream", "1. Push with -u.\n", ends=["F9"])

    shop = answered_by(workspace, fake_llm, responder)
    workspace.add_session("src", lint_and_push(datetime.now(UTC) - timedelta(hours=1), shop))
    assert workspace.cli("once").returncode == 0
    (invalid,) = workspace.events("invalid")
    assert '"ends" names failures the window does not show' in invalid["reason"]
    assert workspace.events("created") == []


def test_a_version_written_before_targets_is_worked_out_from_its_body(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """An older state.db: the version's event names its window but no targets. The skill's
    body names `git push`, not `mix lint`: it targets the push, once, kept by event id."""
    shop = answered_by(workspace, fake_llm, lambda request: skip_reply())
    workspace.add_session("src", lint_and_push(datetime.now(UTC) - timedelta(hours=1), shop))
    assert workspace.cli("once").returncode == 0
    folder = workspace.skills / "push-upstream"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: push-upstream\ndescription: Push a new branch.\nmanaged-by: skilld\n---\n\n"
        "1. Run `git push -u origin HEAD`.\n"
    )
    with sqlite3.connect(workspace.state / "state.db") as conn:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        conn.execute(
            "INSERT INTO provenance(library, name, path, sha256, session, first_message,"
            " last_message, created_at, updated_at) VALUES ('default', 'push-upstream', ?, 'h',"
            " 'jsonl:src', 0, 20, ?, ?)",
            (str(folder / "SKILL.md"), now, now),
        )
        conn.execute(
            "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
            " VALUES (?, 'created', 'default', 'push-upstream', 'jsonl:src', 'jsonl', 'learned',"
            " ?)",
            (now, json.dumps({"messages": [0, 20]})),
        )
    row = effect_rows(workspace)["push-upstream"]
    assert [f["signature"] for f in row["source_failures"]] == [PUSH_SIGNATURE]
    with sqlite3.connect(workspace.state / "state.db") as conn:
        assert conn.execute("SELECT targets FROM effect_targets").fetchall() == [
            (json.dumps([PUSH_SIGNATURE]),)
        ]


def test_helps_when_loaded_with_the_evidence_in_sessions(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    """Half the later sessions load the skill and push cleanly; the other half do not, and
    fail: the skill helps where it is loaded, and its routing needs fixing."""
    source_mark = "Push my new branch, it has never been pushed."

    def responder(request: dict[str, Any]) -> Reply:
        if source_mark in request["messages"][1]["content"]:
            return skill_reply("push-upstream", "1. Run `git push -u origin HEAD`.\n")
        return skip_reply()

    shop = answered_by(workspace, fake_llm, responder)
    now = datetime.now(UTC)
    for n in range(6):  # before: four of six fail
        workspace.add_session(
            f"b{n}", push_session(now - timedelta(days=10 - n), shop, fails=n < 4)
        )
    workspace.add_session(
        "src", push_session(now - timedelta(days=1), shop, fails=True, ask=source_mark)
    )
    assert workspace.cli("once").returncode == 0
    skill_file = workspace.skills / "push-upstream" / "SKILL.md"
    for n in range(16):
        moment = now + timedelta(hours=1, minutes=n)
        loads = skill_file if n % 2 == 0 else None
        workspace.add_session(f"a{n}", push_session(moment, shop, fails=loads is None, loads=loads))
    assert workspace.cli("once").returncode == 0
    row = effect_rows(workspace)["push-upstream"]
    assert row["before"] == {"sessions": 6, "failures": 4}
    assert row["after"] == {"sessions": 16, "failures": 8, "loaded_sessions": 8,
                            "loaded_failures": 0}  # fmt: skip
    assert row["verdict"] == "helps-when-loaded"
    numbers = [int(n) for n in re.findall(r"[0-9]+", row["evidence"])]
    assert numbers == [8, 16, 0, 8, 8, 8, 4, 6]
    assert row["evidence"] == (
        "loaded in 8 of 16 later sessions that ran `git push`; failed again in 0 of those 8"
        " and in 8 of the other 8; before: failed in 4 of 6"
    )
    shown = workspace.cli("skills", "show", "push-upstream")
    assert shown.returncode == 0
    assert f"# effect: helps-when-loaded: {row['evidence']}" in shown.stderr
