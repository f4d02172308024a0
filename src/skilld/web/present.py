"""What the panel's pages show, shaped for people: numbers (`1.28 M`), times (`3 h ago`, the
exact time on hover), an event's detail as key–value text with paths shortened to their
library, and the outcome of an action carried across its redirect (post/redirect/get).

Pure functions over plain values; everything they return reaches the page escaped (Jinja2's
autoescape, or `escape` where HTML is built here).
"""

from __future__ import annotations

import base64
import binascii
import html
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

from markupsafe import Markup, escape

#: The cookie that carries an action's outcome to the page it redirects to (read once).
FLASH_COOKIE = "skilld_flash"
FLASH_SECONDS = 60
_UNITS = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def human_count(value: float | int | None) -> str:
    """A count for people: `950`, `12.4 k`, `1.28 M` (three significant digits)."""
    if value is None:
        return "0"
    for size, unit in _UNITS:
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def calls_text(calls: int, cap: int | None) -> str:
    """`110 calls (no cap)`, or `110 of 120 calls` against the hourly spend cap."""
    noun = "call" if calls == 1 else "calls"
    if not cap:
        return f"{human_count(calls)} {noun} (no cap)"
    return f"{human_count(calls)} of {human_count(cap)} {noun}"


def parse_time(value: object) -> datetime | None:
    """An ISO time or a Unix timestamp as an aware UTC datetime; None for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def ago(moment: datetime, now: datetime) -> str:
    """How long before `now` `moment` was, in words (`just now`, `5 min ago`, `in 2 h`)."""
    seconds = (now - moment).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 45:
        return "just now"
    for size, unit in ((86400 * 365, "y"), (86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            count = round(seconds / size)
            words = f"{count} {unit}" if unit in ("min", "h") else _days(count, unit)
            return f"in {words}" if future else f"{words} ago"
    return "just now"


def _days(count: int, unit: str) -> str:
    noun = {"d": "day", "y": "year"}[unit]
    return f"{count} {noun}{'' if count == 1 else 's'}"


def time_tag(value: object, now: datetime | None = None) -> Markup:
    """`<time datetime=ISO title=ISO>3 h ago</time>`, or "never" with no time: every time a
    person reads in the panel is this one tag (the `ago` filter), the exact value on hover."""
    moment = parse_time(value)
    if moment is None:
        return Markup("never") if not value else Markup(escape(str(value)))
    exact = moment.astimezone(UTC).isoformat(timespec="seconds")
    shown = ago(moment, now or datetime.now(UTC))
    return Markup(f'<time datetime="{exact}" title="{exact}">{shown}</time>')  # our own text


def short_path(value: str, roots: Mapping[str, str]) -> str:
    """`value` with a library's folder written as the library's name (`default:deploy/SKILL.md`),
    the longest root first."""
    for root, name in sorted(roots.items(), key=lambda item: -len(item[0])):
        if value == root:
            return f"{name}:"
        if value.startswith(root.rstrip("/") + "/"):
            return f"{name}:{value[len(root.rstrip('/')) + 1 :]}"
    return value


def detail_pairs(
    detail: Mapping[str, Any] | None, roots: Mapping[str, str]
) -> list[tuple[str, str]]:
    """An event's detail as (key, text) pairs: strings as they are (paths shortened to their
    library), lists joined, anything deeper as compact JSON."""
    pairs = []
    for key, value in (detail or {}).items():
        if isinstance(value, str):
            text = short_path(value, roots)
        elif isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
            text = ", ".join(short_path(str(v), roots) for v in value)
        elif value is None or isinstance(value, bool | int | float):
            text = json.dumps(value)
        else:
            text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
        pairs.append((str(key), text))
    return pairs


def _e(value: object) -> str:
    """`value` escaped for HTML text or a quoted attribute (the standard library's escape:
    a page of events escapes some 700 values)."""
    return html.escape(str(value), quote=True)


def _link(href: str, text: str) -> str:
    return f'<a href="{_e(href)}">{_e(text)}</a>'


def event_row(event: Mapping[str, Any], roots: Mapping[str, str], now: datetime) -> str:
    """One row of the events table as HTML, every value escaped: the skill, library and
    session link to their pages, the time is relative, the detail key–value text."""
    library, skill, session = event["library"], event["skill"], event["session"]
    cells = [
        f'<td class="id">{_e(event["id"])}</td>',
        f'<td class="nowrap">{time_tag(event["ts"], now)}</td>',
        f'<td><a href="/events?kind={quote(str(event["kind"]))}">{_e(event["kind"])}</a></td>',
        "<td>"
        + (_link(f"/skills?library={quote(library)}", library) if library else "-")
        + "</td>",
        "<td>"
        + (
            _link(f"/skills/{quote(library)}/{quote(skill)}", skill)
            if skill and library
            else _e(skill or "-")
        )
        + "</td>",
        '<td class="session">'
        + (_link(f"/events?session={quote(session)}", session) if session else "-")
        + "</td>",
        f"<td>{_e(event['source'] or '-')}</td>",
        f"<td>{_e(event['reason'] or '')}</td>",
        '<td><dl class="detail">'
        + "".join(
            f"<dt>{_e(key)}</dt><dd>{_e(text)}</dd>"
            for key, text in detail_pairs(event["detail"], roots)
        )
        + "</dl></td>",
    ]
    return "<tr>" + "".join(cells) + "</tr>\n"


def safe_back(value: str | None, default: str) -> str:
    """`value` when it is a path on this panel (`/skills?q=x`), else `default`: a redirect
    never leads to another origin (`//host`, `/\\host`, `http:`) or carries a header break."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if any(ord(char) < 32 or char == "\\" for char in value):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value


class Flash(NamedTuple):
    """An action's outcome, shown once on the page the action redirects to."""

    outcome: str  # "done" or "refused"
    message: str

    def encode(self) -> str:
        data = json.dumps([self.outcome, self.message], ensure_ascii=False).encode()
        return base64.urlsafe_b64encode(data).decode("ascii")

    @classmethod
    def decode(cls, value: str | None) -> Flash | None:
        """The flash a cookie holds, or None for a missing or malformed one."""
        if not value:
            return None
        try:
            outcome, message = json.loads(base64.urlsafe_b64decode(value.encode("ascii")))
        except (ValueError, TypeError, binascii.Error, UnicodeError):
            return None
        if outcome not in ("done", "refused") or not isinstance(message, str):
            return None
        return cls(outcome, message[:500])
