"""Source kinds by name: build one from its configuration (where each agent keeps its sessions
is `skilld.routing`'s to say)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from skilld.config import SOURCE_KINDS
from skilld.transcripts.model import Source

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
