"""Git context read from remotes, transcripts' values and a real repository's own files."""

from __future__ import annotations

from pathlib import Path

import pytest

from skilld.gitinfo import (
    GitContext,
    clean_branch,
    context,
    from_json,
    normalise_repository,
    observe,
    repository_of,
)
from tests.conftest import git


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/acme/api.git", "github.com/acme/api"),
        ("https://github.com/acme/api", "github.com/acme/api"),
        ("git@github.com:acme/api.git", "github.com/acme/api"),
        ("ssh://git@github.com:22/acme/api.git", "github.com/acme/api"),
        ("https://user:s3cr3t-token@GitHub.com/acme/api.git/", "github.com/acme/api"),
        (
            "https://oauth2:glpat-abc@gitlab.example.com/group/sub/repo",
            "gitlab.example.com/group/sub/repo",
        ),
        ("file:///srv/git/team.git", "/srv/git/team"),
        ("/srv/git/team.git", "/srv/git/team"),
        ("", None),
        ("not a remote", None),
        ("https://host/a\nb", None),
    ],
)
def test_normalise_repository(url: str, expected: str | None) -> None:
    assert normalise_repository(url) == expected


@pytest.mark.parametrize(
    ("branch", "expected"),
    [
        ("main", "main"),
        ("refs/heads/feat/x", "feat/x"),
        ("feat..x", None),
        ("a b", None),
        ("HEAD", None),
        ("x.lock", None),
        ("-rf", None),
        ("", None),
        ("a\nb", None),
    ],
)
def test_clean_branch(branch: str, expected: str | None) -> None:
    assert clean_branch(branch) == expected


def test_context_drops_implausible_values_and_round_trips() -> None:
    assert context(branch="a b", commit="xyz", how="recorded") is None
    ctx = context(
        repository="https://x:tok@h/o/r.git", branch="main", commit="A" * 40, how="recorded"
    )
    assert ctx == GitContext("h/o/r", "main", "a" * 40, "recorded")
    assert from_json(ctx.as_json()) == ctx
    assert from_json({"how": "guessed"}) is None
    assert from_json(None) is None


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "api"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "one")
    git(root, "remote", "add", "origin", "https://bob:ghp_SECRET@github.com/acme/api.git")
    (root / "src" / "deep").mkdir(parents=True)
    return root


def test_observe_reads_branch_commit_and_origin(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    assert observe(repo / "src" / "deep") == GitContext(
        "github.com/acme/api", "main", head, "observed"
    )
    git(repo, "checkout", "-q", "-b", "feat/x")
    (repo / "b.txt").write_text("b")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-q", "-m", "two")
    ctx = observe(repo)
    assert ctx is not None
    assert (ctx.branch, ctx.commit) == ("feat/x", git(repo, "rev-parse", "HEAD"))
    assert "SECRET" not in repr(ctx)
    assert repository_of(repo) == "github.com/acme/api"


def test_observe_reads_packed_refs_detached_heads_and_worktrees(repo: Path, tmp_path: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert observe(repo) == GitContext("github.com/acme/api", "main", head, "observed")
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "side"))
    assert observe(tmp_path / "side") == GitContext("github.com/acme/api", "side", head, "observed")
    git(repo, "checkout", "-q", "--detach")
    assert observe(repo) == GitContext("github.com/acme/api", None, head, "observed")


def test_observe_outside_a_repository_is_none(tmp_path: Path) -> None:
    assert observe(tmp_path) is None


def test_a_normalised_repository_is_its_own_normal_form() -> None:
    assert normalise_repository("GitHub.com/acme/api") == "github.com/acme/api"
    assert normalise_repository(normalise_repository("git@h:o/r.git") or "") == "h/o/r"
