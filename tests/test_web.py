"""The panel (`skilld web`): its pages, its actions through the CLI's functions, its refusals,
and its JSON API equal to what the `--json` commands print."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.testclient import TestClient

from skilld.config import load_config
from skilld.errors import ConfigError, SkilldError
from skilld.evolve.report import DAILY_SPEND_KEY, add_daily_spend
from skilld.evolve.review import ReviewQueue
from skilld.skills.document import SkillDoc
from skilld.skills.outcomes import Origin
from skilld.state import StateDB
from skilld.web.login import panel_token
from skilld.web.panel import guarded_app
from skilld.web.render import markdown, safe_link
from skilld.web.security import (
    SESSION_COOKIE,
    Guard,
    access_rules,
    allowed_hosts,
    fib_trie_addresses,
    host_names,
    if_inet6_addresses,
    valid_session,
)
from tests.conftest import Workspace, conversation, git
from tests.fakellm import FakeLLM, skill_reply
from tests.loopback import browser_like, free_port

#: The panel's own name in these tests (a real panel's label is random: `web-name`).
OWN_NAME = "skilld-test.localhost"
ORIGIN = f"http://{OWN_NAME}:8741"
SECRET = "s3cret-of-this-process"
TOKEN = "t0ken-for-the-panel"
HOSTILE = '<script>alert("x")</script> <img src=x onerror=alert(1)> <svg onload=alert(2)>'


def panel_app(workspace: Workspace) -> Guard:
    config = load_config(workspace.config_path, environ={})
    names = ["127.0.0.1", "localhost", "::1"]
    return guarded_app(config, access_rules(names, OWN_NAME, OWN_NAME, 8741, TOKEN, SECRET))


def client_for(workspace: Workspace, *, login: bool = True, app: Guard | None = None) -> TestClient:
    """A client of the panel (`app`, else a new one), logged in (unless `login` is False)
    through the login URL `skilld web` prints."""
    client = TestClient(app or panel_app(workspace), base_url=ORIGIN)
    if login:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
    return client


def write_skill(workspace: Workspace, name: str, description: str, content: str) -> None:
    workspace.cli_here("skills", "write", name, "--description", description, "--content", content)


def post(client: TestClient, verb: str, **fields: str) -> httpx.Response:
    return client.post(f"/act/{verb}", data={"csrf": SECRET, **fields}, headers={"origin": ORIGIN})


def cli_json(workspace: Workspace, *args: str) -> Any:
    result = workspace.cli(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def usage(workspace: Workspace) -> dict[str, Any]:
    return json.loads((workspace.skills / ".usage.json").read_text())


@pytest.fixture
def panel(workspace: Workspace) -> Iterator[TestClient]:
    workspace.write_config()
    write_skill(workspace, "deploy", "Deploy the service.", "1. Build.\n2. Ship.\n")
    write_skill(workspace, "deploy", "Deploy the service.", "1. Build.\n2. Test.\n3. Ship.\n")
    write_skill(workspace, "triage", "Triage a failing build.", "Read the log first.\n")
    with client_for(workspace) as client:
        yield client


# -- pages -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        ("/", "Overview"),
        ("/skills", "Skills"),
        ("/skills/default/deploy", "deploy"),
        ("/review", "Review"),
        ("/events", "Events"),
        ("/failures", "Failures"),
        ("/curator", "Curator"),
    ],
)
def test_each_page_has_a_title_a_heading_and_the_security_headers(
    panel: TestClient, path: str, heading: str
) -> None:
    response = panel.get(path)
    assert response.status_code == 200
    assert f"<h1>{heading}</h1>" in response.text
    assert "<title>" in response.text and "<script>" not in response.text
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["x-frame-options"] == "DENY"


def test_the_skill_page_shows_body_effect_versions_and_a_diff(panel: TestClient) -> None:
    page = panel.get("/skills/default/deploy").text
    assert "<li>Test.</li>" in page
    for button in ("Pin", "Archive", "Roll back"):
        assert f'<button type="submit">{button}</button>' in page
    # Delete stands apart and looks destructive.
    danger = page.split('<div class="danger-zone">', 1)[1].split("</div>", 1)[0]
    assert '<button type="submit" class="danger">Delete</button>' in danger
    version = page.split('<option value="', 1)[1].split('"', 1)[0]
    diff = panel.get(f"/skills/default/deploy?a={version}&b=current").text
    assert '<span class="add">+2. Test.</span>' in diff
    assert '<span class="del">-2. Ship.</span>' in diff


def test_a_skill_page_shows_where_each_version_came_from(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    repo = tmp_path / "api"
    repo.mkdir()
    for args in (
        ("init", "-q", "-b", "main"),
        ("commit", "-q", "--allow-empty", "-m", "one"),
        ("remote", "add", "origin", "git@github.com:acme/api.git"),
    ):
        git(repo, *args)
    commit = git(repo, "rev-parse", "HEAD")
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s1", [{**m, "cwd": str(repo)} for m in conversation()])
    fake_llm.queue.append(skill_reply("run-tests", reason=f"Seen twice {HOSTILE}"))
    assert workspace.cli("once").returncode == 0
    shown = cli_json(workspace, "skills", "show", "run-tests", "--json")
    (version,) = shown["effect"]["versions"]
    assert (version["source"], version["model"], version["window"]) == (
        "jsonl",
        "test-model",
        [0, 7],
    )
    assert version["prompt_version"] and version["session"]
    with client_for(workspace) as panel:
        assert panel.get("/api/skills/default/run-tests").json() == shown
        page = panel.get("/skills/default/run-tests").text
    row = page.split('<table class="versions">', 1)[1].split("</table>", 1)[0]
    for cell in (
        "jsonl", version["session"], "messages 0–7", "test-model", version["prompt_version"],
        f"learned on github.com/acme/api@main ({commit[:7]})", "Seen twice &lt;script&gt;",
    ):  # fmt: skip
        assert f"<td>{cell}" in row, cell
    assert "<script>" not in page and "<img" not in page


def test_the_skills_table_filters_searches_sorts_and_pages(
    panel: TestClient, workspace: Workspace
) -> None:
    assert "triage" in panel.get("/skills?q=failing").text  # by description
    assert "deploy</a>" not in panel.get("/skills?q=failing").text
    assert workspace.cli("usage", "use", "triage").returncode == 0
    by_uses = panel.get("/skills?sort=uses").text
    assert by_uses.index(">triage</a>") < by_uses.index(">deploy</a>")
    assert "No skill matches." in panel.get("/skills?owner=human").text
    many = workspace.skills
    for n in range(60):
        (many / f"extra-{n:02d}").mkdir()
        (many / f"extra-{n:02d}" / "SKILL.md").write_text(
            f"---\nname: extra-{n:02d}\ndescription: Extra.\n---\nBody.\n"
        )
    first, second = panel.get("/skills?owner=human").text, panel.get("/skills?owner=human&page=2")
    assert "62" not in first and "60 skills, page 1 of 2" in first
    assert ">extra-59</a>" in second.text and ">extra-00</a>" not in second.text


def test_the_panel_sees_a_skill_file_changed_in_place_between_requests(
    panel: TestClient, workspace: Workspace
) -> None:
    """The panel remembers what it read of each skill file while the file stays the same; an
    edit in place that keeps the file's size and modification time is still seen."""
    assert {row["owner"] for row in panel.get("/api/skills").json()} == {"managed"}
    edits = {"deploy": (b"Ship.", b"Sail."), "triage": (b"---\nname", b"+++\nname")}
    time.sleep(0.05)  # past the kernel's timestamp tick: each edit's ctime is a new one
    for name, (old, new) in edits.items():
        file = workspace.skills / name / "SKILL.md"
        before = file.stat()
        with file.open("r+b") as handle:
            data = handle.read()
            handle.seek(0)
            handle.write(data.replace(old, new, 1))
        os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = file.stat()
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
            before.st_ino, before.st_size, before.st_mtime_ns,
        )  # fmt: skip
    rows = {row["name"]: row for row in panel.get("/api/skills").json()}
    assert rows["deploy"]["owner"] == "human"
    assert rows["triage"]["broken"] == "no frontmatter: the first line must be '---'"
    assert list(rows.values()) == cli_json(workspace, "skills", "list", "--json")
    page = panel.get("/skills?owner=human").text  # neither is skilld's text any more
    assert "2 skills" in page and "<td>broken</td>" in page


