"""Project roots and `evolve.projects` (DESIGN.md §9): resolved roots, segment globs, nested
repositories, roots that are never projects, skills dirs that lead out, repository globs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skilld.config import build_config
from skilld.fsutil import UnsafePath, real_subdir
from skilld.projects import (
    ProjectDecision,
    glob_match,
    pattern_kind,
    project_decision,
    resolve_pattern,
    skills_dir_state,
)
from skilld.routing import never_root_reason, project_root_of, project_skills_dir
from tests.test_libraries import Machine, by_session, claude_session, machine, proposal

__all__ = ["machine"]  # the fixture, shared with test_libraries


# -- the pure rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("/home/me/src/*", "/home/me/src/app", True),
        ("/home/me/src/*", "/home/me/src/app/vendor/lib", False),  # `*` is one segment
        ("/home/me/src/*", "/home/me/src", False),
        ("/home/me/src/*", "/home/me/outside", False),
        ("/home/me/src/**", "/home/me/src/app/vendor/lib", True),
        ("/home/me/src/**", "/home/me/src", True),  # `**` is any depth, none included
        ("/home/me/**/api", "/home/me/work/acme/api", True),
        ("/home/me/**/api", "/home/me/api", True),
        ("/home/me/**/api", "/home/me/work/api/sub", False),
        ("/home/me/src/app-*", "/home/me/src/app-one", True),
        ("/home/me/src/app-?", "/home/me/src/app-12", False),
        ("/home/me/src/[ab]pp", "/home/me/src/app", True),
        ("/home/me/src/app/", "/home/me/src/app", True),
        ("/home/me/src/app", "/home/me/src/App", False),
        ("github.com/acme/*", "github.com/acme/api", True),
        ("github.com/acme/*", "github.com/acme/api/extra", False),
        ("github.com/**", "github.com/acme/group/api", True),
        ("gitlab.com/acme/*", "github.com/acme/api", False),
    ],
)
def test_a_glob_matches_segment_by_segment(pattern: str, value: str, expected: bool) -> None:
    assert glob_match(pattern, value) is expected


def test_paths_and_repositories_are_told_apart_by_their_first_character(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORKDIR", "/srv/work")
    assert pattern_kind("/home/me/src/*") == "path"
    assert pattern_kind("github.com/acme/*") == "repository"
    config = build_config(
        {
            "evolve": {
                "projects": ["~/src/*", "./work/*", "$WORKDIR/api", "github.com/acme/*"],
            }
        },
        path=Path("/etc/skilld/config.toml"),
        environ={},
    )
    home = str(Path.home())
    assert config.evolve.projects == (
        f"{home}/src/*",
        "/etc/skilld/work/*",
        "/srv/work/api",
        "github.com/acme/*",
    )


@pytest.mark.parametrize(
    ("root", "why"),
    [
        ("/", "filesystem root"),
        ("/home/me", "home directory"),
        ("/home", "holds the home directory"),
        ("/etc", "system directory"),
        ("/etc/nginx", "system directory"),
        ("/usr", "system directory"),
        ("/usr/lib/python3", "system directory"),
        ("/var", "system directory"),
        ("/tmp", "system directory"),
        ("/proc/1/cwd", "system directory"),
        ("/tmp/work/app", None),
        ("/var/www/site", None),
        ("/home/me/src/app", None),
        ("/opt/app", None),
        ("/etcetera", None),
    ],
)
def test_some_roots_are_never_projects(root: str, why: str | None) -> None:
    reason = never_root_reason(Path(root), Path("/home/me"))
    assert (reason is None) if why is None else (reason is not None and why in reason)


def decide(root: str, state: str, *patterns: str, repository: str | None = None) -> ProjectDecision:
    return project_decision(
        Path(root),
        repository=repository,
        patterns=patterns,
        home=Path("/home/me"),
        skills_dir=Path(root) / ".claude" / "skills",
        skills_dir_state=state,
    )


def test_the_decision_names_its_reason() -> None:
    allowed = decide("/home/me/src/app", "missing", "/home/me/src/*")
    assert allowed.allowed and "matches evolve.projects entry '/home/me/src/*'" in allowed.reason
    assert decide("/home/me/src/app", "real").allowed  # already keeps skills
    refused = decide("/home/me/src/app/vendor/lib", "missing", "/home/me/src/*")
    assert refused == (False, "project /home/me/src/app/vendor/lib is not in evolve.projects")
    # Never a project, whatever the globs say, even one that keeps skills.
    assert not decide("/", "real", "/**").allowed
    assert not decide("/home/me", "real", "/home/**").allowed
    # A skills dir that is a link: refused even when the root is allowed by name.
    link = decide("/home/me/src/app", "/home/me/src/app/.claude is a symbolic link", "/home/me/**")
    assert not link.allowed and "symbolic link" in link.reason
    by_repo = decide("/x/clone", "missing", "github.com/acme/*", repository="github.com/acme/api")
    assert by_repo.allowed and "github.com/acme/api matches" in by_repo.reason
    assert decide("/x/c", "missing", "GitHub.com/Acme/*", repository="github.com/acme/api").allowed
    for written in ("https://github.com/acme/*", "git@github.com:acme/*", "github.com/acme/*.git"):
        assert decide("/x/c", "missing", written, repository="github.com/acme/api").allowed
    assert not decide("/x/c", "missing", "github.com/acme/*", repository="github.com/evil/api")[0]
    assert not decide("/x/c", "missing", "github.com/acme/*").allowed  # no remote


def test_a_pattern_resolves_its_literal_folders(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert resolve_pattern(f"{tmp_path}/link/src/*") == f"{real}/src/*"
    assert resolve_pattern(f"{tmp_path}/link/../real/*") == f"{real}/*"
    assert resolve_pattern("github.com/acme/*") == "github.com/acme/*"


# -- what is on disk ----------------------------------------------------------------------------


def test_a_root_is_found_from_the_resolved_cwd(tmp_path: Path) -> None:
    src = tmp_path / "src"
    app = src / "app"
    (app / ".git").mkdir(parents=True)
    (app / "vendor" / "lib" / ".git").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (src / "link").symlink_to(tmp_path / "outside")
    assert project_root_of(str(app / "pkg" / "deep")) == app  # need not exist
    assert project_root_of(f"{src}/../outside") == tmp_path / "outside"
    assert project_root_of(str(src / "link")) == tmp_path / "outside"
    assert project_root_of(f"{app}/../app/vendor/lib/x") == app / "vendor" / "lib"
    assert project_root_of("relative/dir") is None


def test_a_skills_dir_counts_only_when_real_all_the_way(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / ".claude").mkdir(parents=True)
    assert skills_dir_state(root, ".claude/skills") == "missing"
    (root / ".claude" / "skills").mkdir()
    assert skills_dir_state(root, ".claude/skills") == "real"
    assert project_skills_dir(root, ".claude/skills") == root / ".claude" / "skills"

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "skills").mkdir(parents=True)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".claude").symlink_to(elsewhere)  # a folder between the root and the dir
    assert "symbolic link" in skills_dir_state(linked, ".claude/skills")
    assert project_skills_dir(linked, ".claude/skills") is None
    (linked / ".agents").mkdir()
    (linked / ".agents" / "skills").symlink_to(linked / ".claude")  # inside, but a link
    assert "symbolic link" in skills_dir_state(linked, ".agents/skills")
    (linked / ".dsh").write_text("a file")
    assert "not a directory" in skills_dir_state(linked, ".dsh/skills")
    assert skills_dir_state(tmp_path / "gone", ".claude/skills") == (
        f"{tmp_path / 'gone'} is not a directory on this machine"
    )


def test_a_root_that_is_never_a_project_keeps_no_project_skills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The home (or `/`, or `/etc` with etckeeper's `.git`) may hold a real skills dir: it is
    still no project library, to show a session or to count its uses in."""
    home = tmp_path / "home"
    (home / ".claude" / "skills").mkdir(parents=True)
    (home / "repo" / ".claude" / "skills").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert project_skills_dir(home, ".claude/skills") is None
    assert project_skills_dir(tmp_path, "home/.claude/skills") is None  # above the home
    assert project_skills_dir(home / "repo", ".claude/skills") == home / "repo/.claude/skills"


