"""The skill library: discovery, ownership, and every change to a skill file.

This module owns the ownership invariant (DESIGN.md §3): skilld changes a file only if skilld
wrote it and nobody changed it since, and never a pinned one. Every change is an atomic write,
keeps the previous version in history, and appends an event.

Crash safety of ownership: before a file is replaced, its provenance row is committed with the
new hash *and* the old one (`prev_sha256`). Whichever of the two a crash leaves on disk, the file
is still recognised as skilld's, so a repeated reflection rewrites it instead of calling it human.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from skilld.fsutil import UnsafePath, atomic_write, contained_path, remove_stray_temps
from skilld.log import get_logger
from skilld.skills.document import (
    SkillDoc,
    SkillParseError,
    parse_skill,
    render_skill,
    validate_skill,
)
from skilld.skills.names import InvalidName, is_safe_path_component, validate_name
from skilld.skills.usage import UsageStore
from skilld.state import Provenance, StateDB

Owner = Literal["managed", "human", "bundled", "hub", "external"]
Layout = Literal["dir", "flat"]

SKILL_FILE = "SKILL.md"
ARCHIVE_DIR = ".archive"
BUNDLED_MANIFEST = ".bundled_manifest"
HUB_LOCK = Path(".hub") / "lock.json"
#: DSH's ranks: lower wins. The skills dir is the user level; extra dirs are project level.
USER_RANK = 400
EXTRA_RANK = 100


class _Child(Protocol):
    """What discovery reads of a directory entry (`os.DirEntry` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    def is_dir(self) -> bool: ...

    def is_file(self) -> bool: ...

    def is_symlink(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class _NamedChild:
    """A directory entry looked up by name instead of listed."""

    name: str
    path: str

    def is_dir(self) -> bool:
        return os.path.isdir(self.path)

    def is_file(self) -> bool:
        return os.path.isfile(self.path)

    def is_symlink(self) -> bool:
        return os.path.islink(self.path)


class LibraryError(Exception):
    """An operation on the library was refused; the message says why."""


class Protected(LibraryError):
    """The skill is not skilld's to change (human, bundled, hub, external) or is pinned."""


class CapReached(LibraryError):
    """Creating another managed skill would exceed `skills.max_managed`."""


class NotFound(LibraryError):
    pass


@dataclass(frozen=True, slots=True)
class SkillEntry:
    name: str
    file: str  # the skill file; kept as text because discovery builds thousands of these
    root: Path
    rank: int
    layout: Layout
    owner: Owner
    sha256: str | None
    doc: SkillDoc | None
    error: str | None = None  # set when the file does not parse: listed as broken

    @property
    def broken(self) -> bool:
        return self.error is not None

    @property
    def path(self) -> Path:
        return Path(self.file)


@dataclass(frozen=True, slots=True)
class WriteResult:
    outcome: Literal["created", "updated", "unchanged"]
    name: str
    path: Path
    sha256: str


@dataclass(frozen=True, slots=True)
class HistoryVersion:
    version: str  # file stem: sortable UTC stamp and short hash
    path: Path
    saved_at: str


@dataclass(frozen=True, slots=True)
class Origin:
    """Who asks for a change, for the event log and provenance."""

    source: str  # "cli", "tool", "evolve", "curator"
    session: str | None = None
    first_message: int | None = None
    last_message: int | None = None
    model: str | None = None
    prompt_version: str | None = None


def _external(name: str, digest: str | None) -> Owner:
    return "external"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Library:
    def __init__(
        self,
        skills_dir: Path,
        state: StateDB,
        usage: UsageStore,
        *,
        history_dir: Path,
        dialect: str = "dsh",
        layout: Layout = "dir",
        extra_dirs: tuple[Path, ...] = (),
        max_content_chars: int = 20000,
        history_keep: int = 10,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = skills_dir
        self.state = state
        self.usage = usage
        self.history_dir = history_dir
        self.dialect = dialect
        self.layout = layout
        self.extra_dirs = extra_dirs
        self.max_content_chars = max_content_chars
        self.history_keep = history_keep
        self._clock = clock
        self._log = get_logger("skilld.library")

    @classmethod
    def from_config(cls, config: Any, state: StateDB, usage: UsageStore) -> Library:
        skills = config.skills
        return cls(
            skills.dir,
            state,
            usage,
            history_dir=config.state.dir / "history",
            dialect=skills.dialect,
            layout=skills.layout,
            extra_dirs=skills.extra_dirs,
            max_content_chars=skills.max_content_chars,
            history_keep=skills.history_keep,
        )

    # -- start-up ----------------------------------------------------------------------------

    def prepare(self) -> list[Path]:
        """Create the skills dir and remove temp files a crash left behind (history too)."""
        self.root.mkdir(parents=True, exist_ok=True)
        return (
            remove_stray_temps(self.root, depth=2)
            + remove_stray_temps(self.root / ARCHIVE_DIR, depth=2)
            + remove_stray_temps(self.history_dir, depth=2)
        )

    # -- discovery ---------------------------------------------------------------------------

    def discover(self, *, include_extra: bool = True, parse: bool = True) -> list[SkillEntry]:
        """Every skill, one per name (lowest rank wins), sorted by name.

        `parse=False` leaves `doc` unset: ownership needs only each file's hash, and parsing
        the frontmatter is most of the cost of listing a large library.
        """
        return self._discover(include_extra=include_extra, parse=parse, only=None)

    def _discover(self, *, include_extra: bool, parse: bool, only: str | None) -> list[SkillEntry]:
        bundled, hub = self._bundled_names(), self._hub_names()
        if only is None:
            provenance = self.state.all_provenance()
        else:
            record = self.state.provenance(only)
            provenance = {only: record} if record else {}

        def owner_of(name: str, digest: str | None) -> Owner:
            if name in bundled:
                return "bundled"
            if name in hub:
                return "hub"
            record = provenance.get(name)
            ours = record is not None and digest in (record.sha256, record.prev_sha256)
            return "managed" if ours else "human"

        found: dict[str, SkillEntry] = {}
        roots: list[tuple[Path, int, Callable[[str, str | None], Owner]]] = [
            (self.root, USER_RANK, owner_of)
        ]
        if include_extra:
            roots += [(d, EXTRA_RANK + i, _external) for i, d in enumerate(self.extra_dirs)]
        for root, rank, owner in roots:
            for entry in self._scan_root(root, rank, owner, parse=parse, only=only):
                current = found.get(entry.name)
                if current is None or entry.rank < current.rank:
                    found[entry.name] = entry
        return [found[name] for name in sorted(found)]

    def get(self, name: str) -> SkillEntry | None:
        # Only `name`'s own paths are looked at, so that every change (write, archive, delete)
        # costs the same in a library of ten skills or of ten thousand.
        if not is_safe_path_component(name):
            return None  # discovery never lists such a name either
        found = self._discover(include_extra=True, parse=True, only=name)
        return found[0] if found else None

    def managed_names(self) -> list[str]:
        return [e.name for e in self.discover(include_extra=False) if e.owner == "managed"]

    def _scan_root(
        self,
        root: Path,
        rank: int,
        owner_of: Callable[[str, str | None], Owner],
        *,
        parse: bool = True,
        only: str | None = None,
    ) -> Iterator[SkillEntry]:
        try:
            children: list[_Child] = (
                sorted(os.scandir(root), key=lambda e: e.name)
                if only is None
                else [
                    _NamedChild(n, os.path.join(root, n))
                    for n in (only, f"{only}.md")
                    if os.path.lexists(os.path.join(root, n))
                ]
            )
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            self._log.warning("skills_root_unreadable", root=str(root), error=str(exc))
            return
        real_root = root.resolve()
        dirs: dict[str, _Child] = {}
        flats: dict[str, _Child] = {}
        for child in children:
            if child.name.startswith("."):
                continue  # .archive, .hub, .usage.json, temp files
            if child.is_dir():
                dirs[child.name] = child
            elif child.name.endswith(".md") and child.is_file():
                flats[child.name[:-3]] = child
        for name, child in dirs.items():
            if name in flats:
                self._log.warning(
                    "skill_layout_clash", name=name, kept=os.path.join(child.path, SKILL_FILE)
                )
            path = os.path.join(child.path, SKILL_FILE)
            entry = self._load(
                name, path, root, real_root, rank, "dir", owner_of,
                parse=parse, linked=child.is_symlink(),
            )  # fmt: skip
            if entry is not None:
                yield entry
        for name, child in flats.items():
            if name not in dirs:
                entry = self._load(
                    name, child.path, root, real_root, rank, "flat", owner_of,
                    parse=parse, linked=child.is_symlink(),
                )  # fmt: skip
                if entry is not None:
                    yield entry

    def _load(
        self,
        name: str,
        path: str,
        root: Path,
        real_root: Path,
        rank: int,
        layout: Layout,
        owner_of: Callable[[str, str | None], Owner],
        *,
        parse: bool,
        linked: bool,
    ) -> SkillEntry | None:
        """The entry at `path`; None for a real folder without a skill file.

        A link (the entry itself, or the skill file in a folder) is followed only when it stays
        inside the root; one leading out is listed as broken, never read. Without a link on
        the way the file is inside the root by construction, so the common case costs one
        open and one read: this runs for every skill on every discovery.
        """

        def entry(
            digest: str | None = None, doc: SkillDoc | None = None, error: str | None = None
        ) -> SkillEntry:
            owner = owner_of(name, digest)
            return SkillEntry(name, path, root, rank, layout, owner, digest, doc, error)

        def leads_out() -> bool:
            target = Path(path).resolve()
            return target != real_root and real_root not in target.parents

        if linked and leads_out():
            return entry(error=f"links out of {root}; ignored")
        try:
            fd = os.open(path, os.O_RDONLY | (0 if linked else os.O_NOFOLLOW))
        except FileNotFoundError:
            return entry(error="no SKILL.md in a linked folder") if linked else None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                return entry(error=f"unreadable: {exc.strerror or exc}")
            if leads_out():  # the skill file itself is a link
                return entry(error=f"links out of {root}; ignored")
            fd = None
        try:
            if fd is None:
                fd = os.open(path, os.O_RDONLY)
            with os.fdopen(fd, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            return entry(error=f"unreadable: {exc.strerror or exc}")
        digest = sha256_bytes(data)
        if not parse:
            return entry(digest)
        try:
            doc = parse_skill(data, dialect=self.dialect)
        except SkillParseError as exc:
            return entry(digest, error=str(exc))
        if doc.name != name:
            return entry(digest, doc, f"frontmatter name {doc.name!r} != {name!r}")
        return entry(digest, doc)

    def _bundled_names(self) -> set[str]:
        try:
            text = (self.root / BUNDLED_MANIFEST).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return set()
        names = (line.split(":", 1)[0].strip() for line in text.splitlines())
        return {name for name in names if name and not name.startswith("#")}

    def _hub_names(self) -> set[str]:
        try:
            data = json.loads((self.root / HUB_LOCK).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return set()
        installed = data.get("installed") if isinstance(data, dict) else None
        return set(installed) if isinstance(installed, dict) else set()

    # -- guards ------------------------------------------------------------------------------

    def check_name(self, name: str) -> str:
        try:
            return validate_name(name, dialect=self.dialect)
        except InvalidName as exc:
            raise LibraryError(str(exc)) from None

    def _is_pinned(self, name: str) -> bool:
        record = self.usage.get(name)
        return bool(record and record.get("pinned"))

    def _refuse(
        self, name: str, reason: str, origin: Origin, also: Callable[[str], None] | None
    ) -> Protected:
        with self.state.transaction():
            self.state.add_event(
                "protected",
                skill=name,
                session=origin.session,
                source=origin.source,
                reason=reason,
            )
            if also:
                also("protected")
        return Protected(reason)

    def _require_changeable(
        self,
        entry: SkillEntry,
        origin: Origin,
        also: Callable[[str], None] | None,
        *,
        force: bool = False,
    ) -> None:
        """Only managed, unpinned skills change; `force` lets a person take over a human one."""
        if self._is_pinned(entry.name):
            raise self._refuse(entry.name, f"{entry.name} is pinned", origin, also)
        if entry.owner == "managed" or (force and entry.owner == "human"):
            return
        raise self._refuse(
            entry.name, f"{entry.name} is owned by {entry.owner}, not skilld", origin, also
        )

    # -- writes ------------------------------------------------------------------------------

    def write(
        self,
        doc: SkillDoc,
        origin: Origin,
        *,
        cap: int | None = None,
        force: bool = False,
        also: Callable[[str], None] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> WriteResult:
        """Create or update a skill.

        `also(outcome)` runs inside the transaction that records the outcome's event, so that a
        caller's own bookkeeping (a session watermark) commits together with it.

        Raises LibraryError (bad name or content), Protected, or CapReached.
        """
        name = self.check_name(doc.name)
        metadata = {**doc.metadata, "managed-by": "skilld"}
        if origin.session:
            metadata["source-session"] = origin.session
        existing = self.get(name)
        version = 1
        if existing is not None:
            self._require_changeable(existing, origin, also, force=force)
            if existing.doc is not None:
                previous = existing.doc.metadata.get("version", "0")
                version = int(previous) + 1 if str(previous).isdigit() else 1
                if "source-session" in existing.doc.metadata and not origin.session:
                    metadata["source-session"] = existing.doc.metadata["source-session"]
        doc = replace(doc, name=name, metadata={**metadata, "version": str(version)})
        try:
            validate_skill(doc, self.dialect, max_content_chars=self.max_content_chars)
        except ValueError as exc:
            raise LibraryError(str(exc)) from None

        if existing is not None and existing.doc is not None and _same_skill(existing.doc, doc):
            with self.state.transaction():
                self.state.add_event(
                    "unchanged",
                    skill=name,
                    session=origin.session,
                    source=origin.source,
                    detail=detail,
                )
                if also:
                    also("unchanged")
            return WriteResult("unchanged", name, existing.path, existing.sha256 or "")

        if existing is None:
            if cap is not None and len(self.managed_names()) >= cap:
                with self.state.transaction():
                    self.state.add_event(
                        "cap",
                        skill=name,
                        session=origin.session,
                        source=origin.source,
                        reason=f"{cap} managed skills already; creation refused",
                    )
                    if also:
                        also("cap")
                raise CapReached(f"the cap of {cap} managed skills is reached")
            path = self._new_path(name)
        else:
            try:  # never write through a link that leads out of the root
                contained_path(existing.root, *existing.path.relative_to(existing.root).parts)
            except (UnsafePath, ValueError) as exc:
                raise LibraryError(str(exc)) from None
            path = existing.path
            self._save_history(name, existing.path)

        data = render_skill(doc, self.dialect).encode("utf-8")
        digest = sha256_bytes(data)
        outcome: Literal["created", "updated"] = "created" if existing is None else "updated"
        self.state.put_provenance(
            name,
            path=str(path),
            sha256=digest,
            prev_sha256=existing.sha256 if existing else None,
            session=origin.session,
            first_message=origin.first_message,
            last_message=origin.last_message,
            model=origin.model,
            prompt_version=origin.prompt_version,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
        if outcome == "created":
            # Before the commit: a crash after it must not leave a created skill without its
            # usage record; one before it is finished by `finish_interrupted_write`.
            self.usage.ensure(name, created_by="agent")
        with self.state.transaction():
            self.state.put_provenance(name, path=str(path), sha256=digest)
            self.state.add_event(
                outcome,
                skill=name,
                session=origin.session,
                source=origin.source,
                detail={"path": str(path), "sha256": digest, "version": version, **(detail or {})},
            )
            if also:
                also(outcome)
        if outcome == "updated":
            self.usage.bump(name, "patch")
        return WriteResult(outcome, name, path, digest)

    def interrupted_write(self, session: str, first_message: int) -> Provenance | None:
        """The write made for the window of `session` that starts at `first_message` whose
        event never committed (a crash between the file's replacement and the commit), or None.

        `write` commits the window and the new hash to provenance before it replaces the file,
        so a file on disk with that hash that no write event names is exactly that case.
        """
        for record in self.state.all_provenance().values():
            if record.session != session or record.first_message != first_message:
                continue
            try:
                digest = sha256_bytes(Path(record.path).read_bytes())
            except OSError:
                continue
            if digest != record.sha256:
                continue  # the crash came before the file was replaced: nothing was written
            latest = self.state.events(
                kinds=("created", "updated", "rolled_back"), skill=record.name, limit=1
            )
            if not latest or latest[0].detail.get("sha256") != digest:
                return record
        return None

    def finish_interrupted_write(
        self,
        record: Provenance,
        *,
        source: str,
        also: Callable[[str], None] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> WriteResult:
        """Commit the event of a write found by `interrupted_write`, as `write` would have."""
        path = Path(record.path)
        outcome: Literal["created", "updated"] = (
            "created" if record.prev_sha256 is None else "updated"
        )
        try:
            version = parse_skill(path.read_bytes(), dialect=self.dialect).metadata.get("version")
        except (OSError, SkillParseError):
            version = None
        if outcome == "created":
            self.usage.ensure(record.name, created_by="agent")
        with self.state.transaction():
            self.state.add_event(
                outcome,
                skill=record.name,
                session=record.session,
                source=source,
                detail={
                    "path": str(path),
                    "sha256": record.sha256,
                    "version": int(version) if str(version).isdigit() else None,
                    **(detail or {}),
                    "recovered": "the write's event was lost in a crash",
                },
            )
            if also:
                also(outcome)
        if outcome == "updated":
            self.usage.bump(record.name, "patch")
        return WriteResult(outcome, record.name, path, record.sha256)

    def _new_path(self, name: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            if self.layout == "flat":
                return contained_path(self.root, f"{name}.md")
            return contained_path(self.root, name, SKILL_FILE)
        except UnsafePath as exc:
            raise LibraryError(str(exc)) from None

    def _entry_for_change(self, name: str) -> SkillEntry:
        name = self.check_name(name)
        entry = self.get(name)
        if entry is None:
            raise NotFound(f"no skill named {name}")
        try:
            contained_path(entry.root, *entry.path.relative_to(entry.root).parts)
        except (UnsafePath, ValueError) as exc:
            raise LibraryError(str(exc)) from None
        return entry

    def delete(self, name: str, origin: Origin, *, force: bool = False) -> Path:
        entry = self._entry_for_change(name)
        self._require_changeable(entry, origin, None, force=force)
        self._save_history(entry.name, entry.path)
        if entry.layout == "dir":
            shutil.rmtree(entry.path.parent)
        else:
            entry.path.unlink()
        with self.state.transaction():
            self.state.drop_provenance(entry.name)
            self.state.add_event(
                "deleted",
                skill=entry.name,
                source=origin.source,
                session=origin.session,
                detail={"path": str(entry.path)},
            )
        self.usage.forget(entry.name)
        return entry.path

    def set_pinned(self, name: str, pinned: bool, origin: Origin) -> None:
        name = self.check_name(name)
        if self.get(name) is None and self.usage.get(name) is None:
            raise NotFound(f"no skill named {name}")
        self.usage.set_pinned(name, pinned)
        self.state.add_event("pinned" if pinned else "unpinned", skill=name, source=origin.source)

    # -- archive -----------------------------------------------------------------------------

    def archive(
        self,
        name: str,
        origin: Origin,
        *,
        reason: str | None = None,
        force: bool = False,
        detail: dict[str, Any] | None = None,
    ) -> Path:
        """Move a skill under `.archive/` (restorable, never deleted)."""
        entry = self._entry_for_change(name)
        if entry.root != self.root:
            raise self._refuse(entry.name, f"{entry.name} is owned by external", origin, None)
        self._require_changeable(entry, origin, None, force=force)
        archive_root = self.root / ARCHIVE_DIR
        archive_root.mkdir(exist_ok=True)
        stamp = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y%m%dT%H%M%SZ")
        source = entry.path.parent if entry.layout == "dir" else entry.path
        target_name = entry.name if entry.layout == "dir" else f"{entry.name}.md"
        target = archive_root / target_name
        if target.exists():
            target = archive_root / (
                f"{entry.name}-{stamp}" if entry.layout == "dir" else f"{entry.name}-{stamp}.md"
            )
        os.replace(source, target)
        archived_at = datetime.fromtimestamp(self._clock(), UTC).isoformat(timespec="seconds")
        self.usage.set_state(entry.name, "archived", archived_at=archived_at)
        with self.state.transaction():
            new_path = target / SKILL_FILE if entry.layout == "dir" else target
            if self.state.provenance(entry.name):
                self.state.put_provenance(entry.name, path=str(new_path), sha256=entry.sha256 or "")
            self.state.add_event(
                "archived",
                skill=entry.name,
                source=origin.source,
                reason=reason,
                detail={"path": str(new_path), **(detail or {})},
            )
        return target

    def archived(self) -> dict[str, Path]:
        """Archived skills by name -> their folder or file (newest archive wins a clash)."""
        found: dict[str, tuple[float, Path]] = {}
        root = self.root / ARCHIVE_DIR
        with contextlib.suppress(FileNotFoundError):
            for child in os.scandir(root):
                if child.name.startswith(".") or child.is_symlink():
                    continue
                path = Path(child.path)
                skill_file = path / SKILL_FILE if child.is_dir() else path
                if not skill_file.is_file():
                    continue
                try:
                    name = parse_skill(skill_file.read_bytes(), dialect=self.dialect).name
                except (SkillParseError, OSError):
                    continue
                mtime = child.stat(follow_symlinks=False).st_mtime
                if name not in found or found[name][0] < mtime:
                    found[name] = (mtime, path)
        return {name: path for name, (_, path) in found.items()}

    def restore(self, name: str, origin: Origin) -> Path:
        name = self.check_name(name)
        source = self.archived().get(name)
        if source is None:
            raise NotFound(f"no archived skill named {name}")
        if self.get(name) is not None:
            raise LibraryError(f"a skill named {name} exists already; delete or rename it first")
        target = self.root / name if source.is_dir() else self.root / f"{name}.md"
        os.replace(source, target)
        skill_file = target / SKILL_FILE if target.is_dir() else target
        self.usage.restore(name)
        with self.state.transaction():
            # The hash recorded at archive time stays: a copy edited inside the archive comes
            # back human-owned, exactly as an edit in place would have made it.
            if record := self.state.provenance(name):
                self.state.put_provenance(name, path=str(skill_file), sha256=record.sha256)
            self.state.add_event(
                "restored", skill=name, source=origin.source, detail={"path": str(skill_file)}
            )
        return skill_file

    # -- history -----------------------------------------------------------------------------

    def _save_history(self, name: str, path: Path) -> None:
        if self.history_keep == 0:
            return
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        folder = self.history_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y%m%dT%H%M%S%fZ")
        atomic_write(folder / f"{stamp}-{sha256_bytes(data)[:12]}.md", data)
        for old in self.history(name)[: -self.history_keep]:
            old.path.unlink(missing_ok=True)

    def history(self, name: str) -> list[HistoryVersion]:
        """Saved versions, oldest first."""
        folder = self.history_dir / self.check_name(name)
        versions = []
        with contextlib.suppress(FileNotFoundError):
            for child in sorted(os.scandir(folder), key=lambda e: e.name):
                if child.name.endswith(".md") and not child.name.startswith("."):
                    stem = child.name[:-3]
                    saved = datetime.strptime(stem.split("-")[0], "%Y%m%dT%H%M%S%fZ")
                    saved_at = saved.replace(tzinfo=UTC).isoformat(timespec="seconds")
                    versions.append(HistoryVersion(stem, Path(child.path), saved_at))
        return versions

    def rollback(
        self, name: str, origin: Origin, *, version: str | None = None, force: bool = False
    ) -> WriteResult:
        """Restore a saved version (the newest by default); the current one is kept too."""
        entry = self._entry_for_change(name)
        versions = self.history(entry.name)
        if not versions:
            raise NotFound(f"{entry.name} has no saved versions")
        chosen = (
            versions[-1]
            if version is None
            else next((v for v in versions if v.version == version), None)
        )
        if chosen is None:
            raise NotFound(f"{entry.name} has no version {version}")
        self._require_changeable(entry, origin, None, force=force)
        data = chosen.path.read_bytes()
        self._save_history(entry.name, entry.path)
        digest = sha256_bytes(data)
        self.state.put_provenance(
            entry.name, path=str(entry.path), sha256=digest, prev_sha256=entry.sha256
        )
        atomic_write(entry.path, data)
        with self.state.transaction():
            self.state.put_provenance(entry.name, path=str(entry.path), sha256=digest)
            self.state.add_event(
                "rolled_back",
                skill=entry.name,
                source=origin.source,
                detail={"version": chosen.version, "sha256": digest},
            )
        self.usage.bump(entry.name, "patch")
        return WriteResult("updated", entry.name, entry.path, digest)


def _same_skill(current: SkillDoc, proposed: SkillDoc) -> bool:
    """Same text for the agent; the version counter alone is no change."""
    return (
        current.description == proposed.description
        and current.when_to_use == proposed.when_to_use
        and current.body.strip() == proposed.body.strip()
        and current.disable_model_invocation == proposed.disable_model_invocation
    )
