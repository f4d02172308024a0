"""`sha256_hex` is SHA-256, whichever implementation computes it, and it picks the one that
costs the process least."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from skilld.digest import OWN_SHA256_BUDGET, sha256_hex


def run_probe(code: str) -> object:
    """What a fresh interpreter running `code` prints, as JSON."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(result.stdout)


@given(st.binary(max_size=4096))
def test_it_is_hashlibs_sha256(data: bytes) -> None:
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_a_fresh_process_loads_openssl_only_once_it_has_hashed_the_budget() -> None:
    """Below the budget CPython's own SHA-256 spares a command libcrypto; past it, hashlib's."""
    seen = run_probe(
        "import json, sys\n"
        "from skilld.digest import OWN_SHA256_BUDGET, sha256_hex\n"
        "chunk = b'x' * (OWN_SHA256_BUDGET // 4)\n"
        "steps = [(sha256_hex(chunk), 'hashlib' in sys.modules) for _ in range(6)]\n"
        "print(json.dumps(steps))\n"
    )
    chunk_digest = hashlib.sha256(b"x" * (OWN_SHA256_BUDGET // 4)).hexdigest()
    assert seen == [[chunk_digest, loaded] for loaded in (False,) * 4 + (True,) * 2]


def test_a_process_with_hashlib_loaded_uses_it() -> None:
    """The daemon has OpenSSL loaded (httpx loads it): its SHA-256 is the faster one."""
    calls = run_probe(
        "import hashlib, json\n"
        "real, calls = hashlib.sha256, []\n"
        "hashlib.sha256 = lambda data: calls.append(len(data)) or real(data)\n"
        "from skilld.digest import sha256_hex\n"
        "assert sha256_hex(b'skilld') == real(b'skilld').hexdigest()\n"
        "print(json.dumps(calls))\n"
    )
    assert calls == [6]


def test_a_build_without_cpythons_own_sha256_uses_hashlibs() -> None:
    """A FIPS build has no `_sha256` (`_sha2` from 3.12): hashlib's computes the same digest."""
    seen = run_probe(
        "import json, sys\n"
        "sys.modules['_sha2'] = sys.modules['_sha256'] = None\n"  # `import` of either fails
        "from skilld.digest import sha256_hex\n"
        "print(json.dumps([sha256_hex(b'skilld'), 'hashlib' in sys.modules]))\n"
    )
    assert seen == [hashlib.sha256(b"skilld").hexdigest(), True]
