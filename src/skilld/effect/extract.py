"""A session's tool runs and failures, read from its messages (DESIGN.md §13). Pure.

Every tool result is a *run* of its command head (a chain that succeeded is a run of each of
its parts); a failed one is also a *failure* with a signature and a class:

- `rejected`: the user declined the call: the agent's reader says so (`Message.refused_by`), or
  its text does (Claude Code's "The user doesn't want to proceed with this tool use", Codex's
  "exec command rejected by user" / "aborted by user").
- `cascade`: a follow-on of an earlier failure of the same turn: the agent says so ("Sibling
  tool call errored", "Cancelled: parallel tool call ... errored"), or the same command head
  already failed in this turn and this result has no error line of its own (only the first of
  a burst counts; a command that failed again with its own error failed again).
- `hook`: refused before it ran, by a hook or a policy: the reader says so (a permission rule,
  a sandbox, a Claude Code `Bash` call of a version that writes its `Exit code` banner but
  without one), or the text does (a PreToolUse hook, a pre-commit hook, a sandbox or security
  policy).
- `test`: a red test run (pytest, jest, vitest, go test, cargo test, npm test, mix test, ...):
  normal in test-first work.
- `benign`: an exit status that answers a question rather than reports a failure (`grep`,
  `diff`, `test`, `[`, `which` ... exiting 1).
- `real`: anything else.
- `masked`: a call that reported success because its exit status was hidden (`| head`,
  `| tail`, `|| echo`, `|| true`) while its output carries an error line (`fatal:`, `error:`,
  `Error:`, a traceback). Counted like `real`.

A result answering a tool call id already answered in the same read (a transcript that replays
its history) is read once. A failure is `resolved` when a later run of the same session ran the
same command head successfully; `resolve_later` applies that to failures recorded by an earlier
read.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from skilld.effect.signature import (
    call_heads,
    exit_code_of,
    failing_part,
    first_error_line,
    masked_head,
    normalise_error,
    reads_as_error,
    says_what_failed,
    script_heads,
    shell_script,
    signature,
    wrappers_run,
)
from skilld.redact import redact
from skilld.transcripts.model import Message, Refusal, ToolCall

CLASSES = ("real", "hook", "masked", "test", "benign", "rejected", "cascade")
#: The classes that count for a skill's effect.
COUNTED_CLASSES = ("real", "hook", "masked")
#: `COUNTED_CLASSES` as an SQL list (`class IN ...`).
COUNTED_SQL = "(" + ", ".join(f"'{cls}'" for cls in COUNTED_CLASSES) + ")"

# Phrases are looked for in the lower-cased opening of a result (substring searches: a tick
# classifies every failure it reads, and a regular expression of alternatives is slow). Each
# family's phrases share a few words, looked for first: most results hold none of them.
_REJECTED_WORD = "user"
_REJECTED = (
    "the user doesn't want to proceed",
    "the user doesn't want to take this action",
    "rejected by user",
    "aborted by user",
    "user denied",
    "user declined",
    "user rejected",
    "user refused",
    "request interrupted by user",
)
_CASCADE = (
    "sibling tool call errored",
    "cancelled: parallel tool call",
    "not executed because a previous",
    "skipped because an earlier",
)
_POLICY_WORDS = ("risk", "sandbox", "security", "blocked", "allowed", "denied")
_POLICY = (
    "rejected due to unacceptable risk",
    "sandbox denied",
    "security scan",
    "command blocked",
    "blocked by policy",
    "blocked by the policy",
    "blocked by a policy",
    "blocked by hook",
    "blocked by a hook",
    "blocked by the hook",
    "not allowed by the policy",
    "not allowed by policy",
    "denied by policy",
    "denied by the policy",
    "has been denied",
    "permission for this tool use was denied",  # Claude Code's word to a subagent
)
_HOOK_WORD = re.compile(r"\bhooks?\b")
#: Codex's unified exec: a command that outlives its call keeps running in a session that
#: `write_stdin` polls.
POLL_TOOL = "write_stdin"
_POLL_FAILED = f"{POLL_TOOL} failed"
#: The tools whose result may say the command is still running (Codex's unified exec).
_RUNNING_TOOLS = frozenset({"exec_command", POLL_TOOL})
_RUNNING_WORDS = "Process running with session ID "
_RUNNING = re.compile(rf"^{_RUNNING_WORDS}(\d+)", re.MULTILINE)
_POLLED_SESSION = re.compile(r'"session_id":\s*(\d+)')
_UTC_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
TEST_HEADS = frozenset(
    {
    "pytest", "py.test", "unittest", "nose2", "tox", "nox", "jest", "vitest", "mocha", "ava",
    "karma", "playwright", "cypress", "rspec", "phpunit", "ctest",
    }
) | frozenset(
    {
        "go test", "cargo test", "cargo nextest", "npm test", "yarn test", "pnpm test",
        "bun test", "deno test", "mix test", "dotnet test",
        "gradle test", "gradlew test", "mvn test", "mvn verify", "rake test", "rails test",
        "rake spec", "swift test", "zig test", "stack test", "cabal test", "dune test",
        "hatch test",
    }
)  # fmt: skip
#: `uv run` / `poetry run` / `npm run` are tests only when what they run is a test runner.
_RUNNERS = frozenset(
    {"uv run", "poetry run", "npm run", "yarn run", "pnpm run", "bun run", "make", "gmake", "just"}
)
_RUN_TEST = re.compile(
    r"\b(?:run|make|gmake|just)\s+(-\S+\s+)*(test|tests|pytest|jest|vitest|mocha|check)\b"
)
BENIGN_ON_ONE = frozenset(
    {"grep", "egrep", "fgrep", "rg", "ag", "ack", "diff", "cmp", "test", "[", "[[", "which",
     "pgrep", "git diff", "git grep", "git merge-base", "git ls-files", "git show-ref",
     "command", "type", "comm", "lsof", "pidof", "fuser"}
)  # fmt: skip


#: Programs whose exit 1 means "not there", whatever they print.
LOOKUPS = frozenset({"which", "command", "type", "whereis"})


class ToolRun(NamedTuple):
    seq: int  # absolute index of the tool result message in its session
    ts: str | None  # ISO timestamp of the result when known
    tool: str
    command: str  # command head
    ok: bool  # False when the call failed (any class)


class Failure(NamedTuple):
    seq: int
    ts: str | None
    tool: str
    command: str
    error: str  # first error line, redacted, normalised
    signature: str
    cls: str  # one of CLASSES
    exit_code: int | None
    resolved: bool  # a later call in the session ran the same command head successfully
    #: Where it happened, for a person to find it (`skilld failures show`): the agent's own id
    #: of the call, the command as run (redacted, cut to `RUN_MAX_CHARS`), the error line as
    #: read (redacted, not normalised) and the branch the session was on.
    call_id: str | None = None
    run: str = ""
    line: str = ""
    branch: str | None = None


#: How much of a failing call's command an occurrence keeps.
RUN_MAX_CHARS = 500


class HeadRuns(NamedTuple):
    """A session read's runs of one command head, counted."""

    ok: int
    failed: int
    first_ts: str | None  # the earliest known time of one
    last_ok: int | None  # the seq of the last successful one
    first_seq: int


