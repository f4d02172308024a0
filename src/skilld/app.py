"""Wiring: one place that opens state, usage and library from a Config."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from skilld.config import Config
from skilld.skills.library import Library
from skilld.skills.usage import UsageStore
from skilld.state import StateDB


@dataclass
class App:
    config: Config
    state: StateDB
    usage: UsageStore
    library: Library


@contextlib.contextmanager
def open_app(config: Config, *, prepare: bool = False) -> Iterator[App]:
    """Open the state and the library; `prepare` also creates dirs and removes stray temps."""
    state = StateDB(config.state.dir / "state.db")

    def report_corrupt_usage(copy: Path, reason: str) -> None:
        state.add_event(
            "usage_corrupt",
            reason=reason,
            detail={"copied_to": str(copy), "file": str(config.skills.dir / ".usage.json")},
        )

    try:
        if prepare:
            config.skills.dir.mkdir(parents=True, exist_ok=True)
        usage = UsageStore(config.skills.dir, on_corrupt=report_corrupt_usage)
        library = Library.from_config(config, state, usage)
        if prepare:
            library.prepare()
        yield App(config, state, usage, library)
    finally:
        state.close()
