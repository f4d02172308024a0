"""Hosts of a team library on one machine: each a skills dir synced through one bare repository.

`Host` changes skills the way the Library does (file + manifest entry + one commit per change,
through `TeamRepo.change`); `Person` is a teammate with a plain `git clone` and plain commands.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from skilld.fsutil import atomic_write
from skilld.sync import ChangeOutcome, ManifestEntry, TeamRepo


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def skill_text(name: str, body: str) -> bytes:
    return f"---\nname: {name}\ndescription: {body[:40]}\n---\n{body}\n".encode()


def plain_git(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """git as a person runs it, with a config of its own (never the machine user's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Pat Person",
        GIT_AUTHOR_EMAIL="pat@example.com",
        GIT_COMMITTER_NAME="Pat Person",
        GIT_COMMITTER_EMAIL="pat@example.com",
    )
    # A remote's history may hold bytes that are not UTF-8 (a hostile teammate's files).
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, check=check,
        text=True, errors="surrogateescape",
    )  # fmt: skip


def bare_remote(path: Path) -> Path:
    plain_git("init", "--quiet", "--bare", "--initial-branch=main", str(path), cwd=path.parent)
    return path


def remote_subjects(remote: Path) -> list[str]:
    """The subjects of the remote's main branch, oldest first."""
    log = plain_git("log", "--reverse", "--format=%s", "main", cwd=remote).stdout
    return log.splitlines()


def remote_files(remote: Path) -> set[str]:
    listing = plain_git("ls-tree", "-r", "--name-only", "main", cwd=remote).stdout
    return set(listing.splitlines())


class Host:
    def __init__(
        self, base: Path, name: str, remote: Path, *, network_timeout: float = 120.0
    ) -> None:
        self.name = name
        self.skills = base / name / "skills"
        self.repo = TeamRepo(
            self.skills,
            str(remote),
            host=name,
            network_timeout=network_timeout,
            retry_pause_limit=0,
        )

    def write_skill(self, skill: str, body: str, *, event: str = "created") -> ChangeOutcome:
        relpath = f"{skill}/SKILL.md"
        data = skill_text(skill, body)
        message = self.repo.change_message(event, skill, session=f"session-{self.name}")
        with self.repo.change(
            message, [relpath], manifest={skill: ManifestEntry(relpath, sha256(data))}
        ) as outcome:
            (self.skills / skill).mkdir(parents=True, exist_ok=True)
            atomic_write(self.skills / relpath, data)
        return outcome

    def archive_skill(self, skill: str) -> ChangeOutcome:
        data = self.read(skill)
        target = f".archive/{skill}"
        message = self.repo.change_message("archived", skill)
        entry = ManifestEntry(f"{target}/SKILL.md", sha256(data))
        with self.repo.change(message, [skill, target], manifest={skill: entry}) as outcome:
            (self.skills / ".archive").mkdir(exist_ok=True)
            os.replace(self.skills / skill, self.skills / target)
        return outcome

    def read(self, skill: str) -> bytes:
        return (self.skills / skill / "SKILL.md").read_bytes()

    def owns(self, skill: str) -> bool:
        """What the Library will ask: is the file on disk what skilld last wrote, team-wide?"""
        return self.repo.manifest().owns(skill, sha256(self.read(skill)))

    def head_tree(self) -> str:
        return plain_git("rev-parse", "HEAD^{tree}", cwd=self.skills).stdout.strip()


class Person:
    """A teammate editing the shared repository with a plain clone."""

    def __init__(self, base: Path, remote: Path) -> None:
        self.clone = base / "person-clone"
        plain_git("clone", "--quiet", "--branch", "main", str(remote), str(self.clone), cwd=base)

    def edit(self, relpath: str, data: bytes, message: str = "tidy by hand") -> None:
        plain_git("pull", "--quiet", "--ff-only", cwd=self.clone)
        (self.clone / relpath).parent.mkdir(parents=True, exist_ok=True)
        (self.clone / relpath).write_bytes(data)
        plain_git("add", "--", relpath, cwd=self.clone)
        plain_git("commit", "--quiet", "-m", message, cwd=self.clone)
        plain_git("push", "--quiet", "origin", "main", cwd=self.clone)
