"""Session keys as state.db stores them: unique across every source, even two of one kind.

A source keys its sessions `<kind>:<id>`, unique among its own sessions only: two `jsonl`
sources that each hold a `same.jsonl` both say `jsonl:same`. Every table keyed by session
(cursors and watermarks, held messages, provenance's `source-session`, the effect tables) takes
the *stored* key instead:

* a session the source already has a cursor for keeps the key that cursor is stored under, so
  a key never changes and a state.db written before keys were qualified keeps every cursor and
  watermark;
* a new session is stored under its source's key unless a session of another source holds
  that key; then under the key qualified by its source, `<kind>@<tag>:<id>`, the tag being the
  source path's last name and a digest of the source's id (kind and path).

So a lone source of a kind keeps today's keys, and of two that meet on one key the first to
have stored it keeps it. A qualified key names its kind before an `@`, which no source's own
key does (their kind is followed by `:`), so a stored key says which form it has.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePath

from skilld.digest import sha256_hex
from skilld.transcripts.model import Cursor, ScanResult

#: Hex characters of the source id's digest in a qualified key (32 bits: the sources of one
#: configuration never meet on it).
TAG_DIGEST_CHARS = 8


@dataclass(frozen=True, slots=True)
class StoredKeys:
    """The translation between one source's own session keys and the keys stored for them."""

    kind: str
    tag: str

    @classmethod
    def of(cls, kind: str, source_id: str) -> StoredKeys:
        """The keys of the source whose id is `source_id` (`<kind>:<path>`)."""
        path = source_id.removeprefix(f"{kind}:")
        slug = re.sub(r"[^a-z0-9]+", "-", PurePath(path).name.lower()).strip("-") or "root"
        digest = sha256_hex(source_id.encode("utf-8"))[:TAG_DIGEST_CHARS]
        return cls(kind, f"{slug}-{digest}")

    @property
    def _qualified_prefix(self) -> str:
        return f"{self.kind}@{self.tag}:"

    def qualified(self, key: str) -> str:
        """The source's own `key`, qualified by the source."""
        return self._qualified_prefix + key.removeprefix(f"{self.kind}:")

    def source_key(self, stored: str) -> str:
        """The source's own key of the session stored under `stored`."""
        if stored.startswith(self._qualified_prefix):
            return f"{self.kind}:{stored.removeprefix(self._qualified_prefix)}"
        return stored

    def source_cursors(self, stored: Mapping[str, Cursor]) -> dict[str, Cursor]:
        """The stored cursors of the source's sessions, by the source's own keys."""
        return {self.source_key(key): cursor for key, cursor in stored.items()}

    def stored_scan(
        self,
        scan: ScanResult,
        stored: Mapping[str, Cursor],
        held_elsewhere: Callable[[str], bool],
    ) -> ScanResult:
        """`scan` (made with `source_cursors(stored)`) by stored keys.

        `held_elsewhere(key)` says whether a session of another source is stored under `key`;
        it is asked only about sessions new to this source."""
        known = {self.source_key(key): key for key in stored}
        given: dict[str, str] = {}

        def stored_key(key: str) -> str:
            if key in known:
                return known[key]
            if key not in given:
                given[key] = self.qualified(key) if held_elsewhere(key) else key
            return given[key]

        reads = [read._replace(session=stored_key(read.session)) for read in scan.reads]
        # Only known sessions' keys matter in `seen` (it decides which cursors are kept): the
        # rest are never asked about.
        seen = {known[key] for key in scan.seen if key in known}
        seen.update(read.session for read in reads)
        return ScanResult(reads, seen, scan.skipped_lines, scan.errors)
