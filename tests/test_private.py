"""What skilld keeps stays its owner's: a token in a team remote's URL is never printed or
stored, and the state dir is readable by its owner only."""

from __future__ import annotations

import signal
import socket

import httpx
import pytest

from skilld.masking import mask_urls, masked_url
from tests.conftest import Workspace, git

#: A token used as the URL's user name, and one in a query (neither has a shape redaction knows).
USER_TOKEN = "Zq8vN3pL0wT6yR2uK1"
QUERY_TOKEN = "Qm4hX7sEcretVal"
#: The URL a person set on the work tree by hand, with its own token in a password.
OTHER_TOKEN = "Wn5bQ2rT8yU1iO4p"
WEB_TOKEN = "panel-token-for-the-test"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://x-access-token:Abc123@h/acme/s.git", "https://x-access-token:****@h/acme/s.git"),
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
    remote = f"https://{USER_TOKEN}@127.0.0.1:{closed_port()}/acme/skills.git?tok={QUERY_TOKEN}"
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
    assert "syncs with https://me:****@127.0.0.1:9/other.git?sig=****" in joined
    assert "tok=****" in joined and "https://****@127.0.0.1" in joined
    process = workspace.popen("web", "--port", "0", SKILLD_WEB_TOKEN=WEB_TOKEN)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().removeprefix("skilld web: ").strip()
        origin = url.split("/?", 1)[0].rstrip("/")
        bearer = {"authorization": f"Bearer {WEB_TOKEN}"}
        for path in ("/api/status", "/api/events", "/events", "/"):
            answer = httpx.get(origin + path, headers=bearer, timeout=10)
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
