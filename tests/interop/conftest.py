"""The interop suite: skilld's files and MCP server as the real agents see them.

Run with `python -m pytest -m interop tests/interop` after `tests/interop/install`, which puts
pinned versions of Hermes Agent, Claude Code and Codex in a cache outside the repository. The
default `python -m pytest` deselects these tests (pyproject's addopts). A missing agent skips
its tests locally, with the reason; under CI (`CI=true`) it fails them.

Every agent runs offline: HOME is a temp dir, the model API is a loopback server of the test's
own, and the proxies point at a closed loopback port so that any other request fails at once.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERMES_VERSION = "0.19.0"
CLAUDE_CODE_VERSION = "2.1.328"
CODEX_VERSION = "0.169.0"

REPO = Path(__file__).resolve().parents[2]
INSTALLER = "tests/interop/install"
#: Port 9 (discard) is closed on loopback: a request sent through the proxy fails at once.
CLOSED_PROXY = "http://127.0.0.1:9"
#: The placeholder docs/mcp.md gives for where `skilld` is installed.
DOCS_SKILLD = "/home/you/.local/bin/skilld"
#: Codex starts that must each offer skilld's tools, unless `--codex-runs` says otherwise (an
#: option only when tests/interop is named on the command line, as docs/interop.md does).
CODEX_RUNS = 3


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--codex-runs",
        type=int,
        default=CODEX_RUNS,
        help="interop: how many Codex starts must each offer skilld's tools (issue 27: 20)",
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    if "interop" in (config.option.markexpr or "") and "not interop" not in config.option.markexpr:
        return f"interop agents: {CACHE}"
    return "interop suite deselected: run `python -m pytest -m interop tests/interop`"


def cache_dir() -> Path:
    if explicit := os.environ.get("SKILLD_INTEROP_CACHE"):
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "skilld-interop"


def _require(path: Path, what: str) -> Path:
    """`path` if the installer put it there; else skip locally and fail in CI."""
    if path.exists():
        return path
    reason = f"{what} is not installed at {path}: run {INSTALLER}"
    if os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Agents:
    cache: Path

    @property
    def claude(self) -> Path:
        return _require(
            self.cache / "npm/node_modules/.bin/claude", f"Claude Code {CLAUDE_CODE_VERSION}"
        )

    @property
    def codex(self) -> Path:
        return _require(self.cache / "npm/node_modules/.bin/codex", f"Codex {CODEX_VERSION}")

    @property
    def hermes_python(self) -> Path:
        return _require(
            self.cache / f"hermes-{HERMES_VERSION}/bin/python", f"hermes-agent {HERMES_VERSION}"
        )


#: Read when this module loads: tests/conftest.py points XDG_CACHE_HOME at a temp dir for the
#: whole session, and the agents are not there.
CACHE = cache_dir()


@pytest.fixture(scope="session")
def agents() -> Agents:
    return Agents(CACHE)


@dataclass
class Home:
    """A temp HOME where the agent has been used (its session folder exists, so skilld finds
    its library with no config) and a project directory to run it in."""

    root: Path

    @property
    def project(self) -> Path:
        return self.root / "project"

    def env(self, **extra: str) -> dict[str, str]:
        """A minimal environment: nothing of the caller's HOME, XDG dirs or keys leaks in."""
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "HTTP_PROXY": CLOSED_PROXY,
            "HTTPS_PROXY": CLOSED_PROXY,
            "ALL_PROXY": CLOSED_PROXY,
            "http_proxy": CLOSED_PROXY,
            "https_proxy": CLOSED_PROXY,
            "all_proxy": CLOSED_PROXY,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        env.update(extra)
        return env

    def skilld(
        self, *args: str, check: bool = True, **env: str
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "skilld", *args],
            env=self.env(**env),
            cwd=self.project,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def skills(self, library: str) -> list[dict[str, Any]]:
        listed = json.loads(self.skilld("skills", "list", "--json", "--library", library).stdout)
        assert isinstance(listed, list)
        return listed

    def events(self, kind: str) -> list[dict[str, Any]]:
        out = self.skilld("events", "--json", "--kind", kind).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    made = Home(tmp_path / "home")
    made.project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(made.project)], check=True)
    yield made


