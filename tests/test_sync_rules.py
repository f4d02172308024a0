"""The pure parts of team sync: manifest format and merge, conflict rule, usage sum, layout."""

from __future__ import annotations

from typing import Any

import pytest

from skilld.sync.git import git_environment, one_line_reason
from skilld.sync.layout import (
    HOST_LOCAL_PATTERNS,
    InvalidHost,
    check_host,
    gitignore_text,
    skill_name_of_path,
)
from skilld.sync.manifest import (
    Manifest,
    ManifestEntry,
    ManifestError,
    merge_manifests,
    parse_manifest,
    render_manifest,
)
from skilld.sync.messages import change_message, trailers
from skilld.sync.remote import split_credentials
from skilld.sync.resolve import (
    FIRST_PUSHED_WINS,
    HAND_BEATS_MANAGED,
    JOIN_KEEPS_REMOTE,
    Candidate,
    decide,
    is_managed,
)
from skilld.sync.usage import parse_host_usage, render_host_usage, sum_usage

A, B, C = "a" * 64, "b" * 64, "c" * 64


def entry(name: str, digest: str) -> ManifestEntry:
    return ManifestEntry(f"{name}/SKILL.md", digest)


def manifest(**digests: str) -> Manifest:
    return Manifest(
        {name.replace("_", "-"): entry(name.replace("_", "-"), d) for name, d in digests.items()}
    )


def test_a_manifest_renders_one_skill_per_line_and_reads_back() -> None:
    original = manifest(fix_venv=A, lint=B)
    data = render_manifest(original)
    assert parse_manifest(data) == original
    assert data.count(b"\n") == 7 and b'"lint": {"path": "lint/SKILL.md"' in data
    assert parse_manifest(render_manifest(Manifest())) == Manifest()


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b"{not json", "not JSON"),
        (b'{"version": 2, "skills": {}}', "not a version 1 manifest"),
        (b'{"version": 1}', 'no "skills" object'),
        (b'{"version": 1, "skills": {"x": 3}}', "is not an object"),
        (b'{"version": 1, "skills": {"x": {"path": "x/SKILL.md", "sha256": "abc"}}}', "sha256"),
        (b'{"version": 1, "skills": {"x": {"path": "../x", "sha256": "' + A.encode() + b'"}}}',
         "not inside the library"),
        (b'{"version": 1, "skills": {"x": {"path": "/etc/x", "sha256": "' + A.encode() + b'"}}}',
         "not inside the library"),
        (b'{"version": 1, "skills": {".x": {"path": "x", "sha256": "' + A.encode() + b'"}}}',
         "not a skill name"),
    ],
)  # fmt: skip
def test_a_bad_manifest_is_refused_with_the_reason(data: bytes, complaint: str) -> None:
    with pytest.raises(ManifestError, match=complaint):
        parse_manifest(data)


def test_ownership_is_the_hash_skilld_wrote() -> None:
    team = manifest(deploy=A)
    assert team.owns("deploy", A)
    assert not team.owns("deploy", B)
    assert not team.owns("other", A)
    assert team.name_at("deploy/SKILL.md") == "deploy"
    assert team.changed({"deploy": None, "new": entry("new", C)}) == manifest(new=C)


def test_manifests_merge_key_by_key() -> None:
    base = manifest(kept=A, ours_changed=A, theirs_changed=A, both=A, ours_removed=A)
    ours = manifest(kept=A, ours_changed=B, theirs_changed=A, both=B, added_by_us=C)
    theirs = manifest(kept=A, ours_changed=A, theirs_changed=C, both=C, ours_removed=A)

    merged, contested = merge_manifests(base, ours, theirs)
    assert merged == manifest(kept=A, ours_changed=B, theirs_changed=C, both=C, added_by_us=C)
    assert contested == {"both"}
    local_wins, _ = merge_manifests(base, ours, theirs, ours_wins={"both"})
    assert local_wins.get("both") == entry("both", B)