class Extraction(NamedTuple):
    #: command head -> its runs, counted (a tick reads thousands of calls: no record for each).
    runs: dict[str, HeadRuns]
    failures: list[Failure]


def tally(runs: Iterable[ToolRun]) -> dict[str, HeadRuns]:
    """`runs`, counted by command head."""
    counts: dict[str, list[Any]] = {}
    for run in runs:
        _count(counts, run.command, run.seq, run.ts, run.ok)
    return _counted(counts)


def _count(counts: dict[str, list[Any]], head: str, seq: int, ts: str | None, ok: bool) -> None:
    entry = counts.get(head)
    if entry is None:
        counts[head] = [int(ok), int(not ok), ts, seq if ok else None, seq]
        return
    entry[0 if ok else 1] += 1
    if ts is not None and (entry[2] is None or ts < entry[2]):
        entry[2] = ts
    if ok and (entry[3] is None or seq > entry[3]):
        entry[3] = seq
    if seq < entry[4]:
        entry[4] = seq


def _counted(counts: dict[str, list[Any]]) -> dict[str, HeadRuns]:
    return {head: HeadRuns(*entry) for head, entry in counts.items()}


def combined(first: HeadRuns, second: HeadRuns) -> HeadRuns:
    """Two reads' runs of one head (of one session), counted as one: what `_count` makes of
    the runs of both."""
    return HeadRuns(
        first.ok + second.ok,
        first.failed + second.failed,
        min((ts for ts in (first.first_ts, second.first_ts) if ts is not None), default=None),
        max((seq for seq in (first.last_ok, second.last_ok) if seq is not None), default=None),
        min(first.first_seq, second.first_seq),
    )


