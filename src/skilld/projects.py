"""Which projects skilld may write project skills into (DESIGN.md §9, `evolve.projects`).

A project's root is found from a session's working directory resolved (realpath) by
`routing.project_root`, so `..` and links never move a session into another project, and a
repository nested in another is a project of its own. Whether skilld may write there is a pure
decision over plain values (`project_decision`): the resolved root, its normalised `origin`
remote, the configured patterns, and what its skills dir is on disk. Two small reads feed it
(`skills_dir_state`, `resolve_pattern`); the remote comes from `gitinfo.repository_of`.

`evolve.projects` holds two kinds of glob, told apart by their first character once the config
has expanded `~` and `$VARS`: an absolute path (`/home/me/src/*`) is matched on the resolved
root; anything else (`github.com/acme/*`) is a repository, matched on the root's normalised
remote. In both, `*` (and `?`, `[...]`) stays within one path segment and `**` is any number of
segments.
"""

import os
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Literal, NamedTuple

from skilld.fsutil import UnsafePath, real_subdir
from skilld.gitinfo import normalise_repository
from skilld.routing import never_root_reason

PatternKind = Literal["path", "repository"]
#: What a project's skills dir is on disk: a real directory all the way from the root,
#: missing, or something skilld must not go through (the string says what and why).
SkillsDirState = Literal["real", "missing"] | str


class ProjectDecision(NamedTuple):
    """Whether skilld may write into a project, and why (the reason a staged event shows)."""

    allowed: bool
    reason: str


def pattern_kind(pattern: str) -> PatternKind:
    """A path glob starts with `/` (the config expands `~` and `$VARS` and anchors relative
    entries at the config file); anything else names a repository."""
    return "path" if pattern.startswith("/") else "repository"


def repository_glob(pattern: str) -> str:
    """A repository entry in the form remotes are compared in: written as a URL
    (`https://github.com/acme/*`) or scp-like (`git@github.com:acme/*`), it is normalised as a
    remote is (`github.com/acme/*`)."""
    return normalise_repository(pattern) or pattern


def glob_match(pattern: str, value: str) -> bool:
    """Whether `value` matches `pattern` segment by segment: `*`, `?` and `[...]` within one
    segment, `**` any number of segments (none included). A trailing `/` means nothing."""
    return _match_segments(_segments(pattern), _segments(value))


def project_decision(
    root: Path,
    *,
    repository: str | None,
    patterns: Iterable[str],
    home: Path,
    skills_dir: Path,
    skills_dir_state: SkillsDirState,
) -> ProjectDecision:
    """May skilld write project skills into the project at (resolved) `root`?

    Never into a root that is no project at all (`routing.never_root_reason`), nor through a
    skills dir that is a link or leaves the root; else when the root matches a path pattern,
    or its repository a repository pattern, or the project already keeps skills for this
    agent (its skills dir is a real directory inside the root).
    """
    if (never := never_root_reason(root, home)) is not None:
        return ProjectDecision(False, f"{never}: never a project root")
    if skills_dir_state not in ("real", "missing"):
        return ProjectDecision(False, f"{skills_dir_state}: project skills stay inside {root}")
    for pattern in patterns:
        if pattern_kind(pattern) == "path" and glob_match(pattern, str(root)):
            return ProjectDecision(True, f"{root} matches evolve.projects entry {pattern!r}")
        if (
            pattern_kind(pattern) == "repository"
            and repository is not None
            and glob_match(repository_glob(pattern).casefold(), repository.casefold())
        ):
            return ProjectDecision(True, f"{repository} matches evolve.projects entry {pattern!r}")
    if skills_dir_state == "real":
        return ProjectDecision(True, f"{root} keeps skills in {skills_dir} already")
    return ProjectDecision(False, f"project {root} is not in evolve.projects")


def skills_dir_state(root: Path, project_dir: str) -> SkillsDirState:
    """What `root/project_dir` is on disk, for `project_decision` (its only read). A root
    that is not a directory here (a session from another machine, a deleted checkout) has no
    skills dir skilld could create."""
    if not os.path.isdir(root) or os.path.islink(root):
        return f"{root} is not a directory on this machine"
    try:
        found = real_subdir(root, PurePosixPath(project_dir).parts)
    except UnsafePath as exc:
        return str(exc)
    except OSError as exc:
        return f"{root / project_dir} cannot be read ({exc.strerror or exc})"
    return "real" if found is not None else "missing"


def resolve_pattern(pattern: str) -> str:
    """A path pattern with its literal leading folders resolved (realpath), as the roots it is
    matched against are: `~/src/*` still matches when the home directory is reached through a
    link. A repository pattern is returned as it is."""
    if pattern_kind(pattern) != "path":
        return pattern
    segments = _segments(pattern)
    literal = 0
    while literal < len(segments) and not _is_glob(segments[literal]):
        literal += 1
    if literal == 0:
        return pattern
    head = os.path.realpath("/" + "/".join(segments[:literal]))
    return str(PurePosixPath(head, *segments[literal:]))


def _segments(text: str) -> Sequence[str]:
    return [segment for segment in text.split("/") if segment and segment != "."]


def _is_glob(segment: str) -> bool:
    return any(ch in segment for ch in "*?[")


def _match_segments(pattern: Sequence[str], value: Sequence[str]) -> bool:
    # Positions in `value` the pattern's prefix can end at; `**` widens them, others advance.
    reachable = {0}
    for segment in pattern:
        if segment == "**":
            reachable = set(range(min(reachable), len(value) + 1)) if reachable else set()
        else:
            reachable = {
                index + 1
                for index in reachable
                if index < len(value) and fnmatchcase(value[index], segment)
            }
        if not reachable:
            return False
    return len(value) in reachable
