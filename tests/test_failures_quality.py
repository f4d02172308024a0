"""`bench/failures_quality.py` scores skilld's failure records against hand labels.

The corpus here is written by the test: Claude Code sessions and a Codex rollout in their own
formats, labels for some of their calls. The bench runs as a subprocess, as a person runs it;
the failures chosen are ones every version of the rules records alike (a `git push` with no
upstream behind an `Exit code 128` banner, a Codex command exiting 128 with `fatal:`), so the
figures asserted are the bench's arithmetic, not today's rules.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "bench" / "failures_quality.py"
PUSH = "Exit code 128\nfatal: The current branch main has no upstream branch."


def claude_session(path: Path, calls: list[tuple[str, str, str, bool]]) -> None:
    lines: list[dict[str, Any]] = []
    for call_id, command, output, is_error in calls:
        lines.append(
            {
                "type": "assistant",
                "sessionId": path.stem,
                "version": "2.1.14",
                "timestamp": "2026-03-01T10:00:00Z",
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": call_id,
                            "name": "Bash",
                            "input": {"command": command},
                        }
                    ],
                },
            }
        )
        lines.append({
            "type": "user", "sessionId": path.stem, "version": "2.1.14",
            "timestamp": "2026-03-01T10:00:01Z",
            "message": {"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": call_id, "content": output,
                "is_error": is_error}]},
        })  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def codex_rollout(path: Path) -> None:
    output = "Process exited with code 128\nOutput:\nfatal: not a git repository\n"
    lines = [
        {"timestamp": "2026-03-01T10:00:00Z", "type": "session_meta",
         "payload": {"id": "019c0000-0000-7000-8000-000000000001", "cwd": "/w",
                     "cli_version": "0.104.0"}},
        {"timestamp": "2026-03-01T10:00:01Z", "type": "response_item",
         "payload": {"type": "function_call", "name": "exec_command",
                     "arguments": json.dumps({"cmd": "git status"}), "call_id": "call_1"}},
        {"timestamp": "2026-03-01T10:00:02Z", "type": "response_item",
         "payload": {"type": "function_call_output", "call_id": "call_1", "output": output}},
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def label(path: str, call_id: str, failure: bool, **fields: Any) -> dict[str, Any]:
    return {"path": path, "call_id": call_id, "failure": failure, **fields}


def run_bench(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def figure(stdout: str, name: str) -> str:
    line = next(line for line in stdout.splitlines() if line.startswith(name))
    return line[len(name) :].strip()


def test_the_bench_joins_labels_to_calls_and_prints_its_figures(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    claude_session(
        sessions / "p/a.jsonl", [("t1", "git push", PUSH, True), ("t2", "ls", "x", False)]
    )
    claude_session(sessions / "p/b.jsonl", [("t3", "git push", PUSH, True)])
    codex_rollout(sessions / "codex/rollout-2026-03-01T10-00-00-019c0000.jsonl")
    push = {"class": "real", "expected_head": "git push", "group": "push-no-upstream"}
    labels = [
        label("p/a.jsonl", "t1", True, error_key="no upstream branch", **push),
        label("p/b.jsonl", "t3", True, error_key="no upstream branch", **push),
        # A label whose head the signature does not hold: not meaningful.
        label("codex/rollout-2026-03-01T10-00-00-019c0000.jsonl", "call_1", True,
              **{"class": "real", "expected_head": "git commit", "error_key": "not a git"}),
        label("p/a.jsonl", "t2", False),
        label("p/a.jsonl", "gone", False),  # matches no call: reported, not fatal
    ]  # fmt: skip
    labels_file = tmp_path / "labels.jsonl"
    labels_file.write_text("".join(json.dumps(row) + "\n" for row in labels), encoding="utf-8")

    run = run_bench("--sessions", str(sessions), "--labels", str(labels_file), "--detail")

    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "4 tool calls in 3 session files" in out
    assert figure(out, "labelled calls (joined)") == "5 (4)"
    assert figure(out, "precision: counted -> true failure").startswith("100.0% (3 of 3)")
    assert figure(out, "recall: true failure -> counted").startswith("100.0% (3 of 3)")
    assert figure(out, "meaningful signatures (head + key)").startswith("66.7% (2 of 3)")
    assert figure(out, "recurrences shown as one row").startswith("100.0% (1 of 1)")
    assert figure(out, "distinct groups merged into a row") == "0"
    assert "one row  push-no-upstream (2 sessions)" in out
    assert "1 labels match no call, e.g. ('p/a.jsonl', 'gone')" in out


def test_two_distinct_groups_in_one_row_count_as_a_merge(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    claude_session(sessions / "p/a.jsonl", [("t1", "git push", PUSH, True)])
    claude_session(sessions / "p/b.jsonl", [("t2", "git push", PUSH, True)])
    labels = [
        label("p/a.jsonl", "t1", True, **{"class": "real", "group": "first"}),
        label("p/b.jsonl", "t2", True, **{"class": "real", "group": "second"}),
    ]
    labels_file = tmp_path / "labels.jsonl"
    labels_file.write_text("".join(json.dumps(row) + "\n" for row in labels), encoding="utf-8")

    run = run_bench("--sessions", str(sessions), "--labels", str(labels_file))

    assert run.returncode == 0, run.stderr
    assert figure(run.stdout, "distinct groups merged into a row") == "1"


def test_a_labels_file_that_is_not_json_is_refused_with_its_line(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    claude_session(sessions / "p/a.jsonl", [("t1", "ls", "x", False)])
    labels_file = tmp_path / "labels.jsonl"
    labels_file.write_text('{"path": "p/a.jsonl", "call_id": "t1", "failure": false}\nnot json\n')

    run = run_bench("--sessions", str(sessions), "--labels", str(labels_file))

    assert run.returncode == 1
    assert f"{labels_file}:2: not JSON" in run.stderr
    assert "Traceback" not in run.stderr
