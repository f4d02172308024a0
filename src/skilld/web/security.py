"""Who may talk to the panel, and what every answer carries.

Every string the panel shows comes from a model that read untrusted transcripts, so the page
itself is locked down (no inline script, no other origin, no frames), and the server refuses
what a hostile page in the same browser could send: a request for a name the panel is not bound
to (DNS rebinding), a state change without the per-process secret or from another origin
(CSRF). And every request needs the panel's token, on loopback too (another local user can
reach 127.0.0.1): `Authorization: Bearer TOKEN`, or the session cookie that opening
`/?token=TOKEN` (or the login form) sets. The cookie proves a login, not the token: an HMAC,
keyed by the token, over a random nonce and an expiry, so it expires, differs per login and
ends when the token changes. Wrong tokens are answered slowly: a few guesses a second.

A browser sends a cookie to every port of the host that set it, so a session set on
`127.0.0.1` or `localhost` would reach any other local user's server the person opens. A
session therefore lives only under the panel's own name (`<label>.localhost`, see
`skilld.web.login.panel_name`) and, off loopback, the machine's other names: a login by a
loopback address is sent there (no cookie is set on the way), and a page asked for by a
loopback address without `Authorization: Bearer` is refused with a word on where the panel is.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qsl, quote, urlencode

import anyio
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skilld.web.login import is_loopback

#: The cookie a login sets: `EXPIRES.NONCE.MAC`, never the token itself.
SESSION_COOKIE = "skilld_session"
#: How long a login lasts.
SESSION_SECONDS = 7 * 24 * 3600
#: The query parameter of the login URL `skilld web` prints.
TOKEN_PARAM = "token"

#: The form field (or header, for scripts) carrying the per-process secret.
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-skilld-csrf"
#: Reachable without the token: the login form and what it needs to look like itself.
PUBLIC_PATHS = frozenset({"/login", "/static/panel.css", "/static/favicon.svg"})

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
    #: The `Host` values a browser's session lives under ("skilld-….localhost:8741", and off
    #: loopback the machine's other names): never a loopback address or `localhost`.
    session_hosts: frozenset[str]
    #: Where a browser logs in ("http://skilld-….localhost:8741"): the URL `skilld web` prints.
    origin: str
    #: Required on every request (`$SKILLD_WEB_TOKEN`, `[web] token_file`, or generated).
    token: str
    #: Embedded in every page that needs a session, required on every state change.
    secret: str


def access_rules(
    names: Sequence[str], own_name: str, login_host: str, port: int, token: str, secret: str
) -> Access:
    """The rules of a panel on `port` known by `names` (see `host_names`) and by its own name
    `own_name` (`<label>.localhost`), whose login URL is on `login_host`. A session may live
    under every name but a loopback one: each port of a loopback name is any local user's."""
    sessions = [own_name, *(name for name in names if not is_loopback(name))]
    return Access(
        allowed_hosts([own_name, *names], port),
        allowed_hosts(sessions, port),
        origin_of(login_host, port),
        token,
        secret,
    )


def origin_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def own_path(path: str) -> str:
    """`path` as a redirect target that stays on the panel's origin: leading slashes and
    backslashes made one slash (`//host` and `/\\host` would name another host), and what
    could end or bend the URL percent-encoded."""
    return "/" + quote(path.lstrip("/\\"), safe="/!$&'()*+,;=:@-._~")


def is_wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def host_names(host: str, interfaces: Iterable[str] = ()) -> list[str]:
    """The names a browser may use for a panel bound to `host`: the loopback names always
    (a published container port), the bound name, and for a wildcard bind this machine's
    names and the addresses of its interfaces (`interfaces`, see `interface_addresses`)."""
    names = ["127.0.0.1", "localhost", "::1", host]
    if is_wildcard(host):
        hostname = socket.gethostname()
        names += [hostname, socket.getfqdn(), *interfaces]
        with contextlib.suppress(OSError):
            names += socket.gethostbyname_ex(hostname)[2]
    return [name for name in dict.fromkeys(names) if name and not is_wildcard(name)]


def interface_addresses() -> list[str]:
    """Every address of this machine's network interfaces: on Linux from /proc (each local
    IPv4 address the kernel routes to, each IPv6 address), and everywhere the address the
    default route leaves from. The hostname may map to loopback only (Debian's /etc/hosts),
    so names alone miss the address a LAN browser uses."""
    found: list[str] = []
    with contextlib.suppress(OSError, UnicodeDecodeError):
        found += fib_trie_addresses(Path("/proc/net/fib_trie").read_text(encoding="ascii"))
    with contextlib.suppress(OSError, UnicodeDecodeError):
        found += if_inet6_addresses(Path("/proc/net/if_inet6").read_text(encoding="ascii"))
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        # A UDP connect sends nothing: it only asks the kernel which address it would use.
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.connect((probe, 9))
            found.append(str(udp.getsockname()[0]))
    return list(dict.fromkeys(found))


def fib_trie_addresses(text: str) -> list[str]:
    """The local IPv4 addresses in /proc/net/fib_trie: each `|-- A.B.C.D` followed by a
    `/32 host LOCAL` line."""
    found = []
    previous = ""
    for line in text.splitlines():
        if "/32 host LOCAL" in line and previous.startswith("|-- "):
            found.append(previous.removeprefix("|-- "))
        previous = line.strip()
    return found


