"""Every error skilld raises on purpose, and the exit code each one means on the command line.

    SkilldError                 exit 1: an operation failed; the message says why
    ├── Failure                 a command could not do what was asked
    ├── LibraryError            the library refused a change
    │   ├── Protected           the skill is not skilld's to change, or it is pinned
    │   ├── CapReached          another managed skill would pass the library's cap
    │   └── NotFound            no such skill (or saved version, or failure)
    ├── StateError              state.db cannot be used
    ├── UsageError              exit 2: bad usage (an unknown or ambiguous library, a bad flag)
    └── ConfigError             exit 2: a configuration problem, naming its key (also ValueError)

The CLI catches `SkilldError` once and exits with the class's `exit_code`.
"""

from __future__ import annotations


class SkilldError(Exception):
    exit_code = 1


class Failure(SkilldError):
    """A command could not do what was asked."""


class LibraryError(SkilldError):
    """An operation on the library was refused; the message says why."""


class Protected(LibraryError):
    """The skill is not skilld's to change (human, bundled, hub, external) or is pinned."""


class CapReached(LibraryError):
    """Creating another managed skill would exceed the library's `max_managed`."""


class NotFound(LibraryError):
    """No skill (or saved version) by that name, or no failure by that id or signature."""


class StateError(SkilldError):
    """state.db cannot be used (newer schema, unreadable, locked by another daemon)."""


class UsageError(SkilldError):
    """Bad usage of a command."""

    exit_code = 2


class ConfigError(SkilldError, ValueError):
    """A configuration problem, with the dotted key it concerns (if any)."""

    exit_code = 2

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)
