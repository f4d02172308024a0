"""A hostile teammate with a plain clone of the team remote, three hosts (issue 22).

Three skilld installations share a library through one bare repository. A teammate pushes,
round after round, what a careless or hostile person could: symbolic links where skilld reads
and writes (`.gitignore`, `.skilld`, the host's own usage file, a skill folder, a SKILL.md, a
script), a gitlink, host-local files (`.usage.json`, its lock, the journal, temp files), git
configuration naming a filter driver through every file a remote controls (the
`.gitattributes` that names the driver is allowed, and must never run it), a file over the
size limit (1 MiB + 1 byte by default, 50 MB with --full), names with `..`, a newline and
bytes that are not UTF-8, a force-push, and a deleted branch. Trees are built with git's
plumbing, so nothing a client would refuse to create is out of reach.

After every round, on every host: the planted secret beside each library never appears in
`git log -p --all` of the remote, no file outside the libraries changed (nor the filter's
marker appeared), each host's `.usage.json` (pins and counts) is byte-identical, `skilld sync`
refused exactly the expected paths, and `skilld doctor` named each of them. Then the teammate
fixes the remote and every host syncs again. Every sync round is a real `skilld sync`
process, as a user's daemon or timer runs it, so nothing one process keeps can hide a bug;
the other commands run in this process (`cli.main`): the same command lines as `python -m
skilld`, without an interpreter start each.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog

from skilld import cli
from skilld.sync.incoming import MAX_FILE_BYTES, shown
from tests.synchosts import bare_remote, plain_git
from tests.test_team import Host

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- hostile-remote-campaign-7c1d"
HOSTS = ("alpha", "bravo", "charlie")
FULL_BIG_FILE = 50 * 1024 * 1024
USES = {"alpha": 1, "bravo": 2, "charlie": 3}

Entry = tuple[str, bytes]  # (mode, content): a blob, or for 160000 a commit id
OBJECT = b"object:"  # content that names an existing blob instead


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@dataclass
class Case:
    """One thing the teammate pushes; `refused` the paths (as skilld prints them) a round must
    refuse for it, none when the commit is fine to apply."""

    name: str
    add: dict[bytes, Entry] = field(default_factory=dict)
    remove: tuple[bytes, ...] = ()  # prefixes
    refused: tuple[str, ...] = ()


@dataclass
class Counts:
    cases: int = 0
    refused: int = 0
    leaked: int = 0
    lost: int = 0
    rounds: int = 0


class Team:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.remote = bare_remote(base / "team.git")
        self.marker = base / "filter-ran"
        self.hosts = {name: self._host(name) for name in HOSTS}
        self.clone = base / "teammate"
        self.counts = Counts()

    def _host(self, name: str) -> Host:
        host = Host(self.base / name, "http://127.0.0.1:9/v1", name=name, remote=self.remote)
        host.sessions.mkdir(parents=True)
        (host.root / "secret").mkdir()
        (host.root / "secret" / "id_rsa").write_bytes(SECRET + b"\n")
        (host.root / "outside").mkdir()
        host.write_config()
        return host

    # -- skilld, as its command line ---------------------------------------------------------

    def run(self, host: str, *args: str) -> Outcome:
        out, err = io.StringIO(), io.StringIO()
        config = str(self.hosts[host].config_path)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["--config", config, *args])
        return Outcome(code, out.getvalue(), err.getvalue())

    def ok(self, host: str, *args: str) -> str:
        outcome = self.run(host, *args)
        assert outcome.code == 0, f"{host}: skilld {' '.join(args)}: {outcome.err}"
        return outcome.out

    def sync(self, host: str) -> tuple[Outcome, dict[str, Any]]:
        """`skilld sync --json` as its own process."""
        done = subprocess.run(
            [sys.executable, "-m", "skilld", "--config", str(self.hosts[host].config_path),
             "sync", "--json"],
            env={k: v for k, v in os.environ.items() if not k.startswith("SKILLD_")},
            capture_output=True, timeout=120,
        )  # fmt: skip
        out, err = (done.stdout.decode(), done.stderr.decode("utf-8", "backslashreplace"))
        assert "Traceback" not in err, err
        [row] = json.loads(out)
        return Outcome(done.returncode, out, err), row

    # -- the teammate's plain clone ----------------------------------------------------------

    def git(self, *args: str, stdin: bytes | None = None) -> bytes:
        result = subprocess.run(
            ["git", *args], cwd=self.clone, input=stdin, capture_output=True, env=_person_env()
        )
        assert result.returncode == 0, f"git {args[0]}: {result.stderr.decode()}"
        return result.stdout

    def tip(self) -> str:
        """The remote's main as it is now."""
        self.git("fetch", "--quiet", "origin")
        return self.git("rev-parse", "origin/main").decode().strip()

    def push_tree(self, entries: dict[bytes, Entry], message: str, *, force: bool = False,
                  parent: str | None = None) -> str:  # fmt: skip
        tree = self._mktree(entries)
        parent = parent or self.tip()
        commit = self.git("commit-tree", tree, "-p", parent, "-m", message).decode().strip()
        self.git("push", "--quiet", *(["--force"] if force else []), "origin", f"{commit}:main")
        return commit

    def entries(self, commit: str) -> dict[bytes, Entry]:
        raw = self.git("ls-tree", "-r", "-z", commit)
        found: dict[bytes, Entry] = {}
        for record in raw.split(b"\0"):
            if record:
                meta, _, path = record.partition(b"\t")
                mode, _kind, object_id = meta.decode().split()
                found[path] = (mode, OBJECT + object_id.encode())
        return found

    def _mktree(self, entries: dict[bytes, Entry]) -> str:
        """A tree of `entries` (path -> mode and content or object id), nested as needed."""
        files: dict[bytes, Entry] = {}
        folders: dict[bytes, dict[bytes, Entry]] = {}
        for path, entry in entries.items():
            head, slash, rest = path.partition(b"/")
            if slash:
                folders.setdefault(head, {})[rest] = entry
            else:
                files[head] = entry
        lines = []
        for name, (mode, content) in files.items():
            if mode == "160000":
                object_id, kind = content, b"commit"
            elif content.startswith(OBJECT):
                object_id, kind = content.removeprefix(OBJECT), b"blob"
            else:
                object_id, kind = self._blob(content), b"blob"
            lines.append(mode.encode() + b" " + kind + b" " + object_id + b"\t" + name)
        for name, inner in folders.items():
            lines.append(b"040000 tree " + self._mktree(inner).encode() + b"\t" + name)
        return (
            self.git("mktree", "-z", stdin=b"".join(line + b"\0" for line in lines))
            .decode()
            .strip()
        )

    def _blob(self, content: bytes) -> bytes:
        return self.git("hash-object", "-w", "--stdin", stdin=content).strip()


