"""Where skills land (docs/design.md): the libraries, and which library each source feeds.

A library is one skills dir with its dialect, layout, cap, name prefix, ownership, history and
usage sidecar. Resolution is a pure function of the configuration and the agents found on this
machine:

* `[[libraries]]` tables declare libraries; a table named after an agent's library (`dsh`,
  `claude`, `codex`, `hermes`) takes that agent's defaults for every key it leaves out;
* else a `[skills]` table with an explicit `dir` is the single library (`default`) of every
  source, as before libraries existed;
* else each agent found gets its own library, the one it loads.

`[skills]`'s other keys (cap, prefix, content limit, history) are defaults for every library;
dialect and layout come from the agent unless a `[[libraries]]` table says otherwise.

A session's project is here too, because an agent's hook needs it (`skilld usage use`): its
root, found from the working directory resolved; the roots that are never a project (`/`, the
home, system directories); and whether the project keeps skills in real folders inside its
root. Whether skilld may *write* into a project is decided in `skilld.projects`.
"""

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from skilld.config import (
    SOURCE_KINDS,
    Config,
    LibraryConfig,
    SourceConfig,
    dsh_home,
    hermes_home,
)
from skilld.errors import ConfigError, LibraryError, UsageError
from skilld.fsutil import UnsafePath, real_subdir

#: Never a project root, whatever the globs say: the filesystem's top, the folders that hold
#: every user's or every package's files, and scratch space shared by everyone.
NEVER_ROOTS = frozenset(
    {
        "/home",
        "/Users",
        "/root",
        "/usr",
        "/usr/local",
        "/var",
        "/var/tmp",
        "/opt",
        "/srv",
        "/mnt",
        "/media",
        "/snap",
        "/tmp",
        "/private",
        "/private/tmp",
        "/private/var",
        "/Applications",
        "/Volumes",
    }
)
#: Never a project root, nor anything below them: the system's own programs, libraries and
#: configuration, and the kernel's and devices' pseudo-filesystems.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr/bin",
    "/usr/include",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/sbin",
    "/usr/share",
    "/System",
    "/Library",
    "/private/etc",
)

#: The name of the single library of a `[skills] dir` configuration.
DEFAULT_LIBRARY = "default"
#: Separates a user library's name from a project root in a project library's name.
PROJECT_MARK = "@"


def _env_home(variable: str, fallback: str) -> Path:
    value = os.environ.get(variable)
    return Path(value).expanduser() if value else Path.home() / fallback


class AgentDefaults(NamedTuple):
    """Where an agent keeps its sessions, and the library it loads: its name, dir, dialect
    and project skills dir."""

    sessions: Callable[[], Path]
    library: str
    dir: Callable[[], Path]
    dialect: str
    project_dir: str | None
    #: The agent finds skills below category folders (`<dir>/<category>/<name>/SKILL.md`).
    recursive: bool = False


#: Source kind -> where its agent writes sessions and which library it loads (see the README's
#: "Configure for your agent" for what each agent reads).
AGENTS: Mapping[str, AgentDefaults] = {
    "dsh": AgentDefaults(
        lambda: dsh_home() / "sessions",
        "dsh",
        lambda: dsh_home() / "skills",
        "dsh",
        ".dsh/skills",
    ),
    "claude-code": AgentDefaults(
        lambda: _env_home("CLAUDE_CONFIG_DIR", ".claude") / "projects",
        "claude",
        lambda: _env_home("CLAUDE_CONFIG_DIR", ".claude") / "skills",
        "claude",
        ".claude/skills",
    ),
    "codex": AgentDefaults(
        lambda: _env_home("CODEX_HOME", ".codex") / "sessions",
        "codex",
        lambda: Path.home() / ".agents" / "skills",
        "agentskills",
        ".agents/skills",
    ),
    "hermes": AgentDefaults(
        lambda: hermes_home() / "state.db",
        "hermes",
        lambda: hermes_home() / "skills",
        "agentskills",
        None,
        recursive=True,
    ),
}
_AGENT_BY_LIBRARY = {defaults.library: kind for kind, defaults in AGENTS.items()}


def default_path(kind: str) -> Path:
    """Where `kind` keeps its sessions when the config names no path."""
    if kind == "jsonl":
        raise ValueError("a jsonl source has no default path: set `path` in its [[sources]] entry")
    if kind not in AGENTS:
        raise ValueError(
            f"unknown source kind {kind!r} (expected one of {', '.join(SOURCE_KINDS)})"
        )
    return AGENTS[kind].sessions()


def default_sources() -> tuple[SourceConfig, ...]:
    """Zero config: every agent whose default transcript location exists on this machine."""
    return tuple(
        SourceConfig(kind=kind, path=path)  # type: ignore[arg-type]
        for kind in AGENTS
        if (path := default_path(kind)).exists()
    )


