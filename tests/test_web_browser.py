"""The panel in a real headless browser (Playwright driving Debian's chromium): a person finds a
skill and pins it, approves a proposal, watches events arrive, and hostile skill text stays
text: no dialog, no script, no request leaving the panel's origin."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skilld.evolve.review import ReviewQueue
from skilld.skills.document import SkillDoc
from skilld.skills.library import Origin
from skilld.state import StateDB
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, skill_reply

REPO = Path(__file__).resolve().parent.parent

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Each payload, if it ever ran, would set `window.pwned` or open a dialog.
PAYLOADS = (
    "<script>window.pwned=1;alert(1)</script>",
    '<img src=x onerror="window.pwned=2;alert(2)">',
    '<svg onload="window.pwned=3;alert(3)"><script>window.pwned=4</script></svg>',
    "[click me](javascript:window.pwned=5;alert(5))",
    '<a href="javascript:window.pwned=6">raw link</a>',
    "![tracker](http://evil.example/pixel.png)",
    '<iframe src="http://evil.example/"></iframe>',
)

if not CHROMIUM.exists() and os.environ.get("CI") != "true":
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import Browser, Dialog, Page, Request, expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Panel:
    def __init__(self, workspace: Workspace, process: subprocess.Popen[str], login: str) -> None:
        self.workspace = workspace
        self.process = process
        #: The login URL `skilld web` printed, and the panel's own (the clean one).
        self.login = login
        self.url = login.split("?", 1)[0]


@pytest.fixture
def panel(workspace: Workspace) -> Iterator[Panel]:
    workspace.write_config()
    for name, description in [("deploy", "Deploy the service."), ("triage", "Triage a build.")]:
        result = workspace.cli(
            "skills", "write", name, "--description", description, "--content", "1. Go.\n"
        )
        assert result.returncode == 0, result.stderr
    process = workspace.popen("web", "--port", "0")
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("skilld web: "), process.communicate(timeout=10)
    try:
        yield Panel(workspace, process, line.removeprefix("skilld web: ").strip())
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=15)
        finally:
            process.kill()
    assert process.returncode == 0


@pytest.fixture
def page(browser: Browser, panel: Panel) -> Iterator[Page]:
    """A browser tab logged in as a person is: by opening the URL `skilld web` printed."""
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(panel.login)
    assert page.url == panel.url  # the token is gone from the address bar
    yield page
    context.close()


def test_the_login_url_leaves_a_session_no_script_can_read(
    browser: Browser, panel: Panel, page: Page
) -> None:
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    assert page.evaluate("document.cookie") == ""  # HttpOnly
    [cookie] = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expires"] > 0
    stranger = browser.new_context()  # another browser: no session, sent to the login form
    try:
        other = stranger.new_page()
        other.goto(panel.url + "skills")
        assert other.url == panel.url + "login"
        other.get_by_label("Token").fill(panel.login.split("token=", 1)[1])
        other.get_by_role("button", name="Log in").click()
        expect(other.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    finally:
        stranger.close()


def skill_rows(workspace: Workspace) -> dict[str, dict[str, Any]]:
    result = workspace.cli("skills", "list", "--json")
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def stage(workspace: Workspace, name: str, description: str, content: str, reason: str) -> Path:
    return ReviewQueue(workspace.state / "pending").stage(
        SkillDoc(name=name, description=description, body=content),
        Origin(source="jsonl", session="s1"),
        library="default",
        storage_key="default",
        reason=reason,
        held_because="review mode",
    )


def test_find_a_skill_from_the_overview_and_pin_it(panel: Panel, page: Page) -> None:
    page.goto(panel.url)
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    page.get_by_role("link", name="Skills", exact=True).click()
    page.get_by_label("Search").fill("deploy")
    page.keyboard.press("Enter")  # a form works from the keyboard
    expect(page.get_by_role("link", name="triage")).to_have_count(0)
    page.get_by_role("link", name="deploy", exact=True).click()
    expect(page.get_by_role("heading", name="deploy", level=1)).to_be_visible()
    assert skill_rows(panel.workspace)["deploy"]["pinned"] is False
    asked: list[str] = []

    def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.get_by_role("button", name="Pin", exact=True).focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Pin: done")).to_be_visible()
    assert asked and "Pin deploy" in asked[0]
    assert skill_rows(panel.workspace)["deploy"]["pinned"] is True
    page.get_by_role("link", name="Back").click()
    expect(page.get_by_role("button", name="Unpin")).to_be_visible()


def test_a_dismissed_confirmation_changes_nothing(panel: Panel, page: Page) -> None:
    page.goto(panel.url + "skills/default/triage")
    page.on("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Archive").click()
    expect(page.get_by_role("heading", name="triage", level=1)).to_be_visible()
    assert (panel.workspace.skills / "triage" / "SKILL.md").exists()


def test_approve_a_staged_proposal(panel: Panel, page: Page) -> None:
    stage(panel.workspace, "lint", "Run the linter.", "1. Run ruff.\n", "it came up twice")
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(panel.url + "review")
    expect(page.get_by_role("heading", name="lint for default")).to_be_visible()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("heading", name="Approve: done")).to_be_visible()
    written = panel.workspace.skills / "lint" / "SKILL.md"
    assert "1. Run ruff." in written.read_text()
    assert not list((panel.workspace.state / "pending").rglob("*.json"))


def test_new_events_appear_live(panel: Panel, page: Page) -> None:
    page.goto(panel.url + "events")
    page.get_by_role("button", name="Live").click()
    expect(page.get_by_role("status")).to_have_text("showing new events as they are written")
    result = panel.workspace.cli("skills", "pin", "triage")
    assert result.returncode == 0, result.stderr
    expect(page.get_by_role("cell", name="pinned", exact=True)).to_be_visible()


def test_hostile_text_stays_text(panel: Panel, page: Page) -> None:
    hostile = " ".join(PAYLOADS)
    body = "\n\n".join(f"Step: {payload}" for payload in PAYLOADS) + "\n"
    skills = panel.workspace.skills / "hostile"
    skills.mkdir()
    # Written by hand: a person's file is never rendered by skilld, so the hostile
    # description reaches the page exactly as typed.
    (skills / "SKILL.md").write_text(
        f"---\nname: hostile\ndescription: {json.dumps(hostile)}\n---\n{body}", encoding="utf-8"
    )
    with StateDB(panel.workspace.state / "state.db") as state:
        state.add_event("updated", library="default", skill="hostile", reason=hostile)
    stage(panel.workspace, "hostile-proposal", "Proposal.", body, hostile)
    dialogs: list[str] = []
    foreign: list[str] = []

    def on_request(request: Request) -> None:
        if not request.url.startswith(panel.url):
            foreign.append(request.url)

    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("request", on_request)
    for path in ("skills/default/hostile", "skills?q=hostile", "review", "events", ""):
        page.goto(panel.url + path)
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        assert page.evaluate("window.pwned") is None
        assert page.locator("main script, main img, main iframe, main svg:not(.chart)").count() == 0
        assert page.locator("a[href^='javascript']").count() == 0
    page.goto(panel.url + "skills/default/hostile")
    text = page.locator("main").inner_text()
    for shown in ("<script>window.pwned=1;alert(1)</script>", "onerror=", "<svg onload="):
        assert shown in text
    assert page.get_by_role("link", name="click me").count() == 0
    page.get_by_text("raw link").first.hover()
    page.wait_for_timeout(300)
    assert dialogs == []
    assert foreign == []
    assert page.evaluate("window.pwned") is None


@pytest.mark.slow
def test_the_readme_screenshot_is_made_in_a_demo_folder(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.responder = lambda request: skill_reply(f"lesson-{len(fake_llm.requests)}")
    demo, picture = tmp_path / "demo", tmp_path / "panel.png"
    env = {**os.environ, "SKILLD_LLM_BASE_URL": fake_llm.base_url, "DEEPSEEK_API_KEY": "demo"}
    script = REPO / "examples" / "panel_screenshot.py"
    result = subprocess.run(
        [sys.executable, str(script), str(picture), "--demo", str(demo)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert fake_llm.requests and list((demo / "skills").glob("*/SKILL.md"))  # learned there
    assert (demo / "state" / "state.db").is_file()
