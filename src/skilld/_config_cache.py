"""The decoded config file, kept as JSON so that a command can skip the TOML parser.

Every command, and an agent's hook on every tool call, loads the config; importing `tomllib`
costs about half a bare interpreter's start-up, and `json` is loaded anyway. The cache file
(`$XDG_CACHE_HOME/skilld/config.json`) holds a config's exact text and the table it decoded
to, and is used only when the file read holds that very text: no edit can be missed, and no
timestamp is trusted. (Relative paths are resolved later, against the file's own folder, so
the table depends on the text alone.) One entry: the config this user loaded last. Whatever is
wrong with the cache (missing, unreadable, damaged, not writable) costs only the parse it
would have saved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from skilld.fsutil import atomic_write


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "skilld" / "config.json"


def cached_table(text: str) -> dict[str, Any] | None:
    """The table `text` decoded to, if it is the text the cache holds; else None."""
    try:
        with open(cache_file(), "rb") as handle:
            info = os.fstat(handle.fileno())
            # The table becomes the configuration: only a file no one else could have written.
            if info.st_uid != os.getuid() or info.st_mode & 0o022:
                return None
            entry = json.loads(handle.read())
    except (OSError, ValueError, RuntimeError):  # RuntimeError: $HOME unknown
        return None
    if not isinstance(entry, dict) or entry.get("text") != text:
        return None
    table = entry.get("table")
    return table if isinstance(table, dict) else None


def store_table(text: str, table: dict[str, Any]) -> None:
    """Keep `table` for the next load of `text`; a table JSON cannot hold (a TOML date) is not
    kept."""
    try:
        payload = json.dumps({"text": text, "table": table})
    except (TypeError, ValueError):
        return
    try:
        target = cache_file()
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(target, payload, mode=0o600, durable=False)
    except (OSError, RuntimeError):
        pass  # a read-only home, a full disk: the next load parses the TOML again
