"""A library dir as a git work tree of a team's remote: setup, changes, sync rounds, history.

`TeamRepo` is a `WorkTree` (worktree.py: the lock, staging, and the commits skilld makes of the
tree on its own, the join and the leftovers a round commits first) with a remote.

Integration (the Library, through `skills.team_tree.TeamTree`, and the daemon call these; see
the package docstring for the flow):

    repo = TeamRepo(skills_dir, remote, branch="main", host="laptop")
    repo.setup(managed={...})                 # at start-up: init/join, .gitignore; no network
    with repo.change(message, [relpath], manifest={name: ManifestEntry(relpath, sha)}):
        write_tree_file(skills_dir, relpath, data)  # one commit per change skilld makes
    report = repo.sync(usage=usage_store.read())   # every interval and on `skilld sync`

Concurrency. Every change to the work tree or the branch (a change, a round's commits, the
replay and the branch move) holds the work-tree lock: an OS lock on a file in the git dir, so
the daemon and a `skilld sync` in another process never interleave, plus a re-entrant thread
lock. Fetch and push run outside it, so a slow remote never blocks learning; a whole round
holds a second lock so that two rounds never run at once.

Crash safety of ownership. `change` writes the new manifest entry before the caller writes
the file, and commits both after. A crash in between leaves both uncommitted; the next round
commits the file as skilld's when it hashes to its manifest entry, drops an entry whose write
never happened, and commits anything else as a hand edit ("changed by hand on HOST").
"""

from __future__ import annotations

import contextlib
import os
import random
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from skilld.digest import sha256_hex
from skilld.fsutil import (
    UnsafePath,
    list_tree_files,
    read_tree_file,
)
from skilld.sync.git import Git, GitError, find_git
from skilld.sync.health import Problem, diagnose, remote_rewritten, unrelated_history
from skilld.sync.incoming import (
    MAX_FILE_BYTES,
    Refusal,
    neutralise_attributes,
    refusals_of,
)
from skilld.sync.layout import (
    MANIFEST_PATH,
    USAGE_DIR,
    check_host,
)
from skilld.sync.manifest import (
    Manifest,
    ManifestEntry,
    ManifestError,
)
from skilld.sync.messages import change_message
from skilld.sync.objects import is_ancestor, read_objects
from skilld.sync.remote import (
    FETCHED_REF,
    RemoteRewritten,
    check_branch,
    fetch_branch,
    normalise_remote,
    push_branch,
    same_remote,
    split_credentials,
    tracking_ref,
)
from skilld.sync.replay import Conflict, replay
from skilld.sync.usage import Counters, UsageFileError, parse_host_usage, sum_usage
from skilld.sync.worktree import WorkTree, acquire_lock

if TYPE_CHECKING:
    from skilld.skills.team_tree import SharedFile, SkillChange

WORKTREE_LOCK = "skilld-worktree.lock"
ROUND_LOCK = "skilld-round.lock"


@dataclass(frozen=True, slots=True)
class Version:
    """One committed version of a file."""

    commit: str
    committed_at: str  # ISO-8601 UTC
    sha256: str
    subject: str  # the commit's first line: what changed it ("updated fix-venv", "conflict …")


@dataclass(slots=True)
class ChangeOutcome:
    """What `TeamRepo.change` committed: `commit` is None when nothing differed or git failed
    (`error` says why; the change stays in the work tree and the next round commits it)."""

    commit: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SetupResult:
    action: Literal["initialised", "ready"]
    commits: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncStatus:
    """For `skilld status` and `doctor`: what can be known without the network."""

    set_up: bool  # the library dir is a git work tree
    head: str | None
    ahead: int  # local commits waiting to be pushed
    problems: tuple[Problem, ...]


@dataclass(frozen=True, slots=True)
class SyncReport:
    """One round of `sync()`. `ok` False means `error` says why, in one line; nothing local
    was lost and the next good round catches up."""

    ok: bool
    error: str | None
    pushed: int  # commits this round added to the remote
    pulled: int  # remote commits this round brought in
    conflicts: tuple[Conflict, ...]
    committed: tuple[str, ...]  # commits the round made itself (usage, leftovers)
    attempts: int  # push attempts (a rejected push is retried after another fetch)
    head: str | None
    ahead: int  # commits still waiting to be pushed after the round
    problems: tuple[Problem, ...]  # set when the work tree needs a person (see health.py)
    started_at: float
    finished_at: float
    #: Why the fetched commit was not applied, a path each (incoming.py); `error` names the
    #: first and how many more.
    refused: tuple[Refusal, ...] = ()


