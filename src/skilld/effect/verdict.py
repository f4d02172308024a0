"""Whether a skill helps, from counts of sessions alone: the verdict and the sentence a person
reads.

The unit is the session, everywhere (DESIGN.md §13). A skill's *after-sessions* are the later
sessions that ran a command its source failures came from; a *failure* is such a session in
which one of those failures came back. *Before* is the same over earlier sessions. The
after-sessions are split by whether they loaded the skill. The tests are one-sided Fisher's
exact tests on 2x2 tables of sessions at `ALPHA`: exact, so they hold at small counts, and
conservative (they report `helps` for fewer than `ALPHA` of skills that change nothing).
`helps-when-loaded` asks two questions (loaded against before, loaded against not loaded), each
at `ALPHA / 2`, so it too is wrong for at most `ALPHA` of skills. docs/learning.md explains how
to read each verdict and what to do about it.

Pure: counts in, values out. Nothing here reads a file, a clock or a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

Verdict = Literal[
    "too-early",
    "helps",
    "helps-when-loaded",
    "no-change",
    "worse",
    "not-triggered",
    "no-failure",
]

#: Every verdict, in the order a table lists them.
VERDICTS: tuple[Verdict, ...] = (
    "helps",
    "helps-when-loaded",
    "no-change",
    "worse",
    "not-triggered",
    "too-early",
    "no-failure",
)

#: The one-sided test's significance level.
ALPHA = 0.05

#: The verdicts whose skill is offered to the model for a *routing* revision (description and
#: whenToUse) at the next window that shows its failure: it was not loaded where it was needed.
ROUTING_REVISION: frozenset[Verdict] = frozenset({"not-triggered", "helps-when-loaded"})
#: The verdicts whose skill, loaded where its failure came back, is offered for a *content*
#: revision: its steps did not end the failure.
CONTENT_REVISION: frozenset[Verdict] = frozenset({"no-change", "worse"})


class Counts(NamedTuple):
    """What a skill's sessions count, before and after the version that learned its failure."""

    #: Source failures (signatures) the skill targets.
    source_failures: int
    #: Earlier sessions that ran a source failure's command, and those in which it failed.
    before_sessions: int
    before_failures: int
    #: Later sessions that ran it, and those in which it failed again.
    after_sessions: int
    after_failures: int
    #: Of the later sessions, those that loaded the skill, and those among them that failed.
    loaded_sessions: int
    loaded_failures: int

    @property
    def unloaded_sessions(self) -> int:
        return self.after_sessions - self.loaded_sessions

    @property
    def unloaded_failures(self) -> int:
        return self.after_failures - self.loaded_failures


class Outcome(NamedTuple):
    verdict: Verdict
    evidence: str
    #: One-sided p-values of the before/after test (None when it was not run).
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
    before_failures: int, before_sessions: int, after_failures: int, after_sessions: int
) -> tuple[float, float]:
    """(p of "the before-rate is higher", p of "the after-rate is higher"): Fisher's exact
    test on the 2x2 table, each side one-sided. 1.0 for both when a side has no session."""
    for count in (before_failures, before_sessions, after_failures, after_sessions):
        if count < 0:
            raise ValueError(f"a count is never negative: {count}")
    if before_failures > before_sessions or after_failures > after_sessions:
        raise ValueError("failures never exceed sessions")
    if before_sessions == 0 or after_sessions == 0:
        return 1.0, 1.0
    total = before_sessions + after_sessions
    failures = before_failures + after_failures
    low, probabilities = _hypergeometric(total, failures, before_sessions)
    at = before_failures - low
    upper = math.fsum(probabilities[at:])
    lower = math.fsum(probabilities[: at + 1])
    return min(1.0, upper), min(1.0, lower)


def judge(
    counts: Counts,
    min_exposures: int,
    *,
    heads: Sequence[str] = (),
    alpha: float = ALPHA,
) -> Outcome:
    """The verdict on a skill, and the evidence sentence behind it (`heads`: the commands its
    source failures ran, which the sentence names).

    Order: no source failure → `no-failure`; fewer than `min_exposures` after-sessions →
    `too-early`; fewer failing sessions after than before → `helps`; still failing, and the
    sessions that loaded it fail less than those before or those that did not load it, while
    those that did not still fail → `helps-when-loaded`; still failing and loaded in too few
    sessions to tell (`too_few_loaded`) → `not-triggered`; more failing sessions after →
    `worse`; else `no-change`.
    """
    if counts.source_failures == 0:
        return Outcome("no-failure", "targets no failure of the window it was learned from")
    evidence = evidence_sentence(counts, heads)
    if counts.after_sessions < min_exposures:
        needed = f"{counts.after_sessions} of the {min_exposures} later sessions needed"
        return Outcome("too-early", f"{needed}; {evidence}")
    p_helps, p_worse = fisher_one_sided(
        counts.before_failures,
        counts.before_sessions,
        counts.after_failures,
        counts.after_sessions,
    )
    verdict: Verdict
    if p_helps < alpha:
        verdict = "helps"
    elif counts.after_failures and _helps_when_loaded(counts, alpha / 2):
        verdict = "helps-when-loaded"
    elif counts.after_failures and too_few_loaded(counts, min_exposures):
        verdict = "not-triggered"
    elif p_worse < alpha:
        verdict = "worse"
    else:
        verdict = "no-change"
    return Outcome(verdict, evidence, p_helps, p_worse)


