"""Per-session gates (docs/design.md): pure decisions over plain values.

A session's unreflected messages are held in state.db, one row each; the gates decide from a
summary of them (`Held`) so that a tick never decodes a session that is not ready, and an
append costs what it adds. A gated-out session keeps its watermark: what it holds is
reconsidered on a later tick. Nothing here reads a clock or a file.
"""

from collections.abc import Sequence
from typing import NamedTuple

from skilld.state import Held
from skilld.transcripts.model import Message


class GateSettings(NamedTuple):
    min_messages: int = 4
    cooldown_seconds: float = 300
    #: A turn unfinished for this long after the last append is reflected as it is.
    turn_timeout_seconds: float = 1800


class Ready(NamedTuple):
    """Reflect the held messages up to `end` (an absolute index)."""

    end: int


class Waiting(NamedTuple):
    reason: str  # "nothing new", "turn not finished", "too few messages", "cooling down"
    retry_at: float | None = None  # when the gate can open by itself, if known


def is_conversational(message: Message) -> bool:
    return message.role in ("user", "assistant")


def held_after_append(held: Held, messages: Sequence[Message], *, now: float) -> Held:
    """The summary once `messages` are appended after what `held` holds."""
    chars = held.chars
    conversational = held.conversational
    finished_end = held.finished_end
    conversational_finished = held.conversational_finished
    for offset, message in enumerate(messages):
        chars += len(message.text)
        conversational += is_conversational(message)
        if message.finishes_turn:
            finished_end = held.end + offset + 1
            conversational_finished = conversational
    return held._replace(
        size=held.size + len(messages),
        chars=chars,
        finished_end=finished_end,
        conversational=conversational,
        conversational_finished=conversational_finished,
        last_append_at=now if messages else held.last_append_at,
    )


def held_after_consume(held: Held, messages: Sequence[Message]) -> Held:
    """The summary once the first `len(messages)` held messages (these) are reflected."""
    start = held.start + len(messages)
    conversational = sum(is_conversational(m) for m in messages)
    finished_end: int | None = held.finished_end
    conversational_finished = held.conversational_finished - conversational
    if finished_end is None or finished_end <= start:
        finished_end, conversational_finished = None, 0
    return held._replace(
        start=start,
        size=held.size - len(messages),
        chars=held.chars - sum(len(m.text) for m in messages),
        finished_end=finished_end,
        conversational=held.conversational - conversational,
        conversational_finished=conversational_finished,
    )


def summarise(start: int, messages: Sequence[Message], *, last_append_at: float | None) -> Held:
    """The summary of `messages` held from index `start` (a session carried over from an older
    state.db, whose summary was never kept)."""
    held = held_after_append(Held(start=start), messages, now=last_append_at or 0.0)
    return held._replace(last_append_at=last_append_at)


def decide(
    held: Held,
    *,
    last_reflect_at: float | None,
    now: float,
    settings: GateSettings,
) -> Ready | Waiting:
    """The gates in DESIGN order: fresh messages, finished turn, min messages, cooldown.

    A turn that never finished (no `finished_end`) is released once nothing was appended for
    `turn_timeout_seconds`: an agent killed mid-turn never writes the end of it.
    """
    if held.size <= 0:
        return Waiting("nothing new")
    end, conversational = held.finished_end, held.conversational_finished
    if end is None or end <= held.start:
        idle_since = held.last_append_at
        released_at = None if idle_since is None else idle_since + settings.turn_timeout_seconds
        if released_at is None or now < released_at:
            return Waiting("turn not finished", retry_at=released_at)
        end, conversational = held.end, held.conversational
    if conversational < settings.min_messages:
        return Waiting("too few messages")
    if last_reflect_at is not None:
        ready_at = last_reflect_at + settings.cooldown_seconds
        if now < ready_at:
            return Waiting("cooling down", retry_at=ready_at)
    return Ready(end)
