"""A skill library: discovery, ownership, and every change to a skill file.

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

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from skilld.digest import sha256_hex
from skilld.errors import LibraryError, NotFound, Protected
from skilld.fsutil import (
    FILE_MODE,
    UnsafePath,
    atomic_write,
    contained_path,
    move_in_tree,
    read_tree_file,
    remove_stray_temps,
    remove_tree_file,
    write_tree_file,
)
from skilld.log import get_logger
from skilld.routing import LibrarySpec, require_real_project_dir
from skilld.skills.document import (
    SkillDoc,
    SkillParseError,
    neutralise_file,
    parse_skill,
    quick_problem,
    render_skill,
    same_text,
    validate_skill,
)
from skilld.skills.layout import ARCHIVE_DIR, MAX_CATEGORY_DEPTH, SKILL_FILE
from skilld.skills.names import (
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    InvalidName,
    form_of,
    is_safe_path_component,
    validate_name,
)
from skilld.skills.usage import Record, UsageStore, new_record

if TYPE_CHECKING:
    from skilld.gitinfo import GitContext
    from skilld.state import Provenance, StateDB
    from skilld.sync import Manifest, ManifestEntry, TeamRepo

Owner = Literal["managed", "human", "bundled", "hub", "external"]
Layout = Literal["dir", "flat"]
#: What a listing learned of each skill file, by path: the file's identity (inode, size, mtime,
#: ctime) when read, its sha256 and its `quick_problem`. A long-lived process (the panel) keeps
#: one across requests so an unchanged file costs a stat, not a read and a hash.
FileFacts = dict[str, tuple[tuple[int, int, int, int], str, str | None]]

BUNDLED_MANIFEST = ".bundled_manifest"
HUB_LOCK = ".hub/lock.json"
#: DSH's ranks: lower wins. The skills dir is the user level; extra dirs are project level.
USER_RANK = 400
EXTRA_RANK = 100
#: The suffix `archive` adds to a name already in the archive.
_ARCHIVE_STAMP = re.compile(r"-\d{8}T\d{6}Z$")


class _Child(Protocol):
    """What discovery reads of a directory entry (`os.DirEntry` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    def is_dir(self) -> bool: ...

    def is_file(self) -> bool: ...

    def is_symlink(self) -> bool: ...


class _NamedChild(NamedTuple):
    """A directory entry looked up by name instead of listed."""

    name: str
    path: str

    def is_dir(self) -> bool:
        return os.path.isdir(self.path)

    def is_file(self) -> bool:
        return os.path.isfile(self.path)

    def is_symlink(self) -> bool:
        return os.path.islink(self.path)


class SkillEntry(NamedTuple):
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


class Origin(NamedTuple):
    """Who asks for a change, for the event log and provenance."""

    source: str  # "cli", "tool", "evolve", "curator", or a source kind
    session: str | None = None
    first_message: int | None = None
    last_message: int | None = None
    model: str | None = None
    prompt_version: str | None = None
    #: Where the session that taught it worked (a window's), for provenance and team commits.
    git: "GitContext | None" = None


# -- what a write came to --------------------------------------------------------------------


class Written(NamedTuple):
    kind: Literal["created", "updated"]
    name: str
    path: Path
    sha256: str
    version: int
    #: The write was this origin's own, made before a crash kept its event from committing.
    recovered: bool = False


class Unchanged(NamedTuple):
    name: str
    path: Path
    sha256: str

    @property
    def kind(self) -> Literal["unchanged"]:
        return "unchanged"


class Refused(NamedTuple):
    """Nothing was written: the skill is not skilld's (`protected`), the cap is reached
    (`cap`), or the skill breaks a rule of the library (`invalid`)."""

    kind: Literal["protected", "cap", "invalid"]
    name: str
    reason: str


class WriteFailed(NamedTuple):
    """This machine could not write (disk full, permissions, something in the way)."""

    name: str
    reason: str

    @property
    def kind(self) -> Literal["failed"]:
        return "failed"


WriteOutcome = Written | Unchanged | Refused | WriteFailed


class HistoryVersion(NamedTuple):
    version: str  # a saved file's stem (sortable UTC stamp and short hash), or a commit
    saved_at: str
    path: Path | None = None  # a version saved on this host
    commit: str | None = None  # a version in a team library's git history
    subject: str = ""  # what the commit says changed it


class Deleted(NamedTuple):
    path: Path
    #: Files a person put beside SKILL.md: never skilld's to remove, left in place.
    kept: tuple[str, ...]


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """A file's identity for `FileFacts`: a rewrite (a new inode, or new bytes), a truncation
    and a change of mode each change it."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _external(name: str, digest: str | None) -> Owner:
    return "external"


class Library:
    def __init__(
        self,
        spec: LibrarySpec,
        state: "StateDB",
        usage: UsageStore,
        *,
        history_dir: Path,
        locks_dir: Path,
        team: "TeamRepo | None" = None,
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
        self._lock_path = locks_dir / f"{spec.storage_key}.lock"
        self._lock_depth = 0
        self._lock_fd: int | None = None
        #: Skill file -> (inode, size, mtime) -> its sha256, for counting the cap.
        self._digests: dict[str, tuple[tuple[int, int, int], str]] = {}
        #: Shared by the caller (None: every listing reads every file).
        self._file_facts = file_facts
        self._clock = clock
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

    def break_shell_triggers(self, origin: Origin) -> list[str]:
        """Break the load-time shell triggers an older skilld left in the skills it manages (it
        broke them in the claude dialect only): each file keeps every other byte, and its
        previous version is saved in history. A pinned skill is left as it is, since no
        automatic path changes it, and a `warning` event names it. Returns the names rewritten.
        """
        rewritten: list[str] = []
        records: Mapping[str, Record] | None = None  # read once, when a skill needs rewriting
        with self.locked():
            for entry in self.entries(parse=False):
                if entry.owner != "managed" or entry.broken:
                    continue
                try:
                    data = entry.path.read_bytes()
                except OSError:
                    continue  # a listing reports an unreadable file; nothing runs from it here
                neutral = neutralise_file(data)
                if neutral == data:
                    continue
                if records is None:
                    records = self.usage.read()
                if (self.usage_record(entry.name, records) or {}).get("pinned"):
                    self.state.add_event(
                        "warning",
                        library=self.name,
                        skill=entry.name,
                        source=origin.source,
                        reason="pinned, so left with a load-time shell trigger: unpin it to "
                        "have skilld break it, or edit the file",
                    )
                    continue
                self._require_contained(entry)
                self._save_history(entry.name, entry.path)
                digest = self._install("updated", entry.name, entry.path, neutral, entry, origin)
                with self.state.transaction():
                    self.state.settle_provenance(self.name, entry.name, digest)
                    self.state.add_event(
                        "updated",
                        library=self.name,
                        skill=entry.name,
                        source=origin.source,
                        reason="load-time shell triggers broken",
                        detail={"sha256": digest, "path": str(entry.path)},
                    )
                rewritten.append(entry.name)
        return rewritten

    # -- discovery ---------------------------------------------------------------------------

    def discover(
        self,
        *,
        include_extra: bool = True,
        parse: bool = True,
        provenance: "Mapping[str, Provenance] | None" = None,
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

    def managed_names(self) -> list[str]:
        """Skills skilld wrote and nobody changed since, by hash: what the cap counts.

        Only the files skilld recorded are looked at, and a file's hash is kept while its
        identity (inode, size, mtime) stays the same: the count costs a stat per managed skill,
        not a read of the library, on every create. (Ownership before a change is always
        decided on a fresh read: `entry`.)"""
        expected: dict[str, set[str]] = {}
        paths: dict[str, Path] = {}
        for name, record in self.state.all_provenance(self.name).items():
            expected[name] = {record.sha256, record.prev_sha256 or record.sha256}
            paths[name] = Path(record.path)
        if (team := self._team_manifest()) is not None:
            for name, shared in team.skills.items():
                expected.setdefault(name, set()).add(shared.sha256)
                paths.setdefault(name, self.root / shared.path)
        excluded = self._bundled_names() | self._hub_names()
        archive = self.root / ARCHIVE_DIR
        managed = []
        for name, path in sorted(paths.items()):
            inside = self.root in path.parents and archive not in path.parents
            if name not in excluded and inside and self._digest(path) in expected[name]:
                managed.append(name)
        return managed

    def _digest(self, path: Path) -> str | None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._digests.get(str(path))
        if cached is not None and cached[0] == identity:
            return cached[1]
        try:
            digest = sha256_hex(path.read_bytes())
        except OSError:
            return None
        self._digests[str(path)] = (identity, digest)
        return digest

    def _discover(
        self,
        *,
        include_extra: bool,
        parse: bool,
        only: str | None,
        provenance: "Mapping[str, Provenance] | None" = None,
    ) -> list[SkillEntry]:
        bundled, hub = self._bundled_names(), self._hub_names()
        team = self._team_manifest()
        if provenance is None:
            if only is None:
                provenance = self.state.all_provenance(self.name)
            else:
                record = self.state.provenance(self.name, only)
                provenance = {only: record} if record else {}

        def owner_of(name: str, digest: str | None) -> Owner:
            if name in bundled:
                return "bundled"
            if name in hub:
                return "hub"
            record = provenance.get(name)
            ours = record is not None and digest in (record.sha256, record.prev_sha256)
            # A team library: what any host's skilld last wrote is skilld's on every host.
            shared = team is not None and team.owns(name, digest)
            return "managed" if ours or shared else "human"

        found: dict[str, SkillEntry] = {}
        roots: list[tuple[Path, int, Callable[[str, str | None], Owner], int]] = [
            (self.root, USER_RANK, owner_of, MAX_CATEGORY_DEPTH if self.spec.recursive else 1)
        ]
        if include_extra:
            roots += [(d, EXTRA_RANK + i, _external, 1) for i, d in enumerate(self.extra_dirs)]
        for root, rank, owner, depth in roots:
            for entry in self._scan_root(
                root, root, rank, owner, parse=parse, only=only, depth=depth
            ):
                current = found.get(entry.name)
                if current is None or entry.rank < current.rank:
                    found[entry.name] = entry
        return [found[name] for name in sorted(found)]

    def _scan_root(
        self,
        root: Path,
        folder: Path,
        rank: int,
        owner_of: Callable[[str, str | None], Owner],
        *,
        parse: bool,
        only: str | None,
        depth: int,
    ) -> Iterator[SkillEntry]:
        try:
            children: list[_Child] = (
                sorted(os.scandir(folder), key=lambda e: e.name)
                if only is None
                else [
                    _NamedChild(n, os.path.join(folder, n))
                    for n in (only, f"{only}.md")
                    if os.path.lexists(os.path.join(folder, n))
                ]
            )
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            self._log.warning("skills_root_unreadable", root=str(folder), error=str(exc))
            return
        real_root = root.resolve()
        dirs: dict[str, _Child] = {}
        flats: dict[str, _Child] = {}
        for child in children:
            if child.name.startswith("."):
                continue  # .archive, .hub, .usage.json, .skilld, temp files
            if child.is_dir():
                dirs[child.name] = child
            elif folder == root and self._is_flat_skill(child):
                flats[child.name[:-3]] = child
        for name, child in dirs.items():
            if name in flats:
                self._log.warning(
                    "skill_layout_clash", name=name, kept=os.path.join(child.path, SKILL_FILE)
                )
            path = os.path.join(child.path, SKILL_FILE)
            linked = child.is_symlink()
            if depth > 1 and not linked and not os.path.lexists(path):
                # A category folder (Hermes): its skills are one level further down.
                yield from self._scan_root(
                    root, Path(child.path), rank, owner_of, parse=parse, only=only, depth=depth - 1
                )
                continue
            entry = self._load(
                name, path, root, real_root, rank, "dir", owner_of, parse=parse, linked=linked
            )
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

    def _is_flat_skill(self, child: _Child) -> bool:
        """A top-level file is a skill only as `<name>.md` with `<name>` a valid skill name
        (so never README.md, LICENSE or CHANGELOG.md), and only where an agent loads such
        files: DSH (its dialect) or a flat library. Claude Code, Codex and Hermes load
        `<name>/SKILL.md` only."""
        stem = child.name.removesuffix(".md")
        if stem == child.name or not (self.layout == "flat" or self.dialect == "dsh"):
            return False
        return (
            len(stem) <= MAX_NAME_LENGTH and bool(NAME_PATTERN.fullmatch(stem)) and child.is_file()
        )

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
        # Only a plain file (no link on the way) is remembered: its identity is then the path's.
        facts = self._file_facts if not parse and not linked else None
        if facts is not None and (known := facts.get(path)) is not None:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                st = None
            if st is not None and stat.S_ISREG(st.st_mode) and known[0] == _identity(st):
                return entry(known[1], error=known[2])
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
            facts = None
        try:
            if fd is None:
                fd = os.open(path, os.O_RDONLY)
            with os.fdopen(fd, "rb") as handle:
                identity = _identity(os.fstat(handle.fileno())) if facts is not None else None
                data = handle.read()
        except OSError as exc:
            return entry(error=f"unreadable: {exc.strerror or exc}")
        digest = sha256_hex(data)
        if not parse:
            problem = quick_problem(data, name)
            if facts is not None and identity is not None:
                facts[path] = (identity, digest, problem)
            return entry(digest, error=problem)
        try:
            doc = parse_skill(data, dialect=self.form)
        except SkillParseError as exc:
            return entry(digest, error=str(exc))
        if doc.name != name:
            return entry(digest, doc, f"frontmatter name {doc.name!r} != {name!r}")
        return entry(digest, doc)

    def team_seed(self) -> "dict[str, ManifestEntry]":
        """The manifest entries this host's provenance vouches for, whatever the layout: skills
        skilld wrote here whose file still holds what it wrote. A library joining its remote
        starts the team's manifest from them, so the team takes them as skilld's."""
        from skilld.sync import ManifestEntry

        assert self.team is not None
        seed = {}
        for name, record in self.state.all_provenance(self.name).items():
            path = Path(record.path)
            try:
                relpath = self.team.relpath(path)
                digest = sha256_hex(path.read_bytes())
            except (ValueError, OSError):  # outside the root, or gone
                continue
            if digest in (record.sha256, record.prev_sha256):
                seed[name] = ManifestEntry(relpath, digest)
        return seed

    def _team_manifest(self) -> "Manifest | None":
        if self.team is None:
            return None
        from skilld.sync import ManifestError

        try:
            return self.team.manifest()
        except ManifestError as exc:  # a person broke it: nothing counts as skilld's by it
            self._log.warning("team_manifest_unreadable", library=self.name, error=str(exc))
            return None

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
        from skilld.sync import GitError, ManifestEntry

        team = self.team
        if not team.is_set_up:
            # A change before any sync (a person's write on a new team library) is still its
            # own commit: join first, so that it is not swept into the join commit. Without
            # git the change stays in the work tree, and the first round commits it.
            try:
                team.setup(self.team_seed())
            except (GitError, OSError) as exc:
                self._log.warning("team_setup_failed", library=self.name, error=str(exc))
        entry = ManifestEntry(team.relpath(written), digest or "") if written else None
        git = origin.git
        message = team.change_message(
            event,
            name,
            session=origin.session,
            repository=git.repository if git else None,
            branch=git.branch if git else None,
        )
        relpaths = [team.relpath(path) for path in paths]
        with team.change(message, relpaths, manifest={name: entry}):
            yield

    def _bundled_names(self) -> set[str]:
        try:
            text = (read_tree_file(self.root, BUNDLED_MANIFEST) or b"").decode("utf-8")
        except (OSError, UnsafePath, UnicodeDecodeError):
            return set()
        names = (line.split(":", 1)[0].strip() for line in text.splitlines())
        return {name for name in names if name and not name.startswith("#")}

    def _hub_names(self) -> set[str]:
        try:
            data = json.loads(read_tree_file(self.root, HUB_LOCK) or b"{}")
        except (OSError, ValueError):  # UnsafePath is a ValueError
            return set()
        installed = data.get("installed") if isinstance(data, dict) else None
        return set(installed) if isinstance(installed, dict) else set()

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

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The library's writer lock (an OS lock in the state dir), re-entrant in-process."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._lock_depth = 1
            yield
        finally:
            self._lock_depth = 0
            os.close(fd)  # closing the last descriptor releases the lock

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
        name = doc.name
        if existing is None:
            path = self._new_path(name)
        else:
            # never write through a link that leads out of the root
            contained_path(existing.root, *existing.path.relative_to(existing.root).parts)
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
        """Record `outcome` in the event log (and, for a write, settle its provenance).

        Runs in one transaction, joining the caller's: the caller's own bookkeeping (a session
        watermark, a kept proposal) commits with it or not at all.
        """
        common: dict[str, Any] = {
            "library": self.name,
            "skill": outcome.name,
            "session": origin.session,
            "source": origin.source,
        }
        extra = dict(detail or {})
        if origin.git is not None:
            extra.setdefault("git", origin.git.as_json())
        # What provenance keeps for the current version only, kept on the event for each one.
        if origin.first_message is not None:
            extra.setdefault("messages", [origin.first_message, origin.last_message])
        for key, value in (("model", origin.model), ("prompt_version", origin.prompt_version)):
            if value is not None:
                extra.setdefault(key, value)
        with self.state.transaction():
            if isinstance(outcome, Written):
                self.state.settle_provenance(self.name, outcome.name, outcome.sha256)
                if outcome.recovered:
                    extra["recovered"] = "the write's event was lost in a crash"
                self.state.add_event(
                    outcome.kind,
                    **common,
                    reason=reason,
                    detail={
                        "path": str(outcome.path),
                        "sha256": outcome.sha256,
                        "version": outcome.version,
                        **extra,
                    },
                )
            elif isinstance(outcome, Unchanged):
                self.state.add_event(
                    "unchanged",
                    **common,
                    reason=reason,
                    detail={"path": str(outcome.path), **extra},
                )
            elif isinstance(outcome, Refused):
                self.state.add_event(outcome.kind, **common, reason=outcome.reason, detail=extra)
            else:
                self.state.add_event(
                    "error", **common, reason=f"could not write: {outcome.reason}", detail=extra
                )

    def apply(self, doc: SkillDoc, origin: Origin, *, force: bool = False) -> Written | Unchanged:
        """Write and commit at once (a person's or an agent's tool's write). Raises
        LibraryError (Protected, CapReached) for a refusal and OSError for a failed write."""
        from skilld.errors import CapReached

        outcome = self.write(doc, origin, force=force)
        self.commit(outcome, origin)
        if isinstance(outcome, Refused):
            error = {"protected": Protected, "cap": CapReached}.get(outcome.kind, LibraryError)
            raise error(outcome.reason)
        if isinstance(outcome, WriteFailed):
            raise LibraryError(f"could not write {outcome.name}: {outcome.reason}")
        return outcome

    def _ensure_root(self) -> None:
        """Create the skills dir; a project's only as real folders inside its root."""
        require_real_project_dir(self.spec)
        self.root.mkdir(parents=True, exist_ok=True)

    def _new_path(self, name: str) -> Path:
        self._ensure_root()
        if self.layout == "flat":
            return contained_path(self.root, f"{name}.md")
        return contained_path(self.root, name, SKILL_FILE)

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
            contained_path(entry.root, *entry.path.relative_to(entry.root).parts)
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
        if archive_root.is_symlink() or (archive_root.exists() and not archive_root.is_dir()):
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
        """Archived skills by name -> their folder or file (newest archive wins a clash).

        The name is the one `archive` gave the entry: the skill's, with `-<UTC stamp>` when
        an archive of that name was there already."""
        found: dict[str, tuple[float, Path]] = {}
        root = self.root / ARCHIVE_DIR
        if root.is_symlink():
            return {}
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for child in os.scandir(root):
                if child.name.startswith(".") or child.is_symlink():
                    continue
                path = Path(child.path)
                skill_file = path / SKILL_FILE if child.is_dir() else path
                stem = child.name if child.is_dir() else child.name.removesuffix(".md")
                name = _ARCHIVE_STAMP.sub("", stem)
                if not skill_file.is_file() or not is_safe_path_component(name):
                    continue
                mtime = child.stat(follow_symlinks=False).st_mtime
                if name not in found or found[name][0] < mtime:
                    found[name] = (mtime, path)
        return {name: path for name, (_, path) in found.items()}

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
            ours = record.sha256 if record is not None else None
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

    # -- history -----------------------------------------------------------------------------

    def _save_history(self, name: str, path: Path) -> None:
        if self.history_keep == 0:
            return
        data = read_tree_file(self.root, self._relpath(path))
        if data is None:
            return
        digest = sha256_hex(data)[:12]
        saved = self._saved_versions(name)
        if saved and saved[-1].path is not None and saved[-1].path.name.endswith(f"-{digest}.md"):
            # A write retried tick after tick (a full disk) replaces the same version: saving
            # it each time would push the older versions out of the history.
            return
        folder = self.history_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y%m%dT%H%M%S%fZ")
        atomic_write(folder / f"{stamp}-{digest}.md", data)
        for old in self._saved_versions(name)[: -self.history_keep]:
            assert old.path is not None
            old.path.unlink(missing_ok=True)

    def history(self, name: str) -> list[HistoryVersion]:
        """Saved versions, oldest first: those saved on this host, and in a team library every
        version the git history holds (a conflict's losing side included)."""
        versions = self._saved_versions(self.check_name(name))
        if self.team is not None and self.team.is_set_up:
            for relpath in self._team_paths(name):
                versions += [
                    HistoryVersion(v.commit, v.committed_at, commit=v.commit, subject=v.subject)
                    for v in self.team.file_versions(relpath)
                ]
            versions.sort(key=lambda v: v.saved_at)
        return versions

    def version_bytes(self, name: str, version: str) -> bytes:
        """The content of the saved version `version` (as `history` names it). Raises
        NotFound."""
        chosen = next((v for v in self.history(name) if v.version == version), None)
        if chosen is None:
            raise NotFound(f"{name} has no version {version}")
        return self._version_bytes(chosen, name)

    def _saved_versions(self, name: str) -> list[HistoryVersion]:
        """The versions saved on this host, oldest first (bounded by `history_keep`)."""
        versions = []
        with contextlib.suppress(FileNotFoundError):
            for child in sorted(os.scandir(self.history_dir / name), key=lambda e: e.name):
                if child.name.endswith(".md") and not child.name.startswith("."):
                    stem = child.name[:-3]
                    saved = datetime.strptime(stem.split("-")[0], "%Y%m%dT%H%M%S%fZ")
                    saved_at = saved.replace(tzinfo=UTC).isoformat(timespec="seconds")
                    versions.append(HistoryVersion(stem, saved_at, path=Path(child.path)))
        return versions

    def _team_paths(self, name: str) -> list[str]:
        """Where a skill's file has lived in a team library's tree (dir and flat layouts)."""
        return [f"{name}/{SKILL_FILE}", f"{name}.md"]

    def _version_bytes(self, version: HistoryVersion, name: str) -> bytes:
        if version.path is not None:
            return version.path.read_bytes()
        assert self.team is not None and version.commit is not None
        for relpath in self._team_paths(name):
            with contextlib.suppress(KeyError):
                return self.team.read_version(version.commit, relpath)
        raise NotFound(f"{name} is not in commit {version.commit}")

    def rollback(
        self, name: str, origin: Origin, *, version: str | None = None, force: bool = False
    ) -> Written:
        """Restore a saved version (by default the newest that differs from the current file:
        a team library's history holds the current version too); the current one is kept.

        A skill skilld deleted comes back the same way: its last version is in history. The
        version comes back byte for byte, except that a load-time shell trigger in it is broken
        (`neutralise_file`): no rollback brings back a skill that runs something as it loads.
        """
        with self.locked():
            name = self.check_name(name)
            entry = self.entry(name)
            if entry is None and self.get(name) is not None:
                raise Protected(f"{name} is owned by external, not skilld")
            versions = self.history(name)
            if not versions:
                raise NotFound(f"{name} has no saved versions in library {self.name}")
            if version is None:
                current = entry.sha256 if entry is not None else None
                chosen = next(
                    (
                        v
                        for v in reversed(versions)
                        if sha256_hex(self._version_bytes(v, name)) != current
                    ),
                    None,
                )
                if chosen is None:
                    raise NotFound(f"{name} has no saved version other than the current one")
            else:
                chosen = next((v for v in versions if v.version == version), None)
                if chosen is None:
                    raise NotFound(f"{name} has no version {version}")
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
            data = neutralise_file(self._version_bytes(chosen, name))
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


def _os_reason(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
