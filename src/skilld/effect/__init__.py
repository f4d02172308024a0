"""Effect (DESIGN.md §13): failing tool calls read from transcripts, and what skills change.

`signature` and `extract` are pure (a read's messages in, runs and failures out); `store` owns
the effect tables of state.db; `record` is what the tick calls as it reads and reflects.
"""

__all__ = ["extract", "record", "signature", "store"]
