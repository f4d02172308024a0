"""What the effect measure reads as a failure, and how it signs it, on lines shaped like the
real ones of issue 40 (Claude Code 2.0.x and 2.1, Codex rollouts): each reader's per-version
quirks, the class, the chain's failing part, the error line (DESIGN.md §13 "Failures")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from skilld.effect.extract import Failure, extract
from skilld.effect.signature import (
    _part_head,
    command_head,
    first_error_line,
    normalise_error,
)
from skilld.transcripts.claude_code import ClaudeCodeSource
from skilld.transcripts.codex import CodexSource
from skilld.transcripts.jsonl import JsonlSource
from skilld.transcripts.model import Message, ToolCall
from tests.conftest import Workspace
from tests.test_failures import bash, codex_call, codex_output, failures_of, session
from tests.test_sources import (
    CODEX_ID,
    assistant,
    claude,
    codex,
    only_read,
    text_message,
    write_lines,
)

# -- Claude Code, by version -----------------------------------------------------------------


def call(message_id: str, call_id: str, tool: str, arguments: dict[str, Any], **fields: Any):
    block = {"type": "tool_use", "id": call_id, "name": tool, "input": arguments}
    return assistant(message_id, block, **fields)


def result(call_id: str, content: str, *, error: bool = True, **fields: Any) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if error:
        block["is_error"] = True
    return claude("user", {"role": "user", "content": [block]}, **fields)


def claude_failures(tmp_path: Path, lines: list[dict[str, Any]], **options: Any) -> list[Failure]:
    write_lines(tmp_path / "-home-dev-shop" / "s1.jsonl", lines)
    read = only_read(ClaudeCodeSource(tmp_path, **options).scan({}))
    return extract(read.messages, 0, cwd=read.cwd).failures


YARN_MISSING = 'error Command "test:web" not found.\ninfo Visit https://yarnpkg.com for help.'


def test_a_claude_code_2_0_bash_failure_without_a_banner_is_real(tmp_path: Path) -> None:
    """2.0.x writes no `Exit code N`: its failed `Bash` results are read by their text. 2.1
    writes one on every command that ran: without it, the command never ran."""
    old, new = {"version": "2.0.31"}, {"version": "2.1.12"}
    found = claude_failures(
        tmp_path,
        [
            claude("user", {"role": "user", "content": "test the web app"}, **old),
            call("m1", "t1", "Bash", {"command": "yarn test:web"}, **old),
            result("t1", YARN_MISSING, **old),
            call("m2", "t2", "Bash", {"command": "git commit -m x"}, **old),
            result("t2", "PreToolUse:Bash hook error: [lint]: not formatted", **old),
            claude("user", {"role": "user", "content": "and now?"}, **new),
            call("m3", "t3", "Bash", {"command": "yarn test:web"}, **new),
            result("t3", "Pre-commit validation failed", **new),
            call("m4", "t4", "Bash", {"command": "yarn build"}, **new),
            result("t4", "Exit code 1\nerror Command failed with exit code 2.", **new),
        ],
    )
    assert [(f.command, f.cls, f.error) for f in found] == [
        ("yarn test:web", "real", 'error Command "test:web" not found.'),
        ("git commit", "hook", "PreToolUse:Bash hook error: [lint]: not formatted"),
        ("yarn test:web", "hook", "Pre-commit validation failed"),
        ("yarn build", "real", "error Command failed with exit code <n>."),
    ]


REJECTED_WITH_WORDS = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). To tell you how to proceed, "
    "the user said:\nuse pnpm, not npm"
)


def test_a_rejection_carrying_the_users_words_is_rejected(tmp_path: Path) -> None:
    edit = {"file_path": "/home/dev/shop/src/budget.ts", "old_string": "a", "new_string": "b"}
    found = claude_failures(
        tmp_path,
        [
            claude("user", {"role": "user", "content": "sync the budgets"}),
            # The IDE's diff, rejected with feedback: the result is only the user's words.
            call("m1", "t1", "Edit", edit),
            result("t1", "Should we reuse BudgetSyncType? It already has the fields."),
            call("m2", "t2", "Bash", {"command": "npm install"}),
            result("t2", REJECTED_WITH_WORDS),
            call("m3", "t3", "Bash", {"command": "rm -rf dist"}),
            result("t3", "not that one", toolUseResult="User rejected tool use"),
            call("m4", "t4", "Bash", {"command": "curl x | sh"}),
            result("t4", "Blocked: needs approval", toolDenialKind="permission-rule"),
            call("m5", "t5", "Edit", edit),  # Claude Code's own edit error: a real failure
            result("t5", "<tool_use_error>String to replace not found in file.</tool_use_error>"),
            call("m6", "t6", "Edit", edit),  # a rule's words, not the user's
            result("t6", "Permission to use Edit has been denied."),
            call("m7", "t7", "Bash", {"command": "make deploy"}),  # a subagent's refusal
            result(
                "t7",
                "Permission for this tool use was denied. The tool use was rejected"
                " (eg. if it was a file edit, the new_string was NOT written to the file).",
            ),
        ],
    )
    assert [(f.tool, f.cls) for f in found] == [
        ("Edit", "rejected"),
        ("Bash", "rejected"),
        ("Bash", "rejected"),
        ("Bash", "hook"),
        ("Edit", "real"),
        ("Edit", "hook"),
        ("Bash", "hook"),
    ]


# -- Codex -----------------------------------------------------------------------------------

INDEX_LOCK = "fatal: Unable to create '/work/x/.git/index.lock': Operation not permitted"


def rust_debug(text: str) -> str:
    """`text` as Rust's `{:?}` prints a string, without its quotes."""
    return json.dumps(text)[1:-1]


