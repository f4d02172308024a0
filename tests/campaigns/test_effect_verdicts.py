"""Effect campaign: generated session histories with a known before-rate and after-rate, and
the verdicts skilld reports on them (DESIGN.md §13).

1. The count is exact: hypothesis generates histories (skills learned from a failure, sessions
   of several agents and repositories before and after each skill, failing at a rate, some
   loading the skill, a second version learned in a later session), writes them into a real
   state.db the way a tick records them, and `effect_records` must count exactly what the
   history holds (before/after sessions and failures, the loaded split).
2. The verdicts are honest, over the counts such histories give (the first property shows they
   are the counts skilld measures): when the after-rate equals the before-rate, `helps` is
   reported for at most 5% of skills (the one-sided Fisher's exact test at 0.05 is
   conservative: about 3% here); when the after-rate is a third of the before-rate with 30
   sessions each, `helps` for at least 80%. The after-sessions are drawn into two arms, those
   that load the skill and those that do not, each failing at its own rate; and over every
   drawn skill, whatever the rates, no verdict contradicts its evidence sentence (its numbers
   are the row's counts of sessions, and its direction is theirs).

   The before-rate of the second property is drawn from 0.5 to 0.9: the power of the test at
   30 + 30 exposures is what limits it, not skilld (simulated: 48% at a before-rate of 0.3,
   82% at 0.5, 90% at 0.6, 98% at 0.75); below 0.5 no test on 30 exposures a side finds a fall
   to a third 80% of the time. The equal-rates property draws its rate from 0.05 to 0.95 and
   its exposures from 10 to 40 a side.

Normal size: 40 histories for the count, 2,000 skills per verdict property; `--full`: 400
histories, 20,000 skills per property. Draws are derandomised: a run is reproducible.
"""

from __future__ import annotations

import random
import re
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skilld.effect.report import effect_records
from skilld.effect.verdict import VERDICTS, Counts, Outcome, judge, too_few_loaded
from skilld.state import StateDB
from tests.campaigns.harness import Tally
from tests.effect_history import LIBRARY, Clock, day, learn_skill, record_session

SKILLS_PER_BATCH = 100
REPOSITORIES = ("github.com/acme/app", "github.com/acme/lib", None)
AGENTS = ("claude-code", "codex")


def check(
    test: Callable[..., None], strategies: dict[str, Any], examples: int, tally: Tally
) -> None:
    try:
        settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )(given(**strategies)(tally.count(test)))()
    except Exception as error:  # raised once the campaign has printed its figures
        tally.hold(error)


# -- 1. the count is exact -------------------------------------------------------------------


def measure_history(seed: int, skills: int, path: Path) -> None:
    """Write a random history into `path` and check skilld's counts against it."""
    rng = random.Random(seed)
    clock = Clock()
    state = StateDB(path, clock=clock)
    expected: dict[str, list[int]] = {}
    try:
        for index in range(skills):
            name, command = f"skill-{index}", f"tool{index} run"
            signature = f"sig-{index}"
            agent, repository = rng.choice(AGENTS), rng.choice(REPOSITORIES)
            learned_at = 50 + rng.randrange(20)
            before_rate, after_rate = rng.random(), rng.random()
            counts = [0] * 6  # before sessions/failures, after, after where loaded
            source = f"{agent}:src-{index}"
            record_session(state, source, day(learned_at - 1), failed=True, source=agent,
                           repository=repository, signature=signature, command=command)  # fmt: skip
            learn_skill(state, clock, name, source, day(learned_at - 0.5), repository=repository)
            anchor = day(learned_at - 0.5)
            for n in range(rng.randrange(0, 30)):
                when = day(rng.randrange(0, 100 * 24) / 24)  # whole hours: as stored
                same_agent = rng.random() < 0.8
                where = repository if rng.random() < 0.8 else rng.choice(REPOSITORIES)
                ran = rng.random() < 0.8
                failed = ran and rng.random() < (before_rate if when < anchor else after_rate)
                loaded = rng.random() < 0.4
                record_session(
                    state, f"x:{index}-{n}", when, ran=ran, failed=failed,
                    loaded=(name,) if loaded else (), source=agent if same_agent else "other",
                    repository=where, signature=signature, command=command,
                )  # fmt: skip
                in_group = same_agent and (repository is None or where == repository)
                if not (ran and in_group) or when == anchor:  # the skill's own second
                    continue
                after = when > anchor
                counts[2 * after] += 1
                counts[2 * after + 1] += failed
                if after and loaded:
                    counts[4] += 1
                    counts[5] += failed
            if rng.random() < 0.3:
                # A second version, learned later from a session that failed the same way: it
                # counts on neither side, like the first one's.
                revised, second = day(learned_at + rng.randrange(1, 20)), f"{agent}:v2-{index}"
                record_session(
                    state, second, revised, failed=True, source=agent, repository=repository,
                    signature=signature, command=command,
                )  # fmt: skip
                learn_skill(state, clock, name, second, revised + timedelta(hours=1),
                            repository=repository, kind="updated")  # fmt: skip
            expected[name] = counts
        measured = {
            r.name: r.measured.counts
            for r in effect_records(state.conn, [LIBRARY], min_exposures=10)
        }
        for name, counts in expected.items():
            got = measured[name]
            assert [
                got.before_sessions,
                got.before_failures,
                got.after_sessions,
                got.after_failures,
                got.loaded_sessions,
                got.loaded_failures,
            ] == counts, name
    finally:
        state.close()


