"""The panel's failures and verdicts (issue 41): the Failures page's groups, the overview's
"stopped recurring" (decided `helps` only) and "still recurring", the skills table filtered and
sorted by verdict, search in bodies, and every time a person reads shown relative to now."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from skilld.effect.report import MEASUREMENT_KEY, measurement, measurement_stamp
from skilld.state import StateDB
from skilld.web.failures import failure_groups
from tests.conftest import Workspace
from tests.test_web import client_for, write_skill

NOW = datetime.now(UTC)


def iso(days_ago: float) -> str:
    return (NOW - timedelta(days=days_ago)).isoformat(timespec="seconds")


def failure(signature: str, sessions: int, last: str, skills: list[str]) -> dict[str, Any]:
    return {
        "id": signature[:12], "signature": signature, "tool": "Bash", "command": signature,
        "error": "fatal: x", "class": "real", "sessions": sessions, "occurrences": sessions,
        "first_seen": iso(30), "last_seen": last, "repositories": [],
        "skills": [{"library": "default", "name": name} for name in skills],
    }  # fmt: skip


def test_recurring_failures_come_first_targeted_beside_uncovered() -> None:
    rows = [
        failure("git push", 10, iso(1), ["push-upstream"]),  # recurs after its skill
        failure("make lint", 6, iso(2), []),
        failure("git commit", 4, iso(20), ["commit-hooks"]),  # not seen since its skill
        failure("npm test", 3, iso(1), ["unmeasured"]),  # a skill not measured yet
        failure("ls nothing", 1, iso(3), []),
    ]
    verdicts = {
        ("default", "push-upstream"): {"verdict": "not-triggered", "since": iso(10)},
        ("default", "commit-hooks"): {"verdict": "helps", "since": iso(15)},
    }
    groups = failure_groups(rows, verdicts)
    assert [group.key for group in groups] == ["still", "uncovered", "ended", "once"]
    shown = {group.key: [row["command"] for row in group.rows] for group in groups}
    assert shown == {
        "still": ["git push", "npm test"],
        "uncovered": ["make lint"],
        "ended": ["git commit"],
        "once": ["ls nothing"],
    }
    (push, _) = groups[0].rows
    assert push["skills"][0]["verdict"] == "not-triggered"
    capped = failure_groups(rows, verdicts, limit=1)
    assert [len(g.rows) for g in capped] == [1, 1, 1, 1]
    assert [g.total for g in capped] == [2, 1, 1, 1]


def row(name: str, verdict: str, before: int, after: int) -> dict[str, Any]:
    """A row as `skilld effect --json` prints it."""
    return {
        "library": "default", "name": name, "since": iso(5),
        "source_failures": [{"id": "a" * 12, "signature": f"sig {name}", "class": "real",
                             "command": f"cmd-{name}"}],
        # Both shapes' keys (exposures, and sessions as issue 41 counts them).
        "before": {"sessions": 10, "exposures": 10, "failures": before},
        "after": {"sessions": 10, "exposures": 10, "failures": after, "loaded_sessions": 5,
                  "loaded_exposures": 5, "loaded_failures": 0},
        "verdict": verdict, "evidence": f"evidence of {name}",
    }  # fmt: skip


def keep(workspace: Workspace, rows: list[dict[str, Any]]) -> None:
    """The daemon's last measurement (`effect.watch`), holding `rows`, each last exposed a
    day ago: what the panel shows while nothing it was measured from changed."""
    with StateDB(workspace.state / "state.db") as state:
        stamp = measurement_stamp(state.conn, min_exposures=10)
        kept = measurement(rows, [iso(1)] * len(rows), ["default"], stamp)
        state.set_meta(MEASUREMENT_KEY, kept)


@pytest.fixture
def panel(workspace: Workspace) -> Iterator[TestClient]:
    workspace.write_config()
    write_skill(workspace, "push-upstream", "Push a new branch.", "Run `git push -u origin`.\n")
    write_skill(workspace, "lint-first", "Lint before a commit.", "Run `make lint` first.\n")
    write_skill(workspace, "early-one", "Too early to tell.", "Wait for sessions.\n")
    write_skill(workspace, "routing", "Loaded too rarely.", "Describe it better.\n")
    keep(
        workspace,
        [
            row("push-upstream", "helps", 6, 0),
            row("lint-first", "too-early", 3, 0),  # no recurrence, but nothing decided
            row("early-one", "no-change", 4, 2),
            row("routing", "helps-when-loaded", 5, 3),
        ],
    )
    with client_for(workspace) as client:
        yield client


def section(page: str, anchor: str) -> str:
    return page.split(f'id="{anchor}"', 1)[1].split("</ul>", 1)[0]


def test_the_overview_says_stopped_only_for_helps_and_lists_what_still_recurs(
    panel: TestClient,
) -> None:
    page = panel.get("/").text
    stopped = section(page, "stopped")
    assert "push-upstream" in stopped and "lint-first" not in stopped
    still = section(page, "still")
    assert "early-one</a> (default, no-change)" in still
    assert "routing</a> (default, helps-when-loaded)" in still
    assert "push-upstream" not in still and "lint-first" not in still
    assert '<a href="/failures">' in page


def names_in(page: str) -> list[str]:
    return re.findall(r'<td class="name"><a href="/skills/default/([a-z-]+)"', page)


def test_the_skills_table_filters_and_sorts_by_verdict(panel: TestClient) -> None:
    page = panel.get("/skills?verdict=helps-when-loaded").text
    assert names_in(page) == ["routing"]
    assert "<option selected>helps-when-loaded</option>" in page
    assert names_in(panel.get("/skills?verdict=worse").text) == []
    ordered = names_in(panel.get("/skills?sort=verdict").text)
    # What needs a person first: no-change, then helps-when-loaded, too-early, helps.
    assert ordered == ["early-one", "routing", "lint-first", "push-upstream"]
    reverse = names_in(panel.get("/skills?sort=verdict&order=desc").text)
    assert reverse == list(reversed(ordered))


def test_search_matches_words_in_names_descriptions_and_bodies(panel: TestClient) -> None:
    assert names_in(panel.get("/skills?q=origin").text) == ["push-upstream"]  # the body
    assert names_in(panel.get("/skills?q=make+lint").text) == ["lint-first"]  # two words
    assert names_in(panel.get("/skills?q=rarely").text) == ["routing"]  # the description
    assert names_in(panel.get("/skills?q=early").text) == ["early-one"]  # the name
    assert names_in(panel.get("/skills?q=lint+origin").text) == []  # every word must match


def test_every_time_a_person_reads_is_relative_with_the_iso_value_in_its_title(
    panel: TestClient, workspace: Workspace
) -> None:
    tag = re.compile(r'<time datetime="([^"]+)" title="\1">[^<]*(ago|just now|in )')
    for path in ("/", "/skills", "/skills/default/push-upstream", "/events", "/failures"):
        page = panel.get(path).text
        main = page.split('<main id="main"', 1)[1]
        # No bare ISO time outside a <time> tag's attributes.
        text = re.sub(r"<[^>]+>", " ", main)
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", text), (path, text[:2000])
        if path != "/failures":
            assert tag.search(main), path