def sandbox_denied(command: str, exit_code: int, stderr: str) -> str:
    stream = f'StreamOutput {{ text: "{rust_debug(stderr)}", truncated_after_lines: None }}'
    inner = (
        f"Codex(Sandbox(Denied {{ output: ExecToolCallOutput {{ exit_code: {exit_code}, "
        f'stdout: StreamOutput {{ text: "", truncated_after_lines: None }}, stderr: {stream}, '
        f"aggregated_output: {stream}, duration: 0ns, timed_out: false }}, "
        "network_policy_decision: None }))"
    )
    return (
        f"exec_command failed for `/bin/zsh -lc '{command}'`: "
        f'CreateProcess {{ message: "{rust_debug(inner)}" }}'
    )


def codex_rejected(reason: str) -> str:
    inner = f'Rejected("{rust_debug(reason)}")'
    return f'exec_command failed: CreateProcess {{ message: "{rust_debug(inner)}" }}'


def test_codex_calls_it_could_not_run_are_failures(tmp_path: Path) -> None:
    write_lines(
        tmp_path / f"rollout-2026-03-30T15-49-39-{CODEX_ID}.jsonl",
        [
            codex("session_meta", {"id": CODEX_ID, "cwd": "/work/x"}),
            text_message("user", "commit it"),
            codex_call("a", "exec_command", {"cmd": "git add -A && git commit -m x"}),
            codex_output("a", sandbox_denied("git add -A && git commit -m x", 128, INDEX_LOCK)),
            codex_call("b", "exec_command", {"cmd": "rm -rf build"}),
            codex_output(
                "b",
                codex_rejected(
                    "`/bin/zsh -lc 'rm -rf build'` rejected: rm -f style commands are"
                    " not permitted. Use a safer approach"
                ),
            ),
            codex_call("c", "exec_command", {"cmd": "ls ~"}),
            codex_output("c", codex_rejected("rejected by user")),
            codex_call("d", "exec_command", {"cmd": "make"}),
            codex_output(
                "d",
                "exec_command failed: CreateProcess { message: "
                '"CreateRestrictedToken failed: 87" }',
            ),
        ],
    )
    read = only_read(CodexSource(tmp_path).scan({}))
    assert [(m.failed, m.exit_code) for m in read.messages if m.role == "tool"] == [
        (True, 128),
        (True, None),
        (True, None),
        (True, None),
    ]
    found = extract(read.messages, 0, cwd=read.cwd).failures
    assert [(f.command, f.cls, f.exit_code) for f in found] == [
        ("git commit", "hook", 128),  # a sandbox is a policy
        ("rm", "hook", None),
        ("ls", "rejected", None),
        ("make", "real", None),
    ]
    assert [f.error for f in found] == [
        "fatal: Unable to create '<cwd><path>': Operation not permitted",
        "rejected: rm -f style commands are not permitted. Use a safer approach",
        "rejected by user",
        'exec_command failed: CreateProcess { message: "CreateRestrictedToken failed: <n>" }',
    ]


