"""A team remote's credentials: skilld gives them to git at run time, never to a file. The remote
is a real git server over HTTP that wants a password (tests/githttp.py), driven through the
real CLI; the library's `.git` is its owner's, and `status`, `config` and the panel mask the
URL's user info however short or plain the token in it."""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Workspace
from tests.githttp import AuthGitServer
from tests.loopback import browser_like, free_port
from tests.synchosts import Person, bare_remote, plain_git, remote_subjects, skill_text

#: Tokens of letters and `._-` only, at most 32 characters: no shape redaction knows.
TOKEN = "Tk.plainLetters-only_token"
LONE_TOKEN = "loneToken.of-letters_only"
WEB_TOKEN = "panel-token-for-the-test"


@pytest.fixture
def remotes(tmp_path: Path) -> Path:
    root = tmp_path / "remotes"
    root.mkdir()
    bare_remote(root / "team.git")
    return root


@pytest.fixture(params=["password", "lone-token"])
def server(request: pytest.FixtureRequest, remotes: Path) -> Iterator[tuple[AuthGitServer, str]]:
    """The server, and the user info of a URL it accepts: `user:token`, or a lone token (git
    sends it as the user name, with an empty password)."""
    if request.param == "password":
        username, password, userinfo = "teammate", TOKEN, f"teammate:{TOKEN}"
    else:
        username, password, userinfo = LONE_TOKEN, "", LONE_TOKEN
    with AuthGitServer(remotes, username, password) as running:
        yield running, userinfo


def use_remote(workspace: Workspace, remote: str) -> None:
    workspace.libraries = [{"name": "team", "dir": str(workspace.skills), "remote": remote}]
    workspace.write_config()


def sync_with_umask_0(workspace: Workspace) -> tuple[int, str]:
    """`skilld sync` started with a umask that lets everyone read what it creates."""
    previous = os.umask(0)
    try:
        result = workspace.cli("sync", timeout=60)
    finally:
        os.umask(previous)
    return result.returncode, result.stdout + result.stderr


def files_holding(root: Path, secret: str) -> list[str]:
    return [
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()
    ]


def stored_url(workspace: Workspace) -> str:
    """The URL the library's `.git/config` names its remote by."""
    return plain_git("config", "--get", "remote.origin.url", cwd=workspace.skills).stdout.strip()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def secret_of(userinfo: str) -> str:
    return userinfo.rpartition(":")[2]


def test_a_token_bearing_https_remote_syncs_and_the_token_is_in_no_file_of_the_git_dir(
    workspace: Workspace, remotes: Path, server: tuple[AuthGitServer, str], tmp_path: Path
) -> None:
    running, userinfo = server
    use_remote(workspace, running.url("team.git", userinfo))
    code, said = sync_with_umask_0(workspace)
    # The control: the round went through the server's authentication, both ways.
    assert code == 0, said
    assert remote_subjects(remotes / "team.git")
    assert any(given for given in running.authorizations)
    person = Person(tmp_path, remotes / "team.git")
    person.edit("from-person/SKILL.md", skill_text("from-person", "pulled through auth"))
    code, said = sync_with_umask_0(workspace)
    assert code == 0, said
    assert (workspace.skills / "from-person" / "SKILL.md").is_file()

    git_dir = workspace.skills / ".git"
    assert files_holding(git_dir, secret_of(userinfo)) == []
    assert stored_url(workspace) == running.url("team.git")
    assert (oct(mode(git_dir)), oct(mode(git_dir / "config"))) == ("0o700", "0o600")
    assert secret_of(userinfo) not in said


def test_a_wrong_token_fails_at_once_with_a_clear_error_and_never_prompts(
    workspace: Workspace, server: tuple[AuthGitServer, str]
) -> None:
    running, userinfo = server
    wrong = userinfo[:-3] + "zzz"
    use_remote(workspace, running.url("team.git", wrong))
    started = time.monotonic()
    result = workspace.cli("sync", timeout=30)
    assert result.returncode == 1
    assert "fetch failed: Authentication failed for 'http://127.0.0.1:" in result.stderr
    assert time.monotonic() - started < 15
    assert secret_of(wrong) not in result.stdout + result.stderr
    assert files_holding(workspace.skills / ".git", secret_of(wrong)) == []
    # The control: git offered the (wrong) credentials, once refused it asked nothing more.
    offered = [given for given in running.authorizations if given]
    assert len(offered) == 1, running.authorizations


