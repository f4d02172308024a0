"""Nothing lost by a click, in a real browser (Playwright driving Debian's chromium): Approve
after a merge keeps the merged step, and a rollback shows the restored version's provenance with
every version labelled v1…vN."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import Workspace
from tests.fakellm import FakeLLM, skill_reply
from tests.test_approval import BOTH_STEPS, MERGED_STEPS, learn, publish, staged_after_merge
from tests.test_web_browser import browser  # noqa: F401 (a fixture; skips without chromium)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:  # noqa: F811
    """A fresh tab; each test logs in by opening the URL its own `skilld web` printed."""
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    yield tab
    context.close()


@contextmanager
def served(workspace: Workspace) -> Iterator[str]:
    """`skilld web` on a free port; its login URL."""
    process = workspace.popen("web", "--port", "0")
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("skilld web: "), process.communicate(timeout=10)
    try:
        yield line.removeprefix("skilld web: ").strip()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=15)
        finally:
            process.kill()


def click_and_wait(tab: Page, button: str) -> None:
    """Press a confirmed action's button and wait for the page it leads to."""
    tab.once("dialog", lambda dialog: dialog.accept())
    with tab.expect_navigation():
        tab.get_by_role("button", name=button, exact=True).click()


def test_approve_after_a_merge_keeps_the_merged_step(
    workspace: Workspace,
    fake_llm: FakeLLM,
    page: Page,
) -> None:
    staged_after_merge(workspace, fake_llm)
    with served(workspace) as url:
        page.goto(url)
        page.goto(url.split("?")[0] + "review")
        expect(page.get_by_role("heading", name="deploy for default")).to_be_visible()
        fake_llm.push(skill_reply("deploy", BOTH_STEPS, reason="smoke tests after the canary"))
        click_and_wait(page, "Approve")
        text = (workspace.skills / "deploy" / "SKILL.md").read_text()
        assert "Deploy to the canary first." in text and "Run the smoke tests." in text
        page.goto(url.split("?")[0] + "skills/default/deploy")
        expect(page.get_by_text("Deploy to the canary first.")).to_be_visible()
        expect(page.get_by_text("Run the smoke tests.")).to_be_visible()
        newest = page.locator("table.versions tbody tr").last
        expect(newest).to_contain_text("approved by panel")
        expect(newest).to_contain_text("jsonl:s2")
        expect(newest).to_contain_text("smoke tests after the canary")


def test_a_rollback_shows_the_restored_version_and_labels_versions_by_number(
    workspace: Workspace,
    fake_llm: FakeLLM,
    page: Page,
) -> None:
    workspace.llm_url = fake_llm.base_url
    publish(workspace, "auto")
    learn(workspace, fake_llm, "s1", skill_reply("deploy", "1. Ship.\n", reason="first"))
    learn(
        workspace,
        fake_llm,
        "s2",
        skill_reply("deploy", MERGED_STEPS, reason="second"),
        skill_reply("deploy", MERGED_STEPS, reason="second, merged"),
    )
    with served(workspace) as url:
        page.goto(url)
        skill_page = url.split("?")[0] + "skills/default/deploy"
        page.goto(skill_page)
        choices = page.get_by_label("Version", exact=True).locator("option").all_inner_texts()
        assert len(choices) == 1 and re.fullmatch(
            r"v1 · \d{4}-\d\d-\d\d \d\d:\d\d · first", choices[0]
        )
        page.get_by_label("Version", exact=True).select_option(label=choices[0])
        click_and_wait(page, "Roll back")
        page.goto(skill_page)
        expect(page.locator("article.markdown")).to_have_text("Ship.")
        provenance = page.locator("section[aria-labelledby=provenance] dl")
        expect(provenance).to_contain_text("v1 (restored by v3): first")
        expect(provenance).to_contain_text("jsonl:s1")
        numbers = page.locator("table.versions tbody tr td:first-child").all_inner_texts()
        assert numbers == ["v1", "v2", "v3"]
        expect(page.locator("table.versions tbody tr").last).to_contain_text("(restored v1)")
        # Compare offers the same numbered versions (v2 now, the text rolled back from).
        compare = page.get_by_label("From", exact=True).locator("option").all_inner_texts()
        assert [label.split(" · ")[0] for label in compare] == ["v2", "current (v1)"]
