"""What `skilld doctor` and `skilld config` report: can this installation run, and with which
settings (`skilld.commands.ops` registers the commands).

`doctor` prints one line per check (`ok`, `warn` or `fail`) and exits 1 when any check fails.
Each check turns what it finds into a `Check` value; nothing here raises for a broken
installation, because reporting a broken installation is the point.

`config` prints the effective configuration as TOML that loads back to the same values, with
where each value came from as a trailing comment. The API key itself is never printed: only
the name of its variable and whether that variable is set.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from skilld.boundedjson import loads as bounded_loads
from skilld.config import SECTIONS, Config, SourceConfig
from skilld.errors import ConfigError
from skilld.fsutil import TEMP_MARKER, read_tree_file
from skilld.masking import mask_urls, masked_url
from skilld.routing import AGENTS, default_path, default_sources, resolve
from skilld.skills.usage import MAX_USAGE_BYTES, USAGE_FILE
from skilld.state import StateDB, StateError
from skilld.state.lock import process_alive

if TYPE_CHECKING:  # the LLM client (httpx) loads only when doctor probes the endpoint
    from skilld.llm import LLMError, LLMSettings

Status = Literal["ok", "warn", "fail"]

#: How many files of a transcript directory doctor opens to see that they are readable.
SAMPLED_FILES = 20
#: How many entries of a transcript directory doctor looks at, at most, to count sessions.
LISTED_FILES = 10_000
_PROBE_PREFIX = f".doctor{TEMP_MARKER}"
#: Where each kind keeps its session files under its root (what doctor counts and samples).
_SESSION_GLOBS = {
    "jsonl": "**/*.jsonl",
    "claude-code": "**/*.jsonl",
    "codex": "**/rollout-*.jsonl",
    "dsh": "*/*/session*.jsonl*",
}


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def format_check(check: Check) -> str:
    return f"{check.status:<4}  {check.name:<8}  {check.detail}"


# -- doctor: configuration and paths ---------------------------------------------------------


def check_config(config: Config) -> Check:
    from_env = sorted(key for key, origin in config.origins.items() if origin == "env")
    where = str(config.path.resolve()) if config.path else "no config file, built-in defaults"
    overrides = f"; from the environment: {', '.join(from_env)}" if from_env else ""
    return Check("config", "ok", where + overrides)


def configured_or_default_sources(config: Config) -> tuple[tuple[SourceConfig, ...], bool]:
    """The sources the daemon will read, and whether they are zero-config defaults."""
    if config.sources:
        return config.sources, False
    return default_sources(), True


def check_libraries(config: Config) -> list[Check]:
    """Every library: resolvable, writable with a working flock, a readable sidecar, a dialect
    its agent reads; no two libraries sharing a dir (resolution refuses that)."""
    try:
        routing = resolve(config)
    except ConfigError as exc:
        return [Check("library", "fail", str(exc))]
    if not routing.libraries:
        return [Check("library", "warn", "no library: no agent found and none configured")]
    checks = []
    fed: dict[str, list[str]] = {}  # library -> the kinds of every source feeding it
    for route in routing.routes:
        fed.setdefault(route.library, []).append(route.source.kind)
    for name, spec in routing.libraries.items():
        root = spec.dir
        label = f"{name} {root} ({spec.dialect})"
        problem = _ensure_directory(root) or _probe_write_and_flock(root)
        if problem:
            checks.append(Check("library", "fail", f"{label}: {problem}"))
            continue
        checks.append(Check("library", "ok", f"{label}: writable, flock works"))
        if corrupt := _usage_problem(root):
            checks.append(Check("library", "warn", corrupt))
        for kind in dict.fromkeys(fed.get(name, ())):
            expected = AGENTS[kind].dialect if kind in AGENTS else None
            if expected is not None and spec.dialect != expected:
                checks.append(
                    Check(
                        "library",
                        "warn",
                        f"{name}: fed by {kind}, whose agent reads the {expected} dialect, but "
                        f"the library writes {spec.dialect}",
                    )
                )
        for extra in spec.extra_dirs:
            if extra.is_dir() and os.access(extra, os.R_OK | os.X_OK):
                checks.append(Check("library", "ok", f"{extra}: readable (extra_dirs)"))
            else:
                checks.append(
                    Check("library", "warn", f"{extra}: missing or unreadable (extra_dirs)")
                )
    return checks


def source_path(spec: SourceConfig) -> Path | None:
    """Where a source reads: its `path`, else its kind's default (None: a kind without one)."""
    if spec.path is not None:
        return spec.path
    try:
        return default_path(spec.kind)
    except ValueError:
        return None


