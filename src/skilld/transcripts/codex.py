"""OpenAI Codex CLI sessions: `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`.

Each line is `{"timestamp", "type", "payload"}`. Only `response_item` lines carry the
conversation (`session_meta`, `turn_context`, `event_msg` and `compacted` repeat or describe
it); older rollouts wrote the response items bare, without the envelope, and are read too.

Response items: `message` (user `input_text` / assistant `output_text` blocks; `developer` and
`system` messages are the harness's prompts and are dropped), `function_call`,
`custom_tool_call`, `local_shell_call` and `web_search_call` (tool calls, merged into the
assistant message they follow), `function_call_output` / `custom_tool_call_output` (tool
results, named by joining on `call_id`, kept in the cursor across reads), `reasoning` (dropped).
A tool result's outcome is its exit code where Codex records one (the old `shell` output's
`metadata.exit_code`; the `exec_command` header `Process exited with code N`; `Exit code: N`),
`success` in the older output object, or Codex's answer to a declined or aborted call
("exec command rejected by user", "aborted by user"); otherwise it is unknown. A call Codex could
not run answers `exec_command failed[ for `…`]: CreateProcess { message: "…" }` (a Rust value
printed with its quotes escaped): a failure. When its sandbox denied the command
(`Codex(Sandbox(Denied { output: ExecToolCallOutput { exit_code: N, … aggregated_output:
StreamOutput { text: "…"`) the result is read as the command's exit code and output, refused by
a policy; when Codex rejected it (`Rejected("…")`) as Codex's reason, refused by the user when
it says "rejected by user", else by a policy.

User messages that are harness context rather than the user speaking (`<environment_context>`,
`<user_instructions>`, AGENTS.md instructions, `<turn_aborted>`, a `!` shell command, ...) are
dropped; a `<skill>` injection (the user mentioned `$name`) is dropped and reported as a use.

The working directory is `session_meta.payload.cwd` (the first line) and then each
`turn_context.payload.cwd`; the last one seen is carried in the cursor. So is the git context
of `session_meta.payload.git` (`{commit_hash, branch, repository_url}`, each optional), which
every message of the session carries (`recorded`); the URL is normalised on reading, so its user
info (a token, often) is never kept.

The session id is the UUID that ends the file name (Codex names the rollout after the id in
`session_meta`); for a file named otherwise, the `session_meta` id from its first line.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from skilld.gitinfo import GitContext, context, from_json
from skilld.transcripts._filesource import LineFileSource, ParsedLines, SessionFile, find_files
from skilld.transcripts.model import Message, Refusal, SkillSignal, ToolCall
from skilld.transcripts.normalise import (
    compact_arguments,
    content_text,
    cut_result,
    decode_record,
    iso_timestamp,
    pending_calls,
    remember_call,
    string_or_none,
)

_SESSION_UUID = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$", re.IGNORECASE
)
_SKILL_NAME = re.compile(r"<name>\s*([^<]+?)\s*</name>")
SKILL_INJECTION_PREFIX = "<skill"
#: Openings of user-role messages that Codex writes as context for the model.
HARNESS_USER_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# agents.md instructions for ",
    "<turn_aborted>",
    "<user_shell_command>",
    "<context_update>",
    "<subagent_notification>",
    "<tool_context>",
    "<reasoning_context>",
    "<pinned_notes>",
)
TOOL_CALL_TYPES = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
)
TOOL_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
RESPONSE_ITEM_TYPES = frozenset({"message", "reasoning"}) | TOOL_CALL_TYPES | TOOL_OUTPUT_TYPES
#: Envelope types whose payload names the working directory.
CWD_RECORD_TYPES = frozenset({"session_meta", "turn_context"})
_PEEK_CHUNK_BYTES = 64 * 1024
#: The exit status in the header Codex puts before a command's output.
_EXIT_HEADER = re.compile(r"^(?:Process exited with code|Exit code:) (-?\d+)\s*$", re.MULTILINE)
_HEADER_CHARS = 1200
#: Codex's answers to a call the user declined or interrupted, and a refused sandbox escape.
_DECLINED = re.compile(
    r"(exec command|patch) rejected by user|aborted( by user)?\b|sandbox denied|"
    r"This action was rejected due to unacceptable risk",
    re.IGNORECASE,
)


#: How Codex answers a call it could not run: `exec_command failed: CreateProcess { ... }`.
_CALL_FAILED = re.compile(r"(?:exec_command|shell_command|write_stdin|shell) failed\b")
_CALL_FAILED_CHARS = 40
_SANDBOX_DENIED = "Sandbox(Denied"
_DENIED_EXIT = re.compile(r"exit_code: (-?\d+)")
_DENIED_OUTPUTS = ("aggregated_output: StreamOutput { text: ", "stderr: StreamOutput { text: ")
_REJECTED_BY_CODEX = 'Rejected("'
#: A command Codex quotes at the start of its reason (`` `/bin/zsh -lc '...'` rejected: ``).
_QUOTED_COMMAND = re.compile(r"^`[^`]*`\s*")
_RUST_ESCAPE = re.compile(r"\\(u\{([0-9a-fA-F]{1,6})\}|.)", re.DOTALL)
_RUST_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "0": "\0"}


class CodexSource(LineFileSource):
    kind = "codex"
    default_glob = "**/rollout-*.jsonl"

    def __init__(self, path: Path, **options: Any) -> None:
        super().__init__(path, **options)
        # Session ids read from first lines, by path, valid while (device, inode) match.
        self._peeked_ids: dict[Path, tuple[int, int, str]] = {}

    def session_files(self, errors: list[str]) -> list[SessionFile]:
        if self.path.is_dir():
            files = find_files(self.path, self.glob or self.default_glob, errors)
        else:
            files = [self.path]
        self._peeked_ids = {
            path: self._peeked_ids[path] for path in files if path in self._peeked_ids
        }
        sessions = []
        for file in files:
            session_id = self._session_id(file)
            if session_id is None:
                self.listing_is_final = False  # list it again once its first line is whole
            else:
                sessions.append(SessionFile(file, f"{self.kind}:{session_id}"))
        return sessions

    def _session_id(self, file: Path) -> str | None:
        """The file's session id; None while its first line is not complete yet."""
        from_name = _SESSION_UUID.search(file.stem)
        if from_name is not None:
            return from_name.group(1).lower()
        try:
            file_stat = os.stat(file)
        except OSError:
            return file.stem  # reading it reports what is wrong
        if not stat.S_ISREG(file_stat.st_mode):
            return file.stem
        cached = self._peeked_ids.get(file)
        if cached is not None and cached[:2] == (file_stat.st_dev, file_stat.st_ino):
            return cached[2]
        try:
            first_line = _first_line(file, self.max_line_bytes)
        except OSError:
            return file.stem
        if first_line is None:
            return None
        session_id = _meta_session_id(first_line) or file.stem
        self._peeked_ids[file] = (file_stat.st_dev, file_stat.st_ino, session_id)
        return session_id

    def parse_lines(
        self, lines: list[bytes], state: dict[str, Any], session: SessionFile
    ) -> ParsedLines:
        calls = pending_calls(state)
        parsed = ParsedLines(cwd=string_or_none(state.get("cwd")))
        git = from_json(state.get("git"))
        # Index of the last message while it is an assistant message tool calls may join.
        open_assistant: int | None = None
        for line in lines:
            try:
                record = decode_record(line)
            except ValueError:
                parsed.skipped += 1
                continue
            parsed.cwd = _record_cwd(record) or parsed.cwd
            git = _record_git(record) or git
            item = _response_item(record) if record is not None else None
            if record is None or item is None:
                continue
            timestamp = iso_timestamp(record.get("timestamp"))
            item_type = string_or_none(item.get("type"))  # hashable for `in`
            if item_type == "message":
                message = self._message(item, timestamp, parsed)
                if message is not None:
                    parsed.messages.append(message._replace(git=git))
                    open_assistant = (
                        len(parsed.messages) - 1 if message.role == "assistant" else None
                    )
            elif item_type in TOOL_CALL_TYPES:
                call = _tool_call(item)
                if call is None:
                    continue
                remember_call(calls, call.call_id, call.name)
                if open_assistant is not None:
                    joined = parsed.messages[open_assistant]
                    parsed.messages[open_assistant] = Message(
                        role="assistant",
                        text=joined.text,
                        tool_calls=(*joined.tool_calls, call),
                        timestamp=joined.timestamp,
                        git=git,
                    )
                else:
                    parsed.messages.append(
                        Message(role="assistant", tool_calls=(call,), timestamp=timestamp, git=git)
                    )
                    open_assistant = len(parsed.messages) - 1
            elif item_type in TOOL_OUTPUT_TYPES:
                call_id = string_or_none(item.get("call_id"))
                output = item.get("output")
                text = _output_text(output)
                failed, exit_code = _outcome(output, text)
                refused_by: Refusal | None = None
                if failed is None and _CALL_FAILED.match(text.lstrip()[:_CALL_FAILED_CHARS]):
                    failed = True
                    text, exit_code, refused_by = _unrun_call(text)
                cut, tail = cut_result(text, self.tool_result_max_chars, failed is True)
                parsed.messages.append(
                    Message(
                        role="tool",
                        text=cut,
                        tool_call_id=call_id,
                        tool_name=calls.pop(call_id, None) if call_id else None,
                        timestamp=timestamp,
                        git=git,
                        failed=failed,
                        exit_code=exit_code,
                        refused_by=refused_by,
                        tail=tail,
                    )
                )
                open_assistant = None
        parsed.state = {"calls": calls} if calls else {}
        if parsed.cwd is not None:
            parsed.state["cwd"] = parsed.cwd
        if git is not None:
            parsed.state["git"] = git.as_json()
        return parsed

    def _message(
        self, item: dict[str, Any], timestamp: str | None, parsed: ParsedLines
    ) -> Message | None:
        role = item.get("role")
        text = content_text(item.get("content"))
        if not text:
            return None
        if role == "assistant":
            return Message(role="assistant", text=text, timestamp=timestamp)
        if role != "user":
            return None
        opening = text.lstrip()
        if opening.startswith(SKILL_INJECTION_PREFIX):
            name = _SKILL_NAME.search(opening)
            if name is not None:
                parsed.signals.append(SkillSignal(name.group(1), "use", at=timestamp))
            return None
        if opening.lower().startswith(HARNESS_USER_PREFIXES):
            return None
        return Message(role="user", text=text, timestamp=timestamp)


