"""Content that must not become a persistent instruction without a person's approval.

A transcript can carry text written by anyone (a web page, a tool's output). A skill that tells
the agent to download and execute code is held for review even when `publish = "auto"`.
"""

from __future__ import annotations

import re

_RISKY: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        # curl/wget/fetch output piped straight into an interpreter
        (
            "download piped to a shell",
            r"\b(?:curl|wget|fetch|iwr|invoke-webrequest)\b[^\n|]*\|\s*(?:sudo\s+)?"
            r"(?:ba|z|da|k|fi)?sh\b|\b(?:curl|wget)\b[^\n|]*\|\s*(?:sudo\s+)?"
            r"(?:python[0-9.]*|perl|ruby|node|php)\b",
        ),
        ("shell running a download", r"\b(?:ba|z)?sh\s+(?:-c\s+)?[\"']?\s*<?\(\s*(?:curl|wget)\b"),
        ("eval of a download", r"\beval\b[^\n]*\$\(\s*(?:curl|wget)\b"),
        (
            "powershell download and execute",
            r"\biex\b[^\n]*(?:iwr|invoke-webrequest|downloadstring)",
        ),
        (
            "interpreter running a download",
            r"\b(?:python[0-9.]*|node|perl|ruby)\s+-[ce]\s+[\"']?\$\(\s*(?:curl|wget)\b",
        ),
        (
            "download then execute",
            r"\b(?:curl|wget)\b[^\n;&]*-[oO]\s*(\S+)[^\n]*(?:&&|;)\s*(?:sudo\s+)?(?:ba)?sh\s+\1",
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