def test_counts_match_the_history(full_size: bool, campaign_figures: Any) -> None:
    tally = Tally()
    examples = 400 if full_size else 40

    def history(seed: int, skills: int) -> None:
        with tempfile.TemporaryDirectory() as folder:
            measure_history(seed, skills, Path(folder) / "state.db")

    check(
        history,
        {"seed": st.integers(0, 2**32 - 1), "skills": st.integers(1, 6)},
        examples,
        tally,
    )
    campaign_figures("effect counts", histories=tally.checked, failed=tally.failed)
    tally.raise_held()


# -- 2. the verdicts -------------------------------------------------------------------------


def simulated(
    rng: random.Random,
    before: tuple[float, int],
    after: tuple[float, int],
    *,
    loaded: tuple[float, float] | None = None,
) -> Counts:
    """A skill's counts over sessions that fail at the before-rate, then at the after-rate;
    with `loaded` (the share of after-sessions that load it, and their own rate), the others
    at the after-rate. Without it every after-session loads it."""
    before_failures = sum(rng.random() < before[0] for _ in range(before[1]))
    share, loaded_rate = loaded if loaded is not None else (1.0, after[0])
    arms = [0, 0, 0]  # loaded sessions, loaded failures, other failures
    for _ in range(after[1]):
        if rng.random() < share:
            arms[0] += 1
            arms[1] += rng.random() < loaded_rate
        else:
            arms[2] += rng.random() < after[0]
    return Counts(1, before[1], before_failures, after[1], arms[1] + arms[2], arms[0], arms[1])


NUMBER = re.compile(r"[0-9]+")


def contradiction(counts: Counts, outcome: Outcome, min_exposures: int) -> str | None:
    """How `outcome` contradicts its evidence sentence or the counts it was judged on, if it
    does: every number of the sentence is a count of sessions of the row, in its order, and
    the verdict says what the counts say."""
    shown = [int(n) for n in NUMBER.findall(outcome.evidence)]
    c = counts
    expected = [c.loaded_sessions, c.after_sessions]
    if c.after_sessions and c.loaded_sessions in (0, c.after_sessions):
        expected += [c.after_failures]
    elif c.after_sessions:
        expected += [c.loaded_failures, c.loaded_sessions, c.unloaded_failures, c.unloaded_sessions]
    expected += [c.before_failures, c.before_sessions] if c.before_sessions else []
    if outcome.verdict == "too-early":
        expected = [c.after_sessions, min_exposures, *expected]
    if shown != expected:
        return f"the sentence says {shown}, the counts {expected}"

    def rate(failures: int, sessions: int) -> float:
        return failures / sessions

    after = rate(c.after_failures, c.after_sessions) if c.after_sessions else None
    before = rate(c.before_failures, c.before_sessions) if c.before_sessions else None
    verdict = outcome.verdict
    if verdict == "too-early" and c.after_sessions >= min_exposures:
        return "too-early with enough later sessions"
    if verdict == "helps" and not (after is not None and before is not None and after < before):
        return "helps, yet the later sessions do not fail less"
    if verdict == "worse" and not (after is not None and before is not None and after > before):
        return "worse, yet the later sessions do not fail more"
    if verdict == "helps-when-loaded":
        loaded = rate(c.loaded_failures, c.loaded_sessions) if c.loaded_sessions else None
        others = [
            rate(f, n)
            for f, n in ((c.before_failures, c.before_sessions),
                         (c.unloaded_failures, c.unloaded_sessions))
            if n
        ]  # fmt: skip
        if loaded is None or not any(loaded < other for other in others):
            return "helps-when-loaded, yet the loaded sessions do not fail less"
        if c.unloaded_failures == 0:
            return "helps-when-loaded, yet the sessions that did not load it never failed"
    if verdict == "not-triggered" and (c.after_failures == 0 or not too_few_loaded(c, 10)):
        return "not-triggered, yet it was loaded often or never failed"
    return None


