"""Security campaign, hostile JSON (issue 39): what a model endpoint or a teammate can do with a
JSON body or file no reader should take in whole.

Hostile model endpoint. A server on 127.0.0.1 answers every request with one kind of body
(`tests/hostile_model.py`): 200,000 deep, a 500 whose error is 200,000 deep, HTML with 200, a
gigabyte streamed without a length, a gzip bomb. For each, `skilld once` (its peak RSS
measured) and then `skilld run` over several ticks: no process crashes or prints a traceback,
each reply is the server's fault (an `error` event, the window kept), the peak RSS stays far
below the body, and `run` asks no more often than the circuit allows, however many ticks.

Hostile team JSON. A teammate pushes a manifest and a usage file nested 100,000 deep, one
never closed and one nested deep in UTF-16 (these two under the hosts' own names), all in one
commit; then, as controls that must be applied, a manifest whose strings hold 100,000
brackets and a usage file nested exactly as deep as the bound. Every host's `skilld sync`
refuses exactly the hostile paths and applies the controls, `doctor` names each refused path,
and `status`, `skills list` and `skills write` go on; the teammate reverts each round, every
host syncs again, and what each learned meanwhile reaches the remote.

`--full` streams 4 GiB, runs 20 ticks, pushes each case alone before the rounds above, and
nests 250,000 deep (about all of a remote's file, 1 MiB, in UTF-16) on three hosts.
"""

from __future__ import annotations

import contextlib
import io
import json
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import structlog

from skilld import cli
from skilld.boundedjson import MAX_DEPTH
from skilld.llm import LLMSettings
from tests.campaigns.harness import running, skilld_argv
from tests.conftest import Workspace, conversation
from tests.hostile_files import RSS_LIMIT_KIB, Measured, measured
from tests.hostile_model import KINDS, HostileModel
from tests.synchosts import Person, bare_remote, plain_git
from tests.test_hostile_sync import push
from tests.test_team import Host

TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"
MANIFEST = ".skilld/manifest.json"
#: How often a server whose every reply is unusable may be asked, whatever the ticks: each
#: failed call counts toward the circuit, which opens after this many and stays open.
CIRCUIT_FAILURES = LLMSettings(base_url="", model="").circuit_failures
#: The kinds of `error` event a reply that cannot be read may cause: the server's fault.
SERVER_S_FAULT = {"bad_response", "server", "circuit_open"}


@dataclass
class Figures:
    cases: int = 0
    refused: int = 0
    accepted: int = 0
    crashed: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    peak_kib: int = 0
    requests: int = 0

    def ran(self, what: str, result: Measured, *, expected: int = 0) -> Measured:
        """Count `result`: a crash is a traceback, a hang or an exit other than 0 and 1 (what
        a command says it found); any other exit than `expected` is wrong."""
        self.peak_kib = max(self.peak_kib, result.peak_kib)
        if result.hung or "Traceback" in result.stderr or result.returncode not in (0, 1):
            self.crashed.append(f"{what}: exit {result.returncode}: {result.stderr[-300:]}")
        elif result.returncode != expected:
            self.wrong.append(f"{what}: exit {result.returncode}: {result.stderr[-300:]}")
        return result


