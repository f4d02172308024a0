"""What the skill signals of a tick's reads count for, once each has the library that holds its
skill (`skilld.transcripts.signals` derives them; the supervisor finds the library): a dated
bump in that library's usage sidecar, a use per session in state.db, and the skills each
session loaded, for the effect measure's loaded split.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime

from skilld.effect.record import record_session_loads
from skilld.effect.watch import Reach
from skilld.fsutil import UnsafePath
from skilld.log import get_logger
from skilld.skills.library import Library
from skilld.skills.usage import happened_at
from skilld.state import StateDB
from skilld.transcripts.model import SkillSignal


def count_signals(
    state: StateDB,
    signals: Iterable[tuple[SkillSignal, str, Library]],
    now: datetime,
    reach: Reach,
) -> None:
    """Count each (signal, session, the library that holds its skill); the skills loaded are
    added to `reach`."""
    bumps: dict[str, tuple[Library, list[tuple[str, str, datetime | None]]]] = {}
    uses: dict[str, Counter[tuple[str, str]]] = {}
    #: When each (skill, session) last used it: the transcript's time, not the reading's.
    last_use: dict[tuple[str, str], datetime] = {}
    loads: dict[tuple[str, str], set[str]] = {}  # (library, session) -> skills it loaded
    for signal, session, target in signals:
        at = happened_at(signal.at, now)
        bumps.setdefault(target.name, (target, []))[1].append((signal.name, signal.kind, at))
        loads.setdefault((target.name, session), set()).add(signal.name)
        if signal.kind == "use":
            uses.setdefault(target.name, Counter())[(signal.name, session)] += 1
            key = (signal.name, session)
            last_use[key] = max(at, last_use.get(key, at))
    for name, (library, batch) in bumps.items():
        try:
            library.usage.bump_dated(batch)
        except UnsafePath as refused:
            # A sidecar the tree guard refuses (a link) is not written through: these uses
            # count in state.db only, and the tick goes on.
            get_logger("skilld.evolve").warning(
                "usage_not_counted", library=name, uses=len(batch), reason=str(refused)
            )
        if name in uses:
            state.record_uses(
                name,
                uses[name],
                {
                    key: moment.astimezone(UTC).isoformat(timespec="seconds")
                    for key, moment in last_use.items()
                },
            )
    record_session_loads(state, loads, reach)
