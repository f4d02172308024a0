"""Wiring: one place that opens the state and every library from a Config."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from skilld.config import Config
from skilld.errors import ConfigError, UsageError
from skilld.fsutil import make_private, private_dir
from skilld.routing import (
    PROJECT_MARK,
    LibrarySpec,
    Routing,
    choose_library,
    nameable_agent_libraries,
    project_library,
    project_skills_dir,
    requested_library,
    require_real_project_dir,
    resolve,
    storage_key,
    with_named_library,
)
from skilld.skills.library import FileFacts, Library
from skilld.skills.usage import UsageStore
from skilld.state import StateDB


class App:
    """What a command works with: its configuration, the state and the libraries."""

    def __init__(
        self,
        config: Config,
        routing: Routing,
        state: StateDB,
        libraries: dict[str, Library],
        project_home: Path | None = None,
        nameable: Sequence[str] = (),
        file_facts: FileFacts | None = None,
    ) -> None:
        self.config = config
        self.routing = routing
        self.state = state
        #: The configured libraries by name (project libraries open on demand: `project`).
        self.libraries = libraries
        #: Where project libraries live instead of inside their projects (`replay`'s sandbox).
        self.project_home = project_home
        #: The agents' libraries the command could have named besides (its error lists them).
        self.nameable = nameable
        self._projects: dict[str, Library] = {}
        self._file_facts = file_facts

    @property
    def library(self) -> Library:
        """The only library (a single-library configuration; tests and tools rely on it)."""
        if len(self.libraries) != 1:
            raise UsageError(
                f"{len(self.libraries)} libraries are configured; name one with --library"
            )
        return next(iter(self.libraries.values()))

    def open_library(self, spec: LibrarySpec) -> Library:
        if spec.name in self.libraries:
            return self.libraries[spec.name]
        if spec.name not in self._projects:
            self._projects[spec.name] = _library(self.config, self.state, spec, self._file_facts)
        return self._projects[spec.name]

    def project(self, user: Library, root: Path) -> Library:
        """`root`'s project library for the agent of `user`."""
        spec = project_library(user.spec, root)
        if self.project_home is not None:
            spec = spec._replace(dir=self.project_home / spec.storage_key)
        return self.open_library(spec)

    def known_projects(self) -> list[Library]:
        """Project libraries skilld has written into, whose user library is configured and
        whose skills dir is still real folders inside the project (a link planted since leads
        elsewhere: that is no project library to list, curate or count)."""
        found = []
        for name in self.state.library_names():
            user, mark, root = name.partition(PROJECT_MARK)
            if not mark or user not in self.libraries:
                continue
            project_dir = self.libraries[user].spec.project_dir
            if not project_dir:
                continue
            if self.project_home is None and project_skills_dir(Path(root), project_dir) is None:
                continue
            found.append(self.project(self.libraries[user], Path(root)))
        return found

    def all_libraries(self) -> list[Library]:
        return [*self.libraries.values(), *self.known_projects()]

    def backfill_targets(self) -> int:
        """What each version written before targets were recorded targets, worked out once
        from its skill's body (`skilld.effect.record.backfill_targets`)."""
        from skilld.effect.record import backfill_targets

        libraries: dict[str, Library] | None = None

        def body_of(library: str, name: str) -> str | None:
            nonlocal libraries
            if libraries is None:
                libraries = {each.name: each for each in self.all_libraries()}
            chosen = libraries.get(library)
            if chosen is None:
                return None
            entry = chosen.entry(name)
            return entry.doc.body if entry is not None and entry.doc is not None else ""

        return backfill_targets(self.state, body_of)

    def select(self, name: str | None = None, *, skill: str | None = None) -> Library:
        """The library a command acts on: `name` (`--library`), else `$SKILLD_LIBRARY` (an
        agent's hook or MCP entry names its own), else the one that holds `skill`, else the
        only one. Raises UsageError listing the choices."""
        requested = requested_library(name)
        candidates = {library.name: library for library in self.all_libraries()}
        holding = []
        if requested is None and skill is not None:
            holding = [
                library.name
                for library in candidates.values()
                if library.entry(skill, parse=False) is not None or skill in library.archived()
            ]
        chosen = choose_library(
            list(candidates),
            configured=len(self.libraries),
            requested=requested,
            holding=holding,
            skill=skill,
            nameable=self.nameable,
        )
        return candidates[chosen]