def peak_rss_kib(pid: int) -> int:
    """The peak RSS of a live process (`VmHWM`), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


# -- a hostile model endpoint ---------------------------------------------------------------


def test_a_hostile_model_endpoint_crashes_nothing_and_is_asked_a_bounded_number_of_times(
    tmp_path: Path, full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    streamed, ticks = ((4 << 30), 20) if full_size else ((1 << 30), 6)
    figures = Figures()
    for number, kind in enumerate(KINDS):
        figures.cases += 1
        with HostileModel(kind, streamed_bytes=streamed) as model:
            workspace = Workspace(tmp_path / f"case-{number}", llm_url=model.base_url)
            workspace.root.mkdir()
            workspace.settings = {
                "llm": {"max_retries": 0},
                "evolve": {"interval_seconds": 0.2},
            }
            workspace.write_config()
            workspace.add_session("hostile-model", conversation(f"the {kind} reply"))
            figures.ran(f"{kind}: once", measured(workspace, "once"))
            with running(skilld_argv("run"), workspace.env()) as daemon:
                if not daemon.notify.wait_ticks(ticks, timeout=60):
                    figures.wrong.append(f"{kind}: run ticked {daemon.notify.all_ticks()} times")
                figures.peak_kib = max(figures.peak_kib, peak_rss_kib(daemon.process.pid))
            figures.crashed += [f"{kind}: {problem}" for problem in daemon.problems()]
            asked = len(model.requests)
            figures.requests += asked
            # `once` asked once; the daemon, a new process with a closed circuit, until it opened.
            if asked > 1 + CIRCUIT_FAILURES:
                figures.wrong.append(f"{kind}: asked {asked} times in {ticks} ticks")
            errors = [e for e in workspace.events("error") if e["detail"].get("kind")]
            if errors and {e["detail"]["kind"] for e in errors} <= SERVER_S_FAULT:
                figures.refused += 1
            else:
                figures.wrong.append(f"{kind}: events {[e['reason'] for e in errors]}")
            if any(workspace.skills.glob("*/SKILL.md")):
                figures.wrong.append(f"{kind}: a skill was written from an unreadable reply")
            backlog = json.loads(workspace.cli("status", "--json").stdout)["backlog"]
            if not backlog["windows"]:
                figures.wrong.append(f"{kind}: the window was given up: {backlog}")

    line = campaign_figures(
        "security hostile model endpoint", cases=figures.cases, refused=figures.refused,
        crashed=len(figures.crashed), requests=figures.requests, ticks_each=ticks,
        streamed_bytes=streamed, peak_rss_mib=round(figures.peak_kib / 1024),
    )  # fmt: skip
    assert figures.crashed == [], figures.crashed
    assert figures.wrong == [], figures.wrong
    assert figures.refused == figures.cases, line
    assert figures.peak_kib < RSS_LIMIT_KIB, line


# -- hostile team JSON ----------------------------------------------------------------------


@dataclass
class Case:
    """What the teammate pushes at `path`; whether each host must refuse it."""

    name: str
    path: str
    data: bytes
    refused: bool


def team_cases(hosts: tuple[str, ...], depth: int) -> list[Case]:
    """Each at a path of its own: a manifest, the usage file of each host's name (a teammate
    may push a file under this host's name) and of a teammate's."""
    deep = "[" * depth + "]" * depth

    def manifest(extra: str) -> bytes:
        return ('{"version": 1, "skills": {}, "extra": ' + extra + "}\n").encode()

    def usage(host: str, extra: str) -> bytes:
        return f'{{"host": "{host}", "skills": {{"fix-venv": {extra}}}}}\n'.encode()

    def at(host: str) -> str:
        return f".skilld/usage/{host}.json"

    first, second = hosts[0], hosts[1]
    bound = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)  # in a record in a usage file
    return [
        Case("deep manifest", MANIFEST, manifest(deep), refused=True),
        Case("deep usage file", at("teammate"), usage("teammate", deep), refused=True),
        Case("never closed", at(first), usage(first, "[" * depth), refused=True),
        Case("deep, in UTF-16", at(second), usage(second, deep).decode().encode("utf-16"),
             refused=True),
        Case("brackets in strings", MANIFEST, manifest(json.dumps(deep)), refused=False),
        Case("as deep as the bound", at("teammate"), usage("teammate", bound), refused=False),
    ]  # fmt: skip


def team_rounds(cases: list[Case], *, one_by_one: bool) -> list[list[Case]]:
    """The hostile cases pushed together, then the controls together; with `one_by_one`
    each case alone first."""
    together = [[c for c in cases if c.refused], [c for c in cases if not c.refused]]
    return [[case] for case in cases] + together if one_by_one else together


@pytest.fixture
def _logging_restored() -> Iterator[None]:
    """`cli.main` configures structlog for the process: put it back after."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.mark.slow
