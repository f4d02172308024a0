"""Effect (DESIGN.md §13): failing tool calls read from transcripts, and what skills change.

`signature` and `extract` are pure (a read's messages in, runs and failures out), and so is
`targets` (what a skill is meant to end, from its window and its reply); `store` owns
the effect tables of state.db; `record` is what the tick calls as it reads and reflects.
`verdict` and `measure` are pure too (a skill's counts in, its verdict out); `report` reads
each learned skill's effect (`skilld effect`); `watch` is what the tick records of it.
`holdout` is the switchback holdout's pure decisions (DESIGN.md §14), `holdout_store` its
tables and arm counts.
"""

from skilld.digest import sha256_hex

__all__ = [
    "extract",
    "failure_id",
    "holdout",
    "holdout_store",
    "measure",
    "record",
    "report",
    "signature",
    "store",
    "targets",
    "verdict",
    "watch",
]


def failure_id(signature: str) -> str:
    """A failure's stable id: the first 12 hex digits of the SHA-256 of its signature."""
    return sha256_hex(signature.encode("utf-8"))[:12]
