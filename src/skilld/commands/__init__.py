"""One module per command group; each has a `COMMANDS` table (`common.CommandTable`) for the
`skilld` parser and imports what its commands use only when one runs. `_doctor` holds doctor's
checks."""

__all__ = ["common", "curate", "daemon", "mcp", "ops", "replay", "skills", "sync", "usage"]