def test_the_events_page_is_newest_first_and_pages_back(
    panel: TestClient, workspace: Workspace
) -> None:
    with StateDB(workspace.state / "state.db") as state:
        ids = [state.add_event("warning", reason=f"note {n}") for n in range(60)]
    page = panel.get("/events?kind=warning").text
    assert page.index("note 59") < page.index("note 58")
    assert "note 9<" not in page
    older = panel.get(f"/events?kind=warning&before={ids[10]}").text
    assert "note 9<" in older and "note 10<" not in older


# -- actions ---------------------------------------------------------------------------------


def test_pin_through_the_panel_is_the_cli_s_pin_and_a_web_event(
    panel: TestClient, workspace: Workspace
) -> None:
    response = post(panel, "pin", library="default", name="deploy")
    assert response.status_code == 200, response.text
    assert "Pinned deploy" in response.text
    rows = {row["name"]: row for row in cli_json(workspace, "skills", "list", "--json")}
    assert rows["deploy"]["pinned"] is True
    (web,) = workspace.events("web")
    assert (web["source"], web["skill"], web["reason"]) == ("panel", "deploy", "pin")
    assert workspace.events("pinned")[-1]["source"] == "panel"
    assert post(panel, "unpin", library="default", name="deploy").status_code == 200
    assert usage(workspace)["deploy"]["pinned"] is False


def test_archive_restore_rollback_and_delete(panel: TestClient, workspace: Workspace) -> None:
    assert post(panel, "archive", library="default", name="triage").status_code == 200
    assert not (workspace.skills / "triage").exists()
    assert "Restore" in panel.get("/curator").text
    assert post(panel, "restore", library="default", name="triage").status_code == 200
    assert (workspace.skills / "triage" / "SKILL.md").exists()
    history = cli_json(workspace, "skills", "history", "deploy", "--json")
    first = history[0]["version"]
    response = post(panel, "rollback", library="default", name="deploy", version=first)
    assert response.status_code == 200, response.text
    assert "2. Test." not in (workspace.skills / "deploy" / "SKILL.md").read_text()
    assert post(panel, "delete", library="default", name="deploy").status_code == 200
    assert not (workspace.skills / "deploy").exists()
    kinds = [e["reason"] for e in workspace.events("web")]
    assert kinds == ["archive", "restore", "rollback", "delete"]


def test_a_refusal_says_why_and_changes_nothing(panel: TestClient, workspace: Workspace) -> None:
    # A skill the agent's bundle installed is never a person's to delete from the panel.
    bundled = workspace.skills / "mine"
    bundled.mkdir()
    (bundled / "SKILL.md").write_text("---\nname: mine\ndescription: Mine.\n---\nKeep out.\n")
    (workspace.skills / ".bundled_manifest").write_text("mine\n")
    response = post(panel, "delete", library="default", name="mine")
    assert "Delete refused" in response.text and "bundled" in response.text
    assert (bundled / "SKILL.md").exists()
    missing = post(panel, "pin", library="default", name="nothing-here")
    assert "no skill named nothing-here" in missing.text
    assert [e["detail"]["outcome"] for e in workspace.events("web")] == ["refused", "refused"]


