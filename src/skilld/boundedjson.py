"""JSON written by someone else, read with a size bound and a nesting bound.

`json.loads` recurses once per level of nesting: a document nested 100,000 deep (200 KB of
`[`) raises RecursionError, which no caller of a decoder expects, and one nested a few hundred
deep still decodes into a value that every recursive walk over it (`json.dumps`, a deep copy,
a comparison) may fail on later. So every JSON that crosses a trust boundary (a teammate's
manifest and usage files, `.usage.json`, a model server's reply, an MCP client's line) goes
through `loads`: its size is checked first, then its nesting, by a scan that skips strings
(and their escapes) exactly as the decoder reads them, and only then is it decoded. Too large
or too deep raises `JSONRefused`, a ValueError like every other way a text can fail to be
JSON, whose message says which.

The nesting is measured on the brackets outside strings, at C speed: each pass removes every
innermost pair (an opening bracket followed at once by a closing one), so the passes it takes
to remove every pair are the height of what is nested; an opening bracket never closed (a
truncated file) adds its own level to that. The bound so checked holds for a decoder started
at any bracket outside a string, not only at the first: a reader that salvages a damaged file
by decoding from the middle is bounded by the same check.
"""

from __future__ import annotations

import json
from typing import Any, AnyStr

#: Nesting no file or message of skilld's comes near (a manifest is 3 deep, a usage file 4, a
#: chat completion 6), far below the interpreter's recursion limit.
MAX_DEPTH = 64

#: Every bracket as `(` or `)`, and every other byte dropped.
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[{]}"))


class JSONRefused(ValueError):
    """JSON that was not decoded: over its size bound or nested deeper than its depth bound."""


def loads(data: bytes | str, *, limit: int, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(data)` for a `data` of at most `limit` bytes (characters, for a str) nested
    at most `max_depth` deep; JSONRefused otherwise, and ValueError for what is not JSON."""
    check(data, limit=limit, max_depth=max_depth)
    return json.loads(data)


def check(data: bytes | str, *, limit: int, max_depth: int = MAX_DEPTH) -> None:
    """JSONRefused unless `data` is at most `limit` bytes (characters, for a str) and no
    decoder would nest deeper than `max_depth` in it; whether it is JSON is not looked at."""
    if len(data) > limit:
        raise JSONRefused(f"{len(data):,} bytes, over the limit of {limit:,}")
    if nesting(data, ceiling=max_depth) > max_depth:
        raise JSONRefused(f"nested deeper than {max_depth} levels")


def nesting(data: bytes | str, *, ceiling: int) -> int:
    """How deep a decoder started at any bracket outside a string in `data` could nest, at
    most (exactly, for JSON): the height of the pairs of brackets, plus the brackets opened and
    never closed. Exact up to `ceiling`; anything deeper is `ceiling + 1` (each level costs a
    pass, and the passes stop there)."""
    if isinstance(data, str):
        raw = data.encode("utf-8", "surrogatepass")
    elif (encoding := json.detect_encoding(data)) != "utf-8":  # UTF-16 or -32, as json reads
        # What does not decode, the decoder refuses before it reads a bracket.
        raw = data.decode(encoding, "replace").encode("utf-8")
    else:
        raw = data
    # A quote of the blanked text starts or ends a string; no byte of a multi-byte UTF-8
    # character is a quote or a backslash.
    outside = b"".join(blanked(raw).split(b'"')[::2])
    brackets = outside.translate(_PARENS, _NOT_BRACKETS)
    height = 0
    while height <= ceiling:
        inner_removed = brackets.replace(b"()", b"")
        if len(inner_removed) == len(brackets):
            return min(height + brackets.count(b"("), ceiling + 1)
        brackets = inner_removed
        height += 1
    return ceiling + 1


def blanked(text: AnyStr) -> AnyStr:
    """`text` with each escaped backslash and escaped quote as two underscores: as long as
    `text`, and each quote left in it starts or ends a string (or runs one to the end), as a
    decoder reads it. Outside a string a backslash is no JSON at all: a decoder stops at it,
    so however it is read there changes nothing a decoder sees."""
    if isinstance(text, bytes):
        return text.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    return text.replace("\\\\", "__").replace('\\"', "__")
