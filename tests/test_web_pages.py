"""The panel's pages for people (issue 33): the week first, the problems `status --check`
fails on, tables that sort and filter as `skills list` does, readable events, post/redirect/get,
Run now, and a skill written or edited in the panel owned by the person."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from skilld.state import StateDB
from skilld.web.present import Flash, human_count, safe_back
from skilld.web.render import proposal_diff
from tests.conftest import Workspace, conversation, git
from tests.fakellm import FakeLLM, skill_reply
from tests.test_web import ORIGIN, SECRET, cli_json, client_for, stage, usage, write_skill


@pytest.fixture
def panel(workspace: Workspace) -> Iterator[TestClient]:
    workspace.write_config()
    write_skill(workspace, "deploy", "Deploy the service.", "1. Build.\n2. Ship.\n")
    write_skill(workspace, "triage", "Triage a failing build.", "Read the log first.\n")
    with client_for(workspace) as client:
        yield client


def act(client: TestClient, verb: str, **fields: str) -> tuple[str, str]:
    """POST an action without following its redirect: (where it sends the browser, the page
    there)."""
    response = client.post(
        f"/act/{verb}",
        data={"csrf": SECRET, **fields},
        headers={"origin": ORIGIN},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    return location, client.get(location).text


def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "api"
    repo.mkdir()
    for args in (
        ("init", "-q", "-b", "feat/login"),
        ("commit", "-q", "--allow-empty", "-m", "one"),
        ("remote", "add", "origin", "git@github.com:acme/api.git"),
    ):
        git(repo, *args)
    return repo


def test_the_overview_leads_with_what_was_learned_this_week(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    repo = repository(tmp_path)
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s-week", [{**m, "cwd": str(repo)} for m in conversation()])
    fake_llm.queue.append(skill_reply("run-tests", description="Run the tests before a push."))
    assert workspace.cli("once").returncode == 0
    with client_for(workspace) as panel:
        page = panel.get("/").text
    week = page.split('id="recent"', 1)[1].split('<div class="columns">', 1)[0]
    assert '<a href="/skills/default/run-tests">run-tests</a>' in week
    assert "Run the tests before a push." in week
    (created,) = workspace.events("created")
    assert f'href="/events?session={quote(created["session"])}"' in week
    assert f">{created['session']}</a>" in week
    assert "github.com/acme/api" in week and "feat/login" in week
    assert "<time datetime=" in week and 'title="20' in week
    assert page.index('id="recent"') < page.index('id="daemon"')  # the week comes first


def test_the_overview_shows_what_status_check_fails_on(
    panel: TestClient, workspace: Workspace
) -> None:
    with StateDB(workspace.state / "state.db") as state:
        state.set_meta("source_errors", ["/nowhere/sessions: permission denied"])
        state.set_meta("source_errors_total", 1)
        failure = {"message": "401 invalid api key"}
        state.set_meta("llm_health", {"circuit": "open", "last_error": failure})
    check = workspace.cli("status", "--check")
    assert check.returncode == 1
    lines = [line.removeprefix("skilld: ") for line in check.stderr.splitlines()]
    assert any("permission denied" in line for line in lines)
    assert any("LLM outage" in line and "401 invalid api key" in line for line in lines)
    page = panel.get("/").text
    problems = page.split('id="problems"', 1)[1].split("</section>", 1)[0]
    for line in lines:  # the same items, in the same words
        assert line.replace('"', "&#34;").replace("'", "&#39;") in problems, line
    assert page.index('id="problems"') < page.index('id="recent"')


def test_numbers_and_times_read_as_words() -> None:
    assert human_count(1_280_000) == "1.28 M"
    assert human_count(950) == "950" and human_count(12_400) == "12.4 k"
    from skilld.web.present import calls_text, time_tag

    assert calls_text(110, 0) == "110 calls (no cap)"
    assert calls_text(3, 120) == "3 of 120 calls"
    tag = str(time_tag("2026-11-30T08:56:34+00:00"))
    assert tag.startswith('<time datetime="2026-11-30T08:56:34+00:00"')
    assert 'title="2026-11-30T08:56:34+00:00">' in tag


def test_the_skills_table_shows_descriptions_sorts_both_ways_and_filters_by_branch(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    repo = repository(tmp_path)
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    write_skill(workspace, "alpha", "The first skill.", "Body.\n")
    workspace.add_session("s1", [{**m, "cwd": str(repo)} for m in conversation()])
    fake_llm.queue.append(skill_reply("zulu", description="Learned on a branch."))
    assert workspace.cli("once").returncode == 0
    with client_for(workspace) as panel:
        page = panel.get("/skills").text
        assert '<span class="description">The first skill.</span>' in page
        assert page.count("<time datetime=") >= 2  # created dates
        ascending = panel.get("/skills?sort=name&order=asc").text
        descending = panel.get("/skills?sort=name&order=desc").text
        assert ascending.index(">alpha</a>") < ascending.index(">zulu</a>")
        assert descending.index(">zulu</a>") < descending.index(">alpha</a>")
        assert 'aria-sort="descending"' in descending and 'aria-sort="ascending"' in ascending
        # The header of the sorted column links to the other direction.
        assert "sort=name&amp;order=asc" in descending.split('aria-sort="descending"', 1)[1]
        on_branch = panel.get("/skills?branch=feat/*").text
        listed = cli_json(workspace, "skills", "list", "--json", "--branch", "feat/*")
    assert [row["name"] for row in listed] == ["zulu"]
    assert ">zulu</a>" in on_branch and ">alpha</a>" not in on_branch
    assert ">zulu</a>" in panel_get(workspace, "/skills?repository=github.com/acme/api")


def panel_get(workspace: Workspace, path: str) -> str:
    with client_for(workspace) as panel:
        return panel.get(path).text


def test_events_offer_the_known_kinds_link_their_cells_and_read_as_key_values(
    panel: TestClient, workspace: Workspace
) -> None:
    with StateDB(workspace.state / "state.db") as state:
        state.add_event(
            "updated",
            library="default",
            skill="deploy",
            session="sess-42",
            detail={"path": str(workspace.skills / "deploy" / "SKILL.md"), "version": 2},
        )
    page = panel.get("/events").text
    kinds = page.split('<select id="kind" name="kind">', 1)[1].split("</select>", 1)[0]
    assert "<option>created</option>" in kinds and "<option>curator_run</option>" not in kinds
    assert "<option>updated</option>" in kinds
    assert '<a href="/skills/default/deploy">deploy</a>' in page
    assert '<a href="/skills?library=default">default</a>' in page
    assert '<a href="/events?session=sess-42">sess-42</a>' in page
    assert "<dt>path</dt><dd>default:deploy/SKILL.md</dd>" in page
    assert "<dt>version</dt><dd>2</dd>" in page
    assert str(workspace.skills) not in page.split('id="event-rows"', 1)[1]
    session = panel.get("/events?session=sess-42").text
    assert session.count("<tr><td") == 1


def test_every_action_redirects_to_its_page_with_its_outcome_once(
    panel: TestClient, workspace: Workspace
) -> None:
    location, page = act(panel, "pin", library="default", name="deploy", back="/skills?q=dep")
    assert location == "/skills?q=dep"
    assert '<p class="flash done" role="status">Pinned deploy' in page
    assert "flash" not in panel.get(location).text  # shown once: a reload shows no outcome
    assert str(workspace.skills) not in page.split("</h1>", 1)[1].split("</p>", 1)[0]
    location, page = act(panel, "delete", library="default", name="deploy", back="/skills/x/y")
    assert location == "/skills/x/y" and "Delete refused: deploy is pinned" in page
    location, _ = act(panel, "unpin", library="default", name="deploy", back="//evil.example/")
    assert location == "/skills/default/deploy"  # another origin is never a way back
    location, page = act(panel, "delete", library="default", name="deploy",
                         back="/skills/default/deploy")  # fmt: skip
    assert location == "/skills" and "Deleted deploy" in page  # not the page just deleted
    assert [e["reason"] for e in workspace.events("web")] == ["pin", "delete", "unpin", "delete"]


@pytest.mark.parametrize(
    ("back", "safe"),
    [
        ("/skills?q=a", True),
        ("/", True),
        ("//evil.example", False),
        ("/\\evil.example", False),
        ("https://evil.example/", False),
        ("/skills\r\nSet-Cookie: x=1", False),
        ("skills", False),
        (None, False),
    ],
)
def test_a_way_back_is_a_path_on_the_panel(back: str | None, safe: bool) -> None:
    assert (safe_back(back, "/default") == back) is safe


def test_a_forged_flash_is_ignored_and_text_only() -> None:
    assert Flash.decode("not base64 ][") is None
    assert Flash.decode(Flash("hacked", "x").encode()) is None
    shown = Flash.decode(Flash("done", "<b>deploy</b>").encode())
    assert shown == Flash("done", "<b>deploy</b>")


def test_a_proposal_s_diff_leaves_out_what_skilld_manages(
    panel: TestClient, workspace: Workspace
) -> None:
    current = (workspace.skills / "deploy" / "SKILL.md").read_text()
    assert "version:" in current and "managed-by: skilld" in current
    stage(workspace, "deploy", "1. Build.\n2. Canary.\n3. Ship.\n")
    page = panel.get("/review").text
    diff = page.split('<pre class="diff">', 1)[1].split("</pre>", 1)[0]
    assert '<span class="add">+2. Canary.</span>' in diff
    assert "version" not in diff and "managed-by" not in diff
    assert "</span>\n<span" not in diff  # single-spaced: one line per line
    only_version = current.replace("version: '1'", "version: '2'")
    assert only_version != current
    assert proposal_diff(current, only_version) == []  # what skilld manages is no change
    unowned = current.replace("  managed-by: skilld\n", "")
    assert unowned != current and proposal_diff(current, unowned) == []


def test_run_now_previews_with_a_dry_run_then_moves(
    panel: TestClient, workspace: Workspace
) -> None:
    records = usage(workspace)
    records["triage"]["last_used_at"] = "2020-01-01T00:00:00+00:00"
    records["triage"]["created_at"] = "2020-01-01T00:00:00+00:00"
    (workspace.skills / ".usage.json").write_text(json.dumps(records))
    page = panel.get("/curator").text
    now = page.split('id="now"', 1)[1].split("</section>", 1)[0]
    dry = cli_json(workspace, "curate", "--dry-run", "--json")
    (would,) = [t for lifecycle in dry["lifecycle"] for t in lifecycle["transitions"]]
    assert f">{would['name']}</a>" in now and "active → archived" in now
    assert (workspace.skills / "triage" / "SKILL.md").exists()  # a preview moves nothing
    location, after = act(panel, "curate", back="/curator")
    assert location == "/curator" and "The curator ran: 1 archived." in after
    assert not (workspace.skills / "triage").exists()
    assert workspace.events("archived")[-1]["source"] == "curator"


def test_a_skill_written_or_edited_in_the_panel_is_the_person_s(
    panel: TestClient, workspace: Workspace
) -> None:
    form = panel.get("/write").text
    assert 'name="description"' in form and 'name="body"' in form
    location, page = act(
        panel, "write", new="1", library="default", name="on-call",
        description="Page the on-call engineer.", when="", body="1. Call.\n",
    )  # fmt: skip
    assert location == "/skills/default/on-call" and "Wrote on-call" in page
    rows = {row["name"]: row for row in cli_json(workspace, "skills", "list", "--json")}
    assert rows["on-call"]["owner"] == "human"
    edit = panel.get("/skills/default/deploy/edit").text
    assert "Deploy the service." in edit and "2. Ship." in edit
    location, page = act(
        panel, "write", library="default", name="deploy", description="Deploy it.",
        when="", body="1. Build.\n2. Canary.\n3. Ship.\n",
    )  # fmt: skip
    assert "Saved deploy" in page
    rows = {row["name"]: row for row in cli_json(workspace, "skills", "list", "--json")}
    assert rows["deploy"]["owner"] == "human"
    assert "2. Canary." in (workspace.skills / "deploy" / "SKILL.md").read_text()
    # skilld never changes it afterwards: a learned update is refused as protected.
    refused = workspace.cli(
        "skills", "write", "deploy", "--description", "Other.", "--content", "x\n"
    )
    assert refused.returncode != 0 and "human" in refused.stderr
    taken = panel.post(
        "/act/write",
        data={"csrf": SECRET, "new": "1", "library": "default", "name": "triage",
              "description": "Again.", "body": "Mine.\n"},
        headers={"origin": ORIGIN},
    )  # fmt: skip
    assert taken.status_code == 409 and "already exists" in taken.text
    assert "Mine." in taken.text  # what was typed is kept
    assert "Read the log first." in (workspace.skills / "triage" / "SKILL.md").read_text()


def test_navigation_marks_the_page_and_empty_states_say_what_to_do(
    panel: TestClient, workspace: Workspace
) -> None:
    page = panel.get("/events").text
    assert '<a href="/events" aria-current="page">Events</a>' in page
    assert page.count('aria-current="page"') == 1
    assert '<a class="skip" href="#main">' in page and '<main id="main"' in page
    assert '<link rel="icon" href="/static/favicon.svg"' in page
    icon = panel.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.text.startswith("<svg")
    review = panel.get("/review").text
    assert "Review mode is off" in review and 'publish = "review"' in review


def test_the_overview_reads_no_managed_file_twice(
    panel: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap's count takes each file's hash from what the listing remembers of it while the
    file stays the same: the overview at 10,000 skills is a stat per file, not a read."""
    import skilld.skills.ownership as ownership

    hashed: list[bytes] = []
    real = ownership.sha256_hex
    monkeypatch.setattr(ownership, "sha256_hex", lambda data: hashed.append(data) or real(data))
    assert panel.get("/").status_code == 200
    assert panel.get("/").status_code == 200
    assert hashed == []
    assert "<td>2</td>" in panel.get("/").text  # both skills still counted as managed