def stage(workspace: Workspace, name: str, content: str) -> Path:
    queue = ReviewQueue(workspace.state / "pending")
    doc = SkillDoc(name=name, description="A staged skill.", body=content)
    return queue.stage(
        doc,
        Origin(source="jsonl", session="s1"),
        library="default",
        storage_key="default",
        reason="it came up twice",
        held_because="review mode",
    )


def test_review_shows_a_diff_and_approve_and_reject_act(
    panel: TestClient, workspace: Workspace
) -> None:
    rejected = stage(workspace, "deploy", "1. Build.\n2. Canary.\n3. Ship.\n")
    stage(workspace, "lint", "Run the linter.\n")
    page = panel.get("/review").text
    assert '<span class="add">+2. Canary.</span>' in page
    assert "review mode" in page and "it came up twice" in page
    assert "<h3>New skill</h3>" in page
    assert post(panel, "reject", library="default", name="deploy").status_code == 200
    assert not rejected.exists()
    response = post(panel, "approve", library="default", name="lint")
    assert response.status_code == 200 and "Approved lint: created." in response.text
    assert "Run the linter." in (workspace.skills / "lint" / "SKILL.md").read_text()
    assert [e["source"] for e in workspace.events("approved", "rejected")] == ["panel", "panel"]


# -- refusals --------------------------------------------------------------------------------


def not_pinned(workspace: Workspace) -> bool:
    return usage(workspace).get("deploy", {}).get("pinned") is not True


def test_a_foreign_host_is_refused(panel: TestClient) -> None:
    for host in ("evil.example:8741", "127.0.0.1:9999", "attacker.test", "other.localhost:8741"):
        response = panel.get("/", headers={"host": host})
        assert response.status_code == 421
        assert response.headers["x-content-type-options"] == "nosniff"
    # A loopback name is the panel's too, for a script with the token.
    bearer = {"host": "localhost:8741", "authorization": f"Bearer {TOKEN}"}
    assert panel.get("/api/status", headers=bearer).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "http://127.0.0.1:9999"},
        {"referer": "http://evil.example/page"},
        {"origin": "null", "sec-fetch-site": "cross-site"},
        # A page on another port of 127.0.0.1 is same-site, not same-origin.
        {"origin": "null", "sec-fetch-site": "same-site"},
        {"sec-fetch-site": "same-site"},
        # A request no page made (typed, a bookmark, another program) says none.
        {"origin": "null", "sec-fetch-site": "none"},
        {"sec-fetch-site": "none"},
        {},
    ],
    ids=[
        "foreign origin",
        "other port",
        "foreign referer",
        "null cross-site",
        "null same-site",
        "hidden same-site",
        "null none",
        "hidden none",
        "no origin",
    ],
)
def test_a_post_from_another_origin_is_refused(
    panel: TestClient, workspace: Workspace, headers: dict[str, str]
) -> None:
    response = panel.post(
        "/act/pin", data={"csrf": SECRET, "library": "default", "name": "deploy"}, headers=headers
    )
    assert response.status_code == 403
    assert not_pinned(workspace)


def test_the_panel_s_own_post_passes_with_a_hidden_origin(
    panel: TestClient, workspace: Workspace
) -> None:
    """`Referrer-Policy: no-referrer` makes a browser send `Origin: null`: its `Sec-Fetch-Site`
    vouches for the panel's own page."""
    response = panel.post(
        "/act/pin",
        data={"csrf": SECRET, "library": "default", "name": "deploy"},
        headers={"origin": "null", "sec-fetch-site": "same-origin"},
    )
    assert response.status_code == 200
    assert not not_pinned(workspace)


@pytest.mark.parametrize("secret", ["", "guessed", SECRET + "x"])
def test_a_post_without_the_panel_s_secret_is_refused(
    panel: TestClient, workspace: Workspace, secret: str
) -> None:
    response = panel.post(
        "/act/pin",
        data={"csrf": secret, "library": "default", "name": "deploy"},
        headers={"origin": ORIGIN},
    )
    assert response.status_code == 403 and "secret" in response.text
    assert not_pinned(workspace)


def test_get_on_an_action_is_refused(panel: TestClient, workspace: Workspace) -> None:
    response = panel.get(f"/act/pin?csrf={SECRET}&library=default&name=deploy")
    assert response.status_code == 405
    assert not_pinned(workspace)
    assert workspace.events("web") == []


def test_every_request_needs_the_token(workspace: Workspace) -> None:
    workspace.write_config()
    write_skill(workspace, "deploy", "Deploy the service.", "Ship.\n")
    with client_for(workspace, login=False) as client:
        assert client.get("/api/status").status_code == 401
        assert client.get("/", follow_redirects=False).headers["location"] == "/login"
        wrong = {"authorization": "Bearer nope"}
        assert client.get("/api/skills", headers=wrong).status_code == 401
        for scheme in ("Bearer", "bearer", "BEARER"):
            right = {"authorization": f"{scheme} {TOKEN}"}
            assert client.get("/api/skills", headers=right).status_code == 200
        refused = client.post(
            "/act/pin",
            data={"csrf": SECRET, "library": "default", "name": "deploy"},
            headers={"origin": ORIGIN},
        )
        assert refused.status_code == 401 and not_pinned(workspace)
        login = {"csrf": SECRET, "token": "wrong"}
        assert client.post("/login", data=login, headers={"origin": ORIGIN}).status_code == 401
        assert client.get("/skills?token=wrong&q=x", follow_redirects=False).status_code == 401
        assert SESSION_COOKIE not in client.cookies
        response = client.post(
            "/login",
            data={"csrf": SECRET, "token": TOKEN},
            headers={"origin": ORIGIN},
            follow_redirects=False,
        )
        assert response.status_code == 303
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=" in cookie
        assert TOKEN not in cookie
        assert client.get("/").status_code == 200
        assert post(client, "pin", library="default", name="deploy").status_code == 200
    assert not not_pinned(workspace)


