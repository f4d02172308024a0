"""The SHA-256 hex digest every record here keeps of bytes: provenance, manifests, history
versions, a transcript's head.

Which implementation computes it is a matter of speed only: the digest is the same. OpenSSL's
(hashlib's) is about five times faster per byte, but loading libcrypto costs 4-10 ms, up to half
an interpreter's start-up, and a one-shot command (`skills list`, `status`) hashes a few files
of a few KB. So a process that has hashlib loaded already (the daemon: httpx loads it) uses it,
and any other uses CPython's own SHA-256 until it has hashed `OWN_SHA256_BUDGET` bytes, about
what it hashes in the time loading OpenSSL takes, then switches: a command that hashes a large
library pays at most about twice what the better choice in hindsight would have cost. A build
without CPython's own (FIPS builds keep only blake2) always uses hashlib's.
"""

import sys
from collections.abc import Callable
from typing import Any

#: Bytes CPython's own SHA-256 hashes in about the time importing hashlib takes (4.6 ms a MB
#: against 0.7 ms for OpenSSL's, measured on Python 3.11).
OWN_SHA256_BUDGET = 1 << 20

try:
    if sys.version_info >= (3, 12):
        from _sha2 import sha256 as _own_sha256
    else:
        from _sha256 import sha256 as _own_sha256  # type: ignore[import-not-found]
    _OWN: Callable[[bytes], Any] | None = _own_sha256
except ImportError:
    _OWN = None

#: Bytes hashed by CPython's own. Threads racing on it can lose an increment: a few more bytes
#: hashed by it, no other harm.
_hashed_by_own = 0


def sha256_hex(data: bytes) -> str:
    global _hashed_by_own
    if _OWN is not None and _hashed_by_own < OWN_SHA256_BUDGET and "hashlib" not in sys.modules:
        _hashed_by_own += len(data)
        return _OWN(data).hexdigest()
    import hashlib

    return hashlib.sha256(data).hexdigest()
