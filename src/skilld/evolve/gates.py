"""Per-session gates (DESIGN.md §5.2): pure decisions over plain values.

A gated-out session keeps its watermark: what it has read stays pending and is reconsidered on
a later tick. Nothing here reads a clock or a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from skilld.transcripts.model import Message


@dataclass(frozen=True, slots=True)
class GateSettings:
    min_messages: int = 4
    cooldown_seconds: float = 300


@dataclass(frozen=True, slots=True)
class Ready:
    """Reflect `pending[:end]`."""

    end: int


@dataclass(frozen=True, slots=True)
class Deferred:
    reason: str  # "nothing new", "turn not finished", "too few messages", "cooling down"
    retry_at: float | None = None  # when the gate can open by itself (cooldown), if known


def conversational_count(messages: Sequence[Message]) -> int:
    return sum(1 for m in messages if m.role in ("user", "assistant"))


def finished_turn_end(messages: Sequence[Message]) -> int:
    """Length of the longest prefix that ends on a finished assistant turn (0: none)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].finishes_turn:
            return index + 1
    return 0


def decide(
    pending: Sequence[Message],
    *,
    last_reflect_at: float | None,
    now: float,
    settings: GateSettings,
) -> Ready | Deferred:
    """The gates in DESIGN order: fresh messages, finished turn, min messages, cooldown."""
    if not pending:
        return Deferred("nothing new")
    end = finished_turn_end(pending)
    if end == 0:
        return Deferred("turn not finished")
    if conversational_count(pending[:end]) < settings.min_messages:
        return Deferred("too few messages")
    if last_reflect_at is not None:
        ready_at = last_reflect_at + settings.cooldown_seconds
        if now < ready_at:
            return Deferred("cooling down", retry_at=ready_at)
    return Ready(end)