def test_no_page_served_without_a_session_carries_the_secret(workspace: Workspace) -> None:
    """The per-process secret is what a forged post lacks: a page anyone may load (the login
    form, its refusals, the word a loopback address gets) never shows it."""
    workspace.write_config()
    write_skill(workspace, "deploy", "Deploy the service.", "Ship.\n")
    same_origin = {"origin": ORIGIN}
    with client_for(workspace, login=False) as client:
        answers = [
            client.get("/login"),
            client.post("/login", data={"token": "wrong"}, headers=same_origin),
            client.request("PUT", "/login", headers={"sec-fetch-site": "same-origin"}),
            client.get("/skills/default/deploy", follow_redirects=True),
            client.get("/skills", headers={"host": "127.0.0.1:8741"}),
            client.get("/login", headers={"host": "127.0.0.1:8741"}),
        ]
        for answer in answers:
            assert SECRET not in answer.text, answer.request.url
        assert [answer.status_code for answer in answers] == [200, 401, 405, 200, 403, 403]
        assert '<input id="token"' in answers[0].text
        # The login form works without it.
        logged = client.post("/login", data={"token": TOKEN}, headers=same_origin)
        assert logged.status_code == 200 and SECRET in client.get("/skills/default/deploy").text


def test_the_session_lives_under_the_panel_s_own_name_only(workspace: Workspace) -> None:
    """A browser's session is under `skilld-….localhost` (kept across restarts, so a bookmark
    keeps working); by a loopback address no cookie is set or honoured, a login there is sent
    to the own name, and a script's `Authorization: Bearer` works on every name."""
    workspace.write_config()
    process, login = start_panel(workspace)
    try:
        name, port = urlsplit(login).hostname, urlsplit(login).port
        assert name is not None and name.endswith(".localhost")
        token = login.split("token=", 1)[1]
        client = logged_in(login)
        session = client.cookies[SESSION_COOKIE]
        for loopback in ("127.0.0.1", "localhost"):
            base = f"http://{loopback}:{port}"
            opened = httpx.get(f"{base}/skills?q=de&token={token}", timeout=10)
            assert opened.status_code == 303 and "set-cookie" not in opened.headers
            assert opened.headers["location"] == f"http://{name}:{port}/skills?q=de&token={token}"
            for path in ("/", "/skills", "/login"):
                answer = httpx.get(base + path, timeout=10)
                assert answer.status_code == 403 and "set-cookie" not in answer.headers
                assert "skilld web --url" in answer.text and name not in answer.text
            replayed = {"cookie": f"{SESSION_COOKIE}={session}"}
            assert httpx.get(f"{base}/api/status", headers=replayed, timeout=10).status_code == 401
            bearer = {"authorization": f"Bearer {token}"}
            assert httpx.get(f"{base}/api/status", headers=bearer, timeout=10).status_code == 200
        assert client.get("api/status").status_code == 200
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=15)
        process, again = start_panel(workspace)
        assert urlsplit(again).hostname == name
        assert workspace.cli("web", "--url").stdout == again + "\n"
        # The same name, so the browser's session reaches the restarted panel.
        assert client.get(again.split("?", 1)[0] + "api/status").status_code == 200
    finally:
        process.kill()
        process.communicate(timeout=15)


def test_the_login_redirect_stays_on_the_panel(workspace: Workspace) -> None:
    """`GET //evil.example/?token=…`: the clean URL the login redirects to is a path on the
    panel's own origin, never a scheme-relative URL naming another host."""
    workspace.write_config()
    process, login = start_panel(workspace)
    try:
        name, port = urlsplit(login).hostname, urlsplit(login).port
        token = login.split("token=", 1)[1]
        paths = ("//evil.example/", "/\\evil.example/", "/%5Cevil.example/", "///evil.example")
        for host in (f"{name}:{port}", f"127.0.0.1:{port}"):
            for path in paths:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    connection.request("GET", f"{path}?token={token}", headers={"host": host})
                    answer = connection.getresponse()
                    answer.read()
                finally:
                    connection.close()
                assert answer.status == 303, (host, path)
                where = urlsplit(answer.headers["location"])
                assert (where.scheme, where.netloc) in (("", ""), ("http", f"{name}:{port}")), where
                assert where.path.startswith("/") and not where.path.startswith(("//", "/\\"))
        # The good path: the login keeps the page asked for.
        with browser_like(timeout=10, base_url=login.split("?", 1)[0]) as client:
            kept = client.get(f"skills?q=de&token={token}")
            assert (kept.status_code, kept.headers["location"]) == (303, "/skills?q=de")
    finally:
        process.kill()
        process.communicate(timeout=15)


