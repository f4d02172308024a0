"""The `git` command-line client, run the same way every time.

skilld's git must behave identically on every machine, whatever its user configured: the user's
global and system config are never read (`GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM`),
nor their global excludes and attributes files (git reads those from `~/.config/git` even
without a global config), hooks never run, nothing is signed, and nothing ever prompts: a
password prompt would hang a daemon forever, so credentials come from ssh keys, the
repository's own config, or the `Credentials` a remote's URL carried in skilld's config (see
`Credentials`), and ssh runs in batch mode. Every call has a timeout; on expiry the
whole process group is killed (git's ssh or https helper included). Commits are authored and
committed by `skilld <skilld@HOST>`.

Inherited `GIT_*` variables are dropped: a `GIT_DIR` or `GIT_INDEX_FILE` from the environment
(skilld started from a hook, say) would silently point every call at another repository.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skilld.masking import mask_urls

#: Settings given on every command line: they beat the repository's own config too.
_FORCED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.excludesFile", os.devnull),
    ("core.attributesFile", os.devnull),
    ("core.autocrlf", "false"),
    ("core.fsmonitor", "false"),
    ("core.quotePath", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("credential.interactive", "false"),
    ("advice.detachedHead", "false"),
)
_DEFAULT_SSH = "ssh"
_USERNAME_VARIABLE = "SKILLD_GIT_USERNAME"
_PASSWORD_VARIABLE = "SKILLD_GIT_PASSWORD"
#: A credential helper that answers git's `get` from the environment (and ignores `store` and
#: `erase`): the secret is never on a command line, which any user may read in /proc.
_ENVIRONMENT_HELPER = (
    f"!f() {{ test \"$1\" = get && printf 'username=%s\\npassword=%s\\n'"
    f' "${_USERNAME_VARIABLE}" "${_PASSWORD_VARIABLE}"; }}; f'
)
_KILL_GRACE_SECONDS = 2.0


class GitError(Exception):
    """A git call failed; `reason` is one line a person can act on."""

    def __init__(self, reason: str, *, args: Sequence[str] = (), returncode: int | None = None,
                 stderr: str = "") -> None:  # fmt: skip
        super().__init__(reason)
        self.reason = reason
        self.git_args = tuple(args)
        self.returncode = returncode
        self.stderr = stderr


class GitMissing(GitError):
    """No `git` executable on PATH."""


class GitTimeout(GitError):
    """A git call outlived its timeout and was killed."""


@dataclass(frozen=True, slots=True)
class GitResult:
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "surrogateescape")

    @property
    def line(self) -> str:
        return self.text.strip()


@dataclass(frozen=True, slots=True)
class Credentials:
    """The user info of a remote's URL, given to git at run time only: the URL git is told
    (and keeps in `.git/config`) has none. git asks for them when the server answers 401."""

    scope: str  # `scheme://host[:port]/`: the one server they are offered to
    username: str = field(repr=False)
    password: str = field(repr=False)  # may be empty: a token given as the user name


def credential_arguments(credentials: Credentials) -> list[str]:
    """The `-c` settings that make git take `credentials` from the environment: every other
    helper (the repository's own) is reset, and this one answers for `scope` only, so that a
    redirect to another server is never handed them."""
    return [
        "-c", "credential.helper=",
        "-c", f"credential.{credentials.scope}.helper={_ENVIRONMENT_HELPER}",
    ]  # fmt: skip


def credential_environment(credentials: Credentials) -> dict[str, str]:
    return {_USERNAME_VARIABLE: credentials.username, _PASSWORD_VARIABLE: credentials.password}


def find_git() -> str:
    """The path of `git`, or GitMissing with what to install."""
    found = shutil.which("git")
    if found is None:
        raise GitMissing("git is not installed (or not on PATH); install git to share a library")
    return found


def git_version() -> str:
    """`git --version` of the client skilld would run, e.g. "2.39.5" (for `doctor`)."""
    result = subprocess.run(
        [find_git(), "--version"], capture_output=True, timeout=10, check=False, text=True
    )
    return result.stdout.strip().removeprefix("git version ").strip()


def one_line_reason(stderr: str, fallback: str) -> str:
    """The line of git's stderr that says what went wrong (its `fatal:` or `error:` line)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for prefix in ("fatal:", "error:"):
        for line in lines:
            if line.startswith(prefix):
                return line.removeprefix(prefix).strip()
    meaningful = [line for line in lines if not line.startswith("hint:")]
    return meaningful[-1] if meaningful else fallback


def git_environment(host: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every git call: `base` (os.environ) minus GIT_*, plus skilld's own."""
    source = os.environ if base is None else base
    env = {key: value for key, value in source.items() if not key.startswith("GIT_")}
    ssh = source.get("GIT_SSH_COMMAND") or _DEFAULT_SSH
    email = f"skilld@{host}"
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="",
        SSH_ASKPASS="",
        SSH_ASKPASS_REQUIRE="never",
        GIT_SSH_COMMAND=f"{ssh} -o BatchMode=yes",
        GIT_EDITOR=":",
        GIT_SEQUENCE_EDITOR=":",
        GIT_PAGER="cat",
        GIT_MERGE_AUTOEDIT="no",
        GIT_AUTHOR_NAME="skilld",
        GIT_AUTHOR_EMAIL=email,
        GIT_COMMITTER_NAME="skilld",
        GIT_COMMITTER_EMAIL=email,
        LC_ALL="C",
        LANGUAGE="C",
    )
    return env


class Git:
    """Runs git in one work tree, which is never searched for above `root`."""

    def __init__(self, root: Path, host: str, *, timeout: float = 30.0,
                 network_timeout: float = 120.0,
                 credentials: Credentials | None = None) -> None:  # fmt: skip
        self.root = root
        self.timeout = timeout
        self.network_timeout = network_timeout
        self._executable: str | None = None
        self._env = git_environment(host)
        # Without a ceiling a library with no .git of its own would be taken for part of any
        # repository above it (a dotfiles repo in $HOME), and skilld would commit into that.
        self._env["GIT_CEILING_DIRECTORIES"] = str(root.absolute().parent)
        self._config_args = [
            arg for key, value in _FORCED_CONFIG for arg in ("-c", f"{key}={value}")
        ]
        self._credentials = credentials

    @property
    def executable(self) -> str:
        if self._executable is None:
            self._executable = find_git()
        return self._executable

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        check: bool = True,
        network: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> GitResult:
        """Run `git ARGS` in the root. A non-zero exit raises GitError unless `check` is False;
        a timeout always raises GitTimeout. `network` selects the longer timeout, and gives
        git the remote's credentials (no other call needs them)."""
        timeout = self.network_timeout if network else self.timeout
        config_args = self._config_args
        full_env = self._env if env is None else {**self._env, **env}
        if network and self._credentials is not None:
            config_args = [*config_args, *credential_arguments(self._credentials)]
            full_env = {**full_env, **credential_environment(self._credentials)}
        command = [self.executable, *config_args, *args]
        process = subprocess.Popen(
            command,
            cwd=self.root,
            env=full_env,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # so that a timeout can kill git's ssh/http helpers too
        )
        try:
            stdout, stderr_bytes = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise GitTimeout(
                f"git {args[0]} took longer than {timeout:g} s and was stopped", args=args
            ) from None
        # git echoes the URL it talks to (with its token) in errors: masked before it is kept.
        stderr = mask_urls(stderr_bytes.decode("utf-8", "replace"))
        result = GitResult(process.returncode, stdout, stderr)
        if check and process.returncode != 0:
            reason = one_line_reason(stderr, f"git {args[0]} exited with {process.returncode}")
            raise GitError(reason, args=args, returncode=process.returncode, stderr=stderr)
        return result

    def ok(self, *args: str, env: Mapping[str, str] | None = None) -> bool:
        """True when `git ARGS` exits 0 (for the questions git answers with its exit code)."""
        return self.run(*args, check=False, env=env).returncode == 0


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=_KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    except ProcessLookupError:
        process.communicate()
