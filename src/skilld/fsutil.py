"""Atomic, durable file writes and paths that cannot escape their root.

Every file skilld writes goes through `atomic_write`: a temp file created exclusively in the
target's directory, written, flushed and fsynced, moved over the target with `os.replace`, then
the directory fsynced. A crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
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
#: A temp file of a process that may still be writing it (in another pid namespace, say) is
#: left alone for this long.
STRAY_TEMP_SECONDS = 3600.0
_TEMP_OWNER = re.escape(TEMP_MARKER) + r"(\d+)-"  # compiled on first use


class UnsafePath(ValueError):
    """A path that would leave its root, or a name that is not a single safe component."""


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
    temp = directory / temp_name(path.name)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    if durable:
        fsync_dir(directory)


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


def contained_path(root: Path, *parts: str) -> Path:
    """`root/parts…`, refused if any existing link along the way leads outside `root`.

    The root itself may be a symlink (users point skills dirs at dotfile repos); what is
    refused is an entry inside it that resolves elsewhere.
    """
    for part in parts:
        check_component(part)
    real_root = root.resolve()
    candidate = root.joinpath(*parts)
    current = real_root
    for part in parts:
        current = current / part
        if current.is_symlink():
            target = current.resolve()
            if target != real_root and real_root not in target.parents:
                raise UnsafePath(f"{root.joinpath(*parts)} is a link out of {root}")
    return candidate


def real_subdir(root: Path, parts: tuple[str, ...], *, create: bool = False) -> Path | None:
    """`root/parts…` when the root and every folder down to it are real directories: no link
    anywhere, so nothing written there can land outside `root`. None when a folder is missing
    (with `create`, missing folders are made instead, one by one: `mkdir` never follows a link
    at the name it creates). Raises UnsafePath naming a folder that is a link or not a folder.

    Checked where it is decided and again right before each write: a link planted in between
    (a `git pull`, a person) is caught by the second look.
    """
    current = root
    for part in ("", *parts):
        if part:
            if part in (".", "..") or "/" in part or "\x00" in part:
                raise UnsafePath(f"not a safe path component: {part!r}")
            current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            if not create or not part:
                return None
            os.mkdir(current)
            info = os.lstat(current)
        if stat.S_ISLNK(info.st_mode):
            raise UnsafePath(f"{current} is a symbolic link")
        if not stat.S_ISDIR(info.st_mode):
            raise UnsafePath(f"{current} is not a directory")
    return current