def test_the_conflict_rule() -> None:
    hand, managed, removed_by_skilld = (
        Candidate(A, False),
        Candidate(B, True),
        Candidate(None, True),
    )
    assert decide(hand, managed, joining=False) == ("local", HAND_BEATS_MANAGED)
    assert decide(managed, hand, joining=False) == ("remote", HAND_BEATS_MANAGED)
    assert decide(managed, Candidate(C, True), joining=False) == ("remote", FIRST_PUSHED_WINS)
    assert decide(hand, Candidate(C, False), joining=False) == ("remote", FIRST_PUSHED_WINS)
    assert decide(removed_by_skilld, managed, joining=False) == ("remote", FIRST_PUSHED_WINS)
    assert decide(hand, managed, joining=True) == ("remote", JOIN_KEEPS_REMOTE)


def test_what_counts_as_skillds_version() -> None:
    mine, other = manifest(x=A), manifest(x=B)
    assert is_managed("x", "x/SKILL.md", A, mine, other)
    assert is_managed("x", "x/SKILL.md", B, mine, other)  # the other side's manifest counts too
    assert not is_managed("x", "x/SKILL.md", C, mine, other)
    assert not is_managed(None, "README.md", A, mine, other)
    # A removal is skilld's when its manifest no longer points there (deleted, archived)...
    archived = Manifest({"x": ManifestEntry(".archive/x/SKILL.md", A)})
    assert is_managed("x", "x/SKILL.md", None, archived, other)
    assert is_managed("x", "x/SKILL.md", None, Manifest(), other)
    # ...and a person's when the manifest still lists the file.
    assert not is_managed("x", "x/SKILL.md", None, mine, other)


def test_team_usage_adds_counts_and_keeps_the_newest_times() -> None:
    local = {
        "deploy": {"use_count": 2, "view_count": 1, "last_used_at": "2025-01-02T00:00:00+00:00",
                   "pinned": True, "state": "active", "custom": [1]},
    }  # fmt: skip
    laptop: dict[str, dict[str, Any]] = {
        "deploy": {"use_count": 3, "patch_count": 1, "last_used_at": "2025-01-01T00:00:00+00:00",
                   "last_viewed_at": "2025-02-01T00:00:00Z"},
        "only-there": {"use_count": 5},
    }  # fmt: skip
    desktop: dict[str, dict[str, Any]] = {
        "deploy": {"use_count": "garbage", "last_used_at": "not a time"}
    }

    team = sum_usage(local, [laptop, desktop])

    assert team["deploy"]["use_count"] == 5
    assert team["deploy"]["view_count"] == 1 and team["deploy"]["patch_count"] == 1
    assert team["deploy"]["last_used_at"] == "2025-01-02T00:00:00+00:00"
    assert team["deploy"]["last_viewed_at"] == "2025-02-01T00:00:00Z"
    assert (team["deploy"]["pinned"], team["deploy"]["custom"]) == (True, [1])
    assert team["only-there"]["use_count"] == 5
    assert local["deploy"]["use_count"] == 2  # the caller's records are not touched


def test_a_host_publishes_only_its_counters() -> None:
    records = {
        "deploy": {"use_count": 3, "last_used_at": "2025-01-02T00:00:00+00:00", "pinned": True,
                   "state": "archived", "created_by": "agent", "last_viewed_at": "bad"},
    }  # fmt: skip
    data = render_host_usage("laptop", records)
    published = parse_host_usage(data)
    assert published == {
        "deploy": {"use_count": 3, "view_count": 0, "patch_count": 0,
                   "last_used_at": "2025-01-02T00:00:00+00:00", "last_viewed_at": None,
                   "last_patched_at": None},
    }  # fmt: skip
    assert render_host_usage("laptop", records) == data


def test_the_team_s_uses_by_day_are_the_sum_over_its_hosts() -> None:
    local = {"deploy": {"use_count": 2, "uses_by_day": {"2025-01-01": 2}}}
    laptop = {"deploy": {"use_count": 1, "uses_by_day": {"2025-01-01": 1}}}
    desktop = {"deploy": {"use_count": 4, "uses_by_day": {"2025-01-02": 3, "bad": "x"}}}
    published = parse_host_usage(render_host_usage("desktop", desktop))
    assert published["deploy"]["uses_by_day"] == {"2025-01-02": 3}
    team = sum_usage(local, [laptop, published])
    assert team["deploy"]["uses_by_day"] == {"2025-01-01": 3, "2025-01-02": 3}
    assert local["deploy"]["uses_by_day"] == {"2025-01-01": 2}


