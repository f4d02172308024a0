"""One module per command group; each has `register(commands)` for the `skilld` parser."""
