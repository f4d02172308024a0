"""A skill library: ownership, and every change to a skill file.

Beside it: `discovery` (finding and reading the skill files, with the file-facts cache),
`ownership` (whose a file is, and the cap's count), `history` (saved versions), `lock` (the
writer lock), `outcomes` (what a write came to, and recording it), `trigger_repair` (the
start-up repair of old shell triggers) and `team_tree` (what a team library's git work tree is
asked for: `skilld.sync` implements it, so this package never imports sync).

This module owns the ownership invariant (docs/design.md): skilld changes a file only if skilld
wrote it and nobody changed it since, and never a pinned one. It owns the library's cap too:
`write` refuses a new managed skill beyond `max_managed`.

A write returns an outcome value (`Written`, `Unchanged`, `Refused`, `WriteFailed`) and records
nothing in the event log; its caller commits the outcome (`commit`) together with its own
bookkeeping, in one transaction. Person-driven operations (delete, archive, restore, rollback,
pin) record their own events.

Crash safety of ownership: before a file is replaced, its provenance row is committed with the
new hash *and* the old one (`prev_sha256`). Whichever of the two a crash leaves on disk, the file
is still recognised as skilld's, so a repeated attempt rewrites it instead of calling it human.
Writers of one library (the daemon, the CLI, the MCP server) take the library's lock around
reading, writing and recording a file, so one never sees another's half-recorded write.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from skilld.digest import sha256_hex
from skilld.errors import LibraryError, NotFound, Protected
from skilld.fsutil import (
    UnsafePath,
    contained_path,
    move_in_tree,
    remove_stray_temps,
    remove_tree_file,
    tree_path,
    write_tree_file,
)
from skilld.log import get_logger
from skilld.routing import LibrarySpec, require_real_project_dir
from skilld.skills.discovery import (
    EXTRA_RANK,
    USER_RANK,
    Discovery,
    FileFacts,
    Layout,
    Owner,
    SkillEntry,
    archived_skills,
)
from skilld.skills.document import (
    SkillDoc,
    neutralise_file,
    render_skill,
    same_text,
    validate_skill,
)
from skilld.skills.layout import ARCHIVE_DIR, MAX_CATEGORY_DEPTH, SKILL_FILE
from skilld.skills.lock import WriterLock
from skilld.skills.names import InvalidName, form_of, is_safe_path_component, validate_name
from skilld.skills.ownership import (
    BUNDLED_MANIFEST,
    HUB_LOCK,
    ManagedCount,
    bundled_names,
    hub_names,
    owner_rule,
)
from skilld.skills.usage import Record, UsageStore, new_record
from skilld.state import DISOWNED

if TYPE_CHECKING:
    from skilld.skills.history import HistoryVersion, VersionHistory
    from skilld.skills.outcomes import Deleted, Origin, Unchanged, WriteOutcome, Written
    from skilld.skills.team_tree import SharedManifest, TeamTree, WrittenFile
    from skilld.state import Provenance, StateDB

__all__ = [
    "BUNDLED_MANIFEST",
    "EXTRA_RANK",
    "HUB_LOCK",
    "USER_RANK",
    "FileFacts",
    "Layout",
    "Library",
    "Owner",
    "SkillEntry",
]


class Library:
    def __init__(
        self,
        spec: LibrarySpec,
        state: StateDB,
        usage: UsageStore,
        *,
        history_dir: Path,
        locks_dir: Path,
        team: TeamTree | None = None,
        clock: Callable[[], float] = time.time,
        file_facts: FileFacts | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.root = spec.dir
        self.state = state
        self.usage = usage
        self.history_dir = history_dir
        self.dialect = spec.dialect
        #: What the library writes: its dialect, shaped for the agent that loads it.
        self.form = form_of(spec.dialect, spec.agent)
        self.layout: Layout = "flat" if spec.layout == "flat" else "dir"
        self.extra_dirs = spec.extra_dirs
        self.max_managed = spec.max_managed
        self.max_content_chars = spec.max_content_chars
        self.history_keep = spec.history_keep
        #: The git work tree of a team library (`remote` set): every change is one commit.
        self.team = team
        self._lock = WriterLock(locks_dir / f"{spec.storage_key}.lock")
        self._managed = ManagedCount(self.root, file_facts)
        self._clock = clock
        self.discovery = Discovery(
            self.root,
            extra_dirs=spec.extra_dirs,
            recursive=spec.recursive,
            flat_files=self.layout == "flat" or self.dialect == "dsh",
            form=self.form,
            file_facts=file_facts,
        )
        self._versions: VersionHistory | None = None
        self._log = get_logger("skilld.library")

    # -- start-up ----------------------------------------------------------------------------

    def prepare(self) -> list[Path]:
        """Create the skills dir and remove temp files a crash left behind (history too)."""
        self._ensure_root()
        return (
            remove_stray_temps(self.root, depth=MAX_CATEGORY_DEPTH + 1)
            + remove_stray_temps(self.root / ARCHIVE_DIR, depth=2)
            + remove_stray_temps(self.history_dir, depth=2)
        )

    # -- discovery ---------------------------------------------------------------------------

    def discover(
        self,
        *,
        include_extra: bool = True,
        parse: bool = True,
        provenance: Mapping[str, Provenance] | None = None,
    ) -> list[SkillEntry]:
        """Every skill, one per name (lowest rank wins), sorted by name.

        `parse=False` leaves `doc` unset and checks each file without a YAML parser
        (`quick_problem`): ownership needs only each file's hash, and parsing the frontmatter
        is most of the cost of listing a large library. `provenance`: the library's
        `all_provenance`, when the caller has read it already.
        """
        return self._discover(
            include_extra=include_extra, parse=parse, only=None, provenance=provenance
        )

    def entries(self, *, parse: bool = True) -> list[SkillEntry]:
        """The skills in this library's own root: what it may change and what its cap counts."""
        return self._discover(include_extra=False, parse=parse, only=None)

    def entry(self, name: str, *, parse: bool = True) -> SkillEntry | None:
        """`name` in this library's own root. A skill of the same name in an extra dir shadows
        it for the agent, not for skilld: writes, the cap and the curator see this one."""
        if not is_safe_path_component(name):
            return None  # discovery never lists such a name either
        if self.spec.recursive:
            return next((e for e in self.entries(parse=parse) if e.name == name), None)
        # Only `name`'s own paths are looked at, so that every change (write, archive, delete)
        # costs the same in a library of ten skills or of ten thousand.
        found = self._discover(include_extra=False, parse=parse, only=name)
        return found[0] if found else None

    def get(self, name: str) -> SkillEntry | None:
        """`name` as listed: this library's own, else one in an extra dir."""
        own = self.entry(name)
        if own is not None or not self.extra_dirs or not is_safe_path_component(name):
            return own
        found = self._discover(include_extra=True, parse=True, only=name)
        return found[0] if found else None

    def usage_records(self) -> dict[str, dict[str, Any]]:
        """The usage records to judge skills by: in a team library the team's sum (a teammate's
        uses count, so no host archives a skill the team uses), else this host's."""
        local = self.usage.read()
        return self.team.team_usage(local) if self.team is not None else local

    def listed_usage(self) -> tuple[dict[str, dict[str, Any]], str | None]:
        """`usage_records` for what only shows them (a listing, a page), and why this host's
        sidecar was not read: a refused one (`UsageStore.read_listed`) shows as no records."""
        local, refused = self.usage.read_listed()
        return (self.team.team_usage(local) if self.team is not None else local), refused

    def managed_names(self) -> list[str]:
        """Skills skilld wrote and nobody changed since, by hash: what the cap counts
        (`ManagedCount`)."""
        return self._managed.names(
            self.state.all_provenance(self.name),
            self._team_manifest(),
            excluded=self._bundled_names() | self._hub_names(),
        )

    def _discover(
        self,
        *,
        include_extra: bool,
        parse: bool,
        only: str | None,
        provenance: Mapping[str, Provenance] | None = None,
    ) -> list[SkillEntry]:
        bundled, hub = self._bundled_names(), self._hub_names()
        team = self._team_manifest()
        if provenance is None:
            if only is None:
                provenance = self.state.all_provenance(self.name)
            else:
                record = self.state.provenance(self.name, only)
                provenance = {only: record} if record else {}

        owner_of = owner_rule(bundled, hub, provenance, team)
        return self.discovery.discover(
            owner_of, include_extra=include_extra, parse=parse, only=only
        )

    def team_seed(self) -> dict[str, WrittenFile]:
        """What this host's provenance vouches for, to start a team's manifest (`team_seed`)."""
        from skilld.skills.team_tree import team_seed

        assert self.team is not None
        return team_seed(self.team, self.state.all_provenance(self.name))

    def _team_manifest(self) -> SharedManifest | None:
        return self.team.readable_manifest() if self.team is not None else None

    @contextlib.contextmanager
    def _recorded(
        self,
        event: str,
        name: str,
        origin: Origin,
        paths: list[Path],
        written: Path | None,
        digest: str | None = None,
    ) -> Iterator[None]:
        """Around one change of the files of `name`: in a team library it is one commit naming
        the event, the skill and the session, with the manifest entry of what skilld wrote
        (`written` with `digest`, or no entry when the skill left the live library). A project's
        skills dir is checked again here, right before its files change: a link planted since
        skilld decided to write there is never followed."""
        require_real_project_dir(self.spec)
        if self.team is None:
            yield
            return
        from skilld.skills.team_tree import SkillChange, WrittenFile

        shared = WrittenFile(self.team.relpath(written), digest or "") if written else None
        change = SkillChange(event, name, paths, shared, origin.session, origin.git)
        with self.team.skill_change(change, self.team_seed):
            yield

    def _bundled_names(self) -> set[str]:
        return bundled_names(self.root)

    def _hub_names(self) -> set[str]:
        return hub_names(self.root)

    # -- guards ------------------------------------------------------------------------------

    def check_name(self, name: str) -> str:
        try:
            return validate_name(name, dialect=self.dialect)
        except InvalidName as exc:
            raise LibraryError(str(exc)) from None

    def usage_record(self, name: str, records: Mapping[str, Record] | None = None) -> Record | None:
        """`name`'s usage record: from `records` when the caller read the sidecar already (an
        operation over many skills reads it once and passes it down), else from the file."""
        return records.get(name) if records is not None else self.usage.get(name)

    def protection(
        self, entry: SkillEntry, record: Record | None, *, force: bool = False
    ) -> str | None:
        """Why `entry` may not change, or None: only managed, unpinned skills change; `force`
        lets a person take over a human one. `record` is the skill's usage record (its pin)."""
        if record and record.get("pinned"):
            return f"{entry.name} is pinned"
        if entry.owner == "managed" or (force and entry.owner == "human"):
            return None
        return f"{entry.name} is owned by {entry.owner}, not skilld"

    def _refuse(self, entry: SkillEntry, reason: str, origin: Origin) -> Protected:
        self.state.add_event(
            "protected",
            library=self.name,
            skill=entry.name,
            session=origin.session,
            source=origin.source,
            reason=reason,
        )
        return Protected(reason)

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """The library's writer lock (`WriterLock`), re-entrant in-process."""
        return self._lock.held()

    # -- writes ------------------------------------------------------------------------------

    def write(
        self,
        doc: SkillDoc,
        origin: Origin,
        *,
        force: bool = False,
        activity: bool = True,
        records: Mapping[str, Record] | None = None,
    ) -> WriteOutcome:
        """Create or update a skill in this library's root; nothing is recorded in the event
        log (see `commit`). `activity=False` keeps a rewrite from counting as a patch (the
        curator's own bookkeeping). `records`: the usage sidecar as the caller read it (see
        `usage_record`)."""
        from skilld.skills.outcomes import Refused, WriteFailed

        try:
            name = self.check_name(doc.name)
        except LibraryError as exc:
            return Refused("invalid", str(doc.name), str(exc))
        with self.locked():
            existing = self.entry(name)
            metadata = {**doc.metadata, "managed-by": "skilld"}
            if origin.session:
                metadata["source-session"] = origin.session
            version = 1
            if existing is None and self.extra_dirs and (shadow := self.get(name)) is not None:
                # The agent would load the extra dir's skill, never a copy written here.
                return Refused("protected", name, f"{name} is owned by {shadow.owner}, not skilld")
            if existing is not None:
                record = self.usage_record(name, records)
                if (reason := self.protection(existing, record, force=force)) is not None:
                    return Refused("protected", name, reason)
                if existing.doc is not None:
                    previous = existing.doc.metadata.get("version", "0")
                    version = int(previous) + 1 if str(previous).isdigit() else 1
                    if "source-session" in existing.doc.metadata and not origin.session:
                        metadata["source-session"] = existing.doc.metadata["source-session"]
            doc = doc._replace(name=name, metadata={**metadata, "version": str(version)})
            try:
                validate_skill(doc, self.form, max_content_chars=self.max_content_chars)
            except ValueError as exc:
                return Refused("invalid", name, str(exc))
            if (
                existing is not None
                and existing.doc is not None
                and same_text(existing.doc, doc, self.form)
            ):
                return self._unchanged_or_recovered(existing, origin)
            if existing is None and len(self.managed_names()) >= self.max_managed:
                return Refused(
                    "cap",
                    name,
                    f"the cap of {self.max_managed} managed skills is reached; creation refused",
                )
            try:
                return self._replace(doc, existing, origin, version, activity=activity)
            except (UnsafePath, LibraryError) as exc:
                return WriteFailed(name, str(exc))
            except OSError as exc:
                return WriteFailed(name, _os_reason(exc))

    def _unchanged_or_recovered(self, existing: SkillEntry, origin: Origin) -> WriteOutcome:
        """The same text is there already. If this very origin wrote it (a crash came between
        its write and the commit of its event) it is that write, recovered."""
        from skilld.skills.outcomes import Unchanged, Written

        record = self.state.provenance(self.name, existing.name)
        ours = (
            record is not None
            and origin.session is not None
            and record.session == origin.session
            and record.first_message == origin.first_message
            and record.sha256 == existing.sha256
        )
        sha = existing.sha256 or ""
        if not ours or record is None:
            return Unchanged(existing.name, existing.path, sha)
        kind: Literal["created", "updated"] = "created" if record.prev_sha256 is None else "updated"
        version = existing.doc.metadata.get("version", "1") if existing.doc else "1"
        number = int(version) if str(version).isdigit() else 1
        if kind == "created":
            self._ensure_record(existing.name)
        return Written(kind, existing.name, existing.path, sha, number, recovered=True)

    def _replace(
        self,
        doc: SkillDoc,
        existing: SkillEntry | None,
        origin: Origin,
        version: int,
        *,
        activity: bool,
    ) -> Written:
        from skilld.skills.outcomes import Written

        name = doc.name
        if existing is None:
            path = self._new_path(name)
        else:
            # never write through a link that leads out of the root
            contained_path(existing.root, existing.path.relative_to(existing.root).as_posix())
            path = existing.path
            self._save_history(name, existing.path)
        data = render_skill(doc, self.form).encode("utf-8")
        kind: Literal["created", "updated"] = "created" if existing is None else "updated"
        digest = self._install(kind, name, path, data, existing, origin)
        if existing is None:
            # Before the commit: a crash after it must not leave a created skill without its
            # usage record (a repeated attempt recovers the write and ensures it again).
            self._ensure_record(name)
        elif activity:
            self.usage.bump(name, "patch")
        return Written(kind, name, path, digest, version)

    def _install(
        self,
        event: str,
        name: str,
        path: Path,
        data: bytes,
        existing: SkillEntry | None,
        origin: Origin,
    ) -> str:
        """Put `data` at `path`: provenance first (the new hash and the one it replaces, so a
        crash at any point leaves a file skilld recognises), then the atomic write, as one
        commit in a team library. Returns the new hash."""
        digest = sha256_hex(data)
        self.state.put_provenance(
            self.name,
            name,
            path=str(path),
            sha256=digest,
            prev_sha256=existing.sha256 if existing else None,
            session=origin.session,
            first_message=origin.first_message,
            last_message=origin.last_message,
            model=origin.model,
            prompt_version=origin.prompt_version,
            git=origin.git.as_json() if origin.git else None,
        )
        with self._recorded(event, name, origin, [path], path, digest):
            write_tree_file(self.root, self._relpath(path), data)
        return digest

    def _relpath(self, path: Path) -> str:
        """`path` (built from the root) relative to it, for the tree guard (fsutil)."""
        return path.relative_to(self.root).as_posix()

    def _ensure_record(self, name: str) -> None:
        """A created skill's usage record: curator-managed, and active even when the name was
        archived before (the archived copy stays restorable under `.archive/`)."""
        with self.usage.transaction() as records:
            record = records.get(name)
            if record is None or record.get("state") == "archived":
                now = datetime.fromtimestamp(self._clock(), UTC)
                records[name] = new_record(now, created_by="agent")
            elif record.get("created_by") is None:
                record["created_by"] = "agent"

    def commit(
        self,
        outcome: WriteOutcome,
        origin: Origin,
        *,
        reason: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Record `outcome` in the event log (and, for a write, settle its provenance), in one
        transaction joining the caller's (`record_outcome`)."""
        from skilld.skills.outcomes import record_outcome

        record_outcome(self.state, self.name, outcome, origin, reason=reason, detail=detail)

    def apply(self, doc: SkillDoc, origin: Origin, *, force: bool = False) -> Written | Unchanged:
        """Write and commit at once (a person's or an agent's tool's write). Raises
        LibraryError (Protected, CapReached) for a refusal and OSError for a failed write."""
        from skilld.skills.outcomes import refused_or_written

        outcome = self.write(doc, origin, force=force)
        self.commit(outcome, origin)
        return refused_or_written(outcome)

    def _ensure_root(self) -> None:
        """Create the skills dir; a project's only as real folders inside its root."""
        require_real_project_dir(self.spec)
        self.root.mkdir(parents=True, exist_ok=True)

    def _new_path(self, name: str) -> Path:
        self._ensure_root()
        if self.layout == "flat":
            return contained_path(self.root, f"{name}.md")
        return contained_path(self.root, f"{name}/{SKILL_FILE}")

    def _entry_for_change(self, name: str) -> SkillEntry:
        name = self.check_name(name)
        entry = self.entry(name)
        if entry is None:
            if self.get(name) is not None:
                raise Protected(f"{name} is owned by external, not skilld")
            raise NotFound(f"no skill named {name} in library {self.name}")
        self._require_contained(entry)
        return entry

    def _require_contained(self, entry: SkillEntry) -> None:
        """Refuse a skill whose file is reached through a link out of the root."""
        try:
            contained_path(entry.root, entry.path.relative_to(entry.root).as_posix())
        except (UnsafePath, ValueError) as exc:
            raise LibraryError(str(exc)) from None

    def _require_changeable(
        self,
        entry: SkillEntry,
        origin: Origin,
        *,
        force: bool,
        records: Mapping[str, Record] | None = None,
    ) -> None:
        record = self.usage_record(entry.name, records)
        if (reason := self.protection(entry, record, force=force)) is not None:
            raise self._refuse(entry, reason, origin)

    def delete(self, name: str, origin: Origin, *, force: bool = False) -> Deleted:
        """Remove the skill file skilld wrote (kept in history). Files a person added beside
        it (`scripts/`, `references/`) stay where they are, and so does their folder."""
        from skilld.skills.outcomes import Deleted

        with self.locked():
            entry = self._entry_for_change(name)
            self._require_changeable(entry, origin, force=force)
            self._save_history(entry.name, entry.path)
            kept: tuple[str, ...] = ()
            with self._recorded("deleted", entry.name, origin, [entry.path], None):
                remove_tree_file(self.root, self._relpath(entry.path))
                if entry.layout == "dir":
                    folder = entry.path.parent
                    kept = tuple(
                        sorted(
                            str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir()
                        )
                    )
                    if not kept:
                        with contextlib.suppress(OSError):
                            for sub in sorted(folder.rglob("*"), reverse=True):
                                sub.rmdir()
                            folder.rmdir()
            with self.state.transaction():
                self.state.drop_provenance(self.name, entry.name)
                self.state.add_event(
                    "deleted",
                    library=self.name,
                    skill=entry.name,
                    source=origin.source,
                    session=origin.session,
                    detail={"path": str(entry.path), **({"kept": list(kept)} if kept else {})},
                )
            self.usage.forget(entry.name)
            return Deleted(entry.path, kept)

    def set_pinned(self, name: str, pinned: bool, origin: Origin) -> None:
        name = self.check_name(name)
        if self.get(name) is None and self.usage.get(name) is None:
            raise NotFound(f"no skill named {name} in library {self.name}")
        self.usage.set_pinned(name, pinned)
        self.state.add_event(
            "pinned" if pinned else "unpinned",
            library=self.name,
            skill=name,
            source=origin.source,
        )

    # -- archive -----------------------------------------------------------------------------

    def _archive_root(self) -> Path:
        """`<root>/.archive`, refused when it is a link: archiving must never move a skill
        out of the root."""
        archive_root = self.root / ARCHIVE_DIR
        try:
            tree_path(self.root, ARCHIVE_DIR)
        except UnsafePath:
            raise LibraryError(f"{archive_root} is not a plain folder inside {self.root}") from None
        if archive_root.exists() and not archive_root.is_dir():
            raise LibraryError(f"{archive_root} is not a plain folder inside {self.root}")
        return archive_root

    def archive(
        self,
        name: str,
        origin: Origin,
        *,
        reason: str | None = None,
        force: bool = False,
        detail: dict[str, Any] | None = None,
        mark_usage: bool = True,
        records: Mapping[str, Record] | None = None,
    ) -> Path:
        """Move a skill under `.archive/` (restorable, never deleted).

        `mark_usage=False` leaves the usage record's state to the caller (the curator marks
        every archive of a pass in one sidecar write); `records` is the sidecar as the caller
        read it (see `usage_record`)."""
        with self.locked():
            entry = self._entry_for_change(name)
            self._require_changeable(entry, origin, force=force, records=records)
            archive_root = self._archive_root()
            archive_root.mkdir(exist_ok=True)
            stamp = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y%m%dT%H%M%SZ")
            source = entry.path.parent if entry.layout == "dir" else entry.path
            target_name = entry.name if entry.layout == "dir" else f"{entry.name}.md"
            target = archive_root / target_name
            if target.exists():
                target = archive_root / (
                    f"{entry.name}-{stamp}" if entry.layout == "dir" else f"{entry.name}-{stamp}.md"
                )
            new_path = target / SKILL_FILE if entry.layout == "dir" else target
            archived_file = new_path if entry.owner == "managed" else None
            with self._recorded(
                "archived", entry.name, origin, [source, target], archived_file, entry.sha256
            ):
                move_in_tree(self.root, self._relpath(source), self._relpath(target))
            if mark_usage:
                archived_at = datetime.fromtimestamp(self._clock(), UTC)
                self.usage.set_state(entry.name, "archived", archived_at=archived_at)
            with self.state.transaction():
                self.state.move_provenance(self.name, entry.name, str(new_path))
                self.state.add_event(
                    "archived",
                    library=self.name,
                    skill=entry.name,
                    source=origin.source,
                    reason=reason,
                    detail={"path": str(new_path), **(detail or {})},
                )
            return target

    def archived(self) -> dict[str, Path]:
        """Archived skills by name -> their folder or file (`archived_skills`)."""
        return archived_skills(self.root / ARCHIVE_DIR)

    def restore(self, name: str, origin: Origin) -> Path:
        with self.locked():
            name = self.check_name(name)
            source = self.archived().get(name)
            if source is None:
                raise NotFound(f"no archived skill named {name} in library {self.name}")
            if self.entry(name) is not None:
                raise LibraryError(
                    f"a skill named {name} exists already; delete or rename it first"
                )
            target = self.root / name if source.is_dir() else self.root / f"{name}.md"
            skill_file = target / SKILL_FILE if source.is_dir() else target
            record = self.state.provenance(self.name, name)
            ours = record.sha256 if record is not None and record.sha256 != DISOWNED else None
            manifest = self._team_manifest()
            if manifest is not None and self.team is not None:
                # Archived by any host's skilld: the team's manifest holds what it wrote.
                source_file = source / SKILL_FILE if source.is_dir() else source
                shared = manifest.get(name)
                if shared is not None and shared.path == self.team.relpath(source_file):
                    ours = shared.sha256
            with self._recorded(
                "restored", name, origin, [source, target], skill_file if ours else None, ours
            ):
                move_in_tree(self.root, self._relpath(source), self._relpath(target))
            self.usage.restore(name)
            with self.state.transaction():
                # The hash recorded at archive time stays: a copy edited inside the archive
                # comes back human-owned, exactly as an edit in place would have made it.
                self.state.move_provenance(self.name, name, str(skill_file))
                self.state.add_event(
                    "restored",
                    library=self.name,
                    skill=name,
                    source=origin.source,
                    detail={"path": str(skill_file)},
                )
            return skill_file

    # -- history (skills/history.py) ---------------------------------------------------------

    @property
    def versions(self) -> VersionHistory:
        """The saved versions (loaded on first use: a listing never needs them)."""
        if self._versions is None:
            from skilld.skills.history import VersionHistory

            self._versions = VersionHistory(
                self.root, self.history_dir, keep=self.history_keep, team=self.team,
                clock=self._clock,
            )  # fmt: skip
        return self._versions

    def history(self, name: str) -> list[HistoryVersion]:
        """Saved versions of `name`, oldest first (`VersionHistory.versions`)."""
        return self.versions.versions(self.check_name(name))

    def version_bytes(self, name: str, version: str) -> bytes:
        """The content of the saved version `version` (as `history` names it). Raises
        NotFound."""
        chosen = next((v for v in self.history(name) if v.version == version), None)
        if chosen is None:
            raise NotFound(f"{name} has no version {version}")
        return self.versions.content(chosen, name)

    def rollback(
        self, name: str, origin: Origin, *, version: str | None = None, force: bool = False
    ) -> Written:
        """Restore a saved version (by default the newest that differs from the current file:
        a team library's history holds the current version too); the current one is kept.

        A skill skilld deleted comes back the same way: its last version is in history. The
        version comes back byte for byte, except that a load-time shell trigger in it is broken
        (`neutralise_file`): no rollback brings back a skill that runs something as it loads.
        """
        from skilld.skills.outcomes import Written

        with self.locked():
            name = self.check_name(name)
            entry = self.entry(name)
            if entry is None and self.get(name) is not None:
                raise Protected(f"{name} is owned by external, not skilld")
            versions = self.history(name)
            if not versions:
                raise NotFound(f"{name} has no saved versions in library {self.name}")
            current = entry.sha256 if entry is not None else None
            chosen = self.versions.choose(name, versions, version, current)
            if entry is not None:
                # Neither read (into history) nor written through a link out of the root.
                self._require_contained(entry)
                self._require_changeable(entry, origin, force=force)
                path = entry.path
                self._save_history(name, entry.path)
            else:
                path = self._new_path(name)
            # A saved version is bytes, not a render: an older skilld, or a teammate's commit,
            # may have written a live shell trigger into it. Broken in place, like render does.
            data = neutralise_file(self.versions.content(chosen, name))
            digest = self._install("rolled_back", name, path, data, entry, origin)
            with self.state.transaction():
                self.state.settle_provenance(self.name, name, digest)
                self.state.add_event(
                    "rolled_back",
                    library=self.name,
                    skill=name,
                    source=origin.source,
                    detail={"version": chosen.version, "sha256": digest, "path": str(path)},
                )
            if entry is None:
                self._ensure_record(name)
            else:
                self.usage.bump(name, "patch")
            return Written("updated", name, path, digest, 0)

    def rewrite(self, entry: SkillEntry, data: bytes, origin: Origin, *, event: str) -> str:
        """Replace a managed skill's file with `data` (its previous bytes saved in history),
        for a repair that keeps the skill's text (`trigger_repair`); nothing is recorded in
        the event log. Returns the new hash."""
        self._require_contained(entry)
        self._save_history(entry.name, entry.path)
        return self._install(event, entry.name, entry.path, data, entry, origin)

    def _save_history(self, name: str, path: Path) -> None:
        self.versions.save(name, self._relpath(path))


def _os_reason(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
