"""Finding a library's skill files: which entries of a skills dir are skills, read safely.

Discovery lists a root (and, for the agent's view, the extra dirs), reads each skill file once
and hands back a `SkillEntry` per name. It decides nothing about ownership: the caller passes
`owner_of` (the library's rule, over provenance and the team's manifest). A long-lived process
passes a `FileFacts` cache so that an unchanged file costs a stat, not a read and a hash.
"""

import contextlib
import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from skilld.digest import sha256_hex
from skilld.errors import LibraryError
from skilld.fsutil import FileRefused, read_regular_file
from skilld.log import get_logger
from skilld.skills.document import SkillDoc, SkillParseError, parse_skill, quick_problem
from skilld.skills.layout import MAX_CATEGORY_DEPTH, SKILL_FILE
from skilld.skills.names import MAX_NAME_LENGTH, NAME_PATTERN, is_safe_path_component

Owner = Literal["managed", "human", "bundled", "hub", "external"]
Layout = Literal["dir", "flat"]
OwnerRule = Callable[[str, str | None], Owner]
#: What a listing learned of each skill file, by path: the file's identity (inode, size, mtime,
#: ctime) when read, its sha256 and its `quick_problem`. A long-lived process (the panel) keeps
#: one across requests so an unchanged file costs a stat, not a read and a hash.
FileFacts = dict[str, tuple[tuple[int, int, int, int], str, str | None]]

#: DSH's ranks: lower wins. The skills dir is the user level; extra dirs are project level.
USER_RANK = 400
EXTRA_RANK = 100
#: The suffix `archive` adds to a name already in the archive.
_ARCHIVE_STAMP = r"-\d{8}T\d{6}Z$"  # compiled on first use


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

    def content(self) -> bytes:
        """The file's bytes, read as discovery reads it: never a broken entry, never through
        a link out of its root, never a FIFO, a device or a file over the bound
        (`read_regular_file`). Raises LibraryError saying why."""
        if self.error:
            raise LibraryError(f"{self.name} is broken: {self.error}")
        target, real_root = self.path.resolve(), self.root.resolve()
        if real_root not in target.parents:
            raise LibraryError(f"{self.path} is a link out of {self.root}")
        try:
            return read_regular_file(target)[0]
        except (OSError, FileRefused) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise LibraryError(f"{self.name} is unreadable: {reason}") from None

    def text(self) -> str:
        """`content` as text. Raises LibraryError for a file that is not UTF-8."""
        try:
            return self.content().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LibraryError(
                f"{self.name} is broken: not valid UTF-8 at byte {exc.start}"
            ) from None