@pytest.mark.usefixtures("_logging_restored")
def test_hostile_team_json_is_refused_and_every_host_goes_on(
    tmp_path: Path, full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    names, depth = (("alpha", "bravo", "charlie"), 250_000) if full_size else (
        ("alpha", "bravo"), 100_000)  # fmt: skip
    remote = bare_remote(tmp_path / "team.git")
    hosts = {}
    for name in names:
        host = Host(tmp_path / name, "http://127.0.0.1:9/v1", name=name, remote=remote)
        host.sessions.mkdir(parents=True)
        host.write_config()
        hosts[name] = host
    hosts[names[0]].ok("skills", "write", "fix-venv", "--description", "Fix a venv.",
                       "--content", "1. Recreate it.")  # fmt: skip
    for host in hosts.values():
        host.sync()
    person = Person(tmp_path, remote)
    figures = Figures()

    def run(host: Host, *args: str, expected: int = 0) -> Measured:
        """`skilld sync` as its own process (its peak RSS measured), as a daemon or a timer
        runs it; every other command in this process (`cli.main`), a tenth of the time."""
        if args[0] == "sync":
            result = measured(host, *args)
        else:
            out, err = io.StringIO(), io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = cli.main(["--config", str(host.config_path), *args])
            except BaseException:  # a crash, counted as one
                code, err = 3, io.StringIO(traceback.format_exc())
            result = Measured(code, out.getvalue(), err.getvalue(), 0, hung=False)
        return figures.ran(f"{host.name}: {' '.join(args)}", result, expected=expected)

    cases = team_cases(names, depth)
    rounds = team_rounds(cases, one_by_one=full_size)
    for number, pushed in enumerate(rounds):
        what = ", ".join(case.name for case in pushed)
        hostile = [case.path for case in pushed if case.refused]
        plain_git("pull", "--quiet", "--ff-only", cwd=person.clone)
        for case in pushed:
            (person.clone / case.path).parent.mkdir(parents=True, exist_ok=True)
            (person.clone / case.path).write_bytes(case.data)
        bad = push(person, *(case.path for case in pushed), message=f"teammate: {what}")
        for name, host in hosts.items():
            synced = run(host, "sync", "--json", expected=1 if hostile else 0)
            rows = json.loads(synced.stdout or "[{}]")
            refused = {r["path"] for r in rows[0].get("refused") or ()}
            if refused != set(hostile):
                figures.wrong.append(f"{what}: {name} refused {sorted(refused)}")
            for case in pushed:
                here = host.skills / case.path
                applied = here.exists() and here.read_bytes() == case.data
                if applied == case.refused:
                    figures.wrong.append(f"{case.name}: {name}: applied is {applied}")
            doctor = run(host, "doctor", "--no-llm", expected=1 if hostile else 0)
            failing = [line for line in doctor.stdout.splitlines() if line.startswith("fail")]
            for path in hostile:
                if not any(f"refused: {path}: JSON {TOO_DEEP}" in line for line in failing):
                    figures.wrong.append(f"{what}: {name}: doctor does not name {path}")
            run(host, "status")
            run(host, "skills", "list", "--json")
            run(host, "skills", "write", f"{name}-{number}", "--description", "Meanwhile.",
                "--content", "1. Go.")  # fmt: skip
        figures.refused += len(hostile) * len(hosts)
        figures.accepted += (len(pushed) - len(hostile)) * len(hosts)
        plain_git("revert", "--no-edit", bad, cwd=person.clone)
        plain_git("push", "--quiet", "origin", "main", cwd=person.clone)
        for host in hosts.values():
            run(host, "sync")
    # Everything learned meanwhile reached the remote, and every host's shared files read.
    listed = set(plain_git("ls-tree", "-r", "--name-only", "main", cwd=remote).stdout.split())
    for name, host in hosts.items():
        for number in range(len(rounds)):
            if f"{name}-{number}/SKILL.md" not in listed:
                figures.wrong.append(f"{name}-{number} never reached the remote")
        for shared in (host.skills / ".skilld").rglob("*.json"):
            json.loads(shared.read_bytes())
    line = campaign_figures(
        "security hostile team JSON", cases=len(cases), rounds=len(rounds), hosts=len(hosts),
        refused=figures.refused, accepted=figures.accepted, crashed=len(figures.crashed),
        depth=depth, peak_rss_mib=round(figures.peak_kib / 1024),
    )  # fmt: skip
    assert figures.crashed == [], figures.crashed
    assert figures.wrong == [], figures.wrong
    assert figures.accepted == sum(not c.refused for r in rounds for c in r) * len(hosts), line
    assert figures.peak_kib < RSS_LIMIT_KIB, line
