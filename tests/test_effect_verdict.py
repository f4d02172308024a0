"""The effect of a skill over plain rows: each verdict, the test behind it, the counts of
exposures and recurrences, and the loaded/not-loaded split (skilld.effect.verdict, .measure).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from skilld.effect.measure import (
    Anchor,
    AnchorCounts,
    SessionRun,
    SourceFailure,
    Version,
    anchors_of,
    combine,
    learned_failures,
    recurrences,
)
from skilld.effect.verdict import Counts, fisher_one_sided, judge, pool, revision, with_holdout

DAY0 = datetime(2026, 1, 1, 9, tzinfo=UTC)


def at(day: int) -> str:
    """Day `day` of the test's calendar, in the form the measure compares."""
    return (DAY0 + timedelta(days=day)).isoformat(timespec="seconds")


def hypergeometric_tail(a: int, n1: int, c: int, n2: int) -> float:
    """P(before failures >= a), straight from the definition with exact integers."""
    total, failures = n1 + n2, a + c
    numerator = sum(
        math.comb(failures, k) * math.comb(total - failures, n1 - k)
        for k in range(a, min(n1, failures) + 1)
    )
    return numerator / math.comb(total, n1)


@pytest.mark.parametrize(
    ("a", "n1", "c", "n2"), [(9, 10, 1, 10), (3, 10, 3, 10), (0, 5, 5, 5), (12, 30, 2, 30)]
)
def test_fisher_one_sided_is_the_hypergeometric_tail(a: int, n1: int, c: int, n2: int) -> None:
    helps, worse = fisher_one_sided(a, n1, c, n2)
    assert helps == pytest.approx(hypergeometric_tail(a, n1, c, n2), rel=1e-9)
    # The other side is the same test with the rows swapped.
    assert worse == pytest.approx(hypergeometric_tail(c, n2, a, n1), rel=1e-9)


def test_fisher_without_exposures_on_a_side_shows_nothing() -> None:
    assert fisher_one_sided(0, 0, 3, 10) == (1.0, 1.0)
    assert fisher_one_sided(3, 10, 0, 0) == (1.0, 1.0)
    with pytest.raises(ValueError):
        fisher_one_sided(4, 3, 0, 1)


def counts(
    before: tuple[int, int],
    after: tuple[int, int],
    loaded: tuple[int, int] = (0, 0),
    *,
    sources: int = 1,
) -> Counts:
    """Sessions (ran, failed) before, after, and after where loaded."""
    return Counts(sources, *before, *after, *loaded)


def test_each_verdict() -> None:
    assert judge(counts((0, 0), (0, 0), sources=0), 10).verdict == "no-failure"
    assert judge(counts((20, 15), (9, 0), (9, 0)), 10).verdict == "too-early"
    assert judge(counts((20, 15), (12, 1), (11, 1)), 10).verdict == "helps"
    assert judge(counts((20, 5), (12, 3), (6, 2)), 10).verdict == "no-change"
    assert judge(counts((20, 1), (12, 9), (12, 9)), 10).verdict == "worse"
    # Loaded in too few sessions to tell, and still failing: its description does not bring
    # it in.
    assert judge(counts((20, 5), (12, 4), (0, 0)), 10).verdict == "not-triggered"
    assert judge(counts((20, 1), (12, 9), (2, 0)), 10).verdict == "not-triggered"
    # Where it was loaded it did not fail; where it was not, the failure came back.
    assert judge(counts((11, 6), (18, 7), (9, 0)), 10).verdict == "helps-when-loaded"
    assert judge(counts((0, 0), (30, 12), (15, 0)), 10).verdict == "helps-when-loaded"


def test_loaded_often_and_failing_as_often_is_no_change_not_untriggered() -> None:
    assert judge(counts((20, 5), (20, 5), (14, 4)), 10).verdict == "no-change"


def test_min_exposures_is_the_threshold() -> None:
    measured = counts((20, 15), (5, 0), (5, 0))
    assert judge(measured, 6).verdict == "too-early"
    assert judge(measured, 5).verdict == "helps"


