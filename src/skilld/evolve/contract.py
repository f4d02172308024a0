"""The strict JSON contract between skilld and the reflecting model.

The model answers with exactly one of

    {"evolve": true, "name": "...", "description": "...", "whenToUse": "...",
     "content": "...", "reason": "..."}
    {"evolve": false, "reason": "..."}

and, where the configuration lets the model choose (`evolve.scope = "auto"`), an optional
`"scope": "project"` (or `"user"`, the default) in an evolve reply; an evolve reply may also
name the failures of the window the skill is meant to end, `"ends": ["F2", ...]` (the ids of
the window's `[failure F<n>]` lines; DESIGN.md §13, "What a skill targets"). This module owns that
shape: the JSON schema sent to servers that support structured output,
the extraction of the object from a free-form reply, and the shape check. Name rules and length
limits belong to ``skills.document.validate_skill``; nothing here touches files or the network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

RAW_REPLY_LIMIT: Final = 2000

_THINK_OPEN: Final = "<think>"
_THINK_CLOSE: Final = "</think>"
# strict=False: a raw newline or tab inside a string is common from local servers without a
# JSON mode, and is what the model meant; refusing it would cost a repair call and the window.
_DECODER: Final = json.JSONDecoder(strict=False)
# Where an object can begin: a brace followed by a key or by the closing brace. Trying the
# decoder only there keeps prose like "{placeholder}" or "{{{{" from costing a failed decode,
# and every failed decode costs time proportional to its offset (the error computes a line).
_OBJECT_START: Final = re.compile(r'\{\s*["}]')

_PROPOSAL_KEYS: Final = ("name", "description", "whenToUse", "content", "reason")
SCOPES: Final = ("user", "project")
#: The id of a window's failure line, as the window shows it: `F1`, `F2`, ...
FAILURE_ID: Final = re.compile(r"F[1-9][0-9]{0,3}")

CONTRACT_TEXT: Final = (
    "Reply with exactly one JSON object and nothing else, in one of these two shapes:\n"
    '{"evolve": true, "name": "...", "description": "...", "whenToUse": "...", '
    '"content": "...", "reason": "...", "ends": []}\n'
    '{"evolve": false, "reason": "..."}\n'
    '"evolve" is a JSON boolean (true or false, not a string). When it is true, every other key '
    "but ends is a JSON string: name is the skill's short kebab-case name, description says in "
    "one line what the skill does, whenToUse says when an agent should load it, content is the "
    "full Markdown body of the skill, and reason says why this is worth keeping. When it is false, "
    "reason says why nothing reusable emerged. ends lists the ids of the window's [failure F<n>] "
    "lines the skill is meant to end (an empty array when none)."
)

# OpenAI strict mode rejects a root-level anyOf and requires every property to be listed in
# "required", so both shapes share one object: a decline fills the proposal fields with "".
PROPOSAL_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "evolve": {
            "type": "boolean",
            "description": "true to create or update a skill, false when nothing reusable emerged",
        },
        "name": {
            "type": "string",
            "description": "kebab-case skill name; empty string when evolve is false",
        },
        "description": {
            "type": "string",
            "description": "one-line summary of the skill; empty string when evolve is false",
        },
        "whenToUse": {
            "type": "string",
            "description": "when an agent should load the skill; empty string when evolve is false",
        },
        "content": {
            "type": "string",
            "description": "full Markdown body of the skill; empty string when evolve is false",
        },
        "reason": {
            "type": "string",
            "description": "why the skill is worth keeping, or why nothing was kept",
        },
        "ends": {
            "type": "array",
            "items": {"type": "string"},
            "description": "ids of the window's [failure F<n>] lines the skill is meant to end;"
            " empty when it ends none of them",
        },
    },
    "required": ["evolve", *_PROPOSAL_KEYS, "ends"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Proposal:
    """The model proposes to create or update the skill called ``name``."""

    name: str
    description: str
    when_to_use: str
    content: str
    reason: str
    #: "project": the skill only makes sense in the session's project.
    scope: str = "user"
    #: The window's failures (`F<n>` ids) the skill is meant to end, as the model named them.
    ends: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decline:
    """The model saw nothing worth keeping."""

    reason: str


@dataclass(frozen=True)
class Violation:
    """The reply broke the contract; ``raw`` is the reply, cut to ``RAW_REPLY_LIMIT`` chars."""

    reason: str
    raw: str


def extract_json_object(text: str) -> dict[str, Any] | None:
    """Return the answer's JSON object in ``text``: the first complete object of the answer part
    that carries ``"evolve"``, else its first complete object, else None.

    The answer part follows the last ``</think>`` that closes a reasoning block and stops at a
    ``<think>`` that is never closed. Markers quoted inside a JSON string value are part of that
    value, not markers, which is why the objects are located before the markers are interpreted.
    The text is never edited: an outer code fence needs no stripping because decoding starts at
    the object's own brace, and fences, braces and quotes inside string values survive byte for
    byte because a real JSON decoder reads them.
    """
    try:
        spans = _object_spans(text)
        answer_start = _reasoning_end(text, spans)
        answer_stop = _unclosed_reasoning_start(text, spans, answer_start)
    except RecursionError:
        return None
    answers = [value for start, end, value in spans if answer_start <= start and end <= answer_stop]
    # Prose before the answer may hold a JSON example of its own: the answer is the object
    # that carries "evolve".
    return next((value for value in answers if "evolve" in value), answers[0] if answers else None)


def parse_reply(
    text: str | None,
    *,
    finish_reason: str | None = None,
    refusal: str | None = None,
    failure_ids: Collection[str] | None = None,
) -> Proposal | Decline | Violation:
    """Check the shape of a model reply. Never raises; every defect becomes a ``Violation``.
    `failure_ids`: the `F<n>` ids the window showed, the only ones `ends` may name; None for a
    reply that was not asked for them (a merge), whose `ends` is ignored."""
    raw = (text or "")[:RAW_REPLY_LIMIT]
    if refusal:
        return Violation(f"the model refused to answer: {refusal.strip()[:200]}", raw)
    if finish_reason == "length":
        return Violation("the reply was cut off at the token limit (finish_reason=length)", raw)
    if not text or not text.strip():
        return Violation("the reply was empty", raw)
    document = extract_json_object(text)
    if document is None:
        return Violation("the reply contains no complete JSON object", raw)
    if "evolve" not in document:
        return Violation('the JSON object has no "evolve" key', raw)
    evolve = document["evolve"]
    if not isinstance(evolve, bool):
        return Violation(
            f'"evolve" must be a JSON boolean, got {type(evolve).__name__} {evolve!r:.40}', raw
        )
    if not evolve:
        reason = document.get("reason")
        if not isinstance(reason, str):
            return Violation('an "evolve": false reply needs a "reason" string', raw)
        return Decline(reason.strip())
    missing = [key for key in _PROPOSAL_KEYS if key not in document]
    not_strings = [
        key for key in _PROPOSAL_KEYS if key in document and not isinstance(document[key], str)
    ]
    if missing or not_strings:
        return Violation(_wrong_keys_message(missing, not_strings), raw)
    empty = [key for key in ("name", "description", "content") if not document[key].strip()]
    if empty:
        return Violation(
            f"these keys must not be empty when evolve is true: {', '.join(empty)}", raw
        )
    scope = document.get("scope", "user")
    if scope not in SCOPES:
        return Violation(f'"scope" must be "user" or "project", got {scope!r:.40}', raw)
    ends = () if failure_ids is None else _ends(document.get("ends", []), failure_ids)
    if isinstance(ends, str):
        return Violation(ends, raw)
    return Proposal(
        name=document["name"].strip(),
        description=document["description"].strip(),
        when_to_use=document["whenToUse"].strip(),
        content=document["content"],
        reason=document["reason"].strip(),
        scope=scope,
        ends=ends,
    )


def _ends(value: object, failure_ids: Collection[str]) -> tuple[str, ...] | str:
    """The ids `ends` names, in order, each once; or what is wrong with it."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return '"ends" must be a JSON array of failure ids such as "F1"'
    ids = tuple(dict.fromkeys(item.strip() for item in value))
    unknown = [item for item in ids if not FAILURE_ID.fullmatch(item) or item not in failure_ids]
    if unknown:
        shown = ", ".join(f"{item!r:.20}" for item in unknown[:3])
        known = ", ".join(sorted(failure_ids, key=lambda i: int(i[1:]))) or "none"
        return f'"ends" names failures the window does not show: {shown} (it shows {known})'
    return ids