def check_sources(config: Config) -> list[Check]:
    sources, defaulted = configured_or_default_sources(config)
    if not sources:
        return [
            Check(
                "source",
                "warn",
                "no [[sources]] configured and no agent's default transcript location "
                "exists: the daemon has nothing to read",
            )
        ]
    checks = []
    for spec in sources:
        path = source_path(spec)
        if path is None:
            checks.append(Check("source", "fail", f"{spec.kind}: has no default path; set `path`"))
            continue
        status, finding = _inspect_source(spec, path)
        origin = " (found by default)" if defaulted else ""
        checks.append(Check("source", status, f"{spec.kind} {path}{origin}: {finding}"))
    return checks


def _inspect_source(spec: SourceConfig, path: Path) -> tuple[Status, str]:
    if not path.exists():
        return "warn", "does not exist yet; nothing to read until the agent writes there"
    if spec.kind == "hermes" or (spec.kind == "dsh" and path.is_file()):
        # Hermes keeps `messages`; DSH's optional SQLite store keeps `events`.
        return _inspect_database(path, "messages" if spec.kind == "hermes" else "events")
    if path.is_file():
        problem = _unreadable(path)
        return ("fail", problem) if problem else ("ok", "one session file, readable")
    if not os.access(path, os.R_OK | os.X_OK):
        return "fail", "directory is not readable by this user"
    pattern = spec.glob or _SESSION_GLOBS[spec.kind]
    try:
        files = [file for file in islice(path.glob(pattern), LISTED_FILES) if file.is_file()]
    except OSError as exc:
        return "fail", f"cannot list it: {exc.strerror or exc}"
    problems = [problem for file in files[:SAMPLED_FILES] if (problem := _unreadable(file))]
    if problems:
        sampled = min(len(files), SAMPLED_FILES)
        return "fail", f"{len(problems)} of {sampled} sampled files unreadable: {problems[0]}"
    more = "+" if len(files) == LISTED_FILES else ""
    if not files:
        return "warn", f"readable, but no session files match {pattern!r} yet"
    plural = "" if len(files) == 1 else "s"
    return "ok", f"readable, {len(files)}{more} session file{plural}"


def _unreadable(file: Path) -> str | None:
    try:
        with file.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        return f"{file}: {exc.strerror or exc}"
    return None


def _inspect_database(path: Path, table: str) -> tuple[Status, str]:
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=0.5)) as connection:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error as exc:
        return "fail", f"not a readable SQLite database: {exc}"
    if table not in tables:
        return "fail", f"a SQLite database without a {table} table"
    return "ok", f"readable SQLite database with a {table} table"


def _usage_problem(root: Path) -> str | None:
    usage = root / USAGE_FILE
    try:
        # Through the tree guard: a sidecar that is a link is reported, never read.
        raw = read_tree_file(root, USAGE_FILE, limit=MAX_USAGE_BYTES)
        if raw is None:
            return None
        bounded_loads(raw, limit=MAX_USAGE_BYTES)
    except (OSError, ValueError) as exc:  # UnsafePath and boundedjson's JSONRefused are too
        return (
            f"{usage} is unreadable or corrupt ({exc}); the daemon will copy it aside and "
            "rebuild it from what it can recover"
        )
    return None


def _ensure_directory(path: Path) -> str | None:
    if path.exists() and not path.is_dir():
        return "exists but is not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create it: {exc.strerror or exc}"
    return None


def _probe_write_and_flock(directory: Path) -> str | None:
    """Write a temp file in `directory` and check that flock on it works and is enforced.

    The usage sidecar is shared with other processes (Hermes, the CLI) through flock; on a
    filesystem where flock is refused, or silently grants every lock, updates get lost.
    """
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=_PROBE_PREFIX)
    except OSError as exc:
        return f"not writable: {exc.strerror or exc}"
    try:
        return _flock_problem(fd, name)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)