def if_inet6_addresses(text: str) -> list[str]:
    """The IPv6 addresses in /proc/net/if_inet6 (32 hex digits first on each line)."""
    found = []
    for line in text.splitlines():
        digits = line.split(" ", 1)[0]
        with contextlib.suppress(ValueError):
            found.append(str(ipaddress.IPv6Address(int(digits, 16))))
    return found


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


def session_cookie(token: str, now: float) -> str:
    """A new login's cookie value: `EXPIRES.NONCE.MAC`, the MAC keyed by the token."""
    expires = int(now) + SESSION_SECONDS
    nonce = secrets.token_urlsafe(16)
    return f"{expires}.{nonce}.{_session_mac(token, expires, nonce)}"


def valid_session(value: str, token: str, now: float) -> bool:
    """Whether `value` is a cookie this token's panel set and that has not expired."""
    expires, _, rest = value.partition(".")
    nonce, _, mac = rest.partition(".")
    if not expires.isdigit() or not nonce or int(expires) <= now:
        return False
    return hmac.compare_digest(mac.encode(), _session_mac(token, int(expires), nonce).encode())


def _session_mac(token: str, expires: int, nonce: str) -> str:
    message = f"skilld-web-session.{expires}.{nonce}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def bearer(headers: Headers) -> str | None:
    """The credentials of an `Authorization: Bearer …` header (the scheme in any case)."""
    scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def token_matches(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


class LoginThrottle:
    """Wrong tokens are answered slowly: after one, the next token is compared no sooner than
    `interval` later, so no more than a few guesses a second reach the comparison, however many
    connections ask at once. Waiting is asynchronous: clients with a session go on meanwhile.
    An attempt that would wait longer than `max_wait` is refused at once, uncompared."""

    def __init__(self, interval: float = 0.5, max_wait: float = 10.0) -> None:
        self.interval = interval
        self.max_wait = max_wait
        self._free_at = 0.0

    async def matches(self, given: str, token: str) -> bool | None:
        """Whether `given` is the token; None when refused uncompared (too many waiting)."""
        now = time.monotonic()
        if now < self._free_at:
            wait = self._free_at - now
            if wait > self.max_wait:
                return None
            self._free_at += self.interval  # this attempt's turn, whatever it finds
            await anyio.sleep(wait)
            return token_matches(given, token)
        if token_matches(given, token):
            return True
        self._free_at = now + self.interval
        return False


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
    """ASGI middleware: the Host allow-list, the token (and the login URL), the origin of state
    changes, and the security headers on every answer (refusals included)."""

    def __init__(self, app: ASGIApp, access: Access, throttle: LoginThrottle) -> None:
        self.app = app
        self.access = access
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        refusal = await self.refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    async def refusal(self, scope: Scope) -> Response | None:
        """The answer that stops a request here (a refusal, or a login's redirect); None to
        let it through."""
        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if host not in self.access.hosts:
            return PlainTextResponse("unknown Host: this panel answers to its own address", 421)
        session_here = host in self.access.session_hosts
        path: str = scope["path"]
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = dict(query).get(TOKEN_PARAM)
        if given is not None and scope["method"] in ("GET", "HEAD"):
            rest = [(k, v) for k, v in query if k != TOKEN_PARAM]
            return await self.login(given, own_path(path), rest, session_here)
        public = session_here and path in PUBLIC_PATHS
        if not public and not await self.authorised(headers, session_here):
            if path.startswith("/api/") or scope["method"] not in ("GET", "HEAD"):
                return PlainTextResponse("a token is required", 401)
            if not session_here:
                return PlainTextResponse(
                    f"This panel keeps a browser's session under a name of its own, not under"
                    f" {host} (a cookie set here would reach every server on this machine):"
                    " open the URL skilld web printed, or the one skilld web --url prints.",
                    403,
                )
            return RedirectResponse("/login", 303)
        if scope["method"] not in ("GET", "HEAD") and not same_origin(headers):
            return PlainTextResponse("refused: this request did not come from the panel", 403)
        return None

    async def authorised(self, headers: Headers, session_here: bool) -> bool:
        """A valid session cookie (under a session host only), or the token as Bearer."""
        cookie = _cookies(headers).get(SESSION_COOKIE) if session_here else None
        if cookie is not None and valid_session(cookie, self.access.token, time.time()):
            return True
        given = bearer(headers)
        return given is not None and await self.throttle.matches(given, self.access.token) is True

    async def login(
        self, given: str, path: str, rest: list[tuple[str, str]], session_here: bool
    ) -> Response:
        """`GET PATH?token=…`, the URL `skilld web` prints: right, a session cookie and a
        redirect to the same page without the token in its URL (by another name, a redirect to
        the same URL under the panel's own name, and no cookie); wrong, 401 (slowly)."""
        matched = await self.throttle.matches(given, self.access.token)
        if matched is None:
            return PlainTextResponse("too many wrong tokens: try again in a few seconds", 429)
        if not matched:
            return PlainTextResponse("that token is not this panel's", 401)
        if not session_here:
            query = urlencode([*rest, (TOKEN_PARAM, given)])
            return RedirectResponse(f"{self.access.origin}{path}?{query}", 303)
        response = RedirectResponse(path + (f"?{urlencode(rest)}" if rest else ""), 303)
        set_session_cookie(response, self.access.token)
        return response


def set_session_cookie(response: Response, token: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        session_cookie(token, time.time()),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        path="/",
    )


def _cookies(headers: Headers) -> dict[str, str]:
    from starlette.requests import cookie_parser

    return cookie_parser(headers.get("cookie", ""))
