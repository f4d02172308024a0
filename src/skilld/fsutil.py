"""Atomic, durable file writes, and the trust boundary of a library's tree.

Every file skilld writes goes through `atomic_write`: a temp file created exclusively in the
target's directory, written, flushed and fsynced, moved over the target with `os.replace`, then
the directory fsynced. A crash leaves the old file or the new one, never half of one.

The library's tree. A library dir holds files other people control (a teammate's push, a
cloned repository), so every file skilld reads or writes inside one (skills, `.gitignore`,
`.skilld/**`, `.usage.json` and its lock, `.archive/` moves) goes through these functions, each
taking the library root and a path relative to it (`/`-separated):

    read_tree_file(root, relpath)          the bytes of a regular file; None when missing
    read_regular_file(path, ...)           the one bounded read every skill file goes through
    write_tree_file(root, relpath, data)   atomic, durable replace (parent folders created)
    remove_tree_file(root, relpath)        unlink a file (a missing one is fine)
    move_in_tree(root, source, target)     os.replace inside the root (archive, restore)
    list_tree_files(root, relpath)         names of the regular files in a folder
    tree_path(root, relpath)               the checked Path, for a caller that needs one
    real_subdir(root, parts, create=...)   a project's skills dir: real folders all the way

Each walks from the root one component at a time with `openat(2)` and `O_NOFOLLOW`: a
component below the root that is a symbolic link (or not a folder) raises `UnsafePath`, so no
path resolves outside the root, and a link swapped in between a check and the open cannot
redirect it. The root itself may be a link (users point skills dirs at dotfile repos), except
for `real_subdir`, whose root is a project's: it must be a real folder too.
A relative path with an empty, `.` or `..` component, a NUL or a newline is refused as well.

Every read of a file someone else may have planted (a skill file, found by discovery or read
by the panel, MCP or `skills show`) is `read_regular_file`: opened non-blocking (a FIFO never
hangs it), never as a controlling terminal, a regular file by `fstat` (a FIFO, socket or
device is refused by name), and at most `MAX_FILE_BYTES` read (a 1 GB sparse file is refused
by its size, never read): `FileRefused` says why, and the caller lists the file as broken.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

#: Temp files carry this marker so start-up can find and remove strays from a crash.
TEMP_MARKER = ".skilld-tmp-"
#: Files are created readable and writable by everyone the umask allows: a service unit's
#: `UMask=0002` then gives the agent's group write access, as a person would expect.
FILE_MODE = 0o666
#: The state dir holds what transcripts taught (outcomes of redacted windows, staged proposals,
#: the event log) and the panel's token: its owner's alone, whatever the umask.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
#: A temp file of a process that may still be writing it (in another pid namespace, say) is
#: left alone for this long.
STRAY_TEMP_SECONDS = 3600.0
_TEMP_OWNER = re.escape(TEMP_MARKER) + r"(\d+)-"  # compiled on first use
#: The largest skill file skilld reads, and the largest file a remote may bring (a skill is a
#: page of Markdown and a few scripts).
MAX_FILE_BYTES = 1 << 20
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
)


class UnsafePath(ValueError):
    """A path that would leave its root, or a name that is not a single safe component."""


class FileRefused(UnsafePath):
    """A file that is not read: not a regular file, or over the size bound. Its message is
    the reason a listing shows."""


def read_regular_file(
    path: str | Path,
    *,
    dir_fd: int | None = None,
    follow: bool = False,
    limit: int = MAX_FILE_BYTES,
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at `path` (relative to `dir_fd` when given) and its
    `fstat`, read without blocking and at most `limit` bytes. A link at the end is followed
    only with `follow` (else OSError ELOOP, as `open` raises it). Raises FileRefused for a
    FIFO, socket, device or folder, or a file over `limit`; OSError as `open` raises it."""
    flags = _READ_FLAGS | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket cannot be opened
            raise FileRefused("not a regular file (a socket)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
            raise FileRefused(f"not a regular file ({kind})")
        if st.st_size > limit:
            raise FileRefused(f"{st.st_size:,} bytes, over the limit of {limit:,}")
        chunks: list[bytes] = []
        left = limit + 1  # one byte more tells a file that grew since the fstat
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise FileRefused(f"grew over the limit of {limit:,} bytes while read")
        return b"".join(chunks), st
    finally:
        os.close(fd)


def is_temp_file(name: str) -> bool:
    return TEMP_MARKER in name


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(name: str) -> str:
    """A temp file name beside `name`, carrying the writer's pid (see `remove_stray_temps`)."""
    return f".{name}{TEMP_MARKER}{os.getpid()}-{os.urandom(6).hex()}"


def atomic_write(
    path: Path, data: bytes | str, *, mode: int = FILE_MODE, durable: bool = True
) -> None:
    """Replace `path` with `data` atomically and (unless `durable` is False: a cache, which a
    crash may lose) durably."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory = path.parent
    _replace_via_temp(str(path), str(directory / temp_name(path.name)), payload,
                      parent=None, mode=mode, durable=durable)  # fmt: skip
    if durable:
        fsync_dir(directory)


def _replace_via_temp(
    target: str, temp: str, payload: bytes, *, parent: int | None, mode: int, durable: bool
) -> None:
    """The one replace every write makes: `temp` created exclusively beside `target`, written,
    flushed and fsynced (unless not `durable`), then moved over `target`; removed again if
    anything fails. With `parent` (a folder's descriptor) both names are relative to it, and
    the caller fsyncs the folder."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, mode) if parent is None else os.open(temp, flags, mode, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if parent is None:
            os.replace(temp, target)
        else:
            os.replace(temp, target, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=parent)
        raise


def private_dir(path: Path) -> Path:
    """`path` as a folder only its owner may enter; missing parents are created so as well.
    An existing folder is left as it is (`make_private` repairs one)."""
    if not path.is_dir():
        if not path.parent.is_dir():
            private_dir(path.parent)
        path.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
    return path


def make_private(root: Path) -> list[str]:
    """Take group's and others' access away from `root` (the state dir) and what it holds;
    the paths (relative to `root`) that had some. A root that is already private is checked
    one level deep only: what skilld creates below it is private from the start, so only a
    dir made before that (or opened up by hand) needs the whole walk. Links are never
    followed; what cannot be changed (another owner's file) is left as it is."""
    try:
        info = os.lstat(root)
    except OSError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        return []
    deep = bool(info.st_mode & 0o077)
    changed: list[str] = []
    if _privatise(root, info.st_mode, PRIVATE_DIR_MODE):
        changed.append(".")
    folders = [root]
    while folders:
        folder = folders.pop()
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    private = PRIVATE_DIR_MODE
                    if deep:
                        folders.append(Path(entry.path))
                elif stat.S_ISREG(mode):
                    private = PRIVATE_FILE_MODE
                else:
                    continue  # a link, a socket: nothing of skilld's
                if _privatise(Path(entry.path), mode, private):
                    changed.append(os.path.relpath(entry.path, root))
    return sorted(changed)


def _privatise(path: Path, mode: int, private: int) -> bool:
    if not mode & 0o077:
        return False
    try:
        os.chmod(path, stat.S_IMODE(mode) & private)  # never a link: the caller looked
    except OSError:
        return False
    return True


def remove_stray_temps(root: Path, *, depth: int = 2, now: float | None = None) -> list[Path]:
    """Remove temp files a crash left behind, at most `depth` levels below `root`.

    A CLI or MCP write may be in flight while the daemon starts or reloads: a temp file is
    removed when the process that named it is gone, or when it is older than any write takes
    (`STRAY_TEMP_SECONDS`; also for a writer in another pid namespace, or a reused pid).
    """
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    now = time.time() if now is None else now
    for path in _walk(root, depth):
        if not is_temp_file(path.name) or path.is_symlink() or not path.is_file():
            continue
        with contextlib.suppress(FileNotFoundError):
            young = now - path.stat().st_mtime < STRAY_TEMP_SECONDS
            if young and not _writer_gone(path.name):
                continue
            path.unlink()
            removed.append(path)
    return removed


def _writer_gone(name: str) -> bool:
    """Whether the process named in a temp file's name has exited (False when unknown)."""
    match = re.search(_TEMP_OWNER, name)
    if match is None:
        return False
    pid = int(match.group(1))
    if pid == os.getpid():
        return False  # a write of this very process may be in flight (a reload)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _walk(root: Path, depth: int) -> Iterator[Path]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        yield Path(entry.path)
        if depth > 1 and entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path), depth - 1)


