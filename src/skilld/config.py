"""Configuration: TOML file, `SKILLD_<SECTION>_<KEY>` overrides, validated into frozen values.

Where a value comes from is resolved once, here: `--config PATH`, else `$SKILLD_CONFIG`, else
`$XDG_CONFIG_HOME/skilld/config.toml`, else built-in defaults. Relative paths in a file are taken
relative to that file, so an example config works from any working directory.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from skilld.errors import ConfigError

ValueOrigin = Literal["default", "file", "env"]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """`"90s"`, `"15m"`, `"24h"`, `"7d"`, `"2w"` → seconds."""
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise ValueError(f"not a duration (use e.g. 90s, 15m, 24h, 7d): {text!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


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


def _check(check: Any) -> dict[str, Any]:
    return {"check": check}


@dataclass(frozen=True)
class SkillsConfig:
    dir: Path = field(default_factory=default_skills_dir)
    layout: Literal["dir", "flat"] = "dir"
    dialect: Literal["dsh", "claude", "agentskills"] = "dsh"
    extra_dirs: tuple[Path, ...] = ()
    max_managed: int = field(default=50, metadata=_check(_non_negative))
    name_prefix: str = ""
    max_content_chars: int = field(default=20000, metadata=_check(_positive))
    history_keep: int = field(default=10, metadata=_check(_non_negative))
    #: A git URL or path: the single library is a work tree of this team repository.
    remote: str = ""
    branch: str = "main"


@dataclass(frozen=True)
class LibraryConfig:
    """One `[[libraries]]` table; unset keys come from the agent's defaults or `[skills]`."""

    name: str
    dir: Path | None = None
    dialect: Literal["dsh", "claude", "agentskills"] | None = None
    layout: Literal["dir", "flat"] | None = None
    max_managed: int | None = field(default=None, metadata=_check(_non_negative))
    name_prefix: str | None = None
    #: Where a project keeps this agent's skills, relative to the project root ("" = none).
    project_dir: str | None = None
    remote: str | None = None
    branch: str = "main"

    def __post_init__(self) -> None:
        if not _LIBRARY_NAME.fullmatch(self.name):
            raise ConfigError(
                f"must be kebab-case (a-z, 0-9, single hyphens), got {self.name!r}",
                "libraries.name",
            )
        if self.project_dir:
            check_project_dir(self.project_dir, "libraries.project_dir")
        if not self.branch.strip() or any(c.isspace() for c in self.branch):
            raise ConfigError(f"not a branch name: {self.branch!r}", "libraries.branch")


_LIBRARY_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def check_project_dir(value: str, key: str) -> str:
    """A relative path inside a project: no `..`, not absolute."""
    parts = Path(value).parts
    if Path(value).is_absolute() or not parts or ".." in parts or "\x00" in value:
        raise ConfigError(f"must be a relative path inside the project, got {value!r}", key)
    return value


@dataclass(frozen=True)
class StateConfig:
    dir: Path = field(default_factory=default_state_dir)


SourceKind = Literal["jsonl", "dsh", "claude-code", "codex", "hermes"]
SOURCE_KINDS: tuple[str, ...] = get_args(SourceKind)


@dataclass(frozen=True)
class SourceConfig:
    kind: SourceKind
    path: Path | None = None
    glob: str = ""
    include_subagents: bool = False
    #: The library this source learns into (a `[[libraries]]` name); default: its agent's.
    library: str = ""


@dataclass(frozen=True)
class EvolveConfig:
    interval_seconds: float = field(default=60, metadata=_check(_positive))
    cooldown_seconds: float = field(default=300, metadata=_check(_non_negative))
    min_messages: int = field(default=4, metadata=_check(_positive))
    window_max_chars: int = field(default=60000, metadata=_check(_positive))
    tool_result_max_chars: int = field(default=2000, metadata=_check(_positive))
    max_line_bytes: int = field(default=8 * 1024 * 1024, metadata=_check(_positive))
    max_attempts: int = field(default=5, metadata=_check(_positive))
    publish: Literal["auto", "review"] = "auto"
    backfill: str = "24h"
    similarity_threshold: float = 0.85
    #: A turn still unfinished after this long without new messages is reflected as it is
    #: (the agent crashed or was killed mid-turn and will never finish it).
    turn_timeout_seconds: float = field(default=1800, metadata=_check(_positive))
    #: "user": every skill goes to the user library; "auto": the model may mark a skill as
    #: belonging to the session's project.
    scope: Literal["user", "auto"] = "user"
    #: Project roots (globs) whose project skills dir skilld may create and write into.
    projects: tuple[Path, ...] = ()
    #: The user's own instructions to the reflecting model (house style, never capture ...).
    guidance: str = ""
    guidance_file: Path | None = None

    def __post_init__(self) -> None:
        if self.backfill not in ("none", "all"):
            try:
                parse_duration(self.backfill)
            except ValueError as exc:
                raise ConfigError(f"{exc}; or use 'none' or 'all'", "evolve.backfill") from None
        if not 0 < self.similarity_threshold <= 1:
            raise ConfigError("must be in (0, 1]", "evolve.similarity_threshold")


