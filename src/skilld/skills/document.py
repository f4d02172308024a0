"""The skill-file format: YAML frontmatter plus a Markdown body, in three dialects.

This module owns how a skill is read from and written to text; nothing else builds or
splits frontmatter. Writing goes through PyYAML's safe dumper only (never string pasting),
and writes only the keys of the chosen dialect, so a skill can never gain ``allowed-tools``,
``hooks``, ``model`` or any other key by way of the LLM or of a file someone else wrote.

Reading is deliberately forgiving (BOM, CRLF, either spelling of when-to-use, trailing
blanks on the ``---`` lines) because skilld also lists skills that people wrote by hand.
Writing is canonical: LF line endings and a body that ends in exactly one newline, so that
rendering the same skill twice gives the same bytes, and so the same hash.

No skill runs anything as it loads, in any dialect. Claude Code runs ``!`` directly followed
by a backtick-quoted command, and fenced blocks opened with three backticks directly followed
by ``!`` (and, being a CommonMark fence too, three tildes followed by ``!``), before the model
reads a skill; Hermes Agent, with its opt-in
``skills.inline_shell``, runs every match of ``!`([^`\n]+)``` in a skill it loads
(hermes-agent ``agent/skill_preprocessing.py``, ``_INLINE_SHELL_RE``). Both work on the raw
text: code spans, code fences and a backslash before the ``!`` do not stop them. So
``render_skill`` breaks both triggers in every dialect, in every field and all through the
body, fences included: a space goes between ``!`` and the backtick, and a backslash between
the fence and its ``!``. Both changes are visible and harmless on purpose: a person reading
the skill sees the same command text, one space after the ``!`` (``! `date```), Markdown shows
the fence's info string as ``!`` still, and no invisible character rides along into a command
someone copies (a zero-width character would, and Hermes's own skill guard flags those as an
injection). DeepSeek Harness injects a skill's rendered body as well; its files get the same
treatment, so no dialect depends on what its loader expands. Parsing does not undo this;
rendering an already neutralised text changes nothing. Argument and variable substitutions
(Claude Code's ``$ARGUMENTS``, Hermes's ``${HERMES_SKILL_DIR}``) insert values and run
nothing, so they stay as written.
"""

import datetime as dt
import functools
import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from skilld.skills.names import (
    DIALECTS,
    FORMS,
    InvalidName,
    dialect_of,
    require_dialect,
    validate_name,
)
from skilld.skills.triggers import control_character, neutralise_file, neutralise_shell_injection

__all__ = [
    "AGENTSKILLS_WHEN_MARKER",
    "BODY_LINE_LIMITS",
    "BODY_TOKEN_LIMITS",
    "DIALECTS",
    "FORBIDDEN_KEYS",
    "FORMS",
    "HERMES_WHEN_HEADING",
    "LISTING_BUDGETS",
    "WHEN_TO_USE_LIMIT",
    "InvalidSkill",
    "ListingBudget",
    "SkillDoc",
    "SkillParseError",
    "fold_description",
    "neutralise_file",
    "neutralise_shell_injection",
    "parse_skill",
    "quick_problem",
    "render_skill",
    "same_text",
    "validate_skill",
]


class ListingBudget(NamedTuple):
    """What an agent puts in front of the model of each skill, every session: past it, the
    agent chooses the skill on a cut text, or never sees it."""

    #: Characters of the description.
    description: int
    #: Characters of all the agent lists of a skill: the description, with the when-to-use
    #: where the agent lists it too (Claude Code's `when_to_use`, the agentskills fold).
    listed: int
    #: Who cuts there, for messages.
    who: str
    #: The description is the agent's whole index line: one sentence ending with a period,
    #: not repeating the skill's name, and the when-to-use goes into the body.
    index_line: bool = False


