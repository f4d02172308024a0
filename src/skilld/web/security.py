"""Who may talk to the panel, and what every answer carries.

Every string the panel shows comes from a model that read untrusted transcripts, so the page
itself is locked down (no inline script, no other origin, no frames), and the server refuses
what a hostile page in the same browser could send: a request for a name the panel is not bound
to (DNS rebinding), a state change without the per-process secret or from another origin
(CSRF), and, when a token is configured, any request without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skilld.errors import ConfigError, UsageError

#: The cookie the login form sets: a digest of the token, never the token itself.
SESSION_COOKIE = "skilld_session"
#: The form field (or header, for scripts) carrying the per-process secret.
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-skilld-csrf"
#: Reachable without the token: the login form and what it needs to look like itself.
PUBLIC_PATHS = frozenset({"/login", "/static/panel.css"})

HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        b" connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


class Access(NamedTuple):
    """What the guard checks requests against."""

    #: Every `Host` header value the panel answers to ("127.0.0.1:8741", ...).
    hosts: frozenset[str]
    #: Required on every request when set (`[web] token_file`, `$SKILLD_WEB_TOKEN`).
    token: str | None
    #: Embedded in every page, required on every state change.
    secret: str


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def read_token(token_file: Path | None) -> str | None:
    """The panel's token: `$SKILLD_WEB_TOKEN`, else the first line of `token_file`, else None.
    Raises ConfigError for a token file that cannot be read or is empty."""
    if token := os.environ.get("SKILLD_WEB_TOKEN", "").strip():
        return token
    if token_file is None:
        return None
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {token_file}: {exc}", "web.token_file") from None
    if not token:
        raise ConfigError(f"{token_file} is empty", "web.token_file")
    return token


def require_token_off_loopback(host: str, token: str | None) -> None:
    """A panel reachable from other machines must ask for a token. Raises UsageError."""
    if not is_loopback(host) and token is None:
        raise UsageError(
            f"refusing to serve the panel on {host}, which is not loopback, without a token:"
            " set [web] token_file or SKILLD_WEB_TOKEN"
        )


def host_names(host: str) -> list[str]:
    """The names a browser may use for a panel bound to `host`: the loopback names always
    (a published container port), the bound name, and for a wildcard bind this machine's."""
    names = ["127.0.0.1", "localhost", "::1", host]
    if is_wildcard(host):
        hostname = socket.gethostname()
        names += [hostname, socket.getfqdn()]
        with contextlib.suppress(OSError):
            names += socket.gethostbyname_ex(hostname)[2]
    return [name for name in names if name and not is_wildcard(name)]


def allowed_hosts(names: Iterable[str], port: int) -> frozenset[str]:
    allowed = set()
    for name in names:
        shown = f"[{name}]" if ":" in name else name
        allowed.add(f"{shown}:{port}".lower())
        if port == 80:
            allowed.add(shown.lower())
    return frozenset(allowed)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def session_value(token: str) -> str:
    """The login cookie's value for `token`: proves the token without being it."""
    return hmac.new(token.encode(), b"skilld-web-session", hashlib.sha256).hexdigest()


def authorised(headers: Headers, cookies: dict[str, str], token: str) -> bool:
    bearer = headers.get("authorization", "")
    if bearer.startswith("Bearer ") and hmac.compare_digest(
        bearer.removeprefix("Bearer ").strip().encode(), token.encode()
    ):
        return True
    cookie = cookies.get(SESSION_COOKIE, "")
    return hmac.compare_digest(cookie.encode(), session_value(token).encode())


def same_origin(headers: Headers) -> bool:
    """Whether a state change comes from the panel's own pages.

    The panel's `Referrer-Policy: no-referrer` makes a browser send `Origin: null` (and no
    Referer) with the panel's own form posts, so where the origin is hidden the browser's
    `Sec-Fetch-Site` must say `same-origin`; a named origin must be the panel's."""
    host = headers.get("host", "")
    own = {f"http://{host}", f"https://{host}"}
    origin = headers.get("origin")
    if origin is not None and origin != "null":
        return origin in own
    referer = headers.get("referer")
    if referer is not None:
        return any(referer == o or referer.startswith(o + "/") for o in own)
    return headers.get("sec-fetch-site") == "same-origin"


def secret_matches(given: str | None, secret: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), secret.encode())


class Guard:
    """ASGI middleware: the Host allow-list, the token, the origin of state changes, and the
    security headers on every answer (refusals included)."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        refusal = self.refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def refusal(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        if headers.get("host", "").lower() not in self.access.hosts:
            return PlainTextResponse("unknown Host: this panel answers to its own address", 421)
        path: str = scope["path"]
        token = self.access.token
        if token is not None and path not in PUBLIC_PATHS:
            cookies = _cookies(headers)
            if not authorised(headers, cookies, token):
                if path.startswith("/api/") or scope["method"] not in ("GET", "HEAD"):
                    return PlainTextResponse("a token is required", 401)
                return RedirectResponse("/login", 303)
        if scope["method"] not in ("GET", "HEAD") and not same_origin(headers):
            return PlainTextResponse("refused: this request did not come from the panel", 403)
        return None


def _cookies(headers: Headers) -> dict[str, str]:
    from starlette.requests import cookie_parser

    return cookie_parser(headers.get("cookie", ""))