@dataclass(frozen=True)
class SyncConfig:
    """Team libraries shared over git (a library with `remote`)."""

    interval_seconds: float = field(default=300, metadata=_check(_positive))
    #: This machine's stable id in the team; default: the hostname.
    host: str = ""

    def __post_init__(self) -> None:
        if self.host and not _HOST_NAME.fullmatch(self.host):
            raise ConfigError(
                f"must be letters, digits, '.', '_' or '-', got {self.host!r}", "sync.host"
            )


_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class LLMConfig:
    base_url: str = "https://api.deepseek.com/v1"
    model: str = "deepseek-chat"
    api_key_env: str = "DEEPSEEK_API_KEY"
    timeout_seconds: float = field(default=60, metadata=_check(_positive))
    max_retries: int = field(default=3, metadata=_check(_non_negative))
    response_format: Literal["auto", "json_schema", "json_object", "none"] = "auto"
    max_concurrency: int = field(default=2, metadata=_check(_positive))
    max_calls_per_hour: int = field(default=120, metadata=_check(_non_negative))
    temperature: float = field(default=0.2, metadata=_check(_non_negative))
    max_tokens: int = field(default=4096, metadata=_check(_positive))

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None


@dataclass(frozen=True)
class CuratorConfig:
    enabled: bool = True
    interval_hours: float = field(default=24, metadata=_check(_positive))
    stale_after_days: float = field(default=30, metadata=_check(_positive))
    archive_after_days: float = field(default=90, metadata=_check(_positive))
    consolidate: bool = False
    disable_stale: bool = False

    def __post_init__(self) -> None:
        if self.archive_after_days < self.stale_after_days:
            raise ConfigError(
                "must not be smaller than curator.stale_after_days", "curator.archive_after_days"
            )


@dataclass(frozen=True)
class LogConfig:
    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"


@dataclass(frozen=True)
class Config:
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    state: StateConfig = field(default_factory=StateConfig)
    sources: tuple[SourceConfig, ...] = ()
    libraries: tuple[LibraryConfig, ...] = ()
    sync: SyncConfig = field(default_factory=SyncConfig)
    evolve: EvolveConfig = field(default_factory=EvolveConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    curator: CuratorConfig = field(default_factory=CuratorConfig)
    log: LogConfig = field(default_factory=LogConfig)
    #: Where the file came from (None: built-in defaults only).
    path: Path | None = None
    #: "section.key" -> where its value came from.
    origins: Mapping[str, ValueOrigin] = field(default_factory=dict)


SECTIONS: dict[str, type] = {
    "skills": SkillsConfig,
    "state": StateConfig,
    "sync": SyncConfig,
    "evolve": EvolveConfig,
    "llm": LLMConfig,
    "curator": CuratorConfig,
    "log": LogConfig,
}


#: Arrays of tables: `[[sources]]`, `[[libraries]]`.
ARRAYS: dict[str, type] = {"sources": SourceConfig, "libraries": LibraryConfig}


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
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{path} is not valid TOML: nested too deeply") from None
    return build_config(raw, environ=environ, path=path)


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


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    overrides: dict[str, dict[str, str]] = {}
    for var, value in environ.items():
        if not var.startswith("SKILLD_") or var == "SKILLD_CONFIG":
            continue
        rest = var.removeprefix("SKILLD_").lower()
        section, _, key = rest.partition("_")
        if section not in SECTIONS:
            continue
        names = {f.name for f in dataclasses.fields(SECTIONS[section])}
        if key not in names:
            raise ConfigError(f"unknown key in environment variable {var}", f"{section}.{key}")
        overrides.setdefault(section, {})[key] = value
    return overrides


def _build_section(
    cls: type,
    section: str,
    table: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    base: Path,
    origins: dict[str, ValueOrigin],
) -> Any:
    if not isinstance(table, Mapping):
        raise ConfigError("must be a table", section)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in table:
        if key not in fields:
            raise ConfigError(f"unknown key (known: {', '.join(fields)})", f"{section}.{key}")
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        dotted = f"{section}.{name}"
        origin: ValueOrigin
        if name in env:
            value, origin = _from_env(env[name], hints[name], dotted), "env"
        elif name in table:
            value, origin = table[name], "file"
        else:
            origins[dotted] = "default"
            continue
        value = _coerce(value, hints[name], dotted, base=base if origin == "file" else Path.cwd())
        if (check := spec.metadata.get("check")) and (problem := check(value)):
            raise ConfigError(f"{problem} (got {value!r})", dotted)
        values[name] = value
        origins[dotted] = origin
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(str(exc), section) from None
    except ConfigError as exc:
        # A table's own check names its key by section ("libraries.name"); in an array the
        # table's index says which one ("libraries[1].name").
        if exc.key and not exc.key.startswith(f"{section}."):
            raise ConfigError(exc.message, f"{section}.{exc.key.partition('.')[2]}") from None
        raise


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
