"""The panel in a real headless browser (Playwright driving Debian's chromium): a person finds a
skill and pins it, approves a proposal, watches events arrive, and hostile skill text stays
text: no dialog, no script, no request leaving the panel's origin."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skilld.evolve.review import ReviewQueue
from skilld.skills.document import SkillDoc
from skilld.skills.outcomes import Origin
from skilld.state import StateDB
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, skill_reply, skip_reply
from tests.test_failure_occurrences import pushes

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
    """A running `skilld web`: `login` is the address it printed (with its token), `url` the
    panel's own, the clean one every page is under."""

    def __init__(self, workspace: Workspace, process: subprocess.Popen[str], login: str) -> None:
        self.workspace = workspace
        self.process = process
        self.login = login
        self.url = login.split("?", 1)[0]


@contextlib.contextmanager
def serving(workspace: Workspace) -> Iterator[Panel]:
    """`skilld web` over `workspace` on a free port, stopped (and checked) at the end."""
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
def panel(workspace: Workspace) -> Iterator[Panel]:
    workspace.write_config()
    for name, description in [("deploy", "Deploy the service."), ("triage", "Triage a build.")]:
        result = workspace.cli(
            "skills", "write", name, "--description", description, "--content", "1. Go.\n"
        )
        assert result.returncode == 0, result.stderr
    with serving(workspace) as running:
        yield running


def log_in(page: Page, panel: Panel) -> None:
    """Open the URL `skilld web` printed, as a person does: the one way in."""
    page.goto(panel.login)
    assert page.url == panel.url  # the token is gone from the address bar
    expect(page.get_by_role("heading", level=1)).to_be_visible()


@pytest.fixture
def browser_page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def page(browser_page: Page, panel: Panel) -> Page:
    """A browser tab logged in as a person is: by opening the URL `skilld web` printed."""
    log_in(browser_page, panel)
    return browser_page


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
    expect(page.get_by_role("status")).to_contain_text("Pinned deploy")
    assert asked and "Pin deploy" in asked[0]
    assert skill_rows(panel.workspace)["deploy"]["pinned"] is True
    expect(page.get_by_role("button", name="Unpin")).to_be_visible()  # back on its page


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
    expect(page.get_by_role("status")).to_contain_text("Approved lint")
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


# -- issue 33: the week, every page at every width for everyone, post/redirect/get, writing --

#: Every page a person reaches, with the state the test builds (a learned skill with saved
#: versions, a staged proposal, events, a curator plan).
PAGES = (
    "",
    "skills",
    "skills?sort=uses&order=desc",
    "skills/default/run-tests",
    "skills/default/run-tests/edit",
    "skills/default/deploy?a={version}&b=current",
    "review",
    "events",
    "curator",
    "failures",
    "failures/{failure}",
    "write",
    "login",
)
WIDTHS = (1280, 390)
#: Where a long token may break anywhere: paths, code, ids inside their own box.
BREAKABLE = ".path, code, pre, pre *, dl.detail dd, article.markdown pre, svg, svg *, td.session a"
#: Every text element of `main` whose CSS lets a word break in its middle.
MID_WORD_BREAKS = f"""() => [...document.querySelectorAll('main *')]
  .filter(el => !el.matches({json.dumps(BREAKABLE)}) && el.childNodes.length)
  .filter(el => {{ const s = getComputedStyle(el);
    return s.overflowWrap === 'anywhere' || s.wordBreak === 'break-all'; }})
  .map(el => el.tagName + '.' + el.className)"""
#: Each control whose border (else background) is under 3:1 against the page behind it.
FAINT_CONTROLS = """() => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(v => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05); };
  const page = rgb(getComputedStyle(document.body).backgroundColor);
  const controls = 'button, input:not([type=hidden]), select, textarea, a.button';
  return [...document.querySelectorAll(controls)]
    .filter(el => {
      const s = getComputedStyle(el);
      const edge = s.borderTopWidth !== '0px' ? rgb(s.borderTopColor) : rgb(s.backgroundColor);
      return ratio(edge, page) < 3;
    }).map(el => el.outerHTML.slice(0, 80));
}"""