# -- the chain's failing part ----------------------------------------------------------------

PUSH_REJECTED = (
    "Exit code 1\n[main 1a2b3c4] wip\n 2 files changed, 3 insertions(+)\n"
    "To github.com:acme/shop.git\n ! [rejected]        main -> main (fetch first)\n"
    "error: failed to push some refs to 'github.com:acme/shop.git'\n"
    "hint: Updates were rejected because the remote contains work that you do\n"
)
SUDO_TERMINAL = (
    "Exit code 1\nsudo: a terminal is required to read the password; either use the -S option"
    " to read from standard input or configure an askpass helper\nsudo: a password is required"
)


@pytest.mark.parametrize(
    ("command", "output", "head"),
    [
        ("git add -A && git commit -m wip && git push", PUSH_REJECTED, "git push"),
        ("cd app && npm ci && npm run build", 'added 3\nnpm ERR! Missing script: "x"', "npm run"),
        ("make a && make b; ls", "Exit code 1\nsomething unexpected", "ls"),  # the last part
        ("cargo build 2>&1 | tail -3", "Exit code 1\nboom", "cargo build"),  # not the filter
        ("ls out && cat out/log", "cat: out/log: No such file or directory", "cat"),
        ("mix format && mix precommit", "Exit code 1\n** (Mix) Compile failed", "mix precommit"),
        ("sudo ip link set eth0 up", SUDO_TERMINAL, "sudo"),
        ("lsblk && sudo lsblk -f", SUDO_TERMINAL, "sudo"),
        ("cd /mnt && sudo mkdir -p data", SUDO_TERMINAL, "sudo"),
    ],
)  # fmt: skip
def test_a_chain_is_signed_by_the_part_that_failed(command: str, output: str, head: str) -> None:
    assert command_head("Bash", bash(command), output) == head


def test_a_sudo_failure_is_one_failure_whatever_it_ran() -> None:
    """One signature, resolved by a later call that ran sudo (a run of `sudo` as well as of
    its command)."""
    commands = ("sudo ip link set eth0 up", "sudo lsblk -f", "FOO=1 sudo mkdir -p /data")
    found = extract(
        [
            *session("set up the disk", *[("Bash", c, SUDO_TERMINAL, True, 1) for c in commands]),
            *session(("Bash", "echo sudo is needed", "sudo is needed", False, 0)),
        ],
        0,
    )
    assert {f.signature for f in found.failures} == {
        "Bash | sudo | sudo: a terminal is required to read the password; either use the -S"
        " option to read from standard input or configure an askpass helper"
    }
    assert not any(f.resolved for f in found.failures)  # `echo sudo` ran no sudo
    later = extract(
        [
            *session("set up the disk", *[("Bash", c, SUDO_TERMINAL, True, 1) for c in commands]),
            *session(("Bash", "sudo -S lsblk -f", "NAME FSTYPE", False, 0)),
        ],
        0,
    )
    assert [f.resolved for f in later.failures] == [True, True, True]
    assert (later.runs["sudo"].ok, later.runs["sudo"].failed) == (1, 3)


@pytest.mark.parametrize(
    ("command", "head"),
    [
        ("sudo -u deploy make install", "make"),  # a target is no sub-command
        ("nice -n 10 make", "make"),
        ("timeout -s KILL 30 cargo build", "cargo build"),
        ("env -u X FOO=1 nohup time npm run build", "npm run"),
        ("find . -name '*.py' | xargs -n 1 ruff check", "ruff check"),
    ],
)
def test_a_wrapper_is_seen_through(command: str, head: str) -> None:
    assert command_head("Bash", bash(command)) == head


_COMMANDS = ["git push", "make", "cargo build -q", "npm run build", "ls -la", "pytest -x"]
_WRAPPED = st.sampled_from(
    ["sudo", "sudo -u deploy", "sudo -E", "env", "env -u A B=1", "nohup", "time", "time -f %e",
     "timeout 30", "timeout -s KILL 5m", "nice", "nice -n 10", "xargs", "xargs -n 1 -P 4",
     "command", "exec", "FOO=1 sudo"]
)  # fmt: skip


