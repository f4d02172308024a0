"""Configuration: TOML file, `SKILLD_<SECTION>_<KEY>` overrides, validated into frozen values.

Where a value comes from is resolved once, here: `--config PATH`, else `$SKILLD_CONFIG`, else
`$XDG_CONFIG_HOME/skilld/config.toml`, else built-in defaults. Relative paths in a file are taken
relative to that file, so an example config works from any working directory.

Each section is a `NamedTuple` whose annotations are its schema: the type a value is coerced
to, and (`Annotated`) the check it must pass. Every command loads the config, so the schema is
built the cheap way: named tuples, and annotations evaluated once here rather than postponed.
"""

import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, get_args, get_origin

from skilld._config_cache import cached_table, store_table
from skilld.errors import ConfigError

ValueOrigin = Literal["default", "file", "env"]

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """`"90s"`, `"15m"`, `"24h"`, `"7d"`, `"2w"` → seconds: digits, at most one decimal point,
    a unit. (Read without a regular expression: every command checks `evolve.backfill`, and
    compiling one would cost a hook's `usage use` a tenth of a millisecond.)"""
    cleaned = text.strip().lower()
    number, unit = cleaned[:-1].rstrip(), cleaned[-1:]
    whole, point, fraction = number.partition(".")
    decimal = whole.isdecimal() and (not point or fraction.isdecimal())
    if unit not in _DURATION_UNITS or not decimal:
        raise ValueError(f"not a duration (use e.g. 90s, 15m, 24h, 7d): {text!r}")
    return float(number) * _DURATION_UNITS[unit]


def _home_dir(env_var: str, fallback: str) -> Path:
    value = os.environ.get(env_var)
    return Path(value) if value else Path.home() / fallback


def default_skills_dir() -> Path:
    return dsh_home() / "skills"


def dsh_home() -> Path:
    return _home_dir("DSH_HOME", ".dsh")


def hermes_home() -> Path:
    return _home_dir("HERMES_HOME", ".hermes")


def default_state_dir() -> Path:
    return _home_dir("XDG_STATE_HOME", ".local/state") / "skilld"


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be greater than 0"


def _non_negative(value: float) -> str | None:
    return None if value >= 0 else "must be 0 or more"


#: `Annotated` checks: a function of the coerced value returning the problem, or None.
Positive = Annotated[int, _positive]
NonNegative = Annotated[int, _non_negative]
PositiveFloat = Annotated[float, _positive]
NonNegativeFloat = Annotated[float, _non_negative]

Dialect = Literal["dsh", "claude", "agentskills"]
Layout = Literal["dir", "flat"]


class SkillsConfig(NamedTuple):
    #: Default: `default_skills_dir()`, read when the config is built (see `_DEFAULT_FACTORIES`).
    dir: Path
    layout: Layout = "dir"
    dialect: Dialect = "dsh"
    extra_dirs: tuple[Path, ...] = ()
    max_managed: NonNegative = 50
    name_prefix: str = ""
    max_content_chars: Positive = 20000
    history_keep: NonNegative = 10
    #: A git URL or path: the single library is a work tree of this team repository.
    remote: str = ""
    branch: str = "main"


class LibraryConfig(NamedTuple):
    """One `[[libraries]]` table; unset keys come from the agent's defaults or `[skills]`."""

    name: str
    dir: Path | None = None
    dialect: Dialect | None = None
    layout: Layout | None = None
    max_managed: Annotated[int | None, _non_negative] = None
    name_prefix: str | None = None
    #: Where a project keeps this agent's skills, relative to the project root ("" = none).
    project_dir: str | None = None
    remote: str | None = None
    branch: str = "main"


def _check_library(library: LibraryConfig) -> None:
    if not re.fullmatch(_LIBRARY_NAME, library.name):
        raise ConfigError(
            f"must be kebab-case (a-z, 0-9, single hyphens), got {library.name!r}",
            "libraries.name",
        )
    if library.project_dir:
        check_project_dir(library.project_dir, "libraries.project_dir")
    if not library.branch.strip() or any(c.isspace() for c in library.branch):
        raise ConfigError(f"not a branch name: {library.branch!r}", "libraries.branch")


