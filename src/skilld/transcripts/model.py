"""The normalised shape every transcript format is read into.

Sources own their file formats; everything downstream (gates, windows, prompts, skill signals)
sees only these plain values.
"""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

if TYPE_CHECKING:
    from skilld.gitinfo import GitContext

Role = Literal["user", "assistant", "tool", "system"]
SignalKind = Literal["use", "view"]
#: Who refused a tool call before it ran, where the agent's record says so beyond the text:
#: the user (declined it, maybe with words of their own) or a policy (a hook, a permission rule,
#: a sandbox).
Refusal = Literal["user", "policy"]

#: A cursor is a small JSON-serialisable mapping owned by the source that made it
#: (a file tail keeps its file, offset and content mark, a database keeps the last row id).
Cursor = Mapping[str, Any]


class ToolCall(NamedTuple):
    name: str
    #: Arguments as compact text (JSON for most agents), already cut to a sane length.
    arguments: str = ""
    call_id: str | None = None


class Message(NamedTuple):
    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    #: For role "tool": the call this result answers, and its tool name when known.
    tool_call_id: str | None = None
    tool_name: str | None = None
    timestamp: str | None = None
    #: Where the session worked when this message was written, as the transcript records it
    #: (Claude Code's `gitBranch` on each line, a Codex rollout's `session_meta.git`).
    git: "GitContext | None" = None
    #: For role "tool": True when the call failed, False when it is known to have succeeded,
    #: None when the format does not say.
    failed: bool | None = None
    #: For role "tool": the exit code of a shell command, where the agent records one.
    exit_code: int | None = None
    #: For role "tool" that failed: who refused the call, where the agent's record says so
    #: (its reader knows how each version writes it); None: the text must tell.
    refused_by: Refusal | None = None
    #: For role "tool" whose text was cut: the output's last characters, where a failing
    #: command's error usually is.
    tail: str = ""

    @property
    def finishes_turn(self) -> bool:
        """An assistant message with no pending tool call ends a turn."""
        return self.role == "assistant" and not self.tool_calls


class SkillSignal(NamedTuple):
    """A skill used (really loaded or executed) or only viewed; `signals.skill_signals` derives
    and counts them."""

    name: str
    kind: SignalKind
    #: Set when the signal is a read of `<skills_dir>/<name>/SKILL.md` or `<name>.md`: the
    #: library it belongs to (the dir as given to `skill_signals`).
    skills_dir: str | None = None
    #: When the session used it, as the transcript wrote it (its message's timestamp).
    at: str | None = None


class SessionRead(NamedTuple):
    """What one source read from one session since its cursor."""

    source: str  # the source kind, e.g. "claude-code"
    session: str  # stable session key, unique across sources ("<kind>:<id>")
    messages: list[Message]
    cursor: dict[str, Any]  # the cursor to store once these messages are safely recorded
    #: Skill signals of records that never become messages (a Claude Code `invoked_skills`
    #: attachment, a Codex `<skill>` injection). Signals visible in `messages` are derived from
    #: them by `signals.skill_signals` only, so that nothing is counted twice.
    signals: Sequence[SkillSignal] = ()
    skipped_lines: int = 0  # malformed or oversize records skipped (counted, never fatal)
    reset: bool = False  # the file was truncated or rewritten and re-read from its start
    mtime: float | None = None  # last modification time of the session, when known
    label: str | None = None  # e.g. "subagent of <parent>"
    #: The session's working directory as the transcript wrote it, when it has one.
    cwd: str | None = None


class ScanResult:
    """One pass of a source over everything it can see; the source fills it as it goes."""

    __slots__ = ("errors", "reads", "seen", "skipped_lines")

    def __init__(
        self,
        reads: list[SessionRead],
        seen: set[str],
        skipped_lines: int = 0,
        errors: list[str] | None = None,
    ) -> None:
        self.reads = reads
        #: Every session key whose cursor must be kept: the sessions the source sees (changed
        #: or not) and those it cannot look at now (a missing or unreadable root or sub-tree).
        #: The cursors of other keys are forgotten: their files are gone from a directory still
        #: there.
        self.seen = seen
        #: Skips that belong to no session (e.g. a file whose header is unreadable); skips
        #: inside a session are counted on its SessionRead only, so the total is this plus the
        #: reads'.
        self.skipped_lines = skipped_lines
        self.errors = [] if errors is None else errors


class Source(Protocol):
    """A place transcripts come from. Each kind owns its format and its cursor shape."""

    kind: str

    def scan(
        self, cursors: Mapping[str, Cursor], *, start_new_at_end_before: float | None = None
    ) -> ScanResult:
        """Read what was appended to every session since its cursor.

        `cursors` maps session key -> the cursor stored after the previous read (absent for a
        session never seen). A session without a cursor is read from its start, unless its
        modification time is older than `start_new_at_end_before` (epoch seconds): then it
        starts at its end (the backfill policy) and yields no messages, only a cursor.
        Sessions whose cursor shows nothing new are not in `reads` but are in `seen`, and so
        are those the source cannot look at now (a missing or unreadable root or sub-tree).
        A key, once given to a session, never changes.
        Never raises for bad content: malformed records are counted in `skipped_lines`.
        """
        ...