def run_agent(
    argv: list[str], home: Home, env: dict[str, str], *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Runs an agent non-interactively (stdin closed) in the home's project."""
    return subprocess.run(
        argv,
        env=env,
        cwd=home.project,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def frontmatter(skill_file: Path) -> dict[str, Any]:
    """The YAML frontmatter of a SKILL.md, as written."""
    import yaml

    _, head, _ = skill_file.read_text(encoding="utf-8").split("---\n", 2)
    loaded = yaml.safe_load(head)
    assert isinstance(loaded, dict)
    return loaded


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value: the text the agent put in front of the model."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def listing_line(body: dict[str, Any], name: str) -> str:
    """The one line of the request that lists skill `name` (`- name: description…`)."""
    lines = {
        line.strip()
        for text in strings(body)
        for line in text.splitlines()
        if line.strip().startswith(f"- {name}:")
    }
    assert len(lines) == 1, f"{name} listed {len(lines)} times: {sorted(lines)}"
    return lines.pop()


def skilld_executable() -> str:
    """The `skilld` an agent starts as its MCP server: the one installed beside this Python."""
    path = Path(sys.executable).with_name("skilld")
    assert path.exists(), f"no skilld entry point at {path}"
    return str(path)


def _docs_mcp() -> str:
    return (REPO / "docs/mcp.md").read_text(encoding="utf-8")


def documented_claude_mcp_add() -> list[str]:
    """The `claude mcp add` command docs/mcp.md gives, with this machine's skilld."""
    for line in _docs_mcp().splitlines():
        if line.startswith("claude mcp add"):
            command = shlex.split(line.split("#", 1)[0])
            return [skilld_executable() if arg == DOCS_SKILLD else arg for arg in command]
    raise AssertionError("docs/mcp.md gives no `claude mcp add` line")


def documented_claude_allowed_tools() -> list[str]:
    """The `--allowedTools` docs/mcp.md gives for `claude -p`, as flags."""
    for line in _docs_mcp().splitlines():
        if line.startswith("claude -p") and "--allowedTools" in line:
            words = shlex.split(line)
            return ["--allowedTools", words[words.index("--allowedTools") + 1]]
    raise AssertionError("docs/mcp.md gives no `claude -p ... --allowedTools` line")


def documented_claude_permissions() -> dict[str, Any] | None:
    """The `permissions` settings docs/mcp.md gives for Claude Code, if it gives any."""
    for block in _docs_mcp().split("```json\n")[1:]:
        settings = json.loads(block.split("```", 1)[0])
        if "permissions" in settings:
            assert isinstance(settings, dict)
            return settings
    return None


def documented_codex_exec_overrides() -> list[str]:
    """The `-c` overrides docs/mcp.md gives for an unattended `codex exec` that writes."""
    for line in _docs_mcp().splitlines():
        if line.startswith("codex exec") and " -c " in line:
            words = shlex.split(line)
            return [word for i, word in enumerate(words) if word == "-c" or words[i - 1] == "-c"]
    return []


def documented_codex_table() -> dict[str, Any]:
    """The `[mcp_servers.skilld]` table docs/mcp.md gives, with this machine's skilld."""
    docs = _docs_mcp()
    for block in docs.split("```toml\n")[1:]:
        toml = block.split("```", 1)[0]
        if "[mcp_servers.skilld]" in toml:
            table = tomllib.loads(toml)["mcp_servers"]["skilld"]
            assert isinstance(table, dict)
            if table.get("command") == DOCS_SKILLD:
                table["command"] = skilld_executable()
            return table
    raise AssertionError("docs/mcp.md gives no [mcp_servers.skilld] table")


def claude_env(home: Home, model_origin: str) -> dict[str, str]:
    """Claude Code against the loopback Messages API, with every optional request off."""
    return home.env(
        ANTHROPIC_BASE_URL=model_origin,
        ANTHROPIC_API_KEY="sk-interop-loopback",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_AUTOUPDATER="1",
    )


def codex_env(
    home: Home, model_origin: str, *, mcp: dict[str, Any] | None = None
) -> dict[str, str]:
    """Codex against the loopback Responses API: a `config.toml` in `$CODEX_HOME` whose only
    provider is that server, plus `[mcp_servers.skilld]` when `mcp` is given."""
    codex_home = home.root / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    lines = [
        'model = "interop-model"',
        'model_provider = "loopback"',
        "",
        "[model_providers.loopback]",
        'name = "loopback"',
        f'base_url = "{model_origin}/v1"',
        'env_key = "LOOPBACK_API_KEY"',
        'wire_api = "responses"',
    ]
    if mcp is not None:
        lines += ["", "[mcp_servers.skilld]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in mcp.items()]
    (codex_home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return home.env(CODEX_HOME=str(codex_home), LOOPBACK_API_KEY="sk-interop-loopback")


def toml_value(value: Any) -> str:
    """`value` as TOML (tables inline), for the tables tomllib read out of the docs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")