def check_component(name: str) -> str:
    """`name` as a single path component that names a visible file: no separators, no dots."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or name.startswith(".")
        or "/" in name
        or "\\" in name
        or "\x00" in name
    ):
        raise UnsafePath(f"not a safe path component: {name!r}")
    return name


# -- the library's tree ----------------------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


def tree_parts(relpath: str) -> list[str]:
    """`relpath`'s components, refused unless it is a plain relative path below a root."""
    parts = relpath.split("/") if isinstance(relpath, str) else [""]
    if any(p in ("", ".", "..") or "\x00" in p or "\n" in p or "\r" in p for p in parts):
        raise UnsafePath(f"not a path inside a library: {relpath!r}")
    return parts


def tree_path(root: Path, relpath: str) -> Path:
    """`root/relpath` once every existing component below `root` is known to be a real folder
    (the last one may be anything but a link). Raises UnsafePath."""
    parts = tree_parts(relpath)
    with contextlib.suppress(FileNotFoundError):
        fd = _open_parent(root, parts, create=False)
        try:
            _refuse_link(fd, parts[-1], relpath)
        finally:
            os.close(fd)
    return root.joinpath(*parts)


def contained_path(root: Path, relpath: str) -> Path:
    """`tree_path`, for a path a person names: its refusal of a link that leads out of `root`
    says so, as the one a person most needs to recognise."""
    try:
        return tree_path(root, relpath)
    except UnsafePath:
        path, real_root = root / relpath, root.resolve()
        target = path.resolve()
        if target != real_root and real_root not in target.parents:
            raise UnsafePath(f"{path} is a link out of {root}") from None
        raise