SCOPE_TEXT: Final = (
    'An evolve reply may add "scope": "project" when the skill only makes sense in the '
    'session\'s project (its repository); leave it out, or say "user", for a skill useful '
    "anywhere."
)


def proposal_schema(*, with_scope: bool) -> dict[str, Any]:
    """The JSON schema for structured output; with the scope key when the model may set it
    (strict mode needs every key listed and required, so a user skill says "user")."""
    if not with_scope:
        return PROPOSAL_SCHEMA
    properties = {
        **PROPOSAL_SCHEMA["properties"],
        "scope": {
            "type": "string",
            "enum": list(SCOPES),
            "description": '"project" for a skill that only makes sense in this project',
        },
    }
    return {
        **PROPOSAL_SCHEMA,
        "properties": properties,
        "required": [*PROPOSAL_SCHEMA["required"], "scope"],
    }


def repair_message(violation: Violation, *, with_scope: bool = False) -> str:
    """The user message of the single repair request that follows a contract violation."""
    scope = f"\n{SCOPE_TEXT}" if with_scope else ""
    return (
        "Your previous reply could not be used: "
        f"{violation.reason}.\n\n{CONTRACT_TEXT}{scope}\n\n"
        "Do not wrap the object in prose. Answer again now."
    )


def _wrong_keys_message(missing: Sequence[str], not_strings: Sequence[str]) -> str:
    parts = []
    if missing:
        parts.append(f"missing keys: {', '.join(missing)}")
    if not_strings:
        parts.append(f"keys that must be JSON strings: {', '.join(not_strings)}")
    return "; ".join(parts)


