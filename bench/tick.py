"""Tick cost, beside baselines run in the same process (machines here are noisy, ratios are not).

    python bench/tick.py            # full sizes (10,000 sessions, 1 GB history)
    python bench/tick.py --quick    # smaller sizes
    python bench/tick.py --smoke    # tiny sizes, one run each: does every row still run?
    python bench/tick.py --quick --claude-sessions DIR   # and a row over real sessions

Rows:
- idle tick over N session files   vs  listing and stat-ing the same files     (target ≤ 3×)
- 1 MB appended to a 1 GB session  vs  the same append to an empty session     (target ≤ 1.5×)
- dsh: one frame appended to a 50 MB session vs to a one-frame session         (target ≤ 1.5×)
- the first tick over N sessions with failing tool calls (read only, as JSONL and as Claude Code
  writes them; read and reflect against a loopback LLM; with --claude-sessions, read a folder
  of real Claude Code sessions), recording failures vs not, in CPU time         (target ≤ 1.1×)
- peak RSS of `skilld once` tracking N sessions                                (target ≤ 150 MB)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from skilld.app import open_app  # noqa: E402
from skilld.config import Config, build_config  # noqa: E402
from skilld.effect import record as effect_record  # noqa: E402
from skilld.evolve import supervisor  # noqa: E402
from skilld.evolve.supervisor import Evolver  # noqa: E402
from skilld.evolve.wiring import bind_sources  # noqa: E402
from skilld.llm import LLMClient, LLMSettings  # noqa: E402
from skilld.log import configure_logging  # noqa: E402

configure_logging("json", "warning")  # a reflecting tick logs each window it skips

LINE = json.dumps({"role": "user", "content": "x" * 200}) + "\n"


def best_of(runs: int, action: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def make_config(
    root: Path,
    sessions: Path,
    llm_url: str = "http://127.0.0.1:9/v1",
    kind: str = "jsonl",
    **evolve: object,
) -> Config:
    return build_config(
        {
            "skills": {"dir": str(root / "skills")},
            "state": {"dir": str(root / "state")},
            # No reflection unless a row asks: min_messages is out of reach, only reading counts.
            "evolve": {"backfill": "none", "min_messages": 10**9, **evolve},
            "llm": {"base_url": llm_url, "max_retries": 0},
            "sources": [{"kind": kind, "path": str(sessions)}],
        },
        environ={},
    )


class Harness:
    """An Evolver over `sessions`, ticked synchronously."""

    def __init__(
        self,
        root: Path,
        sessions: Path,
        llm_url: str = "http://127.0.0.1:9/v1",
        kind: str = "jsonl",
        **evolve: object,
    ) -> None:
        self.config = make_config(root, sessions, llm_url, kind, **evolve)
        self._app_cm = open_app(self.config, prepare=True)
        self.app = self._app_cm.__enter__()
        self.llm = LLMClient(LLMSettings(base_url=llm_url, model="m", max_calls_per_hour=0))
        bindings = bind_sources(self.config, self.app.routing)
        self.evolver = Evolver(self.app, self.llm, bindings)

    def tick(self) -> None:
        anyio.run(self.evolver.tick)

    def close(self) -> None:
        anyio.run(self.llm.aclose)
        self.app_exit()

    def app_exit(self) -> None:
        self._app_cm.__exit__(None, None, None)


def make_sessions(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (folder / f"session-{index:05d}.jsonl").write_text(LINE * 3, encoding="utf-8")


def stat_all(folder: Path) -> None:
    for entry in os.scandir(folder):
        entry.stat()


def idle_row(count: int, runs: int) -> tuple[str, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sessions = root / "sessions"
        make_sessions(sessions, count)
        harness = Harness(root, sessions)
        harness.tick()  # first tick records every cursor
        tick = best_of(runs, harness.tick)
        baseline = best_of(runs, lambda: stat_all(sessions))
        harness.close()
    return f"idle tick, {count:,} sessions", tick, baseline


def append_row(history_bytes: int, runs: int) -> tuple[str, float, float]:
    chunk = LINE * (1_000_000 // len(LINE))

    def measure(initial_bytes: int) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            sessions = root / "sessions"
            sessions.mkdir()
            path = sessions / "big.jsonl"
            block = LINE * (8_000_000 // len(LINE))
            with path.open("w", encoding="utf-8") as handle:
                written = 0
                while written < initial_bytes:
                    handle.write(block)
                    written += len(block)
            harness = Harness(root, sessions)
            harness.tick()  # backfill "none": the cursor starts at the end, nothing is read
            times = []
            for _ in range(runs):
                with path.open("a", encoding="utf-8") as handle:
                    handle.write(chunk)
                started = time.perf_counter()
                harness.tick()
                times.append(time.perf_counter() - started)
                # What was read stays held (no reflection here); clear it between runs.
                harness.app.state.conn.execute("DELETE FROM pending")
                harness.app.state.conn.execute("UPDATE sessions SET pending_count = 0")
            harness.close()
            return min(times)

    with_history = measure(history_bytes)
    without = measure(0)
    return f"1 MB append, {history_bytes / 1e9:g} GB history", with_history, without


def held_row(held_messages: int, runs: int) -> tuple[str, float, float]:
    """One line appended to a session that holds `held_messages` unreflected messages (its turn
    never finished) against the same append to a session that holds none."""
    unfinished = json.dumps({"role": "user", "content": "still typing " + "x" * 100}) + "\n"

    def measure(initial: int) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            sessions = root / "sessions"
            sessions.mkdir()
            path = sessions / "held.jsonl"
            path.write_text(unfinished * initial, encoding="utf-8")
            harness = Harness(root, sessions, backfill="all")
            harness.tick()  # reads and holds `initial` messages
            times = []
            for _ in range(runs):
                with path.open("a", encoding="utf-8") as handle:
                    handle.write(unfinished)
                started = time.perf_counter()
                harness.tick()
                times.append(time.perf_counter() - started)
            held = harness.app.state.session("jsonl:held")
            assert held is not None and held.held.size == initial + runs
            harness.close()
            return min(times)

    with_held = measure(held_messages)
    without = measure(0)
    return f"1 append, session holding {held_messages:,} messages", with_held, without


def dsh_row(smoke: bool) -> tuple[str, float, float] | None:
    bench = ROOT / "bench" / "dsh_append.py"
    if not bench.exists():
        return None
    args = [sys.executable, str(bench), "--json", *(["--smoke"] if smoke else [])]
    # Exit status 1 is also a ratio over its target: the row shows it, as every other row would.
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(result.stderr, file=sys.stderr)
        print(f"dsh row skipped: {bench.name} printed no JSON line", file=sys.stderr)
        return None
    return data["label"], data["with_history"], data["baseline"]


#: A loopback LLM in its own process (its CPU is not the tick's): every request is answered
#: with a skip, so a reflecting tick pays for everything but a model.
LOOPBACK_LLM = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
reply = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
         "content": json.dumps({"evolve": False, "reason": "nothing new"})}}],
         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
data = json.dumps(reply).encode()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def failing_calls(index: int, salt: str) -> list[tuple[str, str, bool]]:
    """Ten shell calls (command, output, failed), outputs the size real results have (650
    characters on average in the Claude Code sessions the issue measured); every other session
    fails one `git push` and runs it again (one call in twenty fails, as there: 47 of 976)."""
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
        calls.append((command, output, failed))
    return calls


def failing_session(index: int, salt: str, kind: str = "jsonl") -> str:
    """`failing_calls` as a session of the source `kind` (jsonl or claude-code), a turn each."""
    if kind == "claude-code":
        return claude_code_session(index, salt)
    lines: list[dict[str, object]] = []
    for turn, (command, output, failed) in enumerate(failing_calls(index, salt)):
        arguments = json.dumps({"command": command})
        lines += [
            {"role": "user", "content": f"step {turn} of task {index}: " + "please " * 12},
            {
                "role": "assistant",
                "content": "Let me look at that first. " * 4,
                "tool_calls": [
                    {
                        "id": f"c{turn}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": arguments},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": f"c{turn}", "content": output, "error": failed},
            {"role": "assistant", "content": f"Step {turn} is done: " + "details " * 30},
        ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def claude_code_session(index: int, salt: str) -> str:
    """`failing_calls` as Claude Code writes a session: every line carries the session's
    envelope, a call is a `tool_use` block, its result a user line's `tool_result` block (a
    failed `Bash` result opens with its `Exit code` banner)."""
    session = f"00000000-0000-4000-8000-{index:012d}"
    envelope = {"parentUuid": None, "isSidechain": False, "userType": "external",
                "cwd": f"/w/{salt}/s{index}", "sessionId": session, "version": "2.1.12",
                "gitBranch": f"b{index}"}  # fmt: skip
    lines: list[dict[str, object]] = []

    def line(kind: str, message: dict[str, object]) -> None:
        stamp = f"2026-01-20T11:{len(lines) // 60:02d}:{len(lines) % 60:02d}.000Z"
        lines.append({**envelope, "type": kind, "uuid": f"{session}-{len(lines)}",
                      "timestamp": stamp, "message": message})  # fmt: skip

    def said(text: str) -> dict[str, object]:
        content = [{"type": "text", "text": text}]
        return {"id": f"msg_{len(lines)}", "type": "message", "role": "assistant",
                "model": "claude-opus-4-5", "content": content}  # fmt: skip

    for turn, (command, output, failed) in enumerate(failing_calls(index, salt)):
        line("user", {"role": "user", "content": f"step {turn} of task {index}: " + "please " * 12})
        line("assistant", said("Let me look at that first. " * 4))
        call = {"type": "tool_use", "id": f"toolu_{turn}", "name": "Bash",
                "input": {"command": command, "description": "Run it"}}  # fmt: skip
        line("assistant", {**said(""), "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{turn}", "is_error": failed,
                  "content": f"Exit code 128\n{output}" if failed else output}  # fmt: skip
        line("user", {"role": "user", "content": [result]})
        line("assistant", said(f"Step {turn} is done: " + "details " * 30))
    return "".join(json.dumps(line) + "\n" for line in lines)


def failures_row(
    count: int, runs: int, *, reflect: bool, kind: str = "jsonl", real: Path | None = None
) -> tuple[str, float, float]:
    """The tick that first reads `count` sessions with failures, written as the source `kind`
    writes them (and, with `reflect`, sends each window to a loopback LLM), recording failures
    (the effect tables, the [history] lines) against the same tick with the recording replaced
    by nothing. CPU seconds, not wall time: both ticks do the same I/O, and on a shared machine
    the wall clock mostly measures the other processes. With `real`, the sessions are that
    folder's Claude Code sessions (`*.jsonl`), not generated ones."""
    recording, history = effect_record.record_session_read, supervisor.window_history
    server = subprocess.Popen(
        [sys.executable, "-c", LOOPBACK_LLM], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"

    def measure(record: bool, salt: str) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            sessions = root / "sessions"
            folder = sessions / "-w-project" if kind == "claude-code" else sessions
            folder.mkdir(parents=True)
            for index in range(count):
                text = failing_session(index, salt, kind)
                (folder / f"s{index:05d}.jsonl").write_text(text)
            for session in sorted(real.glob("*.jsonl")) if real is not None else ():
                shutil.copyfile(session, folder / session.name)
            evolve: dict[str, object] = {"backfill": "all"}
            if reflect:
                evolve.update(min_messages=2, cooldown_seconds=0)
            harness = Harness(root, sessions, base_url, kind, **evolve)
            if not record:
                effect_record.record_session_read = lambda *a, **k: None
                supervisor.window_history = lambda *a, **k: []

            async def tick() -> float:
                started = time.process_time()
                await harness.evolver.tick()
                elapsed = time.process_time() - started
                await harness.llm.aclose()  # in the loop its connections were opened in
                return elapsed

            try:
                elapsed = anyio.run(tick)
            finally:
                effect_record.record_session_read, supervisor.window_history = recording, history
            state = harness.app.state.conn
            recorded = state.execute("SELECT COUNT(*) FROM effect_failures").fetchone()[0]
            assert (recorded > 0 if real is not None else recorded == (count + 1) // 2) == record
            if reflect:
                assert state.execute("SELECT COUNT(*) FROM pending").fetchone()[0] == 0
            harness.app_exit()
            return elapsed

    with_recording, without = [], []
    try:
        for run in range(runs):  # interleaved, each over commands it has not seen yet
            with_recording.append(measure(True, f"w{run}"))
            without.append(measure(False, f"o{run}"))
    finally:
        server.terminate()
        server.wait()
    what = "read+reflect" if reflect else "read"
    sessions = f"{real.name}/*.jsonl" if real is not None else f"{count:,} failing"
    return f"{what} {sessions} {kind} sessions, CPU", min(with_recording), min(without)


def rss_row(count: int) -> tuple[str, float]:
    """Peak RSS of `skilld once` over `count` sessions, in MB."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sessions = root / "sessions"
        make_sessions(sessions, count)
        config = root / "config.toml"
        config.write_text(
            f'[skills]\ndir = "{root / "skills"}"\n[state]\ndir = "{root / "state"}"\n'
            '[evolve]\nbackfill = "all"\nmin_messages = 1000000\n'
            '[llm]\nbase_url = "http://127.0.0.1:9/v1"\n'
            f'[[sources]]\nkind = "jsonl"\npath = "{sessions}"\n',
            encoding="utf-8",
        )
        peak_kb = 0
        for _ in range(2):  # the second run tracks all of them from the start
            child = subprocess.Popen(
                [sys.executable, "-m", "skilld", "--config", str(config), "once"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            )
            # This child's own peak, not the largest child of the whole benchmark run.
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
            assert child.returncode == 0, f"skilld once exited {child.returncode}"
            peak_kb = max(peak_kb, usage.ru_maxrss)
    return f"peak RSS of `skilld once`, {count:,} sessions", peak_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run per row")
    parser.add_argument(
        "--claude-sessions",
        type=Path,
        metavar="DIR",
        help="a folder of real Claude Code sessions: one more failures row over them",
    )
    args = parser.parse_args()
    counts: tuple[int, ...]
    if args.smoke:
        counts, history, held, failing, runs = (50,), 1_000_000, 50, 20, 1
    elif args.quick:
        counts, history, held, failing, runs = (1_000, 2_000), 100_000_000, 2_000, 200, 5
    else:
        counts, history, held, failing, runs = (1_000, 10_000), 1_000_000_000, 10_000, 1_000, 5

    rows: list[tuple[str, float, float, str]] = []
    for count in counts:
        label, value, baseline = idle_row(count, runs)
        rows.append((label, value, baseline, "≤ 3×"))
    label, value, baseline = append_row(history, runs)
    rows.append((label, value, baseline, "≤ 1.5×"))
    label, value, baseline = held_row(held, runs)
    rows.append((label, value, baseline, "≤ 1.5×"))
    dsh = dsh_row(args.smoke)
    if dsh is not None:
        rows.append((*dsh, "≤ 1.5×"))
    for reflect, kind in ((False, "jsonl"), (False, "claude-code"), (True, "jsonl")):
        label, value, baseline = failures_row(failing, max(runs, 3), reflect=reflect, kind=kind)
        rows.append((label, value, baseline, "≤ 1.1×"))
    if args.claude_sessions is not None:
        real = args.claude_sessions
        label, value, baseline = failures_row(0, max(runs, 3), reflect=False, real=real,
                                              kind="claude-code")  # fmt: skip
        rows.append((label, value, baseline, "≤ 1.1×"))

    print(f"{'row':<44} {'skilld':>10} {'baseline':>10} {'ratio':>7}  target")
    for label, value, baseline, target in rows:
        print(
            f"{label:<44} {value * 1000:>8.1f}ms {baseline * 1000:>8.1f}ms"
            f" {value / baseline:>6.2f}×  {target}"
        )
    label, megabytes = rss_row(counts[-1])
    print(f"{label:<44} {megabytes:>8.1f}MB {'':>10} {'':>7}  ≤ 150 MB")
    print(f"(best of {runs} runs per row)")


if __name__ == "__main__":
    main()