_LIBRARY_NAME = r"[a-z0-9]+(?:-[a-z0-9]+)*"


def check_project_dir(value: str, key: str) -> str:
    """A relative path inside a project: no `..`, not absolute."""
    parts = Path(value).parts
    if Path(value).is_absolute() or not parts or ".." in parts or "\x00" in value:
        raise ConfigError(f"must be a relative path inside the project, got {value!r}", key)
    return value


class StateConfig(NamedTuple):
    #: Default: `default_state_dir()`, read when the config is built.
    dir: Path


SourceKind = Literal["jsonl", "dsh", "claude-code", "codex", "hermes"]
SOURCE_KINDS: tuple[str, ...] = get_args(SourceKind)


class SourceConfig(NamedTuple):
    kind: SourceKind
    path: Path | None = None
    glob: str = ""
    include_subagents: bool = False
    #: The library this source learns into (a `[[libraries]]` name); default: its agent's.
    library: str = ""


class EvolveConfig(NamedTuple):
    interval_seconds: PositiveFloat = 60
    cooldown_seconds: NonNegativeFloat = 300
    min_messages: Positive = 4
    window_max_chars: Positive = 60000
    tool_result_max_chars: Positive = 2000
    max_line_bytes: Positive = 8 * 1024 * 1024
    max_attempts: Positive = 5
    publish: Literal["auto", "review"] = "auto"
    backfill: str = "24h"
    similarity_threshold: float = 0.85
    #: A turn still unfinished after this long without new messages is reflected as it is
    #: (the agent crashed or was killed mid-turn and will never finish it).
    turn_timeout_seconds: PositiveFloat = 1800
    #: "user": every skill goes to the user library; "auto": the model may mark a skill as
    #: belonging to the session's project.
    scope: Literal["user", "auto"] = "user"
    #: Projects whose skills dir skilld may create and write into: path globs (absolute once
    #: expanded) matched on a project's resolved root, or repository globs (`github.com/acme/*`)
    #: matched on its normalised `origin` remote (skilld.projects).
    projects: tuple[str, ...] = ()
    #: Branches (globs) a project skill may be written from; a project lesson learned on any
    #: other branch is staged for review. Empty: every branch.
    project_branches: tuple[str, ...] = ()
    #: The user's own instructions to the reflecting model (house style, never capture ...).
    guidance: str = ""
    guidance_file: Path | None = None


def _check_evolve(evolve: EvolveConfig) -> None:
    if evolve.backfill not in ("none", "all"):
        try:
            parse_duration(evolve.backfill)
        except ValueError as exc:
            raise ConfigError(f"{exc}; or use 'none' or 'all'", "evolve.backfill") from None
    if not 0 < evolve.similarity_threshold <= 1:
        raise ConfigError("must be in (0, 1]", "evolve.similarity_threshold")


class SyncConfig(NamedTuple):
    """Team libraries shared over git (a library with `remote`)."""

    interval_seconds: PositiveFloat = 300
    #: This machine's stable id in the team; default: the hostname.
    host: str = ""


def _check_sync(sync: SyncConfig) -> None:
    if sync.host and not re.fullmatch(_HOST_NAME, sync.host):
        raise ConfigError(
            f"must be letters, digits, '.', '_' or '-', got {sync.host!r}", "sync.host"
        )


_HOST_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"


class WebConfig(NamedTuple):
    """The panel (`skilld web`), and whether `skilld run` serves it too."""

    #: "HOST:PORT" for `skilld run` to serve the panel on; "" = the daemon serves none.
    listen: str = ""
    #: A file holding the token every request must carry (needed to bind a non-loopback
    #: address); `$SKILLD_WEB_TOKEN` gives it directly.
    token_file: Path | None = None