def test_the_login_url_sets_a_session_and_redirects_to_the_clean_url(
    workspace: Workspace,
) -> None:
    workspace.write_config()
    with client_for(workspace, login=False) as client:
        response = client.get(f"/skills?q=de&token={TOKEN}", follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/skills?q=de")
        first = client.cookies[SESSION_COOKIE]
        assert client.get("/skills?q=de").status_code == 200
    with client_for(workspace) as again:
        second = again.cookies[SESSION_COOKIE]
    # Each login its own cookie; each proves this token only, and only until it expires.
    assert first != second and TOKEN not in first
    now = time.time()
    assert valid_session(first, TOKEN, now) and valid_session(second, TOKEN, now)
    assert not valid_session(first, TOKEN + "-rotated", now)
    assert not valid_session(first, TOKEN, now + 8 * 24 * 3600)
    expires, nonce, mac = first.split(".")
    assert not valid_session(f"{int(expires) + 3600}.{nonce}.{mac}", TOKEN, now)


def test_wrong_tokens_are_answered_a_few_a_second_and_others_go_on(
    workspace: Workspace,
) -> None:
    workspace.write_config()
    app = panel_app(workspace)
    guessing: list[float] = []

    def guess() -> None:
        with client_for(workspace, login=False, app=app) as guesser:
            started = time.monotonic()
            for number in range(6):
                assert guesser.get(f"/api/status?token=guess{number}").status_code == 401
            guessing.append(time.monotonic() - started)

    with client_for(workspace, app=app) as client:
        guesser = threading.Thread(target=guess)
        guesser.start()
        while guesser.is_alive():
            started = time.monotonic()
            assert client.get("/api/status").status_code == 200  # a session is never slowed
            assert time.monotonic() - started < 0.5
        guesser.join()
    assert guessing[0] >= 2.0  # six wrong guesses: five waits of half a second


# -- the JSON API ----------------------------------------------------------------------------


def test_the_api_returns_what_the_json_commands_print(
    panel: TestClient, workspace: Workspace
) -> None:
    stage(workspace, "lint", "Run the linter.\n")
    assert workspace.cli("usage", "use", "deploy").returncode == 0
    assert panel.get("/api/skills").json() == cli_json(workspace, "skills", "list", "--json")
    assert panel.get("/api/skills?library=default").json() == cli_json(
        workspace, "skills", "list", "--json", "--library", "default"
    )
    assert panel.get("/api/skills/default/deploy").json() == cli_json(
        workspace, "skills", "show", "deploy", "--json"
    )
    assert panel.get("/api/review").json() == cli_json(workspace, "review", "list", "--json")
    # The API pages the log newest first (`events --json` prints it oldest first).
    events = workspace.cli("events", "--json", "--kind", "created", "--kind", "updated")
    assert panel.get("/api/events?kind=created&kind=updated").json() == [
        json.loads(line) for line in reversed(events.stdout.splitlines())
    ]
    limited = workspace.cli("events", "--json", "--limit", "2", "--since", "1h")
    assert panel.get("/api/events?limit=2&since=1h").json() == [
        json.loads(line) for line in reversed(limited.stdout.splitlines())
    ]
    assert panel.get("/api/status").json() == cli_json(workspace, "status", "--json")
    assert panel.get("/api/skills/default/missing").status_code == 404


@pytest.mark.parametrize(
    ("query", "cli_args", "problem"),
    [
        ("limit=abc", ("--limit", "abc"), "limit"),
        ("limit=-1", ("--limit", "-1"), "limit: must be 0 or more"),
        ("since=soon", ("--since", "soon"), "--since: not a duration"),
        ("kind=created&kind=craeted", ("--kind", "created", "--kind", "craeted"), "'craeted'"),
    ],
)
def test_a_bad_events_query_is_refused_as_the_cli_refuses_it(
    panel: TestClient, workspace: Workspace, query: str, cli_args: tuple[str, ...], problem: str
) -> None:
    response = panel.get(f"/api/events?{query}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert problem in error and "\n" not in error
    cli = workspace.cli("events", "--json", *cli_args)
    assert cli.returncode == 2 and problem in cli.stderr and cli.stdout == ""
    if "kind" in query:
        assert panel.get(f"/events?{query}").status_code == 400


# -- hostile text ----------------------------------------------------------------------------


def test_hostile_skill_text_is_shown_as_text(panel: TestClient, workspace: Workspace) -> None:
    body = (
        f"# Title {HOSTILE}\n\n[click](javascript:alert(3)) [ok](https://example.com/x)"
        " ![pic](http://evil.example/p.png) <a href='javascript:alert(4)'>raw</a>\n"
    )
    write_skill(workspace, "hostile", f"Hostile {HOSTILE}", body)
    page = panel.get("/skills/default/hostile").text
    for raw in ("<script>", "<img", "<svg onload", "<a href='javascript", 'href="javascript'):
        assert raw not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;script&gt;" in page
    assert '<a href="https://example.com/x">ok</a>' in page
    assert "<img" not in page and "image: pic" in page


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("https://example.com", True),
        ("http://example.com", True),
        ("docs/page.md", True),
        ("#section", True),
        ("javascript:alert(1)", False),
        (" JavaScript:alert(1)", False),
        ("data:text/html,x", False),
        ("vbscript:x", False),
        ("file:///etc/passwd", False),
        ("//evil.example/x", False),
        ("http://127.1/", False),
        ("http://2130706433/", False),
        ("http://0/", False),
        ("http://[::ffff:127.0.0.1]/", False),
        ("http://127.0.0.%31/", False),
        ("http://１２７.０.０.１/", False),
        ("http://example.com@127.0.0.1/", False),
        ("http://intranet/", False),
        ("http://printer.local/", False),
        ("http://8.8.8.8/dns", True),
        ("https://github.com/acme/api#readme", True),
    ],
)
def test_only_http_and_relative_links_survive(url: str, safe: bool) -> None:
    assert safe_link(url) is safe
    assert ("href" in markdown(f"[x]({url.strip()})")) is safe


