"""The bounded JSON reader: its nesting scan agrees with the decoder, and its refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skilld.boundedjson import MAX_DEPTH, JSONRefused, loads, nesting

#: Strings full of what could fool a scan: brackets, quotes and backslashes.
TRICKY = st.text(alphabet='[]{}"\\ aé\n', max_size=12)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=40,
)


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_the_scan_measures_what_the_decoder_nests(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    for data in (text, text.encode(), text.encode("utf-16")):
        assert nesting(data, ceiling=100) == depth_of(value)
    assert loads(text, limit=len(text)) == value


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("[" * 100_000, 65),  # never closed: counted up to the ceiling and one more
        ("[" * 10 + '"', 10),  # a string that never closes hides nothing after it
        ('["\\\\", "[[["]', 1),  # an escaped backslash, then the string ends
        ('["\\"' + "[" * 3 + '"]', 1),  # an escaped quote: the string goes on
        ("]]]]" + "[[]]", 2),  # a bracket closing nothing opens no room below it
    ],
)
def test_the_scan_reads_strings_and_brackets_as_the_decoder_does(text: str, depth: int) -> None:
    assert nesting(text, ceiling=MAX_DEPTH) == depth


def test_what_is_too_large_or_too_deep_is_refused_before_it_is_decoded() -> None:
    bound = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(bound, limit=len(bound)) == json.loads(bound)
    with pytest.raises(JSONRefused, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads(f"[{bound}]", limit=1 << 20)
    with pytest.raises(JSONRefused, match="nested deeper than 64 levels"):
        loads(b"[" * 200_000 + b"]" * 200_000, limit=1 << 20)
    with pytest.raises(JSONRefused, match="1,025 bytes, over the limit of 1,024"):
        loads(b" " * 1025, limit=1024)
    with pytest.raises(ValueError) as not_json:
        loads("{not json", limit=100)
    assert not isinstance(not_json.value, JSONRefused)
