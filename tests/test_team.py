"""A team learns together (issue 15, DESIGN.md §10) through the CLI: three hosts on one machine.

Each host is its own skilld installation (config, state dir, skills dir, sessions) with a
distinct `[sync] host`; all share one bare repository in tmp. They learn with `skilld once`
against the loopback LLM, change skills with `skilld skills …`, and meet only through
`skilld sync`. A teammate without skilld edits the repository from a plain clone.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skilld.skills.usage import UsageStore, format_timestamp
from skilld.sync.messages import trailers
from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, skill_reply, skip_reply
from tests.synchosts import Person, bare_remote, plain_git

#: A reflection's user message names its session; a merge request's, the skill and the session.
#: Each test here runs three hosts' syncs and ticks: 4 to 10 s.
pytestmark = pytest.mark.slow

SESSION = re.compile(r"^(?:Merge into \S+: session|Session) (\S+) \(")
#: What only ever lives on one host (DESIGN.md §10): never in the repository.
HOST_LOCAL = re.compile(r"(^|/)(\.usage\.json.*|\.usage\.journal|.*\.skilld-tmp-.*)$")


@dataclass
class Host(Workspace):
    """One teammate's machine: a skilld installation whose library is a work tree of `remote`.

    `table` declares the library as a `[[libraries]]` table (named "team") instead of the
    single `[skills]` library."""

    name: str = ""
    remote: Path | None = None
    table: bool = False
    layout: str = "dir"
    branch: str = "main"
    interval_seconds: float = 300

    def write_config(self) -> Path:
        library = {"dir": str(self.skills), "layout": self.layout}
        if self.remote is not None:
            library.update(remote=str(self.remote), branch=self.branch)
        self.settings = {
            "sync": {"host": self.name, "interval_seconds": self.interval_seconds},
            "llm": {"max_retries": 0},
            "log": {"level": "warning"},
        }
        source = {"kind": "jsonl", "path": str(self.sessions)}
        if self.table:
            self.libraries = [{"name": "team", **library}]
            source["library"] = "team"
        else:
            self.settings["skills"] = library
        self.sources = [source]
        return super().write_config()

    def ok(self, *args: str) -> str:
        result = self.cli(*args)
        assert result.returncode == 0, f"{self.name}: skilld {' '.join(args)}\n{result.stderr}"
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))

    def learn(self, session: str) -> None:
        """A finished session in this host's sessions dir, then one tick of the daemon."""
        self.add_session(session, conversation(session.replace("-", " ")))
        self.ok("once")

    def sync(self) -> dict[str, Any]:
        (row,) = self.json("sync")
        return row

    def read(self, skill: str) -> bytes:
        return (self.skills / skill / "SKILL.md").read_bytes()

    def skills_listed(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in self.json("skills", "list")}

    def git(self, *args: str) -> str:
        return plain_git(*args, cwd=self.skills).stdout


class Brain:
    """The loopback LLM's answers, by session: the skill that session teaches (a reflection
    proposes it; the merge request that follows for an existing skill gets the same text)."""

    def __init__(self, llm: FakeLLM) -> None:
        self.lessons: dict[str, tuple[str, str]] = {}
        llm.responder = self.respond

    def teach(self, session: str, skill: str, content: str) -> None:
        self.lessons[f"jsonl:{session}"] = (skill, content)

    def respond(self, request: dict[str, Any]) -> Reply:
        match = SESSION.match(request["messages"][1]["content"])
        lesson = self.lessons.get(match.group(1)) if match else None
        if lesson is None:
            return skip_reply()
        skill, content = lesson
        return skill_reply(skill, content, description=f"How to {skill.replace('-', ' ')}.")


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return bare_remote(tmp_path / "team.git")


@pytest.fixture
def brain(fake_llm: FakeLLM) -> Brain:
    return Brain(fake_llm)