def learn_on_a_branch(workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path) -> str:
    """A skill learned by `skilld once` from a session in a repository on a branch; returns
    the session's id as the event log names it."""
    repo = tmp_path / "api"
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "feat/login"],
        ["commit", "-q", "--allow-empty", "-m", "one"],
        ["remote", "add", "origin", "git@github.com:acme/api.git"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s-week", [{**m, "cwd": str(repo)} for m in conversation()])
    fake_llm.queue.append(skill_reply("run-tests", description="Run the tests before a push."))
    assert workspace.cli("once").returncode == 0
    (created,) = workspace.events("created")
    return str(created["session"])


def test_the_week_and_every_page_at_both_widths_for_everyone(
    browser_page: Page, workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    session = learn_on_a_branch(workspace, fake_llm, tmp_path)
    for content in ("1. Build.\n", "1. Build.\n2. Ship.\n"):
        result = workspace.cli(
            "skills", "write", "deploy", "--description", "Deploy.", "--content", content
        )
        assert result.returncode == 0, result.stderr
    version = skill_history(workspace, "deploy")[0]
    stage(workspace, "deploy", "Deploy.", "1. Build.\n2. Canary.\n", "seen twice")
    workspace.add_session("s-push", pushes(str(tmp_path / "api"), 1, ("call_push", "feat/a", 10)))
    fake_llm.push(skip_reply())
    assert workspace.cli("once").returncode == 0
    (failure,) = json.loads(workspace.cli("failures", "--json").stdout)
    page, axe = browser_page, Axe()
    with serving(workspace) as panel:
        log_in(page, panel)
        card = page.locator("ul.cards li", has_text="run-tests")
        expect(card.get_by_role("link", name="run-tests")).to_be_visible()
        expect(card).to_contain_text("Run the tests before a push.")
        expect(card.get_by_role("link", name=session)).to_be_visible()
        expect(card).to_contain_text("github.com/acme/api@feat/login")
        expect(card.locator("time")).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\dT"))
        found: dict[str, list[str]] = {}
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for path in PAGES:
                where = f"{path or '/'} at {width} px"
                page.goto(panel.url + path.format(version=version, failure=failure["id"]))
                expect(page.get_by_role("heading", level=1)).to_be_visible()
                wide = page.evaluate(
                    "document.documentElement.scrollWidth - document.documentElement.clientWidth"
                )
                if wide > 0:
                    found.setdefault("sideways scroll", []).append(f"{where}: {wide} px")
                for element in page.evaluate(MID_WORD_BREAKS):
                    found.setdefault("mid-word breaks", []).append(f"{where}: {element}")
                for control in page.evaluate(FAINT_CONTROLS):
                    found.setdefault("controls under 3:1", []).append(f"{where}: {control}")
                for violation in axe.run(page).response["violations"]:
                    if violation["impact"] in ("serious", "critical"):
                        targets = [node["target"] for node in violation["nodes"][:3]]
                        found.setdefault("axe", []).append(f"{where}: {violation['id']} {targets}")
    assert found == {}


def skill_history(workspace: Workspace, name: str) -> list[str]:
    result = workspace.cli("skills", "history", name, "--json")
    assert result.returncode == 0, result.stderr
    return [entry["version"] for entry in json.loads(result.stdout)]


def test_each_action_lands_back_on_its_page_and_a_reload_repeats_nothing(
    panel: Panel, page: Page
) -> None:
    stage(panel.workspace, "lint", "Run the linter.", "1. Run ruff.\n", "it came up twice")
    page.on("dialog", lambda dialog: dialog.accept())
    web_events = lambda: len(panel.workspace.events("web"))  # noqa: E731
    steps = [
        ("skills/default/deploy", "Pin", "Pinned deploy", "skills/default/deploy"),
        ("review", "Approve", "Approved lint", "review"),
        ("curator", "Run now", "The curator ran", "curator"),
        ("skills/default/triage", "Archive", "Archived triage", "skills/default/triage"),
        ("skills/default/lint", "Delete", "Deleted lint", "skills"),
    ]
    for count, (start, button, outcome, landing) in enumerate(steps, start=1):
        page.goto(panel.url + start)
        page.get_by_role("button", name=button, exact=True).click()
        expect(page.get_by_role("status")).to_contain_text(outcome)
        assert page.url == panel.url + landing, (button, page.url)
        assert web_events() == count
        page.reload()  # a GET of the page: nothing is submitted again, the outcome is gone
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        expect(page.locator("p.flash")).to_have_count(0)
        assert web_events() == count
    assert "/" not in page.locator("main").inner_text().split("Deleted lint", 1)[0][-200:]


def test_write_and_edit_a_skill_in_the_panel(panel: Panel, page: Page) -> None:
    page.get_by_role("link", name="Write a skill").first.click()
    page.get_by_label("Name").fill("on-call")
    page.get_by_label("Description").fill("Page the on-call engineer.")
    page.get_by_label("Steps (Markdown)").fill("1. Call the pager.\n")
    page.get_by_role("button", name="Write").click()
    expect(page.get_by_role("heading", name="on-call", level=1)).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("Wrote on-call")
    page.goto(panel.url + "skills/default/deploy")
    page.get_by_role("link", name="Edit").click()
    page.get_by_label("Steps (Markdown)").fill("1. Go.\n2. Check the dashboard.\n")
    page.get_by_role("button", name="Save as mine").click()
    expect(page.get_by_role("status")).to_contain_text("Saved deploy")
    expect(page.locator("article.markdown")).to_contain_text("Check the dashboard.")
    rows = skill_rows(panel.workspace)
    assert rows["on-call"]["owner"] == "human" and rows["deploy"]["owner"] == "human"
    assert rows["triage"]["owner"] == "managed"