class LibrarySpec(NamedTuple):
    """One library, every key resolved."""

    name: str
    dir: Path
    dialect: str
    layout: str
    max_managed: int
    name_prefix: str
    project_dir: str | None
    remote: str | None
    branch: str
    recursive: bool
    extra_dirs: tuple[Path, ...]
    max_content_chars: int
    history_keep: int
    #: The source kind whose agent loads this library, when it is an agent's own (by name, or
    #: by dir): it decides the form the library writes (`skills.names.form_of`).
    agent: str | None = None
    #: For a project library: the project root it belongs to.
    project_root: Path | None = None

    @property
    def storage_key(self) -> str:
        """A path component naming this library in the state dir (history, review, locks)."""
        return storage_key(self.name)


class Route(NamedTuple):
    source: SourceConfig  # its `path` resolved
    library: str


class Routing(NamedTuple):
    libraries: Mapping[str, LibrarySpec]
    routes: tuple[Route, ...]
    #: The sources were found on this machine (no `[[sources]]` configured).
    detected: bool = False

    def library_of(self, source_id: str) -> LibrarySpec:
        for route in self.routes:
            if source_id_of(route.source) == source_id:
                return self.libraries[route.library]
        raise KeyError(source_id)


def source_id_of(source: SourceConfig) -> str:
    return f"{source.kind}:{source.path}"


def storage_key(name: str) -> str:
    user, mark, root = name.partition(PROJECT_MARK)
    if not mark:
        return name
    from skilld.digest import sha256_hex  # project libraries only: a hook loads this module

    slug = re.sub(r"[^a-z0-9]+", "-", Path(root).name.lower()).strip("-") or "root"
    digest = sha256_hex(root.encode("utf-8"))[:10]
    return f"{user}{PROJECT_MARK}{slug}-{digest}"


def resolve(
    config: Config, *, detected_sources: Callable[[], tuple[SourceConfig, ...]] | None = None
) -> Routing:
    """The libraries and routes of `config`. Raises ConfigError naming what to fix.

    `detected_sources` lists the agents found (default: on this machine, `default_sources`);
    it is consulted only when the configuration names no `[[sources]]`.
    """
    detected_sources = detected_sources or default_sources
    detected = not config.sources
    sources = config.sources or detected_sources()
    declared = {table.name: _declared(table, config) for table in config.libraries}
    explicit_dir = _explicit_dir(config)
    if declared and explicit_dir:
        raise ConfigError(
            "with [[libraries]] tables, set `dir` in each library instead", "skills.dir"
        )
    libraries: dict[str, LibrarySpec] = dict(declared)
    if explicit_dir:
        libraries[DEFAULT_LIBRARY] = _legacy(config)
    routes = []
    for index, source in enumerate(sources):
        key = f"sources[{index}].library"
        try:
            path = source.path or default_path(source.kind)
        except ValueError as exc:
            raise ConfigError(str(exc), f"sources[{index}].path") from None
        name = _route(source, libraries, legacy=explicit_dir, key=key)
        if name not in libraries:
            libraries[name] = _agent_library(AGENTS[_AGENT_BY_LIBRARY[name]], config)
        routes.append(Route(source._replace(path=path), name))
    _check_distinct_dirs(libraries)
    return Routing(libraries, tuple(routes), detected=detected)


def nameable_agent_libraries(config: Config) -> tuple[str, ...]:
    """The agents' own libraries a command may name (`--library claude`) whether or not that
    agent has run on this machine yet: all of them when the configuration leaves libraries to
    the agents (no `[[libraries]]` table, no `[skills] dir`); none when it declares its own,
    for those are the whole set."""
    if config.libraries or _explicit_dir(config):
        return ()
    return tuple(_AGENT_BY_LIBRARY)


def with_named_library(routing: Routing, config: Config, name: str | None) -> Routing:
    """`routing` with the agent's library a command names explicitly added when it lacks it,
    with that agent's defaults: an agent is found by its sessions, so on a machine where it
    has not run yet its library is unknown, yet docs/mcp.md registers `skilld mcp --library
    claude` before that first run. The daemon never calls this: it reads and writes only the
    agents it finds."""
    if name is None or name in routing.libraries or name not in nameable_agent_libraries(config):
        return routing
    agent = _agent_library(AGENTS[_AGENT_BY_LIBRARY[name]], config)
    libraries = {**routing.libraries, name: agent}
    _check_distinct_dirs(libraries)
    return routing._replace(libraries=libraries)


#: An agent names its own library in the environment it starts skilld with (its hooks, its
#: MCP server entry).
LIBRARY_ENV = "SKILLD_LIBRARY"