def _record_cwd(record: dict[str, Any] | None) -> str | None:
    if record is None or string_or_none(record.get("type")) not in CWD_RECORD_TYPES:
        return None
    payload = record.get("payload")
    return string_or_none(payload.get("cwd")) if isinstance(payload, dict) else None


def _record_git(record: dict[str, Any] | None) -> GitContext | None:
    if record is None or record.get("type") != "session_meta":
        return None
    payload = record.get("payload")
    git = payload.get("git") if isinstance(payload, dict) else None
    if not isinstance(git, dict):
        return None
    return context(
        repository=git.get("repository_url"),
        branch=git.get("branch"),
        commit=git.get("commit_hash"),
        how="recorded",
    )


def _response_item(record: dict[str, Any]) -> dict[str, Any] | None:
    payload = record.get("payload")
    if record.get("type") == "response_item":
        return payload if isinstance(payload, dict) else None
    if payload is None and string_or_none(record.get("type")) in RESPONSE_ITEM_TYPES:
        return record  # an older rollout: the item itself, without the envelope
    return None


def _tool_call(item: dict[str, Any]) -> ToolCall | None:
    item_type = item.get("type")
    call_id = string_or_none(item.get("call_id")) or string_or_none(item.get("id"))
    if item_type == "function_call":
        name = string_or_none(item.get("name"))
        arguments = compact_arguments(item.get("arguments"))
    elif item_type == "custom_tool_call":
        name = string_or_none(item.get("name"))
        arguments = compact_arguments(item.get("input"))
    elif item_type == "local_shell_call":
        action = item.get("action")
        action = action if isinstance(action, dict) else {}
        # Only what was run and where: the action's `env` may hold secrets.
        name = "local_shell"
        arguments = compact_arguments(
            {"command": action.get("command"), "workdir": action.get("working_directory")}
        )
    else:
        name = "web_search"
        arguments = compact_arguments(item.get("action"))
        call_id = None  # a web search has no output to join
    if name is None:
        return None
    return ToolCall(name=name, arguments=arguments, call_id=call_id)


