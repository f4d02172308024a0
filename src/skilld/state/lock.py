"""One daemon per state dir, and whether a recorded daemon still runs."""

import fcntl
import os
from pathlib import Path

from skilld.errors import StateError
from skilld.fsutil import PRIVATE_FILE_MODE, private_dir


def process_alive(pid: object) -> bool:
    """Whether `pid` names a running process (a daemon's, recorded in meta `daemon`)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class DaemonLock:
    """One daemon per state dir: an OS lock on `<state_dir>/daemon.lock` holding the pid."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "daemon.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateError(f"another skilld daemon (pid {holder}) holds {self.path}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DaemonLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
