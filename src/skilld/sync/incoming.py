"""What a remote may bring into a library, and what skilld stages: one rule for both.

The remote is written by other people. A library's repository holds skill folders (and
`.archive/` ones), flat `<name>.md` skills, the manifest, per-host usage files and a few plain
top-level files; nothing else is ever checked out, and nothing else is ever committed:

* `path_problem(path)` (pure): why a path may not be in the tree, or None. Host-local files
  (`.usage.json`, its lock, journal, corrupt copies and temp files, atomic-write temps) and git
  metadata (`.git`, `.gitmodules`, … anything `.git*` but `.gitignore` and `.gitattributes`)
  anywhere; a path with an empty, `.` or `..` component, a control character or bytes that are
  not UTF-8; a top-level file other than `README.md`, `LICENSE`, `.gitignore`,
  `.gitattributes` and `<name>.md`; under `.skilld/` anything but the manifest and
  `usage/<host>.json`.
* `entry_problem(mode, size)` (pure): a symbolic link (120000), a gitlink (160000), any mode
  but a plain or executable file, a file over `MAX_FILE_BYTES`.
* `check_tree(git, commit)`: every file of a fetched commit's tree against both, in one
  `git ls-tree` call; the problems, each naming the commit that brought its path.
* `refusals_of(git, commit)`: those, every skill file the commit brings that is not UTF-8
  text or holds a live load-time shell trigger, and every manifest or usage file it brings
  that is too large or nested too deep to decode (boundedjson): what a sync round refuses,
  and what `status` and `doctor` read back.

`.gitattributes` is allowed but never honoured: `neutralise_attributes` writes
`$GIT_DIR/info/attributes`, which git ranks above every `.gitattributes`, unsetting each
attribute that converts or filters content, and no filter, diff or merge driver is configured
anywhere git reads (skilld's git ignores the user's and system config; the repository's own
config is local, and a remote cannot write it).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from skilld.boundedjson import JSONRefused
from skilld.boundedjson import check as check_json
from skilld.fsutil import MAX_FILE_BYTES
from skilld.skills.document import neutralise_file
from skilld.skills.layout import ARCHIVE_DIR
from skilld.skills.names import MAX_NAME_LENGTH, NAME_PATTERN, is_safe_path_component
from skilld.sync.git import Git
from skilld.sync.layout import (
    GITIGNORE,
    HOST_LOCAL_PATTERNS,
    MANIFEST_PATH,
    META_DIR,
    USAGE_DIR,
    check_host,
    skill_name_of_path,
)
from skilld.sync.objects import diff_trees, read_objects

GITATTRIBUTES = ".gitattributes"
TOP_LEVEL_FILES = frozenset({"README.md", "LICENSE", GITIGNORE, GITATTRIBUTES})
_GIT_FILES = frozenset({GITIGNORE, GITATTRIBUTES})
_PLAIN_MODES = frozenset({"100644", "100755"})
_ODD_NAME = "its name has an empty, '.' or '..' component"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: The suffix `archive` gives a name already in the archive.
_ARCHIVE_STAMP = re.compile(r"-\d{8}T\d{6}Z$")
#: Every attribute that changes bytes between the repository and the work tree, or names a
#: driver: unset for every path, above whatever a `.gitattributes` says.
NEUTRAL_ATTRIBUTES = (
    "# skilld: a .gitattributes from the remote never converts or filters a file\n"
    "* !filter !diff !merge !text !eol !crlf !ident !working-tree-encoding !export-subst\n"
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A fetched commit that was not applied: `path` (as printed) may not be in the library."""

    commit: str  # the commit that brought the path (else the fetched tip)
    tip: str  # the remote's branch as fetched
    path: str
    why: str
    exact: bool = True  # `path` is the name itself, as git reads it (see `shown`)

    def __str__(self) -> str:
        return f"refused: {self.path}: {self.why}"

    def repair(self, root: Path, branch: str) -> str:
        """The commands a person runs to take the path out of the remote's branch, in a fresh
        clone of it. The remote's URL is read from the library's own config rather than
        printed (it may hold a token). A name git would read otherwise than it is printed
        (`..`, control characters, bytes that are not UTF-8) is taken out by reverting the
        commit that brought it."""
        library = shlex.quote(str(root))
        quoted_branch = shlex.quote(branch)
        if self.exact:
            remove = f'git -C "$fix" rm -r --quiet --cached -- {shlex.quote(self.path)}'
            commit = f'git -C "$fix" commit --quiet -m {shlex.quote(f"remove {self.path}")}'
        else:
            remove = f'git -C "$fix" revert --no-edit {self.commit}'
            commit = "true"
        return (
            f'fix="$(mktemp -d)" && git clone --quiet --branch {quoted_branch} '
            f'"$(git -C {library} remote get-url origin)" "$fix" && {remove} && {commit} && '
            f'git -C "$fix" push origin {quoted_branch}'
        )


