"""`skilld replay`: the whole evolution pipeline over existing transcripts, in a sandbox.

Replay runs the daemon's own Evolver (sources, gates, redaction, prompt, LLM, contract,
validation, ownership, near-duplicate guard) against a throwaway configuration whose skills dir
is `<out>/skills` and whose state dir is `<out>/state`. Nothing real is written: the real skills
dir is only read (its skill files are copied), the real state.db is only read (through a
query-only connection, backed up into a snapshot), and the real `.usage.json` is only copied.

Why the sandbox starts as a copy of the real library: the daemon would decide against the
skills that exist. Without them a replay would "create" a skill the daemon would refuse
(a person's skill under that name is `protected`), or create a near-duplicate the daemon would
turn into an update of its own skill, or ignore `skills.max_managed`. So the sandbox holds a
copy of every skill file, the provenance of the skills skilld wrote (their hashes still match
the copies, so they stay `managed`), the pins (a copy of `.usage.json`) and the bundled and hub
markers. Proposals then land in `<out>/skills` exactly as the daemon would write them, beside
the copies; the report names each one.

A dry run uses the same path up to the HTTP transport, which answers in-process (every window
declined) instead of sending: the windows, their order, the `--limit` and the redaction are
the real ones, the input tokens are estimated from the exact prompts, and no request leaves.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from skilld.app import App, open_app
from skilld.config import Config, LibraryConfig, SourceConfig
from skilld.evolve.backlog import backlog
from skilld.evolve.report import WindowRecord
from skilld.evolve.supervisor import Evolver
from skilld.evolve.wiring import bind_sources, llm_settings
from skilld.fsutil import UnsafePath, read_tree_file, write_tree_file
from skilld.llm import LLMClient
from skilld.routing import Routing, resolve
from skilld.skills.document import render_skill
from skilld.skills.library import BUNDLED_MANIFEST, HUB_LOCK, SKILL_FILE, Library
from skilld.skills.names import form_of
from skilld.skills.usage import USAGE_FILE
from skilld.state import Provenance, StateDB

#: Outcomes that leave a file under `<out>`: a skill in `<out>/skills`, or a staged proposal.
WRITTEN = ("created", "updated", "staged")
#: Outcome counts every report states, even when zero.
REPORTED_OUTCOMES = (
    "created",
    "updated",
    "unchanged",
    "skipped",
    "invalid",
    "protected",
    "cap",
    "staged",
    "error",
)


class ReplayError(ValueError):
    """The replay cannot start as asked (bad options, an unsafe --out): bad usage."""


@dataclass(frozen=True)
class ReplayOptions:
    out: Path
    since: str | None = None  # a duration: files modified longer ago are not read
    source_kind: str | None = None
    limit: int | None = None  # at most this many windows are sent
    dry_run: bool = False
    #: A system prompt to try instead of skilld's own (same placeholders).
    system_prompt: str | None = None


@dataclass(frozen=True, slots=True)
class WindowRow:
    session: str
    first_message: int
    last_message: int
    outcome: str  # "would send" in a dry run
    skill: str | None
    calls: int
    prompt_tokens: int
    completion_tokens: int
    estimated: bool
    path: str | None  # the skill file it would become, under --out, if any
    library: str | None = None
    merge_calls: int = 0  # of `calls`, those that merged a change into an existing skill
    #: The failures of the window the proposal is meant to end (their signatures).
    targets: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "library": self.library,
            "messages": [self.first_message, self.last_message],
            "outcome": self.outcome,
            "skill": self.skill,
            "calls": self.calls,
            "merge_calls": self.merge_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "estimated": self.estimated,
            "path": self.path,
            "targets": list(self.targets),
        }


@dataclass
class ReplayReport:
    dry_run: bool
    out: Path | None  # None when a dry run's temporary sandbox was removed
    sources: list[str]
    since: str | None
    seeded_skills: int
    max_calls_per_hour: int  # the spend cap the daemon works under (0: none)
    rows: list[WindowRow] = field(default_factory=list)
    redactions: Counter[str] = field(default_factory=Counter)
    not_sent: int = 0  # windows that were ready but not sent (limit, spend cap, LLM down)
    stopped: str | None = None  # why windows were left unsent, when they were
    circuit_open: bool = False  # the LLM failed repeatedly and the client stopped calling it
    outage: str | None = None  # the LLM could not answer (its last failure)
    source_errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """The LLM failed on some window: the preview is incomplete."""
        return (
            self.circuit_open
            or self.outage is not None
            or any(row.outcome == "error" for row in self.rows)
        )

    def totals(self) -> dict[str, Any]:
        outcomes = Counter(row.outcome for row in self.rows)
        prompt = sum(row.prompt_tokens for row in self.rows)
        completion = sum(row.completion_tokens for row in self.rows)
        totals: dict[str, Any] = {
            "windows": len(self.rows),
            "calls": sum(row.calls for row in self.rows),
            "merge_calls": sum(row.merge_calls for row in self.rows),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "estimated": any(row.estimated for row in self.rows),
        }
        if not self.dry_run:
            totals.update({outcome: outcomes[outcome] for outcome in REPORTED_OUTCOMES})
        totals["redactions"] = sum(self.redactions.values())
        totals["not_sent"] = self.not_sent
        return totals

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "out": str(self.out) if self.out is not None else None,
            "sources": self.sources,
            "since": self.since,
            "seeded_skills": self.seeded_skills,
            "max_calls_per_hour": self.max_calls_per_hour,
            "windows": [row.as_dict() for row in self.rows],
            "redactions": dict(self.redactions),
            "stopped": self.stopped,
            "source_errors": self.source_errors[:20],
            "totals": self.totals(),
        }


# -- the sandbox configuration (pure) -----------------------------------------------------------


def replay_routes(routing: Routing, source_kind: str | None) -> list[SourceConfig]:
    """The sources the daemon would read (configured, else found), optionally of one kind, each
    naming its library."""
    routes = [route.source._replace(library=route.library) for route in routing.routes]
    if source_kind is not None:
        routes = [source for source in routes if source.kind == source_kind]
        if not routes:
            raise ReplayError(f"no {source_kind} source is configured or found on this machine")
    if not routes:
        raise ReplayError("no transcript source is configured or found on this machine")
    return routes


def sandbox_dir(out: Path, library: str) -> Path:
    from skilld.routing import storage_key

    return out / "skills" / storage_key(library)


def sandbox_config(config: Config, routing: Routing, options: ReplayOptions) -> Config:
    """The daemon's configuration, pointed at `<out>`, reading every window at once.

    Every library keeps its rules (dialect, layout, cap, prefix, project dir) and gets a dir
    under `<out>/skills/`; every source keeps its library. `backfill` becomes the `--since`
    filter (else "all": the sandbox's first run reads every file from its start); no cooldown,
    so a session's windows follow each other; one attempt per window, so a failing window is
    reported instead of retried on later ticks. A dry run makes no call, so the spend cap has
    nothing to count.
    """
    libraries = tuple(
        LibraryConfig(
            name=spec.name,
            dir=sandbox_dir(options.out, spec.name),
            dialect=spec.dialect,  # type: ignore[arg-type]
            layout=spec.layout,  # type: ignore[arg-type]
            max_managed=spec.max_managed,
            name_prefix=spec.name_prefix,
            project_dir=spec.project_dir or "",
        )
        for spec in routing.libraries.values()
    )
    evolve = config.evolve._replace(
        backfill=options.since or "all", cooldown_seconds=0, max_attempts=1
    )
    llm = config.llm._replace(max_calls_per_hour=0) if options.dry_run else config.llm
    origins = {key: origin for key, origin in config.origins.items() if key != "skills.dir"}
    return config._replace(
        libraries=libraries,
        state=config.state._replace(dir=options.out / "state"),
        sources=tuple(replay_routes(routing, options.source_kind)),
        evolve=evolve,
        llm=llm,
        origins=origins,
    )


def check_out_dir(out: Path, config: Config) -> None:
    """`--out` must be new or empty, and apart from the real skills and state dirs."""
    resolved = out.resolve()
    reals = [
        (spec.dir, f"skills dir of library {name}")
        for name, spec in resolve(config).libraries.items()
    ]
    for real, what in [*reals, (config.state.dir, "state dir")]:
        real = real.resolve()
        if resolved == real or resolved.is_relative_to(real) or real.is_relative_to(resolved):
            raise ReplayError(f"--out {out} overlaps the real {what} {real}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReplayError(f"--out {out} must be an empty directory or not exist yet")


# -- seeding: copies of what the daemon would decide against -------------------------------------


def read_provenance(state_db: Path) -> list[Provenance]:
    """Provenance rows of the real state.db, which is never written.

    The connection is query-only and never creates the file; the rows are read from a backup
    in a temporary file, so that the real database is opened by no code that could migrate it.
    """
    if not state_db.is_file():
        return []
    with tempfile.TemporaryDirectory(prefix="skilld-replay-") as scratch:
        snapshot = Path(scratch) / "state.db"
        source = sqlite3.connect(f"{state_db.resolve().as_uri()}?mode=rw", uri=True)
        try:
            source.execute("PRAGMA query_only = 1")
            target = sqlite3.connect(snapshot)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
        with StateDB(snapshot) as copy:
            rows = copy.conn.execute("SELECT * FROM provenance").fetchall()
            return [Provenance(**dict(row)) for row in rows]


def seed_library(real_root: Path, sandbox_root: Path) -> list[tuple[str, Path]]:
    """Copy each skill file (one level deep, as discovery reads them) and the ownership markers.

    A skill that links out of the real root is one the daemon ignores (listed as broken, never
    written); it is linked to the same target from the sandbox, where it links out too.
    Returns (name, sandbox path) of every skill copied.
    """
    sandbox_root.mkdir(parents=True, exist_ok=True)
    seeded: list[tuple[str, Path]] = []
    real = real_root.resolve() if real_root.exists() else real_root
    for name, relative in _skill_files(real_root):
        source = real_root / relative
        target = sandbox_root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        resolved = source.resolve()
        try:
            if resolved == real or real in resolved.parents:
                shutil.copyfile(source, target)
            else:
                os.symlink(resolved, target)
        except OSError:
            continue  # unreadable: the daemon lists it as broken; there is nothing to copy
        seeded.append((name, target))
    for marker in (USAGE_FILE, BUNDLED_MANIFEST, HUB_LOCK):
        try:
            data = read_tree_file(real_root, marker)
        except UnsafePath:
            continue  # a link the daemon refuses to read as well: the sandbox goes without
        if data is not None:
            write_tree_file(sandbox_root, marker, data, durable=False)
    return seeded


def _skill_files(root: Path, depth: int = 3) -> Iterator[tuple[str, Path]]:
    try:
        children = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:
        return
    for child in children:
        if child.name.startswith("."):
            continue
        if child.is_dir():
            if (Path(child.path) / SKILL_FILE).exists():
                yield child.name, Path(child.name) / SKILL_FILE
            elif depth > 1 and not child.is_symlink():  # a category folder (Hermes)
                for name, relative in _skill_files(Path(child.path), depth - 1):
                    yield name, Path(child.name) / relative
        elif child.name.endswith(".md") and child.is_file():
            yield child.name[:-3], Path(child.name)


def seed_provenance(
    library: Library, real_root: Path, seeded: list[tuple[str, Path]], real: list[Provenance]
) -> None:
    """Skills skilld wrote stay skilld's in the sandbox: same hashes, the copies' paths.

    Only ownership is carried over, not the window each skill came from: a provenance row
    naming a session and a message range is what a write cut short by a crash looks like.
    """
    prefix = str(real_root).rstrip("/") + "/"
    mine = {
        record.name: record
        for record in real
        if record.library == library.name
        or (record.library == "" and record.path.startswith(prefix))
    }
    with library.state.transaction():
        for name, path in seeded:
            record = mine.get(name)
            if record is None:
                continue
            library.state.put_provenance(
                library.name,
                name,
                path=str(path),
                sha256=record.sha256,
                prev_sha256=record.prev_sha256,
                model=record.model,
                prompt_version=record.prompt_version,
            )


# -- the dry run's transport ---------------------------------------------------------------------


class DeclineTransport(httpx.AsyncBaseTransport):
    """Answers every chat request in-process with a decline: a dry run sends nothing."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        decline = json.dumps({"evolve": False, "reason": "dry run: not sent"})
        body = {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": decline},
                    "finish_reason": "stop",
                }
            ]
        }
        return httpx.Response(200, json=body, request=request)


