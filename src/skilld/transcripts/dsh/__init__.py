"""DeepSeek Harness (DSH) sessions: a sessions directory (zstd frames or plain lines, `files`),
or the opt-in SQLite store (`store`); `frames` owns the Zstandard framing and `digest` turns
events into messages.

A root that is missing or unreadable now (an unmounted volume, a mount not there yet) keeps every
cursor, so that nothing is read twice when it comes back.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from skilld.transcripts.dsh.digest import KIND
from skilld.transcripts.dsh.files import DEFAULT_GLOBS, SessionDirectory
from skilld.transcripts.dsh.store import SessionStore, is_sqlite
from skilld.transcripts.model import Cursor, ScanResult

__all__ = ["DshSource"]


class DshSource:
    """Sessions of DeepSeek Harness: a sessions directory (zstd or plain), or its SQLite store."""

    kind = KIND

    def __init__(
        self,
        path: Path,
        *,
        glob: str | None = None,
        include_subagents: bool = False,
        tool_result_max_chars: int = 2000,
        max_line_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.path = Path(path).expanduser()
        self._directory = SessionDirectory(
            self.path,
            globs=(glob,) if glob else DEFAULT_GLOBS,
            include_subagents=include_subagents,
            tool_result_max_chars=tool_result_max_chars,
            max_line_bytes=max_line_bytes,
        )
        self._store = SessionStore(
            self.path,
            include_subagents=include_subagents,
            tool_result_max_chars=tool_result_max_chars,
            max_line_bytes=max_line_bytes,
        )

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        own = {key: cursor for key, cursor in cursors.items() if key.startswith(f"{KIND}:")}
        now = time.time()
        try:
            root = os.stat(self.path)
        except FileNotFoundError:
            return self._unavailable(own, "no DSH sessions directory or database here")
        except OSError as exc:
            return self._unavailable(own, exc.strerror or str(exc))
        if stat.S_ISDIR(root.st_mode):
            return self._directory.scan(
                own, start_new_at_end_before=start_new_at_end_before, now=now
            )
        if is_sqlite(self.path):
            return self._store.scan(own, start_new_at_end_before=start_new_at_end_before, now=now)
        return self._unavailable(own, "neither a sessions directory nor a SQLite database")

    def _unavailable(self, cursors: Mapping[str, Cursor], reason: str) -> ScanResult:
        # Seeing nothing here now is not every session having gone: keep their cursors.
        return ScanResult(reads=[], seen=set(cursors), errors=[f"{self.path}: {reason}"])