def shown(path: str) -> str:
    """A path decoded with surrogateescape, as a line of text can hold it."""
    raw = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], raw)


def is_host_local(component: str) -> bool:
    # Case-folded: on a case-insensitive filesystem `.Usage.json` is the sidecar.
    folded = component.casefold()
    return any(fnmatch.fnmatchcase(folded, pattern.casefold()) for pattern in HOST_LOCAL_PATTERNS)


def path_problem(path: str) -> str | None:
    """Why `path` (relative, `/`-separated, decoded with surrogateescape) may not be in a
    library's repository; None when it may."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    if _CONTROL.search(path):
        return "its name holds a control character (a newline, say)"
    if any(unicodedata.category(char) == "Cf" for char in path):
        # macOS's filesystem ignores some of these: `.usage\u200c.json` would be the sidecar.
        return "its name holds an invisible formatting character"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return _ODD_NAME
    for part in parts:
        if is_host_local(part):
            return "a host-local file, never shared"
        if part.casefold().startswith(".git") and part not in _GIT_FILES:
            return "git metadata, never shared"
    if parts[0] == META_DIR:
        if path == MANIFEST_PATH or _is_usage_file(path):
            return None
        return f"not the manifest or a host's usage file under {META_DIR}/"
    if parts[0] == ARCHIVE_DIR and len(parts) == 2:
        if _is_flat_skill(_ARCHIVE_STAMP.sub("", parts[1].removesuffix(".md")) + ".md"):
            return None
        return "not an archived skill"
    if parts[0] == ARCHIVE_DIR:
        parts = parts[1:]
    if len(parts) == 1:
        if path in TOP_LEVEL_FILES or _is_flat_skill(parts[0]):
            return None
        return "not a skill folder, the manifest, a usage file or a README, LICENSE or .git* file"
    if not is_safe_path_component(parts[0]):
        return "not in a skill folder"
    return None


def entry_problem(mode: str, size: int | None, *, limit: int = MAX_FILE_BYTES) -> str | None:
    """Why a tree entry of `mode` and `size` may not be in a library; None when it may."""
    if mode == "120000":
        return "a symbolic link"
    if mode == "160000":
        return "a gitlink (submodule)"
    if mode not in _PLAIN_MODES:
        return f"an entry of mode {mode}"
    if size is not None and size > limit:
        return f"{size:,} bytes, over the limit of {limit:,}"
    return None


def check_tree(
    git: Git, tip: str, *, since: str | None, limit: int = MAX_FILE_BYTES
) -> list[Refusal]:
    """Every file of `tip`'s tree that may not be in the library (none: it may be applied).
    `since` is what this host has already (the commit that brought a path is looked for in
    `tip` not reachable from it)."""
    raw = git.run("ls-tree", "-r", "-z", "--long", "--full-tree", tip).stdout
    found: list[tuple[str, str]] = []
    for record in raw.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, _kind, _object, size = meta.decode().split()
        path = name.decode("utf-8", "surrogateescape")
        why = entry_problem(mode, int(size) if size.isdigit() else None, limit=limit)
        why = why or path_problem(path)
        if why is not None:
            found.append((path, why))
    return [refusal(git, tip, since, path, why) for path, why in found]


def refusals_of(
    git: Git, tip: str, *, since: str | None, limit: int = MAX_FILE_BYTES
) -> list[Refusal]:
    """Everything the fetched `tip` may not bring: `check_tree`'s paths and entries, then
    every skill it brings with a live load-time shell trigger, and every manifest or usage
    file too large or too deep to decode. The one check a sync round applies before it moves
    and `status` and `doctor` read back from the last fetch."""
    refusals = check_tree(git, tip, since=since, limit=limit)
    return refusals + _content_problems(git, tip, since, {r.path for r in refusals}, limit)


def _content_problems(
    git: Git, tip: str, since: str | None, refused: set[str], limit: int
) -> list[Refusal]:
    """No skill the remote brings may run anything as an agent loads it (docs/security.md):
    a teammate's file, or one an older skilld wrote, with a load-time shell trigger is
    refused like any path a library may not hold. skilld does not rewrite it: it is not
    its own. A skill file that is not UTF-8 text is refused too: no agent reads it as a
    skill, and every listing would show it broken. So is a manifest or usage file that no
    host would decode (boundedjson: nested too deep, say): every host reads them."""
    brought = {
        change.path: change.new[1]
        for change in diff_trees(git, [(tip, since)]).get(tip, [])
        if change.new is not None
        and change.path not in refused
        and (skill_name_of_path(change.path) is not None or _is_meta_file(change.path))
    }
    contents = read_objects(git, set(brought.values()))
    problems = []
    for path, object_id in sorted(brought.items()):
        data = contents.get(object_id)
        why = None if data is None else _content_problem(path, data, limit)
        if why is not None:
            problems.append(refusal(git, tip, since, path, why))
    return problems


def _content_problem(path: str, data: bytes, limit: int) -> str | None:
    if _is_meta_file(path):
        try:
            check_json(data, limit=limit)
        except JSONRefused as exc:
            return f"JSON {exc}, which no host reads"
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{NOT_UTF8} (a bad byte at {exc.start})"
    return LIVE_TRIGGER if neutralise_file(data) != data else None


#: Why a skill file with a load-time shell trigger is refused (docs/security.md).
LIVE_TRIGGER = (
    "a load-time shell trigger (!`command`, or a ```! or ~~~! fence) an agent would run as it "
    "loads the skill: put a space after the ! (a backslash before a fence's !)"
)
#: Why a skill file that is not UTF-8 is refused.
NOT_UTF8 = "a skill file that is not UTF-8 text"


def refusal(git: Git, tip: str, since: str | None, path: str, why: str) -> Refusal:
    """`path` of the fetched `tip` refused for `why`, naming the commit that brought it."""
    return Refusal(
        _brought_by(git, tip, since, path), tip, shown(path), why,
        exact=shown(path) == path and why != _ODD_NAME,
    )  # fmt: skip


def neutralise_attributes(git_dir: Path) -> None:
    """Make sure `$GIT_DIR/info/attributes` unsets every converting attribute (see above)."""
    path = git_dir / "info" / "attributes"
    try:
        current = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        current = ""
    if NEUTRAL_ATTRIBUTES in current:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        current + ("" if current.endswith("\n") or not current else "\n") + NEUTRAL_ATTRIBUTES
    )


def _brought_by(git: Git, tip: str, since: str | None, path: str) -> str:
    args = ["--literal-pathspecs", "rev-list", "-1", tip]
    if since is not None:
        args += ["--not", since]
    found = git.run(*args, "--", path, check=False).line
    return found or tip


def _is_meta_file(path: str) -> bool:
    """The manifest or a host's usage file: the JSON under `.skilld/` every host reads."""
    return path == MANIFEST_PATH or _is_usage_file(path)


def _is_usage_file(path: str) -> bool:
    folder, _, name = path.rpartition("/")
    if folder != USAGE_DIR or not name.endswith(".json"):
        return False
    try:
        check_host(name.removesuffix(".json"))
    except ValueError:
        return False
    return True


def _is_flat_skill(name: str) -> bool:
    stem = name.removesuffix(".md")
    return stem != name and len(stem) <= MAX_NAME_LENGTH and bool(NAME_PATTERN.fullmatch(stem))