def with_holdout(outcome: Outcome, holdout: Mapping[str, Any]) -> Outcome:
    """The verdict once the skill's holdout is decided (DESIGN.md §14): the causal estimate
    decides, and the evidence says so first. Sessions that started while the skill was
    withheld are the control arm; its interval below zero is `helps`, above it `worse`."""
    if holdout.get("state") != "decided" or outcome.verdict == "no-failure":
        return outcome
    low, high = holdout["ci95"]
    present, withheld = holdout["present"], holdout["withheld"]
    verdict: Verdict = "helps" if high < 0 else "worse" if low > 0 else "no-change"
    causal = (
        f"held out on random days: failed in {withheld['failures']} of {withheld['sessions']}"
        f" sessions while withheld, in {present['failures']} of {present['sessions']} when"
        " present"
    )
    return Outcome(verdict, f"{causal}; {outcome.evidence}", outcome.p_helps, outcome.p_worse)


def _loaded_p(counts: Counts, loaded_failures: int) -> float:
    """The smaller one-sided p of "the loaded sessions fail less": against the sessions before,
    and against the later ones that did not load it."""
    loaded = counts.loaded_sessions
    against_before = fisher_one_sided(
        counts.before_failures, counts.before_sessions, loaded_failures, loaded
    )[0]
    against_unloaded = fisher_one_sided(
        counts.unloaded_failures, counts.unloaded_sessions, loaded_failures, loaded
    )[0]
    return min(against_before, against_unloaded)


def _helps_when_loaded(counts: Counts, alpha: float) -> bool:
    return (
        counts.loaded_sessions > 0
        and counts.unloaded_failures > 0
        and _loaded_p(counts, counts.loaded_failures) < alpha
    )


def too_few_loaded(counts: Counts, min_exposures: int) -> bool:
    """Loaded in too few of the later sessions to tell whether it helps where loaded: in fewer
    than half of the `min_exposures` a verdict needs, or in under a quarter of them (a skill
    that is there in one session of five is a routing problem, whatever it does there)."""
    loaded = counts.loaded_sessions
    return loaded < math.ceil(min_exposures / 2) or 4 * loaded < counts.after_sessions


def _sessions(count: int) -> str:
    return "session" if count == 1 else "sessions"


def heads_text(heads: Sequence[str]) -> str:
    """`git push`, or `git push` or `git commit`, or ... and N more."""
    shown = [f"`{head}`" for head in dict.fromkeys(heads)]
    if len(shown) > 3:
        shown = [*shown[:3], f"{len(shown) - 3} more"]
    return " or ".join(shown)


def evidence_sentence(counts: Counts, heads: Sequence[str] = ()) -> str:
    """One sentence whose every number is a count of sessions, e.g. "loaded in 9 of 18 later
    sessions that ran `git push`; failed again in 0 of those 9 and in 7 of the other 9;
    before: failed in 6 of 11"."""
    ran = f" that ran {heads_text(heads)}" if heads else ""
    after, loaded = counts.after_sessions, counts.loaded_sessions
    part = f"loaded in {loaded} of {after} later {_sessions(after)}{ran}"
    if after == 0:
        again = "none failed again"
    elif loaded in (0, after):
        again = f"failed again in {counts.after_failures} of them"
    else:
        again = (
            f"failed again in {counts.loaded_failures} of those {loaded}"
            f" and in {counts.unloaded_failures} of the other {counts.unloaded_sessions}"
        )
    if counts.before_sessions:
        before = f"before: failed in {counts.before_failures} of {counts.before_sessions}"
    else:
        before = "no earlier session ran it"
    return f"{part}; {again}; {before}"


def revision(outcome: Verdict, loaded_failures: int) -> str | None:
    """Which revision a skill with this verdict is offered at the next window that shows its
    failure: "routing" (its description and whenToUse) when it was not loaded where it was
    needed, "content" (its steps) when its failure came back where it was loaded; else None."""
    if outcome in ROUTING_REVISION:
        return "routing"
    if outcome in CONTENT_REVISION and loaded_failures > 0:
        return "content"
    return None


def per_hundred(failures: int, sessions: int) -> float | None:
    """Failures per 100 sessions, one decimal; None without sessions."""
    return round(100 * failures / sessions, 1) if sessions else None


class Pooled(NamedTuple):
    """The library-level figure: every measured skill's sessions and failures, summed."""

    before_sessions: int
    before_failures: int
    after_sessions: int
    after_failures: int

    @property
    def before_per_100(self) -> float | None:
        return per_hundred(self.before_failures, self.before_sessions)

    @property
    def after_per_100(self) -> float | None:
        return per_hundred(self.after_failures, self.after_sessions)


def pool(all_counts: Iterable[Counts]) -> Pooled:
    """Sum the sessions and failures of every skill that targets a failure."""
    totals = [0, 0, 0, 0]
    for counts in all_counts:
        if counts.source_failures == 0:
            continue
        totals[0] += counts.before_sessions
        totals[1] += counts.before_failures
        totals[2] += counts.after_sessions
        totals[3] += counts.after_failures
    return Pooled(*totals)
