"""What skilld keeps stays its owner's: a token in a team remote's URL is never printed or
stored, and the state dir is readable by its owner only."""

from __future__ import annotations

import os
import random
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from skilld.masking import mask_urls, masked_url
from skilld.state import StateDB
from tests.conftest import Workspace, conversation, git
from tests.fakellm import FakeLLM, Reply, skill_reply
from tests.loopback import browser_like, free_port
from tests.test_redact import FACTORIES

#: A token used as the URL's user name, and one in a query (neither has a shape redaction knows).
USER_TOKEN = "Zq8vN3pL0wT6yR2uK1"
QUERY_TOKEN = "Qm4hX7sEcretVal"
#: The URL a person set on the work tree by hand, with its own token in a password.
OTHER_TOKEN = "Wn5bQ2rT8yU1iO4p"
WEB_TOKEN = "panel-token-for-the-test"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://x-access-token:Abc123@h/acme/s.git", "https://****:****@h/acme/s.git"),
        (f"https://{USER_TOKEN}@h/s.git", "https://****@h/s.git"),
        ("ssh://git@h/s.git", "ssh://git@h/s.git"),
        ("https://h/s?tok=1&x=2&Signature=3&access_token=4", "https://h/s?tok=****&x=2&Signature=****&access_token=****"),
        ("https://h/s?passwd=1#key=2", "https://h/s?passwd=****#key=****"),
        ("https://u:p@[::1/s", "https://****@[::1/s"),
    ],
)  # fmt: skip
def test_a_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert masked_url(url) == shown
    assert mask_urls(f"fatal: unable to access '{url}': refused") == (
        f"fatal: unable to access '{shown}': refused"
    )


def test_a_token_in_a_team_remote_is_never_printed_or_stored(workspace: Workspace) -> None:
    remote = f"https://{USER_TOKEN}@127.0.0.1:{free_port()}/acme/skills.git?tok={QUERY_TOKEN}"
    workspace.libraries = [{"name": "team", "dir": str(workspace.skills), "remote": remote}]
    workspace.write_config()
    said = []
    sync = workspace.cli("sync")
    assert sync.returncode == 1 and "fetch failed" in sync.stderr  # git's error, masked
    said.append(sync.stdout + sync.stderr)
    # A work tree pointed elsewhere by hand: the health check words both URLs.
    other = f"https://me:{OTHER_TOKEN}@127.0.0.1:9/other.git?sig={OTHER_TOKEN}"
    git(workspace.skills, "remote", "set-url", "origin", other)
    for command in (["status"], ["status", "--json"], ["doctor"], ["config"], ["events"]):
        result = workspace.cli(*command)
        said.append(result.stdout + result.stderr)
    joined = "\n".join(said)
    assert "syncs with https://****:****@127.0.0.1:9/other.git?sig=****" in joined
    assert "tok=****" in joined and "https://****@127.0.0.1" in joined
    process = workspace.popen("web", "--port", "0", SKILLD_WEB_TOKEN=WEB_TOKEN)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().removeprefix("skilld web: ").strip()
        origin = url.split("/?", 1)[0].rstrip("/")
        bearer = {"authorization": f"Bearer {WEB_TOKEN}"}
        with browser_like(timeout=10) as client:
            for path in ("/api/status", "/api/events", "/events", "/"):
                answer = client.get(origin + path, headers=bearer)
                assert answer.status_code == 200
                said.append(answer.text)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=15)
    finally:
        process.kill()
    stored = [path.read_bytes() for path in workspace.state.rglob("*") if path.is_file()]
    for secret in (USER_TOKEN, QUERY_TOKEN, OTHER_TOKEN):
        assert secret not in "\n".join(said)
        assert not any(secret.encode() in data for data in stored), secret


# -- the state dir is its owner's -------------------------------------------------------------


def modes(state: Path) -> dict[str, str]:
    """Each path under the state dir with its permission bits, e.g. {"state.db": "0o600"}."""
    found = {".": oct(stat.S_IMODE(state.stat().st_mode))}
    for path in state.rglob("*"):
        if not path.is_symlink():
            found[str(path.relative_to(state))] = oct(stat.S_IMODE(path.stat().st_mode))
    return found


def private(found: dict[str, str]) -> bool:
    return all(mode in ("0o700", "0o600") for mode in found.values())


def cli_with_umask(workspace: Workspace, *args: str) -> None:
    """`skilld ARGS` started with a umask that lets everyone read what it creates."""
    previous = os.umask(0)
    try:
        result = workspace.cli(*args)
    finally:
        os.umask(previous)
    assert result.returncode == 0, result.stderr


def echo_window(request: dict[str, Any]) -> Reply:
    """A model that learns the window it was sent, word for word."""
    return skill_reply("echoed-window", content=request["messages"][-1]["content"])


@pytest.mark.parametrize("publish", ["auto", "review"])
def test_no_planted_secret_reaches_a_file_of_the_state_dir(
    workspace: Workspace, fake_llm: FakeLLM, publish: str
) -> None:
    planted = [factory(random.Random(label)) for label, factory in FACTORIES.items()]
    messages = conversation()
    messages[0]["content"] += "\n" + "\n".join(secret.text for secret in planted)
    messages[2]["content"] += "\n" + "\n".join(secret.text for secret in planted)
    workspace.add_session("leaky", messages)
    workspace.llm_url = fake_llm.base_url
    workspace.settings["evolve"] = {"publish": publish}
    workspace.write_config()
    fake_llm.responder = echo_window
    cli_with_umask(workspace, "once")
    stored = [path.read_bytes() for path in workspace.state.rglob("*") if path.is_file()]
    for secret in planted:
        assert secret.secret.encode() not in b"".join(stored), secret.kind
    # The control: the window did reach the model and come back into what skilld keeps.
    kind = "created" if publish == "auto" else "staged"
    assert [event["skill"] for event in workspace.events(kind)] == ["echoed-window"]
    kept = workspace.state / "pending" if publish == "review" else workspace.skills
    assert any(b"[REDACTED:" in path.read_bytes() for path in kept.rglob("*") if path.is_file())
    assert private(modes(workspace.state)), modes(workspace.state)


def test_an_open_state_dir_is_repaired_at_start_with_an_event(workspace: Workspace) -> None:
    workspace.write_config()
    workspace.cli_here("skills", "write", "deploy", "--description", "Ship.", "--content", "A")
    workspace.cli_here("skills", "write", "deploy", "--description", "Ship.", "--content", "B")
    for path in [workspace.state, *workspace.state.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert not private(modes(workspace.state))
    cli_with_umask(workspace, "once")
    assert private(modes(workspace.state)), modes(workspace.state)
    [event] = workspace.events("permissions_repaired")
    assert {".", "state.db", "history", "locks"} <= set(event["detail"]["paths"])
    cli_with_umask(workspace, "once")
    assert len(workspace.events("permissions_repaired")) == 1  # nothing left to repair


def test_the_database_s_wal_and_shm_are_private_from_the_start(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        with StateDB(tmp_path / "state" / "state.db") as state:
            state.add_event("warning", reason="a write, so that the WAL exists")
            found = modes(tmp_path / "state")
    finally:
        os.umask(previous)
    assert {"state.db", "state.db-wal", "state.db-shm"} <= set(found)
    assert private(found), found
