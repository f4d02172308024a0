"""`skilld replay` as a real subprocess against a loopback LLM server.

The promise under test: the whole pipeline runs over existing transcripts, proposals land only
under `--out`, and the real skills dir, `.usage.json` and the daemon's state are byte-identical
before and after; the report's totals are what the server really received.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from skilld.cli import build_parser
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, completion, skill_reply, skip_reply

SECRET = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path -> sha256): what "untouched" means here."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def replay(workspace: Workspace, *args: str) -> tuple[int, Any, str]:
    result = workspace.cli("replay", *args)
    report = json.loads(result.stdout) if "--json" in args and result.stdout else None
    return result.returncode, report, result.stdout + result.stderr


def window_of(request: dict[str, Any]) -> str:
    return str(request["messages"][1]["content"])


def proposal(name: str, content: str, *, usage: bool = True) -> Reply:
    payload = {
        "evolve": True,
        "name": name,
        "description": f"How to {name.replace('-', ' ')}.",
        "whenToUse": "When it comes up.",
        "content": content,
        "reason": "Reusable.",
    }
    return Reply(body=completion(json.dumps(payload), usage=usage))


def test_replay_writes_only_under_out_and_reports_what_the_server_received(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    # The daemon's own history: one managed skill, and a skill a person wrote.
    workspace.add_session("s1-build", conversation("the build"))
    fake_llm.push(skill_reply("run-make-test", description="Run the make test target."))
    assert workspace.cli("once").returncode == 0
    mine = workspace.skills / "mine" / "SKILL.md"
    mine.parent.mkdir()
    mine.write_text("---\nname: mine\ndescription: Mine.\n---\nHands off.\n", encoding="utf-8")
    assert workspace.cli("usage", "use", "run-make-test").returncode == 0
    assert (workspace.skills / ".usage.json").is_file()

    # Sessions the daemon has not reflected yet (it is stopped): replay sees them all.
    workspace.add_session("s2-docs", conversation("the docs"))
    deploy = conversation("the deploy")
    deploy[2]["content"] = f"export GITHUB_TOKEN={SECRET}\nok"
    workspace.add_session("s3-deploy", deploy)
    workspace.add_session("s4-lint", conversation("the lint"))

    def by_window(request: dict[str, Any]) -> Reply:
        window = window_of(request)
        if "The skill's current text" in window:  # the merge into the managed skill
            return proposal("run-make-test", "1. Run `make lint` first.\n2. Then `make test`.\n")
        if "the build" in window:
            return skip_reply()
        if "the docs" in window:
            return skill_reply("mine")  # a person's skill: refused
        if "the deploy" in window:
            return proposal("deploy-steps", "1. Deploy.\n", usage=False)
        if len(request["messages"]) == 2:
            return Reply(body=completion("Sure! Here is my answer."))  # breaks the contract
        return proposal("run-make-test", "1. Run `make lint` first.\n2. Then `make test`.\n")

    fake_llm.responder = by_window
    skills_before = tree_digest(workspace.skills)
    state_before = tree_digest(workspace.state)
    assert "state.db" in state_before and ".usage.json" in skills_before
    already_sent = len(fake_llm.requests)

    out = tmp_path / "replay-out"
    code, report, output = replay(workspace, "--out", str(out), "--json")
    assert code == 0, output

    # Nothing real changed, byte for byte.
    assert tree_digest(workspace.skills) == skills_before
    assert tree_digest(workspace.state) == state_before

    requests = fake_llm.requests[already_sent:]
    rows = {row["session"]: row for row in report["windows"]}
    assert set(rows) == {"jsonl:s1-build", "jsonl:s2-docs", "jsonl:s3-deploy", "jsonl:s4-lint"}
    assert [rows[s]["outcome"] for s in sorted(rows)] == [
        "skipped",
        "protected",
        "created",
        "updated",  # the managed skill, seen as skilld's own in the sandbox
    ]
    # The repair request counts, and so does the merge into the skill's current text.
    assert (rows["jsonl:s4-lint"]["calls"], rows["jsonl:s4-lint"]["merge_calls"]) == (3, 1)
    for session in ("jsonl:s1-build", "jsonl:s2-docs"):
        assert rows[session]["prompt_tokens"] == 100 and rows[session]["completion_tokens"] == 50
        assert rows[session]["estimated"] is False
    assert rows["jsonl:s4-lint"]["prompt_tokens"] == 300
    deploy_row = rows["jsonl:s3-deploy"]
    assert deploy_row["estimated"] is True  # the server sent no usage
    deploy_request = next(r for r in requests if "the deploy" in window_of(r))
    deploy_chars = len("\n".join(m["content"] for m in deploy_request["messages"]))
    assert deploy_row["prompt_tokens"] == deploy_chars // 4

    totals = report["totals"]
    assert totals["windows"] == 4
    assert totals["calls"] == len(requests) == 6 and totals["merge_calls"] == 1
    assert totals["prompt_tokens"] == sum(row["prompt_tokens"] for row in rows.values())
    assert totals["completion_tokens"] == sum(row["completion_tokens"] for row in rows.values())
    assert totals["estimated"] is True
    assert (totals["created"], totals["updated"], totals["skipped"]) == (1, 1, 1)
    assert (totals["invalid"], totals["protected"], totals["not_sent"]) == (0, 1, 0)
    assert totals["redactions"] >= 1 and SECRET not in fake_llm.all_request_text

    # The proposals are under --out, beside copies of the real skills.
    created = out / "skills" / "default" / "deploy-steps" / "SKILL.md"
    updated = out / "skills" / "default" / "run-make-test" / "SKILL.md"
    assert deploy_row["path"] == str(created) and created.is_file()
    assert rows["jsonl:s4-lint"]["path"] == str(updated)
    assert "make lint" in updated.read_text(encoding="utf-8")
    assert "make lint" not in (workspace.skills / "run-make-test" / "SKILL.md").read_text()
    assert not (workspace.skills / "deploy-steps").exists()
    assert (out / "skills" / "default" / "mine" / "SKILL.md").read_bytes() == mine.read_bytes()
    assert report["seeded_skills"] == 2

    # The same run as text: one line per window, then the totals.
    code, _, text = replay(workspace, "--out", str(tmp_path / "again"))
    assert code == 0, text
    assert f"proposals in   {tmp_path / 'again'}/skills/<library>" in text
    assert "jsonl:s3-deploy" in text and "deploy-steps" in text
    assert "total: 4 windows, 6 calls (1 to merge into existing skills)" in text
    assert "skills: created 1, updated 1, skipped 1, invalid 0, protected 1" in text
    assert tree_digest(workspace.skills) == skills_before
    assert tree_digest(workspace.state) == state_before


def test_dry_run_sends_nothing_and_estimates_the_input(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    for topic in ("alpha", "beta", "gamma"):
        workspace.add_session(topic, conversation(topic))

    code, report, output = replay(workspace, "--dry-run", "--json")
    assert code == 0, output
    assert fake_llm.requests == []
    assert report["dry_run"] is True and report["out"] is None  # its sandbox was removed
    totals = report["totals"]
    assert totals["windows"] == 3 and totals["calls"] == 0
    assert totals["completion_tokens"] == 0 and totals["estimated"] is True
    # Each window's estimate covers its whole prompt (instructions and transcript).
    assert all(row["prompt_tokens"] > 500 for row in report["windows"])
    assert totals["prompt_tokens"] == sum(row["prompt_tokens"] for row in report["windows"])
    assert {row["outcome"] for row in report["windows"]} == {"would send"}
    # The daemon never ran here: replay did not create its state either.
    assert not workspace.state.exists()

    code, _, text = replay(workspace, "--dry-run")
    assert code == 0, text
    assert fake_llm.requests == []
    assert f"~{totals['prompt_tokens']:,} input tokens (estimated), no request made" in text
    assert "total: 3 windows would be sent" in text


def test_since_limit_and_source_choose_what_is_sent(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    paths = {
        topic: workspace.add_session(topic, conversation(topic))
        for topic in ("ancient", "older", "newer")
    }
    for topic, hours in (("ancient", 72), ("older", 2), ("newer", 1)):
        when = time.time() - hours * 3600
        os.utime(paths[topic], (when, when))
    fake_llm.default = skip_reply()

    out = tmp_path / "out"
    code, report, output = replay(workspace, "--since", "24h", "--limit", "1", "--json",
                                  "--out", str(out))  # fmt: skip
    assert code == 0, output
    [request] = fake_llm.requests
    assert "older" in window_of(request)  # the oldest within the last 24 hours goes first
    assert report["totals"]["windows"] == 1 and report["totals"]["not_sent"] == 1
    assert report["stopped"] == "--limit 1 reached"

    code, _, output = replay(workspace, "--source", "codex", "--dry-run")
    assert code == 2
    assert "no codex source" in output


def test_unsafe_or_bad_options_are_refused(workspace: Workspace, tmp_path: Path) -> None:
    workspace.write_config()
    workspace.add_session("s1", conversation())
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    for args, message in (
        (("--out", str(busy)), "must be an empty directory"),
        (("--out", str(workspace.skills / "preview")), "overlaps the real skills dir"),
        (("--out", str(workspace.root)), "overlaps the real"),
    ):
        code, _, output = replay(workspace, *args)
        assert code == 2, (args, output)
        assert message in output, (args, output)
    assert (busy / "keep.txt").read_text() == "mine" and len(list(busy.iterdir())) == 1
    assert not (workspace.skills / "preview").exists()


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for args, message in (
        (["--since", "yesterday"], "not a duration"),
        (["--limit", "0"], "must be 1 or more"),
        (["--source", "emacs"], "invalid choice"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["replay", *args])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    parsed = parser.parse_args(["replay", "--since", "7d", "--limit", "3", "--source", "codex"])
    assert (parsed.since, parsed.limit, parsed.source) == ("7d", 3, "codex")


def test_an_unreachable_llm_is_reported_and_exits_1(workspace: Workspace, tmp_path: Path) -> None:
    workspace.llm_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    workspace.settings = {"llm": {"max_retries": 0}}
    workspace.write_config()
    workspace.add_session("s1", conversation())
    code, report, output = replay(workspace, "--json", "--out", str(tmp_path / "out"))
    assert code == 1, output
    # An outage is not the window's fault: the window is reported as not sent, with why.
    assert report["windows"] == [] and report["totals"]["not_sent"] == 1
    assert "the LLM could not answer: transport" in report["stopped"]
    assert report["totals"]["created"] == 0
    assert not workspace.state.exists()


def test_links_planted_at_the_markers_are_not_followed_into_the_sandbox(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """`.usage.json`, `.bundled_manifest` and the hub lock are read through the tree guard: a
    link at one of those names (or on the way to it) is the daemon's to refuse, never a way to
    copy a file from outside the library into `--out`."""
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s1", conversation())
    fake_llm.default = skip_reply()
    skill = workspace.skills / "kept" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: kept\ndescription: Kept.\n---\nKept.\n", encoding="utf-8")
    outside = tmp_path / "outside"
    (outside / "hub").mkdir(parents=True)
    secret = outside / "secret.json"
    secret.write_text('{"outside-secret": {"pinned": true}}\n', encoding="utf-8")
    (outside / "hub" / "lock.json").write_text('{"outside-secret": 1}\n', encoding="utf-8")
    (workspace.skills / ".usage.json").symlink_to(secret)
    (workspace.skills / ".bundled_manifest").symlink_to(secret)
    (workspace.skills / ".hub").symlink_to(outside / "hub")

    out = tmp_path / "out"
    code, report, output = replay(workspace, "--out", str(out), "--json")
    assert code == 0, output
    assert report["seeded_skills"] == 1
    sandbox = out / "skills" / "default"
    assert (sandbox / "kept" / "SKILL.md").read_bytes() == skill.read_bytes()
    for path in out.rglob("*"):
        assert not path.is_symlink(), path
        if path.is_file():
            assert b"outside-secret" not in path.read_bytes(), path
    assert not (sandbox / ".bundled_manifest").exists()
    assert not (sandbox / ".hub" / "lock.json").exists()