#: Each form's budget (docs/skills.md has the same table). The numbers and where they come from:
LISTING_BUDGETS: Mapping[str, ListingBudget] = MappingProxyType(
    {
        # DeepSeek Harness: its skill catalog cuts a description at 500 characters and lists
        # neither whenToUse nor the body (DESIGN.md §2).
        "dsh": ListingBudget(500, 500, "the dsh dialect"),
        # Claude Code: "the combined `description` and `when_to_use` text is truncated at
        # 1,536 characters in the skill listing" (https://code.claude.com/docs/en/skills,
        # frontmatter table; the `skillListingMaxDescChars` setting). The description alone
        # is held to the Agent Skills limit of 1,024, which Claude Code's validation applies.
        "claude": ListingBudget(1024, 1536, "the claude dialect"),
        # Agent Skills (Codex, and any loader of the open format): "description ... Max 1024
        # characters" (https://agentskills.io/specification). The fold is the description.
        "agentskills": ListingBudget(1024, 1024, "the agentskills dialect"),
        # Hermes Agent: "the system-prompt skill index truncates the description to 60 chars
        # and loads it every session, so anything past char 60 is silently cut and never
        # routes"; its standard is "ONE sentence, <=60 characters, ends with a period ... Do
        # NOT repeat the skill name" (hermes-agent agent/learn_prompt.py, _AUTHORING_STANDARDS).
        "hermes": ListingBudget(60, 60, "Hermes's skill index", index_line=True),
    }
)
#: The design gives no limit for when-to-use; one keeps a runaway model from filling every
#: prompt that lists skills.
WHEN_TO_USE_LIMIT = 1024
#: Body budgets of the dialects whose agents ask for short skill files (the agentskills spec:
#: under 500 lines and about 5,000 tokens; Claude Code: SKILL.md under 500 lines).
BODY_LINE_LIMITS: Mapping[str, int] = MappingProxyType({"claude": 500, "agentskills": 500})
BODY_TOKEN_LIMITS: Mapping[str, int] = MappingProxyType({"claude": 5000, "agentskills": 5000})
#: Characters per token when a budget in tokens is checked without a tokenizer.
CHARS_PER_TOKEN = 4
#: How the agentskills dialect folds when-to-use into the description.
AGENTSKILLS_WHEN_MARKER = " Use when "
#: The body section the hermes form writes the when-to-use into: Hermes's own heading, second
#: in its authoring standard's section order (agent/learn_prompt.py).
HERMES_WHEN_HEADING = "## When to Use"

#: Keys skilld never writes, whatever a SkillDoc carries. The legacy camelCase spellings make
#: DSH ignore the whole file.
FORBIDDEN_KEYS = frozenset(
    {"allowed-tools", "hooks", "model", "context", "disableModelInvocation", "userInvocable"}
)

_DISABLE_KEY = "disable-model-invocation"
_WHEN_KEYS = {"dsh": "whenToUse", "claude": "when_to_use"}
_WHEN_KEY_SPELLINGS = frozenset(_WHEN_KEYS.values())
_KNOWN_KEYS = frozenset({"name", "description", "metadata", _DISABLE_KEY}) | _WHEN_KEY_SPELLINGS
_ANGLE_BRACKET_DIALECTS = frozenset({"claude", "agentskills"})

# Patterns are compiled on first use (by `re`'s cache): a listing imports this module and uses
# two of them.
_DELIMITER_LINE = r"(?m)^---[ \t]*$"
_OPENING_LINE = r"---[ \t]*(?:\n|\Z)"
# A CommonMark code fence opening (up to three spaces, three or more backticks or tildes).
_FENCE_OPENING = r" {0,3}(`{3,}|~{3,})"
# What a when-to-use may open with that the fold's own "Use when" already says.
_WHEN_LEAD = r"(?i)(?:use\s+(?:this\s+(?:skill\s+)?)?when|when)(?:\s+|$)"
# Where a description holds more than one sentence: a full stop, then a capital ("e.g. a" is
# one sentence, "Find it. Fix it." two).
_SENTENCE_BREAK = r"[.!?]\s+[A-Z]"
# Characters YAML (or str.splitlines) treats as a line break.
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
# Wide enough that the emitter never folds a line; folding would be harmless YAML but makes
# diffs of skill files noisy.
_NO_FOLD_WIDTH = 2**31 - 1


