"""A library's writer lock: the daemon, the CLI and the MCP server each take it around reading,
writing and recording a skill file, so that one never sees another's half-recorded write."""

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from skilld.fsutil import PRIVATE_FILE_MODE, private_dir


class WriterLock:
    """An OS lock on a file in the state dir, re-entrant within this process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._depth = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The library's writer lock (an OS lock in the state dir), re-entrant in-process."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        private_dir(self.path.parent)  # under the state dir: its owner's alone
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._depth = 1
            yield
        finally:
            self._depth = 0
            os.close(fd)  # closing the last descriptor releases the lock