def split_listen(listen: str) -> tuple[str, int]:
    """`"127.0.0.1:8741"` → ("127.0.0.1", 8741); `"[::1]:8741"` → ("::1", 8741)."""
    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"must be HOST:PORT, e.g. 127.0.0.1:8741, got {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _check_web(web: WebConfig) -> None:
    if web.listen:
        try:
            split_listen(web.listen)
        except ValueError as exc:
            raise ConfigError(str(exc), "web.listen") from None


class LLMConfig(NamedTuple):
    base_url: str = "https://api.deepseek.com/v1"
    model: str = "deepseek-chat"
    api_key_env: str = "DEEPSEEK_API_KEY"
    timeout_seconds: PositiveFloat = 60
    max_retries: NonNegative = 3
    response_format: Literal["auto", "json_schema", "json_object", "none"] = "auto"
    max_concurrency: Positive = 2
    max_calls_per_hour: NonNegative = 120
    temperature: NonNegativeFloat = 0.2
    max_tokens: Positive = 4096
    #: The spend cap in tokens the server reports (`usage`) per UTC day; 0 = unlimited.
    max_tokens_per_day: NonNegative = 0
    #: The model's context in tokens, which windows are fitted to; 0 = learn it from the server.
    context_tokens: NonNegative = 0

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None


class CuratorConfig(NamedTuple):
    enabled: bool = True
    interval_hours: PositiveFloat = 24
    stale_after_days: PositiveFloat = 30
    archive_after_days: PositiveFloat = 90
    consolidate: bool = False
    disable_stale: bool = False


def _check_curator(curator: CuratorConfig) -> None:
    if curator.archive_after_days < curator.stale_after_days:
        raise ConfigError(
            "must not be smaller than curator.stale_after_days", "curator.archive_after_days"
        )


