"""The effect of a skill over plain rows: each verdict, the test behind it, the counts of
exposures and recurrences, and the loaded/not-loaded split (skilld.effect.verdict, .measure).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from skilld.effect.measure import History, SessionFacts, SourceFailure, Version, measure
from skilld.effect.verdict import Counts, fisher_one_sided, judge, needs_revision, pool

DAY0 = datetime(2026, 1, 1, 9, tzinfo=UTC)


def at(day: int) -> str:
    """Day `day` of the test's calendar, in the form the measure compares."""
    return (DAY0 + timedelta(days=day)).isoformat(timespec="microseconds")


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


# -- counting over rows ----------------------------------------------------------------------

SIG = "sig-push"


def history_of(
    sessions: dict[str, tuple[str, str | None, int]],
    ran: dict[str, list[str]],
    failed: dict[str, list[str]],
    loads: list[str],
) -> History:
    facts = {
        key: SessionFacts(source, repo, at(day)) for key, (source, repo, day) in sessions.items()
    }
    runs = [(session, command) for command, keys in ran.items() for session in keys]
    failures = [(signature, session) for signature, keys in failed.items() for session in keys]
    return History(facts, runs, failures, [("lib", "push-upstream", s) for s in loads])


def test_exposures_recurrences_and_the_loaded_split() -> None:
    repo = "github.com/acme/app"
    sessions = {
        "src": ("claude-code", repo, 40),  # the skill was learned here (day 40)
        "b1": ("claude-code", repo, 10),
        "b2": ("claude-code", repo, 20),
        "b3": ("claude-code", repo, 30),
        "a1": ("claude-code", repo, 50),
        "a2": ("claude-code", repo, 51),
        "a3": ("claude-code", repo, 52),
        "a4": ("claude-code", repo, 53),
        "quiet": ("claude-code", repo, 54),  # never ran git push: no exposure
        "other-repo": ("claude-code", "github.com/acme/else", 55),
        "other-agent": ("codex", repo, 56),
    }
    ran = {
        "git push": ["src", "b1", "b2", "b3", "a1", "a2", "a3", "a4", "other-repo", "other-agent"],
        "git status": ["quiet"],
    }
    failed = {SIG: ["src", "b1", "b3", "a2", "a4", "other-repo", "other-agent"]}
    history = history_of(sessions, ran, failed, loads=["a1", "a2", "quiet"])
    version = Version(at(41), "src", 5, 9, repo)
    window = [
        SourceFailure("src", 6, SIG, "real", "git push", True),
        SourceFailure("src", 7, "sig-other", "test", "pytest", True),  # a red test: not counted
        SourceFailure("src", 8, "sig-lost", "real", "git rebase", False),  # never resolved
        SourceFailure("src", 12, "sig-late", "real", "make", True),  # outside the window
    ]
    measured = measure("lib", "push-upstream", [version], window, history)
    assert measured.source_failures == [(SIG, "real", "git push")]
    c = measured.counts
    assert (c.before_exposures, c.before_failures) == (3, 2)
    assert (c.after_exposures, c.after_failures) == (4, 2)
    assert (c.loaded_exposures, c.loaded_failures) == (2, 1)
    assert [(r.session, r.loaded) for r in measured.recurrences] == [("a2", True), ("a4", False)]
    assert measured.since == at(41)
    assert measured.last_exposure == at(53)


def test_without_a_repository_every_session_of_the_agent_counts() -> None:
    sessions = {
        "src": ("jsonl", None, 10),
        "x": ("jsonl", "github.com/a/b", 20),
        "y": ("jsonl", None, 21),
        "z": ("codex", None, 22),
    }
    history = history_of(
        sessions, {"make": ["src", "x", "y", "z"]}, {SIG: ["src", "x", "z"]}, loads=[]
    )
    window = [SourceFailure("src", 1, SIG, "hook", "make", True)]
    measured = measure(
        "lib", "push-upstream", [Version(at(11), "src", 0, 3, None)], window, history
    )
    assert (measured.counts.after_exposures, measured.counts.after_failures) == (2, 1)


def test_a_skill_from_a_window_without_failure_measures_nothing() -> None:
    history = history_of({"src": ("jsonl", None, 10)}, {}, {}, loads=[])
    measured = measure("lib", "prefs", [Version(at(11), "src", 0, 3, None)], [], history)
    assert measured.source_failures == []
    assert judge(measured.counts, 10).verdict == "no-failure"


def test_a_later_version_anchors_the_failure_it_learned() -> None:
    sessions = {
        "s1": ("jsonl", None, 10),
        "s2": ("jsonl", None, 30),
        "mid": ("jsonl", None, 20),
        "late": ("jsonl", None, 40),
    }
    ran = {"make": ["s1", "mid", "late"], "git push": ["s2", "mid", "late"]}
    failed = {"sig-make": ["s1", "mid"], SIG: ["s2", "mid", "late"]}
    history = history_of(sessions, ran, failed, loads=["late"])
    versions = [Version(at(11), "s1", 0, 9, None), Version(at(31), "s2", 0, 9, None)]
    window = [
        SourceFailure("s1", 3, "sig-make", "real", "make", True),
        SourceFailure("s2", 4, SIG, "real", "git push", True),
    ]
    measured = measure("lib", "push-upstream", versions, window, history)
    c = measured.counts
    # make (since day 11): mid and late after; git push (since day 31): mid before, late after.
    assert (c.before_exposures, c.before_failures) == (1, 1)
    assert (c.after_exposures, c.after_failures) == (3, 2)
    assert (c.after_sessions, c.before_sessions) == (2, 1)
    assert (c.loaded_exposures, c.loaded_failures, c.loaded_sessions) == (2, 1, 1)
