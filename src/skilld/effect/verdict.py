"""Whether a skill helps, from counts alone: the verdict and the sentence a person reads.

A skill's *exposures* are the sessions (one per source failure signature) that ran the command
its source failure came from; a *failure* is an exposure in which that signature failed again.
Before and after are the exposures in sessions that started before and after the version that
learned the failure. The test is a one-sided Fisher's exact test on the 2x2 table
(before, after) x (failed, ran without that failure) at `ALPHA`: exact, so it holds at small
counts, and conservative (it reports `helps` for fewer than `ALPHA` of skills that change
nothing). docs/learning.md explains how to read it.

Pure: counts in, values out. Nothing here reads a file, a clock or a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, NamedTuple

Verdict = Literal["too-early", "helps", "no-change", "worse", "not-triggered", "no-failure"]

#: Every verdict, in the order a table lists them.
VERDICTS: tuple[Verdict, ...] = (
    "helps",
    "no-change",
    "worse",
    "not-triggered",
    "too-early",
    "no-failure",
)

#: The one-sided test's significance level.
ALPHA = 0.05

#: The verdicts that offer a skill to the model for revision at the next window that shows
#: its failure (`not-triggered`: its description did not bring it in; `no-change`/`worse`
#: with failures where it was loaded: its content did not end the failure).
REVISABLE: frozenset[Verdict] = frozenset({"not-triggered", "no-change", "worse"})


class Counts(NamedTuple):
    """What a skill's rows count, before and after its version that learned the failure."""

    #: Source failure signatures (real/hook/masked, resolved) the skill was learned from.
    source_failures: int
    before_exposures: int
    before_failures: int
    after_exposures: int
    after_failures: int
    #: After-exposures in sessions that loaded the skill, and failures among them.
    loaded_exposures: int
    loaded_failures: int
    #: Distinct sessions behind the exposures (a session can run several source commands).
    before_sessions: int = 0
    after_sessions: int = 0
    loaded_sessions: int = 0


class Outcome(NamedTuple):
    verdict: Verdict
    evidence: str
    #: One-sided p-values of the test (None when it was not run).
    p_helps: float | None = None
    p_worse: float | None = None


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _hypergeometric(total: int, failures: int, drawn: int) -> tuple[int, list[float]]:
    """The support and probabilities of how many of `drawn` exposures are failures, when
    `failures` of `total` are and the draw is at random: the first from log-gamma, each next
    one from the ratio of consecutive terms (exact to rounding, and one `lgamma` per test)."""
    low = max(0, drawn - (total - failures))
    high = min(drawn, failures)
    first = _log_comb(failures, low) + _log_comb(total - failures, drawn - low)
    probability = math.exp(first - _log_comb(total, drawn))
    probabilities = [probability]
    for k in range(low, high):
        probability *= (failures - k) * (drawn - k) / ((k + 1) * (total - failures - drawn + k + 1))
        probabilities.append(probability)
    return low, probabilities


def fisher_one_sided(
    before_failures: int, before_exposures: int, after_failures: int, after_exposures: int
) -> tuple[float, float]:
    """(p of "the before-rate is higher", p of "the after-rate is higher"): Fisher's exact
    test on the 2x2 table, each side one-sided. 1.0 for both when a side has no exposure."""
    for count in (before_failures, before_exposures, after_failures, after_exposures):
        if count < 0:
            raise ValueError(f"a count is never negative: {count}")
    if before_failures > before_exposures or after_failures > after_exposures:
        raise ValueError("failures never exceed exposures")
    if before_exposures == 0 or after_exposures == 0:
        return 1.0, 1.0
    total = before_exposures + after_exposures
    failures = before_failures + after_failures
    low, probabilities = _hypergeometric(total, failures, before_exposures)
    at = before_failures - low
    upper = math.fsum(probabilities[at:])
    lower = math.fsum(probabilities[: at + 1])
    return min(1.0, upper), min(1.0, lower)


def judge(counts: Counts, min_exposures: int, *, alpha: float = ALPHA) -> Outcome:
    """The verdict on a skill, and the evidence sentence behind it.

    Order: no source failure → `no-failure`; fewer than `min_exposures` after-exposures →
    `too-early`; a significant fall → `helps`; otherwise a failure that came back only in
    sessions that did not load the skill → `not-triggered` (its description does not bring
    it in); a significant rise → `worse`; else `no-change`.
    """
    if counts.source_failures == 0:
        return Outcome("no-failure", "learned from a window with no resolved failure")
    evidence = evidence_sentence(counts)
    if counts.after_exposures < min_exposures:
        needed = f"{counts.after_exposures} of the {min_exposures} later sessions needed"
        return Outcome("too-early", f"{needed}; {evidence}")
    p_helps, p_worse = fisher_one_sided(
        counts.before_failures,
        counts.before_exposures,
        counts.after_failures,
        counts.after_exposures,
    )
    verdict: Verdict
    if p_helps < alpha:
        verdict = "helps"
    elif counts.after_failures > 0 and counts.loaded_failures == 0:
        verdict = "not-triggered"
    elif p_worse < alpha:
        verdict = "worse"
    else:
        verdict = "no-change"
    return Outcome(verdict, evidence, p_helps, p_worse)


def evidence_sentence(counts: Counts) -> str:
    """One sentence: where the skill was loaded, how often its failure came back, and the
    rate before it. E.g. "loaded in 6 of 12 later sessions; failed again in 4 (3 where
    loaded); before: failed in 5 of 9"."""
    after = (
        f"loaded in {counts.loaded_sessions} of {counts.after_sessions} later"
        f" {'session' if counts.after_sessions == 1 else 'sessions'}"
    )
    again = f"failed again in {counts.after_failures}"
    if counts.after_failures:
        again += f" ({counts.loaded_failures} where loaded)"
    if counts.before_exposures:
        before = f"before: failed in {counts.before_failures} of {counts.before_exposures}"
    else:
        before = "no earlier session ran it"
    return f"{after}; {again}; {before}"


def needs_revision(outcome: Verdict, loaded_failures: int) -> bool:
    """Whether a skill with this verdict is offered to the model for revision: `not-triggered`
    always (its description did not bring it in), `no-change`/`worse` when its failure came
    back where it was loaded (its content did not end it)."""
    if outcome == "not-triggered":
        return True
    return outcome in ("no-change", "worse") and loaded_failures > 0


def per_hundred(failures: int, exposures: int) -> float | None:
    """Failures per 100 exposures, one decimal; None without exposures."""
    return round(100 * failures / exposures, 1) if exposures else None


class Pooled(NamedTuple):
    """The library-level figure: every measured skill's exposures and failures, summed."""

    before_exposures: int
    before_failures: int
    after_exposures: int
    after_failures: int

    @property
    def before_per_100(self) -> float | None:
        return per_hundred(self.before_failures, self.before_exposures)

    @property
    def after_per_100(self) -> float | None:
        return per_hundred(self.after_failures, self.after_exposures)


def pool(all_counts: Iterable[Counts]) -> Pooled:
    """Sum the exposures and failures of every skill learned from a failure."""
    totals = [0, 0, 0, 0]
    for counts in all_counts:
        if counts.source_failures == 0:
            continue
        totals[0] += counts.before_exposures
        totals[1] += counts.before_failures
        totals[2] += counts.after_exposures
        totals[3] += counts.after_failures
    return Pooled(*totals)