def _person_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Pat", GIT_AUTHOR_EMAIL="pat@example.com",
        GIT_COMMITTER_NAME="Pat", GIT_COMMITTER_EMAIL="pat@example.com",
    )  # fmt: skip
    return env


def blob(content: bytes) -> Entry:
    return ("100644", content)


def link(target: str) -> Entry:
    return ("120000", target.encode())


def records(host: Host) -> dict[str, Any]:
    """The host's `.usage.json` records (skills learned during the campaign come and stay)."""
    loaded: dict[str, Any] = json.loads((host.skills / ".usage.json").read_bytes())
    return loaded


def snapshot(paths: list[Path], *, skip: tuple[Path, ...]) -> dict[str, str]:
    """Every file, folder and link under `paths` (but `skip`), by a digest of what it is."""
    found: dict[str, str] = {}
    for top in paths:
        for path in sorted([top, *top.rglob("*")]):
            if any(path == s or s in path.parents for s in skip):
                continue
            if path.is_symlink():
                found[str(path)] = "link:" + str(path.readlink())
            elif path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[str(path)] = "dir"
    return found


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    saved = structlog.get_config()
    yield Team(tmp_path)
    structlog.configure(**saved)


def hostile_cases(team: Team, big: int) -> list[list[Case]]:
    """The rounds: each a list of cases pushed together in one commit (a linked `.skilld`
    cannot share a tree with files below `.skilld/`; everything else can)."""
    marker = str(team.marker)
    filter_config = (
        f'[filter "evil"]\n\tsmudge = touch {marker}\n\tclean = touch {marker}\n\trequired\n'
        f'[diff "evil"]\n\ttextconv = touch {marker}\n[merge "evil"]\n\tdriver = touch {marker}\n'
        f"[core]\n\thooksPath = .\n\tfsmonitor = touch {marker}\n"
    ).encode()
    return [
        [
            Case("linked .skilld", {b".skilld": link("../../outside")}, (b".skilld/",),
                 (".skilld",)),
            Case("linked .gitignore", {b".gitignore": link("../../secret/id_rsa")},
                 (b".gitignore",), (".gitignore",)),
        ],
        [
            Case("linked skill folder", {b"evil": link("../../outside")}, (), ("evil",)),
            Case("linked SKILL.md", {b"fix-venv/SKILL.md": link("../../secret/id_rsa")},
                 (b"fix-venv/SKILL.md",), ("fix-venv/SKILL.md",)),
            Case("linked script", {b"fix-venv/scripts/run.sh": link("../../../secret/id_rsa")},
                 (), ("fix-venv/scripts/run.sh",)),
            Case("gitlink", {b"vendored": ("160000", b"0" * 39 + b"1")}, (), ("vendored",)),
            Case("linked usage file", {
                f".skilld/usage/{name}.json".encode(): link("../../../secret/id_rsa")
                for name in HOSTS
            }, tuple(f".skilld/usage/{n}.json".encode() for n in HOSTS),
                tuple(f".skilld/usage/{n}.json" for n in HOSTS)),
            Case(".usage.json", {b".usage.json": blob(b"{}\n")}, (), (".usage.json",)),
            Case("its lock", {b".usage.json.lock": blob(b"")}, (), (".usage.json.lock",)),
            Case("the journal", {b".usage.journal": blob(b"")}, (), (".usage.journal",)),
            Case("a temp file", {b".usage.json.tmp": blob(b"{}"),
                                 b"fix-venv/.SKILL.md.skilld-tmp-1-ab": blob(b"x")}, (),
                 (".usage.json.tmp", "fix-venv/.SKILL.md.skilld-tmp-1-ab")),
            Case("filter config", {
                b".gitmodules": blob(filter_config), b".lfsconfig": blob(filter_config),
                b".skilld/config": blob(filter_config), b"fix-venv/.gitconfig": blob(filter_config),
                b".git/config": blob(filter_config), b"fix-venv/.git/config": blob(filter_config),
            }, (), (".gitmodules", ".lfsconfig", ".skilld/config", "fix-venv/.gitconfig",
                    ".git/config", "fix-venv/.git/config")),
            Case("a big file", {b"fix-venv/big.bin": blob(b"\0" * big)}, (),
                 ("fix-venv/big.bin",)),
            Case("dot-dot", {b"fix-venv/../x": blob(b"x")}, (), ("fix-venv/../x",)),
            Case("newline", {b"fix-venv/line\nbreak.md": blob(b"x")}, (),
                 ("fix-venv/line\\nbreak.md",)),
            Case("not UTF-8", {b"fix-venv/\xff\xfe.md": blob(b"x")}, (),
                 (shown(b"fix-venv/\xff\xfe.md".decode("utf-8", "surrogateescape")),)),
            Case("not a skill", {b"notes.txt": blob(b"x"), b".archive/README.md": blob(b"x")},
                 (), ("notes.txt", ".archive/README.md")),
            Case("a skill file not UTF-8", {b"latin/SKILL.md": blob(
                b"---\nname: latin\ndescription: Caf\xe9.\n---\nx\n")}, (), ("latin/SKILL.md",)),
            Case("a ~~~! fence", {b"tilde/SKILL.md": blob(
                b"---\nname: tilde\ndescription: T.\n---\n~~~!\nid\n~~~\n")}, (),
                 ("tilde/SKILL.md",)),
        ],
    ]  # fmt: skip