@given(st.lists(_WRAPPED, min_size=1, max_size=2), st.sampled_from(_COMMANDS))
@example(["sudo -u deploy"], "git push")
@example(["timeout -s KILL 5m", "nice -n 10"], "make")
def test_wrappers_and_their_options_are_seen_through(wrappers: list[str], command: str) -> None:
    """Wrappers, with options that take a value or not: the command's head (within the
    words a head is read from)."""
    assert _part_head(" ".join([*wrappers, command])) == _part_head(command)


@given(
    st.lists(st.sampled_from(_COMMANDS), min_size=2, max_size=4, unique=True),
    st.sampled_from([" && ", "; ", " || "]),
    st.integers(min_value=0, max_value=3),
)
def test_the_part_an_error_line_names_is_the_head(
    commands: list[str], separator: str, failing: int
) -> None:
    """An error line opening with one part's program names that part; with no evidence the
    head is the last part (the reference: the chain's heads, in order)."""
    script = separator.join(commands)
    heads = [command_head("Bash", bash(command)) for command in commands]
    named = heads[failing % len(heads)]
    program = named.split(" ", 1)[0]
    if sum(head.split(" ", 1)[0] == program for head in heads) == 1:
        error = f"Exit code 1\nok\n{program}: it broke"
        assert command_head("Bash", bash(script), error) == named
    assert command_head("Bash", bash(script), "Exit code 1\nit broke") == heads[-1]


# -- the error line --------------------------------------------------------------------------


def error_of(text: str) -> str:
    return normalise_error(first_error_line(text), "/home/dev/shop")


def test_noise_ansi_codes_and_escaped_breaks_do_not_split_a_failure() -> None:
    same = [
        'Exit code 1\nerror: could not compile `shop` (bin "shop") due to 2 previous errors',
        'Exit code 1\n\x1b[1m\x1b[31merror\x1b[0m: could not compile `shop` (bin "shop")'
        " due to 2 previous errors",
        'Exit code 1\n[1m[31merror[0m: could not compile `shop` (bin "shop") due to 2 previous'
        " errors",
        'Exit code 1\n   Compiling shop v0.1.0\\nerror: could not compile `shop` (bin "shop")'
        " due to 2 previous errors\\r\\n",
    ]
    assert {error_of(text) for text in same} == {
        'error: could not compile `shop` (bin "shop") due to <n> previous errors'
    }
    assert error_of("Checking 12 source files …\nsrc/a.py:3: bad indentation") == (
        "<path>:<n>: bad indentation"
    )
    assert error_of("=== lean ===\nFoo.lean:3:2: unknown identifier 'x'") == (
        "Foo.lean:<n>:<n>: unknown identifier 'x'"
    )
    assert error_of("total 48\n-rw-r--r-- 1 dev dev 3 a.txt\nls: b: No such file") == (
        "ls: b: No such file"
    )
    assert error_of("Pre-commit failed:\\n\\n[FORMAT] not formatted") == "Pre-commit failed:"


def test_an_error_past_the_cut_is_read(tmp_path: Path) -> None:
    """A long output is cut to `tool_result_max_chars`; its end is kept for the error line."""
    progress = "".join(f"Compiling module {n} of 400 ...\n" for n in range(400))
    found = claude_failures(
        tmp_path,
        [
            claude("user", {"role": "user", "content": "check"}),
            call("m1", "t1", "Bash", {"command": "mix precommit"}),
            result("t1", f"Exit code 1\n{progress}** (Mix) Compilation failed due to warnings"),
        ],
        tool_result_max_chars=2000,
    )
    assert [(f.command, f.error) for f in found] == [
        ("mix precommit", "** (Mix) Compilation failed due to warnings")
    ]
    openai_call = {"id": "j1", "type": "function", "function": {"name": "bash"}}
    openai_call["function"]["arguments"] = json.dumps({"cmd": "mix precommit"})
    write_lines(
        tmp_path / "jsonl" / "s.jsonl",
        [
            {"role": "user", "content": "check"},
            {"role": "assistant", "content": "", "tool_calls": [openai_call]},
            {"role": "tool", "tool_call_id": "j1", "error": True,
             "content": f"{progress}** (Mix) Compilation failed due to warnings"},
        ],
    )  # fmt: skip
    read = only_read(JsonlSource(tmp_path / "jsonl", tool_result_max_chars=2000).scan({}))
    assert [f.error for f in extract(read.messages, 0).failures] == [
        "** (Mix) Compilation failed due to warnings"
    ]