#: Links a learned skill may hold to this machine or its network: another local user's server
#: (a cookie for 127.0.0.1 reaches every port of it), a router, a cloud's metadata service.
LOCAL_LINKS = (
    "http://127.0.0.1:8741/api/status",
    "http://127.0.0.1:9999/",
    "http://localhost:3000/",
    "http://10.0.0.1/admin",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    "http://172.31.255.254/",
    "http://[::1]:8080/",
    "http://169.254.169.254/latest/meta-data/",
    "http://skilld-0123456789abcdef.localhost:8741/",
    "http://evil.localhost/",
)


def test_links_to_this_machine_or_its_network_are_shown_not_live(
    panel: TestClient, workspace: Workspace
) -> None:
    links = [f"[local {n}]({url})" for n, url in enumerate(LOCAL_LINKS)]
    body = "\n\n".join([*links, "<http://127.0.0.1:9999/auto>", "[docs](https://example.com/d)"])
    write_skill(workspace, "links", "Links everywhere.", body + "\n")
    page = panel.get("/skills/default/links").text
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert "https://example.com/d" in hrefs  # a public link stays live
    for url in (*LOCAL_LINKS, "http://127.0.0.1:9999/auto"):
        assert not [href for href in hrefs if urlsplit(url).netloc in href], url
        assert url in page  # shown, as text


# -- the command -----------------------------------------------------------------------------


def start_panel(workspace: Workspace, *args: str, **env: str) -> tuple[subprocess.Popen[str], str]:
    """`skilld web` started; the login URL it printed."""
    process = workspace.popen("web", "--port", "0", *args, **env)
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("skilld web: http://"), process.communicate(timeout=10)
    return process, line.removeprefix("skilld web: ").strip()


def logged_in(login: str) -> httpx.Client:
    """A client that opened the login URL, as a person's browser does."""
    client = browser_like(base_url=login.split("?", 1)[0], timeout=10, follow_redirects=True)
    assert client.get(login).status_code == 200
    assert SESSION_COOKIE in client.cookies
    return client


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_skilld_web_prints_its_address_serves_and_stops_cleanly(
    workspace: Workspace, stop: signal.Signals
) -> None:
    workspace.write_config()
    write_skill(workspace, "deploy", "Deploy the service.", "Ship.\n")
    process, login = start_panel(workspace)
    try:
        token = (workspace.state / "web-token").read_text().strip()
        assert login == f"{login.split('?')[0]}?token={token}"
        name = (workspace.state / "web-name").read_text().strip()
        assert re.fullmatch(r"skilld-[0-9a-f]{16}", name)
        assert re.fullmatch(rf"http://{name}\.localhost:\d+/\?token=[\w-]{{40,}}", login)
        for made in ("web-token", "web-name"):
            assert oct(stat.S_IMODE((workspace.state / made).stat().st_mode)) == "0o600"
        client = logged_in(login)
        url = login.split("?", 1)[0]
        with browser_like(timeout=10) as stranger:
            assert stranger.get(url + "api/skills").status_code == 401
        rows = client.get("api/skills").json()
        assert [row["name"] for row in rows] == ["deploy"]
        assert workspace.cli("web", "--url").stdout == login + "\n"
        with client.stream("GET", "events/live?after=0") as live:
            assert live.headers["content-type"].startswith("text/event-stream")
            lines = live.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first.removeprefix("data: "))["kind"] == "created"
            write_skill(workspace, "triage", "Triage.", "Read the log.\n")
            started = time.monotonic()
            new = next(line for line in lines if line.startswith("data: "))
            assert json.loads(new.removeprefix("data: "))["skill"] == "triage"
            assert time.monotonic() - started < 5
        process.send_signal(stop)
        out, err = process.communicate(timeout=15)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert out == ""  # the one line was read above; nothing else is printed
    gone = workspace.cli("web", "--url")
    assert gone.returncode == 1 and "no panel is running" in gone.stderr


