"""Skill-name rules: what a skill may be called, per dialect, and how a prefix is applied.

A skill name is also a directory or file name on disk, so these rules are the first line of
defence against path tricks (``..``, separators, NUL) and look-alike names (Cyrillic or
fullwidth letters that render like ASCII). The pattern admits ASCII only, checked with
``fullmatch`` so that a trailing newline cannot slip past ``$``.
"""

from __future__ import annotations

import os
import re

#: Every frontmatter dialect skilld can write (the config's `dialect`); ``document`` re-exports
#: this.
DIALECTS = ("dsh", "claude", "agentskills")
#: What a library writes: its dialect, or ``hermes``, the agentskills dialect shaped for Hermes
#: Agent's skill index (``document.LISTING_BUDGETS``). Not a config value: a library is in the
#: ``hermes`` form when its agent is Hermes (``form_of``).
FORMS = (*DIALECTS, "hermes")
#: The source kind of Hermes Agent (``routing.AGENTS``).
HERMES_AGENT = "hermes"

NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME_LENGTH = 64

#: Claude refuses these words anywhere in a name. A substring test is used (not a
#: hyphen-separated word test) because "claudebot" or "myanthropic" would otherwise pass
#: while still claiming the vendor's name.
CLAUDE_RESERVED_WORDS = ("claude", "anthropic")

_KEBAB_RULE = "must be kebab-case: lowercase letters, digits and single hyphens"


class InvalidName(ValueError):
    """A skill name broke a rule; the message names the rule."""


def require_dialect(dialect: str) -> str:
    """Return ``dialect`` (a dialect, or a form of one) if skilld knows it, else raise
    ``ValueError`` listing the choices."""
    if dialect not in FORMS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
    return dialect


def form_of(dialect: str, agent: str | None) -> str:
    """What a library of `dialect` loaded by `agent` (a source kind, or None) writes: Hermes
    loads the agentskills dialect but lists only 60 characters of each description, so its
    library writes the ``hermes`` form of it."""
    return "hermes" if agent == HERMES_AGENT and dialect == "agentskills" else dialect


def dialect_of(form: str) -> str:
    """The frontmatter dialect a form writes."""
    return "agentskills" if form == "hermes" else require_dialect(form)


def validate_name(name: str, *, dialect: str = "dsh") -> str:
    """Return ``name`` unchanged if it is a valid skill name in ``dialect``, else raise."""
    dialect = dialect_of(dialect)
    if not isinstance(name, str):
        raise InvalidName(f"name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidName("name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(
            f"name {_shorten(name)!r} is {len(name)} characters; at most {MAX_NAME_LENGTH} "
            "are allowed"
        )
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidName(f"name {name!r} {_KEBAB_RULE} ({_kebab_violation(name)})")
    if dialect == "claude":
        for word in CLAUDE_RESERVED_WORDS:
            if word in name:
                raise InvalidName(
                    f"name {name!r} contains the reserved word {word!r}; the claude dialect "
                    f"refuses names containing {' or '.join(map(repr, CLAUDE_RESERVED_WORDS))}"
                )
    return name


def apply_prefix(name: str, prefix: str | None, *, dialect: str = "dsh") -> str:
    """Namespace ``name`` as ``<prefix>-<name>`` unless it already carries that prefix.

    A configured prefix may end in a hyphen ("auto-"); that hyphen is the separator, not
    part of the prefix. The result is validated, so an over-long result is refused.
    """
    if not prefix:
        return validate_name(name, dialect=dialect)
    bare_prefix = prefix.removesuffix("-")
    try:
        validate_name(bare_prefix, dialect=dialect)
    except InvalidName as error:
        raise InvalidName(f"name prefix is invalid: {error}") from error
    if not (isinstance(name, str) and name.startswith(bare_prefix + "-")):
        # Validate the bare name first so the message points at what the caller passed.
        validate_name(name, dialect=dialect)
        name = f"{bare_prefix}-{name}"
    return validate_name(name, dialect=dialect)


def is_safe_path_component(name: str) -> bool:
    """True if ``name`` can be joined under a directory without escaping or hiding itself.

    Refuses separators (both ``/`` and ``\\`` whatever the platform), ``.`` and ``..``,
    NUL, and names starting with ``.`` (hidden files, temp files, ``.archive``).
    """
    if not isinstance(name, str) or not name:
        return False
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if any(separator in name for separator in separators):
        return False
    return "\0" not in name and not name.startswith(".")


def _kebab_violation(name: str) -> str:
    """Say which part of the kebab-case rule ``name`` breaks, for a repairable message."""
    for character in name:
        if character.isascii() and (character.islower() or character.isdigit()):
            continue
        if character == "-":
            continue
        return _describe_character(character)
    if name.startswith("-"):
        return "leading hyphen"
    if name.endswith("-"):
        return "trailing hyphen"
    return "double hyphen"


def _describe_character(character: str) -> str:
    if character.isascii() and character.isupper():
        return f"uppercase letter {character!r}"
    if character.isspace():
        return f"whitespace U+{ord(character):04X}"
    if not character.isascii():
        import unicodedata  # only to explain a rejected name: not on every hook's path

        unicode_name = unicodedata.name(character, "unnamed character")
        return f"non-ASCII character U+{ord(character):04X} {unicode_name}"
    return f"character {character!r} is not allowed"


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
