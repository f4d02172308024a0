"""Now, for the decisions that depend on the date (the curator's ages, the holdout's blocks).

`$SKILLD_NOW` (ISO-8601, e.g. `2026-12-03T05:00:00+00:00`) fixes it for every command and the
daemon: how tests run the curator and the holdout through days and months on a set clock.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

NOW_ENV = "SKILLD_NOW"


def utc_now() -> datetime:
    """Now (aware, UTC), or the time `$SKILLD_NOW` names."""
    fixed = os.environ.get(NOW_ENV)
    if fixed:
        moment = datetime.fromisoformat(fixed)
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return datetime.now(UTC)