def extract(messages: Sequence[Message], first_seq: int, *, cwd: str | None = None) -> Extraction:
    """The runs and failures of `messages`, the session's messages `first_seq ..`.

    A result whose call was read earlier (another read) is named by its tool alone. A Codex
    command left running ("Process running with session ID N") is no run yet: the
    `write_stdin` call that polls it later reports its outcome, as that command's."""
    calls: dict[str, ToolCall] = {}
    counts: dict[str, list[Any]] = {}
    failures: list[Failure] = []
    failed_this_turn: set[str] = set()
    running: dict[str, ToolCall] = {}  # Codex: a process left running, by its session id
    answered: dict[str, str] = {}  # call id -> its result: a replayed one is read once
    for offset, message in enumerate(messages):
        role = message.role
        if role != "tool":
            if role == "assistant":
                for call in message.tool_calls:
                    if call.call_id is not None:
                        calls[call.call_id] = call
            elif role == "user" and failed_this_turn:
                failed_this_turn = set()
            continue
        call_id = message.tool_call_id
        if call_id:
            # An id alone may come back (agents that number calls per turn): a replayed
            # history repeats the result too.
            if answered.get(call_id) == message.text:
                calls.pop(call_id, None)
                continue
            answered[call_id] = message.text
        called = calls.pop(call_id, None) if call_id else None
        # A poll's result is its command's, unless the poll itself failed.
        if called is not None and called.name == POLL_TOOL and not _poll_failed(message):
            called = _polled_command(called, running)
        named = message.tool_name
        if named == POLL_TOOL and not _poll_failed(message):
            named = None
        tool = named or (called.name if called is not None else "tool")
        arguments = called.arguments if called is not None else ""
        if (
            called is not None
            and called.name in _RUNNING_TOOLS
            and (process := _still_running(message.text))
        ):
            running[process.group(1)] = called  # still running: its outcome comes later
            continue
        seq = first_seq + offset
        ts = utc_iso(message.timestamp) if message.timestamp else None
        failure: Failure | None = None
        if message.failed is not True:
            heads = call_heads(tool, arguments)
            if heads and "|" in arguments:  # may hide a status (`masked_head` tells)
                failure = _masked(message, seq, ts, tool, arguments, cwd)
            if failure is None:
                for head in heads or (tool,):
                    _count(counts, head, seq, ts, True)
                for wrapper in wrappers_run(tool, arguments) if heads else ():
                    _count(counts, wrapper, seq, ts, True)
                continue
        else:
            failure = _failure(message, seq, ts, tool, arguments, cwd, failed_this_turn)
        if failure.cls in COUNTED_CLASSES:  # a benign or red-test run sets off no cascade
            failed_this_turn.add(failure.command)
            failed_this_turn.add(_retried(failure, arguments))  # never a head: it holds " | "
        failures.append(failure)
        _count(counts, failure.command, seq, ts, False)
    runs = _counted(counts)
    return Extraction(runs, resolve(failures, runs))


def _poll_failed(message: Message) -> bool:
    return message.text.startswith(_POLL_FAILED)


def _still_running(text: str) -> re.Match[str] | None:
    """Codex's word that the command is still running, with its session id."""
    if text.find(_RUNNING_WORDS, 0, 400) == -1:  # most results: no pattern to run
        return None
    return _RUNNING.search(text[:400])


def _polled_command(called: ToolCall, running: dict[str, ToolCall]) -> ToolCall:
    """The command a Codex `write_stdin` call polls (by its session id), else the call."""
    polled = _POLLED_SESSION.search(called.arguments)
    return running.get(polled.group(1), called) if polled else called


def utc_iso(timestamp: str | None) -> str | None:
    """A transcript's timestamp as UTC ISO to the second (comparable as text), else None."""
    if not timestamp:
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if _UTC_STAMP.fullmatch(timestamp):  # Claude Code's and Codex's form: UTC already
        return f"{timestamp[:19]}+00:00"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def resolve(failures: list[Failure], runs: Mapping[str, HeadRuns]) -> list[Failure]:
    """`failures` with `resolved` set where a later successful run has the same head."""
    resolved = []
    for failure in failures:
        head = runs.get(failure.command)
        last_ok = head.last_ok if head is not None else None
        if not failure.resolved and last_ok is not None and last_ok > failure.seq:
            failure = failure._replace(resolved=True)
        resolved.append(failure)
    return resolved


def classify(
    script: str | None,
    head: str,
    text: str,
    line: str,
    exit_code: int | None,
    repeated: bool,
    refused_by: Refusal | None = None,
) -> str:
    """The class of one failed call (see the module docstring); `line`: its first error line
    (`first_error_line` of `text`). `repeated`: its head already
    failed in this turn and this result has no error line of its own; `refused_by`: who
    refused it, as the agent's reader knows."""
    sample = text[:4000]
    opening = sample[:800].lower()
    if (
        refused_by == "user"
        or (_REJECTED_WORD in opening and any(phrase in opening for phrase in _REJECTED))
        or opening.strip() == "aborted"
    ):
        return "rejected"
    if any(phrase in opening for phrase in _CASCADE):
        return "cascade"
    if refused_by == "policy":
        return "cascade" if repeated else "hook"  # the same refusal again: a follow-on
    if _is_test(head, script) and not _not_started(exit_code, sample):
        return "test"
    # `grep` exiting 1 found nothing (with an error message, a part before it failed);
    # `which` exiting 1 says "not found", which is its answer.
    program = head.split(" ", 1)[0]
    if exit_code == 1 and (
        program in LOOKUPS
        or ((head in BENIGN_ON_ONE or program in BENIGN_ON_ONE) and not reads_as_error(line))
    ):
        return "benign"
    if exit_code in (None, 1) and line in _SILENT and _answers_by_status(head, script):
        return "benign"  # a lookup that found nothing and said nothing
    if repeated:
        return "cascade"
    if _by_hook_or_policy(opening):
        return "hook"
    return "real"


