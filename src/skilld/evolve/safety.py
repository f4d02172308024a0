"""Content that must not become a persistent instruction without a person's approval.

A transcript can carry text written by anyone (a web page, a tool's output). A skill that tells
the agent to download and execute code is held for review even when `publish = "auto"`.
"""

from __future__ import annotations

import re

# Every pattern stays linear in the text, which a model wrote: each line is tried from its
# first fetcher only (an atomic group: a later one on the same line cannot match where the first
# failed), and the repetitions are possessive, so nothing is re-scanned.
_FIRST_FETCH = r"^(?>[^\n]*?\b(?:curl|wget|fetch|iwr|invoke-webrequest)\b)"
# What may stand between a pipe and the interpreter it feeds: `sudo -E`, a path, `env`.
_RUNNER = r"(?:sudo(?:\s++-\S++)*+\s++)?+(?:[^\s/|]*+/)*+(?:env\s++)?+"
_INTERPRETER = r"(?:(?:ba|z|da|k|fi)?sh|python[0-9.]*+|perl|ruby|node|php)\b"
_SHELL = r"(?:ba|z|da|k|fi)?sh"

_RISKY: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE | re.MULTILINE))
    for name, pattern in (
        # a download piped into an interpreter, also through `tee` and the like
        (
            "download piped to a shell",
            rf"{_FIRST_FETCH}(?:[^\n|]*+\|(?!\s*+{_RUNNER}{_INTERPRETER}))*+"
            rf"[^\n|]*+\|\s*+{_RUNNER}{_INTERPRETER}",
        ),
        (
            "shell running a download",
            rf"\b{_SHELL}\s++(?:-\S++\s++)*+[\"']?+\s*+[<$]\(\s*+(?:curl|wget)\b"
            r"|(?:\bsource|(?<![\w.])\.)\s++<\(\s*+(?:curl|wget)\b",
        ),
        ("eval of a download", r"^(?>[^\n]*?\beval\b)[^\n]*?\$\(\s*+(?:curl|wget)\b"),
        (
            "powershell download and execute",
            r"^(?>[^\n]*?\biex\b)[^\n]*?(?:iwr|invoke-webrequest|downloadstring)"
            r"|^(?>[^\n]*?\b(?:iwr|irm|invoke-webrequest|invoke-restmethod)\b)"
            r"(?:[^\n|]*+\|(?!\s*+(?:iex|invoke-expression)\b))*+[^\n|]*+\|\s*+"
            r"(?:iex|invoke-expression)\b",
        ),
        (
            "interpreter running a download",
            r"\b(?:python[0-9.]*+|node|perl|ruby)\s++-[ce]\s++[\"']?+\$\(\s*+(?:curl|wget)\b",
        ),
        (
            # the first file a download writes, then run by a shell later on the line
            "download then execute",
            rf"{_FIRST_FETCH}(?>[^\n;&]*?(?:--output[=\s]|\s-[a-z]{{0,10}}o|>))\s*+(\S++)"
            rf"[^\n]*?(?:&&|;)\s*+(?:sudo\s++)?{_SHELL}\s++\1(?!\S)",
        ),
    )
)


def risky_patterns(*texts: str) -> list[str]:
    """The names of download-and-execute patterns found in any of `texts`."""
    found: list[str] = []
    for name, pattern in _RISKY:
        if any(pattern.search(text) for text in texts) and name not in found:
            found.append(name)
    return found
