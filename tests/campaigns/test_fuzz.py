"""Fuzz campaign: hypothesis over every parser that reads text someone else wrote.

- the reply contract (`parse_reply`, `extract_json_object`): never raises, and a valid proposal
  survives reasoning blocks, fences, prose and decoys byte for byte;
- the skill-file format: `parse_skill(render_skill(doc))` gives the same skill in every dialect,
  never with a key skilld must not write, and rendering is a fixed point;
- every transcript normaliser (jsonl, claude-code, codex, dsh plain and zstd, hermes rows):
  arbitrary JSON-ish lines and raw bytes are read over two incremental scans of a real file,
  nothing raises, cursors survive JSON, and every malformed line is counted exactly once;
- the config loader: `build_config` over arbitrary tables and environments, and `load_config`
  over arbitrary files, raise nothing but `ConfigError`.

Normal size runs 200 examples per property (100 per transcript kind); `--full` runs 10,000 per
property and per transcript kind.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sqlite3
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from skilld.config import SECTIONS, Config, ConfigError, build_config, load_config
from skilld.config import section_keys as keys_of
from skilld.evolve.contract import Decline, Proposal, Violation, extract_json_object, parse_reply
from skilld.skills.document import (
    AGENTSKILLS_WHEN_MARKER,
    FORMS,
    InvalidSkill,
    SkillDoc,
    fold_description,
    neutralise_shell_injection,
    parse_skill,
    render_skill,
    validate_skill,
)
from skilld.skills.invisible import make_visible
from skilld.skills.names import CLAUDE_RESERVED_WORDS, NAME_PATTERN
from skilld.transcripts.claude_code import ClaudeCodeSource
from skilld.transcripts.codex import CodexSource
from skilld.transcripts.dsh import DshSource
from skilld.transcripts.dsh.digest import NOISE_EVENT_TYPES
from skilld.transcripts.hermes import HermesSource
from skilld.transcripts.jsonl import JsonlSource
from skilld.transcripts.model import ScanResult, Source
from tests.campaigns.harness import Tally

NORMAL_EXAMPLES = 200
#: Per transcript kind: six kinds share the normal run's time budget.
NORMAL_TRANSCRIPT_EXAMPLES = 100
FULL_EXAMPLES = 10_000
ROLES = ("user", "assistant", "tool", "system")
#: Deep enough to exhaust the interpreter's recursion limit in any recursive decoder.
DEEP = 5000
#: Old enough that DSH releases a held open turn (it waits 600 s for `turn/end`).
LONG_AGO = time.time() - 3600


def fuzz(
    test: Callable[..., None],
    strategies: dict[str, st.SearchStrategy[Any]],
    examples: int,
    tally: Tally,
) -> None:
    """Run `test` under hypothesis with the campaign's settings, counted in `tally`; its
    (shrunk) failure is held there until the campaign has printed its figures."""
    try:
        settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(given(**strategies)(tally.count(test)))()
    except Exception as error:  # raised by the test once its figures are printed
        tally.hold(error)


def example_count(full_size: bool) -> int:
    return FULL_EXAMPLES if full_size else NORMAL_EXAMPLES


# ------------------------------------------------------------------------------------------
# Shared strategies

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=10,
)


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


# ------------------------------------------------------------------------------------------
# 1. The reply contract

CONTRACT_FRAGMENTS = st.sampled_from(
    [
        "{",
        "}",
        '"',
        "\\",
        ":",
        ",",
        "<think>",
        "</think>",
        "```",
        "```json\n",
        '{"evolve": true',
        '{"evolve": false, "reason": "no"}',
        '"name": "x"',
        '"content": "```bash\\nmake\\n```"',
        "null",
        "[",
        "]",
        "\n",
        deep_list(50),
    ]
)
contract_texts = (
    st.text()
    | st.lists(CONTRACT_FRAGMENTS | st.text(max_size=8), max_size=30).map("".join)
    | st.builds(json.dumps, json_values)
    | st.dictionaries(
        st.sampled_from(["evolve", "name", "description", "whenToUse", "content", "reason"])
        | st.text(max_size=6),
        json_values,
        max_size=7,
    ).map(json.dumps)
)


def test_contract_parser_never_raises(full_size: bool, campaign_figures: Any) -> None:
    outcomes: Counter[str] = Counter()
    tally = Tally()

    @example(text="{" * DEEP, finish_reason=None, refusal=None)
    @example(text='{"a": ' + deep_list(DEEP) + "}", finish_reason=None, refusal=None)
    @example(text="</think>" * 50 + '{"evolve": 1}', finish_reason="stop", refusal=None)
    def check(text: str, finish_reason: str | None, refusal: str | None) -> None:
        found = extract_json_object(text)
        assert found is None or isinstance(found, dict)
        parsed = parse_reply(text, finish_reason=finish_reason, refusal=refusal)
        assert isinstance(parsed, Proposal | Decline | Violation)
        if isinstance(parsed, Violation):
            assert parsed.raw == text[:2000]
        outcomes[type(parsed).__name__] += 1

    fuzz(
        check,
        {
            "text": contract_texts,
            "finish_reason": st.none() | st.sampled_from(["stop", "length", "tool_calls"]),
            "refusal": st.none() | st.just("") | st.text(max_size=20),
        },
        example_count(full_size),
        tally,
    )

    proposals = 0

    def survives(
        fields: dict[str, str],
        think: str,
        decoy: bool,
        fence: bool,
        prose: str,
        ascii_only: bool,
    ) -> None:
        nonlocal proposals
        payload = {"evolve": True, **fields}
        reply = json.dumps(payload, ensure_ascii=ascii_only)
        if fence:
            reply = f"```json\n{reply}\n```"
        reasoning = think + (' {"evolve": false, "reason": "a draft"}' if decoy else "")
        reply = f"<think>{reasoning}</think>{prose}{reply}{prose}"
        parsed = parse_reply(reply, finish_reason="stop")
        assert isinstance(parsed, Proposal), parsed
        assert parsed.content == fields["content"]
        assert parsed.name == fields["name"].strip()
        assert parsed.description == fields["description"].strip()
        assert parsed.when_to_use == fields["whenToUse"].strip()
        proposals += 1

    # Markers, fences and braces inside the values are part of the values.
    tricky = st.text(
        alphabet=st.sampled_from(list('ab{}[]"\\`\n<>/ ')) | st.characters(), max_size=60
    ) | st.sampled_from(["</think>", "<think>", "```", "{}", '{"evolve": false}'])
    non_blank = tricky.filter(lambda value: value.strip() != "")
    fuzz(
        survives,
        {
            "fields": st.fixed_dictionaries(
                {
                    "name": non_blank,
                    "description": non_blank,
                    "whenToUse": tricky,
                    "content": non_blank,
                    "reason": tricky,
                }
            ),
            "think": st.text(alphabet=st.characters(blacklist_characters="<{"), max_size=40),
            "decoy": st.booleans(),
            "fence": st.booleans(),
            "prose": st.text(alphabet=st.characters(blacklist_characters="<{"), max_size=20),
            "ascii_only": st.booleans(),
        },
        example_count(full_size),
        tally,
    )
    campaign_figures(
        "fuzz contract",
        examples=sum(outcomes.values()),
        violations=outcomes["Violation"],
        declines=outcomes["Decline"],
        proposals=outcomes["Proposal"],
        round_trips=proposals,
        checked=tally.checked,
        failed=tally.failed,
    )
    tally.raise_held()


# ------------------------------------------------------------------------------------------
# 2. The skill-file format

names = st.from_regex(NAME_PATTERN, fullmatch=True).filter(lambda name: len(name) <= 64)
field_text = st.lists(
    st.characters(blacklist_categories=("Cs", "Cc"))
    | st.sampled_from(["\n", "\t", " ", ":", "#", "'", '"', "-", "!`", "```!", "~~~!", "\ufeff"]),
    min_size=1,
    max_size=40,
).map("".join) | st.sampled_from(
    ["yes", "null", "~", "1.5", "0x1f", "---", "- a", "[x]", "{a: b}", "&a", "*a"]
)
metadata_maps = st.dictionaries(
    field_text.filter(lambda key: key.strip() != ""),
    field_text | st.just(""),
    max_size=4,
)


def expected_body(body: str) -> str:
    body = neutralise_shell_injection(make_visible(body))
    return body.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n") + "\n"


def expected_fields(description: str, when_to_use: str, dialect: str) -> tuple[str, str | None]:
    """Description and when-to-use as read back: triggers broken, then the agentskills fold
    normalised (its own tests are in test_document.py), the hermes when-to-use on one line."""
    neutral = neutralise_shell_injection
    description, when = neutral(description), (neutral(when_to_use) or None)
    if dialect == "agentskills":
        folded = fold_description(description, when)
        before, marker, after = folded.partition(AGENTSKILLS_WHEN_MARKER)
        description, when = (before, after) if marker and after else (folded, None)
    if dialect == "hermes" and when is not None:
        when = " ".join(when.split()) or None
    return description, when


def test_frontmatter_round_trip(full_size: bool, campaign_figures: Any) -> None:
    counts: Counter[str] = Counter()
    tally = Tally()

    @example(  # found by this campaign: the trigger broken after the fold changed its case
        name="a",
        description="yes",
        when_to_use="A!`0",
        body="0",
        metadata={},
        disable=False,
        dialect="agentskills",
    )
    @example(
        name="a",
        description="Deploy: the 'app' # now",
        when_to_use="",
        body="---\nname: evil\n---\n!`rm -rf ~`\n```!\nid\n```\r\n",
        metadata={"model": "x", "allowed-tools": "Bash"},
        disable=False,
        dialect="claude",
    )
    def round_trip(
        name: str,
        description: str,
        when_to_use: str,
        body: str,
        metadata: dict[str, str],
        disable: bool,
        dialect: str,
    ) -> None:
        if dialect == "claude" and any(word in name for word in CLAUDE_RESERVED_WORDS):
            name = "skill"
        doc = SkillDoc(
            name=name,
            description=description,
            when_to_use=when_to_use or None,
            body=body,
            metadata=metadata,
            disable_model_invocation=disable and dialect not in ("agentskills", "hermes"),
        )
        try:
            validate_skill(doc, dialect)
        except InvalidSkill:
            counts["refused"] += 1
            return
        text = render_skill(doc, dialect)
        parsed = parse_skill(text, dialect=dialect)
        counts["extra_keys"] += len(parsed.extra)
        assert dict(parsed.extra) == {}, parsed.extra
        assert parsed.name == name
        assert parsed.body == expected_body(body)
        assert parsed.disable_model_invocation == doc.disable_model_invocation

        def neutralise(text: str) -> str:
            return neutralise_shell_injection(make_visible(text))

        assert dict(parsed.metadata) == {
            neutralise(key): neutralise(value) for key, value in metadata.items()
        }
        assert (parsed.description, parsed.when_to_use) == expected_fields(
            description, when_to_use, dialect
        )
        assert "!`" not in text and "```!" not in text and "~~~!" not in text
        assert render_skill(parsed, dialect) == text
        counts["round_trips"] += 1

    fuzz(
        round_trip,
        {
            "name": names,
            "description": field_text,
            "when_to_use": st.just("") | field_text,
            "body": st.text(min_size=1).filter(lambda body: body.strip() != "")
            | st.sampled_from(["```!\nls\n```", "~~~!\nls\n~~~", "!`id`", "---\n---", "\r\n\r\nx"]),
            "metadata": metadata_maps,
            "disable": st.booleans(),
            "dialect": st.sampled_from(FORMS),
        },
        example_count(full_size),
        tally,
    )
    campaign_figures(
        "fuzz frontmatter",
        examples=tally.checked,
        round_trips=counts["round_trips"],
        refused_by_validation=counts["refused"],
        extra_keys_written=counts["extra_keys"],
        failed=tally.failed,
    )
    tally.raise_held()
    assert counts["round_trips"] > counts["refused"] / 4, counts


# ------------------------------------------------------------------------------------------
# 3. Transcript normalisers


def as_line(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value.replace(b"\n", b" ")
    if isinstance(value, str):
        return value.replace("\n", " ").encode("utf-8", "surrogatepass")
    return json.dumps(value, allow_nan=True).encode()


# Any JSON value where a format expects a string: a list as a `type` or an `id` must not crash.
text_blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "input_text", "output_text", "image", "thinking"])},
    optional={"text": json_values},
)
contents = json_values | st.lists(text_blocks | json_values, max_size=4)
openai_calls = st.lists(
    st.fixed_dictionaries(
        {"id": json_values, "type": st.just("function")},
        optional={
            "function": st.fixed_dictionaries(
                {
                    "name": json_values,
                    "arguments": json_values | st.builds(json.dumps, json_values),
                }
            )
            | json_values
        },
    ),
    max_size=3,
)
jsonl_records = st.fixed_dictionaries(
    {"role": st.sampled_from(ROLES) | json_values},
    optional={
        "content": contents,
        "tool_calls": openai_calls | json_values,
        "tool_call_id": json_values,
        "name": json_values,
        "timestamp": json_values,
    },
)
claude_blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "server_tool_use", "tool_result", "thinking"])},
    optional={
        "text": json_values,
        "id": json_values,
        "name": json_values,
        "input": json_values,
        "tool_use_id": json_values,
        "content": contents,
        "is_error": json_values,
    },
)
claude_records = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "assistant", "attachment", "summary", "progress"])},
    optional={
        "message": st.fixed_dictionaries(
            {},
            optional={
                "id": json_values,
                "role": json_values,
                "model": st.just("<synthetic>") | json_values,
                "content": json_values | st.lists(claude_blocks | json_values, max_size=4),
            },
        )
        | json_values,
        "attachment": st.fixed_dictionaries(
            {"type": st.just("invoked_skills") | json_values},
            optional={
                "skills": st.lists(st.fixed_dictionaries({"name": json_values}) | json_values)
            },
        )
        | json_values,
        "isSidechain": json_values,
        "isMeta": json_values,
        "isApiErrorMessage": json_values,
        "timestamp": json_values,
    },
)
codex_items = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "message",
                "reasoning",
                "function_call",
                "custom_tool_call",
                "local_shell_call",
                "web_search_call",
                "function_call_output",
                "custom_tool_call_output",
            ]
        )
        | json_values
    },
    optional={
        "role": st.sampled_from(["user", "assistant", "developer"]) | json_values,
        "content": contents,
        "name": json_values,
        "arguments": json_values | st.builds(json.dumps, json_values),
        "input": json_values,
        "call_id": json_values,
        "id": json_values,
        "action": json_values,
        "output": json_values | st.builds(json.dumps, json_values),
    },
)
codex_records = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["response_item", "session_meta", "event_msg"]) | json_values,
            "payload": codex_items | json_values,
        },
        optional={"timestamp": json_values},
    ),
    codex_items,
)
dsh_event_types = st.sampled_from(
    [
        "user/message",
        "assistant/message",
        "tool/call",
        "tool/result",
        "turn/start",
        "turn/end",
        *sorted(NOISE_EVENT_TYPES),
    ]
)
dsh_blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool-call", "tool-result", "reasoning", "image", "file"])},
    optional={
        "text": json_values,
        "id": json_values,
        "name": json_values,
        "arguments": json_values | st.builds(json.dumps, json_values),
        "toolCallId": json_values,
        "content": contents | json_values,
        "isError": json_values,
    },
)
dsh_data = st.fixed_dictionaries(
    {},
    optional={
        "message": st.fixed_dictionaries(
            {}, optional={"content": st.lists(dsh_blocks | json_values, max_size=4) | json_values}
        )
        | json_values,
        "content": contents,
        "source": st.fixed_dictionaries({"kind": st.sampled_from(["user", "goal", "plugin"])})
        | json_values,
        "name": json_values,
        "callId": json_values,
        "arguments": json_values | st.builds(json.dumps, json_values),
        "reason": json_values,
    },
)
dsh_records = st.fixed_dictionaries(
    {"type": dsh_event_types | json_values},
    optional={
        "seq": st.integers(min_value=-5, max_value=10_000) | json_values,
        "time": json_values,
        "data": dsh_data | json_values,
        "surfaceOp": st.just("append") | json_values,
    },
)


def lines_of(records: st.SearchStrategy[Any]) -> st.SearchStrategy[list[bytes]]:
    """Batches of lines: shaped records, any JSON, raw bytes, text, blanks, deep nesting."""
    line = st.one_of(
        records.map(as_line),
        records.map(as_line),
        json_values.map(as_line),
        st.binary(max_size=60).map(as_line),
        st.text(max_size=40).map(as_line),
        st.sampled_from([b"", b"   ", b"\r", b"\xff\xfe", b"{", b"[]", b"null"]),
        st.integers(min_value=1500, max_value=20_000).map(lambda d: deep_list(d).encode()),
        records.map(
            lambda r: b'{"deep": ' + deep_list(DEEP).encode() + b', "r": ' + as_line(r) + b"}"
        ),
    )
    return st.lists(line, max_size=8)


def line_malformed(line: bytes) -> bool:
    """A line a jsonl-family source must skip and count: not blank and not a JSON object."""
    text = line.decode("utf-8", "replace").strip()
    if not text:
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return True
    return not isinstance(value, dict)


def dsh_line_malformed(line: bytes) -> bool:
    """A DSH event line the source must count: not JSON, or an event without type or seq."""
    if not line.strip():
        return False
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return True
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        return True
    if record["type"] in NOISE_EVENT_TYPES:
        return False
    seq = record.get("seq")
    return isinstance(seq, bool) or not isinstance(seq, int)


def check_scan(result: ScanResult) -> int:
    """Invariants of every scan; returns how many lines it reported skipped (as the supervisor
    adds them up: the skips outside any session plus each session read's)."""
    for read in result.reads:
        assert json.loads(json.dumps(read.cursor)) == read.cursor or _has_nan(read.cursor)
        for message in read.messages:
            assert message.role in ROLES
            assert isinstance(message.text, str)
            for call in message.tool_calls:
                assert isinstance(call.name, str) and isinstance(call.arguments, str)
        assert all(isinstance(signal.name, str) for signal in read.signals)
        assert read.cwd is None or isinstance(read.cwd, str)
    return result.skipped_lines + sum(read.skipped_lines for read in result.reads)


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, dict):
        return any(_has_nan(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_nan(item) for item in value)
    return False


def two_scans(source: Source, grow: Callable[[], None]) -> int:
    """Scan, grow the file, scan again from the stored (JSON round-tripped) cursors."""
    first = source.scan({})
    skipped = check_scan(first)
    cursors = {read.session: json.loads(json.dumps(read.cursor)) for read in first.reads}
    grow()
    second = source.scan(cursors)
    return skipped + check_scan(second)


def append_lines(path: Path, lines: list[bytes]) -> None:
    with path.open("ab") as handle:
        handle.write(b"".join(line + b"\n" for line in lines))
    os.utime(path, (LONG_AGO, LONG_AGO))


LINE_SOURCES: dict[str, tuple[type[Any], st.SearchStrategy[Any], str]] = {
    "jsonl": (JsonlSource, jsonl_records, "session.jsonl"),
    "claude-code": (
        ClaudeCodeSource,
        claude_records,
        "-home-dev-proj/" + str(uuid.UUID(int=1)) + ".jsonl",
    ),
    "codex": (
        CodexSource,
        codex_records,
        f"2026/01/02/rollout-2026-01-02T00-00-00-{uuid.UUID(int=2)}.jsonl",
    ),
}


def fuzz_line_source(kind: str, examples: int, tmp_path: Path, tally: Tally) -> Counter[str]:
    source_class, records, relative = LINE_SOURCES[kind]
    counts: Counter[str] = Counter()

    def check(first: list[bytes], second: list[bytes], partial: bytes) -> None:
        with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
            root = Path(folder)
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            append_lines(path, first)
            with path.open("ab") as handle:
                handle.write(partial)  # a line still being written when the first scan runs

            skipped = two_scans(source_class(root), lambda: append_lines(path, second))
            complete = path.read_bytes().split(b"\n")[:-1]
            expected = sum(line_malformed(line) for line in complete)
            assert skipped == expected, (skipped, expected)
            counts["lines"] += len(complete)
            counts["skipped"] += skipped
            counts["examples"] += 1

    fuzz(
        check,
        {
            "first": lines_of(records),
            "second": lines_of(records),
            "partial": st.just(b"") | st.binary(max_size=20).map(as_line),
        },
        examples,
        tally,
    )
    return counts


def dsh_frame(lines: list[bytes]) -> bytes:
    payload = b"".join(line + b"\n" for line in lines)
    return zstandard.ZstdCompressor(write_checksum=True).compress(payload)


def fuzz_dsh(examples: int, tmp_path: Path, tally: Tally, *, compressed: bool) -> Counter[str]:
    counts: Counter[str] = Counter()
    header = {"type": "session", "version": 0, "id": "fuzzed", "createdAt": 0}

    def check(first: list[bytes], second: list[bytes], header_line: bytes | None) -> None:
        with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
            root = Path(folder)
            directory = root / "--home-dev-proj--" / "fuzzed"
            directory.mkdir(parents=True)
            path = directory / ("session.jsonl.zstd" if compressed else "session.jsonl")
            head = header_line if header_line is not None else as_line(header)

            def write(lines: list[bytes]) -> None:
                with path.open("ab") as handle:
                    if compressed:
                        handle.write(dsh_frame(lines) if lines else b"")
                    else:
                        handle.write(b"".join(line + b"\n" for line in lines))
                os.utime(path, (LONG_AGO, LONG_AGO))

            write([head])
            write(first)
            source = DshSource(root)
            skipped = two_scans(source, lambda: write(second))
            header_is_valid = header_line is None
            if header_is_valid:
                expected = sum(dsh_line_malformed(line) for line in [*first, *second])
                assert skipped == expected, (skipped, expected)
            else:
                # Not a session header: each scan reports the file, and never raises.
                assert skipped <= 2
            counts["lines"] += len(first) + len(second)
            counts["skipped"] += skipped
            counts["examples"] += 1

    fuzz(
        check,
        {
            "first": lines_of(dsh_records),
            "second": lines_of(dsh_records),
            "header_line": st.none()
            | st.none()
            | st.none()
            | json_values.map(as_line)
            | st.just(deep_list(DEEP).encode()),
        },
        examples,
        tally,
    )
    return counts


HERMES_SCHEMA = """
CREATE TABLE sessions (id, parent_session_id, model_config, started_at);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id, role, content, tool_call_id, tool_calls,
    tool_name, timestamp, display_kind
);
"""
sqlite_values = (
    st.none()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.binary(max_size=30)
    | st.builds(json.dumps, json_values)
)
hermes_rows = st.fixed_dictionaries(
    {
        "session_id": st.sampled_from(["a", "b"]) | sqlite_values,
        "role": st.sampled_from(ROLES) | sqlite_values,
        "content": sqlite_values | st.builds(json.dumps, st.lists(text_blocks)),
        "tool_call_id": sqlite_values,
        "tool_calls": st.builds(json.dumps, openai_calls) | sqlite_values,
        "tool_name": sqlite_values,
        "timestamp": st.floats(min_value=0, max_value=4e9) | sqlite_values,
        "display_kind": st.just("hidden") | sqlite_values,
    }
)


def fuzz_hermes(examples: int, tmp_path: Path, tally: Tally) -> Counter[str]:
    counts: Counter[str] = Counter()

    def insert(connection: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            columns = ", ".join(row)
            marks = ", ".join("?" * len(row))
            connection.execute(
                f"INSERT INTO messages ({columns}) VALUES ({marks})", list(row.values())
            )

    def check(
        sessions: list[tuple[Any, Any, Any]],
        first: list[dict[str, Any]],
        second: list[dict[str, Any]],
    ) -> None:
        with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
            path = Path(folder) / "state.db"
            connection = sqlite3.connect(path, isolation_level=None)
            try:
                connection.execute("PRAGMA synchronous = OFF")  # a scratch file: no fsyncs
                connection.executescript(HERMES_SCHEMA)
                connection.executemany(
                    "INSERT INTO sessions VALUES (?, ?, ?, 0)", [tuple(s) for s in sessions]
                )
                insert(connection, first)
                source = HermesSource(path, include_subagents=True)
                two_scans(source, lambda: insert(connection, second))
            finally:
                connection.close()
            counts["rows"] += len(first) + len(second)
            counts["examples"] += 1

    fuzz(
        check,
        {
            "sessions": st.lists(
                st.tuples(
                    st.sampled_from(["a", "b", "c"]) | sqlite_values,
                    st.none() | st.sampled_from(["a", "b"]) | sqlite_values,
                    st.just('{"_delegate_from": "a"}') | sqlite_values,
                ),
                max_size=3,
            ),
            "first": st.lists(hermes_rows, max_size=8),
            "second": st.lists(hermes_rows, max_size=8),
        },
        examples,
        tally,
    )
    return counts


TRANSCRIPT_KINDS = (*LINE_SOURCES, "dsh-plain", "dsh-zstd", "hermes")


@pytest.mark.parametrize("kind", TRANSCRIPT_KINDS)
def test_transcript_normalisers_never_raise_and_count(
    kind: str, full_size: bool, campaign_figures: Any, tmp_path: Path
) -> None:
    """One test a kind, so that the suite's workers share them."""
    examples = FULL_EXAMPLES if full_size else NORMAL_TRANSCRIPT_EXAMPLES
    tally = Tally()
    if kind == "hermes":
        counts = fuzz_hermes(examples, tmp_path, tally)
        figure = f"{counts['examples']}ex/{counts['rows']}rows"
    else:
        counts = (
            fuzz_line_source(kind, examples, tmp_path, tally)
            if kind in LINE_SOURCES
            else fuzz_dsh(examples, tmp_path, tally, compressed=kind == "dsh-zstd")
        )
        figure = f"{counts['examples']}ex/{counts['lines']}lines/{counts['skipped']}skipped"
    campaign_figures(
        f"fuzz transcripts {kind}", examples=figure, checked=tally.checked, failed=tally.failed
    )
    tally.raise_held()


# The same normalisers, systematically: every field of a realistic session (the fixtures the
# source tests use) replaced by values of every other JSON type, one field at a time.

#: Unhashable values are the ones a membership test trips over.
NORMAL_REPLACEMENTS: tuple[Any, ...] = ([["x"]], {"a": {"b": 1}})
FULL_REPLACEMENTS: tuple[Any, ...] = (
    *NORMAL_REPLACEMENTS,
    [],
    {},
    0,
    -1,
    10**30,
    1.5,
    True,
    None,
    "",
    "x",
)


def json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += json_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += json_paths(item, (*prefix, index))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    value = copy.deepcopy(value)
    node = value
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return value


def realistic_sessions(
    scratch: Path,
) -> dict[str, tuple[list[Any], Callable[[Path, list[Any]], Source]]]:
    """Per source kind: a realistic session's records, and how to write them into a fresh
    root and build the source over it."""
    from tests.test_dsh import DshSession
    from tests.test_sources import CHAT, CLAUDE_SESSION, CODEX_FIRST, CODEX_ID, CODEX_SECOND

    def lines(path: Path, records: list[Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
        path.write_text(text, encoding="utf-8")
        os.utime(path, (LONG_AGO, LONG_AGO))

    def jsonl(root: Path, records: list[Any]) -> Source:
        lines(root / "s.jsonl", records)
        return JsonlSource(root)

    def claude(root: Path, records: list[Any]) -> Source:
        lines(root / "-home-dev-proj" / "s.jsonl", records)
        return ClaudeCodeSource(root)

    def codex(root: Path, records: list[Any]) -> Source:
        lines(root / f"rollout-2025-10-29T00-59-38-{CODEX_ID}.jsonl", records)
        return CodexSource(root)

    builder = DshSession(scratch, "typed", compressed=False)
    events = [
        builder.turn_start(),
        builder.user("question"),
        builder.assistant("thinking aloud", calls=(("c1", "skill", '{"name": "deploy"}'),)),
        builder.tool_call("c1", "skill", '{"name": "deploy"}'),
        builder.tool_result("c1", "result", error=True),
        builder.assistant("answer"),
        builder.user("a goal", kind="goal"),
        builder.turn_end(),
    ]

    def dsh(root: Path, records: list[Any]) -> Source:
        lines(root / "--home-dev-proj--" / "typed" / "session.jsonl", [builder.header, *records])
        return DshSource(root)

    return {
        "jsonl": (CHAT, jsonl),
        "claude-code": (CLAUDE_SESSION, claude),
        "codex": ([*CODEX_FIRST, *CODEX_SECOND], codex),
        "dsh": (events, dsh),
    }


def test_every_field_may_hold_any_json_type(
    full_size: bool, campaign_figures: Any, tmp_path: Path
) -> None:
    replacements = FULL_REPLACEMENTS if full_size else NORMAL_REPLACEMENTS
    scans: Counter[str] = Counter()
    tally = Tally()

    def scan(build: Callable[[Path, list[Any]], Source], records: list[Any]) -> None:
        with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
            check_scan(build(Path(folder), records).scan({}))

    for kind, (records, build) in realistic_sessions(tmp_path / "scratch").items():
        for index, record in enumerate(records):
            if isinstance(record, str):
                continue  # a line that is already garbage
            for path in json_paths(record):
                for new in replacements:
                    mutated = [*records[:index], replaced(record, path, new), *records[index + 1 :]]
                    tally.run(scan, build, mutated)
                    scans[kind] += 1
    campaign_figures(
        "fuzz field types",
        replacements=len(replacements),
        **{kind.replace("-", "_"): count for kind, count in scans.items()},
        checked=tally.checked,
        failed=tally.failed,
    )
    tally.raise_held()


# ------------------------------------------------------------------------------------------
# 4. The config loader

section_keys = {name: sorted(keys_of(cls)) for name, cls in SECTIONS.items()}
config_values: st.SearchStrategy[Any] = (
    json_scalars
    | st.lists(json_scalars, max_size=3)
    | st.sampled_from(
        [
            "auto",
            "review",
            "dsh",
            "claude",
            "flat",
            "24h",
            "none",
            "all",
            "~",
            "~nobody\x00x",
            "$HOME/x",
        ]
    )
    | st.text(alphabet=st.sampled_from(list("~/$\x00.a{}")), max_size=12)
    | st.just([[[]]])
    | json_values
)


@st.composite
def config_tables(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from([*SECTIONS, "sources", "bogus"]), max_size=4)):
        if section == "sources":
            raw["sources"] = draw(
                st.lists(
                    st.dictionaries(
                        st.sampled_from(["kind", "path", "glob", "include_subagents", "x"]),
                        st.sampled_from(["jsonl", "dsh", "hermes", "codex"]) | config_values,
                        max_size=4,
                    )
                    | config_values,
                    max_size=3,
                )
                | config_values
            )
            continue
        keys = section_keys.get(section, ["x"])
        raw[section] = draw(
            st.dictionaries(st.sampled_from([*keys, "unknown"]), config_values, max_size=5)
            | config_values
        )
    return raw


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    environ: dict[str, str] = {}
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        section = draw(st.sampled_from([*SECTIONS, "nosuch"]))
        key = draw(st.sampled_from([*section_keys.get(section, ["x"]), "bogus"]))
        value = draw(
            st.text(max_size=12)
            | st.sampled_from(["1", "0", "yes", "nan", "inf", "-1", "1e400", "~\x00", os.pathsep])
        )
        environ[f"SKILLD_{section.upper()}_{key.upper()}"] = value
    return environ


toml_fragments = st.sampled_from(
    [
        "[skills]\n",
        "[state]\n",
        "[[sources]]\n",
        "[evolve]\n",
        'dir = "~\\u0000"\n',
        'kind = "jsonl"\n',
        "max_managed = 5\n",
        "interval_seconds = nan\n",
        "a = " + deep_list(DEEP) + "\n",
        "x = {" * 50 + "}" * 50 + "\n",
        '"\n',
        "= =\n",
        "\xff",
    ]
)


def test_config_loader_raises_only_config_error(
    full_size: bool, campaign_figures: Any, tmp_path: Path
) -> None:
    outcomes: Counter[str] = Counter()
    tally = Tally()

    @example(raw={"skills": {"dir": "~a\x00b"}}, environ={})
    @example(raw={"skills": {"extra_dirs": ["~\x00"]}}, environ={})
    @example(raw={}, environ={"SKILLD_STATE_DIR": "~\x00"})
    def build(raw: dict[str, Any], environ: dict[str, str]) -> None:
        try:
            config = build_config(raw, environ=environ)
        except ConfigError:
            outcomes["ConfigError"] += 1
            return
        assert isinstance(config, Config)
        outcomes["Config"] += 1

    fuzz(
        build, {"raw": config_tables(), "environ": environments()}, example_count(full_size), tally
    )

    files = 0

    @example(data=b"a = " + deep_list(DEEP).encode())
    @example(data=b'[skills]\ndir = "~x\\u0000"\n')
    def load(data: bytes) -> None:
        nonlocal files
        with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
            path = Path(folder) / "config.toml"
            path.write_bytes(data)
            try:
                load_config(path, environ={})
            except ConfigError:
                outcomes["file ConfigError"] += 1
        files += 1

    fuzz(
        load,
        {
            "data": st.lists(toml_fragments | st.text(max_size=10), max_size=8).map(
                lambda parts: "".join(parts).encode("utf-8", "surrogatepass")
            )
            | st.binary(max_size=80)
        },
        example_count(full_size),
        tally,
    )
    campaign_figures(
        "fuzz config",
        tables=outcomes["Config"] + outcomes["ConfigError"],
        accepted=outcomes["Config"],
        config_errors=outcomes["ConfigError"],
        files=files,
        file_config_errors=outcomes["file ConfigError"],
        checked=tally.checked,
        failed=tally.failed,
    )
    tally.raise_held()
