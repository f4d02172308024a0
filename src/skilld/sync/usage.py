"""Each host's usage counters in the repository, and the team's sum.

`.usage.json` stays host-local (Hermes and skilld lock and rewrite it constantly; committing it
would conflict on every sync). Instead each host publishes the counters of its own sidecar to
`.skilld/usage/<host>.json`, a file only that host ever writes, so these files never conflict.
Only the counters and activity times are published: pins, states and creation anchors remain
each host's own decision.

    {
      "host": "laptop",
      "skills": {
        "fix-venv": {"last_patched_at": null, "last_used_at": "2025-…", …, "use_count": 3}
      }
    }

`sum_usage` adds a host's live records to what every other host published: counts add, each
`last_*_at` takes the newest. `skills list`, `skills show` and the curator read that sum, so no
host archives a skill a teammate uses.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from skilld.boundedjson import JSONRefused
from skilld.boundedjson import loads as bounded_loads
from skilld.fsutil import MAX_FILE_BYTES
from skilld.skills.usage import (
    ACTIVITY_FIELDS,
    COUNT_FIELDS,
    USES_BY_DAY,
    Record,
    count_of,
    parse_timestamp,
    uses_by_day,
)

Counters = dict[str, dict[str, Any]]


class UsageFileError(ValueError):
    pass


def published_counters(records: Mapping[str, Mapping[str, Any]]) -> Counters:
    """What a host publishes of its sidecar: per skill, the counts and the activity times."""
    return {
        name: {
            **{key: count_of(record, key) for key in COUNT_FIELDS},
            **{key: _timestamp_or_none(record.get(key)) for key in ACTIVITY_FIELDS},
            **({USES_BY_DAY: days} if (days := uses_by_day(record)) else {}),
        }
        for name, record in records.items()
    }


def render_host_usage(host: str, records: Mapping[str, Mapping[str, Any]]) -> bytes:
    counters = published_counters(records)
    lines = [
        f"    {json.dumps(name)}: {json.dumps(counters[name], sort_keys=True)}"
        for name in sorted(counters)
    ]
    skills = "{\n" + ",\n".join(lines) + "\n  }" if lines else "{}"
    return f'{{\n  "host": {json.dumps(host)},\n  "skills": {skills}\n}}\n'.encode()


def parse_host_usage(data: bytes) -> Counters:
    try:
        document = bounded_loads(data, limit=MAX_FILE_BYTES)
    except JSONRefused as exc:
        raise UsageFileError(f"not read: {exc}") from None
    except ValueError as exc:
        raise UsageFileError(f"not JSON: {exc}") from None
    skills = document.get("skills") if isinstance(document, dict) else None
    if not isinstance(skills, dict):
        raise UsageFileError('no "skills" object')
    return {name: record for name, record in skills.items() if isinstance(record, dict)}


def sum_usage(
    local: Mapping[str, Mapping[str, Any]], others: Iterable[Mapping[str, Mapping[str, Any]]]
) -> dict[str, Record]:
    """This host's records with every other host's counters added.

    A local record keeps all its keys (pin, state, created_by…); its counts become team
    totals and its `last_*_at` the team's newest. A skill only teammates have records of gets
    a record of just those counters and times."""
    team = {name: copy.deepcopy(dict(record)) for name, record in local.items()}
    for published in others:
        for name, theirs in published.items():
            mine = team.setdefault(name, {})
            for key in COUNT_FIELDS:
                mine[key] = count_of(mine, key) + count_of(theirs, key)
            for key in ACTIVITY_FIELDS:
                mine[key] = _newest(mine.get(key), theirs.get(key))
            if their_days := uses_by_day(theirs):
                days = uses_by_day(mine)
                for day, count in their_days.items():
                    days[day] = days.get(day, 0) + count
                mine[USES_BY_DAY] = days
    return team


def _newest(first: Any, second: Any) -> Any:
    a, b = parse_timestamp(first), parse_timestamp(second)
    if b is None:
        return first if a is not None else None
    return second if a is None or b > a else first


def _timestamp_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and parse_timestamp(value) is not None else None
