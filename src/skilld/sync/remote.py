"""The two network operations: fetch the shared branch, push to it (never with force).

A fetch lands in a private ref; the remote-tracking branch records the remote state this host
last integrated (the caller moves it after integrating, and a push moves it). A remote whose
branch no longer contains that state was rewritten (force-pushed): that is reported on every
sync, instead of being quietly adopted as the new truth.

A remote's URL may carry credentials (`https://x-access-token:TOKEN@host/…`). git is told the
URL without them (so its `.git/config` never holds them) and gets them at run time
(`git.Credentials`).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from skilld.masking import masked_url
from skilld.sync.git import Credentials, Git, GitError, one_line_reason
from skilld.sync.objects import is_ancestor

FETCHED_REF = "refs/skilld/fetched"
_SCP_LIKE = re.compile(r"^[^/:]+:")  # git@host:org/repo.git
_BRANCH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_RETRIABLE_REMOTE_REJECTIONS = ("failed to update ref", "cannot lock ref", "failed to lock")
#: The schemes whose user info git sends as HTTP credentials (to ssh a user name is a login).
_CREDENTIAL_SCHEMES = ("http", "https")


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
        raise ValueError(f"not a usable git remote: {masked_url(remote)!r}")
    return str(Path(remote).expanduser().absolute()) if is_local_path(remote) else remote


def _userinfo_split(remote: str) -> tuple[str, str | None, str]:
    """`remote` without the user info of an http(s) URL; that user info (None: none); and the
    server it names, as `scheme://host[:port]/`."""
    scheme, separator, rest = remote.partition("://")
    if not separator or scheme.lower() not in _CREDENTIAL_SCHEMES:
        return remote, None, ""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    tail = rest[len(authority) :]
    userinfo, at, hostport = authority.rpartition("@")
    server = f"{scheme.lower()}://{hostport}/"
    if not at:
        return remote, None, server
    return f"{scheme}://{hostport}{tail}", userinfo, server


def without_credentials(remote: str) -> str:
    """`remote` as git is told it: an http(s) URL without its user info."""
    return _userinfo_split(remote)[0]


def split_credentials(remote: str) -> tuple[str, Credentials | None]:
    """`remote` without its user info, and the credentials that was (percent-decoded, as git
    would read them); ValueError for credentials git's credential protocol cannot carry."""
    url, userinfo, server = _userinfo_split(remote)
    if userinfo is None:
        return url, None
    username, _, password = (urllib.parse.unquote(part) for part in userinfo.partition(":"))
    if any(char in value for value in (username, password) for char in "\x00\r\n"):
        shown = masked_url(remote)
        raise ValueError(f"not a usable git remote (a control character in its user info): {shown}")
    return url, Credentials(server, username, password)


def same_remote(configured: str, actual: str) -> bool:
    """True when both name one repository (their credentials aside: those are the config's)."""
    configured, actual = without_credentials(configured), without_credentials(actual)
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
