"""Failures read from transcripts (DESIGN.md §13): each source's outcome, the signature, the
class and resolution. Sources read real files; `extract` is pure and tested on plain values."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from skilld.effect import extract as extract_module
from skilld.effect import store
from skilld.effect.extract import (
    Failure,
    HeadRuns,
    ToolRun,
    classify,
    combined,
    extract,
    tally,
    utc_iso,
)
from skilld.effect.signature import (
    PLAIN_PROGRAMS,
    SETUP_PROGRAMS,
    SHELLS,
    WRAPPERS,
    _parsed_head,
    _part_head,
    _parts,
    _replace_name,
    _script_heads,
    _shell_script,
    command_head,
    first_error_line,
    normalise_error,
    signature,
)
from skilld.gitinfo import context
from skilld.state import StateDB
from skilld.transcripts.claude_code import ClaudeCodeSource
from skilld.transcripts.codex import CodexSource
from skilld.transcripts.dsh import DshSource
from skilld.transcripts.hermes import HermesSource
from skilld.transcripts.jsonl import JsonlSource
from skilld.transcripts.model import Message, SessionRead, ToolCall
from tests.test_dsh import DshSession
from tests.test_sources import (
    CODEX_ID,
    Hermes,
    assistant,
    claude,
    codex,
    item,
    only_read,
    text_message,
    write_lines,
)


def bash(command: str) -> str:
    return json.dumps({"command": command})


def session(*steps: tuple[str, str, str, bool, int | None] | str) -> list[Message]:
    """Messages from steps: a user line (str) or (tool, command, result, failed, exit code)."""
    messages: list[Message] = []
    for index, step in enumerate(steps):
        if isinstance(step, str):
            messages.append(Message("user", step))
            continue
        tool, command, text, failed, exit_code = step
        arguments = bash(command) if tool == "Bash" else json.dumps({"file_path": command})
        call = ToolCall(tool, arguments, f"c{index}")
        messages.append(Message("assistant", "", (call,)))
        messages.append(
            Message("tool", text, tool_call_id=f"c{index}", failed=failed, exit_code=exit_code)
        )
    return messages


def failures_of(*steps: tuple[str, str, str, bool, int | None] | str) -> list[Failure]:
    return extract(session(*steps), 0).failures


def outcomes(read: SessionRead) -> list[tuple[bool | None, int | None]]:
    return [(m.failed, m.exit_code) for m in read.messages if m.role == "tool"]


# -- each source's outcome -------------------------------------------------------------------


def tool_result(call_id: str, content: str, **block: Any) -> dict[str, Any]:
    return claude(
        "user",
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": content, **block}
            ],
        },
    )


def tool_use(message_id: str, call_id: str, command: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}
    return assistant(message_id, block)


def test_claude_code_outcome_from_is_error_and_the_exit_banner(tmp_path: Path) -> None:
    project = tmp_path / "-home-dev-shop"
    write_lines(
        project / "s1.jsonl",
        [
            claude("user", {"role": "user", "content": "push it"}),
            tool_use("m1", "t1", "git push 2>&1"),
            tool_result(
                "t1",
                "Exit code 128\nfatal: The current branch feat-a has no upstream branch.",
                is_error=True,
            ),
            tool_use("m2", "t2", "git push -u origin feat-a"),
            tool_result("t2", "branch 'feat-a' set up to track 'origin/feat-a'."),
            tool_use("m3", "t3", "git commit -m x"),
            tool_result(
                "t3", "Pre-commit validation failed:\\n\\n[FORMAT] not formatted", is_error=True
            ),
        ],
    )
    read = only_read(ClaudeCodeSource(tmp_path).scan({}))
    assert outcomes(read) == [(True, 128), (False, None), (True, None)]
    found = extract(read.messages, 0, cwd=read.cwd).failures
    assert [(f.command, f.cls, f.exit_code, f.resolved) for f in found] == [
        ("git push", "real", 128, True),
        ("git commit", "hook", None, False),
    ]
    assert found[0].error == "fatal: The current branch <branch> has no upstream branch."
    assert found[1].error == "Pre-commit validation failed:"


def codex_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return item(type="function_call", name=name, arguments=json.dumps(arguments), call_id=call_id)


def codex_output(call_id: str, output: Any) -> dict[str, Any]:
    return item(type="function_call_output", call_id=call_id, output=output)


def test_codex_outcome_in_the_old_shell_and_the_exec_command_forms(tmp_path: Path) -> None:
    exec_failed = (
        "Chunk ID: d8\nWall time: 0.0000 seconds\nProcess exited with code 1\n"
        "Original token count: 28\nOutput:\nerror: pathspec 'src/a.py' did not match\n"
    )
    write_lines(
        tmp_path / f"rollout-2025-10-29T00-59-38-{CODEX_ID}.jsonl",
        [
            codex("session_meta", {"id": CODEX_ID, "cwd": "/work/x"}),
            text_message("user", "stage and test"),
            codex_call("a", "shell", {"command": ["bash", "-lc", "pytest -q"], "workdir": "/w"}),
            codex_output("a", json.dumps({"output": "1 failed", "metadata": {"exit_code": 1}})),
            codex_call("b", "exec_command", {"cmd": "git add src/a.py"}),
            codex_output("b", exec_failed),
            codex_call("c", "exec_command", {"cmd": "rm -rf build"}),
            codex_output("c", "exec command rejected by user"),
            codex_call("d", "shell", {"command": ["ls"]}),
            codex_output("d", {"content": "a b", "success": True}),
            codex_call("e", "exec_command", {"cmd": "git add src/b.py"}),
            codex_output("e", exec_failed.replace("code 1", "code 0")),
        ],
    )
    read = only_read(CodexSource(tmp_path).scan({}))
    assert outcomes(read) == [(True, 1), (True, 1), (True, None), (False, None), (False, 0)]
    found = extract(read.messages, 0, cwd=read.cwd).failures
    assert [(f.tool, f.command, f.cls, f.resolved) for f in found] == [
        ("shell", "pytest", "test", False),
        ("exec_command", "git add", "real", True),
        ("exec_command", "rm", "rejected", False),
    ]
    assert found[1].error == "error: pathspec '<path>' did not match"


def test_dsh_outcome_from_is_error(tmp_path: Path) -> None:
    dsh = DshSession(tmp_path, "s")
    dsh.append(
        dsh.turn_start(),
        dsh.user("build it"),
        dsh.assistant(calls=(("c1", "bash", '{"command":"cargo build"}'),)),
        dsh.tool_call("c1", "bash", '{"command":"cargo build"}'),
        dsh.tool_result("c1", "error[E0425]: cannot find value `x` in this scope", error=True),
        dsh.assistant(calls=(("c2", "bash", '{"command":"cargo build"}'),)),
        dsh.tool_call("c2", "bash", '{"command":"cargo build"}'),
        dsh.tool_result("c2", "Finished dev"),
        dsh.assistant("Built."),
        dsh.turn_end(),
    )
    read = only_read(DshSource(tmp_path).scan({}))
    assert outcomes(read) == [(True, None), (False, None)]
    (failure,) = extract(read.messages, 0).failures
    assert (failure.command, failure.cls, failure.resolved) == ("cargo build", "real", True)
    assert failure.error == "error[E0425]: cannot find value `x` in this scope"  # a code stays


def test_hermes_outcome_from_its_json_results(tmp_path: Path) -> None:
    db = Hermes(tmp_path / "state.db")
    db.session("20260101_a")
    db.message("20260101_a", "user", "run the tests")
    for call_id, command, result in [
        ("h1", "make test-unit", {"output": "FAIL", "exit_code": 2, "error": None}),
        ("h2", "rm -rf ~", {"output": "", "exit_code": -1, "error": "Command blocked"}),
        ("h3", "ls", {"output": "a b", "exit_code": 0, "error": None}),
    ]:
        call = {"id": call_id, "type": "function", "function": {"name": "terminal"}}
        call["function"]["arguments"] = json.dumps({"command": command})
        db.message("20260101_a", "assistant", None, tool_calls=json.dumps([call]))
        db.message(
            "20260101_a", "tool", json.dumps(result), tool_call_id=call_id, tool_name="terminal"
        )
    db.close()
    read = only_read(HermesSource(tmp_path / "state.db").scan({}))
    assert outcomes(read) == [(True, 2), (True, -1), (False, 0)]
    found = extract(read.messages, 0).failures
    assert [(f.command, f.cls, f.error) for f in found] == [
        ("make", "test", "FAIL"),  # `make test-unit`: a red test run
        ("rm", "hook", "Command blocked"),
    ]


def test_jsonl_outcome_from_the_error_flag(tmp_path: Path) -> None:
    call = {"id": "j1", "type": "function", "function": {"name": "bash"}}
    call["function"]["arguments"] = json.dumps({"cmd": "npm run build"})
    write_lines(
        tmp_path / "s.jsonl",
        [
            {"role": "user", "content": "build"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "j1", "content": "sh: vite: not found", "error": True},
            {"role": "assistant", "content": "", "tool_calls": [{**call, "id": "j2"}]},
            {"role": "tool", "tool_call_id": "j2", "content": "built in 2s"},
        ],
    )
    read = only_read(JsonlSource(tmp_path).scan({}))
    assert outcomes(read) == [(True, None), (False, None)]
    (failure,) = extract(read.messages, 0).failures
    assert (failure.command, failure.error, failure.resolved) == (
        "npm run",
        "sh: vite: not found",
        True,
    )


# -- the signature ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "head"),
    [
        ("git push 2>&1", "git push"),
        ("cd /srv/app && git push origin main", "git push"),
        ("FOO=1 sudo -E /usr/bin/git -C /srv/app push", "git push"),
        ("env CI=1 timeout 60 cargo test --release", "cargo test"),
        ("bash -lc 'npm run build'", "npm run"),
        ("python3 -m pytest -q tests/", "pytest"),
        ("./node_modules/.bin/jest --ci", "jest"),
        ("npx vitest run", "vitest"),
        ("source .venv/bin/activate && mix test test/a_test.exs", "mix test"),
        ("grep -rn TODO src | head -5", "grep"),
        ("git commit -m \"$(cat <<'EOF'\nfix: a && b; c\nEOF\n)\"", "git commit"),
    ],
)
def test_command_head(command: str, head: str) -> None:
    assert command_head("Bash", bash(command)) == head


@given(
    st.text(alphabet=st.sampled_from("ab-=/. \t'\"\\<>$()`{}!~*"), max_size=24).filter(
        lambda script: "<<" not in script  # a here-document is a part of its own
    )
)
def test_a_script_without_separators_is_one_part(script: str) -> None:
    """What `_script_heads` takes whole, without the tokenizer: no `&`, `|`, `;` or line
    break, and no here-document. The tokenizer finds the same head in it."""
    heads = [head for head in map(_part_head, _parts(script)) if head is not None]
    assert heads == [head for head in [_part_head(script)] if head is not None]


@given(
    st.text(alphabet=st.sampled_from("ab/-_ .x1é:"), max_size=24),
    st.text(alphabet=st.sampled_from("ab/-_.x1é"), min_size=2, max_size=4),
)
def test_a_branch_is_replaced_where_its_pattern_finds_it(line: str, name: str) -> None:
    pattern = rf"(?<![\w/-]){re.escape(name)}(?![\w/-])"
    assert _replace_name(line, name, "<branch>") == re.sub(pattern, "<branch>", line)


@given(
    st.sampled_from(
        sorted(
            PLAIN_PROGRAMS
            | WRAPPERS
            | SHELLS
            | {"git", "cd", "python3", "npm", "npx", "a=b", "-x", "./run", "f)", "(", "!", "é"}
        )
    ),
    st.text(alphabet=st.sampled_from("ab-=/. \t'\"\\<>$()x1c"), max_size=24),
)
@example("env", " FOO=1 cargo test")
@example("timeout", " 60 pytest -q")
@example("bash", " -c 'git push'")
@example("sudo", " make install")
@example("git", " 'push' x")
@example("git", " -C 'a b' push")
@example("npm", " run 'build'")
def test_a_plain_program_is_its_own_head(program: str, rest: str) -> None:
    """A part a plain program or a program with nothing to look past opens is taken as its
    head without the parser's steps: what parsing finds."""
    part = program + rest
    assert _part_head(part) == _parsed_head(part)


