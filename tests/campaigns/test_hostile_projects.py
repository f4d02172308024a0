"""Project campaign (issue 22, its project half): sessions whose working directory tries to
carry a project lesson somewhere it must not go.

One machine, one `skilld once` against a loopback model that answers every session with a
project-scoped skill of its own. The cwds go through `..` (out of an allowed folder, and back
into one), through links (out of one, into one), into repositories nested in allowed ones, to
`/`, the home directory, the folder above it, system directories, a folder that does not
exist, and into repositories whose skills dir is a link (to another agent's global library, out
of the machine's tree, back inside the repository itself) or sits below a link; repositories
are allowed by path glob, by repository glob, or by keeping skills already.

Invariants, checked case by case and then as a whole:
- a lesson is written only under the project dir of an allowed, resolved root, and its event
  names that root's library;
- every other lesson is staged, with a reason that says why;
- the whole temp tree outside the written project dirs and skilld's own folders is byte for
  byte what it was, and no system directory gained the project dir.

The claude library's project dir has a name of this run's own: a regression run as root would
leave nothing in `/` or `/etc` that the campaign does not remove.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.campaigns.test_security import tree
from tests.test_libraries import Machine, by_session, claude_session, machine, proposal

__all__ = ["machine"]  # the fixture, shared with test_libraries

#: Folders outside the temp tree that a session is sent to; none may gain the project dir.
SYSTEM_CWDS = ("/", "/etc", "/tmp", "/usr")


@dataclass(frozen=True)
class Case:
    name: str
    cwd: str
    #: ("written", the resolved root) or ("staged", a phrase its reason holds).
    expect: tuple[str, str]


def git(path: Path, origin: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    if origin is not None:
        subprocess.run(
            ["git", "-C", str(path), "remote", "add", "origin", origin],
            check=True,
            capture_output=True,
        )
    return path


def build_cases(machine: Machine, project_dir: str) -> list[Case]:
    """Lay the machine out and name every case; paths in the expectations are resolved."""
    home, top = machine.home, machine.root
    src = home / "src"
    agents = home / ".agents" / "skills"
    (agents / "codex-own").mkdir(parents=True)
    (agents / "codex-own" / "SKILL.md").write_text("---\nname: codex-own\n---\nCodex's own.\n")
    outside = top / "outside-target"
    (outside / "skills").mkdir(parents=True)
    (outside / "secret.txt").write_text("not skilld's\n")
    (home / "plain").mkdir(parents=True)

    app = git(src / "app")
    (app / "pkg" / "deep").mkdir(parents=True)
    vendored = git(app / "vendor" / "lib")
    app2 = git(src / "app2")
    (app2 / "sub").mkdir()
    app3 = git(src / "app3")
    (home / "shortcut").symlink_to(app3)
    elsewhere = git(top / "elsewhere")
    (src / "link-out").symlink_to(elsewhere)
    keeps = git(home / "clones" / "keeps")
    (keeps / project_dir).mkdir(parents=True)
    api = git(top / "anywhere" / "api-clone", "git@github.com:acme/api.git")
    evil = git(home / "clones" / "evil", "https://github.com/evil/api.git")

    first = project_dir.split("/")[0]
    to_global = git(home / "clones" / "to-global")  # not allowed by name: "keeps skills"
    (to_global / project_dir).parent.mkdir(parents=True)
    (to_global / project_dir).symlink_to(agents)
    allowed_global = git(src / "to-global")  # allowed by name; the folder above links out
    (allowed_global / first).symlink_to(home / ".agents")
    to_outside = git(src / "to-outside")
    (to_outside / project_dir).parent.mkdir(parents=True)
    (to_outside / project_dir).symlink_to(outside / "skills")
    to_itself = git(src / "to-itself")
    (to_itself / "docs").mkdir()
    (to_itself / project_dir).parent.mkdir(parents=True)
    (to_itself / project_dir).symlink_to(to_itself / "docs")
    by_repo_link = git(top / "anywhere" / "web-clone", "https://github.com/acme/web.git")
    (by_repo_link / first).symlink_to(outside)

    never = "never a project root"
    return [
        Case("allowed", str(app), ("written", str(app))),
        Case("allowed-deep", str(app / "pkg" / "deep"), ("written", str(app))),
        Case("dotdot-out", f"{src}/../plain", ("staged", "not in evolve.projects")),
        Case("dotdot-in", f"{home}/plain/../src/app2/sub", ("written", str(app2))),
        Case("dotdot-many", "/".join([str(app), *[".."] * len(app.parts)]), ("staged", never)),
        Case("link-out", str(src / "link-out"), ("staged", "not in evolve.projects")),
        Case("link-in", str(home / "shortcut"), ("written", str(app3))),
        Case("nested", str(vendored / "src"), ("staged", "not in evolve.projects")),
        Case("root", "/", ("staged", never)),
        Case("home", str(home), ("staged", never)),
        Case("above-home", str(top), ("staged", never)),
        *(Case(f"system{cwd}", cwd, ("staged", never)) for cwd in SYSTEM_CWDS[1:]),
        Case("gone", str(src / "gone"), ("staged", "not a directory on this machine")),
        Case("keeps", str(keeps), ("written", str(keeps))),
        Case("by-repo", str(api), ("written", str(api))),
        Case("other-owner", str(evil), ("staged", "not in evolve.projects")),
        Case("to-global", str(to_global), ("staged", "is a symbolic link")),
        Case("allowed-to-global", str(allowed_global), ("staged", "is a symbolic link")),
        Case("to-outside", str(to_outside), ("staged", "is a symbolic link")),
        Case("to-itself", str(to_itself), ("staged", "is a symbolic link")),
        Case("by-repo-link", str(by_repo_link), ("staged", "is a symbolic link")),
    ]


def test_project_lessons_land_only_in_allowed_resolved_roots(
    machine: Machine, campaign_figures: Callable[..., str]
) -> None:
    started = time.monotonic()
    project_dir = f".skilld-campaign-{os.getpid()}-{machine.root.name}/skills"
    first = project_dir.split("/")[0]
    cases = build_cases(machine, project_dir)
    machine.write_config(
        '[evolve]\nscope = "auto"\nprojects = ["~/src/*", "github.com/acme/*"]\n\n'
        f'[[libraries]]\nname = "claude"\nproject_dir = "{project_dir}"\n'
    )
    replies = {}
    for case in cases:
        key = case.name.replace("/", "-")
        # Texts unique to the case: the near-duplicate guard must keep two lessons apart.
        tag = hashlib.sha256(key.encode()).hexdigest()
        claude_session(machine.home, f"{key}-0000", case.cwd, key)
        replies[f"claude-code:{key}-0000"] = proposal(
            f"{key}-lesson",
            content=f"1. Open {tag[:16]}.\n2. Check {tag[16:32]}.\n",
            description=f"Procedure {tag[32:48]}.",
            scope="project",
        )
    machine.llm.responder = by_session(replies)
    # The folders an allowed project gains (its project dir, and the folder holding it).
    written_dirs = {Path(c.expect[1]) / first for c in cases if c.expect[0] == "written"}
    own = (
        machine.home / ".claude" / "skills",
        machine.root / "xdg-state",
        machine.root / "xdg-cache",
        *written_dirs,
    )
    before = tree(machine.root, skip=own)
    systems_before = {cwd: os.path.lexists(Path(cwd) / first) for cwd in SYSTEM_CWDS}
    try:
        machine.ok("once")
        created = {e["skill"]: e for e in machine.events("created")}
        staged = {e["skill"]: e for e in machine.events("staged")}
        systems_after = {cwd: os.path.lexists(Path(cwd) / first) for cwd in SYSTEM_CWDS}
    finally:
        for cwd in SYSTEM_CWDS:
            if not systems_before[cwd] and (Path(cwd) / first).is_dir():
                shutil.rmtree(Path(cwd) / first)

    wrong = []
    for case in cases:
        skill = f"{case.name.replace('/', '-')}-lesson"
        kind, expected = case.expect
        if kind == "written":
            event = created.get(skill)
            path = Path(expected) / project_dir / skill / "SKILL.md"
            if event is None or event["library"] != f"claude@{expected}" or not path.is_file():
                wrong.append(f"{case.name}: not written at {path} ({event})")
        else:
            event = staged.get(skill)
            if event is None or expected not in event["reason"]:
                wrong.append(f"{case.name}: not staged for {expected!r} ({event})")
    leaked = [
        f"{path}: {before.get(path)} -> {after}"
        for path, after in tree(machine.root, skip=own).items()
        if before.get(path) != after
    ] + [f"{path}: gone" for path in before if not os.path.lexists(path)]
    leaked += [f"{cwd}/{first} created" for cwd in SYSTEM_CWDS if systems_after[cwd]]
    seconds = time.monotonic() - started
    campaign_figures(
        "hostile projects",
        cases=len(cases),
        written=len(created),
        staged=len(staged),
        wrong=len(wrong),
        leaked=len(leaked),
        seconds=f"{seconds:.1f}",
    )
    assert wrong == []
    assert leaked == []
    assert len(created) + len(staged) == len(cases)
