"""`skilld mcp`'s protocol: MCP's JSON-RPC 2.0 over stdio, spoken directly.

An agent waits about a second for an MCP server that is not marked required before its first
request goes out without that server's tools, and importing the `mcp` SDK alone takes longer
than that. The part of MCP a tool server needs is small: `initialize`, `ping`, `tools/list` and
`tools/call`, one JSON message per line each way. So `handle` answers a message from the
tools table below, a pure function of the message; `serve` is the stdio around it; and the
tools themselves (`skilld.mcp_tools`, which loads the library code) are called through
`call_tool` on the first call that needs them. Nothing here imports more than `json` (and
`boundedjson`, which every message goes through: a line of at most `MAX_MESSAGE_BYTES`,
nested at most `boundedjson.MAX_DEPTH` deep).
"""

import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any, NamedTuple

from skilld import __version__
from skilld.boundedjson import JSONRefused
from skilld.boundedjson import loads as bounded_loads

#: The revisions of MCP this server speaks, newest first. A client asking for another gets the
#: newest, and decides whether it can go on.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

INSTRUCTIONS = (
    "skilld keeps this agent's library of reusable skills (Markdown playbooks). Call skill_list "
    "to see them, skill_view to read one, skill_write to create or improve one you own, and "
    "skill_delete to remove one you own. Skills written by a person, bundled, installed from a "
    "hub, or pinned cannot be changed through these tools."
)

# JSON-RPC 2.0's error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

#: The longest line read as a message. The largest request is a `skill_write` of a skill, at
#: most 1 MiB as a file (`fsutil.MAX_FILE_BYTES`): as JSON, escaped, it fits many times over.
#: A longer line is never held whole: it is answered with an error and skipped.
MAX_MESSAGE_BYTES = 8 << 20


class Refused(Exception):
    """A tool call skilld refused (or could not do); the message is for the agent."""


class Param(NamedTuple):
    """A tool's string argument."""

    name: str
    description: str
    required: bool = True


class Tool(NamedTuple):
    name: str
    title: str
    description: str
    params: tuple[Param, ...]
    #: The JSON Schema of the result's `structuredContent`.
    output: Mapping[str, Any]
    #: MCP's behaviour hints: what the tool changes, so agents ask before the right calls.
    hints: Mapping[str, bool]


#: Calls a tool by name with its checked arguments (each a string, an absent optional one
#: None); returns the result, raises Refused.
CallTool = Callable[[str, Mapping[str, str | None]], dict[str, Any] | str]

NAME = Param("name", "The skill's name: kebab-case, as skill_list shows it.")


def _object(properties: Mapping[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required)}


_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "skill_write",
        "Write a skill",
        "Create a skill, or update one skilld manages. `content` is the Markdown body (no "
        "frontmatter); `whenToUse` says when an agent should load it. A skill that downloads "
        "and runs code is staged for a person to approve (outcome `staged`), not written.",
        (
            NAME,
            Param("description", "One line: what the skill does, for choosing it."),
            Param("content", "The Markdown body: the steps, without frontmatter."),
            Param("whenToUse", "When an agent should load the skill.", required=False),
        ),
        _object(
            {
                "outcome": {
                    "type": "string",
                    "enum": ["created", "updated", "unchanged", "staged"],
                },
                "name": _STRING,
                "path": _STRING,
                "redacted": {"type": "object", "additionalProperties": {"type": "integer"}},
                "reason": _STRING,
            },
            ("outcome", "name", "path", "redacted"),
        ),
        # It replaces only a skill skilld wrote (the old version stays in history): additive to
        # everything else; the same call twice changes nothing the second time.
        {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
    ),
    Tool(
        "skill_delete",
        "Delete a skill",
        "Delete a skill skilld manages (its last version stays in history).",
        (NAME,),
        _object(
            {"deleted": _STRING, "path": _STRING, "kept": {"type": "array", "items": _STRING}},
            ("deleted", "path", "kept"),
        ),
        {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    ),
    Tool(
        "skill_list",
        "List skills",
        "Every skill with its owner, whether skilld manages it, its state (active, stale), "
        "whether it is pinned, and its usage counts.",
        (),
        _object(
            {
                "skills": {
                    "type": "array",
                    "items": _object(
                        {
                            "name": _STRING,
                            "owner": _STRING,
                            "managed": {"type": "boolean"},
                            "state": _STRING,
                            "pinned": {"type": "boolean"},
                            "description": _NULLABLE_STRING,
                            "use_count": {"type": "integer"},
                            "view_count": {"type": "integer"},
                            "patch_count": {"type": "integer"},
                            "last_activity_at": _NULLABLE_STRING,
                            "path": _STRING,
                            "broken": _NULLABLE_STRING,
                        },
                        ("name", "owner", "managed", "state", "pinned", "path"),
                    ),
                },
                # Present when something was not read (a refused usage sidecar).
                "problems": {"type": "array", "items": _STRING},
            },
            ("skills",),
        ),
        {"readOnlyHint": True},
    ),
    Tool(
        "skill_view",
        "View a skill",
        "The full text of a skill file; counts as a view of the skill.",
        (NAME,),
        _object({"result": _STRING}, ("result",)),
        # Reading bumps the skill's view count in skilld's own sidecar, nothing else.
        {"readOnlyHint": True},
    ),
)

TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}


def tool_listing(tool: Tool) -> dict[str, Any]:
    """`tool` as `tools/list` gives it. The title goes both where MCP 2025-06-18 put it and in
    the annotations, where 2025-03-26 did."""
    params = tool.params
    return {
        "name": tool.name,
        "title": tool.title,
        "description": tool.description,
        "inputSchema": _object(
            {param.name: {"type": "string", "description": param.description} for param in params},
            tuple(param.name for param in params if param.required),
        ),
        "outputSchema": dict(tool.output),
        "annotations": {"title": tool.title, **tool.hints, "openWorldHint": False},
    }


