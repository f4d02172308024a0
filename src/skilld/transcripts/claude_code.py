"""Claude Code sessions: `~/.claude/projects/<project>/<session>.jsonl`.

Each line is a record with a `type`. `user` and `assistant` records carry an Anthropic
`message` ({role, content: str | blocks}); tool results arrive as `tool_result` blocks in user
records and are joined to their `tool_use` by id. One API response may be written as several
assistant records sharing `message.id`; consecutive ones are merged back into one message.

Dropped as noise: `isMeta` / compact-summary / transcript-only user records (skill bodies,
command caveats, summaries the harness injected), synthetic and API-error assistant records,
thinking blocks, and the bookkeeping types (summary, file-history-snapshot, progress,
queue-operation, system, custom-title, ...). Attachments are dropped too, except that an
`invoked_skills` attachment reports its skills as used (a record-level signal; a `Skill` tool
call is visible in the messages and counted from there, so the attachment adds only skills not
counted yet). Every record carries the session's `cwd`: the read reports the last one. Every
record carries `gitBranch` too, which changes when the user switches branches mid-session: each
message keeps the branch of the record it came from (`recorded`).

A tool result's outcome is its block's `is_error`. Since 2.1, a failed `Bash` result's text
opens with `Exit code N` (then the output), which gives its exit code, and a failed `Bash` call
without that banner (nor a `<tool_use_error>`) never ran: a hook or a rule refused it. 2.0.x and
earlier write no banner at all: their failed `Bash` results are read by their text alone. Who
refused a call is read from the record where it says so (`toolDenialKind`: `user-rejected` is
the user, any other kind a rule; `toolUseResult: "User rejected tool use"`), and from an edit
the user rejected in the IDE's diff view with words of their own: the result is just those
words (Claude Code's own edit errors come in `<tool_use_error>`).

Subagents (`<project>/<session>/subagents/*.jsonl`, and the older `<project>/agent-*.jsonl`) are
read only with `include_subagents`. Sidechain records inside a main session belong to a
subagent and are skipped there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skilld.gitinfo import GitContext, context
from skilld.transcripts._filesource import LineFileSource, ParsedLines, SessionFile, find_files
from skilld.transcripts.model import Message, Refusal, SkillSignal, ToolCall
from skilld.transcripts.normalise import (
    IMAGE_BLOCK_TYPES,
    IMAGE_PLACEHOLDER,
    compact_arguments,
    content_text,
    cut_result,
    decode_record,
    iso_timestamp,
    pending_calls,
    remember_call,
    string_or_none,
)
from skilld.transcripts.signals import skill_call_name

#: User-record flags marking text the harness injected rather than the user typed.
HARNESS_FLAGS = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly")
#: User text that is a local command's output echoed into the transcript.
HARNESS_TEXT_PREFIXES = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
)
TOOL_CALL_BLOCK_TYPES = frozenset({"tool_use", "server_tool_use"})
SYNTHETIC_MODEL = "<synthetic>"
#: Skills already counted in a session, so that re-injected `invoked_skills` (after a
#: compaction) are not counted again. Bounded to keep cursors small.
MAX_REMEMBERED_SKILLS = 256
SUBAGENTS_DIR = "subagents"
#: How a failed `Bash` result begins (since 2.1): the command's exit code, then its output.
_EXIT_BANNER = re.compile(r"^\[error\] Exit code (-?\d+)\s*(\n|$)")
#: The first version that opens every failed `Bash` result it ran with `Exit code N`.
BANNER_SINCE = (2, 1)
_VERSION = re.compile(r"^(\d+)\.(\d+)")
#: The tools whose change the IDE shows as a diff the user may reject with words of their own.
EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
_TOOL_USE_ERROR = "<tool_use_error>"
_USER_REJECTED = "User rejected tool use"
#: Words of a hook's or a rule's refusal of an edit (read by its text, not as the user's).
_REFUSING_WORDS = ("hook", "denied", "blocked", "not allowed", "permission")
#: How the edit tools' own errors open (versions before 2.0 write them without the
#: `<tool_use_error>` tag): the agent's mistake, never the user's words.
_EDIT_TOOL_ERRORS = re.compile(
    r"File has not been read yet|File has been (?:unexpectedly )?modified|File does not exist|"
    r"Found \d+ matches of the string to replace|String to replace not found|"
    r"No changes to make|InputValidationError|Cannot create new file"
)
LEGACY_SUBAGENT_PREFIX = "agent-"


class ClaudeCodeSource(LineFileSource):
    kind = "claude-code"
    default_glob = "*/*.jsonl"

    def session_files(self, errors: list[str]) -> list[SessionFile]:
        if not self.path.is_dir():
            return [self._session_file(self.path)]
        # The path may be the projects root or one project's directory.
        is_project = any(self.path.glob("*.jsonl"))
        depth_prefix = "" if is_project else "*/"
        main_pattern = self.glob or ("*.jsonl" if is_project else self.default_glob)
        candidates = find_files(self.path, main_pattern, errors)
        if self.include_subagents:
            pattern = f"{depth_prefix}*/{SUBAGENTS_DIR}/*.jsonl"
            candidates += find_files(self.path, pattern, errors)
        sessions: list[SessionFile] = []
        for file in sorted(set(candidates)):
            session = self._session_file(file)
            if session.label is None or self.include_subagents:
                sessions.append(session)
        return sessions

    def _session_file(self, file: Path) -> SessionFile:
        if file.parent.name == SUBAGENTS_DIR:
            parent = file.parent.parent.name
            session_id, label = f"{parent}/{file.stem}", f"subagent of {parent}"
        elif file.stem.startswith(LEGACY_SUBAGENT_PREFIX):
            session_id, label = file.stem, "subagent"
        else:
            session_id, label = file.stem, None
        # A session id in two projects (a session copied between projects): the newcomer is
        # qualified by its project.
        relative = file.relative_to(self.path).parts if file != self.path else ()
        qualified = f"{self.kind}:{relative[0]}/{session_id}" if len(relative) > 1 else None
        return SessionFile(file, f"{self.kind}:{session_id}", label, qualified)

    def parse_lines(
        self, lines: list[bytes], state: dict[str, Any], session: SessionFile
    ) -> ParsedLines:
        reader = _Reader(
            calls=pending_calls(state),
            counted_skills=_string_list(state.get("skills")),
            in_subagent=session.label is not None,
            tool_result_max_chars=self.tool_result_max_chars,
        )
        for line in lines:
            try:
                record = decode_record(line)
            except ValueError:
                reader.parsed.skipped += 1
                continue
            if record is not None:
                reader.add(record)
        return reader.finish()


@dataclass(slots=True)
class _Reader:
    calls: dict[str, str]
    counted_skills: list[str]
    in_subagent: bool
    tool_result_max_chars: int
    parsed: ParsedLines = field(default_factory=ParsedLines)
    #: `message.id` of the last message when it is an assistant message (for merging).
    open_assistant_id: str | None = None
    #: The branch the last record names (None: it names none, or not a plausible one).
    git: GitContext | None = None
    #: The last record's Claude Code version, and whether it opens a failed `Bash` result
    #: with its exit code (None: no version seen).
    version: str | None = None
    writes_banner: bool | None = None

    def add(self, record: dict[str, Any]) -> None:
        if record.get("isSidechain") is True and not self.in_subagent:
            return
        cwd = string_or_none(record.get("cwd"))
        if cwd is not None:
            self.parsed.cwd = cwd
        if "gitBranch" in record:
            self.git = context(branch=record["gitBranch"], how="recorded")
        version = record.get("version")
        if version != self.version and isinstance(version, str):  # every record names it
            self.version, self.writes_banner = version, _writes_banner(version)
        record_type = record.get("type")
        if record_type == "assistant":
            self._assistant(record)
        elif record_type == "user":
            self._user(record)
        elif record_type == "attachment":
            self._attachment(record.get("attachment"), iso_timestamp(record.get("timestamp")))

    def finish(self) -> ParsedLines:
        state: dict[str, Any] = {}
        if self.calls:
            state["calls"] = self.calls
        if self.counted_skills:
            state["skills"] = self.counted_skills[-MAX_REMEMBERED_SKILLS:]
        self.parsed.state = state
        return self.parsed

    def _assistant(self, record: dict[str, Any]) -> None:
        message = record.get("message")
        if not isinstance(message, dict) or record.get("isApiErrorMessage") is True:
            return
        if message.get("model") == SYNTHETIC_MODEL:
            return
        text, tool_calls = _assistant_content(message.get("content"))
        for call in tool_calls:
            remember_call(self.calls, call.call_id, call.name)
            skill = skill_call_name(call)
            if skill is not None:
                self._remember_skill(skill)
        if not text and not tool_calls:
            return
        message_id = string_or_none(message.get("id"))
        messages = self.parsed.messages
        if message_id is not None and message_id == self.open_assistant_id:
            previous = messages[-1]
            messages[-1] = Message(
                role="assistant",
                text="\n".join(part for part in (previous.text, text) if part),
                tool_calls=previous.tool_calls + tool_calls,
                timestamp=previous.timestamp,
                git=self.git,
            )
            return
        messages.append(
            Message(
                role="assistant",
                text=text,
                tool_calls=tool_calls,
                timestamp=iso_timestamp(record.get("timestamp")),
                git=self.git,
            )
        )
        self.open_assistant_id = message_id

    def _user(self, record: dict[str, Any]) -> None:
        if any(record.get(flag) is True for flag in HARNESS_FLAGS):
            return
        message = record.get("message")
        if not isinstance(message, dict):
            return
        timestamp = iso_timestamp(record.get("timestamp"))
        content = message.get("content")
        texts: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                block_type = string_or_none(block.get("type"))  # hashable for `in`
                if block_type == "tool_result":
                    self._append(self._tool_result(block, timestamp, _record_refusal(record)))
                elif block_type == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif block_type in IMAGE_BLOCK_TYPES:
                    texts.append(IMAGE_PLACEHOLDER)
        text = "\n".join(part for part in texts if part)
        if text and not text.lstrip().startswith(HARNESS_TEXT_PREFIXES):
            self._append(Message(role="user", text=text, timestamp=timestamp))

    def _tool_result(
        self, block: dict[str, Any], timestamp: str | None, refused_by: Refusal | None
    ) -> Message:
        call_id = string_or_none(block.get("tool_use_id"))
        text = content_text(block.get("content"))
        tool = self.calls.pop(call_id, None) if call_id else None
        failed = block.get("is_error") is True
        exit_code = None
        if failed:
            text = f"[error] {text}"
            exit_code = _exit_code(text)
            if refused_by is None:
                refused_by = self._refusal(tool, text, exit_code)
        cut, tail = cut_result(text, self.tool_result_max_chars, failed)
        return Message(
            role="tool",
            text=cut,
            tool_call_id=call_id,
            tool_name=tool,
            timestamp=timestamp,
            failed=failed,
            exit_code=exit_code,
            refused_by=refused_by if failed else None,
            tail=tail,
        )

    def _refusal(self, tool: str | None, text: str, exit_code: int | None) -> Refusal | None:
        """Who refused a failed call, as its text shows to one who knows this version: an edit
        whose result is only the user's words, a `Bash` call without the banner of a version
        that writes one."""
        body = text.removeprefix("[error] ").lstrip()
        if body.startswith(_TOOL_USE_ERROR) or _EDIT_TOOL_ERRORS.match(body):
            return None
        if tool in EDIT_TOOLS:  # the user's words, unless a hook or a rule speaks
            opening = body[:800].lower()
            return None if any(word in opening for word in _REFUSING_WORDS) else "user"
        if tool == "Bash" and exit_code is None and self.writes_banner:
            return "policy"
        return None

    def _attachment(self, attachment: Any, timestamp: str | None) -> None:
        if not isinstance(attachment, dict) or attachment.get("type") != "invoked_skills":
            return
        skills = attachment.get("skills")
        for skill in skills if isinstance(skills, list) else ():
            name = string_or_none(skill.get("name")) if isinstance(skill, dict) else None
            if name is not None and name not in self.counted_skills:
                self.parsed.signals.append(SkillSignal(name, "use", at=timestamp))
                self._remember_skill(name)

    def _append(self, message: Message) -> None:
        self.parsed.messages.append(message._replace(git=self.git))
        self.open_assistant_id = None

    def _remember_skill(self, name: str) -> None:
        if name in self.counted_skills:
            self.counted_skills.remove(name)
        self.counted_skills.append(name)


def _assistant_content(content: Any) -> tuple[str, tuple[ToolCall, ...]]:
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        return "", ()
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        block_type = string_or_none(block.get("type"))  # hashable for `in`
        if block_type == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block_type in TOOL_CALL_BLOCK_TYPES:
            name = string_or_none(block.get("name"))
            if name is not None:
                calls.append(
                    ToolCall(
                        name=name,
                        arguments=compact_arguments(block.get("input")),
                        call_id=string_or_none(block.get("id")),
                    )
                )
    return "\n".join(text for text in texts if text), tuple(calls)


def _writes_banner(version: str) -> bool | None:
    """Whether Claude Code `version` opens a failed `Bash` result with `Exit code N`."""
    match = _VERSION.match(version)
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2))) >= BANNER_SINCE


def _record_refusal(record: dict[str, Any]) -> Refusal | None:
    """Who refused the call a user record answers, as the record says it beside the text."""
    kind = record.get("toolDenialKind")
    if isinstance(kind, str) and kind:
        return "user" if kind == "user-rejected" else "policy"
    return "user" if record.get("toolUseResult") == _USER_REJECTED else None


def _exit_code(text: str) -> int | None:
    """The exit code a failed `Bash` result opens with (`Exit code 128`, then the output)."""
    match = _EXIT_BANNER.match(text)
    return int(match.group(1)) if match else None


def _string_list(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