@pytest.fixture
def team(tmp_path: Path, remote: Path, fake_llm: FakeLLM) -> list[Host]:
    """alpha and bravo use the single `[skills]` library, charlie a `[[libraries]]` table."""
    hosts = []
    for name, table in (("alpha", False), ("bravo", False), ("charlie", True)):
        host = Host(tmp_path / name, fake_llm.base_url, name=name, remote=remote, table=table)
        host.sessions.mkdir(parents=True)
        host.write_config()
        hosts.append(host)
    return hosts


def sync_round(hosts: list[Host]) -> list[dict[str, Any]]:
    rows = [host.sync() for host in hosts]
    assert [row["error"] for row in rows] == [None] * len(hosts)
    return rows


def remote_log(remote: Path) -> list[tuple[str, dict[str, str]]]:
    """(subject, Skilld-* trailers) of each commit on the remote's main, oldest first (none
    before the first push)."""
    log = plain_git("log", "--reverse", "--format=%B%x00", "main", cwd=remote, check=False).stdout
    commits = [message.strip() for message in log.split("\0") if message.strip()]
    return [(message.splitlines()[0], trailers(message)) for message in commits]


def remote_paths_ever(remote: Path) -> set[str]:
    """Every path any commit of the remote ever held."""
    names = plain_git("log", "--all", "--format=", "--name-only", cwd=remote).stdout
    return {line for line in names.splitlines() if line}


def skill_body(skill: bytes) -> str:
    return skill.decode().split("\n---\n", 1)[1]


# -- learning together ---------------------------------------------------------------------


def test_three_hosts_learn_and_after_two_rounds_everyone_holds_every_skill(
    team: list[Host], remote: Path, brain: Brain
) -> None:
    lessons = {"alpha": "rotate-tls-certs", "bravo": "bisect-flaky-test", "charlie": "vacuum-db"}
    for host in team:
        brain.teach(f"{host.name}-1", lessons[host.name], f"1. The {host.name} way.\n")
        host.learn(f"{host.name}-1")
        assert host.read(lessons[host.name])
        # Committed locally as it was written, before any sync.
        subject = host.git("log", "-1", "--format=%s")
        assert subject.strip() == f"created {lessons[host.name]}"
    assert remote_log(remote) == []  # learning never syncs: the daemon and `skilld sync` do

    sync_round(team)
    sync_round(team)

    originals = {skill: host.read(skill) for host in team for skill in [lessons[host.name]]}
    for host in team:
        for skill, data in originals.items():
            assert host.read(skill) == data, f"{skill} differs on {host.name}"
        listed = host.skills_listed()
        assert {name: listed[name]["owner"] for name in lessons.values()} == dict.fromkeys(
            lessons.values(), "managed"
        ), host.name
    heads = {host.git("rev-parse", "HEAD").strip() for host in team}
    assert heads == {plain_git("rev-parse", "main", cwd=remote).stdout.strip()}

    log = remote_log(remote)
    created = [(subject, t) for subject, t in log if t.get("Event") == "created"]
    assert sorted(subject for subject, _ in created) == sorted(
        f"created {skill}" for skill in lessons.values()
    )
    for host_name, skill in lessons.items():
        (found,) = [t for _, t in created if t["Skill"] == skill]
        assert found["Host"] == host_name
        assert found["Session"] == f"jsonl:{host_name}-1"
    # Each change is its own commit: nothing had to be swept up later as a leftover.
    events = [t.get("Event") for _, t in log]
    assert "recovered" not in events and "changed-by-hand" not in events
    assert events.count("joined") == 1

    ever = remote_paths_ever(remote)
    assert not [path for path in ever if HOST_LOCAL.search(path)]
    assert {f".skilld/usage/{host.name}.json" for host in team} <= ever
    for host in team:
        assert (host.skills / ".usage.json").exists()
        assert host.git("status", "--porcelain", "--untracked-files=all") == ""


