"""The panel's session in a real browser (Playwright driving Debian's chromium) against another
local user's server: a browser sends a cookie for a host to every port of it, so a session on
`127.0.0.1` would reach any server the person opens there. The session lives under the panel's
own name (`skilld-….localhost`) only, and a login by a loopback address sets no cookie there."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.loopback import LoopbackServer, QuietHandler, browser_like
from tests.test_web_browser import (  # noqa: F401 (fixtures; the module skips without chromium)
    Panel,
    browser,
    browser_page,
    page,
    panel,
)

SESSION_COOKIE = "skilld_session"


class Recorder(LoopbackServer):
    """Another local user's server on 127.0.0.1: it answers a page and keeps every request's
    headers (and path), all an attacker gets to replay."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self._listen()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        recorder = self
        lock = threading.Lock()

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                with lock:
                    seen = {k.lower(): v for k, v in self.headers.items()}
                    recorder.seen.append({**seen, "path": self.path})
                self.answer(200, "text/html", b"<!doctype html><title>other</title><p>hi</p>")

        return Handler


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as server:
        yield server


def panel_answers(running: Panel, cookie: str) -> int:
    """The status the panel's API gives a request carrying `cookie` (no token)."""
    with browser_like(timeout=10) as client:
        return client.get(running.url + "api/status", headers={"cookie": cookie}).status_code


def test_another_local_server_gets_nothing_it_could_replay_to_the_panel(
    panel: Panel,  # noqa: F811
    page: Page,  # noqa: F811
    recorder: Recorder,
) -> None:
    """Logged in through the printed URL, the person opens another local server (by the
    addresses and names any local user can serve on): it receives no session and no token."""
    context = page.context
    other = f"http://127.0.0.1:{recorder.port}"
    # The recorder does see the cookies a browser holds for its host.
    context.add_cookies([{"name": "control", "value": "1", "url": other}])
    for url in (
        other,
        f"http://localhost:{recorder.port}",
        f"http://any.localhost:{recorder.port}",
    ):
        page.goto(url + "/notes")
        expect(page.get_by_text("hi")).to_be_visible()
    pages = [headers for headers in recorder.seen if headers["path"] == "/notes"]
    assert [urlsplit(f"http://{headers['host']}").hostname for headers in pages] == [
        "127.0.0.1",
        "localhost",
        "any.localhost",
    ]
    assert "control=1" in pages[0].get("cookie", "")
    [session] = [c for c in context.cookies() if c["name"] == SESSION_COOKIE]
    token = panel.login.split("token=", 1)[1]
    for headers in recorder.seen:
        said = "\n".join(headers.values())
        assert SESSION_COOKIE not in said and session["value"] not in said and token not in said
        assert panel_answers(panel, headers.get("cookie", "")) == 401
    # The session exists and is the panel's: in the browser, and replayed by hand.
    assert urlsplit(panel.url).hostname == session["domain"]
    assert session["domain"].endswith(".localhost") and session["domain"] != "localhost"
    assert panel_answers(panel, f"{SESSION_COOKIE}={session['value']}") == 200
    page.goto(panel.url + "api/status")
    assert "libraries" in page.content()


def test_a_login_by_a_loopback_address_sets_no_cookie_there(
    browser: Browser,  # noqa: F811
    panel: Panel,  # noqa: F811
) -> None:
    """`http://127.0.0.1:PORT/?token=…` (an old bookmark) leads to the panel's own name and
    logs in there; without the token, a loopback address shows where the panel is instead."""
    port = urlsplit(panel.url).port
    token = panel.login.split("token=", 1)[1]
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        tab.goto(f"http://127.0.0.1:{port}/skills")
        expect(tab.get_by_text("skilld web --url")).to_be_visible()
        assert context.cookies() == []
        tab.goto(f"http://127.0.0.1:{port}/skills?token={token}")
        assert tab.url == panel.url + "skills"
        expect(tab.get_by_role("heading", name="Skills", level=1)).to_be_visible()
        hosts = {cookie["domain"] for cookie in context.cookies()}
        assert hosts == {urlsplit(panel.url).hostname}
    finally:
        context.close()