# -- the run -----------------------------------------------------------------------------------


async def run_replay(config: Config, options: ReplayOptions) -> ReplayReport:
    """Replay into `options.out` (which `check_out_dir` accepted). Raises ReplayError."""
    routing = resolve(config)
    sandbox = sandbox_config(config, routing, options)
    real_provenance = read_provenance(config.state.dir / "state.db")
    seeded = {
        name: seed_library(spec.dir, sandbox_dir(options.out, name))
        for name, spec in routing.libraries.items()
    }
    report = ReplayReport(
        dry_run=options.dry_run,
        out=options.out,
        sources=[],
        since=options.since,
        seeded_skills=sum(len(files) for files in seeded.values()),
        max_calls_per_hour=config.llm.max_calls_per_hour,
    )
    transport = DeclineTransport() if options.dry_run else None
    with open_app(sandbox, prepare=True, project_home=options.out / "projects") as app:
        for name, files in seeded.items():
            seed_provenance(
                app.libraries[name], routing.libraries[name].dir, files, real_provenance
            )
        bindings = bind_sources(sandbox, app.routing)
        report.sources = [binding.id for binding in bindings]
        async with LLMClient(llm_settings(sandbox), transport=transport) as llm:
            evolver = Evolver(app, llm, bindings, system_prompt=options.system_prompt)
            evolver.window_allowance = options.limit
            records: list[WindowRecord] = []
            errors: dict[str, None] = {}  # each source error once, however many ticks saw it
            while True:
                tick = await evolver.tick()
                records.extend(tick.records)
                errors.update(dict.fromkeys(tick.source_errors))
                if tick.outage is not None:
                    report.outage = tick.outage
                    break  # the LLM cannot answer: what is left is reported as not sent
                if not tick.records:
                    break  # nothing was ready, or the limit or the LLM stopped the run
            health = llm.health()
        report.source_errors = list(errors)
        # Windows settle in whatever order their calls finish; list them as they were taken:
        # oldest session first, each session's windows in order.
        mtimes = {key: _session_mtime(app, key) for key in {r.session for r in records}}
        records.sort(key=lambda r: (mtimes[r.session], r.session, r.first_message))
        report.rows = [_row(record, app, options) for record in records]
        for event in app.state.events(kinds=("redacted",)):
            report.redactions.update(event.detail.get("counts", {}))
        report.circuit_open = health.get("circuit") != "closed"
        report.not_sent = backlog(app)["windows"]
        if report.not_sent:
            report.stopped = _why_stopped(evolver, health, options.limit, report.outage)
    return report


