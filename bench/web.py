"""The panel's pages against the CLI's read of the same data, for 100 to 10,000 skills.

Run: `python bench/web.py [--sizes 100,1000,10000] [--events 1000000] [--failures 1000000]
[--runs 5]`, or `python bench/web.py --smoke` (tiny sizes, one run: seconds; exits non-zero on
a crash).

Each size is one library of N managed skills (rendered files, the provenance rows that make
them skilld's, a usage record each, three saved versions of the skill shown), and a state
whose event log holds `--events` events. Timed, each the best of `--runs` (the machine's
other load only ever adds time, to either side):

* `skills`: `GET /skills` (the first page of the table), against `skilld skills list --json`.
* `skill`: `GET /skills/default/<name>`, against `skilld skills show <name> --json`.
* `events`: `GET /events` (the newest 50), against `skilld events --json --limit 50`.
* `overview`: `GET /` (the week, the problems, the libraries, spend), against
  `skilld status --json` over the same state. Each managed file's hash comes from what the
  panel's listing remembers of it while its identity holds (`FileFacts`): the page stats the
  library, where `status` reads every managed file to count the cap.

The panel is served by uvicorn on a loopback socket in this process (a thread of its own) and
read by one keep-alive HTTP client: a figure is what a browser waits for, from the request to
the last byte. The CLI side is the matching command run in this process (`skilld.cli.main`:
its parser, its config, its read, its JSON printed to a buffer), without Python's start-up.
* `failures`: `GET /failures` (every failure, grouped, the targeting skills' verdicts), against
  `skilld failures --json`, over `--failures` recorded failing calls (1,000,000 by default) of
  `--failure-skills` learned skills, built as bench/effect.py builds them and measured once as
  a tick does (the daemon's kept rows: what the page's verdicts read).
* `failure`: `GET /failures/<id>` of the failure that happened 10,000 times (its first page of
  occurrences), against `skilld failures show <id> --json` (every occurrence).

Targets: every page under 2x the CLI's read, and the events page independent of the log's
length (one indexed query with a LIMIT): the events row is also timed over a log of 1,000
events to show it.

Hermes Agent's dashboard is timed over the same library: `hermes dashboard` (0.19.0, the version
tests/interop/install pins), run by its own interpreter (`--hermes PYTHON`, by default the venv
that script installs) with `HERMES_HOME` set to the size's directory, whose `skills/` is the
library skilld's panel reads. It binds 127.0.0.1 on a port the OS picks, with every proxy
variable pointing at a closed port and `.no-bundled-skills` in `HERMES_HOME`, so it adds none
of its bundled skills to the library. Its `/api/` routes need the session token the desktop
app injects through `HERMES_DASHBOARD_SESSION_TOKEN` and sends as `X-Hermes-Session-Token`;
it needs no model. `GET /api/skills` (every skill, as JSON) is timed like the panel's pages,
beside skilld's skills page and skilld's own `GET /api/skills`. Without Hermes the row is
skipped with one line saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import queue
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import uvicorn

from skilld import cli as skilld_cli
from skilld.config import Config, load_config
from skilld.digest import sha256_hex
from skilld.log import configure_logging
from skilld.skills.document import SkillDoc, render_skill
from skilld.skills.usage import USAGE_FILE, format_timestamp, new_record
from skilld.state import StateDB
from skilld.web.panel import guarded_app
from skilld.web.security import access_rules
from skilld.web.serve import PanelServer, bind

sys.path.insert(0, str(Path(__file__).resolve().parent))
from effect import HOT_SIGNATURE, failure_id, measure_as_a_tick
from effect import build as build_failures

LIBRARY = "default"
BODY = "# Steps\n\n1. Run `make test`.\n2. Read the first failure.\n3. Fix it and run again.\n"
EVENT_KINDS = ("created", "updated", "skipped", "unchanged", "error", "redacted")


def build_library(root: Path, size: int) -> str:
    """N managed skills with usage records; returns the name of the skill the page shows."""
    skills = root / "skills"
    skills.mkdir(parents=True)
    state = StateDB(root / "state" / "state.db")
    records = {}
    with state.transaction():
        for index in range(size):
            name = f"skill-{index:05d}"
            doc = SkillDoc(
                name=name,
                description=f"How to do task {index}.",
                when_to_use="When the task comes up.",
                body=BODY,
                metadata={"managed-by": "skilld", "version": "1"},
            )
            data = render_skill(doc, "dsh").encode()
            (skills / name).mkdir()
            (skills / name / "SKILL.md").write_bytes(data)
            state.put_provenance(
                LIBRARY, name, path=str(skills / name / "SKILL.md"), sha256=sha256_hex(data)
            )
            record = new_record(datetime(2026, 11, 1, tzinfo=UTC), created_by="agent")
            record["use_count"] = index % 17
            record["last_used_at"] = format_timestamp(datetime(2026, 11, 20, tzinfo=UTC))
            records[name] = record
    (skills / USAGE_FILE).write_text(json.dumps(records), encoding="utf-8")
    shown = f"skill-{size // 2:05d}"
    history = root / "state" / "history" / f"@{LIBRARY}" / shown
    history.mkdir(parents=True)
    for version in range(3):
        saved = BODY.replace("first", f"version {version}'s first")
        (history / f"2026110{version + 1}T000000000000Z-{version:012x}.md").write_text(saved)
    state.close()
    return shown


def fill_events(state_db: Path, count: int, shown: str) -> None:
    """`count` events, oldest first, a few of them about the skill the page shows."""
    state = StateDB(state_db)
    batch = 50_000
    with state.transaction():
        for start in range(0, count, batch):
            rows = [
                (
                    f"2026-11-{1 + n * 29 // max(count, 1):02d}T12:00:00+00:00",
                    EVENT_KINDS[n % len(EVENT_KINDS)],
                    LIBRARY,
                    shown if n % 1000 == 0 else f"skill-{n % 997:05d}",
                    f"session-{n % 5000}",
                    "jsonl",
                    "a reason given for this event",
                    '{"version": 1}',
                )
                for n in range(start, min(start + batch, count))
            ]
            state.conn.executemany(
                "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
    state.close()


def config_for(root: Path) -> Config:
    """The library's config, written where the CLI reads it too."""
    path = root / "config.toml"
    path.write_text(
        f'[skills]\ndir = "{root / "skills"}"\n\n[state]\ndir = "{root / "state"}"\n'
        '\n[log]\nformat = "json"\nlevel = "error"\n',
        encoding="utf-8",
    )
    return load_config(path)