def parsed_heads(script: str) -> tuple[str, ...]:
    """What `_script_heads` finds, the slow way: every part tokenized and parsed, the setup
    parts' heads kept for a script that has no other."""
    heads: list[str] = []
    setup: list[str] = []
    for head in (_parsed_head(part) for part in _parts(script)):
        if head is None:
            continue
        if head.split(" ", 1)[0] in SETUP_PROGRAMS:
            setup.append(head)
        elif head not in heads:
            heads.append(head)
    return tuple(heads or setup[:1])


_CHAIN_WORDS = sorted(SETUP_PROGRAMS | {"git", "push", "cargo", "test", "cat", "x", "./a", "-q"})


@given(
    st.lists(
        st.one_of(
            st.sampled_from([*_CHAIN_WORDS, "&&", "||", ";", "|", "&", "\n", "2>&1", "&>x"]),
            st.text(alphabet=st.sampled_from("ab-=/. \t:'\"\\;|&"), max_size=6),
        ),
        max_size=12,
    ).map(" ".join)
)
@example("cd src && cd lib")
@example(": && cd src")
@example("export A=1; true")
@example("cd /srv && git push 2>&1 | tail")
@example("grep -n 'a;b' x && git push")
@example('echo \'"\' "a;b" && git push')
@example('git commit -m "x | y" ; cargo test')
def test_a_chain_has_the_heads_parsing_finds(script: str) -> None:
    """The shortcuts (a simple script split, not tokenized; a setup part's head read only when
    no other part has one; a plain program taken unparsed) find what parsing every part does."""
    assert _script_heads(script) == parsed_heads(script)