def _session_mtime(app: App, key: str) -> float:
    session = app.state.session(key)
    return session.mtime if session is not None and session.mtime is not None else 0.0


def _row(record: WindowRecord, app: App, options: ReplayOptions) -> WindowRow:
    spend = record.spend
    path = record.path if record.outcome in WRITTEN else None
    if record.outcome == "staged" and path is not None and record.skill is not None:
        path = str(_render_staged(app, Path(path), options.out))
    return WindowRow(
        session=record.session,
        first_message=record.first_message,
        last_message=record.last_message,
        outcome="would send" if options.dry_run else record.outcome,
        skill=record.skill,
        # A dry run's "reply" is the in-process decline: nothing was called or generated.
        calls=0 if options.dry_run else spend.calls,
        prompt_tokens=spend.prompt_tokens,
        completion_tokens=0 if options.dry_run else spend.completion_tokens,
        estimated=options.dry_run or spend.estimated,
        path=path,
        library=record.library,
        merge_calls=spend.merge_calls,
        targets=record.targets,
    )


def _render_staged(app: App, staged_json: Path, out: Path) -> Path:
    """A staged proposal as the skill file it would become once approved, under
    `<out>/staged/<library>/`: what a person diffs between two prompts."""
    from skilld.evolve.review import _read

    item = _read(staged_json)
    if item is None:
        return staged_json
    spec = app.routing.libraries.get(item.library.partition("@")[0])
    dialect = form_of(spec.dialect, spec.agent) if spec is not None else "dsh"
    target = out / "staged" / staged_json.parent.name / item.name / SKILL_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_skill(item.doc(), dialect), encoding="utf-8")
    return target


def _why_stopped(
    evolver: Evolver, health: dict[str, Any], limit: int | None, outage: str | None
) -> str:
    if limit is not None and evolver.window_allowance == 0:
        return f"--limit {limit} reached"
    if outage is not None:
        return f"the LLM could not answer: {outage}"
    if health.get("circuit") != "closed":
        error = (health.get("last_error") or {}).get("message") or "repeated failures"
        return f"the LLM circuit opened: {error}"
    cap = health.get("max_calls_per_hour") or 0
    if cap and health.get("calls_last_hour", 0) >= cap:
        return f"llm.max_calls_per_hour ({cap}) reached"
    return "held back by the gates (e.g. skills.max_managed reached)"


def default_out_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="skilld-replay-"))
