"""Source kinds by name: build one from config, and where each kind lives by default."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from skilld.config import SourceConfig
from skilld.transcripts.model import Source

SOURCE_KINDS = ("jsonl", "dsh", "claude-code", "codex", "hermes")

# Imported on first use so that a kind's dependencies load only when it is configured.
_IMPLEMENTATIONS = {
    "jsonl": ("skilld.transcripts.jsonl", "JsonlSource"),
    "dsh": ("skilld.transcripts.dsh", "DshSource"),
    "claude-code": ("skilld.transcripts.claude_code", "ClaudeCodeSource"),
    "codex": ("skilld.transcripts.codex", "CodexSource"),
    "hermes": ("skilld.transcripts.hermes", "HermesSource"),
}


def build_source(kind: str, path: Path, **options: Any) -> Source:
    """A source of `kind` reading `path`; options are the sources' shared keyword arguments
    (glob, include_subagents, tool_result_max_chars, max_line_bytes)."""
    try:
        module_name, class_name = _IMPLEMENTATIONS[kind]
    except KeyError:
        raise ValueError(
            f"unknown source kind {kind!r} (expected one of {', '.join(SOURCE_KINDS)})"
        ) from None
    source_class = getattr(importlib.import_module(module_name), class_name)
    source: Source = source_class(Path(path).expanduser(), **options)
    return source


def default_path(kind: str) -> Path:
    """Where `kind` keeps its sessions when the config names no path."""
    home = Path.home()
    if kind == "claude-code":
        return home / ".claude" / "projects"
    if kind == "codex":
        return home / ".codex" / "sessions"
    if kind == "hermes":
        return home / ".hermes" / "state.db"
    if kind == "dsh":
        dsh_home = os.environ.get("DSH_HOME")
        return (Path(dsh_home).expanduser() if dsh_home else home / ".dsh") / "sessions"
    if kind == "jsonl":
        raise ValueError("a jsonl source has no default path: set `path` in its [[sources]] entry")
    raise ValueError(f"unknown source kind {kind!r} (expected one of {', '.join(SOURCE_KINDS)})")


def default_sources() -> tuple[SourceConfig, ...]:
    """Zero config: every agent whose default transcript location exists on this machine."""
    found = []
    for kind in SOURCE_KINDS:
        try:
            path = default_path(kind)
        except ValueError:
            continue  # a kind with no default location (jsonl)
        if path.exists():
            found.append(SourceConfig(kind=kind, path=path))  # type: ignore[arg-type]
    return tuple(found)