class SkillParseError(ValueError):
    """The text is not a skill file; the message says why."""


class InvalidSkill(ValueError):
    """A skill breaks a rule of its dialect; the message names the rule."""


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _SkillFields(NamedTuple):
    """SkillDoc's fields; their defaults are `SkillDoc.__new__`'s."""

    name: str
    description: str
    when_to_use: str | None
    body: str
    metadata: Mapping[str, str]
    disable_model_invocation: bool
    #: Other frontmatter keys found when parsing a file someone else wrote. Kept so callers
    #: can see them (e.g. a legacy ``disableModelInvocation``); never rendered.
    extra: Mapping[str, Any]


class SkillDoc(_SkillFields):
    """One skill as plain values, independent of dialect.

    Immutable all through: its mappings are read-only copies, so that no dict a caller keeps
    can change a doc (a named tuple, not a dataclass: one-shot commands import this module).
    """

    __slots__ = ()

    def __new__(
        cls,
        name: str,
        description: str,
        when_to_use: str | None = None,
        body: str = "",
        metadata: Mapping[str, str] = _EMPTY,
        disable_model_invocation: bool = False,
        extra: Mapping[str, Any] = _EMPTY,
    ) -> "SkillDoc":
        metadata, extra = _frozen_mapping(metadata), _frozen_mapping(extra)
        return super().__new__(
            cls, name, description, when_to_use, body, metadata, disable_model_invocation, extra
        )

    def _replace(self, **changes: Any) -> "SkillDoc":
        # The named tuple's own `_replace` builds the tuple without `__new__`.
        return SkillDoc(**{**self._asdict(), **changes})

    def __hash__(self) -> int:
        # All but the mappings, which cannot be hashed: equal docs still hash alike.
        return hash(
            (
                self.name,
                self.description,
                self.when_to_use,
                self.body,
                self.disable_model_invocation,
            )
        )


# --------------------------------------------------------------------------- parsing


def parse_skill(text: str | bytes, *, dialect: str | None = None) -> SkillDoc:
    """Read a skill file.

    ``dialect`` (a dialect or a form) only changes interpretation where dialects disagree:
    with ``agentskills`` a description of the form ``"<description> Use when <when>"`` is
    unfolded, with ``hermes`` the body's ``## When to Use`` section as the hermes form writes
    it is taken out (either unless the file also has an explicit when-to-use key), and the
    dialect's own when-to-use spelling wins when a file has both.
    """
    if dialect is not None:
        require_dialect(dialect)
    text = _normalise_newlines(_decode(text))
    opening = re.compile(_OPENING_LINE).match(text)
    if opening is None:
        raise SkillParseError("no frontmatter: the first line must be '---'")
    closing = re.compile(_DELIMITER_LINE).search(text, opening.end())
    if closing is None:
        raise SkillParseError("frontmatter is not closed: no '---' line after the first")
    frontmatter = _load_frontmatter(text[opening.end() : closing.start()])
    body = text[closing.end() + 1 :]  # +1 skips the closing line's newline (if any)
    return _doc_from_frontmatter(frontmatter, body, dialect)


def _decode(text: str | bytes) -> str:
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise SkillParseError(f"not valid UTF-8 at byte {error.start}") from error
    if not isinstance(text, str):
        raise SkillParseError(f"expected str or bytes, not {type(text).__name__}")
    return text.removeprefix("\ufeff")


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _load_frontmatter(source: str) -> Mapping[Any, Any]:
    import yaml  # on first use: listing a library by hash, or bumping usage, never parses

    # libyaml's loader when PyYAML was built with it: about ten times faster, same safe subset.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loaded = yaml.load(source, Loader=loader)
    except yaml.YAMLError as error:
        raise SkillParseError(f"frontmatter is not valid YAML: {error}") from error
    except RecursionError as error:
        raise SkillParseError("frontmatter is nested too deeply") from error
    if loaded is None:
        raise SkillParseError("frontmatter is empty; 'name' and 'description' are required")
    if not isinstance(loaded, dict):
        raise SkillParseError(f"frontmatter must be a YAML mapping, not {_yaml_type_name(loaded)}")
    return loaded