def test_a_library_whose_git_config_holds_the_token_is_cleaned_by_the_next_sync(
    workspace: Workspace, server: tuple[AuthGitServer, str]
) -> None:
    running, userinfo = server
    token_url = running.url("team.git", userinfo)
    use_remote(workspace, token_url)
    assert sync_with_umask_0(workspace)[0] == 0
    # What an older skilld left: the URL with its token, in a config everyone may read.
    git_dir = workspace.skills / ".git"
    plain_git("config", "remote.origin.url", token_url, cwd=workspace.skills)
    git_dir.chmod(0o755)
    (git_dir / "config").chmod(0o644)
    status = workspace.cli("status", "--check")
    assert "syncs with" not in status.stdout + status.stderr  # not taken for another remote

    code, said = sync_with_umask_0(workspace)
    assert code == 0, said
    assert files_holding(git_dir, secret_of(userinfo)) == []
    assert stored_url(workspace) == running.url("team.git")
    assert (oct(mode(git_dir)), oct(mode(git_dir / "config"))) == ("0o700", "0o600")


def test_credentials_a_person_put_in_the_git_config_are_kept_when_the_config_has_none(
    workspace: Workspace, remotes: Path
) -> None:
    with AuthGitServer(remotes, "teammate", TOKEN) as running:
        use_remote(workspace, running.url("team.git"))
        result = workspace.cli("sync", timeout=30)
        assert result.returncode == 1 and "could not read Username" in result.stderr
        by_hand = running.url("team.git", f"teammate:{TOKEN}")
        plain_git("remote", "set-url", "origin", by_hand, cwd=workspace.skills)
        result = workspace.cli("sync", timeout=30)
        assert result.returncode == 0, result.stderr
        assert stored_url(workspace) == by_hand


@pytest.mark.parametrize(
    ("userinfo", "shown"),
    [("abcDEF.ghi-jkl_mn", "****"), ("deploy:pass.word-x", "****:****")],
)
def test_status_config_and_the_panel_mask_a_short_plain_token(
    workspace: Workspace, userinfo: str, shown: str
) -> None:
    port = free_port()
    use_remote(workspace, f"https://{userinfo}@127.0.0.1:{port}/acme/skills.git")
    masked = f"https://{shown}@127.0.0.1:{port}/acme/skills.git"
    said = {}
    for command in (["status"], ["status", "--json"], ["config"]):
        result = workspace.cli(*command)
        assert result.returncode == 0, result.stderr
        said[" ".join(command)] = result.stdout
    process = workspace.popen("web", "--port", "0", SKILLD_WEB_TOKEN=WEB_TOKEN)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().removeprefix("skilld web: ").strip()
        origin = url.split("/?", 1)[0].rstrip("/")
        bearer = {"authorization": f"Bearer {WEB_TOKEN}"}
        with browser_like(headers=bearer, timeout=10) as panel:
            for path in ("/api/status", "/"):
                answer = panel.get(origin + path)
                assert answer.status_code == 200
                said[path] = answer.text
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=15)
    finally:
        process.kill()
    for where, text in said.items():
        assert masked in text, where
        assert secret_of(userinfo) not in text, where


def test_credentials_git_cannot_carry_are_a_config_error_that_names_no_token(
    workspace: Workspace,
) -> None:
    use_remote(workspace, "https://deploy:Tk%0Aplain@127.0.0.1:9/acme/skills.git")
    result = workspace.cli("sync")
    assert result.returncode == 2, result.stderr
    assert "a control character in its user info" in result.stderr
    assert "Traceback" not in result.stderr and "Tk" not in result.stdout + result.stderr
