"""The commands an agent's hook calls load only what they use (bench/startup.py times them)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skilld.cli import GROUPS, build_parser
from tests.conftest import Workspace


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def subcommand_names(parser: argparse.ArgumentParser) -> set[str]:
    return set(subparsers(parser))


#: What one-shot commands must not pay for: the LLM client, logging, YAML, the event loop,
#: the redaction patterns, the web panel's server, templates and Markdown.
HEAVY = ("httpx", "structlog", "yaml", "anyio", "asyncio", "skilld.redact", "skilld.web")
HEAVY += ("starlette", "uvicorn", "jinja2", "markdown_it")
#: Standard-library modules they do without: the TOML parser once the config is cached (the
#: `skills write` before each probe loads the same file), shutil (argparse's help width),
#: dataclasses (inspect, ast, dis: the records on their path are named tuples), hashlib
#: (OpenSSL's libcrypto: `skilld.digest` uses CPython's own SHA-256 where the build has one).
OWN_SHA256 = "_sha2" if sys.version_info >= (3, 12) else "_sha256"
AVOIDED = ("tomllib", "shutil", "dataclasses") + (
    ("hashlib",) if importlib.util.find_spec(OWN_SHA256) else ()
)

#: All of skilld a hook's `usage use` loads (docs/design.md, "The layers"): the config, the
#: routing, the usage sidecar and the command line around them.
HOOK_MODULES = {
    "skilld",
    "skilld._config_cache",
    # `.usage.json` may be anyone's: it is read with a size and a nesting bound.
    "skilld.boundedjson",
    "skilld.cli",
    "skilld.commands",
    "skilld.commands.common",
    "skilld.commands.usage",
    "skilld.config",
    "skilld.errors",
    "skilld.fsutil",
    "skilld.log",
    "skilld.routing",
    "skilld.skills",
    "skilld.skills.layout",
    "skilld.skills.names",
    "skilld.skills.usage",
}
#: All of skilld `skills list --json` loads: the app (config, routing, the state and the library
#: with what a listing reads through: discovery, ownership, the writer lock) and the listing
#: report. What a write comes to (`outcomes`), history, the team's work tree, the other reports
#: and the evolve code load on use.
LIST_MODULES = (HOOK_MODULES - {"skilld.commands.usage"}) | {
    "skilld.app",
    "skilld.commands.skills",
    "skilld.digest",
    "skilld.reports",
    "skilld.reports.listing",
    "skilld.skills.discovery",
    "skilld.skills.document",
    "skilld.skills.library",
    "skilld.skills.lock",
    "skilld.skills.ownership",
    # What in a skill's text would act (shell triggers, control characters): `document` uses it.
    "skilld.skills.triggers",
    "skilld.state",
    # `StateDB` is made of every table family's module.
    "skilld.state.db",
    "skilld.state.events",
    "skilld.state.proposals",
    "skilld.state.provenance",
    "skilld.state.sessions",
    "skilld.state.skill_uses",
}
#: `status --json`: what a listing loads, the backlog (its gates and windows only when a
#: session holds messages), the review queue and the team sync status (with URLs masked).
STATUS_MODULES = (LIST_MODULES - {"skilld.commands.skills", "skilld.reports.listing"}) | {
    "skilld.commands.daemon",
    "skilld.reports.status",
    "skilld.evolve",
    "skilld.evolve.backlog",
    "skilld.evolve.review",
    "skilld.team",
    # a team remote's URL is shown masked (standard library only)
    "skilld.masking",
}
PINNED = {"usage": HOOK_MODULES, "skills": LIST_MODULES, "status": STATUS_MODULES}


#: Runs a command and writes what it imported and what it compiled: the first `compile()` in a
#: process builds Python's AST types, a millisecond (a NamedTuple with string annotations, as
#: under `from __future__ import annotations`, compiles each one: typing's ForwardRef). The
#: import system's own compiling of a module whose bytecode is not cached yet does not count:
#: an install has it cached.
PROBE = """
import builtins, json, sys
compiled = []
compile_ = builtins.compile
def counted(source, *args, **kwargs):
    caller = sys._getframe(1).f_globals.get("__name__")
    if not str(caller).startswith("importlib._bootstrap"):
        compiled.append(f"{caller}: {str(source)[:60]}")
    return compile_(source, *args, **kwargs)
