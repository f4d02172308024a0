"""How a person gets into the panel: its token, its name, and the login URL of each panel.

The token is `$SKILLD_WEB_TOKEN`, else the first line of `[web] token_file`, else one generated
on first use into `<state_dir>/web-token` (0600); a token file other users may read is refused,
since its token may be known. The panel's name is `<label>.localhost`, the label random and
generated on first use into `<state_dir>/web-name` (0600), kept so that bookmarks keep working:
a browser's session lives under that name, which no other server is reached by unless someone
knows it (a cookie for `127.0.0.1` goes to every port of that host). A panel records the URL it
listens on in `<state_dir>/panels/<pid>.json` once it accepts connections (and removes it when
it stops), so that `skilld web --url` can print the login URL of the running one. Standard
library only: `skilld web --url` loads no web framework.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from skilld.errors import ConfigError, Failure, UsageError
from skilld.fsutil import PRIVATE_FILE_MODE, atomic_write, private_dir

#: The token skilld generates when none is configured, in the state dir.
GENERATED_TOKEN_FILE = "web-token"
#: The label of the panel's own host name (`<label>.localhost`), in the state dir.
NAME_FILE = "web-name"
#: Browsers resolve every name under it to loopback themselves (RFC 6761).
LOCALHOST_SUFFIX = ".localhost"
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
#: `<state_dir>/panels/<pid>.json`: where each running panel listens.
PANELS_DIR = "panels"


class PanelToken(NamedTuple):
    token: str
    #: Given by the person (`$SKILLD_WEB_TOKEN`, `[web] token_file`), not generated.
    configured: bool


def panel_token(token_file: Path | None, state_dir: Path, *, create: bool = True) -> PanelToken:
    """The panel's token: `$SKILLD_WEB_TOKEN`, else the first line of `token_file`, else the
    one generated into `<state_dir>/web-token` on first use (`create`). Raises ConfigError for
    a token file that cannot be read, is empty, or that other users may read; Failure when
    there is none and `create` is False."""
    if token := os.environ.get("SKILLD_WEB_TOKEN", "").strip():
        return PanelToken(token, True)
    if token_file is not None:
        return PanelToken(_read_token_file(token_file), True)
    generated = state_dir / GENERATED_TOKEN_FILE
    if create:
        _create_private_file(generated, secrets.token_urlsafe(32))
    elif not generated.exists():
        raise Failure(f"no panel has run here yet ({generated} does not exist): run skilld web")
    return PanelToken(_read_token_file(generated), False)


def _read_token_file(path: Path) -> str:
    remedy = f"make a new one and run: chmod 600 {path}"
    return _read_private_line(path, "web.token_file", "token", remedy)


def panel_name(state_dir: Path) -> str:
    """The panel's own host name, `<label>.localhost`: the label from `<state_dir>/web-name`,
    generated there on first use (64 random bits: no one else can guess it). Raises
    ConfigError for a file that cannot be read, other users may read, or that holds no
    host name label."""
    path = state_dir / NAME_FILE
    _create_private_file(path, f"skilld-{secrets.token_hex(8)}")
    label = _read_private_line(path, None, "name", f"remove it (a new name is made): rm {path}")
    if not _LABEL.fullmatch(label):
        raise ConfigError(
            f"{path} does not hold a host name label (a-z, 0-9, inner '-'): {label[:80]!r};"
            f" remove it (a new name is made): rm {path}"
        )
    return label + LOCALHOST_SUFFIX


def _read_private_line(path: Path, key: str | None, what: str, remedy: str) -> str:
    """The first line of `path`, a regular file only its owner may read. Raises ConfigError
    (about `key`) naming the file, the problem and `remedy`."""
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(f"{path} is not a regular file", key)
            if mode & 0o077:
                raise ConfigError(
                    f"{path} may be read by other users (mode {stat.S_IMODE(mode):04o}), so its"
                    f" {what} may be known: {remedy}",
                    key,
                )
            data = handle.read(4096)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", key) from None
    try:
        lines = data.decode("utf-8").strip().splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text", key) from None
    if not lines or not lines[0].strip():
        raise ConfigError(f"{path} is empty", key)
    return lines[0].strip()


def _create_private_file(path: Path, line: str) -> None:
    """`line` in a new file `path`, created 0600; an existing file is kept (two panels
    starting at once: one wins)."""
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(line + "\n")


def require_token_off_loopback(host: str, token: PanelToken) -> None:
    """A panel reachable from other machines must have a token a person chose and handed out,
    not one generated here. Raises UsageError."""
    if not is_loopback(host) and not token.configured:
        raise UsageError(
            f"refusing to serve the panel on {host}, which is not loopback, without a token:"
            " set [web] token_file or SKILLD_WEB_TOKEN"
        )


def is_loopback(host: str) -> bool:
    """`localhost`, a name under it, or a loopback address (`[::1]` too): what this machine
    answers to, and so any local user's server too."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(LOCALHOST_SUFFIX):
        return True
    try:
        return ipaddress.ip_address(name.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def login_url(url: str, token: str) -> str:
    """`http://HOST:PORT/?token=TOKEN`: the URL that opens the panel at `url` (its root)."""
    return f"{url}?token={quote(token, safe='')}"


def record_listening(state_dir: Path, url: str) -> Path:
    """Say that this process serves the panel at `url` (its root); the record's path."""
    path = private_dir(state_dir / PANELS_DIR) / f"{os.getpid()}.json"
    atomic_write(path, json.dumps({"url": url, "pid": os.getpid()}) + "\n", mode=PRIVATE_FILE_MODE)
    return path


def running_panels(state_dir: Path) -> list[str]:
    """The URL of each panel whose process still runs, newest first; records of processes
    that are gone are removed."""
    from skilld.state.lock import process_alive

    found: list[tuple[float, str]] = []
    folder = state_dir / PANELS_DIR
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            url, pid, when = str(record["url"]), int(record["pid"]), path.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if process_alive(pid):
            found.append((when, url))
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return [url for _, url in sorted(found, reverse=True)]