# -- replays, masked exits, cascades ---------------------------------------------------------


def test_a_replayed_history_counts_each_call_once(tmp_path: Path) -> None:
    turn = [
        call("m1", "t1", "Bash", {"command": "git push"}),
        result("t1", "Exit code 128\nfatal: The current branch x has no upstream branch."),
    ]
    found = claude_failures(
        tmp_path, [claude("user", {"role": "user", "content": "push"}), *turn, *turn]
    )
    assert [(f.seq, f.command) for f in found] == [(2, "git push")]
    # Control: an agent that numbers its calls per turn reuses an id for another call.
    messages = [
        Message("assistant", "", (ToolCall("bash", bash("go build"), "call_0"),)),
        Message("tool", "./a.go:3: undefined: x", tool_call_id="call_0", failed=True),
        Message("user", "again"),
        Message("assistant", "", (ToolCall("bash", bash("go vet"), "call_0"),)),
        Message("tool", "./b.go:5: unreachable code", tool_call_id="call_0", failed=True),
    ]
    assert [f.command for f in extract(messages, 0).failures] == ["go build", "go vet"]


def test_a_hidden_exit_status_with_an_error_in_the_output_is_masked() -> None:
    found = failures_of(
        "build it",
        ("Bash", "npm run build 2>&1 | tail -20", "> shop@1 build\nError: Cannot find module 'x'",
         False, 0),
        ("Bash", "git push || echo done", "fatal: The current branch x has no upstream.\ndone",
         False, 0),
        ("Bash", "python3 sync.py | head", "Traceback (most recent call last):\n  File \"sync.py\","
         " line 3\nKeyError: 'id'", False, 0),
        ("Bash", "pytest -q 2>&1 | tail -3", "E   AssertionError\nError: 1 failed", False, 0),
        # Controls: text shown, not run; no error line; no mask.
        ("Bash", "cat build.log | tail", "error: x", False, 0),
        ("Bash", "grep -rn 'error:' src | head", "src/a.py:1:error: x", False, 0),
        ("Bash", "git log --oneline | head -3", "error: fix the thing", False, 0),
        ("Bash", "npm run build | tail -3", "built in 2s", False, 0),
        ("Bash", "npm run lint", "Error: 3 problems", False, 0),
    )  # fmt: skip
    assert [(f.command, f.cls, f.error) for f in found] == [
        ("npm run", "masked", "Error: Cannot find module 'x'"),
        ("git push", "masked", "fatal: The current branch <branch> has no upstream."),
        ("python3", "masked", "KeyError: 'id'"),
        ("pytest", "test", "Error: <n> failed"),
    ]


def test_a_command_that_fails_again_with_its_own_error_is_no_cascade() -> None:
    warnings = (
        'Exit code 1\nwarning: variable "x" is unused\n  lib/shop.ex:3\n'
        "** (Mix) Compilation failed due to warnings while using the --warnings-as-errors option"
    )
    unformatted = "Exit code 1\n** (Mix) mix format failed due to --check-formatted."
    found = failures_of(
        "run the checks",
        ("Bash", "mix precommit", warnings, True, 1),
        ("Bash", "mix precommit", warnings, True, 1),  # the same failure again: a burst
        ("Bash", "mix precommit", unformatted, True, 1),  # after a fix, a new error: real
        ("Bash", "mix precommit", "Exit code 1\n", True, 1),  # nothing of its own: a burst
    )
    assert [f.cls for f in found] == ["real", "cascade", "real", "cascade"]


# -- what the corpus showed (bench/corpus): each shape as the real sessions wrote it ---------