def report_corrupt_usage(state: StateDB, library: str, copy: Path, reason: str) -> None:
    """The event a person looks for when a `.usage.json` was found corrupt and rebuilt."""
    state.add_event(
        "usage_corrupt",
        library=library,
        reason=reason,
        detail={"copied_to": str(copy), "file": str(copy.parent / ".usage.json")},
    )


def host_id(configured: str) -> str:
    """This machine's id in the team: `[sync] host`, else the hostname made a usable id."""
    if configured:
        return configured
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", os.uname().nodename).strip("-._")
    return (name or "host")[:63]


def sync_aside_dir(config: Config) -> Path:
    """Where a repair moves a library's broken git metadata: the state dir, never the work
    tree (a join there would commit it)."""
    return config.state.dir / "sync-aside"


def _library(
    config: Config, state: StateDB, spec: LibrarySpec, file_facts: FileFacts | None = None
) -> Library:
    def on_corrupt(copy: Path, reason: str) -> None:
        report_corrupt_usage(state, spec.name, copy, reason)

    team = None
    if spec.remote:
        from skilld.sync import TeamRepo

        try:
            team = TeamRepo(
                spec.dir, spec.remote, host=host_id(config.sync.host), branch=spec.branch,
                aside_dir=sync_aside_dir(config),
            )  # fmt: skip
        except ValueError as exc:
            raise ConfigError(str(exc), f"libraries.{spec.name}.remote") from None

    def guard() -> None:
        require_real_project_dir(spec)

    return Library(
        spec,
        state,
        UsageStore(
            spec.dir,
            on_corrupt=on_corrupt,
            guard=guard if spec.project_root is not None else None,
        ),
        team=team,
        history_dir=config.state.dir / "history" / f"{PROJECT_MARK}{spec.storage_key}",
        locks_dir=config.state.dir / "locks",
        file_facts=file_facts,
    )


@contextlib.contextmanager
def open_app(
    config: Config,
    *,
    prepare: bool = False,
    project_home: Path | None = None,
    requested: str | None = None,
    file_facts: FileFacts | None = None,
) -> Iterator[App]:
    """Open the state and the libraries; `prepare` also creates dirs and removes stray temps.
    `requested` is the library a command names explicitly (`--library`): an agent's own is
    opened even before that agent has run here (`with_named_library`). `file_facts`: what a
    long-lived caller remembers of the skill files between opens (`FileFacts`)."""
    routing = with_named_library(resolve(config), config, requested)
    nameable = nameable_agent_libraries(config) if requested is not None else ()
    # A state dir made before skilld kept it private, or opened up by hand, is repaired first.
    repaired = make_private(config.state.dir)
    state = StateDB(config.state.dir / "state.db")
    try:
        if repaired:
            state.add_event(
                "permissions_repaired",
                reason=f"{len(repaired)} paths in {config.state.dir} were open to other users",
                detail={"paths": repaired[:50]},
            )
        libraries = {
            name: _library(config, state, spec, file_facts)
            for name, spec in routing.libraries.items()
        }
        orphans = [
            name
            for name in state.library_names()
            if name not in libraries and name.partition(PROJECT_MARK)[0] not in libraries
        ]
        for library in libraries.values():
            if orphans:
                _adopt(state, library, orphans, config.state.dir / "history")
            if prepare:
                library.root.mkdir(parents=True, exist_ok=True)
                library.prepare()
        yield App(config, routing, state, libraries, project_home, nameable, file_facts)
    finally:
        state.close()


def _adopt(state: StateDB, library: Library, orphans: list[str], history_root: Path) -> None:
    """Skills skilld wrote into this library's folder under another library's name (one no
    longer configured, or none: before libraries existed) are this library's; their saved
    versions move into its history."""
    for orphan, name in state.adopt_provenance(library.name, library.root, orphans):
        old_history = history_root / (f"{PROJECT_MARK}{storage_key(orphan)}" if orphan else "")
        saved = old_history / name
        if saved.is_dir() and not (library.history_dir / name).exists():
            private_dir(library.history_dir)
            with contextlib.suppress(OSError):
                os.replace(saved, library.history_dir / name)