@given(st.text(max_size=40), st.sampled_from(["command", "cmd"]), st.booleans())
def test_the_plain_json_shortcut_reads_what_decoding_reads(
    value: str, key: str, compact: bool
) -> None:
    arguments = json.dumps({key: value, "timeout": 5}, separators=(",", ":") if compact else None)
    assert _shell_script(arguments) == json.loads(arguments)[key]


def test_a_chain_is_attributed_to_the_part_its_error_names() -> None:
    chain = bash("git add -A && git commit -m wip && git push")
    assert command_head("Bash", chain, "Exit code 1\nhint: Use -f if you want to add them") == (
        "git add"
    )
    assert command_head("Bash", chain, "Exit code 128\nfatal: no upstream; git push -u") == (
        "git push"
    )
    assert command_head("Bash", bash("ls out && cat out/log"), "cat: out/log: No such file") == (
        "cat"
    )
    # No evidence: the last part that ran (a pipe's filters aside).
    assert command_head("Bash", chain, "something unexpected") == "git push"
    assert command_head("Bash", bash("cargo build 2>&1 | tail -3"), "Exit code 1\nboom") == (
        "cargo build"
    )
    assert command_head("Read", json.dumps({"file_path": "/x"})) == "Read"


def test_the_same_failure_elsewhere_has_the_same_signature() -> None:
    """Another checkout, branch, file, line, hash and duration: the same failure."""
    first = (
        "Exit code 128\nfatal: The current branch spotter-gqc has no upstream branch.",
        "/home/me/wt/spotter-gqc",
        "spotter-gqc",
    )
    second = (
        "Exit code 128\nfatal: The current branch feature/login-2 has no upstream branch.",
        "/tmp/other/checkout",
        "feature/login-2",
    )
    assert {
        normalise_error(first_error_line(text), cwd, branch)
        for text, cwd, branch in (first, second)
    } == {"fatal: The current branch <branch> has no upstream branch."}
    located = [
        ("/home/me/wt/a/src/app.py:12: error: bad 3f2a9c1d (0.52s)", "/home/me/wt/a"),
        ("/srv/ci/b/src/app.py:907: error: bad 77e0b1aa4 (13s)", "/srv/ci/b"),
    ]
    assert {normalise_error(text, cwd) for text, cwd in located} == {
        "<cwd><path>:<n>: error: bad <hash> (<n>)"
    }
    assert normalise_error("cannot open /x/y/z on origin/feat-9 at 2026-01-02", None) == (
        "cannot open <path> on origin/<branch> at <n>-<n>-<n>"
    )