def best_ms(function: Callable[[], object], runs: int) -> float:
    function()  # warm: imports, templates, the page cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def cli(config: Config, *args: str) -> Callable[[], None]:
    """The command `skilld ARGS` run in this process (`skilld.cli.main`: its parser, its
    config, its read and its JSON), without the interpreter's start-up."""
    line = ["--config", str(config.path), *args]

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            if skilld_cli.main(line) != 0:
                raise RuntimeError(f"skilld {' '.join(args)} failed")

    return run


#: The panel always needs a token; the benchmark's requests carry this one.
BENCH_TOKEN = "bench-token"


@contextlib.contextmanager
def serving(config: Config) -> Iterator[str]:
    """The panel on a free loopback port, in a thread; yields its URL."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    access = access_rules(["127.0.0.1"], "bench.localhost", "127.0.0.1", port, BENCH_TOKEN, "bench")
    server = PanelServer(
        uvicorn.Config(guarded_app(config, access), log_level="error", lifespan="off")
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the panel did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def page(client: httpx.Client, path: str) -> Callable[[], None]:
    def get() -> None:
        response = client.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:300]}")

    return get


INTEROP_INSTALL = Path(__file__).resolve().parent.parent / "tests" / "interop" / "install"
HERMES_TOKEN_HEADER = "X-Hermes-Session-Token"
HERMES_READY = re.compile(r"HERMES_DASHBOARD_READY port=(\d+)")
HERMES_START_SECONDS = 120


def default_hermes_python() -> Path:
    """The interpreter of the Hermes venv tests/interop/install makes (its cache, its pin)."""
    pinned = re.search(r"^HERMES_VERSION=(\S+)$", INTEROP_INSTALL.read_text(), re.MULTILINE)
    if pinned is None:
        raise RuntimeError(f"no HERMES_VERSION in {INTEROP_INSTALL}")
    cache = os.environ.get("SKILLD_INTEROP_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skilld-interop"
    )
    return Path(cache) / f"hermes-{pinned.group(1)}" / "bin" / "python"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def hermes_dashboard(python: Path, home: Path, token: str) -> Iterator[str]:
    """`hermes dashboard` over `home` on a free loopback port, offline; yields its URL.

    Raises RuntimeError with the dashboard's own last words when it exits before it is ready.
    """
    (home / ".no-bundled-skills").touch()
    nowhere = f"http://127.0.0.1:{closed_port()}"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("HERMES_") and not key.lower().endswith("_proxy")
    }
    env.update(
        HOME=str(home),
        HERMES_HOME=str(home),
        HERMES_DASHBOARD_SESSION_TOKEN=token,
        HTTP_PROXY=nowhere,
        HTTPS_PROXY=nowhere,
        ALL_PROXY=nowhere,
        NO_PROXY="127.0.0.1,localhost",
    )
    command = [str(python), "-m", "hermes_cli.main", "dashboard", "--no-open", "--skip-build"]
    process = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", "0"],
        env=env,
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:  # read to the end, so a chatty dashboard never blocks on its pipe
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    try:
        said: list[str] = []
        deadline = time.monotonic() + HERMES_START_SECONDS
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise RuntimeError(f"not ready after {HERMES_START_SECONDS} s") from None
            if line is None:
                last = " | ".join(text.strip() for text in said[-3:] if text.strip())
                raise RuntimeError(f"exited {process.wait()} before it was ready: {last}")
            said.append(line)
            if ready := HERMES_READY.search(line):
                break
        yield f"http://127.0.0.1:{ready.group(1)}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def time_hermes(python: Path, home: Path, size: int, runs: int) -> float:
    """Hermes's `GET /api/skills` over the library in `home`, best of `runs`, in ms."""
    token = secrets.token_urlsafe(32)
    with (
        hermes_dashboard(python, home, token) as url,
        httpx.Client(base_url=url, headers={HERMES_TOKEN_HEADER: token}, timeout=60) as client,
    ):
        listed = client.get("/api/skills")
        if listed.status_code != 200:
            raise RuntimeError(f"GET /api/skills: {listed.status_code} {listed.text[:300]}")
        if len(listed.json()) != size:
            raise RuntimeError(f"GET /api/skills listed {len(listed.json())} of {size} skills")
        return best_ms(page(client, "/api/skills"), runs)