def requested_library(explicit: str | None) -> str | None:
    """The library a command was asked for: `--library`, else `$SKILLD_LIBRARY`."""
    return explicit or os.environ.get(LIBRARY_ENV) or None


def choose_library(
    names: Sequence[str],
    *,
    configured: int,
    requested: str | None,
    holding: Sequence[str],
    skill: str | None,
    nameable: Sequence[str] = (),
) -> str:
    """The library a command acts on, among `names` (the `configured` first, then project
    libraries): the one `requested` (`--library`, `$SKILLD_LIBRARY`), else the only one that
    holds `skill`, else the only configured one. Raises UsageError listing the choices, and
    the `nameable` ones the command could have requested too (`nameable_agent_libraries`)."""
    known = ", ".join(dict.fromkeys([*names, *nameable])) or "none"
    if requested is not None:
        if requested in names:
            return requested
        raise UsageError(f"no library named {requested!r} (known: {known})")
    if len(holding) == 1:
        return holding[0]
    if len(holding) > 1:
        raise UsageError(f"{skill} is in several libraries ({', '.join(holding)}); add --library")
    if configured == 1:
        return names[0]
    if not names:
        raise UsageError("no library is configured and no agent was found on this machine")
    raise UsageError(f"which library? add --library NAME (one of: {known})")


def project_library(user: LibrarySpec, root: Path) -> LibrarySpec:
    """The library of `root`'s project skills for the agent of `user` (its own cap, history,
    ownership and usage sidecar)."""
    assert user.project_dir is not None
    return user._replace(
        name=f"{user.name}{PROJECT_MARK}{root}",
        dir=root / user.project_dir,
        project_dir=None,
        remote=None,
        recursive=False,
        extra_dirs=(),
        project_root=root,
    )