def test_evidence_names_one_unit_the_sessions() -> None:
    outcome = judge(counts((11, 6), (18, 7), (9, 0)), 10, heads=["git push"])
    assert outcome.evidence == (
        "loaded in 9 of 18 later sessions that ran `git push`; failed again in 0 of those 9"
        " and in 7 of the other 9; before: failed in 6 of 11"
    )
    none_loaded = judge(counts((9, 5), (12, 4)), 10, heads=["make", "git push"]).evidence
    assert none_loaded == (
        "loaded in 0 of 12 later sessions that ran `make` or `git push`; failed again in 4 of"
        " them; before: failed in 5 of 9"
    )
    early = judge(counts((0, 0), (2, 0), (1, 0)), 10).evidence
    assert early.startswith("2 of the 10 later sessions needed;")
    assert "no earlier session ran it" in early


def test_revision_follows_the_verdict() -> None:
    assert revision("not-triggered", 0) == "routing"
    assert revision("helps-when-loaded", 0) == "routing"
    assert revision("no-change", 2) == "content" and revision("worse", 1) == "content"
    assert revision("no-change", 0) is None
    assert revision("helps", 3) is None and revision("too-early", 3) is None


def test_pooled_figure_sums_measured_skills_only() -> None:
    pooled = pool(
        [counts((10, 5), (10, 1)), counts((30, 10), (10, 0)), counts((5, 5), (5, 5), sources=0)]
    )
    assert (pooled.before_failures, pooled.before_sessions) == (15, 40)
    assert (pooled.after_failures, pooled.after_sessions) == (1, 20)
    assert (pooled.before_per_100, pooled.after_per_100) == (37.5, 5.0)


# -- combining the counts -------------------------------------------------------------------

REPO = "github.com/acme/app"


def anchor(day_: int, *, signature: str = "sig-push", session: str = "src") -> Anchor:
    return Anchor(signature, "real", "git push", "claude-code", REPO, at(day_), session)


def run(
    index: int, session: str, day_: int, *, failed: bool = False, repo: str = REPO
) -> SessionRun:
    return SessionRun(index, session, "claude-code", repo, at(day_), failed)


def test_learned_failures_are_the_counted_targets_inside_the_window() -> None:
    targets = ("sig-push", "sig-red", "sig-late", "sig-hook")
    version = Version(at(41), "src", 5, 9, REPO, targets)
    window = [
        SourceFailure("src", 6, "sig-push", "real", "git push", True),
        SourceFailure("src", 7, "sig-red", "test", "pytest", True),  # a red test: not counted
        SourceFailure("src", 8, "sig-other", "real", "git rebase", True),  # not targeted
        SourceFailure("src", 12, "sig-late", "real", "make", True),  # outside the window
        SourceFailure("src", 9, "sig-hook", "hook", "git commit", False),
    ]
    learned = learned_failures([version], window)
    assert [failure.signature for _, failure in learned] == ["sig-push", "sig-hook"]
    # A version that targets nothing, or waits for its targets to be worked out, has none.
    assert learned_failures([version._replace(targets=())], window) == []
    assert learned_failures([version._replace(targets=None)], window) == []
    anchors = anchors_of([version], window, {"src": "claude-code"})
    assert [a.command for a in anchors] == ["git push", "git commit"]
    assert anchors_of([version], window, {}) == []  # a session state.db never recorded


def test_a_signature_is_anchored_at_the_first_version_that_learned_it() -> None:
    first = Version(at(10), "s1", 0, 9, None, ("sig-make",))
    second = Version(at(30), "s2", 0, 9, None, ("sig-make", "sig-push"))
    failures = [
        SourceFailure("s1", 3, "sig-make", "real", "make", True),
        SourceFailure("s2", 4, "sig-make", "real", "make", True),
        SourceFailure("s2", 5, "sig-push", "real", "git push", True),
    ]
    anchors = anchors_of([second, first], failures, {"s1": "jsonl", "s2": "jsonl"})
    assert [(a.signature, a.at, a.session) for a in anchors] == [
        ("sig-make", at(10), "s1"),
        ("sig-push", at(30), "s2"),
    ]


