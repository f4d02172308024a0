"""Synthetic agent sessions for the benchmarks, written as each source writes them.

Two kinds of session, both of tool calls some of which fail:

- `shell_calls`: every call a shell command, most never seen before, with small results: the
  worst case for recording failures (each call's command head is parsed, against the cheapest
  read there is).
- `mixed_calls`: calls as real Claude Code sessions make them. The shares, sizes and failure
  rate are those of 59 real sessions committed to 14 public repositories (25,594 lines, 5,196
  tool calls; docs/benchmarks.md names them): a third of the calls are shell commands (86% of
  them distinct), one result in twelve failed, and each tool's input and result have that
  tool's mean size there.
"""

from __future__ import annotations

import json
import random
from typing import Any, NamedTuple


class Call(NamedTuple):
    tool: str
    input: dict[str, Any]
    output: str
    failed: bool


def shell_calls(index: int, salt: str) -> list[Call]:
    """Ten shell calls, outputs the size real results have (650 characters on average in the
    Claude Code sessions the issue measured); every other session fails one `git push` and runs
    it again (one call in twenty fails, as there: 47 of 976)."""
    calls = []
    for turn in range(10):
        command = (
            "git status",
            f"sed -n '1,80p' src/{salt}/module_{index}_{turn}.py",
            f"cd /w/{salt}/s{index} && pytest -q tests/test_{turn}.py",
            "git push",
        )[turn % 4]
        failed = command == "git push" and turn < 4 and index % 2 == 0
        output = f"fatal: The current branch b{index} has no upstream branch.\n" if failed else ""
        output += f"line of output /w/{salt}/src/module.py:42 hash 3f2a9c1d ok\n" * 12
        calls.append(Call("Bash", {"command": command}, output, failed))
    return calls


#: (tool, share of calls in %, mean input size, mean result size), from the real sessions.
_REAL_MIX = (
    ("Bash", 34, 344, 1315),
    ("Read", 19, 103, 6408),
    ("Edit", 17, 1129, 970),
    ("TodoWrite", 7, 794, 162),
    ("Write", 6, 5417, 976),
    ("Grep", 5, 133, 2020),
    ("MultiEdit", 2, 2833, 462),
    ("Glob", 2, 45, 1286),
    ("Task", 2, 1383, 6016),
    ("LS", 1, 66, 2654),
    ("mcp__docs__search", 5, 200, 1500),
)
_WORDS = (
    "the", "value", "config", "request", "handler", "returns", "error", "user", "session",
    "test", "build", "module", "import", "from", "self", "def", "class", "async", "await",
    "data", "path", "result", "items", "index", "check", "update", "render", "cache",
)  # fmt: skip


def _text(rng: random.Random, size: int) -> str:
    """About `size` characters of code-like lines."""
    lines, length = [], 0
    while length < size:
        line = " ".join(rng.choices(_WORDS, k=rng.randint(4, 12)))
        line = f"{rng.randint(1, 400):>5}\t    {line}({rng.randint(0, 99)})"
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


def _shell_command(rng: random.Random, index: int, turn: int, salt: str) -> str:
    return rng.choice(
        (
            "git status",
            f"git diff --stat -- src/{salt}/module_{index}.py",
            f"cd /w/{salt}/s{index} && pytest -q tests/test_{turn}.py",
            f"grep -rn 'def handler_{turn}' src/{salt} | head -20",
            f"npm run build -- --filter app{index}_{turn}",
            f"ls -la src/{salt}/pkg_{index}_{turn}",
            f"uv run ruff check src/{salt}/module_{index}_{turn}.py",
            f"git log --oneline -n {turn + 5} -- src/{salt}/module_{index}.py",
            f"python -m mypy src/{salt}/pkg_{index} 2>&1 | tail -5",
            f"git add src/{salt}/module_{index}_{turn}.py && git commit -m 'wip {index} {turn}'",
        )
    )


