"""A person's edits in the panel (issue 41): either save is a new version of the same skill and
its effect row continues; rolling back across a person's edit, and archiving or deleting a
person's skill, are the person's acts; every button a skill's page shows is one it accepts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.conftest import Workspace
from tests.test_web import ORIGIN, SECRET, cli_json, client_for, usage, write_skill


@pytest.fixture
def panel(workspace: Workspace) -> Iterator[TestClient]:
    workspace.write_config()
    write_skill(workspace, "deploy", "Deploy the service.", "1. Build.\n2. Ship.\n")
    write_skill(workspace, "deploy", "Deploy the service.", "1. Build.\n2. Test.\n3. Ship.\n")
    with client_for(workspace) as client:
        yield client


def act(client: TestClient, verb: str, **fields: str) -> str:
    """POST an action; the page it redirects to."""
    response = client.post(
        f"/act/{verb}", data={"csrf": SECRET, **fields}, headers={"origin": ORIGIN}
    )
    assert response.status_code == 200, response.text
    return response.text


def save(client: TestClient, how: str, body: str) -> str:
    return act(
        client, "write", library="default", name="deploy", description="Deploy the service.",
        when="", body=body, save=how,
    )  # fmt: skip


def owner(workspace: Workspace, name: str) -> str:
    rows = {row["name"]: row for row in cli_json(workspace, "skills", "list", "--json")}
    return str(rows[name]["owner"])


def effect_names(workspace: Workspace) -> list[str]:
    return [row["name"] for row in cli_json(workspace, "effect", "--json")]


def versions(workspace: Workspace, name: str) -> list[dict[str, Any]]:
    shown = cli_json(workspace, "skills", "show", name, "--json")
    return list(shown["effect"]["versions"])


def test_save_as_mine_is_a_new_version_the_person_s_and_the_row_continues(
    panel: TestClient, workspace: Workspace
) -> None:
    assert "deploy" in effect_names(workspace)
    edit = panel.get("/skills/default/deploy/edit").text
    assert '<button type="submit" name="save" value="mine">Save as mine</button>' in edit
    assert 'value="managed">Save and let skilld keep improving it</button>' in edit
    page = save(panel, "mine", "1. Build.\n2. Canary.\n3. Ship.\n")
    assert "Saved deploy: it is yours" in page
    assert owner(workspace, "deploy") == "human"
    assert "deploy" in effect_names(workspace)  # the measurement continues
    numbered = versions(workspace, "deploy")
    assert [v["version"] for v in numbered] == [1, 2, 3]
    assert numbered[-1]["source"] == "panel" and numbered[-1]["approved_by"] is None
    # skilld never changes it afterwards, and the curator never moves it.
    refused = workspace.cli(
        "skills", "write", "deploy", "--description", "Other.", "--content", "x\n"
    )
    assert refused.returncode != 0 and "human" in refused.stderr
    records = usage(workspace)
    records["deploy"].update(
        last_used_at="2020-01-01T00:00:00+00:00", created_at="2020-01-01T00:00:00+00:00"
    )
    (workspace.skills / ".usage.json").write_text(json.dumps(records))
    workspace.cli_here("curate")
    assert (workspace.skills / "deploy" / "SKILL.md").exists()
    # Saving it again as the person's keeps it theirs (the same row, the next version).
    save(panel, "mine", "1. Build.\n2. Canary.\n3. Ship.\n4. Watch.\n")
    assert owner(workspace, "deploy") == "human" and "deploy" in effect_names(workspace)
    assert len(versions(workspace, "deploy")) == 4


def test_save_and_let_skilld_keep_improving_stays_managed_approved_by_the_panel(
    panel: TestClient, workspace: Workspace
) -> None:
    page = save(panel, "managed", "1. Build.\n2. Canary.\n3. Ship.\n")
    assert "Saved deploy: skilld keeps improving it." in page
    assert owner(workspace, "deploy") == "managed"
    assert "deploy" in effect_names(workspace)
    newest = versions(workspace, "deploy")[-1]
    assert newest["version"] == 3 and newest["approved_by"] == "panel"
    assert "approved by panel" in panel.get("/skills/default/deploy").text
    # skilld may update it again.
    workspace.cli_here(
        "skills", "write", "deploy", "--description", "Deploy it.", "--content", "Ship.\n"
    )
    assert owner(workspace, "deploy") == "managed"


def test_a_rollback_across_a_person_s_edit_is_theirs_and_keeps_the_row(
    panel: TestClient, workspace: Workspace
) -> None:
    save(panel, "mine", "1. Build.\n2. Canary.\n3. Ship.\n")
    page = panel.get("/skills/default/deploy").text
    assert '<button type="submit">Roll back</button>' in page
    page = act(panel, "rollback", library="default", name="deploy", version="1", back="/skills")
    assert "Rolled deploy back" in page, page
    text = (workspace.skills / "deploy" / "SKILL.md").read_text()
    assert "2. Ship." in text and "Canary" not in text
    assert owner(workspace, "deploy") == "human"  # the person's act: still theirs
    assert "deploy" in effect_names(workspace)
    numbered = versions(workspace, "deploy")
    assert numbered[-1]["event"] == "rolled_back" and numbered[-1]["restored"] == 1
    # And back across it again from the CLI (`--force`: a person's skill).
    plain = workspace.cli("skills", "rollback", "deploy", "--version", "3")
    assert plain.returncode != 0 and "human" in plain.stderr
    workspace.cli_here("skills", "rollback", "deploy", "--version", "3", "--force")
    assert "Canary" in (workspace.skills / "deploy" / "SKILL.md").read_text()
    assert owner(workspace, "deploy") == "human" and "deploy" in effect_names(workspace)
    assert len(versions(workspace, "deploy")) == 5


def test_a_person_archives_and_deletes_their_skill_from_the_panel(
    panel: TestClient, workspace: Workspace
) -> None:
    save(panel, "mine", "1. Build.\n2. Canary.\n3. Ship.\n")
    page = act(panel, "archive", library="default", name="deploy", back="/skills")
    assert "Archived deploy" in page
    assert not (workspace.skills / "deploy").exists()
    archived = panel.get("/skills/default/deploy").text
    assert '<button type="submit">Restore</button>' in archived
    act(panel, "restore", library="default", name="deploy", back="/skills")
    assert owner(workspace, "deploy") == "human"  # restored as it was: the person's
    page = act(panel, "delete", library="default", name="deploy", back="/skills")
    assert "Deleted deploy" in page
    assert not (workspace.skills / "deploy").exists()
    history = cli_json(workspace, "skills", "history", "deploy", "--json")
    assert history  # its version is kept
    outcomes = [e["detail"]["outcome"] for e in workspace.events("web")]
    assert outcomes == ["done"] * 4


BUTTON = re.compile(r'<form class="action" method="post" action="/act/([a-z-]+)"')


def offered(client: TestClient, name: str) -> set[str]:
    page = client.get(f"/skills/default/{name}").text
    shown = set(BUTTON.findall(page))
    if f'href="/skills/default/{name}/edit"' in page:
        shown.add("edit")
    return shown


@pytest.mark.parametrize("kind", ["managed", "human", "pinned", "bundled"])
def test_every_button_a_skill_page_shows_is_accepted(
    panel: TestClient, workspace: Workspace, kind: str
) -> None:
    if kind == "human":
        save(panel, "mine", "1. Build.\n2. Canary.\n3. Ship.\n")
    elif kind == "pinned":
        act(panel, "pin", library="default", name="deploy", back="/skills")
    elif kind == "bundled":
        (workspace.skills / ".bundled_manifest").write_text("deploy\n")
    shown = offered(panel, "deploy")
    expected = {
        "managed": {"edit", "pin", "archive", "rollback", "delete"},
        "human": {"edit", "pin", "archive", "rollback", "delete"},
        "pinned": {"unpin"},
        "bundled": {"pin"},
    }[kind]
    assert shown == expected
    if "edit" in shown:
        assert panel.get("/skills/default/deploy/edit").status_code == 200
        assert "Saved deploy" in save(panel, "mine", "Edited.\n")
    # Each verb, in an order where each leaves the skill there for the next.
    undo = {"archive": "restore", "pin": "unpin"}
    for verb in ("rollback", "archive", "pin", "unpin", "delete"):
        if verb not in shown:
            continue
        page = act(panel, verb, library="default", name="deploy", version="1", back="/skills")
        assert "refused" not in page.split("</h1>", 1)[1].split("</p>", 1)[0], verb
        if verb in undo:
            act(panel, undo[verb], library="default", name="deploy", back="/skills")
    assert all(e["detail"]["outcome"] == "done" for e in workspace.events("web"))


# -- review ----------------------------------------------------------------------------------


def stage_from(workspace: Workspace, name: str, content: str, description: str) -> None:
    from skilld.evolve.review import ReviewQueue
    from skilld.gitinfo import GitContext
    from skilld.skills.document import SkillDoc
    from skilld.skills.outcomes import Origin

    commit = "0123456789abcdef" * 2 + "01234567"
    git = GitContext("github.com/acme/api", "feat/login", commit, "recorded")
    ReviewQueue(workspace.state / "pending").stage(
        SkillDoc(name=name, description=description, body=content),
        Origin(source="jsonl", session="sess-7f3a", git=git),
        library="default",
        storage_key="default",
        reason="it came up twice",
        held_because="review mode",
    )


def test_review_shows_where_a_proposal_came_from_and_no_ownership_change(
    panel: TestClient, workspace: Workspace
) -> None:
    stage_from(workspace, "deploy", "1. Build.\n2. Test.\n3. Ship.\n", "Deploy the service.")
    stage_from(workspace, "lint", "Run the linter.\n", "Lint the code.")
    page = panel.get("/review").text
    deploy, lint = page.split('<section class="proposal"')[1:]
    for proposal in (deploy, lint):
        assert '<a href="/events?session=sess-7f3a">sess-7f3a</a>' in proposal
        assert "learned on github.com/acme/api@feat/login (0123456)" in proposal
    # The same text as the skill: no diff of ownership keys, and nothing to approve.
    assert "managed-by" not in deploy and "(no difference)" in deploy
    assert "None: the skill already says this" in deploy
    assert "/act/approve" not in deploy and "/act/reject" in deploy
    assert "/act/approve" in lint
    listed = workspace.cli_here("review", "list")
    assert listed.count("session sess-7f3a, learned on github.com/acme/api@feat/login") == 2