def test_claude_code_1_0_edit_errors_are_the_agents_not_the_users_words(tmp_path: Path) -> None:
    """1.0.x writes the edit tools' own errors without the `<tool_use_error>` tag."""
    edit = {"file_path": "/home/dev/shop/src/a.c", "old_string": "return 0;", "new_string": "x"}
    old = {"version": "1.0.53"}
    found = claude_failures(
        tmp_path,
        [
            claude("user", {"role": "user", "content": "fix it"}, **old),
            call("m1", "t1", "Write", {"file_path": "/home/dev/shop/a.c", "content": "x"}, **old),
            result("t1", "File has not been read yet. Read it first before writing to it.", **old),
            call("m2", "t2", "Edit", edit, **old),
            result(
                "t2",
                "Found 4 matches of the string to replace, but replace_all is false. To replace"
                " all occurrences, set replace_all to true.",
                **old,
            ),
            call("m3", "t3", "MultiEdit", {"file_path": "/home/dev/shop/a.c", "edits": []}, **old),
            result(
                "t3", "No changes to make: old_string and new_string are exactly the same.", **old
            ),
            call("m4", "t4", "Edit", edit, **old),  # control: the user's words
            result("t4", "Found it, but keep the old name please", **old),
        ],
    )
    assert [(f.tool, f.cls) for f in found] == [
        ("Write", "real"),
        ("Edit", "real"),
        ("MultiEdit", "real"),
        ("Edit", "rejected"),
    ]


def test_a_codex_poll_that_failed_itself_is_signed_by_the_poll(tmp_path: Path) -> None:
    closed = (
        "write_stdin failed: stdin is closed for this session; rerun exec_command with tty=true"
    )
    write_lines(
        tmp_path / f"rollout-2026-02-26T15-33-38-{CODEX_ID}.jsonl",
        [
            codex("session_meta", {"id": CODEX_ID, "cwd": "/work/x"}),
            text_message("user", "search"),
            codex_call("a", "exec_command", {"cmd": "rg -n todo"}),
            codex_output("a", "Process running with session ID 18481\nOutput:\n"),
            codex_call("b", "write_stdin", {"session_id": 18481, "chars": "\u0003"}),
            codex_output("b", closed),
            text_message("user", "again"),
            codex_call("c", "exec_command", {"cmd": "git status"}),
            codex_output("c", "Process running with session ID 10385\nOutput:\n"),
            codex_call("d", "write_stdin", {"session_id": 10385, "chars": "q"}),
            codex_output("d", closed),
        ],
    )
    read = only_read(CodexSource(tmp_path).scan({}))
    found = extract(read.messages, 0, cwd=read.cwd).failures
    assert {f.signature for f in found} == {f"write_stdin | write_stdin | {closed}"}
    assert len(found) == 2


@pytest.mark.parametrize(
    ("command", "output", "head"),
    [
        ("cd build && make -j4", "/bin/bash: line 1: cd: build: No such file or directory", "cd"),
        ("cd bench && python3 run.py", "/bin/bash: line 1: cd: bench: No such file or directory",
         "cd"),
        ("nvcc --version && make", "/bin/bash: line 1: nvcc: command not found", "nvcc"),
        ("echo 'int main(){}' > t.c && gcc -I include t.c -o t && ./t",
         "t.c:2:10: fatal error: vsla/vsla.h: No such file or directory", "gcc"),
        ("printf 'x' > t.c && clang-17 t.c && ./a.out", "t.c:1:1: error: expected ';'", "clang-17"),
        ("make vsla_static", "src/a.c:3:5: error: incomplete type", "make"),
    ],
)  # fmt: skip
def test_the_part_the_shell_or_a_compiler_names_is_the_head(
    command: str, output: str, head: str
) -> None:
    assert command_head("Bash", bash(command), output) == head


def test_a_long_command_keeps_its_end_where_its_reader_cut_it(tmp_path: Path) -> None:
    """Arguments are kept to 500 characters: a command is cut inside its longest quoted word,
    or in its middle, so the part after a long `echo '<a file>' > x.c` is still read."""
    source = "#include <stdio.h>\n" + "int f(void) { return 1; }\n" * 120
    for command in (
        f"echo '{source}' > t.c && gcc t.c -o t && ./t",
        f"export PATH=/usr/local/cuda/bin:$PATH && echo '{source}' > t.c && "
        + "gcc -I include t.c build/libvsla.a -lm -lpthread -lcudart -o t && ./t",
    ):
        found = claude_failures(
            tmp_path,
            [
                claude("user", {"role": "user", "content": "compile"}),
                call("m1", "t1", "Bash", {"command": command, "description": "Compile"}),
                result("t1", "t.c:7:9: error: stray ‘\\’ in program"),
            ],
        )
        assert [f.command for f in found] == ["gcc"], command[-120:]


