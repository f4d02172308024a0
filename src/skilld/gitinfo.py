"""Where a session worked, in git's terms: repository, branch and commit.

Two ways to know it. A transcript may say (`recorded`: Claude Code's `gitBranch`, a Codex
rollout's `session_meta.git`); otherwise the session's working directory may be inside a
repository on this machine, whose own files say what it holds now (`observed`). Reading those
files (`HEAD`, loose refs, `packed-refs`, the `origin` remote in `config`) costs a few small
reads and no process, so it can be done per session.

A repository on disk is untrusted (anyone's clone): every read here is bounded, a value that is
not plausibly a branch or a commit is dropped, and a remote URL loses its user info (a token,
often) before it leaves this module. `repository` is the remote normalised to `host/owner/repo`:
`git@host:owner/repo.git`, `ssh://git@host:22/owner/repo` and `https://user:token@host/owner/repo`
are all `host/owner/repo`, so a person can name "the acme/api repository" wherever it is cloned.
"""

import os
import re
import stat
from pathlib import Path
from typing import Literal, NamedTuple

How = Literal["recorded", "observed"]

#: The most of a git metadata file read; more is not a repository skilld should trust.
_MAX_SMALL_FILE = 64 * 1024
_MAX_PACKED_REFS = 8 * 1024 * 1024
_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[^:/\s]+):(?P<path>(?!//).+)$")
_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$")
_NORMALISED = re.compile(r"^(?P<host>[A-Za-z0-9.-]+)(?P<path>(?:/[^/\s@]+)+)$")


class GitContext(NamedTuple):
    """What a window's session was working on; any field may be unknown (None)."""

    repository: str | None  # normalised remote, `host/owner/repo`; never holds user info
    branch: str | None
    commit: str | None
    how: How

    def as_json(self) -> dict[str, str | None]:
        return {
            "repository": self.repository,
            "branch": self.branch,
            "commit": self.commit,
            "how": self.how,
        }


def from_json(value: object) -> GitContext | None:
    """The inverse of `GitContext.as_json`, for what state.db and events keep; None for
    anything else (an older row, a hand-edited value)."""
    if not isinstance(value, dict):
        return None
    how = value.get("how")
    if how not in ("recorded", "observed"):
        return None
    return context(
        repository=value.get("repository"),
        branch=value.get("branch"),
        commit=value.get("commit"),
        how=how,
    )


def context(
    *, repository: object = None, branch: object = None, commit: object = None, how: How
) -> GitContext | None:
    """A context from untrusted values (a transcript's fields, a repository's files): the
    remote normalised, the branch and commit kept only when they are plausible. None when
    nothing is left."""
    normalised = normalise_repository(repository) if isinstance(repository, str) else None
    kept_branch = clean_branch(branch) if isinstance(branch, str) else None
    kept_commit = commit.lower() if isinstance(commit, str) and _is_commit(commit.lower()) else None
    if normalised is None and kept_branch is None and kept_commit is None:
        return None
    return GitContext(normalised, kept_branch, kept_commit, how)


def completed(recorded: GitContext | None, observed: GitContext | None) -> GitContext | None:
    """A window's context: what its transcript recorded, its gaps filled from what the
    session's repository holds now (its origin; its commit only while it is still on the
    recorded branch), else what the repository holds."""
    if recorded is None:
        return observed
    if observed is None:
        return recorded
    commit = recorded.commit
    if commit is None and recorded.branch is not None and recorded.branch == observed.branch:
        commit = observed.commit
    return recorded._replace(repository=recorded.repository or observed.repository, commit=commit)


def normalise_repository(url: str) -> str | None:
    """`host/owner/repo` for a remote URL (scheme, user info, port and `.git` dropped); a local
    path stays a path (without `.git`). None for something that is not a remote at all."""
    url = url.strip()
    if not url or len(url) > 2048 or any(ord(ch) < 0x20 or ch == "\x7f" for ch in url):
        return None
    match = _URL.match(url)
    if match:
        scheme, rest = match["scheme"].lower(), match["rest"]
        if scheme == "file":
            return _strip_git_suffix(rest) or None
        authority, _, path = rest.partition("/")
        host = authority.rpartition("@")[2]  # user info (a token, often) never survives
        host = _without_port(host).lower()
        path = _strip_git_suffix(path.strip("/"))
        if not host:
            return None
        return f"{host}/{path}" if path else host
    if url.startswith(("/", "~", ".")):
        return _strip_git_suffix(url) or None
    normalised = _NORMALISED.match(url)
    if normalised:  # already `host/owner/repo`
        return f"{normalised['host'].lower()}{_strip_git_suffix(normalised['path'])}"
    scp = _SCP_LIKE.match(url)
    if scp:
        path = _strip_git_suffix(scp["path"].strip("/"))
        return f"{scp['host'].lower()}/{path}" if path else None
    return None


def clean_branch(branch: str) -> str | None:
    """A branch name as git allows it (`refs/heads/` dropped), or None."""
    branch = branch.strip().removeprefix("refs/heads/")
    if (
        not branch
        or len(branch) > 255
        or branch in ("HEAD", "@")
        or branch.startswith(("-", "/"))
        or branch.endswith(("/", ".", ".lock"))
        or ".." in branch
        or "//" in branch
        or "@{" in branch
        or any(ord(ch) < 0x20 or ch == "\x7f" or ch in " ~^:?*[\\" for ch in branch)
    ):
        return None
    return branch


def find_root(path: Path) -> Path | None:
    """The nearest directory at or above `path` holding `.git` (a folder, or a file naming the
    git dir as worktrees and submodules have), or None."""
    for directory in (path, *path.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


def observe(cwd: str | os.PathLike[str]) -> GitContext | None:
    """What the repository holding `cwd` holds now, read from its files; None outside one."""
    root = find_root(Path(os.path.realpath(cwd)))
    if root is None:
        return None
    return observe_root(root)


def observe_root(root: Path) -> GitContext | None:
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    common = _common_dir(git_dir)
    branch, commit = _head(git_dir, common)
    return context(repository=origin_url(root), branch=branch, commit=commit, how="observed")


def origin_url(root: Path) -> str | None:
    """The raw `origin` URL in the repository's config (it may hold user info: normalise or
    redact it before it goes anywhere)."""
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    text = _read_small(_common_dir(git_dir) / "config")
    return _remote_url(text, "origin") if text is not None else None


def repository_of(root: Path) -> str | None:
    """The normalised `origin` of the repository at `root`, or None."""
    url = origin_url(root)
    return normalise_repository(url) if url else None


def _git_dir(root: Path) -> Path | None:
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    text = _read_small(dot_git)
    if text is None or not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:") :].strip())
    target = target if target.is_absolute() else root / target
    return target if target.is_dir() else None


def _common_dir(git_dir: Path) -> Path:
    text = _read_small(git_dir / "commondir")
    if text is None or not text.strip():
        return git_dir
    target = Path(text.strip())
    target = target if target.is_absolute() else git_dir / target
    return target if target.is_dir() else git_dir


def _head(git_dir: Path, common: Path) -> tuple[str | None, str | None]:
    text = _read_small(git_dir / "HEAD")
    if text is None:
        return None, None
    head = text.strip()
    if _is_commit(head):
        return None, head  # detached
    if not head.startswith("ref:"):
        return None, None
    ref = head[len("ref:") :].strip()
    if not ref.startswith("refs/heads/"):
        return None, None
    branch = clean_branch(ref)
    if branch is None:
        return None, None
    return branch, _resolve_ref(ref, git_dir, common)


def _resolve_ref(ref: str, git_dir: Path, common: Path) -> str | None:
    for directory in dict.fromkeys((git_dir, common)):
        loose = _read_small(directory / ref)
        if loose is not None and _is_commit(loose.strip()):
            return loose.strip()
    packed = _read_small(common / "packed-refs", limit=_MAX_PACKED_REFS)
    for line in (packed or "").splitlines():
        sha, _, name = line.partition(" ")
        if name.strip() == ref and _is_commit(sha):
            return sha
    return None  # an unborn branch: no commit yet


def _remote_url(config: str, remote: str) -> str | None:
    """`remote.<name>.url` from git's config syntax (the subset a remote uses)."""
    section: str | None = None
    url: str | None = None
    for raw in config.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            header = line[1 : line.find("]")] if "]" in line else ""
            kind, _, sub = header.partition(" ")
            section = f"{kind.lower()}.{sub.strip().strip(chr(34))}" if sub else kind.lower()
            continue
        key, sep, value = line.partition("=")
        if sep and section == f"remote.{remote}" and key.strip().lower() == "url":
            url = _config_value(value)  # the last one wins, as in git
    return url


def _config_value(value: str) -> str:
    value = value.strip()
    for marker in (" #", " ;", "\t#", "\t;"):
        if marker in value and not value.startswith('"'):
            value = value[: value.index(marker)].rstrip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value


def _read_small(path: Path, *, limit: int = _MAX_SMALL_FILE) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None  # a fifo or a device would block or never end
            data = handle.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    return data.decode("utf-8", errors="replace")


def _is_commit(value: str) -> bool:
    return _COMMIT.fullmatch(value) is not None


def _without_port(host: str) -> str:
    if host.startswith("["):  # an IPv6 literal
        return host[: host.find("]") + 1] if "]" in host else host
    return host.partition(":")[0]


def _strip_git_suffix(path: str) -> str:
    path = path.rstrip("/")
    return path[: -len(".git")] if path.endswith(".git") else path