def handle(message: Any, call_tool: CallTool) -> dict[str, Any] | None:
    """The response to one decoded message, or None for a notification (and for a response
    from the client: this server sends no requests)."""
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "expected a JSON-RPC message object")
    if "method" not in message and ("result" in message or "error" in message):
        return None
    request_id = message.get("id")
    is_notification = "id" not in message
    if not (is_notification or _valid_id(request_id)):
        return _error(None, INVALID_REQUEST, "the id must be a string or an integer")
    method, params = message.get("method"), message.get("params", {})
    if message.get("jsonrpc") != "2.0" or not isinstance(method, str):
        return None if is_notification else _error(request_id, INVALID_REQUEST, "not JSON-RPC 2.0")
    if is_notification:
        return None  # notifications/initialized, notifications/cancelled: nothing to do
    if not isinstance(params, dict):
        return _error(request_id, INVALID_PARAMS, "params must be an object")
    if method == "initialize":
        return _result(request_id, _initialize(params))
    if method == "ping":
        return _result(request_id, {})
    if method == "tools/list":
        return _result(request_id, {"tools": [tool_listing(tool) for tool in TOOLS]})
    if method == "tools/call":
        return _call(request_id, params, call_tool)
    return _error(request_id, METHOD_NOT_FOUND, f"method not found: {method}")


def _initialize(params: Mapping[str, Any]) -> dict[str, Any]:
    asked = params.get("protocolVersion")
    return {
        "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "skilld", "title": "skilld", "version": __version__},
        "instructions": INSTRUCTIONS,
    }


def _call(request_id: Any, params: Mapping[str, Any], call_tool: CallTool) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments") or {}
    tool = TOOLS_BY_NAME.get(name) if isinstance(name, str) else None
    if tool is None:
        return _error(request_id, INVALID_PARAMS, f"unknown tool: {name}")
    if not isinstance(arguments, dict):
        return _error(request_id, INVALID_PARAMS, "arguments must be an object")
    # A bad argument is the model's to correct, so it comes back as the tool's error.
    try:
        checked = {param.name: _argument(tool, param, arguments) for param in tool.params}
        result = call_tool(tool.name, checked)
    except Refused as exc:
        return _result(request_id, {"content": [_text(str(exc))], "isError": True})
    if isinstance(result, str):
        text, structured = result, {"result": result}
    else:
        text, structured = json.dumps(result, indent=2, ensure_ascii=False), result
    return _result(
        request_id, {"content": [_text(text)], "structuredContent": structured, "isError": False}
    )


def _argument(tool: Tool, param: Param, arguments: Mapping[str, Any]) -> str | None:
    value = arguments.get(param.name)
    if isinstance(value, str) or (value is None and not param.required):
        return value
    if value is None:
        raise Refused(f"{tool.name}: the argument {param.name!r} is required")
    raise Refused(f"{tool.name}: the argument {param.name!r} must be a string")


def _valid_id(value: Any) -> bool:
    """A string or an integer: JSON-RPC discourages fractions, and a float may be NaN or
    infinite (`NaN`, `1e400`), which no JSON can carry back."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def answer(line: bytes, call_tool: CallTool) -> dict[str, Any] | None:
    """The response to one line of input (a parse error gets one too; a blank line none)."""
    if not line.strip():
        return None
    try:
        message = bounded_loads(line, limit=MAX_MESSAGE_BYTES + 1)  # with its newline
    except JSONRefused as exc:  # nested too deep to read
        return _error(None, PARSE_ERROR, f"the message is not read: {exc}")
    except ValueError:  # not JSON, or not UTF-8
        return _error(None, PARSE_ERROR, "not a JSON message")
    return handle(message, call_tool)


def encode(response: dict[str, Any]) -> bytes:
    """`response` as one line of strict JSON (never `NaN` or `Infinity`); a response that
    cannot be one becomes an internal error."""
    try:
        text = json.dumps(response, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        request_id = response.get("id")
        fallback = _error(request_id if _valid_id(request_id) else None, INTERNAL_ERROR,
                          "the answer could not be encoded as JSON")  # fmt: skip
        text = json.dumps(fallback, ensure_ascii=False, separators=(",", ":"))
    return text.encode() + b"\n"


def serve(call_tool: CallTool, reader: IO[bytes], writer: IO[bytes]) -> None:
    """Answer each line of `reader` on `writer` until `reader` ends. A line over
    `MAX_MESSAGE_BYTES` is read in pieces of that size and dropped: it gets an error, and the
    next line is answered as usual."""
    while line := reader.readline(MAX_MESSAGE_BYTES + 1):
        if len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n"):
            while (rest := reader.readline(MAX_MESSAGE_BYTES)) and not rest.endswith(b"\n"):
                pass
            too_long = f"the message is not read: over the limit of {MAX_MESSAGE_BYTES:,} bytes"
            response: dict[str, Any] | None = _error(None, INVALID_REQUEST, too_long)
        else:
            response = answer(line, call_tool)
        if response is not None:
            writer.write(encode(response))
            writer.flush()


def serve_stdio(call_tool: CallTool) -> None:
    """`serve` on stdin and stdout. Whatever else prints goes to stderr: stdout carries only
    the protocol."""
    writer = sys.stdout.buffer
    sys.stdout = sys.stderr
    with contextlib.suppress(BrokenPipeError):  # the client went away mid-answer
        serve(call_tool, sys.stdin.buffer, writer)