@pytest.mark.parametrize(
    ("output", "error"),
    [
        ("src/a.c:3: warning: unused\nsrc/b.c:9:6: error: conflicting types for ‘f’; have"
         " ‘int(void)’ {aka ‘int(struct s *)’}\nmake[2]: *** [b.o] Error 1\n"
         "make: *** [Makefile:9: all] Error 2",
         "<path>:<n>:<n>: error: conflicting types for ‘<name>’; have ‘<name>’"),
        ('$ next build\nFailed to compile.\n./a.tsx:50:26\nType error: Type \'string\' is not'
         ' assignable to type \'number\'.\nerror: script "build" exited with code 1',
         "Type error: Type 'string' is not assignable to type 'number'."),
        ("To https://github.com/a/b.git\n ! [rejected]        main -> main (stale info)\n"
         "error: failed to push some refs to 'https://github.com/a/b.git'",
         "! [rejected] main -> main (stale info)"),
        ("! LaTeX Error: \\begin{aligned} allowed only in math mode.",
         "! LaTeX Error: \\begin{aligned} allowed only in math mode."),
        ("rewrites. Hit Ctrl-C to abort\nusage: git filter-branch [--setup <command>]",
         "usage: git filter-branch [--setup <command>]"),
        ("File does not exist. Note: your current working directory is /home/dev/shop.",
         "File does not exist."),
    ],
)  # fmt: skip
def test_the_error_line_is_the_one_that_says_what_went_wrong(output: str, error: str) -> None:
    """A summary (`make: *** [all] Error 2`) yields to the error it sums up; GCC's quoted names
    and a tool's trailing note are what differs between two sessions of one failure."""
    assert error_of(output) == error


def test_an_error_among_the_warnings_a_cut_dropped_is_read(tmp_path: Path) -> None:
    warnings = "".join(f"src/w{n}.c:1:1: warning: unused variable ‘x’\n" for n in range(200))
    earlier = warnings[: warnings.index("src/w150.c")]
    found = claude_failures(
        tmp_path,
        [
            claude("user", {"role": "user", "content": "build"}),
            call("m1", "t1", "Bash", {"command": "make -j8"}),
            result(
                "t1",
                f"Exit code 2\n{earlier}src/t.c:172:6: error: conflicting types for"
                f" ‘vsla_free’\n{warnings}make: *** [Makefile:9: all] Error 2",
            ),
        ],
        tool_result_max_chars=2000,
    )
    assert [f.error for f in found] == ["<path>:<n>:<n>: error: conflicting types for ‘<name>’"]


def test_more_hidden_exit_statuses_are_masked() -> None:
    found = failures_of(
        "build it",
        ("Bash", 'cargo check 2>&1 | grep -A5 "error"', "error[E0308]: mismatched types", False,
         0),
        ("Bash", "gcc-12 --version | head -1", "/bin/bash: line 1: gcc-12: command not found",
         False, 0),
        ("Bash", "make -j4 2>&1 | tail -30", "x.c:9:5: note: here\nmake: *** [all] Error 2",
         False, 0),
        ("Bash", 'pdflatex p.tex > log 2>&1 && echo "Built" || echo "Compilation failed"',
         "Compilation failed", False, 0),
        # Controls: a fallback that says nothing failed; an echo that did not print.
        ("Bash", 'which gcc-12 || echo "not here"', "not here", False, 0),
        ("Bash", 'pdflatex p.tex > log && echo "Built" || echo "Compilation failed"', "Built",
         False, 0),
    )  # fmt: skip
    assert [(f.command, f.cls) for f in found] == [
        ("cargo check", "masked"),
        ("gcc-12", "masked"),
        ("make", "masked"),
        ("pdflatex p.tex", "masked"),
    ]