def _doc_from_frontmatter(
    frontmatter: Mapping[Any, Any], body: str, dialect: str | None
) -> SkillDoc:
    name = frontmatter.get("name")
    if name is None:
        raise SkillParseError("frontmatter has no 'name'")
    if isinstance(name, int) and not isinstance(name, bool):
        name = str(name)  # an all-digit name is valid kebab-case but loads as an int
    if not isinstance(name, str):
        raise SkillParseError(f"'name' must be a string, not {_yaml_type_name(name)}")
    description = frontmatter.get("description")
    if description is None:
        raise SkillParseError("frontmatter has no 'description'")
    if not isinstance(description, str):
        raise SkillParseError(f"'description' must be a string, not {_yaml_type_name(description)}")

    when_key, other_when_key = _when_keys_in_order(dialect)
    when_to_use = _optional_text(frontmatter, when_key)
    consumed = {when_key}
    if when_to_use is None:
        when_to_use = _optional_text(frontmatter, other_when_key)
        consumed.add(other_when_key)
    explicit_when = when_key in frontmatter or other_when_key in frontmatter
    if dialect == "agentskills" and not explicit_when:
        description, when_to_use = _unfold_description(description)
    if dialect == "hermes" and not explicit_when:
        body, when_to_use = _take_when_section(body)

    disable = frontmatter.get(_DISABLE_KEY, False)
    if disable is None:
        disable = False
    if not isinstance(disable, bool):
        raise SkillParseError(f"'{_DISABLE_KEY}' must be true or false")

    extra = {
        str(key): value
        for key, value in frontmatter.items()
        if key not in _KNOWN_KEYS or (key in _WHEN_KEY_SPELLINGS and key not in consumed)
    }
    return SkillDoc(
        name=name,
        description=description,
        when_to_use=when_to_use,
        body=body,
        metadata=_parse_metadata(frontmatter.get("metadata")),
        disable_model_invocation=disable,
        extra=extra,
    )


def _when_keys_in_order(dialect: str | None) -> tuple[str, str]:
    if dialect == "claude":
        return "when_to_use", "whenToUse"
    return "whenToUse", "when_to_use"


def _optional_text(frontmatter: Mapping[Any, Any], key: str) -> str | None:
    value = frontmatter.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SkillParseError(f"{key!r} must be a string, not {_yaml_type_name(value)}")
    return value


def _unfold_description(description: str) -> tuple[str, str | None]:
    """Split ``"<description> Use when <when>"`` at the first marker.

    Splitting at the first marker makes render∘parse∘render equal render for every text; an
    empty remainder is not a when-to-use, so such a description stays whole.
    """
    before, marker, after = description.partition(AGENTSKILLS_WHEN_MARKER)
    if not marker or not after:
        return description, None
    return before, after


def _take_when_section(body: str) -> tuple[str, str | None]:
    """The body without the `## When to Use` section the hermes form writes, and its text.

    Only that exact shape is taken (the body's first `##` heading outside a fence, a blank
    line, one line of text, then the end or a blank line), so that parsing undoes
    `_with_when_section` exactly; a section a person wrote in another shape stays in the body.
    """
    lines = body.split("\n")
    at, _ = _scan_sections(lines)
    if at is None or lines[at] != HERMES_WHEN_HEADING or len(lines) < at + 3:
        return body, None
    blank, when, rest = lines[at + 1], lines[at + 2], lines[at + 3 :]
    if blank or not when.strip() or when != when.strip():
        return body, None
    head = "".join(line + "\n" for line in lines[:at])
    if rest in ([], [""]):  # written at the end, after one blank line
        return (head[:-1] if head.endswith("\n\n") else head), when
    if rest[0] or len(rest) < 2:
        return body, None
    return head + "\n".join(rest[1:]), when


