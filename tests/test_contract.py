import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skilld.evolve.contract import (
    CONTRACT_TEXT,
    PROPOSAL_SCHEMA,
    RAW_REPLY_LIMIT,
    Decline,
    Proposal,
    Violation,
    extract_json_object,
    parse_reply,
    repair_message,
)

TRICKY_PIECES = [
    "```",
    "```json\n",
    "\n```",
    "{",
    "}",
    "{}",
    '"',
    "\\",
    "</think>",
    "<think>",
    '{"evolve": false, "reason": "x"}',
    "\n",
    "é",
    "日本語",
    "🙂",
    "\u2028",
    "\x00",
]
tricky_text = st.lists(st.one_of(st.text(), st.sampled_from(TRICKY_PIECES)), max_size=12).map(
    "".join
)
# Prose and reasoning that a model writes around its answer: no braces, quotes or tags.
prose = st.text(
    alphabet=st.characters(
        blacklist_characters='{}"<', blacklist_categories=("Cs",), min_codepoint=1
    ),
    max_size=80,
)


def proposal_document(content: str) -> dict[str, object]:
    return {
        "evolve": True,
        "name": "fix-flaky-tests",
        "description": "Stabilise flaky async tests",
        "whenToUse": "When a test fails only sometimes",
        "content": content,
        "reason": "Came up twice",
    }


@settings(max_examples=300)
@given(text=st.one_of(st.text(), tricky_text))
def test_parse_and_extract_never_raise(text: str) -> None:
    assert isinstance(parse_reply(text), Proposal | Decline | Violation)
    extracted = extract_json_object(text)
    assert extracted is None or isinstance(extracted, dict)


@settings(max_examples=300)
@given(
    content=tricky_text,
    ensure_ascii=st.booleans(),
    indent=st.sampled_from([None, 2]),
    fence=st.sampled_from([None, "```json", "```"]),
    reasoning=st.one_of(st.none(), prose),
    preamble=prose,
    epilogue=prose,
)
def test_content_survives_byte_for_byte(
    content: str,
    ensure_ascii: bool,
    indent: int | None,
    fence: str | None,
    reasoning: str | None,
    preamble: str,
    epilogue: str,
) -> None:
    reply = json.dumps(proposal_document(content), ensure_ascii=ensure_ascii, indent=indent)
    if fence is not None:
        reply = f"{fence}\n{reply}\n```"
    reply = f"{preamble}\n{reply}\n{epilogue}"
    if reasoning is not None:
        reply = f"<think>{reasoning}</think>\n{reply}"

    parsed = parse_reply(reply)

    if content.strip():
        assert isinstance(parsed, Proposal)
        assert parsed.content == content
    else:
        assert isinstance(parsed, Violation)
        assert "content" in parsed.reason


def test_reasoning_with_a_draft_object_is_skipped() -> None:
    reply = (
        '<think>Maybe {"evolve": false, "reason": "draft"}? No, this is worth keeping.</think>\n'
        + json.dumps(proposal_document("body"))
    )
    parsed = parse_reply(reply)
    assert isinstance(parsed, Proposal)
    assert parsed.content == "body"


def test_reasoning_cut_at_the_last_close_tag() -> None:
    reply = "<think>a</think> still thinking {} </think>" + json.dumps(proposal_document("x"))
    assert parse_reply(reply) == Proposal(
        name="fix-flaky-tests",
        description="Stabilise flaky async tests",
        when_to_use="When a test fails only sometimes",
        content="x",
        reason="Came up twice",
    )


def test_close_tag_without_open_tag_ends_reasoning() -> None:
    # DeepSeek-R1 style templates put <think> in the prompt, so only the close tag arrives.
    reply = 'I considered {"evolve": true}.</think>{"evolve": false, "reason": "routine"}'
    assert parse_reply(reply) == Decline("routine")


def test_close_tag_inside_content_is_not_a_reasoning_end() -> None:
    content = 'Models emit </think>{} then the answer; see also {"a": "</think>"}'
    reply = "<think>plan</think>" + json.dumps(proposal_document(content))
    parsed = parse_reply(reply)
    assert isinstance(parsed, Proposal)
    assert parsed.content == content