@pytest.mark.slow
def test_a_hostile_remote_never_reaches_outside_a_library(
    team: Team, full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    # The team: alpha learns a skill, every host pins it and uses it, all sync.
    team.ok("alpha", "skills", "write", "fix-venv", "--description", "Fix a venv.",
            "--content", "1. Recreate it.")  # fmt: skip
    for name in HOSTS:
        team.ok(name, "sync")
    plain_git("clone", "--quiet", str(team.remote), str(team.clone), cwd=team.base)
    # The one thing a remote may bring beyond skills: a .gitattributes, which names drivers.
    # (A plain clone checks notes.md out as UTF-16 with CRLF line ends.)
    attributes = (
        b"* filter=evil diff=evil merge=evil ident\n*.md working-tree-encoding=UTF-16LE eol=crlf\n"
    )
    notes = b"Line one.\nLine two.\n"
    team.push_tree(
        {**team.entries(team.tip()), b".gitattributes": blob(attributes),
         b"fix-venv/notes.md": blob(notes)}, "attributes from a teammate",
    )  # fmt: skip
    for name in HOSTS:
        team.ok(name, "skills", "pin", "fix-venv")
        for _ in range(USES[name]):
            team.ok(name, "usage", "use", "fix-venv")
    for _ in range(2):
        for name in HOSTS:
            team.ok(name, "sync")
    for name, host in team.hosts.items():
        assert (host.skills / "fix-venv" / "notes.md").read_bytes() == notes, name
        assert (host.skills / ".gitattributes").read_bytes() == attributes
    usage = {name: records(host) for name, host in team.hosts.items()}
    outside = [team.base / name for name in HOSTS]
    skip = tuple(p for h in team.hosts.values() for p in (h.skills, h.state))
    before = snapshot(outside, skip=skip)

    def check_round(what: str) -> None:
        team.counts.rounds += 1
        history = plain_git("log", "-p", "--all", "--binary", cwd=team.remote).stdout
        team.counts.leaked += SECRET.decode() in history
        assert SECRET.decode() not in history, what
        assert not team.marker.exists(), f"{what}: a driver the remote named ran"
        assert snapshot(outside, skip=skip) == before, f"{what}: a file outside changed"
        for name, host in team.hosts.items():
            now = records(host)
            kept = {skill: now.get(skill) for skill in usage[name]}
            team.counts.lost += kept != usage[name]
            assert kept == usage[name], f"{what}: {name}'s pins and counts changed"

    def all_sync(what: str) -> None:
        for name in HOSTS:
            outcome, row = team.sync(name)
            assert outcome.code == 0 and row["error"] is None, f"{what}: {name}: {outcome.err}"
        check_round(what)

    big = FULL_BIG_FILE if full_size else MAX_FILE_BYTES + 1
    for cases in hostile_cases(team, big):
        what = ", ".join(case.name for case in cases)
        good = team.tip()
        entries = team.entries(good)
        for case in cases:
            entries = {p: e for p, e in entries.items() if not p.startswith(case.remove)}
        for case in cases:
            entries.update(case.add)
        bad = team.push_tree(entries, f"teammate: {what}")
        expected = {path for case in cases for path in case.refused}
        team.counts.cases += len(cases)
        for name in HOSTS:
            outcome, row = team.sync(name)
            refused = {r["path"] for r in row["refused"]}
            assert outcome.code == 1 and refused == expected, f"{what}: {name}: {row}"
            assert {r["commit"] for r in row["refused"]} == {bad}
            doctor = team.run(name, "doctor", "--no-llm")
            assert doctor.code == 1, f"{what}: {name}"
            failing = [line for line in doctor.out.splitlines() if line.startswith("fail")]
            for path in expected:
                assert any(f"refused: {path}:" in line for line in failing), (what, path)
            # Learning goes on locally while the remote is refused.
            team.ok(name, "skills", "write", f"{name}-{team.counts.rounds}",
                    "--description", "Learned meanwhile.", "--content", "1. Go.")  # fmt: skip
        team.counts.refused += len(expected)
        check_round(what)
        # The teammate fixes the remote: every host syncs again, doctor is content.
        team.push_tree(team.entries(good), f"undo: {what}", parent=bad)
        all_sync(f"after fixing {what}")
        assert team.run("alpha", "doctor", "--no-llm").code == 0

    # A force-push: reported with its repair, which publishes nothing of the old metadata.
    team.counts.cases += 1
    good = team.tip()
    # Squashed onto the first commit: no host's last sync is in the new history.
    [earlier] = team.git("rev-list", "--max-parents=0", good).decode().split()
    amended = team.push_tree(team.entries(good), "rewritten", force=True, parent=earlier)
    for name, host in team.hosts.items():
        outcome, row = team.sync(name)
        assert outcome.code == 1 and "rewritten" in row["error"], name
        doctor = team.run(name, "doctor", "--no-llm")
        [line] = [line for line in doctor.out.splitlines() if "rewritten" in line]
        repair = line.split("repair: ", 1)[1].removesuffix(" && skilld sync")
        assert str(host.skills) + "/.git " in repair and str(host.state) in repair
        subprocess.run(repair, shell=True, check=True)
    team.counts.refused += 1
    all_sync("after the rejoin")
    assert plain_git("merge-base", "--is-ancestor", amended, "main", cwd=team.remote)
    # Nothing skilld committed ever held git metadata (the teammate's refused commits did).
    ours = plain_git(
        "log", "--all", "--author=skilld", "--format=", "--name-only", cwd=team.remote
    ).stdout.splitlines()
    assert ours and not [p for p in ours if "skilld-aside" in p or ".git/" in p]

    # A deleted branch: the next round publishes the team's history again, nothing lost.
    # (Every host has what the remote held: a host whose last sync was not re-published
    # would report a rewritten remote, as above.)
    all_sync("everyone at the remote's tip")
    team.counts.cases += 1
    tip = plain_git("rev-parse", "main", cwd=team.remote).stdout.strip()
    plain_git("config", "receive.denyDeleteCurrent", "ignore", cwd=team.remote)
    team.git("push", "--quiet", "origin", ":main")
    all_sync("after the branch was deleted")
    assert plain_git("merge-base", "--is-ancestor", tip, "main", cwd=team.remote)
    for name in HOSTS:
        assert team.run(name, "doctor", "--no-llm").code == 0, name

    counts = team.counts
    assert (counts.leaked, counts.lost) == (0, 0)
    campaign_figures(
        "hostile remote", cases=counts.cases, refused=counts.refused, leaked=counts.leaked,
        lost=counts.lost, rounds=counts.rounds, big_file_bytes=big,
    )  # fmt: skip
