"""From configuration to the parts of a tick: the LLM client's settings and the sources, each
bound to the library it feeds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import anyio

from skilld.config import Config
from skilld.llm import LLMSettings
from skilld.routing import Routing, source_id_of
from skilld.transcripts.identity import StoredKeys
from skilld.transcripts.model import Cursor, ScanResult, Source
from skilld.transcripts.registry import build_source


@dataclass(frozen=True)
class SourceBinding:
    id: str  # "<kind>:<path>": the key of its sessions' cursors in state.db
    kind: str
    source: Source
    library: str  # the user library its sessions learn into

    @cached_property
    def keys(self) -> StoredKeys:
        return StoredKeys.of(self.kind, self.id)

    async def scan(
        self,
        cursors: Mapping[str, Cursor],
        held_elsewhere: Callable[[str], bool],
        *,
        start_new_at_end_before: float | None = None,
    ) -> ScanResult:
        """The source's scan (in a worker thread) from its stored `cursors`, by stored keys
        (`skilld.transcripts.identity`); `held_elsewhere(key)`: another source's session is
        stored under `key`."""
        own = self.keys.source_cursors(cursors)
        found = await anyio.to_thread.run_sync(
            lambda: self.source.scan(own, start_new_at_end_before=start_new_at_end_before)
        )
        return self.keys.stored_scan(found, cursors, held_elsewhere)


def llm_settings(config: Config) -> LLMSettings:
    llm = config.llm
    return LLMSettings(
        base_url=llm.base_url,
        model=llm.model,
        api_key=llm.api_key(),
        timeout_seconds=llm.timeout_seconds,
        max_retries=llm.max_retries,
        response_format=llm.response_format,
        max_concurrency=llm.max_concurrency,
        max_calls_per_hour=llm.max_calls_per_hour,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        max_tokens_per_day=llm.max_tokens_per_day,
        context_tokens=llm.context_tokens,
    )


def bind_sources(config: Config, routing: Routing) -> list[SourceBinding]:
    """A source per route, built with the evolve settings that shape what it reads."""
    bindings = []
    for route in routing.routes:
        spec = route.source
        assert spec.path is not None  # routing resolved every path
        source = build_source(
            spec.kind,
            spec.path,
            glob=spec.glob or None,
            include_subagents=spec.include_subagents,
            tool_result_max_chars=config.evolve.tool_result_max_chars,
            max_line_bytes=config.evolve.max_line_bytes,
        )
        bindings.append(SourceBinding(source_id_of(spec), spec.kind, source, route.library))
    return bindings
