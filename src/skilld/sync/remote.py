"""The two network operations: fetch the shared branch, push to it (never with force).

A fetch lands in a private ref; the remote-tracking branch records the remote state this host
last integrated (the caller moves it after integrating, and a push moves it). A remote whose
branch no longer contains that state was rewritten (force-pushed): that is reported on every
sync, instead of being quietly adopted as the new truth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from skilld.sync.git import Git, GitError, one_line_reason
from skilld.sync.objects import is_ancestor

FETCHED_REF = "refs/skilld/fetched"
_SCP_LIKE = re.compile(r"^[^/:]+:")  # git@host:org/repo.git
_BRANCH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_RETRIABLE_REMOTE_REJECTIONS = ("failed to update ref", "cannot lock ref", "failed to lock")


def check_branch(branch: str) -> str:
    """`branch` when it is a plain branch name (it is pasted into refspecs: no `:`, `..`, `*`,
    spaces or leading dashes)."""
    parts = branch.split("/") if isinstance(branch, str) else [""]
    plain = all(_BRANCH_PART.fullmatch(p) and not p.endswith((".", ".lock")) for p in parts)
    if not plain or ".." in branch:
        raise ValueError(f"not a usable branch name: {branch!r}")
    return branch


def tracking_ref(branch: str) -> str:
    return f"refs/remotes/origin/{branch}"


def is_local_path(remote: str) -> bool:
    return "://" not in remote and not _SCP_LIKE.match(remote)


def normalise_remote(remote: str) -> str:
    """A URL as given; a local path made absolute (git would resolve a relative one against
    the library dir, not against where the config was written)."""
    if not remote or "\x00" in remote or "\n" in remote:
        raise ValueError(f"not a usable git remote: {remote!r}")
    return str(Path(remote).expanduser().absolute()) if is_local_path(remote) else remote


def same_remote(configured: str, actual: str) -> bool:
    if configured == actual:
        return True
    if is_local_path(configured) and is_local_path(actual):
        return Path(configured).resolve() == Path(actual).resolve()
    return False


class RemoteRewritten(GitError):
    """The remote's branch no longer contains what this host last fetched from it."""


@dataclass(frozen=True, slots=True)
class Fetched:
    previous: str | None  # the remote-tracking branch before this fetch
    tip: str | None  # None: the remote has no such branch yet (the first push creates it)


def fetch_branch(git: Git, branch: str) -> Fetched:
    previous = _resolve(git, tracking_ref(branch))
    result = git.run(
        # An empty --refmap keeps git from also moving the remote-tracking branch on its own.
        "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--refmap=", "origin",
        f"+refs/heads/{branch}:{FETCHED_REF}", check=False, network=True,
    )  # fmt: skip
    if result.returncode != 0:
        if "couldn't find remote ref" in result.stderr:
            return Fetched(previous, None)
        reason = one_line_reason(result.stderr, "git fetch failed")
        raise GitError(f"fetch failed: {reason}", args=("fetch",), stderr=result.stderr)
    tip = git.run("rev-parse", "--verify", FETCHED_REF).line
    if previous is not None and not is_ancestor(git, previous, tip):
        raise RemoteRewritten(
            f"the remote's {branch} was rewritten (force-pushed) since the last sync: "
            f"it no longer contains {previous[:12]}",
            args=("fetch",),
        )
    return Fetched(previous, tip)


def push_branch(git: Git, commit: str, branch: str) -> bool:
    """Push `commit` as the remote's `branch`, fast-forward only. True when it landed; False
    when someone pushed meanwhile (fetch and try again); GitError for any other refusal."""
    result = git.run(
        "push", "--porcelain", "--no-verify", "origin", f"{commit}:refs/heads/{branch}",
        check=False, network=True,
    )  # fmt: skip
    if result.returncode == 0:
        git.run("update-ref", tracking_ref(branch), commit)
        return True
    for line in result.text.splitlines():
        if not line.startswith("!"):
            continue
        summary = line.split("\t")[-1]
        if summary.startswith("[rejected]"):
            return False
        if any(reason in summary for reason in _RETRIABLE_REMOTE_REJECTIONS):
            return False
        raise GitError(f"the remote refused the push: {summary}", args=("push",))
    reason = one_line_reason(result.stderr, "git push failed")
    raise GitError(f"push failed: {reason}", args=("push",), stderr=result.stderr)


def _resolve(git: Git, ref: str) -> str | None:
    result = git.run("rev-parse", "--quiet", "--verify", f"{ref}^{{commit}}", check=False)
    return result.line or None