def test_combine_takes_out_the_source_sessions_and_splits_the_loaded() -> None:
    anchors = [anchor(40)]
    counts, newest = combine(
        anchors,
        [AnchorCounts(4, 3, 4, 2, at(53))],  # the index counted the source session before
        excluded={"src"},
        source_runs=[run(0, "src", 39, failed=True)],
        loaded_runs=[run(0, "a1", 50), run(0, "a2", 51, failed=True), run(0, "src", 39)],
    )
    assert (counts.before_sessions, counts.before_failures) == (3, 2)
    assert (counts.after_sessions, counts.after_failures) == (4, 2)
    assert (counts.loaded_sessions, counts.loaded_failures) == (2, 1)
    assert newest == at(53)


def test_combine_ignores_sessions_outside_the_group() -> None:
    anchors = [anchor(40)]
    counts, _ = combine(
        anchors,
        [AnchorCounts(0, 0, 1, 0, at(50))],
        excluded={"src"},
        source_runs=[run(0, "src", 39, failed=True, repo="github.com/acme/else")],
        loaded_runs=[run(0, "x", 50, repo="github.com/acme/else")],
    )
    assert (counts.before_sessions, counts.loaded_sessions) == (0, 0)


def test_several_failures_count_a_session_once() -> None:
    anchors = [anchor(10, signature="sig-make"), anchor(30, signature="sig-push", session="s2")]
    exposed = [
        run(0, "mid", 20),
        run(0, "late", 40, failed=True),
        run(1, "mid", 20, failed=True),
        run(1, "late", 40, failed=True),
    ]
    counts, _ = combine(
        anchors,
        [AnchorCounts(0, 0, 2, 1, at(40)), AnchorCounts(1, 1, 1, 1, at(40))],
        excluded={"src", "s2"},
        source_runs=[],
        loaded_runs=[run(0, "late", 40), run(1, "late", 40, failed=True)],
        exposed_runs=exposed,
    )
    # "mid" is after the first failure's version and before the second's: one session each
    # side; "late" failed twice and counts once.
    assert (counts.before_sessions, counts.before_failures) == (1, 1)
    assert (counts.after_sessions, counts.after_failures) == (2, 1)
    assert (counts.loaded_sessions, counts.loaded_failures) == (1, 1)


def test_recurrences_are_after_sessions_with_the_loaded_flag() -> None:
    anchors = [anchor(40)]
    found = recurrences(
        anchors,
        [
            run(0, "a4", 53, failed=True),
            run(0, "a2", 51, failed=True),
            run(0, "b1", 30, failed=True),
            run(0, "src", 41, failed=True),
        ],
        excluded={"src"},
        loaded={"a2"},
    )
    assert [(r.session, r.loaded) for r in found] == [("a2", True), ("a4", False)]


def test_a_decided_holdout_is_the_verdict_and_says_so_first() -> None:
    before_after = judge(counts((20, 5), (20, 4), (20, 4)), 10)
    assert before_after.verdict == "no-change"
    decided = {
        "state": "decided",
        "present": {"sessions": 31, "failures": 1},
        "withheld": {"sessions": 9, "failures": 6},
        "difference": -0.6344,
        "ci95": [-0.87, -0.29],
    }
    outcome = with_holdout(before_after, decided)
    assert outcome.verdict == "helps"
    assert outcome.evidence == (
        "held out on random days: failed in 6 of 9 sessions while withheld, in 1 of 31 when"
        f" present; {before_after.evidence}"
    )
    worse = with_holdout(before_after, {**decided, "ci95": [0.1, 0.4]})
    assert worse.verdict == "worse"
    # Running, ended or off: before/after stands; a skill that targets nothing stays so.
    assert with_holdout(before_after, {**decided, "state": "running"}) == before_after
    nothing = judge(counts((0, 0), (0, 0), sources=0), 10)
    assert with_holdout(nothing, decided) == nothing