class _Child(Protocol):
    """What discovery reads of a directory entry (`os.DirEntry` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    def is_dir(self) -> bool: ...

    def is_file(self) -> bool: ...

    def is_symlink(self) -> bool: ...


# Plain classes for the records only discovery builds and nobody compares or unpacks: a named
# tuple costs a one-shot command a tenth of a millisecond to define.
class _NamedChild:
    """A directory entry looked up by name instead of listed."""

    __slots__ = ("name", "path")

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path

    def is_dir(self) -> bool:
        return os.path.isdir(self.path)

    def is_file(self) -> bool:
        return os.path.isfile(self.path)

    def is_symlink(self) -> bool:
        return os.path.islink(self.path)


class _Spot:
    """Where a candidate skill file was found, and what its entry is built from."""

    __slots__ = ("layout", "name", "owner_of", "path", "rank", "real_root", "root")

    def __init__(
        self,
        name: str,
        path: str,
        root: Path,
        real_root: Path,
        rank: int,
        layout: Layout,
        owner_of: OwnerRule,
    ) -> None:
        self.name, self.path, self.root, self.real_root = name, path, root, real_root
        self.rank, self.layout, self.owner_of = rank, layout, owner_of

    def entry(
        self, digest: str | None = None, doc: SkillDoc | None = None, error: str | None = None
    ) -> SkillEntry:
        owner = self.owner_of(self.name, digest)
        return SkillEntry(self.name, self.path, self.root, self.rank, self.layout, owner,
                          digest, doc, error)  # fmt: skip

    def leads_out(self) -> bool:
        target = Path(self.path).resolve()
        return target != self.real_root and self.real_root not in target.parents


class _Read:
    """A skill file's bytes, as `_read` read them."""

    __slots__ = ("data", "identity")

    def __init__(self, data: bytes, identity: tuple[int, int, int, int] | None) -> None:
        self.data = data
        #: Set when the file may be remembered.
        self.identity = identity


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """A file's identity for `FileFacts`: a rewrite (a new inode, or new bytes), a truncation
    and a change of mode each change it."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def external_owner(name: str, digest: str | None) -> Owner:
    return "external"


class Discovery:
    """The skills of one library's root and extra dirs, as its agent would find them."""

    def __init__(
        self,
        root: Path,
        *,
        extra_dirs: tuple[Path, ...] | list[Path],
        recursive: bool,
        flat_files: bool,
        form: str,
        file_facts: FileFacts | None = None,
    ) -> None:
        self.root = root
        self.extra_dirs = tuple(extra_dirs)
        self.recursive = recursive
        #: Whether a top-level `<name>.md` is a skill (DSH, or a flat library).
        self.flat_files = flat_files
        self.form = form
        #: Shared by the caller (None: every listing reads every file).
        self.file_facts = file_facts
        self._log = get_logger("skilld.library")

    def discover(
        self, owner_of: OwnerRule, *, include_extra: bool, parse: bool, only: str | None
    ) -> list[SkillEntry]:
        """Every skill, one per name (lowest rank wins), sorted by name; `only` looks at that
        name's own paths and nothing else."""
        found: dict[str, SkillEntry] = {}
        roots: list[tuple[Path, int, OwnerRule, int]] = [
            (self.root, USER_RANK, owner_of, MAX_CATEGORY_DEPTH if self.recursive else 1)
        ]
        if include_extra:
            roots += [(d, EXTRA_RANK + i, external_owner, 1) for i, d in enumerate(self.extra_dirs)]
        for root, rank, owner, depth in roots:
            scan = self._scan_root(root, root, rank, owner, parse=parse, only=only, depth=depth)
            for entry in scan:
                current = found.get(entry.name)
                if current is None or entry.rank < current.rank:
                    found[entry.name] = entry
        return [found[name] for name in sorted(found)]

    def _children(self, folder: Path, only: str | None) -> list[_Child] | None:
        """The entries of `folder` (or just `only`'s two paths in it); None when unreadable."""
        try:
            if only is not None:
                return [
                    _NamedChild(n, os.path.join(folder, n))
                    for n in (only, f"{only}.md")
                    if os.path.lexists(os.path.join(folder, n))
                ]
            return sorted(os.scandir(folder), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self._log.warning("skills_root_unreadable", root=str(folder), error=str(exc))
            return None

    def _sort_children(
        self, children: list[_Child], *, top: bool
    ) -> tuple[dict[str, _Child], dict[str, _Child]]:
        """Folders by name, and flat skill files by skill name (at the top level only)."""
        dirs: dict[str, _Child] = {}
        flats: dict[str, _Child] = {}
        for child in children:
            if child.name.startswith("."):
                continue  # .archive, .hub, .usage.json, .skilld, temp files
            if child.is_dir():
                dirs[child.name] = child
            elif top and self._is_flat_skill(child):
                flats[child.name[:-3]] = child
        return dirs, flats

    def _scan_root(
        self,
        root: Path,
        folder: Path,
        rank: int,
        owner_of: OwnerRule,
        *,
        parse: bool,
        only: str | None,
        depth: int,
    ) -> Iterator[SkillEntry]:
        children = self._children(folder, only)
        if children is None:
            return
        real_root = root.resolve()
        dirs, flats = self._sort_children(children, top=folder == root)
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
            spot = _Spot(name, path, root, real_root, rank, "dir", owner_of)
            if (entry := self._load(spot, parse=parse, linked=linked)) is not None:
                yield entry
        for name, child in flats.items():
            if name not in dirs:
                spot = _Spot(name, child.path, root, real_root, rank, "flat", owner_of)
                if (entry := self._load(spot, parse=parse, linked=child.is_symlink())) is not None:
                    yield entry

    def _is_flat_skill(self, child: _Child) -> bool:
        """A top-level file is a skill only as `<name>.md` with `<name>` a valid skill name
        (so never README.md, LICENSE or CHANGELOG.md), and only where an agent loads such
        files: DSH (its dialect) or a flat library. Claude Code, Codex and Hermes load
        `<name>/SKILL.md` only."""
        stem = child.name.removesuffix(".md")
        if stem == child.name or not self.flat_files:
            return False
        return (
            len(stem) <= MAX_NAME_LENGTH and bool(NAME_PATTERN.fullmatch(stem)) and child.is_file()
        )

    def _load(self, spot: _Spot, *, parse: bool, linked: bool) -> SkillEntry | None:
        """The entry at `spot`; None for a real folder without a skill file.

        A link (the entry itself, or the skill file in a folder) is followed only when it stays
        inside the root; one leading out is listed as broken, never read. Without a link on
        the way the file is inside the root by construction, so the common case costs one
        open and one read: this runs for every skill on every discovery.
        """
        if linked and spot.leads_out():
            return spot.entry(error=f"links out of {spot.root}; ignored")
        # Only a plain file (no link on the way) is remembered: its identity is then the path's.
        facts = self.file_facts if not parse and not linked else None
        if facts is not None and (known := self._known(facts, spot.path)) is not None:
            return spot.entry(known[0], error=known[1])
        read = self._read(spot, linked=linked, remember=facts is not None)
        if not isinstance(read, _Read):
            return read
        digest = sha256_hex(read.data)
        if not parse:
            problem = quick_problem(read.data, spot.name)
            if facts is not None and read.identity is not None:
                facts[spot.path] = (read.identity, digest, problem)
            return spot.entry(digest, error=problem)
        return self._parsed(spot, read.data, digest)

    @staticmethod
    def _known(facts: FileFacts, path: str) -> tuple[str, str | None] | None:
        """What `facts` remembers of `path` (its hash and problem), if the file is unchanged."""
        known = facts.get(path)
        if known is None:
            return None
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        if stat.S_ISREG(st.st_mode) and known[0] == identity(st):
            return known[1], known[2]
        return None

    @staticmethod
    def _read(spot: _Spot, *, linked: bool, remember: bool) -> _Read | SkillEntry | None:
        """The file's bytes (with its identity when `remember`), or the broken entry a failed
        read makes, or None for a real folder without a skill file."""
        try:
            try:
                data, st = read_regular_file(spot.path, follow=linked)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                if spot.leads_out():  # the skill file itself is a link
                    return spot.entry(error=f"links out of {spot.root}; ignored")
                remember = False
                linked = True  # a dangling link is listed as broken, not as no skill
                data, st = read_regular_file(spot.path, follow=True)
        except FileNotFoundError:
            return spot.entry(error="no SKILL.md in a linked folder") if linked else None
        except FileRefused as exc:  # a FIFO, socket or device, or a file over the bound
            return spot.entry(error=f"unreadable: {exc}")
        except OSError as exc:
            return spot.entry(error=f"unreadable: {exc.strerror or exc}")
        return _Read(data, identity(st) if remember else None)

    def _parsed(self, spot: _Spot, data: bytes, digest: str) -> SkillEntry:
        try:
            doc = parse_skill(data, dialect=self.form)
        except SkillParseError as exc:
            return spot.entry(digest, error=str(exc))
        if doc.name != spot.name:
            return spot.entry(digest, doc, f"frontmatter name {doc.name!r} != {spot.name!r}")
        return spot.entry(digest, doc)


def archived_skills(archive_root: Path) -> dict[str, Path]:
    """Archived skills by name -> their folder or file (newest archive wins a clash).

    The name is the one `archive` gave the entry: the skill's, with `-<UTC stamp>` when
    an archive of that name was there already."""
    found: dict[str, tuple[float, Path]] = {}
    if archive_root.is_symlink():
        return {}
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for child in os.scandir(archive_root):
            if child.name.startswith(".") or child.is_symlink():
                continue
            path = Path(child.path)
            skill_file = path / SKILL_FILE if child.is_dir() else path
            stem = child.name if child.is_dir() else child.name.removesuffix(".md")
            name = re.compile(_ARCHIVE_STAMP).sub("", stem)
            if not skill_file.is_file() or not is_safe_path_component(name):
                continue
            mtime = child.stat(follow_symlinks=False).st_mtime
            if name not in found or found[name][0] < mtime:
                found[name] = (mtime, path)
    return {name: path for name, (_, path) in found.items()}