#: What a failed call that printed nothing reads as (Claude Code writes `Error`).
_SILENT = frozenset({"", "Error"})


def _not_started(exit_code: int | None, text: str) -> bool:
    """Whether the command never ran (`pnpm: command not found`, exit 126 or 127): no test
    went red."""
    return exit_code in (126, 127) or "command not found" in text[:2000]


def _answers_by_status(head: str, script: str | None) -> bool:
    """Whether the call's head, or the last part of its script, answers by its exit status
    (`lsof -i:3000`, `dpkg -L x | grep bin/`)."""
    parts = [head, *(script_heads(script)[-1:] if script else ())]
    return any(part in BENIGN_ON_ONE or part.split(" ", 1)[0] in BENIGN_ON_ONE for part in parts)


def _retried(failure: Failure, arguments: str) -> str:
    """What makes a failure the one before it again: the same command failing the same way."""
    return failure.signature


def _failure(
    message: Message,
    seq: int,
    ts: str | None,
    tool: str,
    arguments: str,
    cwd: str | None,
    failed_this_turn: set[str],
) -> Failure:
    text = _output(message)
    head, line = failing_part(tool, arguments, text)
    exit_code = message.exit_code if message.exit_code is not None else exit_code_of(text)
    script = shell_script(tool, arguments)
    ran = script if script is not None else arguments
    failure = _failed(message, seq, ts, tool, ran, head, line, "real", exit_code, cwd)
    # Only a burst's first counts: the same failure again, or the same command failing again
    # with nothing of its own to say, before the user speaks.
    repeated = _retried(failure, arguments) in failed_this_turn or (
        head in failed_this_turn and head != tool and not says_what_failed(line)
    )
    cls = classify(script, head, text, line, exit_code, repeated, message.refused_by)
    return failure._replace(cls=cls)


def _masked(
    message: Message, seq: int, ts: str | None, tool: str, arguments: str, cwd: str | None
) -> Failure | None:
    """A call that reported success while its output shows it failed (see `masked_head`)."""
    text = _output(message)
    head = masked_head(tool, arguments, text)
    if head is None:
        return None
    script = shell_script(tool, arguments)
    cls = "test" if _is_test(head, script) else "masked"
    ran = script if script is not None else arguments
    return _failed(message, seq, ts, tool, ran, head, first_error_line(text), cls, None, cwd)


def _failed(
    message: Message,
    seq: int,
    ts: str | None,
    tool: str,
    ran: str,
    head: str,
    line: str,
    cls: str,
    exit_code: int | None,
    cwd: str | None,
) -> Failure:
    """A failure of `tool` (which ran `ran`: its script, else its arguments)."""
    branch = message.git.branch if message.git is not None else None
    redacted = _redacted(line)
    error = normalise_error(redacted, cwd, branch)
    return Failure(
        seq,
        ts,
        tool,
        head,
        error,
        signature(tool, head, error),
        cls,
        exit_code,
        False,
        message.tool_call_id,
        _run(ran),
        redacted,
        branch,
    )


def _output(message: Message) -> str:
    """A result's text with the end its reader cut off."""
    return f"{message.text}\n{message.tail}" if message.tail else message.text


@functools.lru_cache(maxsize=1024)
def _run(command: str) -> str:
    """A failing call's command as an occurrence keeps it: redacted, then cut (a cut first
    could leave the start of a secret the redaction no longer recognises). Remembered: the
    command that fails again is what the effect measure is about."""
    return redact(command).text[:RUN_MAX_CHARS]


@functools.lru_cache(maxsize=4096)
def _redacted(line: str) -> str:
    """`line` redacted, remembered: the same error line comes back in session after session."""
    return redact(line).text


def _by_hook_or_policy(opening: str) -> bool:
    if "hook" in opening and _HOOK_WORD.search(opening):
        return True
    return any(word in opening for word in _POLICY_WORDS) and any(
        phrase in opening for phrase in _POLICY
    )


def _is_test(head: str, script: str | None) -> bool:
    if head in _RUNNERS:
        return script is not None and bool(_RUN_TEST.search(script))
    return head in TEST_HEADS or head.split(" ", 1)[0] in TEST_HEADS