def test_the_first_error_line_skips_banners_and_prefers_the_error() -> None:
    assert first_error_line("Exit code 1\nCompiling 3 files\nerror: undefined x\n") == (
        "error: undefined x"
    )
    traceback = "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'k'"
    assert first_error_line(f"Exit code 1\n{traceback}") == "KeyError: 'k'"
    assert first_error_line("[error] <tool_use_error>File does not exist.</tool_use_error>") == (
        "File does not exist."
    )
    assert first_error_line('{"output": "", "exit_code": 1, "error": "boom"}') == "boom"
    assert signature("Bash", "git push", "e") == "Bash | git push | e"


# -- classes and resolution ------------------------------------------------------------------


def test_each_class() -> None:
    found = failures_of(
        "do things",
        ("Bash", "git push", "Exit code 128\nfatal: no upstream", True, 128),
        ("Bash", "pytest -q", "Exit code 1\n1 failed, 2 passed", True, 1),
        ("Bash", "grep -rn needle src", "Exit code 1\n", True, 1),
        ("Bash", "which ruff", "Exit code 1\nruff not found", True, 1),
        ("Bash", "grep -rn x nowhere", "Exit code 2\ngrep: nowhere: No such file", True, 2),
        ("Bash", "git commit -m x", "PreToolUse:Bash hook error: blocked", True, None),
        ("Bash", "rm -rf /", "The user doesn't want to proceed with this tool use.", True, None),
        (
            "Bash",
            "npm test",
            "<tool_use_error>Sibling tool call errored</tool_use_error>",
            True,
            None,
        ),
        ("Bash", "git push --force", "Exit code 1\n", True, 1),
        ("Bash", "git push -f", "Exit code 1\nfatal: the remote hung up", True, 1),
        "next turn",
        ("Bash", "git push", "Exit code 128\nfatal: no upstream", True, 128),
        ("Edit", "x", "<tool_use_error>String to replace not found</tool_use_error>", True, None),
    )
    assert [(f.command, f.cls) for f in found] == [
        ("git push", "real"),
        ("pytest", "test"),
        ("grep", "benign"),
        ("which", "benign"),
        ("grep", "real"),
        ("git commit", "hook"),
        ("rm", "rejected"),
        ("npm test", "cascade"),
        ("git push", "cascade"),  # the same head failed earlier in this turn, nothing said
        ("git push", "real"),  # failed again in this turn, with an error of its own
        ("git push", "real"),  # a new turn
        ("Edit", "real"),
    ]


