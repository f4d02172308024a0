"""What sessions hold and what windows that makes: for a tick, and for `status` (how far behind
the daemon is).

Light on purpose: `skilld status` imports this, not the LLM client or the prompt's existing
skill listing, and the gates and the window code load only when a session holds something.
The size of a prompt around a window is what the daemon measured on its last
reflection of each library (`PROMPT_CHARS_KEY`), else the bare template's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from skilld.routing import source_id_of

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.evolve._gates import GateSettings, Waiting
    from skilld.state import Held, SessionState, StateDB
    from skilld.transcripts.model import Message

#: state.db meta: library name -> characters of its last reflection prompt, without the window.
PROMPT_CHARS_KEY = "prompt_chars"


def summary_of(state: StateDB, session: SessionState) -> Held:
    """The session's summary; one carried over from an older state.db is computed from its
    held messages (once: the caller saves it)."""
    from skilld.evolve._gates import summarise
    from skilld.evolve.window import decode_message

    held = session.held
    if held.conversational >= 0:
        return held
    messages = [decode_message(m) for m in state.held_messages(session.key, held.start, held.end)]
    return summarise(held.start, messages, last_append_at=held.last_append_at)


def ready_windows(
    state: StateDB,
    session: SessionState,
    settings: GateSettings,
    window_max_chars: int,
    *,
    now: float,
) -> Waiting | list[list[Message]]:
    """The windows a session's held messages make, split in order, or why it waits. Only a
    session the gates let through is decoded."""
    from skilld.evolve._gates import Waiting, decide
    from skilld.evolve.window import decode_message, split_window

    decision = decide(
        summary_of(state, session),
        last_reflect_at=session.last_reflect_at,
        now=now,
        settings=settings,
    )
    if isinstance(decision, Waiting):
        return decision
    rows = state.held_messages(session.key, session.held.start, decision.end)
    return split_window([decode_message(m) for m in rows], window_max_chars)


def backlog(app: App) -> dict[str, Any]:
    """What was read but not yet reflected: how far behind the daemon is.

    `windows` are those the gates let through once the cooldown has passed, split as a tick
    splits them; `estimated_tokens` is their input (prompt and window) at about four characters
    a token. Sessions whose held content ends on an unfinished turn or has too few messages
    are `sessions_waiting`: that content is not late, it waits for the agent. At the spend cap a
    window costs at least one call, so `min_hours_at_spend_cap` is a lower bound.
    """
    state = app.state
    pending = state.sessions_with_pending()
    # The gates and the window code load only when a session holds something to measure.
    totals, by_source = _measure(app, pending) if pending else (dict.fromkeys(_TOTALS, 0), {})
    windows = totals["windows"]
    stats = state.session_stats()
    cap = app.config.llm.max_calls_per_hour
    return {
        "windows": windows,
        "estimated_tokens": totals["window_chars"] // 4,
        "sessions_ready": totals["sessions_ready"],
        "sessions_waiting": totals["sessions_waiting"],
        "sessions_deferred": stats["deferred"],
        "pending_messages": stats["pending_messages"],
        "max_calls_per_hour": cap,
        "min_hours_at_spend_cap": round(windows / cap, 2) if cap else None,
        "by_source": by_source,
    }


_TOTALS = ("windows", "window_chars", "sessions_ready", "sessions_waiting")


def _measure(app: App, keys: list[str]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The windows the sessions `keys` make once the cooldown has passed: the totals, and by
    source."""
    from skilld.evolve._gates import GateSettings, Waiting
    from skilld.evolve.window import render_window

    config, state = app.config, app.state
    settings = GateSettings(
        min_messages=config.evolve.min_messages,
        cooldown_seconds=0,
        turn_timeout_seconds=config.evolve.turn_timeout_seconds,
    )
    library_of = {source_id_of(route.source): route.library for route in app.routing.routes}
    measured: dict[str, int] = state.get_meta(PROMPT_CHARS_KEY, {})
    totals = dict.fromkeys(_TOTALS, 0)
    by_source: dict[str, dict[str, int]] = {}
    for key in keys:
        session = state.session(key)
        if session is None or session.source not in library_of:
            continue
        source = by_source.setdefault(
            session.source,
            {"windows": 0, "estimated_tokens": 0, "sessions_ready": 0, "sessions_waiting": 0},
        )
        session.last_reflect_at = None  # the cooldown is not lateness
        ready = ready_windows(
            state, session, settings, config.evolve.window_max_chars, now=time.time()
        )
        if isinstance(ready, Waiting):
            totals["sessions_waiting"] += 1
            source["sessions_waiting"] += 1
            continue
        prompt = measured.get(library_of[session.source]) or _bare_prompt_chars()
        chars = sum(prompt + len(render_window(window)) for window in ready)
        totals["sessions_ready"] += 1
        totals["windows"] += len(ready)
        totals["window_chars"] += chars
        source["sessions_ready"] += 1
        source["windows"] += len(ready)
        source["estimated_tokens"] += chars // 4
    return totals, by_source


def prompt_chars_of(state: StateDB, library: str) -> int:
    """The characters of `library`'s reflection prompt around its window, as last measured,
    else the bare template's."""
    measured: dict[str, int] = state.get_meta(PROMPT_CHARS_KEY, {})
    return measured.get(library) or _bare_prompt_chars()


def _bare_prompt_chars() -> int:
    """The prompt around a window before any library was measured: the template alone."""
    from skilld.evolve.prompt import SYSTEM_PROMPT, USER_PROMPT

    return len(SYSTEM_PROMPT) + len(USER_PROMPT)