def _output_text(output: Any) -> str:
    """A tool output: a string (often JSON with an `output` field), content items, or the
    older {"content", "success"} object."""
    if isinstance(output, list):
        return content_text(output)
    if isinstance(output, dict):
        content = output.get("content")
        return content if isinstance(content, str) else content_text(output.get("content_items"))
    if not isinstance(output, str):
        return ""
    try:
        decoded = json.loads(output)
    except (ValueError, RecursionError):
        return output
    if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
        return decoded["output"]
    return output


def _outcome(output: Any, text: str) -> tuple[bool | None, int | None]:
    """(failed, exit code) of a tool output: the old `shell` JSON's `metadata.exit_code`, the
    `exec_command` header's `Process exited with code N` (or `Exit code: N`), the older
    `{"success": false}` object, or the text Codex answers a declined or aborted call with."""
    if isinstance(output, dict):
        success = output.get("success")
        return (not success if isinstance(success, bool) else None), None
    if isinstance(output, str) and output.startswith("{"):
        try:
            decoded = json.loads(output)
        except (ValueError, RecursionError):
            decoded = None
        metadata = decoded.get("metadata") if isinstance(decoded, dict) else None
        code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        if isinstance(code, int) and not isinstance(code, bool):
            return code != 0, code
    header = _EXIT_HEADER.search(text[:_HEADER_CHARS])
    if header is not None:
        code = int(header.group(1))
        return code != 0, code
    if _DECLINED.match(text.lstrip()):
        return True, None
    return None, None