def test_unclosed_reasoning_yields_no_object() -> None:
    reply = '<think>I will answer {"evolve": false, "reason": "nothing"} once I am sure'
    assert extract_json_object(reply) is None
    violation = parse_reply(reply)
    assert isinstance(violation, Violation)
    assert "no complete JSON object" in violation.reason


def test_code_fences_and_braces_inside_content_survive() -> None:
    content = "Run:\n\n```python\nprint({'a': '}'})\n```\n\nThen ```` and `{`."
    reply = "Sure! Here it is:\n```json\n" + json.dumps(proposal_document(content)) + "\n```\n"
    parsed = parse_reply(reply)
    assert isinstance(parsed, Proposal)
    assert parsed.content == content


def test_first_complete_object_wins() -> None:
    reply = '{"evolve": false, "reason": "first"} {"evolve": false, "reason": "second"}'
    assert parse_reply(reply) == Decline("first")


def test_braces_in_prose_before_the_object_are_skipped() -> None:
    reply = 'Using {placeholder} and {"broken": } first. {"evolve": false, "reason": "ok"}'
    assert parse_reply(reply) == Decline("ok")


def test_name_description_and_when_to_use_are_trimmed_content_is_not() -> None:
    document = proposal_document("  indented body\n")
    document.update(name="  my-skill \n", description=" Does things ", whenToUse="\tsoon ")
    parsed = parse_reply(json.dumps(document))
    assert isinstance(parsed, Proposal)
    assert (parsed.name, parsed.description, parsed.when_to_use) == (
        "my-skill",
        "Does things",
        "soon",
    )
    assert parsed.content == "  indented body\n"


def test_extra_keys_are_ignored() -> None:
    document = proposal_document("body") | {"allowed-tools": "Bash(*)", "version": 9}
    parsed = parse_reply(json.dumps(document))
    assert isinstance(parsed, Proposal)
    assert not hasattr(parsed, "allowed-tools")
    assert set(vars(parsed)) == {
        "name", "description", "when_to_use", "content", "reason", "scope", "ends",
    }  # fmt: skip
    assert parsed.scope == "user"
    assert parsed.ends == ()


def test_ends_names_only_failures_the_window_showed() -> None:
    document = proposal_document("body") | {"ends": ["F2", "F1", "F2"]}
    parsed = parse_reply(json.dumps(document), failure_ids=["F1", "F2", "F3"])
    assert isinstance(parsed, Proposal) and parsed.ends == ("F2", "F1")
    unknown = parse_reply(json.dumps(document | {"ends": ["F9"]}), failure_ids=["F1"])
    assert isinstance(unknown, Violation)
    assert "F9" in unknown.reason and "it shows F1" in unknown.reason
    for wrong in ("F1", [1], [{"id": "F1"}]):
        refused = parse_reply(json.dumps(document | {"ends": wrong}), failure_ids=["F1"])
        assert isinstance(refused, Violation) and '"ends"' in refused.reason
    # A window without failures: an empty list is fine, a named one is not.
    assert isinstance(parse_reply(json.dumps(document | {"ends": []}), failure_ids=[]), Proposal)
    assert isinstance(parse_reply(json.dumps(document), failure_ids=[]), Violation)


def test_a_merge_reply_is_not_asked_for_ends() -> None:
    document = proposal_document("body") | {"ends": ["F7"]}
    parsed = parse_reply(json.dumps(document))
    assert isinstance(parsed, Proposal) and parsed.ends == ()


def test_scope_is_the_one_optional_key() -> None:
    project = parse_reply(json.dumps(proposal_document("body") | {"scope": "project"}))
    assert isinstance(project, Proposal) and project.scope == "project"
    wrong = parse_reply(json.dumps(proposal_document("body") | {"scope": "global"}))
    assert isinstance(wrong, Violation) and '"scope"' in wrong.reason


def test_raw_control_characters_inside_strings_are_read() -> None:
    # Local servers without a JSON mode often put a raw newline or tab inside a string.
    reply = (
        '{"evolve": true, "name": "fix-build", "description": "Fix the build.",'
        ' "whenToUse": "When it breaks.", "content": "1. Run make.\n\t2. Check.\n",'
        ' "reason": "Works."}'
    )
    assert "\n" in reply and "\\n" not in reply
    parsed = parse_reply(reply)
    assert isinstance(parsed, Proposal)
    assert parsed.content == "1. Run make.\n\t2. Check.\n"


