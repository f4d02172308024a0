"""The SHA-256 hex digest every record here keeps of bytes: provenance, manifests, history
versions, a transcript's head.

It is CPython's own SHA-256, not hashlib's: `import hashlib` loads OpenSSL's libcrypto, which
cost `skills list` and `status` 4-10 ms (up to half an interpreter's start-up) to hash a few
files of a few KB. A build without its own (FIPS builds keep only blake2) gets hashlib's; a
digest is the same whichever computes it.
"""

import sys

try:
    if sys.version_info >= (3, 12):
        from _sha2 import sha256 as _sha256
    else:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found]
except ImportError:
    from hashlib import sha256 as _sha256


def sha256_hex(data: bytes) -> str:
    return _sha256(data).hexdigest()