@pytest.mark.parametrize(
    ("phrases", "cls"), [(extract_module._REJECTED, "rejected"), (extract_module._POLICY, "hook")]
)
def test_every_phrase_of_a_class_is_found(phrases: tuple[str, ...], cls: str) -> None:
    """Each phrase, in any case, classes a failure: none is lost behind the words a family's
    phrases are first looked for by."""
    for phrase in phrases:
        text = f"Exit code 1\nError: {phrase.upper()} (see log)"
        line = first_error_line(text)
        assert classify("make", "make", text, line, 1, repeated=False) == cls, phrase


def test_a_failure_is_resolved_by_a_later_success_of_its_head_only() -> None:
    found = failures_of(
        "ship it",
        ("Bash", "git push", "Exit code 128\nfatal: no upstream", True, 128),
        ("Bash", "git status", "On branch x", False, 0),
        ("Bash", "cd /app && git push -u origin x", "done", False, 0),
        ("Bash", "helm upgrade", "Exit code 1\nError: UPGRADE FAILED", True, 1),
    )
    assert [(f.command, f.resolved) for f in found] == [("git push", True), ("helm upgrade", False)]


def test_a_result_whose_call_came_in_an_earlier_read_is_named_by_its_tool() -> None:
    messages = [Message("tool", "boom", tool_call_id="gone", tool_name="Bash", failed=True)]
    (failure,) = extract(messages, 40).failures
    assert (failure.seq, failure.command, failure.signature) == (40, "Bash", "Bash | Bash | boom")