def _object_spans(text: str) -> list[tuple[int, int, dict[str, Any]]]:
    """Every outermost decodable JSON object in ``text``, left to right, as (start, end, value).

    Decoding is tried at each possible object start that is not inside an object already found,
    so a brace inside a string value of a found object is never a candidate.
    """
    spans: list[tuple[int, int, dict[str, Any]]] = []
    start = _OBJECT_START.search(text)
    while start is not None:
        position = start.start()
        try:
            value, end = _DECODER.raw_decode(text, position)
        except ValueError:
            start = _OBJECT_START.search(text, position + 1)
            continue
        spans.append((position, end, value))
        start = _OBJECT_START.search(text, end)
    return spans


def _inside_any(position: int, spans: list[tuple[int, int, dict[str, Any]]]) -> bool:
    return any(start < position < end for start, end, _ in spans)


def _reasoning_end(text: str, spans: list[tuple[int, int, dict[str, Any]]]) -> int:
    """Index just after the last ``</think>`` that is not quoted inside a JSON object, else 0."""
    position = text.rfind(_THINK_CLOSE)
    while position != -1:
        if not _inside_any(position, spans):
            return position + len(_THINK_CLOSE)
        position = text.rfind(_THINK_CLOSE, 0, position)
    return 0


def _unclosed_reasoning_start(
    text: str, spans: list[tuple[int, int, dict[str, Any]]], answer_start: int
) -> int:
    """Index of a ``<think>`` after the answer start that nothing closes, else ``len(text)``.

    Everything after such a marker is reasoning the model never finished, so an object in it
    is a draft, not the answer.
    """
    position = text.find(_THINK_OPEN, answer_start)
    while position != -1:
        if not _inside_any(position, spans):
            return position
        position = text.find(_THINK_OPEN, position + 1)
    return len(text)