def test_the_answer_is_the_object_that_carries_evolve() -> None:
    reply = 'Example: {"name": "a"} Answer: {"evolve": false, "reason": "nothing new"}'
    parsed = parse_reply(reply)
    assert isinstance(parsed, Decline) and parsed.reason == "nothing new"


def test_strict_mode_decline_with_empty_fields_is_a_decline() -> None:
    reply = {
        "evolve": False,
        "name": "",
        "description": "",
        "whenToUse": "",
        "content": "",
        "reason": "Only small talk",
    }
    assert parse_reply(json.dumps(reply)) == Decline("Only small talk")


@pytest.mark.parametrize(
    ("reply", "finish_reason", "refusal", "expected_fragment"),
    [
        (json.dumps(proposal_document("x")), "length", None, "finish_reason=length"),
        ("", None, None, "empty"),
        (None, None, None, "empty"),
        ("   \n", None, None, "empty"),
        ("", "stop", "I can't help with that.", "refused"),
        ("no json here", None, None, "no complete JSON object"),
        ('["evolve", true]', None, None, "no complete JSON object"),
        ('{"reason": "x"}', None, None, '"evolve"'),
        ('{"evolve": "true", "reason": "x"}', None, None, "boolean"),
        ('{"evolve": 1, "reason": "x"}', None, None, "boolean"),
        ('{"evolve": false}', None, None, '"reason"'),
        ('{"evolve": false, "reason": 3}', None, None, '"reason"'),
        ('{"evolve": true, "name": "a", "reason": "r"}', None, None, "description"),
    ],
)
def test_violations(
    reply: str | None, finish_reason: str | None, refusal: str | None, expected_fragment: str
) -> None:
    parsed = parse_reply(reply, finish_reason=finish_reason, refusal=refusal)
    assert isinstance(parsed, Violation)
    assert expected_fragment in parsed.reason
    assert parsed.raw == (reply or "")


def test_violation_names_every_missing_and_mistyped_key() -> None:
    reply = json.dumps({"evolve": True, "name": "a", "description": 5, "content": ["x"]})
    parsed = parse_reply(reply)
    assert isinstance(parsed, Violation)
    assert "missing keys: whenToUse, reason" in parsed.reason
    assert "must be JSON strings: description, content" in parsed.reason


def test_empty_required_proposal_fields_are_violations() -> None:
    document = proposal_document("   ") | {"name": " "}
    parsed = parse_reply(json.dumps(document))
    assert isinstance(parsed, Violation)
    assert "name, content" in parsed.reason


def test_raw_is_cut() -> None:
    reply = "x" * (RAW_REPLY_LIMIT * 3)
    parsed = parse_reply(reply)
    assert isinstance(parsed, Violation)
    assert parsed.raw == "x" * RAW_REPLY_LIMIT


def test_deeply_nested_garbage_does_not_raise() -> None:
    reply = '{"a":' * 100_000
    assert isinstance(parse_reply(reply), Violation)


def test_schema_is_strict_mode_compatible() -> None:
    assert PROPOSAL_SCHEMA["type"] == "object"
    assert "anyOf" not in PROPOSAL_SCHEMA
    assert PROPOSAL_SCHEMA["additionalProperties"] is False
    assert set(PROPOSAL_SCHEMA["required"]) == set(PROPOSAL_SCHEMA["properties"])
    assert set(PROPOSAL_SCHEMA["properties"]) == {
        "evolve",
        "name",
        "description",
        "whenToUse",
        "content",
        "reason",
        "ends",
    }
    assert PROPOSAL_SCHEMA["properties"]["evolve"]["type"] == "boolean"
    assert PROPOSAL_SCHEMA["properties"]["ends"]["items"] == {"type": "string"}
    json.dumps(PROPOSAL_SCHEMA)


def test_repair_message_restates_contract_and_problem() -> None:
    violation = Violation('"evolve" must be a JSON boolean, got str', raw='{"evolve": "yes"}')
    message = repair_message(violation)
    assert violation.reason in message
    assert CONTRACT_TEXT in message
    assert '{"evolve": false, "reason": "..."}' in message
    assert '"whenToUse"' in message
