"""Hostile text made safe to show: Markdown without HTML, diffs, and SVG charts.

A skill's body, description and reason were written by a model that read untrusted
transcripts. Markdown is rendered by markdown-it-py with raw HTML off; a link keeps its target
only when it is relative, or http(s) to a public host: a link to this machine or its network
(a loopback, private or link-local address, `localhost` and names under it, a one-label name)
is shown as text, not live, so a click on a learned skill never opens another local user's
server. An image becomes a link (the page loads nothing from anywhere). Everything else reaches
the page through Jinja2's autoescape.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, NamedTuple
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

_SCHEME = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9+.\-]*):")
#: Two slashes or backslashes in any mix: a browser reads the host that follows.
_NAMES_A_HOST = re.compile(r"^\s*[/\\]{2}")
#: A last label a browser reads as a number: the whole host is then an IPv4 address
#: (`127.1`, `0x7f.1`, `2130706433`).
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
#: Names that resolve on this machine or its network only (RFC 6761, 6762, 8375; ICANN's
#: private-use `.internal`).
_LOCAL_SUFFIXES = ("localhost", "local", "internal", "home.arpa")


def safe_link(url: str) -> bool:
    """Relative targets, and http(s) ones to a public host (`public_host`): no
    `javascript:`, `data:`, `file:` or others, no link to this machine or its network."""
    match = _SCHEME.match(url)
    if match is None:
        return not _NAMES_A_HOST.match(url)  # a protocol-relative link names a host
    if match.group(1).lower() not in ("http", "https"):
        return False
    return public_host(url[match.end() :])


def public_host(rest: str) -> bool:
    """Whether the part of an http(s) URL after `scheme:` names a public host as a browser
    reads it (backslashes as slashes, the host percent-decoded and folded to its compatibility
    form): a global IP address, or a name of two labels or more outside the local suffixes."""
    rest = rest.strip().replace("\\", "/")
    if not rest.startswith("//"):
        return False  # `http:host`: a browser still reads a host; a person means none
    authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0].rpartition("@")[2]
    if authority.startswith("["):
        host = authority[1 : authority.find("]")]
    else:
        host = authority.partition(":")[0]
    host = _folded(unquote(host))
    try:
        return ipaddress.ip_address(host).is_global
    except ValueError:
        pass
    labels = host.split(".")
    if len(labels) < 2 or not all(label.replace("-", "").isalnum() for label in labels):
        return False
    if _NUMERIC_LABEL.match(labels[-1]):
        return False
    return not any(host == local or host.endswith("." + local) for local in _LOCAL_SUFFIXES)


def _folded(host: str) -> str:
    """`host` as the names it could stand for compare: punycode labels decoded, compatibility
    forms (fullwidth digits, ideographic full stops) made plain, lower case, no final dot."""
    labels = []
    for label in host.split("."):
        if label.lower().startswith("xn--"):
            try:
                label = label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError):
                return ""
        labels.append(label)
    plain = unicodedata.normalize("NFKC", ".".join(labels)).replace("\u3002", ".")
    return plain.lower().rstrip(".")


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.validateLink = safe_link  # type: ignore[method-assign]

    def image_as_link(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        src = token.attrGet("src") or ""
        alt = "".join(child.content for child in token.children or ())
        label = escape(f"image: {alt or src}")
        return f'<a href="{escape(src)}" rel="noopener noreferrer">{label}</a>'

    md.add_render_rule("image", image_as_link)
    return md


_MD = _markdown()


def markdown(text: str) -> Markup:
    """`text` as HTML that holds no markup of its own: Markdown structure only."""
    return Markup(_MD.render(text))


def split_frontmatter(text: str) -> tuple[str, str]:
    """(the frontmatter's YAML, the body) of a skill file; ("", text) without frontmatter."""
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != "---":
        return "", text
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "\n".join(lines[1:index]), "\n".join(lines[index + 1 :])
    return "", text


def table_rows(rows: Sequence[Sequence[object]]) -> Markup:
    """`<tr>`s of escaped cells: the event log's page renders 50 rows of nine cells, and a
    template's attribute lookups cost more than the query that read them."""
    return Markup(
        "".join(
            "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>\n" for row in rows
        )
    )


class DiffLine(NamedTuple):
    kind: str  # "add", "del", "hunk", "same", "file"
    text: str


def unified_diff(before: str, after: str, *, before_name: str, after_name: str) -> list[DiffLine]:
    lines = []
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), before_name, after_name, lineterm=""
    ):
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        lines.append(DiffLine(kind, line))
    return lines


#: Frontmatter keys skilld writes itself on every version: noise in a proposal's diff.
MANAGED_KEYS = ("managed-by", "version", "source-session")
_MANAGED_LINE = re.compile(rf"^\s*(?:{'|'.join(map(re.escape, MANAGED_KEYS))}):")


def without_managed_lines(text: str) -> str:
    """`text` without the frontmatter lines skilld manages (and a `metadata:` left empty)."""
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != "---" or "---" not in (line.strip() for line in lines[1:]):
        return text
    end = next(i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---")
    kept = [line for line in lines[1:end] if not _MANAGED_LINE.match(line)]
    kept = [
        line
        for index, line in enumerate(kept)
        if line.strip() != "metadata:"
        or (index + 1 < len(kept) and kept[index + 1].startswith((" ", "\t")))
    ]
    return "\n".join([lines[0], *kept, *lines[end:]])


def proposal_diff(current: str, proposal: str) -> list[DiffLine]:
    """The diff a person reviews: without the lines skilld manages itself (ownership, version,
    source session), which approving never takes away; empty when only those differ."""
    names = {"before_name": "current", "after_name": "proposal"}
    return unified_diff(without_managed_lines(current), without_managed_lines(proposal), **names)


def bar_chart(
    bars: Sequence[tuple[str, float]], *, title: str, width: int = 600, height: int = 120
) -> Markup:
    """A bar chart as inline SVG (presentation attributes only: the CSP allows no inline
    style). Labels are escaped; each bar's value is in its tooltip."""
    if not bars:
        return Markup("")
    top = max(value for _, value in bars) or 1
    gap = 2
    bar_width = max(1.0, (width - gap * len(bars)) / len(bars))
    plot = height - 18
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for index, (label, value) in enumerate(bars):
        bar_height = max(0.0, plot * value / top)
        x = index * (bar_width + gap)
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{plot - bar_height:.1f}" width="{bar_width:.1f}"'
            f' height="{bar_height:.1f}"><title>{escape(label)}: {value:g}</title></rect>'
        )
    first, last = bars[0][0], bars[-1][0]
    parts.append(f'<text class="axis" x="0" y="{height - 4}">{escape(first)}</text>')
    parts.append(
        f'<text class="axis" x="{width}" y="{height - 4}" text-anchor="end">{escape(last)}</text>'
    )
    parts.append(f'<text class="axis" x="0" y="10">max {escape(f"{top:g}")}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