def test_gitignore_keeps_a_persons_lines_and_holds_one_current_block() -> None:
    once = gitignore_text("*.bak\n")
    assert once.startswith("*.bak\n")
    assert all(pattern in once.splitlines() for pattern in HOST_LOCAL_PATTERNS)
    assert gitignore_text(once) == once
    stale = once.replace(".usage.journal\n", "")
    assert gitignore_text(stale + "notes/\n") == once + "notes/\n"
    assert gitignore_text("") == gitignore_text("").lstrip()


@pytest.mark.parametrize(
    ("path", "name"),
    [("fix/SKILL.md", "fix"), ("devops/fix/SKILL.md", "fix"), ("fix.md", "fix"),
     ("notes/readme.md", None), (".gitignore", None), ("fix/script.sh", None)],
)  # fmt: skip
def test_a_skill_is_named_by_the_shape_of_its_path(path: str, name: str | None) -> None:
    assert skill_name_of_path(path) == name


def test_host_ids_name_a_file_and_an_email() -> None:
    assert check_host("build-01.example") == "build-01.example"
    for bad in ("", ".hidden", "a/b", "a b", "x" * 64, "naïve"):
        with pytest.raises(InvalidHost):
            check_host(bad)


def test_commit_messages_carry_their_facts_as_trailers() -> None:
    message = change_message("updated", "fix-venv", host="laptop", session="abc\ninjected: 1")
    assert message.splitlines()[0] == "updated fix-venv"
    assert trailers(message) == {
        "Event": "updated", "Skill": "fix-venv", "Session": "abc injected: 1", "Host": "laptop",
    }  # fmt: skip
    hand = change_message("changed-by-hand", None, host="h", subject="changed by hand on h",
                          paths=["a/SKILL.md"])  # fmt: skip
    assert hand.startswith("changed by hand on h\n\n  a/SKILL.md\n\n")


def test_git_runs_without_the_users_config_prompts_or_git_variables() -> None:
    env = git_environment(
        "laptop", {"HOME": "/home/u", "GIT_DIR": "/x", "GIT_SSH_COMMAND": "ssh -i key"}
    )
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_ASKPASS"] == ""
    assert env["GIT_SSH_COMMAND"] == "ssh -i key -o BatchMode=yes"
    assert env["GIT_AUTHOR_EMAIL"] == env["GIT_COMMITTER_EMAIL"] == "skilld@laptop"
    assert "GIT_DIR" not in env and env["HOME"] == "/home/u"


def test_a_git_failure_reads_as_one_line() -> None:
    stderr = (
        "hint: try this\nfatal: 'x' does not appear to be a git repository\nfatal: Could not read"
    )
    assert one_line_reason(stderr, "fallback") == "'x' does not appear to be a git repository"
    assert one_line_reason("", "fallback") == "fallback"


@pytest.mark.parametrize(
    ("remote", "told", "credentials"),
    [
        ("https://u%40co:p%3Aw@h:8/a?x=1", "https://h:8/a?x=1", ("https://h:8/", "u@co", "p:w")),
        ("http://Lone@[::1]:3/p#f", "http://[::1]:3/p#f", ("http://[::1]:3/", "Lone", "")),
        ("https://h/a.git", "https://h/a.git", None),
        ("ssh://git@h/a.git", "ssh://git@h/a.git", None),
        ("git@h:a.git", "git@h:a.git", None),
    ],
)  # fmt: skip
def test_git_is_told_the_url_without_its_credentials(
    remote: str, told: str, credentials: tuple[str, str, str] | None
) -> None:
    url, given = split_credentials(remote)
    assert url == told
    if credentials is None:
        assert given is None
    else:
        assert given is not None
        assert (given.scope, given.username, given.password) == credentials
        assert repr(given) == f"Credentials(scope={given.scope!r})"  # never in a log line