def test_two_hosts_update_one_skill_all_converge_and_the_other_version_is_reachable(
    team: list[Host], remote: Path, brain: Brain
) -> None:
    alpha, bravo, charlie = team
    skill = "bisect-flaky-test"
    brain.teach("alpha-1", skill, "1. Run the test in a loop.\n")
    alpha.learn("alpha-1")
    sync_round(team)
    assert charlie.read(skill) == alpha.read(skill)

    brain.teach("alpha-2", skill, "1. Run the test in a loop.\n2. Alpha: pin the seed.\n")
    brain.teach("bravo-2", skill, "1. Run the test in a loop.\n2. Bravo: bisect commits.\n")
    alpha.learn("alpha-2")
    bravo.learn("bravo-2")
    bravo_version = bravo.read(skill)
    assert b"Bravo: bisect" in bravo_version and b"Alpha" not in bravo_version

    assert alpha.sync()["conflicts"] == []
    assert bravo.sync()["conflicts"] == [skill]
    sync_round(team)

    winner = alpha.read(skill)
    assert b"Alpha: pin the seed" in winner
    for host in team:
        assert host.read(skill) == winner, host.name
        assert b"<<<<<<<" not in host.read(skill) and b">>>>>>>" not in host.read(skill)
        assert host.skills_listed()[skill]["owner"] == "managed"

    (conflict,) = bravo.events("conflict")
    assert conflict["skill"] == skill
    detail = conflict["detail"]
    assert (detail["winner_host"], detail["loser_host"]) == ("alpha", "bravo")
    assert detail["winner"] == "remote"
    reason = conflict["reason"]
    assert reason.startswith("alpha's version kept")
    assert f"bravo's version is in history as {detail['loser_commit'][:12]}" in reason
    lost = detail["loser_commit"]
    assert plain_git("show", f"{lost}:{skill}/SKILL.md", cwd=remote).stdout.encode() == (
        bravo_version
    )

    # The losing version is in every host's history, and rollback reaches it.
    history = charlie.json("skills", "history", skill)
    assert lost in [version["commit"] for version in history]
    charlie.ok("skills", "rollback", skill, "--version", lost)
    assert charlie.read(skill) == bravo_version
    sync_round([charlie, alpha, bravo])
    for host in team:
        assert host.read(skill) == bravo_version, host.name
    assert f"rolled_back {skill}" in [subject for subject, _ in remote_log(remote)]

    # With no version named, rollback takes the newest one that differs from the file: the
    # git history holds the current version too.
    alpha.ok("skills", "rollback", skill)
    assert alpha.read(skill) == winner


def test_a_hand_edit_pushed_from_a_plain_clone_is_kept_and_protected_on_every_host(
    tmp_path: Path, team: list[Host], remote: Path, brain: Brain
) -> None:
    alpha = team[0]
    skill = "vacuum-db"
    brain.teach("alpha-1", skill, "1. Run VACUUM ANALYZE.\n")
    alpha.learn("alpha-1")
    sync_round(team)

    person = Person(tmp_path, remote)
    edited = alpha.read(skill).replace(b"1. Run VACUUM", b"1. Check bloat first.\n2. Run VACUUM")
    person.edit(f"{skill}/SKILL.md", edited, "vacuum-db: check bloat first")
    sync_round(team)

    for index, host in enumerate(team):
        assert host.read(skill) == edited, host.name
        assert host.skills_listed()[skill]["owner"] == "human", host.name
        brain.teach(f"{host.name}-2", skill, f"1. Just run VACUUM FULL ({index}).\n")
        host.learn(f"{host.name}-2")
        (protected,) = host.events("protected")
        assert protected["skill"] == skill
        assert host.read(skill) == edited
    sync_round(team)
    assert plain_git("show", f"main:{skill}/SKILL.md", cwd=remote).stdout.encode() == edited
    for host in team:
        assert host.read(skill) == edited


