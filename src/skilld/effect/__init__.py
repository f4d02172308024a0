"""Effect (DESIGN.md §13): failing tool calls read from transcripts, and what skills change."""