def test_real_subdir_creates_folder_by_folder_and_never_through_a_link(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    assert real_subdir(root, (".claude", "skills"), create=True) == root / ".claude" / "skills"
    assert (root / ".claude" / "skills").is_dir()
    other = tmp_path / "other"
    other.mkdir()
    (root / ".agents").symlink_to(other)
    with pytest.raises(UnsafePath, match="symbolic link"):
        real_subdir(root, (".agents", "skills"), create=True)
    assert list(other.iterdir()) == []
    with pytest.raises(UnsafePath):
        real_subdir(root, ("..", "x"), create=True)
    assert real_subdir(tmp_path / "missing", (".claude",), create=True) is None


# -- through the CLI ----------------------------------------------------------------------------


def git_init(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    return path


def files_under(root: Path) -> dict[str, bytes]:
    """Every file below `root` (links not followed) with its bytes; links by their target."""
    found: dict[str, bytes] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            path = Path(folder, name)
            key = str(path.relative_to(root))
            found[key] = (
                f"-> {os.readlink(path)}".encode() if path.is_symlink() else path.read_bytes()
            )
    return found


def test_dotdot_links_and_nested_repositories_never_widen_a_glob(machine: Machine) -> None:
    """Finding 5 of issue 22: `~/src/*` allowed `~/src/../outside` and a vendored repository
    with its own `.git`; a link inside `~/src` led elsewhere. Only `~/src/app` is written."""
    home = machine.home
    app = git_init(home / "src" / "app")
    vendored = git_init(app / "vendor" / "lib")
    (home / "outside").mkdir()
    elsewhere = git_init(machine.root / "elsewhere")
    (home / "src" / "link").symlink_to(elsewhere)
    machine.write_config('[evolve]\nscope = "auto"\nprojects = ["~/src/*"]\n')
    sessions = {  # session -> (cwd as the transcript says it, skill)
        "dotdot": (f"{home}/src/../outside", "outside-fixtures"),
        "nested": (str(vendored), "vendored-fixtures"),
        "linked": (str(home / "src" / "link"), "linked-fixtures"),
        "app": (f"{home}/src/app/../app/pkg", "app-fixtures"),
    }
    replies = {}
    for key, (cwd, skill) in sessions.items():
        claude_session(home, f"{key}-0000", cwd, key)
        replies[f"claude-code:{key}-0000"] = proposal(
            skill, scope="project", description=f"Set up {key} before its tests."
        )
    machine.llm.responder = by_session(replies)
    before = {
        "outside": files_under(home / "outside"),
        "vendored": files_under(vendored),
        "elsewhere": files_under(elsewhere),
    }
    machine.ok("once")

    assert (app / ".claude" / "skills" / "app-fixtures" / "SKILL.md").is_file()
    assert [p.name for p in (app / ".claude" / "skills").iterdir() if p.is_dir()] == [
        "app-fixtures"
    ]
    after = {
        "outside": files_under(home / "outside"),
        "vendored": files_under(vendored),
        "elsewhere": files_under(elsewhere),
    }
    assert after == before
    created = {(e["skill"], e["library"]) for e in machine.events("created")}
    assert created == {("app-fixtures", f"claude@{app}")}
    staged = {e["skill"]: e for e in machine.events("staged")}
    assert set(staged) == {"outside-fixtures", "vendored-fixtures", "linked-fixtures"}
    expected_roots = {
        "outside-fixtures": home / "outside",
        "vendored-fixtures": vendored,
        "linked-fixtures": elsewhere,
    }
    for skill, root in expected_roots.items():
        assert staged[skill]["reason"] == f"project {root} is not in evolve.projects"
        assert staged[skill]["detail"]["target"] == str(root / ".claude" / "skills" / skill)
        assert staged[skill]["library"] == f"claude@{root}"


@pytest.mark.parametrize("where", ["root", "home"])
def test_the_filesystem_root_and_the_home_are_never_projects(machine: Machine, where: str) -> None:
    """`projects = ["/**"]` allows everything by name; `/` and the home directory (when the
    agent's library lives elsewhere) are still no projects: the lesson is staged. The project
    dir has a name of this test's own, so that a regression run as root leaves nothing in `/`
    but what the test removes."""
    home = machine.home
    project_dir = f".skilld-test-{os.getpid()}-{machine.root.name}"
    machine.write_config(
        f'[evolve]\nscope = "auto"\nprojects = ["/**"]\n\n[[libraries]]\nname = "claude"\n'
        f'dir = "{machine.root / "claude-skills"}"\nproject_dir = "{project_dir}"\n'
    )
    cwd = Path("/") if where == "root" else home
    claude_session(home, "top-0000", cwd, "top")
    machine.llm.responder = by_session(
        {"claude-code:top-0000": proposal("top-fixtures", scope="project")}
    )
    before = files_under(home)
    try:
        machine.ok("once")
        [staged] = machine.events("staged")
        assert staged["reason"] == (
            f"{cwd} is the {'filesystem root' if where == 'root' else 'home directory'}: "
            "never a project root"
        )
        assert machine.events("created") == []
        assert files_under(home) == before
        # A person approving it cannot put it there either.
        refused = machine.cli("review", "approve", "top-fixtures")
        assert refused.returncode != 0 and "never a project root" in refused.stderr
        assert not (cwd / project_dir).exists() and files_under(home) == before
    finally:
        if where == "root" and (Path("/") / project_dir).is_dir():
            shutil.rmtree(Path("/") / project_dir)


def test_a_skills_dir_that_links_out_never_counts_and_is_never_written(machine: Machine) -> None:
    """Finding 6 of issue 22: a cloned repository whose `.claude/skills` links to another
    agent's global library (or whose `.claude` links anywhere) "kept skills already", and a
    project lesson was written through the link, `.usage.json` and all."""
    home = machine.home
    agents = home / ".agents" / "skills"
    (agents / "codex-own").mkdir(parents=True)
    (agents / "codex-own" / "SKILL.md").write_text("---\nname: codex-own\n---\nMine.\n")
    outside = machine.root / "outside"
    outside.mkdir()
    cloned = git_init(home / "clones" / "cloned")  # not allowed; keeps "skills" through a link
    (cloned / ".claude").mkdir()
    (cloned / ".claude" / "skills").symlink_to(agents)
    allowed = git_init(home / "src" / "allowed")  # allowed by name, `.claude` links out
    (allowed / ".claude").symlink_to(outside)
    machine.write_config('[evolve]\nscope = "auto"\nprojects = ["~/src/*"]\n')
    replies = {}
    for key, cwd in (("cloned", cloned), ("allowed", allowed)):
        claude_session(home, f"{key}-0000", cwd, key)
        replies[f"claude-code:{key}-0000"] = proposal(
            f"{key}-fixtures", scope="project", description=f"Set up {key} before its tests."
        )
    machine.llm.responder = by_session(replies)
    before = {"agents": files_under(home / ".agents"), "outside": files_under(outside)}
    machine.ok("once")

    after = {"agents": files_under(home / ".agents"), "outside": files_under(outside)}
    assert after == before
    assert machine.events("created") == []
    staged = {e["skill"]: e["reason"] for e in machine.events("staged")}
    assert staged == {
        "cloned-fixtures": f"{cloned}/.claude/skills is a symbolic link: "
        f"project skills stay inside {cloned}",
        "allowed-fixtures": f"{allowed}/.claude is a symbolic link: "
        f"project skills stay inside {allowed}",
    }
    # The hook's bump from a session in the clone does not reach through the link either.
    hook = subprocess.run(
        [sys.executable, "-m", "skilld", "usage", "use", "codex-own"],
        env=machine.env(),
        cwd=cloned,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (hook.returncode, hook.stderr) == (0, ""), "the hook failed the agent's tool call"
    assert files_under(home / ".agents") == before["agents"], hook.stderr


def test_a_link_planted_after_the_decision_is_not_followed_at_write_time(
    machine: Machine,
) -> None:
    """A lesson staged for an allowed project; a pull then replaces `.claude` with a link to
    another agent's library. Approving it writes nothing through the link."""
    home = machine.home
    agents = home / ".agents" / "skills"
    agents.mkdir(parents=True)
    app = git_init(home / "src" / "app")
    machine.write_config('[evolve]\nscope = "auto"\npublish = "review"\nprojects = ["~/src/*"]\n')
    claude_session(home, "app-0000", app, "app")
    machine.llm.responder = by_session(
        {"claude-code:app-0000": proposal("app-fixtures", scope="project")}
    )
    machine.ok("once")
    [staged] = machine.events("staged")
    assert staged["detail"]["target"] == str(app / ".claude" / "skills" / "app-fixtures")

    (app / ".claude").symlink_to(home / ".agents")  # planted since the decision
    before = files_under(home / ".agents")
    refused = machine.cli("review", "approve", "app-fixtures")
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert f"{app}/.claude is a symbolic link" in refused.stderr
    assert files_under(home / ".agents") == before

    # Once the link is gone, the same approval writes into the project itself.
    (app / ".claude").unlink()
    approved = machine.ok("review", "approve", "app-fixtures")
    assert approved.startswith("created app-fixtures")
    assert (app / ".claude" / "skills" / "app-fixtures" / "SKILL.md").is_file()
    assert files_under(home / ".agents") == before


def test_a_project_library_whose_dir_became_a_link_is_no_longer_listed(
    machine: Machine,
) -> None:
    """A project written into once, its skills dir later replaced by a link to another agent's
    library: `skills list` no longer reads it as that project's, and a new lesson there is
    staged instead of written through it."""
    home = machine.home
    app = git_init(home / "src" / "app")
    machine.write_config('[evolve]\nscope = "auto"\nprojects = ["~/src/*"]\n')
    claude_session(home, "one-0000", app, "one")
    machine.llm.responder = by_session(
        {
            "claude-code:one-0000": proposal("app-fixtures", scope="project"),
            "claude-code:two-0000": proposal(
                "app-seeds", scope="project", description="Seed app's database first."
            ),
        }
    )
    machine.ok("once")
    assert [row["library"] for row in machine.json("skills", "list")] == [f"claude@{app}"]

    agents = home / ".agents" / "skills"
    agents.mkdir(parents=True)
    (agents / "codex-own").mkdir()
    (agents / "codex-own" / "SKILL.md").write_text("---\nname: codex-own\n---\nMine.\n")
    (app / ".claude" / "skills").rename(machine.root / "moved-away")
    (app / ".claude" / "skills").symlink_to(agents)
    before = files_under(home / ".agents")
    assert machine.json("skills", "list") == []
    claude_session(home, "two-0000", app, "two")
    machine.ok("once")
    [staged] = machine.events("staged")
    assert staged["skill"] == "app-seeds" and "symbolic link" in staged["reason"]
    assert files_under(home / ".agents") == before


def git_clone_of(path: Path, origin: str) -> Path:
    git_init(path)
    subprocess.run(
        ["git", "-C", str(path), "remote", "add", "origin", origin],
        check=True,
        capture_output=True,
    )
    return path


def test_a_repository_entry_allows_its_clones_wherever_they_are(machine: Machine) -> None:
    """Issue 24: `github.com/acme/*` names the repositories, not the folders they are cloned
    into; another owner's clone, and a repository nested in an allowed clone, are not them."""
    home = machine.home
    api = git_clone_of(machine.root / "anywhere" / "api", "git@github.com:acme/api.git")
    web = git_clone_of(home / "w" / "web", "https://bot:s3cret@github.com/Acme/web.git")
    evil = git_clone_of(home / "w" / "evil", "https://github.com/evil/api.git")
    vendored = git_clone_of(api / "vendor" / "lib", "https://github.com/other/lib.git")
    machine.write_config('[evolve]\nscope = "auto"\nprojects = ["github.com/acme/*"]\n')
    sessions = {"api": api / "src", "web": web, "evil": evil, "vendored": vendored}
    replies = {}
    for key, cwd in sessions.items():
        claude_session(home, f"{key}-0000", cwd, key)
        replies[f"claude-code:{key}-0000"] = proposal(
            f"{key}-fixtures", scope="project", description=f"Set up {key} before its tests."
        )
    machine.llm.responder = by_session(replies)
    before = {"evil": files_under(evil), "vendored": files_under(vendored)}
    machine.ok("once")

    created = {(e["skill"], e["library"]) for e in machine.events("created")}
    assert created == {("api-fixtures", f"claude@{api}"), ("web-fixtures", f"claude@{web}")}
    assert (api / ".claude" / "skills" / "api-fixtures" / "SKILL.md").is_file()
    assert (web / ".claude" / "skills" / "web-fixtures" / "SKILL.md").is_file()
    assert {"evil": files_under(evil), "vendored": files_under(vendored)} == before
    staged = {e["skill"]: e["reason"] for e in machine.events("staged")}
    assert staged == {
        "evil-fixtures": f"project {evil} is not in evolve.projects",
        "vendored-fixtures": f"project {vendored} is not in evolve.projects",
    }
    # The remote's user info is no part of anything skilld keeps or shows.
    assert "s3cret" not in machine.ok("events", "--json")


def test_every_write_into_a_project_library_looks_again(tmp_path: Path) -> None:
    """The decision saw real folders; a link planted afterwards stops the skill write, the
    usage sidecar's read-modify-write and the curator's archive alike."""
    from skilld.app import open_app
    from skilld.errors import LibraryError
    from skilld.skills.document import SkillDoc
    from skilld.skills.outcomes import Origin, WriteFailed, Written

    config = build_config(
        {
            "libraries": [
                {"name": "claude", "dir": str(tmp_path / "user"), "project_dir": ".claude/skills"}
            ],
            "sources": [{"kind": "claude-code", "path": str(tmp_path / "sessions")}],
            "state": {"dir": str(tmp_path / "state")},
        },
    )
    repo = git_init(tmp_path / "repo")
    other = tmp_path / "other"
    (other / "skills").mkdir(parents=True)
    doc = SkillDoc("setup-repo", "Set the repo up.", "When it is new.", "1. Run make.\n")
    with open_app(config) as app:
        library = app.project(app.libraries["claude"], repo)
        first = library.write(doc, Origin("cli"))
        assert isinstance(first, Written)
        assert first.path == repo / ".claude" / "skills" / "setup-repo" / "SKILL.md"
        library.usage.bump("setup-repo", "use")

        # A pull replaces `.claude` with a link to a library holding a skill of that name.
        os.rename(repo / ".claude", tmp_path / "moved")
        shutil.copytree(tmp_path / "moved" / "skills", other / "skills", dirs_exist_ok=True)
        (repo / ".claude").symlink_to(other)
        before = files_under(other)
        again = library.write(doc._replace(name="second-skill"), Origin("cli"))
        assert isinstance(again, WriteFailed) and "is a symbolic link" in again.reason
        with pytest.raises(LibraryError, match="is a symbolic link"):
            library.usage.bump("setup-repo", "use")
        with pytest.raises(LibraryError, match="is a symbolic link"):
            library.archive("setup-repo", Origin("curator"), reason="unused")
    assert files_under(other) == before
