"""Skill-name rules: every refusal names its rule, and nothing accepted can escape a directory."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skilld.skills.names import (
    DIALECTS,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    InvalidName,
    apply_prefix,
    is_safe_path_component,
    validate_name,
)


@pytest.mark.parametrize("name", ["a", "7", "fix-tests", "a1-b2-c3", "x" * MAX_NAME_LENGTH])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_valid_names_are_returned_unchanged(name: str, dialect: str) -> None:
    assert validate_name(name, dialect=dialect) == name


@pytest.mark.parametrize(
    ("name", "expected_message"),
    [
        (123, "name must be a string, not int"),
        (None, "name must be a string, not NoneType"),
        ("", "name must not be empty"),
        ("a" * 65, "is 65 characters; at most 64 are allowed"),
        ("Foo", "name 'Foo' must be kebab-case: lowercase letters, digits and single hyphens"),
        ("Foo", "uppercase letter 'F'"),
        ("foo_bar", "character '_' is not allowed"),
        ("foo.bar", "character '.' is not allowed"),
        ("foo/bar", "character '/' is not allowed"),
        ("..", "character '.' is not allowed"),
        ("a\0b", "character '\\x00' is not allowed"),
        ("a b", "whitespace U+0020"),
        ("foo\n", "whitespace U+000A"),
        ("\tfoo", "whitespace U+0009"),
        ("\u0430pi", "non-ASCII character U+0430 CYRILLIC SMALL LETTER A"),
        ("\uff46oo", "non-ASCII character U+FF46 FULLWIDTH LATIN SMALL LETTER F"),
        ("caf\u00e9", "non-ASCII character U+00E9"),
        ("-foo", "leading hyphen"),
        ("foo-", "trailing hyphen"),
        ("foo--bar", "double hyphen"),
        ("-", "leading hyphen"),
    ],
)
def test_invalid_names_are_refused_naming_the_rule(name: object, expected_message: str) -> None:
    with pytest.raises(InvalidName) as raised:
        validate_name(name)  # type: ignore[arg-type]
    assert expected_message in str(raised.value)


def test_invalid_name_is_a_value_error() -> None:
    assert issubclass(InvalidName, ValueError)


def test_over_long_name_is_shortened_in_the_message() -> None:
    with pytest.raises(InvalidName) as raised:
        validate_name("a" * 500)
    assert len(str(raised.value)) < 120


@pytest.mark.parametrize(
    ("name", "word"),
    [
        ("claude", "claude"),
        ("claude-helper", "claude"),
        ("ask-anthropic", "anthropic"),
        ("claudebot", "claude"),  # substring, not only a whole hyphen-separated word
        ("myanthropicthing", "anthropic"),
    ],
)
def test_claude_dialect_refuses_reserved_words(name: str, word: str) -> None:
    with pytest.raises(InvalidName) as raised:
        validate_name(name, dialect="claude")
    assert f"contains the reserved word {word!r}" in str(raised.value)
    assert "claude dialect" in str(raised.value)
    # Other dialects do not reserve these words.
    assert validate_name(name, dialect="dsh") == name
    assert validate_name(name, dialect="agentskills") == name


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dialect 'codex'"):
        validate_name("fine", dialect="codex")
    # The hermes form writes the agentskills dialect, under its rules.
    assert validate_name("claude-notes", dialect="hermes") == "claude-notes"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_accepted_name_is_ascii_kebab_and_a_safe_path_component(name: str) -> None:
    try:
        accepted = validate_name(name)
    except InvalidName:
        return
    assert accepted == name
    assert name.isascii()
    assert NAME_PATTERN.fullmatch(name)
    assert is_safe_path_component(name)
    assert len(name) <= MAX_NAME_LENGTH


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet="abcxyz0189", min_size=1, max_size=12), min_size=1, max_size=6)
    .map("-".join)
    .filter(lambda name: len(name) <= MAX_NAME_LENGTH)
)
def test_every_name_the_pattern_describes_is_accepted(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    ("name", "prefix", "expected"),
    [
        ("fix-tests", "auto", "auto-fix-tests"),
        ("auto-fix-tests", "auto", "auto-fix-tests"),
        ("autofix", "auto", "auto-autofix"),  # "auto" is only a prefix when followed by "-"
        ("fix-tests", "auto-", "auto-fix-tests"),
        ("auto-fix-tests", "auto-", "auto-fix-tests"),
        ("fix-tests", None, "fix-tests"),
        ("fix-tests", "", "fix-tests"),
    ],
)
def test_apply_prefix(name: str, prefix: str | None, expected: str) -> None:
    assert apply_prefix(name, prefix) == expected


def test_apply_prefix_refuses_an_invalid_prefix() -> None:
    with pytest.raises(InvalidName, match=r"name prefix is invalid: name 'Auto' must be kebab"):
        apply_prefix("fix", "Auto")


def test_apply_prefix_refuses_an_invalid_name_naming_it() -> None:
    with pytest.raises(InvalidName, match=r"name 'Fix' must be kebab-case"):
        apply_prefix("Fix", "auto")
    with pytest.raises(InvalidName, match="must not be empty"):
        apply_prefix("", "auto")


def test_apply_prefix_validates_the_result_length() -> None:
    name = "x" * 60
    assert validate_name(name) == name
    with pytest.raises(InvalidName, match="is 65 characters"):
        apply_prefix(name, "auto")


def test_apply_prefix_honours_the_dialect() -> None:
    assert apply_prefix("fix", "claude") == "claude-fix"
    with pytest.raises(InvalidName, match="reserved word 'claude'"):
        apply_prefix("fix", "claude", dialect="claude")


@pytest.mark.parametrize("name", ["fix-tests", "a", "SKILL.md", "a.b", "x" * 200])
def test_safe_path_components(name: str) -> None:
    assert is_safe_path_component(name)


@pytest.mark.parametrize(
    "name", ["", ".", "..", ".hidden", ".archive", "a/b", "/abs", "a\\b", "..\\x", "a\0b", 3, None]
)
def test_unsafe_path_components(name: object) -> None:
    assert not is_safe_path_component(name)  # type: ignore[arg-type]
