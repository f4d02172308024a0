"""Tick cost, beside baselines run in the same process (machines here are noisy, ratios are not).

    python bench/tick.py            # full sizes (10,000 sessions, 1 GB history)
    python bench/tick.py --quick    # smaller sizes
    python bench/tick.py --smoke    # tiny sizes, one run each: does every row still run?
    python bench/tick.py --quick --claude-sessions DIR   # and a row over real sessions

Rows:
- idle tick over N session files   vs  listing and stat-ing the same files     (target ≤ 3×)
- 1 MB appended to a 1 GB session  vs  the same append to an empty session     (target ≤ 1.5×)
- dsh: one frame appended to a 50 MB session vs to a one-frame session         (target ≤ 1.5×)
- the first tick over N sessions with failing tool calls, recording failures vs not, in CPU
  time: sessions like real ones (the tool mix, sizes and failure rate of 59 real Claude Code
  sessions; bench/_sessions.py) read as JSONL and as Claude Code writes them, and read and
  reflected against a loopback LLM (target ≤ 1.1×); sessions of shell calls only, the worst
  case (reported); with --claude-sessions, a folder of real Claude Code sessions (≤ 1.1×)
- peak RSS of `skilld once` tracking N sessions                                (target ≤ 150 MB)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from _sessions import claude_code_session, jsonl_session, mixed_calls, shell_calls  # noqa: E402
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


def session_text(index: int, salt: str, kind: str, calls: str) -> tuple[str, int]:
    """Session `index` of `calls` ("mixed": like real sessions; "shell": shell calls only)
    written as the source `kind` writes it (jsonl or claude-code), and how many calls fail."""
    made = (mixed_calls if calls == "mixed" else shell_calls)(index, salt)
    if kind == "claude-code":
        text = claude_code_session(made, index, salt)
    else:
        text = jsonl_session(made, index)
    return text, sum(call.failed for call in made)


def failures_row(
    count: int,
    runs: int,
    *,
    reflect: bool,
    kind: str = "jsonl",
    calls: str = "mixed",
    real: Path | None = None,
) -> tuple[str, float, float]:
    """The tick that first reads `count` sessions of `calls` (see `session_text`), written as
    the source `kind` writes them (and, with `reflect`, sends each window to a loopback LLM),
    recording failures (the effect tables, the [history] lines) against the same tick with the
    recording replaced by nothing. With `real`, the sessions are that folder's Claude Code
    sessions (`*.jsonl`), not generated ones.

    CPU seconds, not wall time: both ticks do the same I/O, and on a shared machine the wall
    clock mostly measures the other processes. The median of `runs` of each, interleaved (which
    goes first alternates), each over sessions and commands not seen before: one run's CPU time
    varies by a tenth here, and the fastest of a few is as likely a lucky baseline as not."""
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
            failing = 0
            for index in range(count):
                text, failed = session_text(index, salt, kind, calls)
                (folder / f"s{index:05d}.jsonl").write_text(text)
                failing += failed
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
            assert (recorded > 0 if real is not None else recorded == failing) == record
            if reflect:
                assert state.execute("SELECT COUNT(*) FROM pending").fetchone()[0] == 0
            harness.app_exit()
            return elapsed

    with_recording: list[float] = []
    without: list[float] = []
    try:
        for run in range(runs):
            for record in (True, False) if run % 2 == 0 else (False, True):
                (with_recording if record else without).append(measure(record, f"{record}{run}"))
    finally:
        server.terminate()
        server.wait()
    what = "read+reflect" if reflect else "read"
    made = {"mixed": "like-real", "shell": "shell-only"}[calls]
    sessions = f"{real.name}/*.jsonl" if real is not None else f"{count:,} {made}"
    return (
        f"{what} {sessions} {kind}, CPU",
        statistics.median(with_recording),
        statistics.median(without),
    )


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
    parser.add_argument(
        "--failures", action="store_true", help="only the rows that record failures"
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
    if not args.failures:
        rows += reading_rows(counts, history, held, runs, args.smoke)
    recording = 1 if args.smoke else runs * 2 + 1  # medians: see failures_row
    for reflect, kind, calls in (
        (False, "jsonl", "mixed"),
        (False, "claude-code", "mixed"),
        (True, "jsonl", "mixed"),
        (False, "jsonl", "shell"),
        (False, "claude-code", "shell"),
    ):
        label, value, baseline = failures_row(
            failing, recording, reflect=reflect, kind=kind, calls=calls
        )
        rows.append((label, value, baseline, "≤ 1.1×" if calls == "mixed" else "worst case"))
    if args.claude_sessions is not None:
        real = args.claude_sessions
        label, value, baseline = failures_row(0, recording, reflect=False, real=real,
                                              kind="claude-code")  # fmt: skip
        rows.append((label, value, baseline, "≤ 1.1×"))

    print(f"{'row':<44} {'skilld':>10} {'baseline':>10} {'ratio':>7}  target")
    for label, value, baseline, target in rows:
        print(
            f"{label:<44} {value * 1000:>8.1f}ms {baseline * 1000:>8.1f}ms"
            f" {value / baseline:>6.2f}×  {target}"
        )
    if not args.failures:
        label, megabytes = rss_row(counts[-1])
        print(f"{label:<44} {megabytes:>8.1f}MB {'':>10} {'':>7}  ≤ 150 MB")
    print(f"(best of {runs} runs per row; failures rows: the median of {recording} runs of each)")


def reading_rows(
    counts: tuple[int, ...], history: int, held: int, runs: int, smoke: bool
) -> list[tuple[str, float, float, str]]:
    """The rows of a tick that reads: idle, appended to, holding messages, a DSH frame."""
    rows: list[tuple[str, float, float, str]] = []
    for count in counts:
        label, value, baseline = idle_row(count, runs)
        rows.append((label, value, baseline, "≤ 3×"))
    label, value, baseline = append_row(history, runs)
    rows.append((label, value, baseline, "≤ 1.5×"))
    label, value, baseline = held_row(held, runs)
    rows.append((label, value, baseline, "≤ 1.5×"))
    dsh = dsh_row(smoke)
    if dsh is not None:
        rows.append((*dsh, "≤ 1.5×"))
    return rows


if __name__ == "__main__":
    main()
