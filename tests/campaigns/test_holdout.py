"""Holdout campaign: simulated months of sessions for many skills, each withheld on the blocks
the real draw gives it, judged block by block as the daemon judges it (DESIGN.md §14).

Each simulated skill gets its own secret; each day (a 24-hour block from 04:00 local time) a
number of sessions is drawn (Poisson), each starting at a random time of the block and lasting
up to two hours, so that some straddle a block's end and are left out of both arms. A
session's arm comes from `arm_of` over the spans the draws gave; it fails at its arm's rate.
At the end of each block the holdout's state moves by `next_state`, as the tick's pass does.

1. Equal rates (drawn from 0.05 to 0.6; 1 to 4 sessions a day): `decided` with the skill
   helping (the difference below zero) for at most 5% of skills.
2. The withheld rate three times the present rate (present drawn from 0.1 to 0.3), two
   sessions a day: `decided` helping within 60 days for at least 80% of skills.
3. The withheld share of blocks over 1,000 skills (60 blocks each) within 0.15 to 0.25.

Normal size: 1,000 skills per property (a few seconds); `--full`: 10,000. Seeded: a run is
reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from skilld.effect.holdout import (
    ArmCounts,
    HoldoutState,
    Span,
    arm_of,
    block_end,
    block_start,
    is_withheld,
    newcombe,
    next_state,
)

SHARE = 0.2
HOURS = 24
DAYS = 60
START = block_start(datetime(2026, 5, 4, 12, tzinfo=UTC), HOURS)


def poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p < limit:
            return k
        k += 1


def simulate(
    rng: random.Random, present_rate: float, withheld_rate: float, per_day: float
) -> tuple[str, float | None, int]:
    """One skill's holdout: (final state, its difference, withheld blocks)."""
    secret = rng.randbytes(32)
    spans: list[Span] = []
    counts = {"present": [0, 0], "withheld": [0, 0]}
    state: HoldoutState = "running"
    withheld_blocks = 0
    pending: list[tuple[datetime, datetime]] = []
    block = START
    for _ in range(DAYS):
        end = block_end(block, HOURS)
        if is_withheld(secret, "default", "skill", block, SHARE):
            withheld_blocks += 1
            if spans and spans[-1].end == block:
                spans[-1] = Span(spans[-1].start, end)
            else:
                spans.append(Span(block, end))
        length = (end - block).total_seconds()
        for _ in range(poisson(rng, per_day)):
            first = block + timedelta(seconds=rng.uniform(0, length))
            pending.append((first, first + timedelta(minutes=rng.uniform(1, 120))))
        # Judged at the block's end, over the sessions that ended by then.
        done = [s for s in pending if s[1] <= end]
        pending = [s for s in pending if s[1] > end]
        for first, last in done:
            arm = arm_of(first, last, spans, now=end)
            if arm is not None:
                rate = withheld_rate if arm == "withheld" else present_rate
                counts[arm][0] += 1
                counts[arm][1] += rng.random() < rate
        present, withheld = ArmCounts(*counts["present"]), ArmCounts(*counts["withheld"])
        state = next_state(state, present, withheld, started=START, now=end, max_days=DAYS)
        if state != "running":
            found = newcombe(present, withheld)
            return state, found[0] if found else None, withheld_blocks
        block = end
    return state, None, withheld_blocks


def test_equal_rates_are_rarely_decided_helping(
    full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    rng = random.Random(4201)
    skills = 10_000 if full_size else 1_000
    helps = 0
    for _ in range(skills):
        rate = rng.uniform(0.05, 0.6)
        state, difference, _ = simulate(rng, rate, rate, rng.choice([1, 2, 3, 4]))
        helps += state == "decided" and difference is not None and difference < 0
    campaign_figures("holdout, equal rates", skills=skills, helps=f"{helps / skills:.1%}")
    assert helps / skills <= 0.05


def test_a_skill_that_helps_is_decided_within_sixty_days(
    full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    rng = random.Random(4202)
    skills = 10_000 if full_size else 1_000
    helps = 0
    for _ in range(skills):
        rate = rng.uniform(0.1, 0.3)
        state, difference, _ = simulate(rng, rate, 3 * rate, 2)
        helps += state == "decided" and difference is not None and difference < 0
    campaign_figures("holdout, withheld rate x3", skills=skills, helps=f"{helps / skills:.1%}")
    assert helps / skills >= 0.80


def test_the_withheld_share_of_blocks_is_the_configured_one(
    full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    rng = random.Random(4203)
    skills = 10_000 if full_size else 1_000
    withheld = 0
    secret = rng.randbytes(32)  # one install, a thousand skills
    for index in range(skills):
        block = START
        for _ in range(DAYS):
            withheld += is_withheld(secret, "default", f"skill-{index}", block, SHARE)
            block = block_end(block, HOURS)
    share = withheld / (skills * DAYS)
    campaign_figures("holdout, withheld share", skills=skills, share=f"{share:.3f}")
    assert 0.15 <= share <= 0.25