def lan_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (`ip -j addr`, independent of the code
    under test)."""
    try:
        shown = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True)
        interfaces = json.loads(shown.stdout or "[]")
    except (OSError, ValueError):
        return []
    return [
        info["local"]
        for interface in interfaces
        for info in interface.get("addr_info", [])
        if not info["local"].startswith("127.")
    ]


def test_a_non_loopback_bind_needs_a_token_and_answers_to_every_own_address(
    workspace: Workspace,
) -> None:
    workspace.write_config()
    result = workspace.cli("web", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
    assert "token" in result.stderr and "0.0.0.0" in result.stderr
    # A token generated on first use is no configured one: still refused off loopback.
    assert (workspace.state / "web-token").exists()
    assert workspace.cli("web", "--host", "0.0.0.0", "--port", "0").returncode == 2
    # A loopback address no `*.localhost` name reaches cannot hold the panel's session.
    other_loopback = workspace.cli("web", "--host", "127.0.0.2", "--port", "0")
    assert other_loopback.returncode == 2 and "127.0.0.2" in other_loopback.stderr
    assert len(other_loopback.stderr.strip().splitlines()) == 1
    process, login = start_panel(workspace, "--host", "0.0.0.0", SKILLD_WEB_TOKEN=TOKEN)
    try:
        port = urlsplit(login).port
        name = (workspace.state / "web-name").read_text().strip()
        # A browser on this machine opens it by its own name (through a published port too).
        assert login == f"http://{name}.localhost:{port}/?token={TOKEN}"
        assert logged_in(login).get("/api/status").status_code == 200
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/api/status", timeout=10).status_code == 401
        authorised = {"authorization": f"Bearer {TOKEN}"}
        for address in lan_addresses():
            # Addressed by the machine's own LAN address (its hostname maps to loopback).
            status = httpx.get(
                f"http://{address}:{port}/api/status", headers=authorised, timeout=10
            )
            assert status.status_code == 200, address
            # A browser on another machine logs in at that address (the token defends it).
            opened = httpx.get(f"http://{address}:{port}/?token={TOKEN}", timeout=10)
            assert opened.status_code == 303 and SESSION_COOKIE in opened.cookies, address
        foreign = {**authorised, "host": f"evil.example:{port}"}
        assert httpx.get(f"{base}/api/status", headers=foreign, timeout=10).status_code == 421
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=15)
    finally:
        process.kill()
    assert process.returncode == 0


def test_a_wildcard_bind_answers_to_each_interface_address() -> None:
    trie = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.1.0.0/16 2 0 2
        |-- 10.1.0.0
           /16 link UNICAST
        |-- 10.1.2.3
           /32 host LOCAL
        |-- 10.1.255.255
           /32 link BROADCAST
"""
    inet6 = "fd000000000000000000000000000002 04 40 00 82     eth0\n"
    interfaces = [*fib_trie_addresses(trie), *if_inet6_addresses(inet6)]
    assert interfaces == ["10.1.2.3", "fd00::2"]
    wildcard = allowed_hosts(host_names("0.0.0.0", interfaces), 8741)
    assert {"10.1.2.3:8741", "[fd00::2]:8741", "127.0.0.1:8741"} <= wildcard
    assert "10.1.255.255:8741" not in wildcard and "10.1.0.0:8741" not in wildcard
    # Only a wildcard bind answers to other addresses of the machine.
    assert "10.1.2.3:8741" not in allowed_hosts(host_names("127.0.0.1", interfaces), 8741)
    # A session lives under the panel's own name, and off loopback under the machine's other
    # names; never under a loopback one.
    names = host_names("0.0.0.0", interfaces)
    rules = access_rules(names, OWN_NAME, OWN_NAME, 8741, TOKEN, SECRET)
    assert {f"{OWN_NAME}:8741", "10.1.2.3:8741", "[fd00::2]:8741"} <= rules.session_hosts
    assert {"127.0.0.1:8741", "localhost:8741", "[::1]:8741"} <= rules.hosts - rules.session_hosts
    loopback = access_rules(host_names("127.0.0.1"), OWN_NAME, OWN_NAME, 8741, TOKEN, SECRET)
    assert loopback.session_hosts == {f"{OWN_NAME}:8741"}


def test_the_daemon_serves_the_panel_with_web_listen(workspace: Workspace) -> None:
    port = free_port()
    workspace.settings["web"] = {"listen": f"127.0.0.1:{port}"}
    workspace.write_config()
    process = workspace.popen("run")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
        assert response.status_code == 401  # the sidecar needs the token too
        while not workspace.cli("web", "--url").stdout:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.2)
        url = workspace.cli("web", "--url").stdout.strip()
        name = (workspace.state / "web-name").read_text().strip()
        assert url.startswith(f"http://{name}.localhost:{port}/?token=")
        assert logged_in(url).get("/api/status").json()["libraries"]
        process.send_signal(signal.SIGTERM)
        logged = "".join(process.communicate(timeout=20))
    finally:
        process.kill()
    assert process.returncode == 0
    # The log names the URL a browser can log in at, not the loopback address it would be
    # refused on.
    [listening] = [line for line in logged.splitlines() if "panel_listening" in line]
    assert f"http://{name}.localhost:{port}/" in listening


def test_a_bad_listen_value_is_a_config_error(workspace: Workspace) -> None:
    workspace.settings["web"] = {"listen": "localhost"}
    workspace.write_config()
    result = workspace.cli("status")
    assert result.returncode == 2 and "web.listen" in result.stderr


def test_the_token_variable_is_not_a_config_override(workspace: Workspace) -> None:
    workspace.write_config()
    result = workspace.cli("status", SKILLD_WEB_TOKEN="x" * 8)
    assert result.returncode == 0, result.stderr


# -- what the overview and the curator page read ---------------------------------------------


def test_spend_per_day_adds_up_and_keeps_thirty_days() -> None:
    daily: dict[str, dict[str, int]] = {}
    days = [f"2026-11-{day:02d}" for day in range(1, 31)] + ["2026-12-01", "2026-12-02"]
    for day in days:
        spend = {"calls": 1, "prompt_tokens": 100, "completion_tokens": 10}
        daily = add_daily_spend(daily, day, spend)
    daily = add_daily_spend(daily, "2026-12-02", {"calls": 2, "prompt_tokens": 5})
    assert len(daily) == 30 and min(daily) == "2026-11-03"
    assert daily["2026-12-02"] == {"calls": 3, "prompt_tokens": 105, "completion_tokens": 10}


def test_the_overview_shows_libraries_spend_and_kept_proposals(
    panel: TestClient, workspace: Workspace
) -> None:
    today = datetime.now(UTC).date().isoformat()
    with StateDB(workspace.state / "state.db") as state:
        state.set_meta(DAILY_SPEND_KEY, {today: {"calls": 7, "prompt_tokens": 700}})
        kept = state.keep_proposal(
            "default", {"name": "lint"}, session="s1", source="jsonl",
            first_message=0, last_message=4,
        )  # fmt: skip
        state.update_proposal(kept, status="cap", note="50 managed skills: the cap")
    page = panel.get("/").text
    assert "<td>lint</td><td>cap: 50 managed skills: the cap</td>" in page
    assert "7 calls, 700 tokens" in page
    assert '<svg class="chart" role="img"' in page and f"{today}: 7</title>" in page
    library_row = page.split('<td><a href="/skills?library=default">default</a>', 1)[1]
    assert "<td>2</td>" in library_row.split("</tr>", 1)[0]  # two managed skills