def test_uses_on_one_host_count_on_another_and_its_curator_keeps_what_a_teammate_uses(
    team: list[Host], remote: Path
) -> None:
    alpha, bravo = team[:2]
    # A person's writes on a library that never synced yet: each still its own commit.
    for skill in ("used-by-bravo", "used-by-nobody"):
        alpha.ok("skills", "write", skill, "--description", f"Skill {skill}.", "--content", "1.")
    sync_round([alpha, bravo])
    created = [t["Skill"] for _, t in remote_log(remote) if t.get("Event") == "created"]
    assert sorted(created) == ["used-by-bravo", "used-by-nobody"]

    for _ in range(3):
        bravo.ok("usage", "use", "used-by-bravo")
    sync_round([bravo, alpha])
    listed = alpha.skills_listed()
    assert listed["used-by-bravo"]["use_count"] == 3
    assert listed["used-by-nobody"]["use_count"] == 0

    # Both skills are old on alpha and alpha never used either: only the teammate's uses of
    # one of them keep it in the library.
    long_ago = format_timestamp(datetime.now(UTC) - timedelta(days=400))
    with UsageStore(alpha.skills).transaction() as records:
        for skill in ("used-by-bravo", "used-by-nobody"):
            records[skill]["created_at"] = long_ago
    report = alpha.json("curate")
    transitions = {(t["name"], t["kind"]) for t in report["lifecycle"][0]["transitions"]}
    assert ("used-by-nobody", "archived") in transitions
    assert not [t for t in transitions if t[0] == "used-by-bravo"]
    assert alpha.read("used-by-bravo")
    assert alpha.skills_listed()["used-by-nobody"]["state"] == "archived"

    # The archive is the team's: a teammate restores it, and it is skilld's again everywhere.
    sync_round([alpha, bravo])
    assert bravo.skills_listed()["used-by-nobody"]["state"] == "archived"
    bravo.ok("skills", "restore", "used-by-nobody")
    sync_round([bravo, alpha])
    for host in (bravo, alpha):
        row = host.skills_listed()["used-by-nobody"]
        assert (row["owner"], row["state"]) == ("managed", "active"), host.name


def test_with_the_remote_gone_learning_goes_on_and_the_next_good_sync_catches_up(
    team: list[Host], remote: Path, brain: Brain
) -> None:
    alpha, bravo = team[:2]
    brain.teach("alpha-1", "rotate-tls-certs", "1. Renew with certbot.\n")
    alpha.learn("alpha-1")
    sync_round([alpha, bravo])
    (before,) = alpha.json("status")["sync"]
    assert before["last_error"] is None and before["ahead"] == 0

    away = remote.with_name("moved.git")
    remote.rename(away)
    brain.teach("alpha-2", "drain-node", "1. Cordon, then drain.\n")
    alpha.learn("alpha-2")
    assert alpha.read("drain-node")
    failed = alpha.cli("sync")
    assert failed.returncode == 1
    assert "sync failed: default: fetch failed" in failed.stderr
    assert str(remote) in failed.stderr
    (status,) = alpha.json("status")["sync"]
    assert status["last_error"] and "fetch failed" in status["last_error"]
    assert status["ahead"] >= 1
    assert status["last_success"] == before["last_success"]
    assert [e["reason"] for e in alpha.events("error")][-1].startswith("sync: fetch failed")

    away.rename(remote)
    assert alpha.sync()["pushed"] >= 1
    assert "created drain-node" in [subject for subject, _ in remote_log(remote)]
    bravo.sync()
    assert bravo.read("drain-node") == alpha.read("drain-node")
    (status,) = alpha.json("status")["sync"]
    assert status["last_error"] is None and status["ahead"] == 0