def mixed_calls(index: int, salt: str) -> list[Call]:
    """Twenty-five calls drawn with the real sessions' tool shares and sizes; each session
    fails one `git push` (run again with its upstream later: resolved) and one Edit."""
    rng = random.Random(f"{salt}:{index}")
    tools = rng.choices(_REAL_MIX, weights=[share for _, share, _, _ in _REAL_MIX], k=22)
    calls = []
    for turn, (tool, _, input_size, result_size) in enumerate(tools):
        if tool == "Bash":
            command = _shell_command(rng, index, turn, salt)
            description = _text(rng, max(0, input_size - len(command) - 40))[:200]
            arguments: dict[str, Any] = {"command": command, "description": description}
        else:
            path = f"/w/{salt}/s{index}/src/module_{index}_{turn}.py"
            arguments = {"file_path": path, "content": _text(rng, input_size - len(path))}
        calls.append(Call(tool, arguments, _text(rng, result_size), False))
    push = Call(
        "Bash",
        {"command": "git push", "description": "Push the branch"},
        f"fatal: The current branch b{index} has no upstream branch.\n"
        f"To push the current branch and set the remote as upstream, use\n\n"
        f"    git push --set-upstream origin b{index}\n",
        True,
    )
    edit = Call(
        "Edit",
        {"file_path": f"/w/{salt}/s{index}/src/app.py", "old_string": "x = 1", "new_string": "x"},
        "<tool_use_error>String to replace not found in file.\nString: x = 1</tool_use_error>",
        True,
    )
    retry = Call(
        "Bash",
        {"command": f"git push -u origin b{index}", "description": "Push with upstream"},
        f"branch 'b{index}' set up to track 'origin/b{index}'.",
        False,
    )
    calls[5:5] = [push]
    calls[12:12] = [edit]
    calls[18:18] = [retry]
    return calls


def jsonl_session(calls: list[Call], index: int) -> str:
    """`calls` as OpenAI-style chat lines, a turn each."""
    lines: list[dict[str, object]] = []
    for turn, call in enumerate(calls):
        lines += [
            {"role": "user", "content": f"step {turn} of task {index}: " + "please " * 12},
            {
                "role": "assistant",
                "content": "Let me look at that first. " * 4,
                "tool_calls": [
                    {
                        "id": f"c{turn}",
                        "type": "function",
                        "function": {"name": call.tool, "arguments": json.dumps(call.input)},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"c{turn}",
                "content": call.output,
                "error": call.failed,
            },
            {"role": "assistant", "content": f"Step {turn} is done: " + "details " * 30},
        ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def claude_code_session(calls: list[Call], index: int, salt: str) -> str:
    """`calls` as Claude Code writes a session: every line carries the session's envelope, a
    call is a `tool_use` block, its result a user line's `tool_result` block (a failed `Bash`
    result opens with its `Exit code` banner) with the `toolUseResult` Claude Code keeps
    beside it."""
    session = f"00000000-0000-4000-8000-{index:012d}"
    envelope = {"parentUuid": None, "isSidechain": False, "userType": "external",
                "cwd": f"/w/{salt}/s{index}", "sessionId": session, "version": "2.1.12",
                "gitBranch": f"b{index}"}  # fmt: skip
    lines: list[dict[str, object]] = []

    def line(kind: str, message: dict[str, object], **extra: object) -> None:
        stamp = f"2026-01-20T11:{len(lines) // 60 % 60:02d}:{len(lines) % 60:02d}.000Z"
        lines.append({**envelope, "type": kind, "uuid": f"{session}-{len(lines)}",
                      "timestamp": stamp, "message": message, **extra})  # fmt: skip

    def said(text: str) -> dict[str, object]:
        content = [{"type": "text", "text": text}]
        return {"id": f"msg_{len(lines)}", "type": "message", "role": "assistant",
                "model": "claude-opus-4-5", "content": content}  # fmt: skip

    for turn, call in enumerate(calls):
        line("user", {"role": "user", "content": f"step {turn} of task {index}: " + "please " * 12})
        line("assistant", said("Let me look at that first. " * 4))
        use = {"type": "tool_use", "id": f"toolu_{turn}", "name": call.tool, "input": call.input}
        line("assistant", {**said(""), "content": [use]})
        output = (
            f"Exit code 128\n{call.output}" if call.failed and call.tool == "Bash" else call.output
        )
        result = {"type": "tool_result", "tool_use_id": f"toolu_{turn}", "is_error": call.failed,
                  "content": output}  # fmt: skip
        kept = {"stdout": call.output, "stderr": "", "interrupted": False}
        line("user", {"role": "user", "content": [result]}, toolUseResult=kept)
        line("assistant", said(f"Step {turn} is done: " + "details " * 30))
    return "".join(json.dumps(line) + "\n" for line in lines)