def _flock_problem(fd: int, name: str) -> str | None:
    try:
        os.write(fd, b"skilld doctor\n")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        rival = os.open(name, os.O_RDONLY)
    except OSError as exc:
        return f"flock fails on this filesystem: {exc.strerror or exc}"
    try:
        # A second open file description must be refused the lock the first one holds.
        fcntl.flock(rival, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    except OSError as exc:
        return f"flock fails on this filesystem: {exc.strerror or exc}"
    finally:
        os.close(rival)
    return "flock is not enforced on this filesystem (a second lock was granted)"


def check_state(config: Config) -> Check:
    directory = config.state.dir
    problem = _ensure_directory(directory) or _probe_writable(directory)
    if problem is not None:
        return Check("state", "fail", f"{directory}: {problem}")
    try:
        with StateDB(directory / "state.db") as state:
            heartbeat = state.get_meta("heartbeat")
            daemon = state.get_meta("daemon") or {}
    except (StateError, sqlite3.Error) as exc:
        return Check("state", "fail", f"{directory / 'state.db'}: {exc}")
    if heartbeat is None:
        alive = "no daemon has run yet"
    else:
        age = time.time() - float(heartbeat)
        interval = float(daemon.get("interval") or config.evolve.interval_seconds)
        # `skilld once` beats the heart too: only a live `skilld run` process is a daemon.
        fresh = age <= 3 * interval and process_alive(daemon.get("pid"))
        alive = (
            f"last heartbeat {age:.0f}s ago ({'daemon running' if fresh else 'no daemon running'})"
        )
    return Check("state", "ok", f"{directory / 'state.db'} opens; {alive}")


def _probe_writable(directory: Path) -> str | None:
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=_PROBE_PREFIX)
    except OSError as exc:
        return f"not writable: {exc.strerror or exc}"
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return None


# -- doctor: the LLM -------------------------------------------------------------------------


def check_api_key(config: Config) -> Check:
    variable = config.llm.api_key_env
    if config.llm.api_key() is None:
        return Check(
            "llm",
            "warn",
            f"${variable} is not set: fine for a server that needs no key (Ollama, llama.cpp)",
        )
    return Check("llm", "ok", f"${variable} is set")


def probe_settings(config: Config, timeout_seconds: float) -> LLMSettings:
    """One attempt, one token, no structured output: the cheapest request that proves the
    endpoint, the credentials and the model."""
    from skilld.llm import LLMSettings

    return LLMSettings(
        base_url=config.llm.base_url,
        model=config.llm.model,
        api_key=config.llm.api_key(),
        timeout_seconds=timeout_seconds,
        max_retries=0,
        response_format="none",
        max_concurrency=1,
        max_calls_per_hour=0,
        temperature=config.llm.temperature,
        max_tokens=1,
    )


async def probe_llm(settings: LLMSettings) -> LLMError | None:
    from skilld.llm import LLMClient, LLMError

    async with LLMClient(settings) as client:
        try:
            await client.chat([{"role": "user", "content": "Reply with OK."}])
        except LLMError as error:
            return error
    return None


def llm_verdict(config: Config, error: LLMError | None) -> Check:
    """What the probe's outcome means for a person fixing their setup."""
    from skilld.redact import redact

    url = redact(masked_url(config.llm.base_url)).text
    model = config.llm.model
    if error is None:
        return Check("llm", "ok", f"{url} answered a 1-token request with model {model!r}")
    status = f" (HTTP {error.status})" if error.status is not None else ""
    said = error.message
    # The client words a 404 as "endpoint or model not found: <server message>"; only what
    # the server said tells the two apart.
    server_said = said.partition(": ")[2]
    mentions_model = "model" in server_said.lower()
    if error.kind in ("transport", "timeout"):
        return Check("llm", "fail", f"unreachable: {url}: {said}")
    if error.kind == "auth":
        variable = config.llm.api_key_env
        key_state = "is set" if config.llm.api_key() else "is NOT set"
        return Check(
            "llm", "fail", f"auth failed{status} at {url}: check ${variable} ({key_state}); {said}"
        )
    if error.kind in ("not_found", "bad_request") and mentions_model:
        return Check("llm", "fail", f"model not found{status}: {model!r} at {url}; {said}")
    if error.kind == "not_found":
        return Check(
            "llm",
            "fail",
            f"not found{status}: {url}/chat/completions (does base_url need a /v1?); {said}",
        )
    if error.kind == "rate_limited" and error.retryable:
        return Check("llm", "warn", f"reachable but rate limited right now{status}; {said}")
    return Check("llm", "fail", f"{error.kind}{status} from {url}: {said}")