def test_a_secret_in_a_failing_output_is_redacted_before_normalising() -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    found = failures_of(("Bash", "gh auth", f"Exit code 1\nerror: bad token {secret}", True, 1))
    assert secret not in repr(found)
    assert "[REDACTED:" in found[0].error


def test_timestamps_are_utc_and_the_branch_comes_from_the_message() -> None:
    git = context(branch="topic-77", how="recorded")
    messages = [
        Message("assistant", "", (ToolCall("Bash", bash("git pull"), "p"),)),
        Message(
            "tool",
            "Exit code 1\nfatal: couldn't find remote ref topic-77",
            tool_call_id="p",
            timestamp="2026-02-12T23:30:00+02:00",
            git=git,
            failed=True,
        ),
    ]
    (failure,) = extract(messages, 0).failures
    assert failure.ts == "2026-02-12T21:30:00+00:00"
    assert failure.error == "fatal: couldn't find remote ref <branch>"


@given(
    st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)),
    st.sampled_from(["Z", ".0Z", ".000Z", ".123456Z", "+00:00", "-07:30", ""]),
)
def test_a_utc_stamp_is_read_as_any_other(moment: datetime, zone: str) -> None:
    """Claude Code's `...Z` stamps are cut, not parsed: the same text as parsing gives."""
    stamp = moment.isoformat(timespec="seconds") + zone
    parsed = datetime.fromisoformat(
        stamp.removesuffix("Z") + ("+00:00" if zone[-1:] == "Z" else "")
    )
    expected = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    assert utc_iso(stamp) == expected.isoformat(timespec="seconds")


def test_the_store_keeps_one_row_per_message_and_forgets_a_replaced_tail(tmp_path: Path) -> None:
    """A replaced file's messages take the indexes of the held ones it replaces."""
    found = extract(
        session(
            "go",
            ("Bash", "go build", "Exit code 2\n./a.go:3: undefined: x", True, 2),
            ("Bash", "go vet", "Exit code 2\n./b.go:5: unreachable code", True, 2),
        ),
        10,
    )
    facts = store.SessionFacts("jsonl:s", "jsonl", "default", None, "2026-01-01T00:00:00+00:00")
    with StateDB(tmp_path / "state.db") as db, db.transaction() as conn:
        read = store.ReadRecord(facts, found.runs, found.failures)
        store.record_reads(conn, [read])
        store.record_reads(conn, [read])  # read twice: one row each
        assert [f.seq for f in store.window_failures(conn, "jsonl:s", 0, 99)] == [12, 14]
        store.forget_from(conn, "jsonl:s", 13)
        assert store.window_failures(conn, "jsonl:s", 0, 99) == found.failures[:1]
        runs = conn.execute("SELECT command, failed FROM effect_runs ORDER BY command")
        assert [tuple(row) for row in runs] == [("go build", 2), ("go vet", 2)]


