"""Campaigns: long randomised runs that prove an invariant, small by default, full with --full.

Each campaign reports its figures through the `campaign_figures` fixture; they are printed as
one line per campaign in a "campaign figures" section of the terminal summary, so they show
without `-s`. They travel in the test's report (`user_properties`), so the summary has them
when a worker process ran the campaign (`pytest -n`); tests/conftest.py prints them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

#: The `user_properties` key of a campaign's figures line.
FIGURES_PROPERTY = "campaign figures"


def pytest_addoption(parser: pytest.Parser) -> None:
    # Added already when tests/conftest.py imports this hook so that `pytest --full` works
    # from the root (an option of a conftest below the root is registered too late for that).
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--full",
            action="store_true",
            default=False,
            help="run the campaigns at full size (minutes) instead of the quick default",
        )


@pytest.fixture
def full_size(request: pytest.FixtureRequest) -> bool:
    """True under --full. The default keeps working when this conftest was loaded too late
    for its option to be registered (pytest run from a parent directory without --full)."""
    return bool(request.config.getoption("--full", default=False))


@pytest.fixture
def campaign_figures(full_size: bool, request: pytest.FixtureRequest) -> Callable[..., str]:
    """`record(name, **figures)` -> the one line it printed and queued for the summary."""

    def record(name: str, **figures: object) -> str:
        size = "full" if full_size else "normal"
        line = f"{name} ({size}): " + ", ".join(f"{key}={value}" for key, value in figures.items())
        request.node.user_properties.append((FIGURES_PROPERTY, line))
        print(line, flush=True)
        return line

    return record