def measure(root: Path, size: int, events: int, runs: int) -> list[tuple[str, float, float]]:
    """Each page against its command; last, skilld's `GET /api/skills` (its CLI side, the
    same `skills list --json`), the panel's figure Hermes's dashboard is set beside."""
    shown = build_library(root, size)
    fill_events(root / "state" / "state.db", events, shown)
    config = config_for(root)
    rows = []
    bearer = {"authorization": f"Bearer {BENCH_TOKEN}"}
    with serving(config) as url, httpx.Client(base_url=url, headers=bearer, timeout=60) as client:
        pairs: list[tuple[str, Callable[[], None], Callable[[], None]]] = [
            ("skills", page(client, "/skills"), cli(config, "skills", "list", "--json")),
            (
                "skill",
                page(client, f"/skills/{LIBRARY}/{shown}"),
                cli(config, "skills", "show", shown, "--json"),
            ),
            ("events", page(client, "/events"), cli(config, "events", "--json", "--limit", "50")),
            ("overview", page(client, "/"), cli(config, "status", "--json")),
            ("api", page(client, "/api/skills"), cli(config, "skills", "list", "--json")),
        ]
        for name, panel, command in pairs:
            rows.append((name, best_ms(panel, runs), best_ms(command, runs)))
    return rows


def measure_failures(
    root: Path, skills: int, failures: int, runs: int
) -> list[tuple[str, float, float]]:
    """The Failures page and the hot failure's page against `failures --json` and `failures
    show --json`, over `failures` recorded failures of `skills` learned skills."""
    config = load_config(build_failures(root, skills, failures, hot=min(10_000, failures // 10)))
    measure_as_a_tick(root / "state")
    hot = failure_id(HOT_SIGNATURE)
    bearer = {"authorization": f"Bearer {BENCH_TOKEN}"}
    with serving(config) as url, httpx.Client(base_url=url, headers=bearer, timeout=120) as client:
        pairs = [
            ("failures", page(client, "/failures"), cli(config, "failures", "--json")),
            (
                "failure",
                page(client, f"/failures/{hot}"),
                cli(config, "failures", "show", hot, "--json"),
            ),
        ]
        return [
            (name, best_ms(panel, runs), best_ms(command, runs)) for name, panel, command in pairs
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the log")
    parser.add_argument(
        "--failures", type=int, default=1_000_000, help="recorded failures (0: no failures rows)"
    )
    parser.add_argument("--failure-skills", type=int, default=1000, help="skills beside them")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per figure (the best)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run: seconds")
    parser.add_argument("--dir", type=Path, help="where to build (default: a temp dir)")
    parser.add_argument(
        "--hermes",
        type=Path,
        metavar="PYTHON",
        help="Hermes Agent's interpreter (default: the venv tests/interop/install makes)",
    )
    args = parser.parse_args()
    if args.hermes is not None and not args.hermes.is_file():
        parser.error(f"--hermes {args.hermes}: no such interpreter")
    hermes = args.hermes or default_hermes_python()
    hermes_skip = None if hermes.is_file() else f"no Hermes Agent at {hermes}"
    configure_logging("json", "error")
    sizes = [20] if args.smoke else [int(size) for size in args.sizes.split(",")]
    events = 500 if args.smoke else args.events
    runs = 1 if args.smoke else args.runs
    base = Path(tempfile.mkdtemp(prefix="skilld-bench-web-", dir=args.dir))
    missed = []
    try:
        print(f"{'skills':>7} {'events':>9} {'page':<7} {'panel ms':>9} {'cli ms':>8} {'ratio':>6}")
        for size in sizes:
            for log in sorted({events, min(events, 1000)}, reverse=True):
                root = base / f"{size}-{log}"
                pages = {}
                for name, panel_ms, cli_ms in measure(root, size, log, runs):
                    pages[name] = panel_ms
                    if name == "api" or (log != events and name != "events"):
                        continue
                    ratio = panel_ms / cli_ms if cli_ms else float("inf")
                    if ratio >= 2:
                        missed.append(f"{name} at {size} skills: {ratio:.2f}x")
                    print(
                        f"{size:>7,} {log:>9,} {name:<7} {panel_ms:>9.1f} {cli_ms:>8.1f}"
                        f" {ratio:>5.2f}x",
                        flush=True,
                    )
                if log == events and hermes_skip is None:
                    try:
                        hermes_ms = time_hermes(hermes, root, size, runs)
                    except RuntimeError as error:
                        hermes_skip = f"the dashboard failed at {size} skills: {error}"
                    else:
                        print(
                            f"{size:>7,} {'':>9} hermes  GET /api/skills {hermes_ms:.1f} ms;"
                            f" skilld's skills page {pages['skills']:.1f} ms"
                            f" ({hermes_ms / pages['skills']:.2f}x),"
                            f" its GET /api/skills {pages['api']:.1f} ms",
                            flush=True,
                        )
                shutil.rmtree(root, ignore_errors=True)
        failures = 10_000 if args.smoke else args.failures
        skills = 100 if args.smoke else args.failure_skills
        if failures:
            head = f"{'skills':>7} {'failures':>9} {'page':<8} {'panel ms':>9} {'cli ms':>8}"
            print(f"{head} {'ratio':>6}")
            for name, panel_ms, cli_ms in measure_failures(
                base / "failures", skills, failures, runs
            ):
                ratio = panel_ms / cli_ms if cli_ms else float("inf")
                if ratio >= 2:
                    missed.append(f"{name} at {failures:,} failures: {ratio:.2f}x")
                print(
                    f"{skills:>7,} {failures:>9,} {name:<8} {panel_ms:>9.1f} {cli_ms:>8.1f}"
                    f" {ratio:>5.2f}x",
                    flush=True,
                )
        if hermes_skip is not None:
            print(f"hermes dashboard: skipped: {hermes_skip}")
        print("targets: every page under 2x the CLI's read;", "missed: " + ", ".join(missed)
              if missed else "all met")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