def check_team_libraries(config: Config) -> list[Check]:
    """Team libraries: git is there, and each work tree can sync (or the command that repairs
    it). A corrupt or diverged work tree is reported, never reset."""
    try:
        specs = [spec for spec in resolve(config).libraries.values() if spec.remote]
    except ConfigError:
        return []  # check_libraries reports it
    if not specs:
        return []
    from skilld.app import host_id, sync_aside_dir
    from skilld.sync import GitMissing, TeamRepo, git_version
    from skilld.team import meta_key, sync_findings

    try:
        version = git_version()
    except GitMissing as exc:
        return [Check("sync", "fail", f"{exc}; team libraries need the git command-line client")]
    checks = [Check("sync", "ok", f"{version}; host id {host_id(config.sync.host)}")]
    recorded = recorded_sync_rounds(config, [meta_key(spec.name) for spec in specs])
    for spec in specs:
        try:
            team = TeamRepo(
                spec.dir, spec.remote or "", host=host_id(config.sync.host), branch=spec.branch,
                aside_dir=sync_aside_dir(config),
            )  # fmt: skip
            status = team.status()
        except (ValueError, OSError) as exc:
            checks.append(Check("sync", "fail", f"{spec.name}: {exc}"))
            continue
        if not status.set_up:
            checks.append(
                Check(
                    "sync", "ok", f"{spec.name}: joins {masked_url(team.remote)} at its first sync"
                )
            )
        live = [f"{p.message} (repair: {p.repair})" for p in status.problems]
        findings = sync_findings(live, recorded.get(meta_key(spec.name), {}))
        for finding in findings:
            message, _, repair = finding.rpartition(" (repair: ")
            checks.append(Check("sync", "fail", f"{spec.name}: {message}; repair: {repair[:-1]}"))
        if status.set_up:
            # Already in the work tree (synced before skilld refused such files): each reads
            # as none until rewritten (the manifest by skilld's next change to the library, a
            # usage file by its host's next round).
            for unreadable in team.unreadable_files():
                checks.append(Check("sync", "warn", f"{spec.name}: {unreadable}; read as none"))
        if status.set_up and not findings:
            ahead = f", {status.ahead} commits to push" if status.ahead else ""
            checks.append(
                Check("sync", "ok", f"{spec.name}: work tree of {masked_url(team.remote)}{ahead}")
            )
    return checks


def recorded_sync_rounds(config: Config, keys: list[str]) -> dict[str, dict[str, Any]]:
    """What the last sync round of each library recorded in state.db (none yet: empty)."""
    path = config.state.dir / "state.db"
    if not path.exists():
        return {}
    try:
        with StateDB(path) as state:
            return {key: state.get_meta(key, {}) for key in keys}
    except (StateError, sqlite3.Error):
        return {}  # check_state reports it


def check_llm_learned(config: Config) -> list[Check]:
    """What the daemon learned of its model on its last tick: the `response_format` level
    the server accepts (confirmed by a reply, or not yet) and the context windows fit."""
    from skilld.reports.status import context_line, format_line

    health = recorded_sync_rounds(config, ["llm_health"]).get("llm_health") or {}
    if not health:
        return []
    confirmed = bool(health.get("response_format_confirmed"))
    return [
        Check("llm", "ok" if confirmed else "warn", format_line(health)),
        Check("llm", "ok", f"context {context_line(health)}"),
    ]


def check_guidance(config: Config) -> list[Check]:
    """`evolve.guidance_file`, when set, is readable text (the daemon would only warn)."""
    path = config.evolve.guidance_file
    if path is None:
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [Check("config", "fail", f"evolve.guidance_file {path}: {exc}")]
    return [Check("config", "ok", f"evolve.guidance_file {path}: {len(text):,} characters")]