def test_the_last_tick_s_outcomes_read_as_words(panel: TestClient, workspace: Workspace) -> None:
    def last_tick(outcomes: dict[str, int]) -> tuple[str, str]:
        with StateDB(workspace.state / "state.db") as state:
            tick = {"started_at": time.time(), "duration_seconds": 1.5, "outcomes": outcomes}
            state.set_meta("last_tick", tick)
        status = workspace.cli("status")
        assert status.returncode == 0, status.stderr
        page = panel.get("/").text.split("<dt>Last tick</dt><dd>", 1)[1].split("</dd>", 1)[0]
        (line,) = (line for line in status.stdout.splitlines() if line.startswith("last tick"))
        return page, line

    page, line = last_tick({"skipped": 1, "created": 3, "invalid": 0})
    assert page.endswith("</time>, 1.5s, outcomes 3 created, 1 skipped")
    assert line.endswith("1.5s, outcomes 3 created, 1 skipped")
    page, line = last_tick({})
    assert page.endswith("1.5s, outcomes none") and line.endswith("outcomes none")


def test_the_curator_page_shows_what_moves_next(panel: TestClient, workspace: Workspace) -> None:
    records = usage(workspace)
    records["triage"]["last_used_at"] = "2020-01-01T00:00:00+00:00"
    records["triage"]["created_at"] = "2020-01-01T00:00:00+00:00"
    (workspace.skills / ".usage.json").write_text(json.dumps(records))
    page = panel.get("/curator").text
    upcoming = page.split('id="next"', 1)[1].split("</section>", 1)[0]
    assert ">triage</a>" in upcoming and "active → archived" in upcoming
    assert ">deploy</a>" not in upcoming
    assert (workspace.skills / "triage" / "SKILL.md").exists()  # a plan, nothing moved


def test_the_token_comes_from_the_variable_or_the_file_or_is_generated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKILLD_WEB_TOKEN", raising=False)
    state = tmp_path / "state"
    with pytest.raises(SkilldError, match="no panel has run here"):
        panel_token(None, state, create=False)
    generated = panel_token(None, state)
    assert not generated.configured and len(generated.token) >= 40
    assert panel_token(None, state) == generated  # kept: a second panel prints the same URL
    assert oct(stat.S_IMODE((state / "web-token").stat().st_mode)) == "0o600"
    file = tmp_path / "token"
    file.write_text(f"{TOKEN}\n")
    file.chmod(0o600)
    assert panel_token(file, state) == (TOKEN, True)
    file.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        panel_token(file, state)
    with pytest.raises(ConfigError, match="cannot read"):
        panel_token(tmp_path / "missing", state)
    monkeypatch.setenv("SKILLD_WEB_TOKEN", "from-env")
    assert panel_token(tmp_path / "missing", state) == ("from-env", True)


@pytest.mark.parametrize("where", ["token_file", "generated"])
def test_a_token_file_other_users_may_read_is_refused(workspace: Workspace, where: str) -> None:
    file = workspace.root / "web-token" if where == "token_file" else workspace.state / "web-token"
    file.parent.mkdir(exist_ok=True)
    file.write_text(f"{TOKEN}\n")
    file.chmod(0o640)
    if where == "token_file":
        workspace.settings["web"] = {"token_file": str(file)}
    workspace.write_config()
    result = workspace.cli("web", "--port", "0", timeout=30)
    assert result.returncode == 2 and result.stdout == ""
    assert "may be read by other users (mode 0640)" in result.stderr and str(file) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "mode", "said"),
    [
        ("not a name!\n", 0o600, "does not hold a host name label"),
        ("\n", 0o600, "is empty"),
        ("skilld-0123456789abcdef\n", 0o644, "may be read by other users (mode 0644)"),
    ],
    ids=["not a label", "empty", "readable"],
)
def test_a_bad_name_file_is_refused_in_one_line(
    workspace: Workspace, text: str, mode: int, said: str
) -> None:
    workspace.write_config()
    name_file = workspace.state / "web-name"
    name_file.parent.mkdir(parents=True, exist_ok=True)
    name_file.write_text(text)
    name_file.chmod(mode)
    result = workspace.cli("web", "--port", "0", timeout=30)
    assert result.returncode == 2 and result.stdout == ""
    assert said in result.stderr and str(name_file) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert name_file.read_text() == text  # nothing replaced behind the person's back


def test_a_tick_records_its_calls_and_tokens_for_the_day(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()
    workspace.add_session("s1", conversation())
    fake_llm.queue.append(skill_reply("run-tests"))
    result = workspace.cli("once")
    assert result.returncode == 0, result.stderr
    with StateDB(workspace.state / "state.db") as state:
        daily = state.get_meta(DAILY_SPEND_KEY)
    today = datetime.now(UTC).date().isoformat()
    assert daily == {today: {"calls": 1, "prompt_tokens": 100, "completion_tokens": 50}}


@pytest.mark.parametrize("listen", ["0.0.0.0", "in use"])
def test_a_daemon_that_cannot_serve_its_panel_stops_at_start(
    workspace: Workspace, listen: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        address = f"0.0.0.0:{free_port()}" if listen == "0.0.0.0" else f"127.0.0.1:{port}"
        workspace.settings["web"] = {"listen": address}
        workspace.write_config()
        result = workspace.cli("run", timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("skilld: config error: web.listen: cannot serve the panel")
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_archived_skill_is_never_read_through_a_link(
    panel: TestClient, workspace: Workspace
) -> None:
    secret = workspace.root / "secret.txt"
    secret.write_text("the-secret-value")
    planted = workspace.skills / ".archive" / "planted"
    planted.mkdir(parents=True)
    (planted / "SKILL.md").symlink_to(secret)
    response = panel.get("/skills/default/planted")
    assert response.status_code == 409 and "symbolic link" in response.text
    assert "the-secret-value" not in response.text
