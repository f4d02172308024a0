"""What can be wrong with a library's work tree, and the command a person runs to repair it.

skilld never repairs these itself: each one can hold a person's work (a detached HEAD with
commits, a half-done rebase, another remote on purpose), so it stops syncing, says what it
found, and gives the exact command. `rejoin` moves the git metadata aside, out of the work tree
(under the state dir: never where a join could stage it), and lets the next `skilld sync` join
the library to the remote afresh: every file of the work tree is kept, the remote's history is
taken as it is, and the old metadata stays on disk.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from skilld.masking import masked_url
from skilld.sync.git import Git, GitError
from skilld.sync.remote import same_remote, tracking_ref

#: Files git leaves in its dir while an operation waits for a person, and how to end each.
_IN_PROGRESS = (
    ("rebase-merge", "a rebase", "rebase --abort"),
    ("rebase-apply", "a rebase or am", "rebase --abort"),
    ("MERGE_HEAD", "a merge", "merge --abort"),
    ("CHERRY_PICK_HEAD", "a cherry-pick", "cherry-pick --abort"),
    ("REVERT_HEAD", "a revert", "revert --abort"),
)


@dataclass(frozen=True, slots=True)
class Problem:
    code: str  # not-a-repository, detached-head, wrong-branch, in-progress, no-remote,
    #            wrong-remote, unrelated-history, remote-rewritten, refused
    message: str
    repair: str  # a shell command

    def __str__(self) -> str:
        return f"{self.message}; to repair: {self.repair}"


def git_command(root: Path, *args: str) -> str:
    return shlex.join(["git", "-C", str(root), *args])


def rejoin_command(root: Path, aside: Path) -> str:
    """Move `root/.git` into a new folder under `aside` (each repair its own), then sync."""
    git_dir = shlex.quote(str(root / ".git"))
    folder = shlex.quote(str(aside))
    template = shlex.quote(str(aside / f"{root.name}.XXXXXX"))
    return f'mkdir -p {folder} && mv {git_dir} "$(mktemp -d {template})" && skilld sync'


def diagnose(
    git: Git, root: Path, *, branch: str, remote: str, aside: Path, history: bool = True
) -> list[Problem]:
    """The problems of an existing work tree (no network); empty when it can sync.

    `history=False` skips the check that the branch shares history with the remote-tracking
    branch: a sync round makes it itself, on the remote's current tip."""
    try:
        git_dir = Path(git.run("rev-parse", "--absolute-git-dir").line)
    except GitError as exc:
        return [
            Problem(
                "not-a-repository",
                f"{root}/.git is not a usable git repository ({exc.reason})",
                rejoin_command(root, aside),
            )
        ]
    problems: list[Problem] = []

    def found(code: str, message: str, *repair: str) -> None:
        problems.append(Problem(code, message, git_command(root, *repair)))

    for marker, what, fix in _IN_PROGRESS:
        if (git_dir / marker).exists():
            # Its detached HEAD and the rest are the operation's, and end with it.
            found("in-progress", f"{what} was left unfinished in {root}", *fix.split())
            return problems
    head = git.run("symbolic-ref", "--quiet", "HEAD", check=False).line
    if not head:
        found("detached-head", f"HEAD in {root} is detached (not on {branch})", "switch", branch)
    elif head != f"refs/heads/{branch}":
        current = head.removeprefix("refs/heads/")
        message = f"{root} is on {current}, not on {branch}"
        if git.ok("rev-parse", "--quiet", "--verify", f"refs/heads/{branch}"):
            found("wrong-branch", message, "switch", branch)
        else:
            found("wrong-branch", message, "branch", "--move", current, branch)
    url = git.run("config", "--get", "remote.origin.url", check=False).line
    # Either URL may hold a token: what is said and the repair are worded with masked URLs.
    shown = masked_url(remote)
    if not url:
        found("no-remote", f"{root} has no remote named origin", "remote", "add", "origin", shown)
    elif not same_remote(remote, url):
        message = f"{root} syncs with {masked_url(url)}, but the config says {shown}"
        found("wrong-remote", message, "remote", "set-url", "origin", shown)
    if history and head and _unrelated(git, tracking_ref(branch)):
        problems.append(unrelated_history(root, branch, aside))
    return problems


def unrelated_history(root: Path, branch: str, aside: Path) -> Problem:
    return Problem(
        "unrelated-history",
        f"the history of {root} shares no commit with the remote's {branch}",
        rejoin_command(root, aside),
    )


def remote_rewritten(root: Path, reason: str, aside: Path) -> Problem:
    return Problem("remote-rewritten", reason, rejoin_command(root, aside))


def _unrelated(git: Git, tracking: str) -> bool:
    """True when HEAD and the remote-tracking branch both exist and share no commit."""
    if not git.ok("rev-parse", "--quiet", "--verify", "HEAD^{commit}"):
        return False
    if not git.ok("rev-parse", "--quiet", "--verify", f"{tracking}^{{commit}}"):
        return False
    return not git.ok("merge-base", "HEAD", tracking)