def wait_for(condition: Callable[[], bool], what: str, *, seconds: float = 60) -> None:
    """Poll `condition` (a generous deadline only turns a hang into a failure)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_the_daemon_syncs_every_interval_what_the_cli_and_teammates_changed(
    team: list[Host], remote: Path
) -> None:
    alpha, bravo = team[:2]
    alpha.interval_seconds = 0.2
    alpha.write_config()
    daemon = alpha.popen("run")
    try:
        alpha.ok("skills", "write", "from-the-cli", "--description", "Mine.", "--content", "1.")
        wait_for(
            lambda: "created from-the-cli" in [s for s, _ in remote_log(remote)],
            "the daemon to push the CLI's write",
        )
        bravo.ok("skills", "write", "from-bravo", "--description", "Theirs.", "--content", "1.")
        bravo.sync()
        wait_for(lambda: (alpha.skills / "from-bravo" / "SKILL.md").exists(), "a pull")
        (status,) = alpha.json("status")["sync"]
        assert status["last_success"] and status["last_error"] is None
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=60)
    assert code == 0, daemon.stderr.read() if daemon.stderr else ""
    assert alpha.read("from-bravo") == bravo.read("from-bravo")
    assert alpha.skills_listed()["from-bravo"]["owner"] == "managed"


def test_doctor_reports_a_broken_work_tree_with_its_repair_and_never_resets_it(
    team: list[Host],
) -> None:
    alpha = team[0]
    alpha.branch = "team-skills"  # doctor checks the configured branch, not main
    alpha.write_config()
    for skill in ("first-skill", "second-skill"):
        alpha.ok("skills", "write", skill, "--description", f"Skill {skill}.", "--content", "1.")
    alpha.sync()
    assert alpha.cli("doctor", "--no-llm").returncode == 0

    head = alpha.git("rev-parse", "HEAD").strip()
    alpha.git("checkout", "--quiet", "--detach", "HEAD~1")
    doctor = alpha.cli("doctor", "--no-llm")
    assert doctor.returncode == 1
    assert "detached" in doctor.stdout
    assert f"git -C {alpha.skills} switch team-skills" in doctor.stdout
    assert alpha.cli("sync").returncode == 1
    assert plain_git("symbolic-ref", "-q", "HEAD", cwd=alpha.skills, check=False).returncode
    alpha.git("switch", "--quiet", "team-skills")
    assert alpha.git("rev-parse", "HEAD").strip() == head

    # A rebase a person started and left stopped (its exec step fails).
    stopped = plain_git("rebase", "--exec", "false", "HEAD~1", cwd=alpha.skills, check=False)
    assert stopped.returncode != 0
    in_progress = alpha.skills / ".git" / "rebase-merge"
    assert in_progress.is_dir()
    doctor = alpha.cli("doctor", "--no-llm")
    assert doctor.returncode == 1
    assert "a rebase was left unfinished" in doctor.stdout
    assert f"git -C {alpha.skills} rebase --abort" in doctor.stdout
    failed = alpha.cli("sync")
    assert failed.returncode == 1 and "rebase --abort" in failed.stderr
    (status,) = alpha.json("status")["sync"]
    assert any("rebase --abort" in problem for problem in status["problems"])
    assert in_progress.is_dir()  # reported, never reset
    alpha.git("rebase", "--abort")
    assert alpha.cli("doctor", "--no-llm").returncode == 0
    assert alpha.sync()["error"] is None


def test_an_existing_flat_library_joins_and_its_skills_stay_skillds_for_the_team(
    tmp_path: Path, remote: Path, fake_llm: FakeLLM, brain: Brain
) -> None:
    solo = Host(tmp_path / "solo", fake_llm.base_url, name="solo", layout="flat")
    solo.sessions.mkdir(parents=True)
    brain.teach("solo-1", "flush-dns", "1. Flush the resolver cache.\n")
    solo.learn("solo-1")
    learned = (solo.skills / "flush-dns.md").read_bytes()

    solo.remote = remote
    solo.write_config()
    assert solo.sync()["error"] is None
    teammate = Host(tmp_path / "mate", fake_llm.base_url, name="mate", remote=remote)
    teammate.sessions.mkdir(parents=True)
    teammate.sync()
    assert (teammate.skills / "flush-dns.md").read_bytes() == learned
    assert teammate.skills_listed()["flush-dns"]["owner"] == "managed"
    manifest = json.loads(plain_git("show", "main:.skilld/manifest.json", cwd=remote).stdout)
    assert manifest["skills"]["flush-dns"]["path"] == "flush-dns.md"
