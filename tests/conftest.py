from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog

from skilld.routing import LibrarySpec
from skilld.skills.library import Library
from skilld.skills.usage import UsageStore
from skilld.state import StateDB
from tests.fakellm import FakeLLM


def pytest_configure(config: pytest.Config) -> None:
    """The suite keeps bytecode even where PYTHONDONTWRITEBYTECODE is set (as on this
    project's machines): pytest then rewrites the asserts of every test module in every
    worker on every run (7 s of CPU a worker), and each of the suite's thousand `skilld`
    processes compiles every module it imports (0.17 s of the 0.45 s a `skilld once` costs).
    Run before the workers start, so that they and every process the tests start inherit it.
    An installed skilld has its bytecode from pip."""
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture(autouse=True, scope="session")
def _config_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every skilld the tests start keeps its config cache in the session's temp dir, not in
    the home directory of whoever runs the tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """A test that runs `cli.main` in-process configures structlog onto pytest's captured
    stream; later tests must not log into that stream once pytest has closed it."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@dataclass
class Workspace:
    """A skilld installation in a temp dir: config file, skills, state, one jsonl source."""

    root: Path
    llm_url: str = "http://127.0.0.1:9/v1"
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: `[[libraries]]` tables; with them there is no `[skills] dir` (each names its own).
    libraries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def skills(self) -> Path:
        return self.root / "skills"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    @property
    def config_path(self) -> Path:
        return self.root / "config.toml"

    def write_config(self) -> Path:
        sections: dict[str, dict[str, Any]] = {
            "skills": {"dir": str(self.skills)},
            "state": {"dir": str(self.state)},
            "evolve": {
                "interval_seconds": 1,
                "cooldown_seconds": 0,
                "min_messages": 2,
                "backfill": "all",
            },
            "llm": {
                "base_url": self.llm_url,
                "model": "test-model",
                "api_key_env": "SKILLD_TEST_KEY",
                "timeout_seconds": 5,
                "max_retries": 2,
            },
            "log": {"format": "json", "level": "info"},
            # No holdout unless a test asks for one: a learned skill withheld on a fifth of
            # the (random) days would make every test that reads its effect flaky.
            "effect": {"holdout": 0.0},
        }
        if self.libraries:
            del sections["skills"]
        for name, values in self.settings.items():
            sections.setdefault(name, {}).update(values)
        lines = []
        for name, values in sections.items():
            lines.append(f"[{name}]")
            lines.extend(f"{key} = {_toml(value)}" for key, value in values.items())
            lines.append("")
        for library in self.libraries:
            lines.append("[[libraries]]")
            lines.extend(f"{key} = {_toml(value)}" for key, value in library.items())
            lines.append("")
        sources = self.sources or [{"kind": "jsonl", "path": str(self.sessions)}]
        for source in sources:
            lines.append("[[sources]]")
            lines.extend(f"{key} = {_toml(value)}" for key, value in source.items())
            lines.append("")
        self.config_path.write_text("\n".join(lines), encoding="utf-8")
        return self.config_path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLD_")}
        env["SKILLD_CONFIG"] = str(self.config_path)
        env["SKILLD_TEST_KEY"] = "sk-test-0000"
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra)
        return env

    def cli(self, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        if not self.config_path.exists():
            self.write_config()
        return subprocess.run(
            [sys.executable, "-m", "skilld", *args],
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def cli_here(self, *args: str) -> str:
        """`skilld ARGS` in the test's own process, returning its standard output; a non-zero
        exit fails the test. For setting the scene, where what the command leaves behind is
        what the test reads, not its process: a tenth of a subprocess's CPU."""
        from skilld.cli import main

        if not self.config_path.exists():
            self.write_config()
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            code = main(["--config", str(self.config_path), *args])
        assert code == 0, f"skilld {' '.join(args)} exited {code}"
        return output.getvalue()

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        if not self.config_path.exists():
            self.write_config()
        return subprocess.Popen(
            [sys.executable, "-m", "skilld", *args],
            env=self.env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        args = ["events", "--json"]
        for kind in kinds:
            args += ["--kind", kind]
        return [json.loads(line) for line in self.cli_here(*args).splitlines() if line.strip()]

    def add_session(self, name: str, messages: list[dict[str, Any]]) -> Path:
        self.sessions.mkdir(parents=True, exist_ok=True)
        path = self.sessions / f"{name}.jsonl"
        with path.open("a", encoding="utf-8") as handle:
            for message in messages:
                handle.write(json.dumps(message) + "\n")
        return path


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))


def conversation(topic: str = "the build", turns: int = 2) -> list[dict[str, Any]]:
    """A small finished OpenAI-style conversation with a tool call in each turn."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        call_id = f"call_{topic.replace(' ', '_')}_{turn}"
        messages += [
            {"role": "user", "content": f"Please fix {topic} (step {turn})."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd": "make test"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "2 passed"},
            {"role": "assistant", "content": f"Fixed {topic}: run make test first."},
        ]
    return messages


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path)
    ws.skills.mkdir()
    ws.sessions.mkdir()
    return ws


# `--full` (campaigns at full size) must be known however pytest is started: a conftest below
# tests/ is loaded too late to add options when the run starts at the repository root.
from tests.campaigns.conftest import FIGURES_PROPERTY, pytest_addoption  # noqa: E402,F401

_CAMPAIGN_FIGURES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Campaign figures from each test's last report, whichever process ran the test."""
    if report.when == "teardown":
        _CAMPAIGN_FIGURES.extend(v for k, v in report.user_properties if k == FIGURES_PROPERTY)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _CAMPAIGN_FIGURES:
        terminalreporter.section("campaign figures")
        for line in _CAMPAIGN_FIGURES:
            terminalreporter.write_line(line)


def library_spec(root: Path, name: str = "default", **changes: Any) -> LibrarySpec:
    """A library's resolved settings, as routing gives them for a `[skills] dir` config."""
    values: dict[str, Any] = {
        "name": name,
        "dir": root,
        "dialect": "dsh",
        "layout": "dir",
        "max_managed": 50,
        "name_prefix": "",
        "project_dir": None,
        "remote": None,
        "branch": "main",
        "recursive": False,
        "extra_dirs": (),
        "max_content_chars": 20000,
        "history_keep": 10,
    }
    values.update(changes)
    return LibrarySpec(**values)


def open_library(root: Path, state_dir: Path, **changes: Any) -> Library:
    """A library over `root` with its state in `state_dir` (real SQLite, real files)."""
    spec = library_spec(root, **changes)
    state = StateDB(state_dir / "state.db")
    return Library(
        spec,
        state,
        UsageStore(root),
        history_dir=state_dir / "history" / f"@{spec.storage_key}",
        locks_dir=state_dir / "locks",
    )


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` as a test's own user; its stdout, stripped."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
