"""A team library over git (DESIGN.md §10): a library dir is a work tree of a shared remote.

The flow, as the daemon and the Library drive it:

* start-up: `TeamRepo(dir, remote, host=…, branch=…).setup(managed=…)` (no network), then
  `sync()`;
* every change a Library makes: `with repo.skill_change(SkillChange(event, name, paths,
  written, session, git), seed): <write the file>` (`TeamRepo` implements the library's
  `skills.team_tree.TeamTree`: skills never imports sync); it is `repo.change(message,
  [relpath], manifest={name: ManifestEntry(relpath, sha256)})`, joining first if need be;
* ownership, team-wide: `repo.readable_manifest().owns(name, sha256)`;
* every `[sync] interval_seconds` and on `skilld sync`: `report = repo.sync(usage=records)`;
  one `conflict` event per `report.conflicts`, one `sync_refused` per `report.refused` (a
  fetched commit holding what a library may not: incoming.py); exit 1 when `not report.ok`;
* usage for `skills list`/`show` and the curator: `repo.team_usage(usage_store.read())`;
* `skills history`/`rollback`: `repo.file_versions(relpath)`, `repo.read_version(commit,
  relpath)`;
* `status`/`doctor`: `repo.status()` (ahead count, problems with repair commands, a refused
  or rewritten remote as the last fetch left it), `git_version()`/`find_git()`.
"""

from skilld.sync.git import GitError, GitMissing, GitTimeout, find_git, git_version
from skilld.sync.health import Problem
from skilld.sync.incoming import Refusal
from skilld.sync.layout import HOST_LOCAL_PATTERNS, MANIFEST_PATH, InvalidHost, usage_path
from skilld.sync.manifest import Manifest, ManifestEntry, ManifestError
from skilld.sync.messages import change_message
from skilld.sync.replay import Conflict
from skilld.sync.repo import (
    ChangeOutcome,
    SetupResult,
    SyncReport,
    SyncStatus,
    TeamRepo,
    Version,
)
from skilld.sync.usage import sum_usage

__all__ = [
    "HOST_LOCAL_PATTERNS",
    "MANIFEST_PATH",
    "ChangeOutcome",
    "Conflict",
    "GitError",
    "GitMissing",
    "GitTimeout",
    "InvalidHost",
    "Manifest",
    "ManifestEntry",
    "ManifestError",
    "Problem",
    "Refusal",
    "SetupResult",
    "SyncReport",
    "SyncStatus",
    "TeamRepo",
    "Version",
    "change_message",
    "find_git",
    "git_version",
    "sum_usage",
    "usage_path",
]