def _unrun_call(text: str) -> tuple[str, int | None, Refusal | None]:
    """(text, exit code, who refused it) of a call Codex could not run: a sandbox's denial is
    the command's exit code and output, Codex's rejection its reason; anything else stays as
    Codex wrote it."""
    opening = text.find('message: "')
    if opening == -1:
        return text, None, None
    message = _rust_string(text, opening + len('message: "'))
    if _SANDBOX_DENIED in message:
        code = _DENIED_EXIT.search(message)
        exit_code = int(code.group(1)) if code else None
        output = next(
            (
                found
                for marker in _DENIED_OUTPUTS
                if (start := message.find(marker + '"')) != -1
                and (found := _rust_string(message, start + len(marker) + 1).strip())
            ),
            "",
        )
        status = f"Exit code: {exit_code}\n" if exit_code is not None else ""
        return f"{status}Output:\n{output}\n[the sandbox denied the command]", exit_code, "policy"
    if message.startswith(_REJECTED_BY_CODEX):
        reason = _QUOTED_COMMAND.sub("", _rust_string(message, len(_REJECTED_BY_CODEX)))
        return reason, None, "user" if "rejected by user" in reason.lower() else "policy"
    return text, None, None


def _rust_string(text: str, start: int) -> str:
    """The Rust string literal (`{:?}`) whose body starts at `start`, unescaped; to the end of
    `text` when it is not closed."""
    end = start
    while end < len(text) and text[end] != '"':
        end += 2 if text[end] == "\\" else 1
    return _RUST_ESCAPE.sub(_rust_unescaped, text[start:end])


def _rust_unescaped(match: re.Match[str]) -> str:
    if match.group(2) is not None:
        code = int(match.group(2), 16)
        return chr(code) if code <= 0x10FFFF else ""
    char = match.group(1)
    return _RUST_ESCAPES.get(char, char)


def _first_line(file: Path, max_bytes: int) -> bytes | None:
    """The file's first complete line; None while it has none yet, empty when oversize."""
    collected = bytearray()
    with open(file, "rb") as handle:
        while len(collected) <= max_bytes:
            chunk = handle.read(_PEEK_CHUNK_BYTES)
            if not chunk:
                return None
            newline = chunk.find(b"\n")
            if newline != -1:
                collected += chunk[:newline]
                return bytes(collected)
            collected += chunk
    return b""


def _meta_session_id(line: bytes) -> str | None:
    try:
        record = decode_record(line)
    except ValueError:
        return None
    if record is None:
        return None
    if record.get("type") == "session_meta":
        payload = record.get("payload")
        return string_or_none(payload.get("id")) if isinstance(payload, dict) else None
    if "type" not in record:
        return string_or_none(record.get("id"))  # an older rollout's header line
    return None