def test_a_lookup_that_failed_without_a_word_is_benign(tmp_path: Path) -> None:
    """Claude Code writes `Error` for a command that exited non-zero and printed nothing."""
    old = {"version": "2.0.31"}
    found = claude_failures(
        tmp_path,
        [
            claude("user", {"role": "user", "content": "is it running?"}, **old),
            call("m1", "t1", "Bash", {"command": "lsof -ti:3000"}, **old),
            result("t1", "Error", **old),
            call("m2", "t2", "Bash", {"command": 'dpkg -L wifi | grep -E "bin/"'}, **old),
            result("t2", "Error", **old),
            call("m3", "t3", "Bash", {"command": "npm run build"}, **old),  # control
            result("t3", "Error", **old),
        ],
    )
    assert [(f.command, f.cls) for f in found] == [
        ("lsof", "benign"),
        ("dpkg wifi", "benign"),
        ("npm run", "real"),
    ]


def test_the_same_refusal_again_in_a_turn_is_a_cascade_and_a_runner_not_found_no_test() -> None:
    hook = "PreToolUse:Bash hook error: BLOCKED: Dangerous rm command detected and prevented"
    found = failures_of(
        "clean up",
        ("Bash", "rm -r build/CMakeFiles && echo done", hook, True, None),
        ("Bash", "rm -rf build/CMakeFiles", hook, True, None),
        ("Bash", "pnpm test", "/usr/local/bin/bash: line 1: pnpm: command not found", True, 127),
        ("Bash", "make test", "FAIL: test_a (1 of 9)", True, 2),
    )
    assert [(f.command, f.cls) for f in found] == [
        ("rm", "hook"),
        ("rm", "cascade"),
        ("pnpm test", "real"),
        ("make", "test"),
    ]


# -- through the CLI -------------------------------------------------------------------------


def test_skilld_failures_reads_each_agents_failures(workspace: Workspace) -> None:
    claude_dir, codex_dir = workspace.root / "claude", workspace.root / "codex"
    old = {"version": "2.0.31"}
    turn = [
        call("m1", "t1", "Bash", {"command": "yarn test:web"}, **old),
        result("t1", YARN_MISSING, **old),
    ]
    write_lines(
        claude_dir / "-home-dev-shop" / "s1.jsonl",
        [
            claude("user", {"role": "user", "content": "test it"}, **old),
            *turn,
            *turn,  # replayed
            call("m2", "t2", "Edit", {"file_path": "/a.ts", "old_string": "a", "new_string": "b"}),
            result("t2", "Should we reuse BudgetSyncType?"),
            call("m3", "t3", "Bash", {"command": "npm run build 2>&1 | tail -5"}, **old),
            result("t3", "Error: Cannot find module 'vite'", error=False, **old),
        ],
    )
    write_lines(
        codex_dir / f"rollout-2026-03-30T15-49-39-{CODEX_ID}.jsonl",
        [
            codex("session_meta", {"id": CODEX_ID, "cwd": "/work/x"}),
            text_message("user", "commit it"),
            codex_call("a", "exec_command", {"cmd": "git commit -am x"}),
            codex_output("a", sandbox_denied("git commit -am x", 128, INDEX_LOCK)),
        ],
    )
    workspace.sources = [
        {"kind": "claude-code", "path": str(claude_dir)},
        {"kind": "codex", "path": str(codex_dir)},
    ]
    workspace.settings["evolve"] = {"min_messages": 1000}
    workspace.write_config()
    once = workspace.cli("once")
    assert once.returncode == 0, once.stderr
    listed = workspace.cli("failures", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = sorted(
        (row["tool"], row["command"], row["class"], row["occurrences"], row["error"])
        for row in json.loads(listed.stdout)
    )
    assert rows == [
        ("Bash", "npm run", "masked", 1, "Error: Cannot find module 'vite'"),
        ("Bash", "yarn test:web", "real", 1, 'error Command "test:web" not found.'),
        ("Edit", "Edit", "rejected", 1, "Should we reuse BudgetSyncType?"),
        ("exec_command", "git commit", "hook", 1,
         "fatal: Unable to create '<cwd><path>': Operation not permitted"),
    ]  # fmt: skip