def read_tree_file(root: Path, relpath: str, *, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of the regular file `root/relpath` (`read_regular_file`, at most `limit`),
    None when it (or a folder on the way) does not exist. Raises UnsafePath for a link on the
    way, FileRefused for a file that is not a regular one or is over `limit`."""
    parts = tree_parts(relpath)
    try:
        parent = _open_parent(root, parts, create=False)
    except FileNotFoundError:
        return None
    try:
        return read_regular_file(parts[-1], dir_fd=parent, limit=limit)[0]
    except FileNotFoundError:
        return None
    except FileRefused as exc:
        raise FileRefused(f"{relpath} inside {root}: {exc}") from None
    except OSError as exc:
        if exc.errno in _LINK_ERRORS:
            raise UnsafePath(f"{relpath} is a symbolic link inside {root}") from None
        raise
    finally:
        os.close(parent)


def write_tree_file(
    root: Path, relpath: str, data: bytes | str, *, mode: int = FILE_MODE, durable: bool = True
) -> None:
    """Replace `root/relpath` with `data` atomically (as `atomic_write`), creating the folders
    on the way. A link on the way raises UnsafePath; a link at the end is replaced, never
    followed."""
    parts = tree_parts(relpath)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    parent = _open_parent(root, parts, create=True)
    try:
        temp = temp_name(parts[-1])
        _replace_via_temp(parts[-1], temp, payload, parent=parent, mode=mode, durable=durable)
        if durable:
            os.fsync(parent)
    finally:
        os.close(parent)


def remove_tree_file(root: Path, relpath: str) -> None:
    """Unlink `root/relpath` (a link itself, never its target); a missing one is fine."""
    parts = tree_parts(relpath)
    try:
        parent = _open_parent(root, parts, create=False)
    except FileNotFoundError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parts[-1], dir_fd=parent)
    finally:
        os.close(parent)


def move_in_tree(root: Path, source: str, target: str) -> None:
    """`os.replace(root/source, root/target)` with both parents checked (the target's created).
    Neither end may be a link."""
    source_parts, target_parts = tree_parts(source), tree_parts(target)
    source_parent = _open_parent(root, source_parts, create=False)
    try:
        _refuse_link(source_parent, source_parts[-1], source)
        target_parent = _open_parent(root, target_parts, create=True)
        try:
            _refuse_link(target_parent, target_parts[-1], target)
            os.replace(
                source_parts[-1], target_parts[-1],
                src_dir_fd=source_parent, dst_dir_fd=target_parent,
            )  # fmt: skip
            os.fsync(target_parent)
        finally:
            os.close(target_parent)
    finally:
        os.close(source_parent)


def list_tree_files(root: Path, relpath: str) -> list[str]:
    """The names of the regular files (links left out) in the folder `root/relpath` (`.`: the
    root), sorted; empty when it does not exist."""
    parts = [] if relpath == "." else tree_parts(relpath)
    try:
        fd = _open_parent(root, [*parts, ""], create=False)
    except FileNotFoundError:
        return []
    try:
        names = []
        for name in os.listdir(fd):
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    names.append(name)
        return sorted(names)
    finally:
        os.close(fd)


def _open_parent(root: Path, parts: list[str], *, create: bool, real_root: bool = False) -> int:
    """A descriptor of the folder holding `parts[-1]`, walked from `root` without following a
    link. FileNotFoundError when a folder is missing (and `create` is False; with it the root
    is created too, unless `real_root`: then the root must be a real folder that exists)."""
    if create and not real_root:
        root.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(root, _DIR_FLAGS if real_root else os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        if real_root and exc.errno in _LINK_ERRORS:
            raise _not_a_folder(root, root.is_symlink()) from None
        raise
    try:
        for index, part in enumerate(parts[:-1]):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                child = _open_child_dir(fd, part, parts, index)
            except OSError as exc:
                if exc.errno in _LINK_ERRORS:
                    where = root.joinpath(*parts[: index + 1])
                    raise _not_a_folder(where, _is_link_at(fd, part)) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child_dir(fd: int, part: str, parts: list[str], index: int) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in _LINK_ERRORS:
            raise UnsafePath(f"{'/'.join(parts[: index + 1])} is not a plain folder") from None
        raise


def _not_a_folder(path: Path, is_link: bool) -> UnsafePath:
    return UnsafePath(f"{path} is a symbolic link" if is_link else f"{path} is not a directory")


def _is_link_at(parent: int, name: str) -> bool:
    with contextlib.suppress(FileNotFoundError):
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    return False


def _refuse_link(parent: int, name: str, relpath: str) -> None:
    if _is_link_at(parent, name):
        raise UnsafePath(f"{relpath} is a symbolic link")


def real_subdir(root: Path, parts: tuple[str, ...], *, create: bool = False) -> Path | None:
    """`root/parts…` when the root and every folder down to it are real directories: no link
    anywhere, so nothing written there can land outside `root`. None when a folder is missing
    (with `create`, missing folders below the root are made instead, one by one, by the tree's
    walk: `mkdir` at a folder's descriptor never follows a link). Raises UnsafePath naming a
    folder that is a link or not a folder.

    Checked where it is decided and again right before each write: a link planted in between
    (a `git pull`, a person) is caught by the second look.
    """
    names = tree_parts("/".join(parts)) if parts else []
    try:
        fd = _open_parent(root, [*names, ""], create=create, real_root=True)
    except FileNotFoundError:
        return None
    os.close(fd)
    return root.joinpath(*names)