@dataclass(slots=True)
class _Round:
    started_at: float
    pushed: int = 0
    pulled: int = 0
    attempts: int = 0
    conflicts: list[Conflict] = field(default_factory=list)
    committed: list[str] = field(default_factory=list)


class _Unrelated(Exception):
    """The branch and the remote's share no commit, though this host synced before."""


class _Refused(Exception):
    def __init__(self, refusals: list[Refusal]) -> None:
        super().__init__(str(refusals[0]))
        self.refusals = tuple(refusals)


class TeamRepo(WorkTree):
    """One library dir shared through one git remote and branch."""

    def __init__(
        self,
        root: Path,
        remote: str,
        *,
        host: str,
        branch: str = "main",
        timeout: float = 30.0,
        network_timeout: float = 120.0,
        max_push_attempts: int = 5,
        retry_pause: float = 0.25,
        retry_pause_limit: float = 30.0,
        max_file_bytes: int = MAX_FILE_BYTES,
        aside_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        #: Where a repair moves broken git metadata: never inside the work tree, where a join
        #: would see it. The app passes `<state>/sync-aside`.
        self.aside_dir = aside_dir or root.parent / f".{root.name}.skilld-aside"
        #: As configured (its credentials too: mask it before showing it); git is told
        #: `remote_url`, and gets the credentials at run time.
        self.remote = normalise_remote(remote)
        self.remote_url, credentials = split_credentials(self.remote)
        self._has_credentials = credentials is not None
        checked_host = check_host(host)
        self.branch = check_branch(branch)
        self.max_push_attempts = max_push_attempts
        self.retry_pause = retry_pause
        self.retry_pause_limit = retry_pause_limit
        git = Git(root, checked_host, timeout=timeout, network_timeout=network_timeout,
                  credentials=credentials)  # fmt: skip
        super().__init__(root, checked_host, git, max_file_bytes=max_file_bytes)
        self._clock = clock

    # -- set-up and health -------------------------------------------------------------------

    def setup(self, managed: Mapping[str, SharedFile] | None = None) -> SetupResult:
        """Make the library dir a work tree of the remote; idempotent, no network.

        A dir without git metadata (new, empty, or full of skills) gets a repository whose
        first commit ("joined") holds every file already there, plus `.gitignore` and the
        manifest seeded with `managed` (the skills skilld owns by its local provenance; an
        entry is kept only when the file still has that hash). The next `sync()` replays that
        commit onto the remote's history: both sides' files are kept, and where both hold a
        path with different content the remote's version wins the path and the local one stays
        in history. An existing work tree is checked (`problems`: then nothing is changed) and
        its `.gitignore` kept current. Raises GitMissing, GitError or OSError."""
        find_git()
        action: Literal["initialised", "ready"] = "ready"
        if not self.is_set_up:
            self.root.mkdir(parents=True, exist_ok=True)
            self.git.run("init", "--quiet", f"--initial-branch={self.branch}")
            action = "initialised"
        self._keep_private()
        problems = tuple(self.diagnose())
        if [p.code for p in problems] == ["no-remote"] and self._head() is None:
            # A repository with no commit yet is our own init (perhaps cut short by a crash).
            self.git.run("remote", "add", "origin", self.remote_url)
            problems = tuple(self.diagnose())
        if problems:
            return SetupResult(action, (), problems)
        neutralise_attributes(self._git_dir())
        with self.lock():
            if self._head() is None:
                seed = {n: ManifestEntry(e.path, e.sha256) for n, e in (managed or {}).items()}
                commit = self._join_commit(seed)
            else:
                commit = self._maintain_gitignore()
        return SetupResult(action, (commit,) if commit else ())

    def diagnose(self, *, history: bool = True) -> list[Problem]:
        """What keeps this work tree from syncing, each with its repair command (no network).
        Empty also when the dir is not set up yet: `setup()` does that."""
        if not self.is_set_up:
            return []
        return diagnose(
            self.git, self.root, branch=self.branch, remote=self.remote_url, history=history,
            aside=self.aside_dir,
        )  # fmt: skip

    def _keep_private(self) -> None:
        """The git dir is its owner's (0700, its config 0600, whatever the umask): its config
        names the remote, and may hold what a person put there. A URL an older skilld saved
        with the configured credentials in it is saved again without them (git gets them at
        run time now); credentials a person set there, with none in skilld's config, stay."""
        try:
            git_dir = self._git_dir()
        except GitError:
            return  # not a repository: diagnose() says so, with the repair
        for path, private in ((git_dir, 0o700), (git_dir / "config", 0o600)):
            if path.exists() and stat.S_IMODE(path.stat().st_mode) != private:
                path.chmod(private)
        if not self._has_credentials:
            return
        stored = self.git.run("config", "--get", "remote.origin.url", check=False).line
        if stored and stored != self.remote_url and same_remote(self.remote_url, stored):
            with self.lock():
                self.git.run("config", "remote.origin.url", self.remote_url)
            self._log.info("sync_remote_credentials_removed", root=str(self.root))

    def status(self) -> SyncStatus:
        if not self.is_set_up:
            return SyncStatus(False, None, 0, ())
        problems = tuple(self.diagnose())
        if any(p.code == "not-a-repository" for p in problems):
            return SyncStatus(True, None, 0, problems)
        if not problems:
            problems = tuple(self._fetched_problems())
        return SyncStatus(True, self._head(), self._ahead(), problems)

    def _fetched_problems(self) -> list[Problem]:
        """What the last fetch found that is still in the way, read from the refs it left (no
        network): a rewritten remote, or a commit refused (incoming.py)."""
        fetched = self._resolve(FETCHED_REF)
        if fetched is None:
            return []
        since = self._resolve(tracking_ref(self.branch))
        if since is not None and not is_ancestor(self.git, since, fetched):
            if is_ancestor(self.git, fetched, since):
                return []  # the fetch was integrated and pushed over since
            reason = (
                f"the remote's {self.branch} was rewritten (force-pushed) since the last sync: "
                f"it no longer contains {since[:12]}"
            )
            return [remote_rewritten(self.root, reason, self.aside_dir)]
        since = since or self._head()  # never synced: the join
        if since is None or fetched == since or is_ancestor(self.git, fetched, since):
            return []
        refusals = refusals_of(self.git, fetched, since=since, limit=self.max_file_bytes)
        return [
            Problem(
                "refused",
                f"{refusal} (commit {refusal.commit[:12]} of the remote's {self.branch})",
                refusal.repair(self.root, self.branch),
            )
            for refusal in refusals
        ]

    def _resolve(self, ref: str) -> str | None:
        result = self.git.run("rev-parse", "--quiet", "--verify", f"{ref}^{{commit}}", check=False)
        return result.line or None

    # -- changes -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def change(
        self,
        message: str,
        paths: Sequence[str],
        *,
        manifest: Mapping[str, ManifestEntry | None] | None = None,
    ) -> Iterator[ChangeOutcome]:
        """One commit for one change skilld makes: write the files inside the block.

        `paths` (relative to the root; folders allowed) are what the block creates, changes,
        removes or moves (both ends of a move); `manifest` the entries to set (None removes
        one). The manifest is written first, so a crash at any point is recovered as skilld's
        change (see the module docstring). When the block raises, the manifest is put back
        and nothing is committed. A git failure after the block does not raise: the outcome
        says so, and the files stay for the next round to commit."""
        with self.lock():
            previous = read_tree_file(self.root, MANIFEST_PATH)
            if manifest:
                self._write_manifest(self._work_manifest().changed(manifest))
            outcome = ChangeOutcome()
            try:
                yield outcome
            except BaseException:
                if manifest:
                    self._restore_file(MANIFEST_PATH, previous)
                raise
            staged = [*paths, MANIFEST_PATH] if manifest else list(paths)
            if not self.is_set_up:
                outcome.error = "the library is not a git work tree yet; setup() commits it"
                return
            try:
                outcome.commit = self.commit(message, staged)
            except GitError as exc:
                outcome.error = exc.reason
                self._log.warning("sync_commit_failed", reason=exc.reason, paths=list(paths))

    def relpath(self, path: Path) -> str:
        """`path` (inside the root) as the repository names it."""
        return path.absolute().relative_to(self.root.absolute()).as_posix()

    def change_message(
        self,
        event: str,
        skill: str | None,
        *,
        session: str | None = None,
        repository: str | None = None,
        branch: str | None = None,
    ) -> str:
        """The message of a Library change: `<event> <skill>` with this host's trailers (and
        the repository and branch the session worked on, when known)."""
        return change_message(
            event, skill, host=self.host, session=session, repository=repository, branch=branch
        )

    @contextlib.contextmanager
    def skill_change(
        self, change: SkillChange, seed: Callable[[], Mapping[str, SharedFile]]
    ) -> Iterator[None]:
        """A Library's change of a skill's files as one commit naming the event, the skill and
        the session, with the manifest entry of what skilld wrote. See
        `skills.team_tree.TeamTree`."""
        if not self.is_set_up:
            # A change before any sync (a person's write on a new team library) is still its
            # own commit: join first, so that it is not swept into the join commit. Without
            # git the change stays in the work tree, and the first round commits it.
            try:
                self.setup(seed())
            except (GitError, OSError) as exc:
                self._log.warning("team_setup_failed", root=str(self.root), error=str(exc))
        written, git = change.written, change.git
        entry = ManifestEntry(written.path, written.sha256) if written is not None else None
        message = self.change_message(
            change.event,
            change.name,
            session=change.session,
            repository=git.repository if git else None,
            branch=git.branch if git else None,
        )
        relpaths = [self.relpath(path) for path in change.paths]
        with self.change(message, relpaths, manifest={change.name: entry}):
            yield

    # -- the team's view ---------------------------------------------------------------------

    def manifest(self) -> Manifest:
        """The manifest in the work tree (what every host's skilld wrote, as last synced plus
        this host's changes). Raises ManifestError when a person broke it: treat every skill
        as not skilld's until the next change rewrites it."""
        return self._read_manifest()

    def readable_manifest(self) -> Manifest | None:
        """`manifest()`, or None (logged) when a person broke it: nothing is skilld's by it."""
        try:
            return self._read_manifest()
        except ManifestError as exc:
            self._log.warning("team_manifest_unreadable", root=str(self.root), error=str(exc))
            return None

    def team_usage(self, local: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """This host's usage records with every other host's published counters added. A usage
        file that cannot be read is logged and counts as none."""
        published, unreadable = self._published_usage()
        for relpath, error in unreadable:
            self._log.warning("sync_usage_unreadable", path=relpath, error=error)
        return sum_usage(local, published)

    def unreadable_files(self) -> list[str]:
        """The shared files of the work tree no host can read, each `path: why` (for `doctor`):
        a manifest or another host's usage file that is not JSON, or too large or too deep to
        decode (boundedjson). Each reads as none: no skill is skilld's, no use is counted."""
        problems = []
        try:
            self._read_manifest()
        except ManifestError as exc:
            problems.append(str(exc))
        return problems + [f"{relpath}: {error}" for relpath, error in self._published_usage()[1]]

    def _published_usage(self) -> tuple[list[Counters], list[tuple[str, str]]]:
        """Every other host's published counters, and the usage files that cannot be read."""
        published, unreadable = [], []
        try:
            names = list_tree_files(self.root, USAGE_DIR)
        except (OSError, UnsafePath) as exc:
            return [], [(USAGE_DIR, str(exc))]
        for name in names:
            if not name.endswith(".json") or name == f"{self.host}.json":
                continue
            relpath = f"{USAGE_DIR}/{name}"
            try:
                published.append(parse_host_usage(read_tree_file(self.root, relpath) or b""))
            except (OSError, UnsafePath, UsageFileError) as exc:
                unreadable.append((relpath, str(exc)))
        return published, unreadable

    def file_versions(self, relpath: str) -> list[Version]:
        """Every committed version of `relpath` on this branch (both sides of a conflict
        included), oldest first; commits that removed it are left out."""
        if self._head() is None:
            return []
        log = self.git.run(
            "--literal-pathspecs", "log", "--format=%H %ct %s", "HEAD", "--", relpath
        ).text
        commits = [line.split(" ", 2) for line in reversed(log.splitlines()) if line]
        blobs = read_objects(self.git, [f"{sha}:{relpath}" for sha, *_ in commits])
        versions = []
        for sha, seconds, *subject in commits:
            data = blobs.get(f"{sha}:{relpath}")
            if data is not None:
                moment = datetime.fromtimestamp(int(seconds), UTC).isoformat(timespec="seconds")
                digest = sha256_hex(data)
                versions.append(Version(sha, moment, digest, subject[0] if subject else ""))
        return versions

    def read_version(self, commit: str, relpath: str) -> bytes:
        """The bytes of `relpath` in `commit`; KeyError when that commit has no such file."""
        data = read_objects(self.git, [f"{commit}:{relpath}"]).get(f"{commit}:{relpath}")
        if data is None:
            raise KeyError(f"{relpath} is not in commit {commit}")
        return data

    # -- a sync round ------------------------------------------------------------------------

    def sync(self, usage: Mapping[str, Mapping[str, Any]] | None = None) -> SyncReport:
        """One round: publish `usage` (this host's `.usage.json` records) when given, commit
        what was left uncommitted, fetch, replay local commits onto the remote branch
        (settling conflicts, see resolve.py), push; a rejected push is retried after another
        fetch, up to `max_push_attempts` times. Never force-pushes. Sets the dir up first if
        needed. Never raises for git, network or work-tree trouble: the report says why."""
        progress = _Round(started_at=self._clock())
        try:
            find_git()
            if not self.is_set_up:
                setup = self.setup()
                if setup.problems:
                    return self._report(progress, problems=setup.problems)
            else:
                self._keep_private()
            problems = tuple(self.diagnose(history=False))
            if problems:
                return self._report(progress, problems=problems)
            with self._round_lock():
                if usage is not None:
                    with self.lock():
                        if commit := self._publish_usage(usage):
                            progress.committed.append(commit)
                return self._rounds(progress)
        except RemoteRewritten as exc:
            problem = remote_rewritten(self.root, exc.reason, self.aside_dir)
            return self._report(progress, problems=(problem,))
        except _Unrelated:
            problem = unrelated_history(self.root, self.branch, self.aside_dir)
            return self._report(progress, problems=(problem,))
        except _Refused as exc:
            first, more = exc.refusals[0], len(exc.refusals) - 1
            error = f"{first} (and {more} more)" if more else str(first)
            return self._report(progress, error=error, refused=exc.refusals)
        except GitError as exc:
            return self._report(progress, error=exc.reason)
        except UnsafePath as exc:  # a link a person put in the work tree
            return self._report(progress, error=f"refused: {exc}")
        except OSError as exc:  # the work tree itself: a full disk, a permission
            return self._report(progress, error=f"{exc.strerror or exc}: {exc.filename}")

    def _rounds(self, progress: _Round) -> SyncReport:
        window = 0.0
        while progress.attempts < self.max_push_attempts:
            if progress.attempts:
                # Randomised exponential backoff, scaled to how long an attempt takes (the
                # window in which another host's push beats ours): hosts that collided would
                # otherwise collide again in lockstep.
                scale = max(self.retry_pause, window) * 2 ** (progress.attempts - 1)
                time.sleep(random.uniform(0, min(scale, self.retry_pause_limit)))
            progress.attempts += 1
            attempt_started = time.monotonic()
            fetched = fetch_branch(self.git, self.branch)
            with self.lock():
                progress.committed += self._commit_leftovers()
                head = self._head()
                if fetched.tip is not None and fetched.tip != fetched.previous:
                    self._check_incoming(fetched.tip, since=fetched.previous or head)
                if head is not None and fetched.tip is not None:
                    head = self._integrate(head, fetched.tip, fetched.previous, progress)
                    if fetched.tip != fetched.previous:
                        self.git.run("update-ref", tracking_ref(self.branch), fetched.tip)
                # The remote's .gitignore may have come in without skilld's block (a join).
                if commit := self._maintain_gitignore():
                    progress.committed.append(commit)
                    head = commit
            if head is None or head == fetched.tip:
                return self._report(progress)
            if push_branch(self.git, head, self.branch):
                progress.pushed += self._count(head, excluding=fetched.tip)
                return self._report(progress)
            window = time.monotonic() - attempt_started
        attempts = progress.attempts
        return self._report(
            progress, error=f"the remote kept moving: the push was rejected {attempts} times"
        )

    def _integrate(self, head: str, remote_tip: str, previous: str | None, progress: _Round) -> str:
        """Put this host's commits on top of `remote_tip`; the new head. `previous` is the
        remote state this host integrated last (None: never synced)."""
        if is_ancestor(self.git, remote_tip, head):
            return head
        if is_ancestor(self.git, head, remote_tip):
            progress.pulled += self._count(remote_tip, excluding=head)
            self._move_branch(head, remote_tip)
            return remote_tip
        # Never synced: this is the join, and an unrelated history is what joining is for.
        if previous is not None and not self.git.ok("merge-base", head, remote_tip):
            raise _Unrelated
        progress.pulled += self._count(remote_tip, excluding=head)
        local = self.git.run(
            "rev-list", "--reverse", "--first-parent", head, "--not", remote_tip
        ).text.split()
        result = replay(self.git, self._git_dir(), onto=remote_tip, commits=local, host=self.host)
        progress.conflicts += result.conflicts
        self._move_branch(head, result.tip)
        return result.tip

    def _check_incoming(self, tip: str, *, since: str | None) -> None:
        """Raise _Refused when the fetched `tip` holds what a library may not (incoming.py):
        then nothing moves, and the work tree stays at its last good commit."""
        neutralise_attributes(self._git_dir())
        refusals = refusals_of(self.git, tip, since=since, limit=self.max_file_bytes)
        if refusals:
            for refusal in refusals:
                self._log.warning("sync_refused", root=str(self.root), commit=refusal.commit,
                                  path=refusal.path, why=refusal.why)  # fmt: skip
            raise _Refused(refusals)

    def _move_branch(self, head: str, target: str) -> None:
        """Move the branch and the work tree from `head` to `target`. `reset --keep` refuses
        (and changes nothing) if a file it must replace has uncommitted changes."""
        if self._head() != head:
            raise GitError("the branch moved during the sync; the next round retries")
        self.git.run("reset", "--quiet", "--keep", target)

    def _report(
        self,
        progress: _Round,
        *,
        error: str | None = None,
        problems: tuple[Problem, ...] = (),
        refused: tuple[Refusal, ...] = (),
    ) -> SyncReport:
        if problems and error is None:
            error = str(problems[0])
        head = ahead = None
        with contextlib.suppress(GitError):
            head = self._head() if self.is_set_up else None
            ahead = self._ahead() if head else 0
        report = SyncReport(
            ok=error is None,
            error=error,
            pushed=progress.pushed,
            pulled=progress.pulled,
            conflicts=tuple(progress.conflicts),
            committed=tuple(progress.committed),
            attempts=progress.attempts,
            head=head,
            ahead=ahead or 0,
            problems=problems,
            started_at=progress.started_at,
            finished_at=self._clock(),
            refused=refused,
        )
        if error:
            self._log.warning("sync_failed", root=str(self.root), error=error)
        return report

    # -- small helpers -----------------------------------------------------------------------

    def _ahead(self) -> int:
        tracking = tracking_ref(self.branch)
        if self.git.ok("rev-parse", "--quiet", "--verify", f"{tracking}^{{commit}}"):
            return self._count("HEAD", excluding=tracking)
        return self._count("HEAD", excluding=None)

    def _count(self, tip: str, *, excluding: str | None) -> int:
        """Commits reachable from `tip` and not from `excluding`."""
        args = [tip] if excluding is None else [tip, "--not", excluding]
        return int(self.git.run("rev-list", "--count", *args).line or 0)

    @contextlib.contextmanager
    def _round_lock(self) -> Iterator[None]:
        fd = acquire_lock(self._git_dir() / ROUND_LOCK)
        try:
            yield
        finally:
            os.close(fd)
