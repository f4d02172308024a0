"""What ships for running skilld for real: systemd units, the container, and the examples.

The units are checked by `systemd-analyze verify` where it is installed and by their
directives everywhere; the Dockerfile and compose file (no docker engine here) by reading them;
the examples by running `skilld once` on them against a real loopback LLM server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Workspace
from tests.fakellm import FakeLLM

REPO = Path(__file__).resolve().parent.parent
SYSTEMD = REPO / "deploy" / "systemd"
USER_UNIT = SYSTEMD / "skilld.service"
SYSTEM_UNIT = SYSTEMD / "skilld-system.service"
DOCKER = REPO / "deploy" / "docker"
EXAMPLES = REPO / "examples"
#: Text only the example session of each source format contains.
EXAMPLE_MARKERS = {
    "jsonl": "test_monthly_report",
    "claude-code": "invoice_status",
    "codex": "npm ci",
    "dsh": "twine check",
    "hermes": "proxy_read_timeout",
}
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


# -- systemd ---------------------------------------------------------------------------------


def unit_directives(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value assigned to it (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path}: directive outside a section: {line}"
        key, separator, value = line.partition("=")
        assert separator, f"{path}: not a directive: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def only(service: dict[str, list[str]], key: str) -> str:
    values = service.get(key, [])
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


@pytest.mark.parametrize("unit", [USER_UNIT, SYSTEM_UNIT], ids=lambda p: p.name)
def test_unit_runs_skilld_as_a_hardened_notify_service(unit: Path) -> None:
    service = unit_directives(unit)["Service"]
    assert only(service, "Type") == "notify"
    assert only(service, "NotifyAccess") == "main"
    assert only(service, "Restart") == "on-failure"
    assert re.fullmatch(r"\d+(s|min)", only(service, "WatchdogSec"))
    assert only(service, "ExecStart").endswith("/bin/skilld run")
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "read-only",
        "PrivateTmp": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "StateDirectory": "skilld",
    }.items():
        assert only(service, key) == value, key
    assert any(path.endswith("skills") for path in service["ReadWritePaths"])
    assert "AF_UNIX" in only(service, "RestrictAddressFamilies")  # sd_notify needs it


def test_user_unit_installs_from_a_venv_in_home() -> None:
    sections = unit_directives(USER_UNIT)
    assert only(sections["Service"], "ExecStart") == ("%h/.local/share/skilld/venv/bin/skilld run")
    assert "User" not in sections["Service"]
    assert only(sections["Install"], "WantedBy") == "default.target"


def test_system_unit_runs_as_a_dedicated_user() -> None:
    sections = unit_directives(SYSTEM_UNIT)
    assert only(sections["Service"], "User") == "skilld"
    assert only(sections["Service"], "Group") == "skilld"
    assert only(sections["Service"], "CapabilityBoundingSet") == ""
    assert only(sections["Install"], "WantedBy") == "multi-user.target"


def systemd_analyze() -> str:
    binary = shutil.which("systemd-analyze")
    if binary is None:
        print("systemd-analyze is not installed: skipping `systemd-analyze verify`")
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    return binary


def assert_verified(result: subprocess.CompletedProcess[str], unit_name: str) -> None:
    # Unknown keys and bad values are warnings with exit code 0: they name the file.
    problems = [line for line in result.stderr.splitlines() if unit_name in line]
    assert result.returncode == 0, result.stderr
    assert problems == [], problems


def test_user_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    binary = systemd_analyze()
    # Installed the documented way: a venv under ~/.local/share/skilld.
    home = tmp_path / "home"
    venv_bin = home / ".local" / "share" / "skilld" / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "skilld").symlink_to(Path(sys.executable).parent / "skilld")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    result = subprocess.run(
        [binary, "--user", "verify", str(USER_UNIT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_verified(result, USER_UNIT.name)


def test_system_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    binary = systemd_analyze()
    # verify checks that ExecStart exists; point it at this checkout's skilld instead of /opt.
    text = SYSTEM_UNIT.read_text(encoding="utf-8")
    installed = "/opt/skilld/venv/bin/skilld"
    assert f"ExecStart={installed} run" in text
    unit = tmp_path / SYSTEM_UNIT.name
    unit.write_text(text.replace(installed, str(Path(sys.executable).parent / "skilld")))
    result = subprocess.run(
        [binary, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert_verified(result, unit.name)


# -- docker ----------------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        pending = f"{pending} {line}".strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        keyword, _, arguments = pending.partition(" ")
        instructions.append((keyword.upper(), " ".join(arguments.split())))
        pending = ""
    return instructions


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return dockerfile_instructions(DOCKER / "Dockerfile")


def test_dockerfile_pins_a_slim_python_base(dockerfile: list[tuple[str, str]]) -> None:
    bases = [args.split()[0] for keyword, args in dockerfile if keyword == "FROM"]
    assert bases, "no FROM"
    for base in bases:
        assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base


def test_dockerfile_runs_skilld_as_non_root_with_a_healthcheck(
    dockerfile: list[tuple[str, str]],
) -> None:
    users = [args for keyword, args in dockerfile if keyword == "USER"]
    assert users, "no USER: the container would run as root"
    assert users[-1].split(":")[0] not in ("root", "0")
    healthchecks = [args for keyword, args in dockerfile if keyword == "HEALTHCHECK"]
    assert len(healthchecks) == 1
    assert re.search(r'"skilld",\s*"status",\s*"--check"', healthchecks[0]), healthchecks[0]
    entrypoint = json.loads(next(a for k, a in dockerfile if k == "ENTRYPOINT"))
    command = json.loads(next(a for k, a in dockerfile if k == "CMD"))
    assert entrypoint + command == ["skilld", "run"]


def test_dockerfile_installs_only_the_package(dockerfile: list[tuple[str, str]]) -> None:
    copied = [args.split()[:-1] for keyword, args in dockerfile if keyword == "COPY"]
    assert sorted(source for sources in copied for source in sources) == [
        "README.md",
        "pyproject.toml",
        "src",
    ]
    installs = [args for keyword, args in dockerfile if keyword == "RUN" and "pip " in args]
    assert installs and all("--no-cache-dir" in args for args in installs)
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    assert {"*", "!pyproject.toml", "!README.md", "!src/"} <= set(ignore)


def test_dockerfile_bakes_in_no_secret(dockerfile: list[tuple[str, str]]) -> None:
    for keyword, args in dockerfile:
        if keyword not in ("ENV", "ARG"):
            continue
        for assignment in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?", args):
            name, value = assignment
            if any(word in name.upper() for word in SECRET_WORDS):
                assert not value, f"{keyword} {name} has a value baked into the image"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def test_compose_shares_transcripts_read_only_and_skills_read_write(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    skilld, agent = services["skilld"], services["agent"]
    mounts = {volume.split(":")[1]: volume.split(":") for volume in skilld["volumes"]}
    transcripts = mounts["/dsh/sessions"]
    assert transcripts[-1] == "ro"
    skills = mounts["/dsh/skills"]
    assert len(skills) == 2  # no ":ro"
    state = mounts["/var/lib/skilld"]
    assert state[0] not in (transcripts[0], skills[0])
    agent_sources = {volume.split(":")[0] for volume in agent["volumes"]}
    assert {transcripts[0], skills[0]} <= agent_sources  # the very volumes the agent uses
    assert state[0] not in agent_sources
    assert set(compose["volumes"]) >= {transcripts[0], skills[0], state[0]}


def test_compose_passes_the_key_from_the_environment(compose: dict[str, Any]) -> None:
    skilld = compose["services"]["skilld"]
    environment = skilld["environment"]
    assert "DEEPSEEK_API_KEY" in environment  # passed through, no value here
    for entry in environment:
        name, _, value = entry.partition("=")
        if any(word in name.upper() for word in SECRET_WORDS):
            assert not value or value.startswith("${"), entry
    build = skilld["build"]
    context = (DOCKER / build["context"]).resolve()
    assert (context / "pyproject.toml").is_file()
    assert (context / build["dockerfile"]).resolve() == (DOCKER / "Dockerfile").resolve()
    assert skilld["read_only"] is True
    assert skilld["cap_drop"] == ["ALL"]


# -- examples --------------------------------------------------------------------------------


def run_examples(
    workspace: Workspace, fake_llm: FakeLLM, config: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return workspace.cli(
        "--config",
        str(config),
        *args,
        SKILLD_LLM_BASE_URL=fake_llm.base_url,
        SKILLD_SKILLS_DIR=str(workspace.skills),
        SKILLD_STATE_DIR=str(workspace.state),
    )


def sessions_asked_about(fake_llm: FakeLLM) -> dict[str, str]:
    """Source kind -> the transcript text the LLM was asked about, from each request."""
    asked = {}
    for request in fake_llm.requests:
        text = "\n".join(str(message.get("content")) for message in request["messages"])
        kind = re.search(r"Session ([a-z-]+):", text)
        assert kind is not None, text[:300]
        asked[kind.group(1)] = text
    return asked


def test_once_on_the_examples_reads_every_checked_in_format(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    out = EXAMPLES / "out"
    existed = out.exists()
    result = run_examples(workspace, fake_llm, EXAMPLES / "config.toml", "once")
    assert result.returncode == 0, result.stderr
    asked = sessions_asked_about(fake_llm)
    for kind in ("jsonl", "claude-code", "codex", "dsh"):
        assert EXAMPLE_MARKERS[kind] in asked.get(kind, ""), kind
    # The jsonl example carries a database password in a tool result: it never leaves.
    assert "S3cr3tP4ss" not in fake_llm.all_request_text
    assert "[REDACTED:url_password]" in asked["jsonl"]
    assert (workspace.state / "state.db").is_file()
    assert out.exists() == existed  # the overrides kept the checkout clean


def test_examples_with_a_generated_hermes_db_read_all_five_formats(
    workspace: Workspace, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy, ignore=shutil.ignore_patterns("out", "hermes"))
    made = subprocess.run(
        [sys.executable, str(copy / "make_hermes_db.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert Path(made.stdout.strip()) == copy / "transcripts" / "hermes" / "state.db"

    doctor = run_examples(workspace, fake_llm, copy / "config.toml", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    source_lines = [line for line in doctor.stdout.splitlines() if " source " in line]
    assert len(source_lines) == 5 and all(line.startswith("ok") for line in source_lines)
    assert [request["max_tokens"] for request in fake_llm.requests] == [1]
    fake_llm.requests.clear()

    result = run_examples(workspace, fake_llm, copy / "config.toml", "once")
    assert result.returncode == 0, result.stderr
    asked = sessions_asked_about(fake_llm)
    assert set(asked) == set(EXAMPLE_MARKERS)
    for kind, marker in EXAMPLE_MARKERS.items():
        assert marker in asked[kind], kind
    # The system prompt of the Hermes session is the harness speaking, not the conversation.
    assert "You are Hermes" not in asked["hermes"]
