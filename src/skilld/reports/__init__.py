"""What skilld reports about its libraries, its daemon and its event log, as plain values.

One function per report: the CLI prints them (as text, or as the `--json` object), the MCP
server returns them to an agent, and the web panel renders them and serves them under `/api/`.
Each is a function of an opened `App` (or a `Library`) and returns lists and dicts of plain
values, so the three faces agree by construction.

One module per report family: `listing` (the skills table), `skill` (one skill), `effect`
(effects and failures), `status`, `events`, `curator` and `week` (the overview's week).
`skills list` and `status` are one-shot commands: each imports only its own module, which
imports nothing at load time beyond what the command already loads; each report imports what
it needs when it runs.
"""

__all__ = ["curator", "effect", "events", "listing", "skill", "status", "week"]
