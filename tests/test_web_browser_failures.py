"""The Failures page and a failure's page in a real headless browser (issue 41), at 1280 and
390 px, checked by axe-core as the other pages are: a person goes from the recurring failure to
where it happened; and the events table fits 1280 px without cutting its detail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from skilld.state import StateDB
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, skip_reply
from tests.test_failure_occurrences import pushes
from tests.test_web_browser import (
    FAINT_CONTROLS,
    MID_WORD_BREAKS,
    WIDTHS,
    log_in,
    serving,
)

pytest.importorskip("playwright")
from playwright.sync_api import Browser, Page, expect

from tests.test_web_browser import browser  # noqa: F401  (the module's browser)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:  # noqa: F811
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    yield tab
    context.close()


def recorded(workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path) -> str:
    """Pushes that fail in three sessions (the recurring failure) read by `skilld once`;
    returns its id."""
    workspace.llm_url = fake_llm.base_url
    workspace.settings["evolve"] = {"min_messages": 1000}
    workspace.write_config()
    repo = str(tmp_path / "api")
    for day, branch in ((1, "feat/a"), (2, "feat/b"), (3, "feat/a-much-longer-branch-name")):
        workspace.add_session(f"s-{day}", pushes(repo, day, (f"call_{day}", branch, 10)))
    fake_llm.push(skip_reply())
    assert workspace.cli("once").returncode == 0
    rows = json.loads(workspace.cli("failures", "--json").stdout)
    (push,) = [row for row in rows if row["command"] == "git push"]
    assert push["sessions"] == 3
    return str(push["id"])


def test_the_failures_pages_at_both_widths_for_everyone(
    page: Page, workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    failure = recorded(workspace, fake_llm, tmp_path)
    axe, found = Axe(), {}
    with serving(workspace) as panel:
        log_in(page, panel)
        page.get_by_role("link", name="Failures", exact=True).click()
        uncovered = page.locator("section", has=page.locator("h2#uncovered"))
        row = uncovered.locator("tr", has_text="git push")
        expect(row).to_contain_text("3")  # sessions
        expect(row.locator("time")).to_have_attribute("title", failure_time(workspace, failure))
        row.get_by_role("link").first.click()
        assert page.url == f"{panel.url}failures/{failure}"
        occurrences = page.locator("table.occurrences tbody tr")
        expect(occurrences).to_have_count(3)
        expect(occurrences.first).to_contain_text("feat/a")
        expect(occurrences.last).to_contain_text("no skill yet")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for path in ("failures", f"failures/{failure}"):
                where = f"{path} at {width} px"
                page.goto(panel.url + path)
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


def failure_time(workspace: Workspace, failure: str) -> str:
    shown = json.loads(workspace.cli("failures", "show", failure, "--json").stdout)
    return str(shown["last_seen"])


def test_the_events_table_fits_1280_px_without_cutting_its_detail(
    page: Page, workspace: Workspace
) -> None:
    workspace.write_config()
    session = "claude:" + "0f3c9a2e-6b1d-4c55-9e0a-" * 3 + "7d2b"
    detail = {
        "path": "/home/someone/projects/a-rather-long-repository-name/.skills/deploy/SKILL.md",
        "signature": "Bash | git push --set-upstream origin feature/a-long-branch | fatal: "
        + "the current branch has no upstream branch " * 3,
        "reason": "the model said the window shows a lesson worth keeping " * 2,
    }
    with StateDB(workspace.state / "state.db") as state:
        for _ in range(5):
            state.add_event(
                "failure_recurred", library="default", skill="a-skill-name-that-is-long",
                session=session, source="claude", reason="recurred", detail=detail,
            )  # fmt: skip
    with serving(workspace) as panel:
        log_in(page, panel)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(panel.url + "events")
        region = page.get_by_role("region", name="Events")
        cut = region.evaluate("el => el.scrollWidth - el.clientWidth")
        assert cut <= 0, f"the events table is {cut} px wider than the page"
        expect(region).to_contain_text("no upstream branch the current branch has no upstream")
        expect(region).to_contain_text(session[:20])
