"""What a skill targets: the failures of its window it is meant to end (DESIGN.md §13).

The reflection window lists its failures, one `[failure F<n>] tool | command | error` data line
each; an evolve reply may name the ones its skill ends (`"ends": ["F2"]`). A version's *targets*
(its source failures) are the counted failures it names; without `ends`, those whose command
head appears in the skill's body; else none, and the verdict is `no-failure`. Never every
failure of the window: a skill about dialyzer warnings is not credited with `git push`.

Pure: a window's failures and a reply in, signatures out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from skilld.effect.extract import COUNTED_CLASSES, Failure

#: A window lists at most this many failures: the prompt is no place for a log.
MAX_LISTED = 20
#: How much of a failing command a failure line shows.
LINE_COMMAND_CHARS = 200
#: The data line of one failure, inside the window's delimiters.
FAILURE_LINE = "[failure {label}] {tool} | {command} | {error} ({resolved})"


class Listed(NamedTuple):
    """A failure as the window lists it."""

    label: str  # F1, F2, ...
    signature: str
    tool: str
    head: str  # the command head (`git push`)
    command: str  # the command as run, cut
    error: str
    resolved: bool


def listed_failures(failures: Iterable[Failure]) -> list[Listed]:
    """The counted failures (real, hook, masked) a window shows, each signature once, in the
    order the session ran them, numbered F1, F2, ..."""
    seen: set[str] = set()
    listed: list[Listed] = []
    for failure in failures:
        if failure.cls not in COUNTED_CLASSES or failure.signature in seen:
            continue
        seen.add(failure.signature)
        command = " ".join((failure.run or failure.command).split())
        if len(command) > LINE_COMMAND_CHARS:
            command = command[: LINE_COMMAND_CHARS - 1] + "…"
        listed.append(
            Listed(
                f"F{len(listed) + 1}",
                failure.signature,
                failure.tool,
                failure.command,
                command,
                " ".join((failure.line or failure.error).split())[:LINE_COMMAND_CHARS],
                failure.resolved,
            )
        )
        if len(listed) == MAX_LISTED:
            break
    return listed


def failure_lines(listed: Sequence[Listed]) -> str:
    """The window's `[failure F<n>]` lines, each with its newline."""
    return "".join(
        FAILURE_LINE.format(
            label=item.label,
            tool=item.tool,
            command=item.command,
            error=item.error,
            resolved="resolved later in the session" if item.resolved else "not resolved",
        )
        + "\n"
        for item in listed
    )


def mentions(body: str, head: str) -> bool:
    """Whether `body` names the command `head` (`git push`) as words of its own."""
    words = head.split()
    if not words:
        return False
    pattern = r"(?<![\w./-])" + r"\s+".join(re.escape(word) for word in words) + r"(?![\w-])"
    return re.search(pattern, body) is not None


def targeted(listed: Sequence[Listed], ends: Sequence[str] | None, body: str) -> list[str]:
    """The signatures a version targets: the failures `ends` names when the reply named any
    (None or empty: it named none), else those whose command head the body names."""
    if ends:
        named = set(ends)
        return [item.signature for item in listed if item.label in named]
    return [item.signature for item in listed if mentions(body, item.head)]


def targeted_in_body(failures: Iterable[tuple[str, str]], body: str) -> list[str]:
    """For a version written before targets were recorded: the (signature, head) pairs of its
    window whose head the skill's body names, each signature once."""
    return list(dict.fromkeys(sig for sig, head in failures if mentions(body, head)))


def kept_targets(value: object) -> tuple[str, ...] | None:
    """Targets as a kept or staged proposal's JSON holds them; None when it holds none (it
    was kept before targets were recorded)."""
    if not isinstance(value, list):
        return None
    return tuple(item for item in value if isinstance(item, str))
