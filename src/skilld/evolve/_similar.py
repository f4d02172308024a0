"""The near-duplicate guard: a proposed new skill that closely matches an existing one is a
change of that one.

Pure: takes the proposal and the skills, returns the match. Uses rapidfuzz, whose C++ ratios
stay fast on 20 kB bodies where difflib's SequenceMatcher degrades quadratically.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rapidfuzz import fuzz

from skilld.skills.document import SkillDoc


@dataclass(frozen=True, slots=True)
class Match:
    name: str
    score: float  # 0..1


def similarity(a: SkillDoc, b: SkillDoc) -> float:
    """Weighted: names and descriptions say what a skill is for; bodies say how."""
    name = fuzz.token_set_ratio(a.name.replace("-", " "), b.name.replace("-", " ")) / 100
    description = fuzz.token_set_ratio(a.description, b.description) / 100
    body = fuzz.ratio(a.body[:4000], b.body[:4000]) / 100
    return 0.3 * name + 0.4 * description + 0.3 * body


def closest(proposal: SkillDoc, candidates: Iterable[SkillDoc], threshold: float) -> Match | None:
    best: Match | None = None
    for candidate in candidates:
        if candidate.name == proposal.name:
            continue
        score = similarity(proposal, candidate)
        if score >= threshold and (best is None or score > best.score):
            best = Match(candidate.name, round(score, 3))
    return best