def verdict_batches(
    full_size: bool, strategies: dict[str, Any], draw: Callable[..., Counts]
) -> tuple[Tally, int, int, int]:
    tally, verdicts = Tally(), [0, 0, 0]  # helps, helps-when-loaded, skills
    batches = (20_000 if full_size else 2_000) // SKILLS_PER_BATCH

    def batch(seed: int, **values: Any) -> None:
        rng = random.Random(seed)
        for _ in range(SKILLS_PER_BATCH):
            counts = draw(rng, **values)
            outcome = judge(counts, 10)
            problem = contradiction(counts, outcome, 10)
            assert problem is None, (counts, outcome, problem)
            verdicts[0] += outcome.verdict == "helps"
            verdicts[1] += outcome.verdict == "helps-when-loaded"
            verdicts[2] += 1

    check(batch, {"seed": st.integers(0, 2**32 - 1), **strategies}, batches, tally)
    return tally, verdicts[0], verdicts[1], verdicts[2]


def test_equal_rates_rarely_help(full_size: bool, campaign_figures: Any) -> None:
    def draw(rng: random.Random, rate: float, sizes: tuple[int, int], share: float) -> Counts:
        return simulated(rng, (rate, sizes[0]), (rate, sizes[1]), loaded=(share, rate))

    tally, helps, when_loaded, skills = verdict_batches(
        full_size,
        {
            "rate": st.floats(0.05, 0.95),
            "sizes": st.tuples(st.integers(10, 40), st.integers(10, 40)),
            "share": st.floats(0.0, 1.0),
        },
        draw,
    )
    campaign_figures(
        "effect, equal rates", skills=skills, helps=f"{helps / skills:.1%}",
        helps_when_loaded=f"{when_loaded / skills:.1%}",
    )  # fmt: skip
    tally.raise_held()
    assert helps / skills <= 0.05
    assert when_loaded / skills <= 0.05


def test_a_third_of_the_rate_helps(full_size: bool, campaign_figures: Any) -> None:
    def draw(rng: random.Random, rate: float, share: float) -> Counts:
        return simulated(rng, (rate, 30), (rate / 3, 30), loaded=(share, rate / 3))

    tally, helps, _, skills = verdict_batches(
        full_size, {"rate": st.floats(0.5, 0.9), "share": st.floats(0.0, 1.0)}, draw
    )
    campaign_figures("effect, a third of the rate", skills=skills, helps=f"{helps / skills:.1%}")
    tally.raise_held()
    assert helps / skills >= 0.8


def test_no_verdict_contradicts_its_evidence(full_size: bool, campaign_figures: Any) -> None:
    """Every arm's rate and size drawn on its own for each skill: loaded, not loaded, before."""
    verdicts: dict[str, int] = {}

    def draw(rng: random.Random) -> Counts:
        before, after, loaded = rng.random(), rng.random(), rng.random()
        sizes = (rng.randrange(0, 41), rng.randrange(0, 41))
        counts = simulated(
            rng, (before, sizes[0]), (after, sizes[1]), loaded=(rng.random(), loaded)
        )
        verdict = judge(counts, 10).verdict
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        return counts

    tally, _, _, skills = verdict_batches(full_size, {}, draw)
    campaign_figures("effect, every arm drawn", skills=skills, **verdicts)
    tally.raise_held()
    # Every verdict but no-failure was reached, so each was checked.
    assert set(verdicts) == set(VERDICTS) - {"no-failure"}