def _share(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be 0 or more and less than 1"


def _block_hours(value: float) -> str | None:
    return None if 1 <= value <= 24 else "must be from 1 to 24 (blocks cut each day from 04:00)"


class EffectConfig(NamedTuple):
    #: After-exposures a skill needs before its verdict is more than `too-early`.
    min_exposures: Positive = 10
    #: Share of time blocks a learned skill is withheld (DESIGN.md §14); 0: no holdout.
    holdout: Annotated[float, _share] = 0.2
    #: Length of a holdout block, in hours, blocks starting at 04:00 local time.
    holdout_block_hours: Annotated[int, _block_hours] = 24
    #: A holdout not decided after this many days ends; the skill stays present.
    holdout_max_days: Positive = 60


class LogConfig(NamedTuple):
    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"


class Config(NamedTuple):
    skills: SkillsConfig
    state: StateConfig
    sources: tuple[SourceConfig, ...]
    libraries: tuple[LibraryConfig, ...]
    sync: SyncConfig
    evolve: EvolveConfig
    web: WebConfig
    llm: LLMConfig
    curator: CuratorConfig
    effect: EffectConfig
    log: LogConfig
    #: Where the file came from (None: built-in defaults only).
    path: Path | None
    #: "section.key" -> where its value came from.
    origins: Mapping[str, ValueOrigin]


SECTIONS: dict[str, Any] = {
    "skills": SkillsConfig,
    "state": StateConfig,
    "sync": SyncConfig,
    "evolve": EvolveConfig,
    "web": WebConfig,
    "llm": LLMConfig,
    "curator": CuratorConfig,
    "effect": EffectConfig,
    "log": LogConfig,
}


#: Arrays of tables: `[[sources]]`, `[[libraries]]`.
ARRAYS: dict[str, Any] = {"sources": SourceConfig, "libraries": LibraryConfig}

#: Defaults that depend on the environment ($HOME, $DSH_HOME, $XDG_STATE_HOME), read per build.
_DEFAULT_FACTORIES: dict[type, dict[str, Callable[[], Any]]] = {
    SkillsConfig: {"dir": default_skills_dir},
    StateConfig: {"dir": default_state_dir},
}

#: Rules over a whole table, checked once its values are coerced.
_TABLE_CHECKS: dict[type, Callable[[Any], None]] = {
    LibraryConfig: _check_library,
    EvolveConfig: _check_evolve,
    SyncConfig: _check_sync,
    WebConfig: _check_web,
    CuratorConfig: _check_curator,
}


def section_keys(cls: Any) -> tuple[str, ...]:
    """The keys a section (or array table) accepts, in declaration order."""
    return tuple(cls._fields)


def config_path_from_env(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    if explicit:
        return Path(explicit)
    if env := os.environ.get("SKILLD_CONFIG"):
        return Path(env)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    candidate = (Path(xdg) if xdg else Path.home() / ".config") / "skilld" / "config.toml"
    return candidate if candidate.is_file() else None


def load_config(
    explicit: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Load, override from the environment, expand and validate. Raises ConfigError."""
    environ = os.environ if environ is None else environ
    path = config_path_from_env(explicit)
    raw = _read_table(path) if path is not None else {}
    return build_config(raw, environ=environ, path=path)


def _read_table(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    if (table := cached_table(text)) is not None:
        return table
    import tomllib  # only when the file changed since the last load: see _config_cache

    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path} is not valid TOML: nested too deeply") from None
    store_table(text, table)
    return table


def build_config(
    raw: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> Config:
    environ = {} if environ is None else environ
    base = path.parent.resolve() if path is not None else Path.cwd()
    origins: dict[str, ValueOrigin] = {}
    known = {*SECTIONS, *ARRAYS}
    for name in raw:
        if name not in known:
            raise ConfigError(f"unknown section (known: {', '.join(sorted(known))})", name)

    env_values = _env_overrides(environ)
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        table = raw.get(name, {})
        if not isinstance(table, Mapping):
            raise ConfigError("must be a table", name)
        sections[name] = _build_section(
            cls, name, table, env_values.get(name, {}), base=base, origins=origins
        )

    arrays: dict[str, Any] = {}
    for name, cls in ARRAYS.items():
        tables = raw.get(name, [])
        if not isinstance(tables, list):
            raise ConfigError(f"must be an array of tables ([[{name}]])", name)
        arrays[name] = tuple(
            _build_section(cls, f"{name}[{i}]", table, {}, base=base, origins=origins)
            for i, table in enumerate(tables)
        )
    names = [library.name for library in arrays["libraries"]]
    if duplicated := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"names must be unique ({', '.join(duplicated)} repeats)", "libraries")
    return Config(**sections, **arrays, path=path, origins=origins)


#: `SKILLD_` variables that are not `SKILLD_<SECTION>_<KEY>` overrides.
NOT_OVERRIDES = frozenset({"SKILLD_CONFIG", "SKILLD_WEB_TOKEN"})


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    overrides: dict[str, dict[str, str]] = {}
    for var, value in environ.items():
        if not var.startswith("SKILLD_") or var in NOT_OVERRIDES:
            continue
        rest = var.removeprefix("SKILLD_").lower()
        section, _, key = rest.partition("_")
        if section not in SECTIONS:
            continue
        if key not in section_keys(SECTIONS[section]):
            raise ConfigError(f"unknown key in environment variable {var}", f"{section}.{key}")
        overrides.setdefault(section, {})[key] = value
    return overrides


def _build_section(
    cls: Any,
    section: str,
    table: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    base: Path,
    origins: dict[str, ValueOrigin],
) -> Any:
    if not isinstance(table, Mapping):
        raise ConfigError("must be a table", section)
    keys = section_keys(cls)
    for key in table:
        if key not in keys:
            raise ConfigError(f"unknown key (known: {', '.join(keys)})", f"{section}.{key}")
    hints: dict[str, Any] = cls.__annotations__
    factories = _DEFAULT_FACTORIES.get(cls, {})
    values: dict[str, Any] = {}
    for name in keys:
        dotted = f"{section}.{name}"
        origin: ValueOrigin
        hint, checks = _unannotated(hints[name])
        if name in env:
            value, origin = _from_env(env[name], hint, dotted), "env"
        elif name in table:
            value, origin = table[name], "file"
        else:
            origins[dotted] = "default"
            if name in factories:
                values[name] = factories[name]()
            continue
        value = _coerce(value, hint, dotted, base=base if origin == "file" else Path.cwd())
        for check in checks:
            if problem := check(value):
                raise ConfigError(f"{problem} (got {value!r})", dotted)
        values[name] = value
        origins[dotted] = origin
    try:
        built = cls(**values)
        if table_check := _TABLE_CHECKS.get(cls):
            table_check(built)
    except TypeError as exc:
        raise ConfigError(str(exc), section) from None
    except ConfigError as exc:
        # A table's own check names its key by section ("libraries.name"); in an array the
        # table's index says which one ("libraries[1].name").
        if exc.key and not exc.key.startswith(f"{section}."):
            raise ConfigError(exc.message, f"{section}.{exc.key.partition('.')[2]}") from None
        raise
    return built


def _unannotated(hint: Any) -> tuple[Any, tuple[Callable[[Any], str | None], ...]]:
    """A schema annotation -> (the type values are coerced to, the checks they must pass)."""
    if get_origin(hint) is Annotated:
        return get_args(hint)[0], hint.__metadata__
    return hint, ()


def _from_env(text: str, hint: Any, key: str) -> Any:
    """Environment values are strings; turn them into what the TOML would have held."""
    target = _strip_optional(hint)
    if target is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"must be true or false (got {text!r})", key)
    if target is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"must be an integer (got {text!r})", key) from None
    if target is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"must be a number (got {text!r})", key) from None
    if get_origin(target) is tuple:
        return [part for part in text.split(os.pathsep) if part]
    return text


def _strip_optional(hint: Any) -> Any:
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _expand_path(value: str, base: Path) -> Path:
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    return path if path.is_absolute() else base / path


def _expand_glob(value: str, base: Path) -> str:
    """An array-of-globs entry: one that reads as a path (it starts with `/`, `~`, `$` or
    `.`) is expanded and anchored like a path; any other (a repository, `github.com/acme/*`)
    stays as written."""
    if value.startswith(("/", "~", "$", ".")):
        return str(_expand_path(value, base))
    return value


def _coerce(value: Any, hint: Any, key: str, *, base: Path) -> Any:
    target = _strip_optional(hint)
    if get_origin(target) is Literal:
        choices = get_args(target)
        if value not in choices:
            raise ConfigError(
                f"must be one of {', '.join(map(repr, choices))} (got {value!r})", key
            )
        return value
    if target is Path:
        # A NUL can name no file, and `~user` expansion would raise on it.
        if not isinstance(value, str) or not value or "\x00" in value:
            raise ConfigError(f"must be a path string (got {value!r})", key)
        return _expand_path(value, base)
    if get_origin(target) is tuple and get_args(target)[0] is str:
        # Globs (`projects`, `project_branches`): an entry that reads as a path is expanded.
        if not isinstance(value, list) or not all(
            isinstance(v, str) and v and "\x00" not in v for v in value
        ):
            raise ConfigError(f"must be an array of non-empty strings (got {value!r})", key)
        return tuple(_expand_glob(v, base) for v in value)
    if get_origin(target) is tuple:
        if not isinstance(value, list) or not all(
            isinstance(v, str) and "\x00" not in v for v in value
        ):
            raise ConfigError(f"must be an array of path strings (got {value!r})", key)
        return tuple(_expand_path(v, base) for v in value)
    if target is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"must be true or false (got {value!r})", key)
        return value
    if target is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be an integer (got {value!r})", key)
        return value
    if target is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"must be a number (got {value!r})", key)
        return float(value)
    if target is str:
        if not isinstance(value, str):
            raise ConfigError(f"must be a string (got {value!r})", key)
        return value
    raise ConfigError(f"unsupported type {target!r}", key)  # pragma: no cover - schema bug


def backfill_cutoff(backfill: str, now: float) -> float | None:
    """The `start_new_at_end_before` time for files a first run finds (None: read them all)."""
    if backfill == "all":
        return None
    if backfill == "none":
        return float("inf")
    return now - parse_duration(backfill)
