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
from skilld.effect.verdict import Counts, fisher_one_sided, judge, needs_revision, pool

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
    return Counts(
        sources,
        before[0],
        before[1],
        after[0],
        after[1],
        loaded[0],
        loaded[1],
        before[0],
        after[0],
        loaded[0],
    )


def test_each_verdict() -> None:
    assert judge(counts((0, 0), (0, 0), sources=0), 10).verdict == "no-failure"
    assert judge(counts((20, 15), (9, 0), (9, 0)), 10).verdict == "too-early"
    assert judge(counts((20, 15), (12, 1), (11, 1)), 10).verdict == "helps"
    assert judge(counts((20, 5), (12, 3), (6, 3)), 10).verdict == "no-change"
    assert judge(counts((20, 1), (12, 9), (12, 9)), 10).verdict == "worse"
    # Came back only where the skill was not loaded: its description does not trigger it.
    assert judge(counts((20, 5), (12, 4), (6, 0)), 10).verdict == "not-triggered"
    assert judge(counts((20, 1), (12, 9), (3, 0)), 10).verdict == "not-triggered"


def test_min_exposures_is_the_threshold() -> None:
    measured = counts((20, 15), (5, 0), (5, 0))
    assert judge(measured, 6).verdict == "too-early"
    assert judge(measured, 5).verdict == "helps"


def test_evidence_is_one_sentence_with_the_counts() -> None:
    outcome = judge(counts((9, 5), (12, 4), (6, 3)), 10)
    assert outcome.evidence == (
        "loaded in 6 of 12 later sessions; failed again in 4 (3 where loaded);"
        " before: failed in 5 of 9"
    )
    early = judge(counts((0, 0), (2, 0), (1, 0)), 10).evidence
    assert early.startswith("2 of the 10 later sessions needed;")
    assert "no earlier session ran it" in early


def test_revision_is_offered_for_routing_and_content_problems() -> None:
    assert needs_revision("not-triggered", 0)
    assert needs_revision("no-change", 2) and needs_revision("worse", 1)
    assert not needs_revision("no-change", 0)
    assert not needs_revision("helps", 3) and not needs_revision("too-early", 3)


def test_pooled_figure_sums_measured_skills_only() -> None:
    pooled = pool(
        [counts((10, 5), (10, 1)), counts((30, 10), (10, 0)), counts((5, 5), (5, 5), sources=0)]
    )
    assert (pooled.before_failures, pooled.before_exposures) == (15, 40)
    assert (pooled.after_failures, pooled.after_exposures) == (1, 20)
    assert (pooled.before_per_100, pooled.after_per_100) == (37.5, 5.0)


# -- combining the counts -------------------------------------------------------------------

REPO = "github.com/acme/app"


def anchor(day_: int, *, signature: str = "sig-push", session: str = "src") -> Anchor:
    return Anchor(signature, "real", "git push", "claude-code", REPO, at(day_), session)


def run(
    index: int, session: str, day_: int, *, failed: bool = False, repo: str = REPO
) -> SessionRun:
    return SessionRun(index, session, "claude-code", repo, at(day_), failed)


def test_learned_failures_keep_resolved_real_and_hook_inside_the_window() -> None:
    version = Version(at(41), "src", 5, 9, REPO)
    window = [
        SourceFailure("src", 6, "sig-push", "real", "git push", True),
        SourceFailure("src", 7, "sig-red", "test", "pytest", True),  # a red test: not counted
        SourceFailure("src", 8, "sig-lost", "real", "git rebase", False),  # never resolved
        SourceFailure("src", 12, "sig-late", "real", "make", True),  # outside the window
        SourceFailure("src", 9, "sig-hook", "hook", "git commit", True),
    ]
    learned = learned_failures([version], window)
    assert [failure.signature for _, failure in learned] == ["sig-push", "sig-hook"]
    anchors = anchors_of([version], window, {"src": "claude-code"})
    assert [a.command for a in anchors] == ["git push", "git commit"]
    assert anchors_of([version], window, {}) == []  # a session state.db never recorded


def test_a_signature_is_anchored_at_the_first_version_that_learned_it() -> None:
    first = Version(at(10), "s1", 0, 9, None)
    second = Version(at(30), "s2", 0, 9, None)
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
    assert (counts.before_exposures, counts.before_failures) == (3, 2)
    assert (counts.after_exposures, counts.after_failures) == (4, 2)
    assert (counts.loaded_exposures, counts.loaded_failures, counts.loaded_sessions) == (2, 1, 2)
    assert (counts.before_sessions, counts.after_sessions) == (3, 4)
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
    assert (counts.before_exposures, counts.loaded_exposures) == (0, 0)


def test_several_failures_count_a_session_once() -> None:
    anchors = [anchor(10, signature="sig-make"), anchor(30, signature="sig-push", session="s2")]
    exposed = [run(0, "mid", 20), run(0, "late", 40), run(1, "mid", 20), run(1, "late", 40)]
    counts, _ = combine(
        anchors,
        [AnchorCounts(0, 0, 2, 1, at(40)), AnchorCounts(1, 1, 1, 1, at(40))],
        excluded={"src", "s2"},
        source_runs=[],
        loaded_runs=[run(0, "late", 40), run(1, "late", 40, failed=True)],
        exposed_runs=exposed,
    )
    assert (counts.before_exposures, counts.after_exposures, counts.after_failures) == (1, 3, 2)
    assert (counts.before_sessions, counts.after_sessions) == (1, 2)
    assert (counts.loaded_exposures, counts.loaded_failures, counts.loaded_sessions) == (2, 1, 1)


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
