"""`skilld doctor` and `skilld config` against real files and a real loopback LLM server.

The exit codes people and scripts rely on are checked through a real `skilld` process; the
other cases call the same command line in-process (`cli.main`), which keeps the file fast.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

from skilld import cli
from skilld.commands._doctor import toml_value
from skilld.config import build_config, load_config
from tests.campaigns.harness import shared_tmp_dir, unprivileged
from tests.conftest import Workspace
from tests.fakellm import FakeLLM, Reply
from tests.loopback import free_port

TEST_KEY = "sk-test-0000"  # what Workspace.env() puts in $SKILLD_TEST_KEY


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


Run = Callable[..., Outcome]


@pytest.fixture
def run_cli(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Run]:
    """`skilld ARGS` in this process, with the environment a Workspace subprocess gets."""
    logging_config = structlog.get_config()

    def run(*args: str, **env: str) -> Outcome:
        if not workspace.config_path.exists():
            workspace.write_config()
        for name in [name for name in os.environ if name.startswith("SKILLD_")]:
            monkeypatch.delenv(name)
        for name, value in {**workspace.env(**env)}.items():
            if name.startswith("SKILLD_") or name in env:
                monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    yield run
    structlog.configure(**logging_config)  # main() pointed the logs at a captured stream


def doctor(run: Run, *args: str, **env: str) -> Outcome:
    result = run("doctor", "--timeout", "5", *args, **env)
    assert TEST_KEY not in result.stdout + result.stderr
    return result


def doctor_process(workspace: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    result = workspace.cli("doctor", "--timeout", "5", *args)
    assert TEST_KEY not in result.stdout + result.stderr
    return result


def lines(result: Outcome | subprocess.CompletedProcess[str], check: str) -> list[str]:
    """The output lines of one check, e.g. "llm", as "<status> <detail>"."""
    found = []
    for line in result.stdout.splitlines():
        status, name, detail = line.split(maxsplit=2)
        assert status in ("ok", "warn", "fail"), line
        if name == check:
            found.append(f"{status} {detail}")
    return found


@pytest.fixture
def healthy(workspace: Workspace) -> Workspace:
    """An installation whose files are all in order (its LLM URL leads nowhere)."""
    workspace.add_session("s1", [{"role": "user", "content": "hello"}])
    workspace.write_config()
    return workspace


@pytest.fixture
def served(healthy: Workspace, fake_llm: FakeLLM) -> Workspace:
    """The same installation, with a live LLM server."""
    healthy.llm_url = fake_llm.base_url
    healthy.write_config()
    return healthy


# -- doctor ----------------------------------------------------------------------------------


def test_good_installation_passes(served: Workspace, fake_llm: FakeLLM) -> None:
    result = doctor_process(served)
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result, "config") == [f"ok {served.config_path}"]
    assert lines(result, "source") == [f"ok jsonl {served.sessions}: readable, 1 session file"]
    assert lines(result, "library") == [f"ok default {served.skills} (dsh): writable, flock works"]
    assert lines(result, "state")[0].startswith(f"ok {served.state / 'state.db'} opens")
    assert lines(result, "llm") == [
        "ok $SKILLD_TEST_KEY is set",
        f"ok {fake_llm.base_url} answered a 1-token request with model 'test-model'",
    ]
    (request,) = fake_llm.requests
    assert request["max_tokens"] == 1
    assert request["model"] == "test-model"
    assert "response_format" not in request
    # The probes leave nothing behind in the skills or state directories.
    assert list(served.skills.iterdir()) == []
    assert sorted(p.name for p in served.state.iterdir() if "state.db" not in p.name) == []


def test_unreachable_llm_fails(workspace: Workspace) -> None:
    workspace.llm_url = f"http://127.0.0.1:{free_port()}/v1"
    result = doctor_process(workspace)
    assert result.returncode == 1
    (endpoint,) = [line for line in lines(result, "llm") if "$SKILLD_TEST_KEY" not in line]
    assert endpoint.startswith("fail unreachable: http://127.0.0.1:")
    assert "1 check failed" in result.stderr


def test_rejected_credentials_fail_as_auth(served: Workspace, fake_llm: FakeLLM) -> None:
    # Servers echo the key they refused; doctor must not print it.
    message = f"Incorrect API key provided: {TEST_KEY}"
    fake_llm.default = Reply(status=401, body={"error": {"message": message}})
    result = doctor_process(served)
    assert result.returncode == 1
    endpoint = lines(result, "llm")[-1]
    assert endpoint.startswith("fail auth failed (HTTP 401)")
    assert "check $SKILLD_TEST_KEY (is set)" in endpoint
    assert len(fake_llm.requests) == 1  # no retry for a probe


def test_missing_key_is_a_warning_and_named_when_auth_fails(
    served: Workspace, fake_llm: FakeLLM, run_cli: Run
) -> None:
    fake_llm.default = Reply(status=401, body={"error": {"message": "no key"}})
    result = doctor(run_cli, SKILLD_TEST_KEY="")
    assert result.returncode == 1
    key, endpoint = lines(result, "llm")
    assert key.startswith("warn $SKILLD_TEST_KEY is not set")
    assert "(is NOT set)" in endpoint


def test_unknown_model_fails_as_model_not_found(
    served: Workspace, fake_llm: FakeLLM, run_cli: Run
) -> None:
    body = {
        "error": {"message": "The model `test-model` does not exist", "code": "model_not_found"}
    }
    fake_llm.default = Reply(status=404, body=body)
    result = doctor(run_cli)
    assert result.returncode == 1
    assert lines(result, "llm")[-1].startswith("fail model not found (HTTP 404): 'test-model'")


def test_wrong_endpoint_path_suggests_the_base_url(
    served: Workspace, fake_llm: FakeLLM, run_cli: Run
) -> None:
    fake_llm.default = Reply(
        status=404, body="404 page not found", headers={"Content-Type": "text/plain"}
    )
    result = doctor(run_cli)
    assert result.returncode == 1
    assert "does base_url need a /v1?" in lines(result, "llm")[-1]


def test_rate_limit_is_only_a_warning(served: Workspace, fake_llm: FakeLLM, run_cli: Run) -> None:
    fake_llm.default = Reply(status=429, body={"error": {"message": "slow down"}})
    result = doctor(run_cli)
    assert result.returncode == 0, result.stdout
    assert lines(result, "llm")[-1].startswith("warn reachable but rate limited")


def test_base_url_that_is_not_http_fails(workspace: Workspace, run_cli: Run) -> None:
    workspace.llm_url = "ftp://127.0.0.1/v1"
    result = doctor(run_cli)
    assert result.returncode == 1
    assert lines(result, "llm")[-1].startswith("fail llm.base_url:")


def test_no_llm_skips_the_request(served: Workspace, fake_llm: FakeLLM, run_cli: Run) -> None:
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 0
    assert fake_llm.requests == []
    assert lines(result, "llm") == ["ok $SKILLD_TEST_KEY is set"]


def test_skills_path_that_is_a_file_fails(healthy: Workspace) -> None:
    # Root ignores permission bits, so a regular file where the directory should be is the
    # unwritable skills dir that holds for every user.
    healthy.skills.rmdir()
    healthy.skills.write_text("not a directory")
    result = doctor_process(healthy, "--no-llm")
    assert result.returncode == 1
    assert lines(result, "library") == [
        f"fail default {healthy.skills} (dsh): exists but is not a directory"
    ]


def test_read_only_skills_dir_fails() -> None:
    """Through a process of an unprivileged user: root writes through permission bits."""
    user = unprivileged()
    with shared_tmp_dir() as base:
        workspace = Workspace(base)
        workspace.skills.mkdir()
        workspace.add_session("s1", [{"role": "user", "content": "hello"}])
        workspace.write_config()
        user.own(base)

        def doctor_as_user() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                user.skilld("doctor", "--timeout", "5", "--no-llm"),
                env=workspace.env(HOME=str(base)),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        writable = doctor_as_user()
        workspace.skills.chmod(0o500)
        read_only = doctor_as_user()
    assert lines(writable, "library")[0].startswith(f"ok default {workspace.skills} (dsh)")
    assert read_only.returncode == 1
    assert lines(read_only, "library")[0].startswith(
        f"fail default {workspace.skills} (dsh): not writable: Permission denied"
    )


def test_skills_dir_is_created_when_missing(healthy: Workspace, run_cli: Run) -> None:
    healthy.skills.rmdir()
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 0, result.stdout
    assert healthy.skills.is_dir()


def test_corrupt_usage_sidecar_is_a_warning(healthy: Workspace, run_cli: Run) -> None:
    (healthy.skills / ".usage.json").write_text("{not json")
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 0
    assert lines(result, "library")[1].startswith("warn ")
    assert "corrupt" in lines(result, "library")[1]


def test_state_dir_that_is_a_file_fails(healthy: Workspace, run_cli: Run) -> None:
    healthy.state.write_text("not a directory")
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 1
    assert lines(result, "state") == [f"fail {healthy.state}: exists but is not a directory"]


def test_state_db_that_is_not_a_database_fails(healthy: Workspace, run_cli: Run) -> None:
    healthy.state.mkdir()
    (healthy.state / "state.db").write_bytes(b"garbage, not SQLite " * 100)
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 1
    assert lines(result, "state")[0].startswith("fail ")


def test_missing_source_is_a_warning(healthy: Workspace, run_cli: Run) -> None:
    healthy.sources = [{"kind": "jsonl", "path": str(healthy.root / "nowhere")}]
    healthy.write_config()
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 0
    assert lines(result, "source")[0].startswith("warn jsonl")
    assert "does not exist yet" in lines(result, "source")[0]


def test_hermes_source_that_is_not_a_database_fails(healthy: Workspace, run_cli: Run) -> None:
    broken = healthy.root / "state.db"
    broken.write_text("plain text")
    healthy.sources = [{"kind": "hermes", "path": str(broken)}]
    healthy.write_config()
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 1
    assert "not a readable SQLite database" in lines(result, "source")[0]


def test_hermes_database_is_checked_read_only(healthy: Workspace, run_cli: Run) -> None:
    database = healthy.root / "hermes.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT)")
    before = database.stat().st_mtime_ns
    healthy.sources = [{"kind": "hermes", "path": str(database)}]
    healthy.write_config()
    result = doctor(run_cli, "--no-llm")
    assert result.returncode == 0, result.stdout
    assert "readable SQLite database with a messages table" in lines(result, "source")[0]
    assert database.stat().st_mtime_ns == before


def test_bad_config_is_exit_2_before_any_check(workspace: Workspace, run_cli: Run) -> None:
    workspace.config_path.write_text("[evolve]\ninterval_seconds = -1\n")
    result = run_cli("doctor")
    assert result.returncode == 2
    assert "evolve.interval_seconds" in result.stderr
    assert result.stdout == ""


# -- config ----------------------------------------------------------------------------------


def config_lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """ "key = value" -> its origin comment, for the lines that carry one."""
    found = {}
    for line in result.stdout.splitlines():
        if line.startswith("#") or "  # " not in line:
            continue
        assignment, _, comment = line.partition("  # ")
        found[assignment] = comment
    return found


def test_config_shows_origins_and_masks_the_key(workspace: Workspace) -> None:
    workspace.llm_url = "http://127.0.0.1:9/v1"
    result = workspace.cli("config", SKILLD_LLM_MODEL="env-model")
    assert result.returncode == 0, result.stderr
    assert TEST_KEY not in result.stdout + result.stderr
    shown = config_lines(result)
    assert shown['model = "env-model"'] == "env: SKILLD_LLM_MODEL"
    assert shown['base_url = "http://127.0.0.1:9/v1"'] == "file"
    assert shown['layout = "dir"'] == "default"
    assert shown[f"dir = {toml_value(str(workspace.skills))}"] == "file"
    assert shown['api_key_env = "SKILLD_TEST_KEY"'] == (
        "file; $SKILLD_TEST_KEY is set (its value is never shown)"
    )
    assert shown['kind = "jsonl"'] == "file"
    assert f"# config file: {workspace.config_path}" in result.stdout


def test_config_hides_credentials_in_the_base_url(run_cli: Run) -> None:
    url = "http://bob:hunter2-Zq8xVb3n@127.0.0.1:9/v1?api-key=abc123def456&region=eu"
    result = run_cli("config", SKILLD_LLM_BASE_URL=url)
    assert result.returncode == 0, result.stderr
    assert "hunter2-Zq8xVb3n" not in result.stdout
    assert "abc123def456" not in result.stdout
    assert "region=eu" in result.stdout
    assert "http://****:****@127.0.0.1:9/v1" in result.stdout  # the user name may be a token


def test_config_output_loads_back_to_the_same_configuration(
    workspace: Workspace, run_cli: Run
) -> None:
    workspace.settings = {
        "skills": {"extra_dirs": [str(workspace.root / "extra")], "name_prefix": 'my "team"'},
        "evolve": {"publish": "review", "backfill": "7d"},
        "curator": {"stale_after_days": 12.5, "archive_after_days": 40},
    }
    workspace.sources = [
        {"kind": "jsonl", "path": str(workspace.sessions), "glob": "*.jsonl"},
        {"kind": "claude-code", "include_subagents": True},
    ]
    workspace.write_config()
    result = run_cli("config")
    assert result.returncode == 0, result.stderr
    printed = build_config(tomllib.loads(result.stdout), environ={})
    original = load_config(workspace.config_path, environ={})
    for section in ("skills", "state", "evolve", "llm", "curator", "log", "sources"):
        assert getattr(printed, section) == getattr(original, section), section
    assert "# path not set: " in result.stdout  # the claude-code source's default location


def test_config_without_sources_lists_the_defaults_it_would_read(
    tmp_path: Path, run_cli: Run
) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    config = tmp_path / "no-sources.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
    result = run_cli(
        "--config", str(config), "config", HOME=str(home), DSH_HOME=str(tmp_path / "no-dsh")
    )
    assert result.returncode == 0, result.stderr
    assert "# no [[sources]] configured: the daemon reads these default locations" in (
        result.stdout
    )
    assert '# kind = "claude-code"' in result.stdout
    assert f"# path = {toml_value(str(home / '.claude' / 'projects'))}" in result.stdout