def run_doctor(config: Config, *, llm_timeout: float, check_llm: bool) -> list[Check]:
    checks = [check_config(config), *check_guidance(config)]
    checks += check_sources(config)
    checks += check_libraries(config)
    checks += check_team_libraries(config)
    checks.append(check_state(config))
    checks.append(check_api_key(config))
    checks += check_llm_learned(config)
    if check_llm:
        import anyio

        try:
            settings = probe_settings(config, llm_timeout)
            error = anyio.run(probe_llm, settings)
        except ValueError as exc:  # a base_url that is not an absolute http(s) URL
            checks.append(Check("llm", "fail", f"llm.base_url: {exc}"))
        else:
            checks.append(llm_verdict(config, error))
    return checks


# -- config ----------------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A TOML literal for a config value (str, Path, bool, int, float, tuple of those)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return _toml_string(str(value))


def _toml_string(text: str) -> str:
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _printable(value: Any) -> Any:
    """Values as printed: URLs without credentials, every string through redaction."""
    from skilld.redact import redact

    if isinstance(value, str):
        return redact(mask_urls(value)).text
    return value


def _origin_comment(config: Config, dotted: str) -> str:
    origin = config.origins.get(dotted, "default")
    if origin == "env":
        section, _, key = dotted.partition(".")
        return f"env: SKILLD_{section.upper()}_{key.upper()}"
    return origin


def render_config(config: Config) -> Iterator[str]:
    yield "# skilld: the effective configuration"
    yield f"# config file: {config.path.resolve() if config.path else 'none (built-in defaults)'}"
    yield "# each value's origin is a trailing comment: default, file, or env (its variable)"
    for section in SECTIONS:
        yield ""
        yield f"[{section}]"
        for key, raw in getattr(config, section)._asdict().items():
            comment = _origin_comment(config, f"{section}.{key}")
            if raw is None:
                yield f"# {key} not set  # {comment}"
                continue
            value = _printable(raw)
            if section == "llm" and key == "api_key_env":
                key_state = "set" if config.llm.api_key() else "NOT set"
                comment += f"; ${value} is {key_state} (its value is never shown)"
            yield f"{key} = {toml_value(value)}  # {comment}"
    yield from _render_sources(config)
    yield from _render_libraries(config)


def _render_libraries(config: Config) -> Iterator[str]:
    """The libraries as resolved on this machine, and which source feeds which."""
    yield ""
    try:
        routing = resolve(config)
    except ConfigError as exc:
        yield f"# libraries: cannot be resolved: {exc}"
        return
    if not routing.libraries:
        yield "# no library: no agent found and none configured"
        return
    yield "# the libraries as resolved (each agent learns into the library it loads)"
    for name, spec in routing.libraries.items():
        yield "# [[libraries]]"
        yield f"# name = {toml_value(name)}"
        yield f"# dir = {toml_value(spec.dir)}"
        yield f"# dialect = {toml_value(spec.dialect)}"
        yield f"# layout = {toml_value(spec.layout)}"
        yield f"# max_managed = {spec.max_managed}"
        if spec.name_prefix:
            yield f"# name_prefix = {toml_value(spec.name_prefix)}"
        yield f"# project_dir = {toml_value(spec.project_dir or '')}"
        if spec.remote:
            yield f"# remote = {toml_value(masked_url(spec.remote))}"
            yield f"# branch = {toml_value(spec.branch)}"
    yield "# routing:"
    for route in routing.routes:
        yield f"#   {route.source.kind} {route.source.path} -> {route.library}"


def _render_sources(config: Config) -> Iterator[str]:
    if not config.sources:
        sources, _ = configured_or_default_sources(config)
        yield ""
        if not sources:
            yield "# no [[sources]] configured, and no agent's default location exists here"
            return
        yield "# no [[sources]] configured: the daemon reads these default locations"
        for spec in sources:
            yield "# [[sources]]"
            yield f"# kind = {toml_value(spec.kind)}"
            yield f"# path = {toml_value(spec.path)}"
        return
    for index, spec in enumerate(config.sources):
        yield ""
        yield "[[sources]]"
        for key, value in spec._asdict().items():
            comment = _origin_comment(config, f"sources[{index}].{key}")
            if value is None:
                default = source_path(spec) or "none for this kind: set it"
                yield f"# {key} not set: {default}  # {comment}"
                continue
            printed = toml_value(_printable(value))
            yield f"{key} = {printed}  # {comment}"
