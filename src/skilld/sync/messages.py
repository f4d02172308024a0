"""Commit messages skilld writes, and what it reads back from them.

The subject says what happened to which skill in words; git trailers carry the same facts for
machines, so a conflict report can say which host and session a version came from:

    updated fix-venv

    Skilld-Event: updated
    Skilld-Skill: fix-venv
    Skilld-Session: 7f3c…
    Skilld-Repository: github.com/acme/api
    Skilld-Branch: main
    Skilld-Host: laptop

(Repository and Branch: where the session that taught the change worked, when known.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Events whose commits skilld writes itself, besides the Library's own (created, updated…).
HAND_EDIT = "changed-by-hand"
RECOVERED = "recovered"
CONFLICT = "conflict"
JOINED = "joined"
USAGE = "usage"
GITIGNORE = "gitignore"

_TRAILER = re.compile(r"^(Skilld-[A-Za-z]+): (.*)$")
_ONE_LINE = re.compile(r"[\r\n]+")


def change_message(
    event: str,
    skill: str | None,
    *,
    host: str,
    session: str | None = None,
    detail: str | None = None,
    paths: Iterable[str] = (),
    subject: str | None = None,
    repository: str | None = None,
    branch: str | None = None,
) -> str:
    """The message of one commit: `subject` (by default `<event> <skill> <detail>`), a body
    listing `paths`, and the Skilld-* trailers."""
    if subject is None:
        subject = " ".join(str(part) for part in (event, skill, detail) if part)
    subject = _one_line(subject)
    body = "".join(f"  {_one_line(path)}\n" for path in paths)
    trailers = [
        ("Event", event),
        ("Skill", skill),
        ("Session", session),
        ("Repository", repository),
        ("Branch", branch),
        ("Host", host),
    ]
    trailer_text = "".join(f"Skilld-{key}: {_one_line(v)}\n" for key, v in trailers if v)
    return f"{subject}\n\n" + (f"{body}\n" if body else "") + trailer_text


def trailers(message: str) -> dict[str, str]:
    """The Skilld-* trailers of a commit message, keyed without the prefix ("Event", "Host")."""
    found: dict[str, str] = {}
    for line in message.splitlines():
        if match := _TRAILER.match(line.strip()):
            found[match.group(1).removeprefix("Skilld-")] = match.group(2).strip()
    return found


def _one_line(text: str) -> str:
    return _ONE_LINE.sub(" ", str(text)).strip()