builtins.compile = counted
from skilld.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules), "compiled": compiled}, out)
"""


@pytest.mark.parametrize(
    "command",
    [["usage", "use", "run-tests"], ["skills", "list", "--json"], ["status", "--json"]],
    ids=["usage use", "skills list", "status"],
)
def test_one_shot_commands_import_nothing_heavy(workspace: Workspace, command: list[str]) -> None:
    workspace.write_config()
    written = workspace.cli(
        "skills", "write", "run-tests", "--description", "Run the tests.", "--content", "1. Go.\n"
    )
    assert written.returncode == 0, written.stderr
    report = workspace.root / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *command],
        env=workspace.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(report.read_text())
    assert loaded["code"] == 0
    assert [module for module in HEAVY if module in loaded["modules"]] == []
    assert [module for module in AVOIDED if module in loaded["modules"]] == []
    command_modules = {m for m in loaded["modules"] if m.startswith("skilld.commands.")}
    assert command_modules == {"skilld.commands.common", f"skilld.commands.{GROUPS[command[0]]}"}
    assert {m for m in loaded["modules"] if m.startswith("skilld")} == PINNED[command[0]]
    assert loaded["compiled"] == []


#: All of skilld `skilld mcp` loads before it answers `initialize` and `tools/list`: the config,
#: the routing and the protocol. The tools' code loads on the first call.
MCP_HANDSHAKE_MODULES = {
    "skilld",
    "skilld._config_cache",
    # every line is read with a size and a nesting bound
    "skilld.boundedjson",
    "skilld.cli",
    "skilld.commands",
    "skilld.commands.common",
    "skilld.commands.mcp",
    "skilld.config",
    "skilld.errors",
    "skilld.fsutil",
    "skilld.log",
    "skilld.mcp_server",
    "skilld.routing",
}
#: What the handshake does without, beyond `HEAVY`: the MCP SDK and what it is built on, and
#: the state's SQLite.
MCP_HANDSHAKE_AVOIDS = ("mcp", "mcp_types", "pydantic", "pydantic_core", "jsonschema", "sqlite3")


def mcp_line(method: str, request_id: int | None = None, **params: object) -> str:
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    return json.dumps(message if request_id is None else {**message, "id": request_id}) + "\n"


HANDSHAKE = (
    mcp_line("initialize", 1, protocolVersion="2025-06-18", capabilities={})
    + mcp_line("notifications/initialized")
    + mcp_line("tools/list", 2)
)


@pytest.mark.parametrize("called", [False, True], ids=["handshake", "then a call"])
def test_the_mcp_handshake_loads_the_protocol_only(workspace: Workspace, called: bool) -> None:
    """What `skilld mcp` has imported once it has answered the handshake; and the probe can
    see more: a tool call loads the tools' code."""
    workspace.write_config()
    assert workspace.cli("skills", "list").returncode == 0  # the config cached, as above
    report = workspace.root / "modules.json"
    call = mcp_line("tools/call", 3, name="skill_list", arguments={}) if called else ""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), "mcp"],
        input=HANDSHAKE + call, env=workspace.env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answered = [json.loads(line)["id"] for line in result.stdout.splitlines()]
    assert answered == ([1, 2, 3] if called else [1, 2])
    loaded = set(json.loads(report.read_text())["modules"])
    skilld_modules = {m for m in loaded if m.startswith("skilld")}
    if called:
        assert {"skilld.mcp_tools", "skilld.skills.library", "sqlite3"} <= loaded
        return
    assert skilld_modules == MCP_HANDSHAKE_MODULES
    assert [m for m in (*HEAVY, *AVOIDED, *MCP_HANDSHAKE_AVOIDS) if m in loaded] == []


def test_the_group_table_names_the_module_of_every_command() -> None:
    """`GROUPS` lets a command line import one command module; it must name the module whose
    `COMMANDS` holds each command, and a line naming no known command still gets every one."""
    assert subcommand_names(build_parser([])) == set(GROUPS)
    assert subcommand_names(build_parser(["frobnicate"])) == set(GROUPS)
    tables = {
        module: importlib.import_module(f"skilld.commands.{module}").COMMANDS
        for module in set(GROUPS.values())
    }
    assert {name for table in tables.values() for name in table} == set(GROUPS)
    for group, module in GROUPS.items():
        assert group in tables[module]


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        (["--config", "x.toml", "status", "--json"], ["status"]),
        (["skills", "list", "--json", "--library", "claude"], ["skills", "list"]),
        (["skills", "rollback", "deploy", "--version", "3", "--force"], ["skills", "rollback"]),
        (["review", "approve", "deploy", "--library", "dsh"], ["review", "approve"]),
        (["usage", "use", "deploy"], ["usage"]),
        (["events", "--kind", "error", "--kind", "created"], ["events"]),
    ],
)
def test_a_command_line_builds_only_the_parsers_it_uses(
    line: list[str], commands: list[str]
) -> None:
    """Each level holds the one command the line names, and parses it as the whole tree does."""
    built = build_parser(line)
    parser: argparse.ArgumentParser = built
    for command in commands:
        assert subcommand_names(parser) == {command}
        parser = subparsers(parser)[command]
    assert not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    assert built.parse_args(line) == build_parser().parse_args(line)


