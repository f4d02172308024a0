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


def test_the_failures_page_s_picture_in_the_docs(
    page: Page, workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """docs/failures.png is this page: a push failure that recurs though a skill targets it,
    beside ones no skill covers. `SKILLD_DOCS_PICTURE=docs/failures.png` writes it there."""
    import os
    import sqlite3

    from tests.test_failures_tick import PUSH_SIGNATURE, call, push_session

    workspace.llm_url = fake_llm.base_url
    workspace.settings["evolve"] = {"min_messages": 1000}
    workspace.write_config()
    repo = str(tmp_path / "api")
    workspace.add_session("one", push_session(branch="feat-1", day=1))
    workspace.add_session("two", push_session(branch="feat-2", day=2))
    for day, branch in ((4, "feat/search"), (5, "feat/billing"), (6, "fix/login")):
        workspace.add_session(f"later-{day}", pushes(repo, day, (f"call_{day}", branch, 10)))
    for day, command, error in (
        (3, "make lint", "error: ruff found 3 problems in src/api/views.py"),
        (5, "make lint", "error: ruff found 1 problem in src/api/models.py"),
        (4, "npm run build", "Error: Cannot find module './config.local.json'"),
        (6, "npm run build", "Error: Cannot find module './config.local.json'"),
        (6, "docker compose up", "Error response from daemon: port is already allocated"),
    ):
        ts = f"2026-01-{day:02d}T12:00:00Z"
        workspace.add_session(f"{command.split()[0]}-{day}", [
            {"role": "user", "content": "Build it.", "timestamp": ts, "cwd": repo},
            {"role": "assistant", "content": "", "tool_calls": [call(f"c{day}", command)]},
            {"role": "tool", "tool_call_id": f"c{day}", "content": error, "error": True,
             "timestamp": ts},
            {"role": "assistant", "content": "It failed.", "timestamp": ts},
        ])  # fmt: skip
    fake_llm.default = skip_reply()
    assert workspace.cli("once").returncode == 0
    with sqlite3.connect(workspace.state / "state.db") as conn:
        conn.execute(
            "INSERT INTO provenance(library, name, path, sha256, session, first_message,"
            " last_message, created_at, updated_at) VALUES ('default', 'push-upstream', 'p',"
            " 'h', 'jsonl:one', 0, 5, '2026-01-03T11:00:00+00:00', '2026-01-03T11:00:00+00:00')"
        )
        conn.execute(
            "INSERT INTO events(ts, kind, library, skill, session, source, reason, detail)"
            " VALUES ('2026-01-03T11:00:00+00:00', 'created', 'default', 'push-upstream',"
            " 'jsonl:one', 'jsonl', 'learned', ?)",
            (json.dumps({"messages": [0, 5], "targets": [PUSH_SIGNATURE]}),),
        )
    picture = Path(os.environ.get("SKILLD_DOCS_PICTURE") or tmp_path / "failures.png")
    with serving(workspace) as panel:
        log_in(page, panel)
        page.set_viewport_size({"width": 1100, "height": 640})
        page.emulate_media(color_scheme="light")
        page.goto(panel.url + "failures")
        still = page.locator("section", has=page.locator("h2#still"))
        expect(still.locator("tr", has_text="git push")).to_contain_text("push-upstream")
        page.screenshot(path=str(picture))
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