def test_runs_are_counted_by_command_head() -> None:
    """What the store keeps of a read's runs: per head, how many succeeded and failed, the
    earliest time, the last success and the first run."""
    runs = [
        ToolRun(4, "2026-01-01T00:00:04+00:00", "Bash", "git push", False),
        ToolRun(6, None, "Bash", "git push", True),
        ToolRun(2, "2026-01-01T00:00:02+00:00", "Bash", "git status", True),
        ToolRun(8, "2026-01-01T00:00:01+00:00", "Bash", "git push", True),
    ]
    assert tally(runs) == {
        "git push": HeadRuns(2, 1, "2026-01-01T00:00:01+00:00", 8, 4),
        "git status": HeadRuns(1, 0, "2026-01-01T00:00:02+00:00", 2, 2),
    }
    # Two reads of one session: their counts combine into what one read of all gives.
    early, late = tally(runs[:2])["git push"], tally(runs[2:])["git push"]
    assert combined(early, late) == combined(late, early) == tally(runs)["git push"]
    found = extract(
        session(
            "go",
            ("Bash", "git push", "Exit code 1\nfatal: no upstream", True, 1),
            ("Bash", "git push -u origin x", "done", False, None),
        ),
        0,
    )
    assert [(head, runs.ok, runs.failed) for head, runs in found.runs.items()] == [
        ("git push", 1, 1)
    ]
    assert [f.resolved for f in found.failures] == [True]


def test_a_tool_that_names_a_command_of_its_own_is_no_shell() -> None:
    """Claude Code's `Skill` and `SlashCommand` take a `command` that is no shell script: their
    runs and failures are the tool's, whatever the command says."""
    messages = [
        Message(
            "assistant",
            "",
            (
                ToolCall("Skill", json.dumps({"command": "pdf"}), "s1"),
                ToolCall("SlashCommand", json.dumps({"command": "/git push"}), "s2"),
                ToolCall("Bash", bash("git push"), "s3"),
            ),
        ),
        Message("tool", "Launching skill: pdf", tool_call_id="s1", failed=False),
        Message("tool", "Unknown command: /git", tool_call_id="s2", failed=True),
        Message("tool", "Everything up-to-date", tool_call_id="s3", failed=False),
    ]
    found = extract(messages, 0)
    assert sorted(found.runs) == ["Skill", "SlashCommand", "git push"]
    assert [(f.command, f.signature) for f in found.failures] == [
        ("SlashCommand", "SlashCommand | SlashCommand | Unknown command: /git")
    ]


def test_a_codex_command_left_running_is_reported_by_the_poll_that_ends_it() -> None:
    running = (
        "Chunk ID: a\nWall time: 1.0 seconds\nProcess running with session ID 48230\nOutput:\n"
    )
    ended = "Chunk ID: b\nProcess exited with code 2\nOutput:\nrg: src: No such file"
    messages = [
        Message("assistant", "", (ToolCall("exec_command", bash("rg -n x src"), "e1"),)),
        Message("tool", running, tool_call_id="e1", tool_name="exec_command"),
        Message(
            "assistant", "", (ToolCall("write_stdin", '{"session_id":48230,"chars":""}', "w1"),)
        ),
        Message(
            "tool", ended, tool_call_id="w1", tool_name="write_stdin", failed=True, exit_code=2
        ),
    ]
    found = extract(messages, 0)
    assert found.runs == {"rg": HeadRuns(ok=0, failed=1, first_ts=None, last_ok=None, first_seq=3)}
    assert [(f.seq, f.signature) for f in found.failures] == [
        (3, "exec_command | rg | rg: src: No such file")
    ]