def project_root_of(cwd: str) -> Path | None:
    """The nearest directory holding `.git` at or above `cwd` resolved (realpath: `..` and
    links never lead a session into another project), else that resolved directory (DSH's
    rule). None for a relative `cwd`: it names no directory skilld could find."""
    if not os.path.isabs(cwd) or "\x00" in cwd:
        return None
    start = Path(os.path.realpath(cwd))
    for directory in (start, *start.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return start


def project_root(user: LibrarySpec, cwd: str | None) -> Path | None:
    """The project a session working in `cwd` belongs to, for the agent of `user`: None when
    the agent keeps no project skills, the directory is unknown, or the project's skills dir
    would be the user library itself (a session in the home directory is no project)."""
    if not cwd or not user.project_dir:
        return None
    root = project_root_of(cwd)
    if root is None or os.path.realpath(root / user.project_dir) == os.path.realpath(user.dir):
        return None
    return root


def resolved_home() -> Path:
    """The home directory as project roots are compared with it: resolved."""
    return Path(os.path.realpath(Path.home()))


def never_root_reason(root: Path, home: Path) -> str | None:
    """Why `root` can never be a project root (the filesystem root, the home directory or one
    above it, a system directory), or None when it may be one."""
    text = str(root)
    if root == Path(root.anchor):
        return f"{root} is the filesystem root"
    if root == home:
        return f"{root} is the home directory"
    if root in home.parents:
        return f"{root} holds the home directory"
    if text in NEVER_ROOTS:
        return f"{root} is a system directory"
    for tree in SYSTEM_TREES:
        if text == tree or text.startswith(tree + "/"):
            return f"{root} is a system directory"
    return None


def project_skills_dir(root: Path, project_dir: str) -> Path | None:
    """`root/project_dir` when the project keeps skills there: the root may be a project at
    all (`never_root_reason`), and the dir and every folder between it and the root are real
    directories (a link could lead into another agent's library, or out of the repository).
    None otherwise."""
    if never_root_reason(root, resolved_home()) is not None:
        return None
    try:
        return real_subdir(root, Path(project_dir).parts)
    except (UnsafePath, OSError):
        return None


def require_real_project_dir(spec: LibrarySpec) -> None:
    """Right before skilld writes into a project library: its skills dir and every folder up
    to the project root must be real directories (missing ones are created, one by one).
    Raises LibraryError when one is a link or not a folder: it could lead into another agent's
    library, or out of the repository. Nothing to check for any other library."""
    root = spec.project_root
    if root is None or not spec.dir.is_relative_to(root):
        return  # a user library, or a project's copy in a sandbox (`replay`)
    try:
        made = real_subdir(root, spec.dir.relative_to(root).parts, create=True)
    except UnsafePath as exc:
        raise LibraryError(f"{exc}: project skills are written only inside {root}") from None
    if made is None:
        raise LibraryError(f"the project root {root} is gone")


def _route(
    source: SourceConfig,
    libraries: Mapping[str, LibrarySpec],
    *,
    legacy: bool,
    key: str,
) -> str:
    agent = AGENTS.get(source.kind)
    if source.library:
        if source.library in libraries or source.library in _AGENT_BY_LIBRARY:
            return source.library
        known = ", ".join(sorted({*libraries, *_AGENT_BY_LIBRARY}))
        raise ConfigError(f"no library named {source.library!r} (known: {known})", key)
    if legacy:
        return DEFAULT_LIBRARY
    if agent is not None:
        # Each agent learns into the library it loads: a declared library in that dir, else
        # its own (declared or not); declaring another library changes nothing for it.
        home = Path(os.path.abspath(agent.dir()))
        for name, spec in libraries.items():
            if Path(os.path.abspath(spec.dir)) == home:
                return name
        return agent.library
    if len(libraries) == 1:
        return next(iter(libraries))
    if not libraries:
        raise ConfigError(
            f"a {source.kind} source must name its library (set `library`, and declare it "
            "in a [[libraries]] table)",
            key,
        )
    raise ConfigError(
        f"which library does this {source.kind} source feed? set `library` to one of "
        f"{', '.join(sorted(libraries))}",
        key,
    )


def _declared(table: LibraryConfig, config: Config) -> LibrarySpec:
    kind = _AGENT_BY_LIBRARY.get(table.name)
    agent = AGENTS[kind] if kind is not None else None
    if table.dir is None and agent is None:
        raise ConfigError(
            f"required for a library that is not an agent's own ({', '.join(_AGENT_BY_LIBRARY)})",
            f"libraries.{table.name}.dir",
        )
    base = _agent_library(agent, config) if agent is not None else _legacy(config)
    project_dir = base.project_dir if table.project_dir is None else (table.project_dir or None)
    return base._replace(
        name=table.name,
        dir=table.dir if table.dir is not None else base.dir,
        dialect=table.dialect or base.dialect,
        layout=table.layout or base.layout,
        max_managed=table.max_managed if table.max_managed is not None else base.max_managed,
        name_prefix=table.name_prefix if table.name_prefix is not None else base.name_prefix,
        project_dir=project_dir,
        remote=_remote(table.remote, config),
        branch=table.branch,
        agent=kind if kind is not None else _agent_loading(table.dir),
    )


def _agent_loading(directory: Path | None) -> str | None:
    """The agent (source kind) that loads skills from `directory`: the one whose own skills
    dir it is, so a library declared under another name still writes what that agent lists."""
    if directory is None:
        return None
    where = Path(os.path.abspath(directory))
    for kind, agent in AGENTS.items():
        if Path(os.path.abspath(agent.dir())) == where:
            return kind
    return None


def _explicit_dir(config: Config) -> bool:
    """A `[skills] dir` set (file or environment): the single library of every source."""
    return config.origins.get("skills.dir") in ("file", "env")


def _legacy(config: Config) -> LibrarySpec:
    skills = config.skills
    return LibrarySpec(
        name=DEFAULT_LIBRARY,
        dir=skills.dir,
        dialect=skills.dialect,
        layout=skills.layout,
        max_managed=skills.max_managed,
        name_prefix=skills.name_prefix,
        project_dir=None,
        remote=_remote(skills.remote, config),
        branch=skills.branch,
        recursive=False,
        extra_dirs=skills.extra_dirs,
        max_content_chars=skills.max_content_chars,
        history_keep=skills.history_keep,
        agent=_agent_loading(skills.dir),
    )


def _agent_library(agent: AgentDefaults, config: Config) -> LibrarySpec:
    kind = _AGENT_BY_LIBRARY[agent.library]
    return _legacy(config)._replace(
        name=agent.library,
        dir=agent.dir(),
        dialect=agent.dialect,
        layout="dir",
        project_dir=agent.project_dir,
        remote=None,
        branch="main",
        recursive=agent.recursive,
        agent=kind,
    )


def _remote(remote: str | None, config: Config) -> str | None:
    """A remote given as a relative path is relative to the config file, like other paths."""
    if not remote:
        return None
    if "://" in remote or re.match(r"^[\w.-]+@[\w.-]+:", remote):
        return remote  # a URL, or scp-like `user@host:path`
    path = Path(os.path.expandvars(os.path.expanduser(remote)))
    if not path.is_absolute() and config.path is not None:
        path = config.path.parent.resolve() / path
    return str(path)


def _check_distinct_dirs(libraries: Mapping[str, LibrarySpec]) -> None:
    seen: dict[Path, str] = {}
    for name, spec in libraries.items():
        where = Path(os.path.abspath(spec.dir))
        if where in seen:
            raise ConfigError(
                f"libraries {seen[where]!r} and {name!r} share the dir {spec.dir}; "
                "each library needs its own",
                "libraries",
            )
        seen[where] = name