@pytest.mark.parametrize("line", [["skills", "--help"], ["skills", "lst"], ["review"]])
def test_help_and_a_mistyped_command_get_every_subcommand(line: list[str]) -> None:
    nested = subparsers(build_parser(line))[line[0]]
    assert subcommand_names(nested) == subcommand_names(subparsers(build_parser())[line[0]])
    assert len(subcommand_names(nested)) > 1


def test_a_mistyped_subcommand_is_told_the_choices(workspace: Workspace) -> None:
    result = workspace.cli("skills", "lst")
    assert result.returncode == 2
    assert "invalid choice: 'lst'" in result.stderr
    assert "'list'" in result.stderr and "'rollback'" in result.stderr


def test_the_probe_sees_a_heavy_import(workspace: Workspace) -> None:
    """The check can fail: a command that does load them (the daemon's) is seen doing it."""
    workspace.write_config()
    report = workspace.root / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), "once"],
        env=workspace.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(report.read_text())["modules"]
    assert {"anyio", "structlog", "skilld.daemon"} <= set(loaded)


def test_help_is_wrapped_to_the_terminal_width_without_shutil() -> None:
    """The help formatter sizes itself as argparse's would (`$COLUMNS`, else the terminal)."""

    def help_lines(columns: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-m", "skilld", "skills", "write", "--help"],
            env={**os.environ, "COLUMNS": columns}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        # The options' help, which argparse wraps (it cannot break a long usage group).
        return result.stdout.partition("options:")[2].splitlines()

    narrow, wide = help_lines("50"), help_lines("200")
    assert max(map(len, narrow)) <= 50 < max(map(len, wide))
    assert len(narrow) > len(wide)


#: `skilld.cli.entry_point` around a stand-in `main` that registers an `atexit` handler, prints,
#: leaves a file unclosed (only Python's teardown flushes it) and returns or raises as told.
ENTRY = """
import atexit, sys
import skilld.cli

folder, outcome = sys.argv[1], sys.argv[2]
unclosed = None

def main():
    global unclosed
    atexit.register(lambda: open(f"{folder}/atexit", "w").close())
    unclosed = open(f"{folder}/unclosed", "w")
    unclosed.write("flushed by the teardown")
    print("x" * 200_000)
    if outcome == "raise":
        raise RuntimeError("boom")
    if outcome == "traced":
        sys.settrace(lambda *args: None)
    return 3

skilld.cli.main = main
skilld.cli.entry_point()
"""


def buffered_env() -> dict[str, str]:
    """This environment without `PYTHONUNBUFFERED`: stdout buffered, as a hook's is."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}


@pytest.mark.parametrize(
    ("outcome", "code", "torn_down"),
    [("return", 3, False), ("traced", 3, True), ("raise", 1, True)],
)
def test_the_script_ends_the_process_once_python_s_exit_work_is_done(
    tmp_path: Path, outcome: str, code: int, torn_down: bool
) -> None:
    """The exit code, every byte of buffered output and the command's `atexit` handlers survive
    the skipped teardown; a command that raises, or a traced process, is torn down as usual."""
    result = subprocess.run(
        [sys.executable, "-c", ENTRY, str(tmp_path), outcome],
        env=buffered_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == code, result.stderr
    assert result.stdout == "x" * 200_000 + "\n"
    assert (tmp_path / "atexit").exists()
    assert (tmp_path / "unclosed").read_text() == ("flushed by the teardown" if torn_down else "")
    assert ("RuntimeError: boom" in result.stderr) == (outcome == "raise")


@pytest.mark.parametrize(
    ("args", "code", "stream"),
    [(["--version"], 0, "stdout"), (["skills", "--help"], 0, "stdout"), (["skills"], 2, "stderr")],
)
def test_the_script_keeps_argparse_s_exits(
    workspace: Workspace, args: list[str], code: int, stream: str
) -> None:
    result = workspace.cli(*args)
    assert result.returncode == code
    assert getattr(result, stream).strip()


def test_a_flush_that_fails_is_left_to_python() -> None:
    """Output still buffered when the reader has gone: Python's own exit reports the broken
    pipe and exits 120, as it does without skilld's handler."""
    script = "import skilld.cli\nskilld.cli.main = lambda: print('buffered') or 0\n"
    statuses = []
    for end in ("skilld.cli.entry_point()", "raise SystemExit(skilld.cli.main())"):
        process = subprocess.Popen(
            [sys.executable, "-c", script + end],
            env=buffered_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        error = process.stderr.read()
        statuses.append(process.wait(timeout=60))
        assert "BrokenPipeError" in error
    assert statuses == [120, 120]
