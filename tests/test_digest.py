"""`sha256_hex` is SHA-256, whichever implementation the build gives it."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from skilld.digest import sha256_hex


@given(st.binary(max_size=4096))
def test_it_is_hashlibs_sha256(data: bytes) -> None:
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_a_build_without_cpythons_own_sha256_gets_hashlibs() -> None:
    """A FIPS build has no `_sha256` (`_sha2` from 3.12): the import falls back, same digest."""
    probe = (
        "import sys\n"
        "sys.modules['_sha2'] = sys.modules['_sha256'] = None\n"  # `import` of either fails
        "from skilld.digest import sha256_hex\n"
        "print(sha256_hex(b'skilld'), 'hashlib' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == [hashlib.sha256(b"skilld").hexdigest(), "True"]