def _scan_sections(lines: list[str]) -> tuple[int | None, bool]:
    """The index of the first `## ` heading outside a code fence (None without one), and
    whether the text ends inside an open fence."""
    fence: str | None = None
    for index, line in enumerate(lines):
        if fence is not None:
            if re.fullmatch(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*", line):
                fence = None
            continue
        opening = re.compile(_FENCE_OPENING).match(line)
        # A backtick fence's info string holds no backtick (CommonMark): such a line is text.
        if opening and not (opening.group(1)[0] == "`" and "`" in line[opening.end() :]):
            fence = opening.group(1)
        elif line.startswith("## "):
            return index, False
    return None, fence is not None


def _parse_metadata(value: object) -> Mapping[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SkillParseError(f"'metadata' must be a mapping, not {_yaml_type_name(value)}")
    metadata: dict[str, str] = {}
    for key, item in value.items():
        text_key = _metadata_text("key", key)
        metadata[text_key] = _metadata_text(text_key, item)
    return metadata


def _metadata_text(key: str, value: object) -> str:
    """Coerce a YAML scalar to the text a person would have meant by it.

    Other agents nest maps and lists under a key of their own (Hermes writes
    `metadata: {hermes: {tags: [...]}}` in its skills). Such a value is kept as its JSON text,
    so the skill is read (listed, shown to the model, compared for near-duplicates) instead of
    being broken; skilld never writes it back, since it changes no file it did not write."""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    raise SkillParseError(f"metadata {key!r} must be a scalar, not {_yaml_type_name(value)}")


def _yaml_type_name(value: object) -> str:
    names = {dict: "a mapping", list: "a list", bool: "a boolean", str: "a string"}
    for kind, label in names.items():
        if isinstance(value, kind):
            return label
    return type(value).__name__


_NAME_LINE = r"(?m)^name:[ \t]*['\"]?([^'\"\n#]*?)['\"]?[ \t]*$"


def quick_problem(data: bytes, name: str) -> str | None:
    """What a listing can tell is wrong with a skill file without a YAML parser: no
    frontmatter, an unclosed one, or a `name:` line that is not `name`. (A file that passes may
    still hold broken YAML; `parse_skill` is the whole check.)"""
    try:
        text = _normalise_newlines(data.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return f"not valid UTF-8 at byte {error.start}"
    opening = re.compile(_OPENING_LINE).match(text)
    if opening is None:
        return "no frontmatter: the first line must be '---'"
    closing = re.compile(_DELIMITER_LINE).search(text, opening.end())
    if closing is None:
        return "frontmatter is not closed: no '---' line after the first"
    found = re.compile(_NAME_LINE).search(text, opening.end(), closing.start())
    if found is None:
        return "frontmatter has no 'name'"
    if found.group(1) != name:
        return f"frontmatter name {found.group(1)!r} != {name!r}"
    return None


# --------------------------------------------------------------------------- rendering


@functools.cache
def _dumper() -> Any:
    """SafeDumper that puts any string with a line break in double quotes.

    PyYAML's default for such strings is a multi-line single-quoted scalar, which loses
    U+0085 on the way back and spreads one value over several lines; a double-quoted scalar
    escapes every break, so each value stays on one physical line.
    """
    import yaml

    class SkillDumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if any(character in _LINE_BREAKS for character in value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    SkillDumper.add_representer(str, represent_str)
    return SkillDumper


def render_skill(doc: SkillDoc, dialect: str) -> str:
    """Write ``doc`` as the text of a skill file in ``dialect`` (a dialect or a form).

    Only the dialect's keys are written, every load-time shell trigger is broken (see the
    module docstring), and every character a person would not see is made visible
    (`invisible.make_visible`; validation refuses them in the fields a listing shows). In
    the agentskills dialect the when-to-use is folded into the description
    (`fold_description`); in the hermes form it becomes the body's `## When to Use` section.
    The body's line endings become LF and it ends in exactly one newline. Render does not
    validate: call ``validate_skill`` first.
    """
    require_dialect(dialect)
    from skilld.skills.invisible import make_visible  # a write's: no listing renders

    def neutralise(text: str) -> str:
        return neutralise_shell_injection(make_visible(text))

    when_to_use = doc.when_to_use or None
    body = doc.body

    frontmatter: dict[str, object] = {"name": doc.name}
    if dialect == "hermes":
        frontmatter["description"] = neutralise(doc.description)
        body = _with_when_section(body, when_to_use)
    elif dialect == "agentskills":
        # Each part is neutralised before the fold reads its first word (a trigger broken
        # after it would change that word's case on the next render), and the whole after.
        folded = fold_description(
            neutralise(doc.description), when_to_use and neutralise(when_to_use)
        )
        frontmatter["description"] = neutralise(folded)
    else:
        frontmatter["description"] = neutralise(doc.description)
        if when_to_use is not None:
            frontmatter[_WHEN_KEYS[dialect]] = neutralise(when_to_use)
    if doc.metadata:
        frontmatter["metadata"] = {
            neutralise(key): neutralise(value) for key, value in doc.metadata.items()
        }
    if doc.disable_model_invocation and dialect_of(dialect) != "agentskills":
        frontmatter[_DISABLE_KEY] = True

    import yaml

    dumped = yaml.dump(
        frontmatter,
        Dumper=_dumper(),
        sort_keys=False,
        allow_unicode=True,
        width=_NO_FOLD_WIDTH,
        default_flow_style=False,
    )
    return f"---\n{dumped}---\n{_canonical_body(neutralise(body))}"


def fold_description(description: str, when_to_use: str | None) -> str:
    """The agentskills description with the when-to-use folded in, as one sentence:
    ``"<description>. Use when <when>."``.

    A leading "Use when" or "When" of the when-to-use is dropped (the fold says it), its first
    letter is lower-cased unless the first word looks like an acronym or a name ("CI",
    "GitHub", "I"), and it ends with one period; the description gets a closing period if it
    has none. The text is split at its first marker and each side normalised, so that
    parsing a folded description (which splits there) and folding it again gives it back.
    """
    text = f"{description}{AGENTSKILLS_WHEN_MARKER}{when_to_use}" if when_to_use else description
    before, after = _unfold_description(text)
    if after is None:
        return text
    clause = _when_clause(after)
    if not clause:
        return before
    return f"{_as_sentence(before)}{AGENTSKILLS_WHEN_MARKER}{clause}"


def _as_sentence(text: str) -> str:
    stripped = text.rstrip()
    if not stripped or stripped[-1] in ".!?":
        return stripped
    return stripped + "."


def _when_clause(text: str) -> str:
    clause = text.strip()
    while (lead := re.compile(_WHEN_LEAD).match(clause)) is not None:
        clause = clause[lead.end() :].lstrip()
    clause = _lower_first_word(clause).rstrip()
    while clause.endswith("."):
        clause = clause[:-1].rstrip()
    if not clause:
        return ""
    return clause if clause[-1] in "!?" else clause + "."


def _lower_first_word(text: str) -> str:
    """`text` with its first letter lower-cased, unless its first word looks like an acronym
    or a name: "I", or a word with a capital or a digit after its first letter."""
    word = text.split(maxsplit=1)[0] if text.strip() else ""
    # "I." is the word "I" ending the clause (a parsed fold ends with its period).
    bare = word.rstrip(".,;:!?")
    if not word or not word[0].isupper() or bare == "I" or word.startswith("I'"):
        return text
    if any(character.isupper() or character.isdigit() for character in word[1:]):
        return text
    return text[0].lower() + text[1:]


def _with_when_section(body: str, when_to_use: str | None) -> str:
    """The hermes form's body: the when-to-use as a `## When to Use` section, on one line,
    just before the body's first `##` heading outside a fence, else at its end (at its start
    when the body ends inside an open fence, where a heading would be code)."""
    body = _canonical_body(body)
    line = " ".join(when_to_use.split()) if when_to_use else ""
    if not line:
        return body
    section = f"{HERMES_WHEN_HEADING}\n\n{line}\n"
    lines = body.split("\n")
    at, open_fence = _scan_sections(lines)
    if at is not None:
        offset = sum(len(text) + 1 for text in lines[:at])
        return f"{body[:offset]}{section}\n{body[offset:]}"
    if open_fence:
        return f"{section}\n{body}"
    return f"{body}\n{section}"


def _canonical_body(body: str) -> str:
    return _normalise_newlines(body).rstrip("\n") + "\n"


def listed_text(doc: SkillDoc, dialect: str) -> str:
    """What the agent of ``dialect`` (a dialect or a form) lists of ``doc`` every session."""
    if dialect == "agentskills":
        return fold_description(doc.description, doc.when_to_use or None)
    if dialect == "claude":
        return doc.description + (doc.when_to_use or "")
    return doc.description


def same_text(current: SkillDoc, proposed: SkillDoc, dialect: str) -> bool:
    """Whether writing `proposed` over `current` would change what the agent reads.

    Both are compared as `dialect` renders them (line endings, neutralised shell triggers,
    the fold, the body's surrounding blank lines), so a file read back never differs from
    the proposal that wrote it; the version counter alone is no change.
    """

    def shape(doc: SkillDoc) -> tuple[str, bool]:
        bare = doc._replace(metadata={}, body=_normalise_newlines(doc.body).strip())
        return render_skill(bare, dialect), doc.disable_model_invocation

    return shape(current) == shape(proposed)


# --------------------------------------------------------------------------- validation


def validate_skill(doc: SkillDoc, dialect: str, *, max_content_chars: int = 20000) -> None:
    """Raise ``InvalidSkill`` naming the first rule ``doc`` breaks in ``dialect`` (a dialect
    or a form); a budget's message says by how much it is over."""
    require_dialect(dialect)
    written = dialect_of(dialect)
    try:
        validate_name(doc.name, dialect=written)
    except InvalidName as error:
        raise InvalidSkill(str(error)) from error
    budget = LISTING_BUDGETS[dialect]
    _check_description(doc.description, written, budget)
    _check_when_to_use(doc.when_to_use, written)
    if budget.index_line:
        _check_index_line(doc.name, doc.description, budget)
    listed = len(listed_text(doc, dialect))
    if dialect == "agentskills" and listed > budget.listed:
        raise InvalidSkill(
            f"description with when-to-use folded in is {listed} characters; {budget.who} "
            f"allows {budget.listed} ({listed - budget.listed} over)"
        )
    if dialect == "claude" and listed > budget.listed:
        raise InvalidSkill(
            f"description and when_to_use together are {listed} characters; Claude Code "
            f"lists at most {budget.listed} ({listed - budget.listed} over)"
        )
    if written == "agentskills" and doc.disable_model_invocation:
        raise InvalidSkill(f"'{_DISABLE_KEY}' cannot be written in the agentskills dialect")
    _check_metadata(doc.metadata)
    _check_body(doc.body, max_content_chars, written)


def _check_description(description: object, dialect: str, budget: ListingBudget) -> None:
    if not isinstance(description, str):
        raise InvalidSkill(f"description must be a string, not {type(description).__name__}")
    if not description.strip():
        raise InvalidSkill("description must not be empty")
    limit = budget.description
    if len(description) > limit:
        hint = (
            ": one sentence on what the skill does; the when-to-use goes in whenToUse"
            if budget.index_line
            else ""
        )
        raise InvalidSkill(
            f"description is {len(description)} characters; {budget.who} allows {limit} "
            f"({len(description) - limit} over){hint}"
        )
    _check_field_text("description", description, dialect)


def _check_index_line(name: str, description: str, budget: ListingBudget) -> None:
    """The description is the agent's whole index line: one sentence that ends with a period
    and does not spend its characters on the name (a name of one word may well be the verb
    the sentence needs, so only a name of two or more words counts)."""
    text = description.strip()
    if not text.endswith("."):
        raise InvalidSkill(f"description must end with a period: {budget.who} lists one sentence")
    if re.compile(_SENTENCE_BREAK).search(text):
        raise InvalidSkill(f"description must be one sentence: {budget.who} lists one")
    words = name.split("-")
    if len(words) > 1 and re.search(
        r"\b" + r"[-\s]+".join(map(re.escape, words)) + r"\b", text, re.IGNORECASE
    ):
        raise InvalidSkill(
            f"description must not repeat the name {name!r}: {budget.who} shows the name beside it"
        )


def _check_when_to_use(when_to_use: object, dialect: str) -> None:
    if when_to_use is None or when_to_use == "":
        return
    if not isinstance(when_to_use, str):
        raise InvalidSkill(f"when_to_use must be a string, not {type(when_to_use).__name__}")
    if not when_to_use.strip():
        raise InvalidSkill("when_to_use is blank; leave it unset instead")
    if len(when_to_use) > WHEN_TO_USE_LIMIT:
        raise InvalidSkill(
            f"when_to_use is {len(when_to_use)} characters; at most {WHEN_TO_USE_LIMIT} are allowed"
        )
    _check_field_text("when_to_use", when_to_use, dialect)


def _check_field_text(label: str, text: str, dialect: str) -> None:
    import unicodedata  # a C extension a `skills list` does not need

    if dialect in _ANGLE_BRACKET_DIALECTS and ("<" in text or ">" in text):
        raise InvalidSkill(f"{label} must not contain '<' or '>' in the {dialect} dialect")
    if dialect == "agentskills" and any(character in _LINE_BREAKS for character in text):
        raise InvalidSkill(f"{label} must be a single line in the agentskills dialect")
    for character in text:
        if character in "\n\t":
            continue
        if unicodedata.category(character) == "Cc" or character in _LINE_BREAKS:
            raise InvalidSkill(
                f"{label} contains U+{ord(character):04X}, a control character or line "
                "separator; only newline and tab are allowed"
            )
    from skilld.skills.invisible import hidden_character

    if (problem := hidden_character(label, text)) is not None:
        raise InvalidSkill(problem)


def _check_metadata(metadata: Mapping[str, str]) -> None:
    for key, value in metadata.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidSkill(f"metadata key {key!r} must be a non-empty string")
        if not isinstance(value, str):
            raise InvalidSkill(f"metadata {key!r} must be a string, not {type(value).__name__}")
        _check_controls(f"metadata key {key!r}", key, allowed="\t")
        _check_controls(f"metadata {key!r}", value, allowed="\t\n")


def _check_controls(label: str, text: str, *, allowed: str) -> None:
    if (problem := control_character(label, text, allowed=allowed)) is not None:
        raise InvalidSkill(problem)


def _check_body(body: object, max_content_chars: int, dialect: str) -> None:
    if not isinstance(body, str):
        raise InvalidSkill(f"body must be a string, not {type(body).__name__}")
    if not body.strip():
        raise InvalidSkill("body must not be empty")
    _check_controls("body", body, allowed="\t\n\r")  # a CR is written as a newline
    if len(body) > max_content_chars:
        raise InvalidSkill(
            f"body is {len(body)} characters; at most {max_content_chars} are allowed"
        )
    lines = body.strip("\n").count("\n") + 1
    if dialect in BODY_LINE_LIMITS and lines >= BODY_LINE_LIMITS[dialect]:
        raise InvalidSkill(
            f"body is {lines} lines; the {dialect} dialect keeps a skill under "
            f"{BODY_LINE_LIMITS[dialect]} (move detail into fewer, denser steps)"
        )
    tokens = len(body) // CHARS_PER_TOKEN
    if dialect in BODY_TOKEN_LIMITS and tokens > BODY_TOKEN_LIMITS[dialect]:
        raise InvalidSkill(
            f"body is about {tokens} tokens; the {dialect} dialect keeps a skill under "
            f"about {BODY_TOKEN_LIMITS[dialect]}"
        )
