"""What a failing tool call *is*, independent of where and when it happened (DESIGN.md §13).

A failure's signature is the tool, the command head and the first error line, normalised:

- The **command head** of a shell call is its program and first sub-command word (`git push`,
  `mix test`, `npm run`), after what only prepares the command: `cd x &&`, `VAR=1`, the
  wrappers `sudo`, `env`, `nohup`, `time`, `nice`, `timeout 30`, `xargs` (with their options),
  a path to the program (`/usr/bin/git` is `git`), `bash -lc "..."` (the script inside is read),
  `python -m pytest` (the module is the program). A chain (`a && b; c`, `a | b`) is attributed
  to the part its error names: the error line's program (`cat: x: No such file`, or a shape
  of `ERROR_AUTHORS`: `error: failed to push some refs` is `git push`, `npm ERR!` is npm), its
  sub-command word, a line of the output opening with a part's program; sudo's own error
  (`sudo: a terminal is required`) is `sudo`'s (`OWNING_WRAPPERS`). Without such evidence, to
  the last part that ran (a pipe's filters, `| head`, `| grep x`, are not it). Any other
  tool's head is its name.
- The **first error line** skips the agent's banner (Claude Code's `Exit code 128`, Codex's
  `Chunk ID / Wall time / Process exited with code 1 / Output:` header, `<tool_use_error>`
  tags, a `[error]` mark), ANSI codes and escaped line breaks, and is searched for in the
  output's first and last lines (a long output's error is often at its end): a line of an
  error's shape (`ERROR_LINES`) first, else one that reads as an error, else the first line
  that is no progress, banner or summary (`NOISE_LINES`: `Checking 12 source files …`,
  `=== lean ===`, `total 48`). Normalising it replaces the working directory, paths, URLs,
  UUIDs, hashes, branch names and numbers by placeholders, so the same failure in another
  session, checkout or branch reads the same.
- A call whose exit status a pipe or `||` hid (`| head`, `| tail`, `|| echo`, `|| true`) but
  whose output holds an error line (`MASKED_ERROR`) failed all the same: `masked_head`.
- The signature is the readable triple `tool | command | error` (a person reads it in
  `skilld failures`, the model reads it in the reflection request), cut to a bounded length.

Everything here is pure and total: hostile text degrades to a shorter head or error, never an
exception. Input is bounded before any pattern runs.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Iterator, Sequence


def _any_words(words: Sequence[str]) -> str:
    return "(" + "|".join(re.escape(word) for word in words) + ")"


#: Argument keys that hold a shell command (Claude Code, Codex, Hermes, DeepSeek Harness).
SHELL_KEYS = ("command", "cmd")
#: The agents' own tools that run no shell command: Claude Code's `Skill` and `SlashCommand`
#: name a `command` of theirs, and the others' arguments (often a whole file) need not be
#: searched for one.
NOT_SHELL_TOOLS = frozenset(
    {
        "Read", "Edit", "MultiEdit", "Write", "NotebookEdit", "NotebookRead", "Grep", "Glob",
        "LS", "TodoWrite", "TodoRead", "Task", "WebFetch", "WebSearch", "Skill", "SlashCommand",
        "ExitPlanMode", "BashOutput", "KillShell", "apply_patch", "update_plan", "view_image",
    }
)  # fmt: skip
#: Programs whose first argument is not a sub-command: their head is the program alone.
PLAIN_PROGRAMS = frozenset(
    {
        "cat",
        "ls",
        "ll",
        "la",
        "head",
        "tail",
        "less",
        "more",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "ag",
        "ack",
        "find",
        "fd",
        "sed",
        "awk",
        "gawk",
        "sort",
        "uniq",
        "wc",
        "cut",
        "tr",
        "tee",
        "cp",
        "mv",
        "rm",
        "rmdir",
        "mkdir",
        "touch",
        "chmod",
        "chown",
        "ln",
        "readlink",
        "realpath",
        "basename",
        "dirname",
        "stat",
        "file",
        "du",
        "df",
        "diff",
        "cmp",
        "comm",
        "patch",
        "test",
        "[",
        "[[",
        "which",
        "whereis",
        "type",
        "echo",
        "printf",
        "pwd",
        "date",
        "sleep",
        "kill",
        "pkill",
        "pgrep",
        "ps",
        "top",
        "jq",
        "yq",
        "curl",
        "wget",
        "ssh",
        "scp",
        "rsync",
        "tar",
        "zip",
        "unzip",
        "gzip",
        "gunzip",
        "zstd",
        "base64",
        "sha256sum",
        "md5sum",
        "env",
        "true",
        "false",
        "open",
        "xdg-open",
        "code",
        "vim",
        "vi",
        "nano",
        "emacs",
        "ping",
        "dig",
        "nslookup",
        "host",
        "tree",
        "nl",
        "od",
        "hexdump",
        "strings",
    }
)
#: Words that only prepare the command that follows (their options are skipped too), and the
#: options of each that take a value (`sudo -u deploy make`, `nice -n 10 make`).
WRAPPER_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "exec": frozenset({"-a"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "xargs": frozenset(
        {"-I", "-i", "-n", "-P", "-d", "-L", "-l", "-s", "-a", "-E", "-e", "--delimiter",
         "--max-args", "--max-procs", "--arg-file", "--replace", "--max-lines"}
    ),
}  # fmt: skip
WRAPPERS = frozenset(WRAPPER_VALUE_OPTIONS)
#: Wrappers whose first word after the options is theirs too (`timeout 30 make`).
_WRAPPERS_WITH_ARGUMENT = frozenset({"timeout"})
#: Wrappers that fail on their own (`sudo: a terminal is required to read the password`):
#: such a failure is the wrapper's, whatever it was to run. (`timeout`, `xargs` and `env` may
#: too, rarely: every successful shell call is looked at for these, so they are not.)
OWNING_WRAPPERS = ("sudo",)
#: What a script that runs one holds.
_WRAPPER_GATES = tuple(f"{wrapper} " for wrapper in OWNING_WRAPPERS)
#: A wrapper where a command starts (the script's start, or after `&&`, `;`, `|`, `(`, and
#: any `VAR=value`).
_WRAPPER_WORD = re.compile(
    rf"(?:^|[;&|(`])\s*(?:[A-Za-z_]\w*=\S*\s+)*{_any_words(OWNING_WRAPPERS)}(?=\s)"
)
#: Parts of a chain that only set up the part that matters.
SETUP_PROGRAMS = frozenset(
    {"cd", "pushd", "popd", "export", "set", "unset", "source", ".", "true", ":", "echo",
     "printf", "sleep", "clear", "ulimit", "umask", "shopt", "alias"}
)  # fmt: skip
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "fish", "ksh"})
#: Programs whose first word is a target the project names (`make vsla_static`), as a
#: runner's is a script (`npm run build` is `npm run`): the head is the program alone.
TARGET_PROGRAMS = frozenset({"make", "gmake", "ninja", "just"})
#: Plain programs that open a part as they are: its head, with no wrapper to look past.
_PLAIN_FIRST = PLAIN_PROGRAMS - WRAPPERS - SHELLS
PYTHONS = re.compile(r"^python(\d+(\.\d+)?)?$")
#: Options of git that take a value (`git -C dir push`).
GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})

MAX_SCRIPT_CHARS = 4000
#: A head is found among the first words of a part.
MAX_PART_CHARS = 400
MAX_WORDS = 16
MAX_ERROR_CHARS = 160
MAX_SCAN_LINES = 60
#: How much of a result is searched for its error line (the banner and error come first).
MAX_BODY_CHARS = 8000
#: How much of the error line is kept before it is redacted and normalised.
MAX_LINE_CHARS = 600

_SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_:-]*(\.[a-z0-9_-]+)*$")
_FILE_EXTENSION = re.compile(
    r"\.(py|js|mjs|cjs|ts|tsx|jsx|sh|bash|rb|go|rs|json|md|txt|ex|exs|toml|ya?ml|lock|cfg|ini)$"
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: `{"command":"..."}` as compact JSON or `json.dumps` writes it, with no escapes in the value.
_PLAIN_COMMAND = re.compile(r'\{"(?:command|cmd)": ?"([^"\\]*)"[,}]')
_PROGRAM = re.compile(r"^[\w.+\[-]")
_NEEDS_QUOTING = re.compile(r"['\"\\]")
_WORD = re.compile(r"""(?:'[^']*'?|"(?:[^"\\]|\\.)*"?|\\.|[^\s'"\\]+)+""")
_QUOTED_PIECE = re.compile(r"""'[^']*'?|"(?:[^"\\]|\\.)*"?|\\.|[^'"\\]+""")
#: A script with none of these but quotes of one kind is words, quoted words and separators:
#: split at its separators, not parsed, when no quoted word holds one (see `_split_parts`).
_SIMPLE_SCRIPT = re.compile(r"^[^\\<`$()]*$")
_CHAINED = re.compile(r"[&|;\n]")
# The lookahead lets the engine skip to a separator's first character.
_SEPARATORS = re.compile(r"(?=[&|;\n])(?:&&|\|\||;|\|&?|\n|(?<![<>&])&(?!>))")
# Shell separators outside quotes; quoted strings are matched first so they are skipped whole.
_SCRIPT_TOKEN = re.compile(
    r"""'[^']*'?|"(?:[^"\\]|\\.)*"?|\\.|(?P<sep>&&|\|\||;|\|&?|\n|(?<![<>&])&(?!>))|<<-?\s*['"]?(?P<doc>\w+)['"]?|[^'"\\&|;\n<]+|[&<]""",
    re.DOTALL,
)

# -- the first error line --------------------------------------------------------------------

_CLAUDE_EXIT = re.compile(r"^Exit code (-?\d+)\s*$")
_CODEX_HEADER = re.compile(
    r"^(Command: .*|Chunk ID: .*|Wall time: .*|Process exited with code -?\d+|"
    r"Exit code: -?\d+|Original token count: .*|Total output lines: .*|Output:)\s*$"
)
_EXIT_LINE = re.compile(
    r"^(?:\[error\] ?)?(?:Exit code:? |Process exited with code )(-?\d+)[ \t]*$", re.MULTILINE
)
_TAG = re.compile(r"</?tool_use_error>")
# Matched against lower-cased text: with IGNORECASE, a line that holds none of the words costs
# several times as much to search.
_ERROR_WORDS = re.compile(
    r"error|fatal|fail|exception|denied|not found|no such|cannot|can't|unable|invalid|"
    r"refused|rejected|blocked|unknown|missing|undefined|permission|timed out|timeout|abort|"
    r"conflict|not allowed|unrecognized|unexpected|panic"
)
_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")
_ANSI = re.compile(r"(?:\x1b|\\u001b|\\x1b)\[[0-9;?]*[A-Za-z]|\[\d{1,3}(?:;\d{1,3})*m")


def _any_of(*patterns: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns))


#: The shapes of lines that state an error, whatever the program: preferred as the error line.
ERROR_LINES = _any_of(
    r"^(?:fatal|error|Error|ERROR|FATAL|panic)(?:\[[\w-]+\])?:",
    r"^ ?! \[(?:remote )?rejected\]",  # git push: why, before `error: failed to push`
    r"^! \S",  # TeX
    r"^Type error: ",
    r"^[⨯✖✗×] \S",
    r"^[Uu]sage: ",
    r"^(?:npm ERR!|npm error|ERR_PNPM_|error Command failed|Usage Error:)",
    r"^[\w./-]+:\d+(?::\d+)?:? (?:fatal )?error\b",
    r"^[\w./-]+\(\d+,\d+\): error\b",
    r"^[A-Za-z_][\w.]*(?:Error|Exception):",
    r"^\*\* \(\w+",
    r"^make(?:\[\d+\])?: \*\*\*",
    r"^[\w./-]+: .*(?:No such file or directory|command not found|Permission denied|"
    r"Operation not permitted|not found)",
)
#: Error lines that only sum up an error another line tells: the error line when no other
#: line of `ERROR_LINES` shape is there.
SUMMARY_LINES = _any_of(
    r"^make(?:\[\d+\])?: \*\*\* (?:\[|Waiting for unfinished)",
    r"^error: could not compile\b",
    r"^error: script \"[^\"]*\" exited with code",
    r"^error: failed to push some refs",
    r"^error Command failed with exit code",
    r"^npm (?:ERR!|error) (?:code|errno|path|command|A complete log|Lifecycle)\b",
)
#: A shell's own report of a part it could not run: `/bin/bash: line 1: cd: build: No such
#: file or directory` is `cd`'s, `bash: nvcc: command not found` is nvcc's.
_SHELL_SAYS = re.compile(r"^(?:/[\w./-]*/)?(?:ba|z|da|k)?sh: (?:line \d+: )?(?=[^\s:]+: )")
#: The compilers whose errors read `file.c:8:9: error: ...` (and the build tools that run them).
COMPILERS = re.compile(
    r"^(?:[\w-]*-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|nvcc|icc|tcc)(?:-[\d.]+)?$|"
    r"^(?:make|gmake|cmake|ninja|meson|bear)$"
)
#: Progress, banner and summary lines: never the error line while another line is there.
NOISE_LINES = _any_of(
    r"^Checking \d+ (?:source )?files?\b",
    r"^(?:Compiling|Building|Running|Downloading|Downloaded|Installing|Resolving|Fetching|"
    r"Finished|Generated|Collecting|Linting|Formatting|Analyzing|Processing|Updating|"
    r"Preparing|Starting|Loading|Checking)\b.*(?:\.\.\.|…|\d)",
    r"^[=*#~_-]{3,}",
    r"^total \d+$",
    r"^\d+ (?:passed|failed|errors?|warnings?|tests?|files?|problems?)\b",
    r"^(?:\[\d+/\d+\]|\(\d+/\d+\)|\d{1,3}%)",
    r"^> \S",
    r"^yarn run v\d",
    r"^Done in \d",
    r"^\$ \S",
    r"^(?:real|user|sys)\s+\d",
)
#: Error lines that say the program whose line it is, beyond a `program: ` opening:
#: (shape, program or program and sub-command).
ERROR_AUTHORS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), author)
    for pattern, author in (
        (r"^error: failed to push some refs|^ ! \[(?:remote )?rejected\]", "git push"),
        (r"^npm (?:ERR!|error|warn)", "npm"),
        (r"^(?:Usage Error: |error )?Couldn't find a script named|^error Command ", "yarn"),
        (r"ERR_PNPM_", "pnpm"),
        (r"^error(?:\[E\d+\])?: could not compile|^error\[E\d+\]", "cargo"),
        (r"^\*\* \(", "mix"),
        (r"^make(?:\[\d+\])?: ", "make"),
        (r"^Traceback \(most recent call last\)|^[A-Za-z_][\w.]*(?:Error|Exception):", "python"),
        (r"^[\w./-]+\(\d+,\d+\): error TS\d+", "tsc"),
        (r"^[\w./-]+:\d+:\d+: (?:fatal )?error\b", "cc"),
        (r"^(?:fatal|hint|error): ", "git"),  # last: other programs write `error: ` too
    )
)
#: Programs a line of an error may name by another name.
_ALIASES: dict[str, tuple[str, ...]] = {
    "npm": ("npx",),
    "tsc": ("npx", "vue-tsc"),
    "python": ("uv", "poetry", "pytest"),
}
#: Programs that only filter a pipe's text: never the part of a pipeline that failed.
PIPE_FILTERS = frozenset(
    {"head", "tail", "grep", "egrep", "fgrep", "rg", "sort", "uniq", "wc", "tee", "cut", "tr",
     "less", "more", "cat", "sed", "awk", "gawk", "jq", "yq", "column", "nl", "xargs"}
)  # fmt: skip
#: What hides a command's exit status: a pipe into `head`/`tail`, or `|| echo` / `|| true`.
MASKS = re.compile(
    r"\|\s*(?:head|tail|grep|egrep|rg|sed|awk|sort|uniq|tee|cut|less|more|cat|jq)\b|"
    r"\|\|\s*(?:echo|true|:)(?:\s|$|;)"
)
#: The lines that show a masked command failed.
MASKED_ERROR = re.compile(
    r"(?:fatal|error|Error)(?:\[[\w-]+\])?: |Traceback \(most recent call last\)|"
    r"[\w./-]+:\d+:\d+: (?:fatal )?error\b|make(?:\[\d+\])?: \*\*\* |"
    r"(?:/[\w./-]*/)?(?:ba|z|da|k)?sh: .*(?:command not found|No such file or directory)"
)
#: The message a `|| echo "..."` prints when the part before it failed.
_ECHOED_ON_FAILURE = re.compile(r"\|\|\s*echo\s+([\"'])([^\"'\n]{3,200})\1")
#: Heads that only show what was written before (a log, a diff): their text is no error.
SHOWING_HEADS = frozenset(
    {"git log", "git show", "git diff", "git blame", "git grep", "git reflog", "journalctl",
     "docker logs", "kubectl logs", "gh run", "gh pr"}
)  # fmt: skip

# -- normalisation ---------------------------------------------------------------------------

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>)\]]+", re.IGNORECASE)
_GCC_QUOTED = re.compile(r"‘[^’\n]{1,200}’")
_AKA = re.compile(r" \{aka ‘<name>’\}")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_PATH = re.compile(
    r"(?<![\w<])(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?|(?<![\w</.-])[\w.@+-]+(?:/[\w.@+-]+)+/?"
)
_FILE = re.compile(r"(?<![\w<])[\w-]+\.(?:py|js|ts|tsx|go|rs|rb|ex|exs|java|c|h|cpp|json|md)\b")
_HASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b")
_BRANCH = re.compile(
    r"(?P<lead>\b(?:(?:branch|upstream|checkout|switch(?:ed)?\s+to|ref)\s+['\"]?|"
    r"(?:refs/heads/|refs/remotes/|origin/)))"
    r"(?P<name>\w(?:[\w./-]*\w)?)(?P<close>['\"]?)",
    re.IGNORECASE,
)
_BRANCH_WORDS = frozenset(
    {"has", "is", "to", "the", "a", "an", "with", "and", "or", "not", "of", "for", "name",
     "branch", "named", "that", "was", "does", "from", "in", "on", "set", "no"}
)  # fmt: skip
_NUMBER = re.compile(r"(?<![\w<])[-+]?\d+(?:\.\d+)?(?:ms|s|m|h|kb|mb|gb|%)?\b", re.IGNORECASE)
_DIGIT = re.compile(r"\d")
_BRANCH_HINTS = ("branch", "upstream", "checkout", "switch", "ref", "origin/")


def shell_script(tool: str, arguments: str) -> str | None:
    """The shell text of a call whose arguments name one (`command` or `cmd`: a string or an
    argv list), else None."""
    return _shell_script(arguments) if _names_a_script(tool, arguments) else None


def _names_a_script(tool: str, arguments: str) -> bool:
    """Whether a call may hold a shell command: not an agent's own tool, and arguments with a
    `command` or `cmd` key."""
    if tool in NOT_SHELL_TOOLS or not arguments.startswith("{"):
        return False
    return '"command"' in arguments or '"cmd"' in arguments


def _shell_script(arguments: str) -> str | None:
    plain = _PLAIN_COMMAND.match(arguments)
    if plain is not None:  # compact JSON whose command has no escapes: no decoding needed
        return plain.group(1)
    return _decoded_script(arguments)


def _decoded_script(arguments: str) -> str | None:
    try:
        decoded = json.loads(arguments)
    except (ValueError, RecursionError):
        return _cut_json_command(arguments)
    if not isinstance(decoded, dict):
        return None
    for key in SHELL_KEYS:
        value = decoded.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return _argv_script(value)
    return None


def call_heads(tool: str, arguments: str) -> tuple[str, ...]:
    """The heads of a shell call's script (see `script_heads`); () for another tool's call."""
    return _call_heads(arguments) if _names_a_script(tool, arguments) else ()


@functools.lru_cache(maxsize=4096)
def _call_heads(arguments: str) -> tuple[str, ...]:
    """`call_heads` of a shell call, remembered: agents run the same commands over and over.
    (Other calls are not kept: their arguments, a file's content, are large and rarely seen
    twice.)"""
    script = _shell_script(arguments)
    return _script_heads(script[:MAX_SCRIPT_CHARS]) if script is not None else ()


def command_head(tool: str, arguments: str, error: str = "") -> str:
    """The command head of a call: for a shell call, the program and first sub-command word
    of the part of its chain that `error` (the result text) points at; else the tool name."""
    heads = call_heads(tool, arguments)
    if not heads:
        return tool
    if len(heads) == 1 and not error:
        return heads[0]
    return attribute(heads, error, shell_script(tool, arguments) or "")


def failing_part(tool: str, arguments: str, text: str) -> tuple[str, str]:
    """A failed call's command head (see `command_head`) and its first error line, the
    result `text` read once for both."""
    lines = error_lines(text)
    line = _first_error(lines)
    heads = call_heads(tool, arguments)
    if not heads:
        return tool, line
    return _attributed(heads, lines, line, shell_script(tool, arguments) or ""), line


def script_heads(script: str) -> list[str]:
    """The head of each part of a shell script that does real work, in order (setup parts such
    as `cd x` only when nothing else is there)."""
    return list(_script_heads(script[:MAX_SCRIPT_CHARS]))


def _script_heads(script: str) -> tuple[str, ...]:
    """`script_heads` of a script already cut to its bound."""
    if "…[cut " in script and (cut := _MIDDLE_CUT.search(script)) is not None:
        start, end = script[: cut.start()], script[cut.end() :]
        if _open_quote(start) is not None and _open_quote(start + end) is not None:
            return _cut_script_heads(start, end)  # cut across words: the quotes do not pair
        # Cut inside one quoted word (or between words): the script reads as it is.
    if not _CHAINED.search(script) and "<<" not in script:
        head = _part_head(script)  # one simple command, however it is quoted
        return (head,) if head is not None else ()
    parts = _split_parts(script)
    if parts is None:
        parts = list(_parts(script))
    heads: list[str] = []
    setup: list[str] = []  # parts that open with a setup program: their head is one
    for part in parts:
        first = part[:MAX_PART_CHARS].split(None, 1)
        if first and first[0] in SETUP_PROGRAMS:
            setup.append(part)  # its head is a setup head, needed only if no part has another
            continue
        head = _part_head(part)
        if head is None:
            continue
        if head.split(" ", 1)[0] in SETUP_PROGRAMS:
            setup.append(part)
        elif head not in heads:
            heads.append(head)
    if heads:
        return tuple(heads)
    return next(((h,) for part in setup if (h := _part_head(part)) is not None), ())


#: Where a reader cut a long command in its middle (`transcripts.normalise`).
_MIDDLE_CUT = re.compile(r"…\[cut \d+ chars\]…")
_SEPARATOR = re.compile(r"&&|\|\||[;|\n]")


def _open_quote(text: str) -> str | None:
    """The quote still open at the end of shell `text`, if any."""
    quote: str | None = None
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
    return quote


def _cut_script_heads(start: str, end: str) -> tuple[str, ...]:
    """The heads of a command its reader cut in the middle: its start's, then those of its
    end after the end's first separator (the end opens inside a word or a quote)."""
    separator = _SEPARATOR.search(end)
    later = _script_heads(end[separator.end() :]) if separator is not None else ()
    first = _script_heads(start)
    if not later:
        return first
    ran = [head for head in first if _program_of(head) not in SETUP_PROGRAMS]
    return tuple(dict.fromkeys([*ran, *later]))


def attribute(heads: Sequence[str], error: str, script: str = "") -> str:
    """The head of the part of `script` (whose parts' heads are `heads`) that `error`, the
    result's text, names (see the module docstring); else the last part that ran."""
    lines = error_lines(error)
    return _attributed(heads, lines, _first_error(lines), script)


def _attributed(heads: Sequence[str], lines: list[str], line: str, script: str) -> str:
    """`attribute` of a result whose `error_lines` are `lines` and first error line `line`."""
    wrapper = _wrapper_error(line, script)
    if wrapper is not None:
        return wrapper
    if line.startswith(_SHELL_NAMES) and (setup := _setup_failed(line)) is not None:
        return setup
    if len(heads) == 1:
        return heads[0]
    named = _named_by(heads, line)
    if named is not None:
        return named
    for text_line in lines:
        program = text_line.split(": ", 1)[0] if ": " in text_line[:40] else None
        if program is not None and (named := _of_program(heads, program, text_line)):
            return named
    lowered = "\n".join(lines).lower()
    for head in reversed(heads):
        if _subcommand_in(head, lowered):
            return head
    return _last_ran(heads, script)


_SHELL_NAMES = ("/", "bash:", "sh:", "zsh:", "dash:", "ksh:")


def _setup_failed(line: str) -> str | None:
    """The setup program (`cd`) whose failure the shell reports in `line`: the rest of the
    chain never ran."""
    shell = _SHELL_SAYS.match(line)
    if shell is None:
        return None
    program = line[shell.end() :].split(": ", 1)[0]
    return program if program in SETUP_PROGRAMS else None


def _named_by(heads: Sequence[str], line: str) -> str | None:
    """The head whose program wrote `line`: its `program: ` opening or an `ERROR_AUTHORS`
    shape."""
    if not line:
        return None
    shell = _SHELL_SAYS.match(line)
    if shell is not None:  # the shell names the part it could not run
        line = line[shell.end() :]
    program = line.split(": ", 1)[0] if ": " in line[:40] else None
    if program is not None and (named := _of_program(heads, program, line)):
        return named
    for pattern, author in ERROR_AUTHORS:
        if pattern.search(line) and (named := _of_program(heads, author, line)):
            return named
    lowered = line.lower()
    return next((head for head in reversed(heads) if _subcommand_in(head, lowered)), None)


def _of_program(heads: Sequence[str], author: str, line: str) -> str | None:
    """Among the heads `author` (a program, or a program and its sub-command) names, the one
    whose sub-command word `line` holds, else the last."""
    program = author.split(" ", 1)[0]
    mine = [
        head
        for head in heads
        if head == author
        or (" " not in author and _program_of(head) in (program, *_ALIASES.get(program, ())))
        or (program == "python" and PYTHONS.match(_program_of(head)) is not None)
        or (program == "cc" and COMPILERS.match(_program_of(head)) is not None)
    ]
    if not mine:
        return None
    lowered = line.lower()
    return next((head for head in reversed(mine) if _subcommand_in(head, lowered)), mine[-1])


def _program_of(head: str) -> str:
    return head.split(" ", 1)[0]


def _subcommand_in(head: str, lowered: str) -> bool:
    words = head.split(" ")
    # The substring first: most heads' words are not in the text at all.
    return (
        len(words) > 1
        and words[1] in lowered
        and re.search(rf"\b{re.escape(words[1])}\b", lowered) is not None
    )


def _wrapper_error(line: str, script: str) -> str | None:
    """The wrapper whose own error `line` is (`sudo: a terminal is required ...`), when the
    script runs that wrapper."""
    if ": " not in line[:12]:
        return None
    program = line.split(": ", 1)[0]
    return program if program in OWNING_WRAPPERS and program in _wrappers_in(script) else None


def wrappers_run(tool: str, arguments: str) -> tuple[str, ...]:
    """The wrappers of `OWNING_WRAPPERS` a shell call runs: a successful call is a run of
    each (a failure of the wrapper itself is signed with its name)."""
    for gate in _WRAPPER_GATES:
        if gate in arguments:
            break
    else:
        return ()  # most calls: no wrapper at all
    script = shell_script(tool, arguments)
    return _wrappers_in(script) if script is not None else ()


@functools.lru_cache(maxsize=1024)
def _wrappers_in(script: str) -> tuple[str, ...]:
    found = {match.group(1) for match in _WRAPPER_WORD.finditer(script[:MAX_SCRIPT_CHARS])}
    return tuple(sorted(found))


def _last_ran(heads: Sequence[str], script: str) -> str:
    """The last part of a chain that ran, a pipe's filters aside (a failing pipeline's error
    is its producer's)."""
    if "|" in script:
        producers = [head for head in heads if _program_of(head) not in PIPE_FILTERS]
        return producers[-1] if producers else heads[0]  # `grep x | head`: the grep
    return heads[-1]


def masked_head(tool: str, arguments: str, text: str) -> str | None:
    """The head of a shell call that reported success while its output holds an error line
    (`MASKED_ERROR`), because a pipe or `||` hid the exit status (`MASKS`); else None. A part
    that only shows text (`cat`, `grep`, `git log`) is not masked by what the text says."""
    # The arguments' JSON holds a mask's `|` as it is: looked for before anything is decoded.
    if not MASKS.search(arguments):
        return None
    heads = _maskable_heads(call_heads(tool, arguments))
    if not heads:
        return None  # `grep x | head`: only parts that show text
    if not _may_hold_error(text) and ("||" not in arguments or "echo" not in arguments):
        return None
    script = shell_script(tool, arguments)
    if script is None or not MASKS.search(script):
        return None
    lines = error_lines(text)
    if not any(MASKED_ERROR.match(line) for line in lines) and not _echoed_failure(script, lines):
        return None
    return _attributed(heads, lines, _first_error(lines), script)


@functools.lru_cache(maxsize=1024)
def _maskable_heads(heads: tuple[str, ...]) -> tuple[str, ...]:
    """The heads whose failure a mask may hide: not a part that only shows text."""
    return tuple(
        head
        for head in heads
        if _program_of(head) not in PLAIN_PROGRAMS
        and _program_of(head) not in PIPE_FILTERS
        and head not in SHOWING_HEADS
    )


def _may_hold_error(text: str) -> bool:
    """Whether `text` holds a word of `MASKED_ERROR` (substring tests: no pattern runs over
    the output of every masked call that went well)."""
    return (
        "rror:" in text
        or "fatal:" in text
        or "Traceback (" in text
        or "rror[" in text
        or "not found" in text
        or "No such file" in text
        or "***" in text  # make
    )


def _echoed_failure(script: str, lines: list[str]) -> bool:
    """Whether the output holds, as a line of its own, what the script's `|| echo "..."`
    prints when the part before it failed, and that message says it failed (`|| echo "Build
    failed"`, not `|| echo "no matches"`)."""
    return any(
        reads_as_error(message) and message in lines
        for message in (match.group(2).strip() for match in _ECHOED_ON_FAILURE.finditer(script))
    )


def first_error_line(text: str) -> str:
    """The line that says what went wrong, without the agent's own banner."""
    return _first_error(error_lines(text))


def _first_error(lines: list[str]) -> str:
    """`first_error_line` of a result whose `error_lines` are `lines`."""
    if not lines:
        return ""
    structured = _structured_error(lines)
    if structured is not None:
        return structured
    for index, line in enumerate(lines):
        if line.startswith(_TRACEBACK):
            window = lines[index + 1 : index + MAX_SCAN_LINES]
            raised = [x for x in window if _EXCEPTION_LINE.match(x)]
            return (raised[-1] if raised else line)[:MAX_LINE_CHARS]
    # Every shape opens with `^`: matched at a line's start only, not searched along it.
    shaped = next((line for line in lines if ERROR_LINES.match(line)), None)
    if shaped is not None:
        if SUMMARY_LINES.match(shaped):  # `make: *** [all] Error 2`: the error is told above
            told = (x for x in lines if ERROR_LINES.match(x) and not SUMMARY_LINES.match(x))
            shaped = next(told, shaped)
        return shaped[:MAX_LINE_CHARS]
    quiet = [line for line in lines if not NOISE_LINES.match(line)]
    for line in quiet:
        if reads_as_error(line):
            return line[:MAX_LINE_CHARS]
    return (quiet or lines)[0][:MAX_LINE_CHARS]


def error_lines(text: str) -> list[str]:
    """The lines of a result an error line is looked for in: its first and its last
    `MAX_SCAN_LINES`, without the agent's banner, ANSI codes or empty lines, escaped line
    breaks split."""
    lines = _body_lines(text)
    if len(lines) > 2 * MAX_SCAN_LINES:
        return lines[:MAX_SCAN_LINES] + lines[-MAX_SCAN_LINES:]
    return lines


def says_what_failed(line: str) -> bool:
    """Whether an error line tells something of its own: an error's shape or error words."""
    return ERROR_LINES.match(line) is not None or reads_as_error(line)


def reads_as_error(line: str) -> bool:
    """Whether a line says something went wrong (`error`, `fatal`, `No such file`, ...), in any
    case."""
    return _ERROR_WORDS.search(line.lower()) is not None


def exit_code_of(text: str) -> int | None:
    """The exit code a result's banner states (Claude Code `Exit code N`, Codex `Process exited
    with code N` / `Exit code: N`), else None."""
    if text.find("code ", 0, 600) == -1:  # both banners say it: most results need no pattern
        return None
    match = _EXIT_LINE.search(text[:600])
    return int(match.group(1)) if match else None


def normalise_error(text: str, cwd: str | None, branch: str | None = None) -> str:
    """One error line with what differs between sessions replaced: the working directory,
    the branch, URLs, UUIDs, paths, file names, hashes, branch names, numbers; a hint the
    tool adds after it (`File does not exist. Note: your current working directory is ...`)
    left out."""
    line = text[:MAX_LINE_CHARS]
    if ". Note: " in line:
        line = line.split(". Note: ", 1)[0] + "."
    if "‘" in line:  # GCC quotes the names an error is about: the same error names others
        line = _AKA.sub("", _GCC_QUOTED.sub("‘<name>’", line))
    if cwd and len(cwd) > 1:
        line = line.replace(cwd.rstrip("/"), "<cwd>")
    return _normalised(line, branch if branch and len(branch) > 1 and branch in line else None)


@functools.lru_cache(maxsize=4096)
def _normalised(line: str, branch: str | None) -> str:
    """`normalise_error` after the working directory, remembered: the same failure comes back
    (that is what the effect measure counts), its line the same wherever the session ran."""
    # Each pattern runs only where the line holds what it replaces: this runs per failure.
    if branch is not None:
        line = _replace_name(line, branch, "<branch>")
    if "://" in line:
        line = _URL.sub("<url>", line)
    has_digit = _DIGIT.search(line) is not None
    if has_digit and "-" in line:
        line = _UUID.sub("<id>", line)
    lowered = line.lower()
    if any(word in lowered for word in _BRANCH_HINTS):
        line = _BRANCH.sub(_branch_placeholder, line)
    if "/" in line:
        line = _PATH.sub("<path>", line)
    if "." in line:
        line = _FILE.sub("<file>", line)
    if has_digit:
        line = _NUMBER.sub("<n>", _HASH.sub("<hash>", line))
    return " ".join(line.split())[:MAX_ERROR_CHARS]


def _replace_name(line: str, name: str, placeholder: str) -> str:
    r"""`line` with each `name` that is not part of a longer name (no word character, `/` or
    `-` on either side) replaced: what `(?<![\w/-])NAME(?![\w/-])` finds, without compiling a
    pattern for every session's branch."""
    pieces: list[str] = []
    start = position = 0
    while (found := line.find(name, position)) != -1:
        end = found + len(name)
        if not _name_char(line[found - 1 : found]) and not _name_char(line[end : end + 1]):
            pieces += [line[start:found], placeholder]
            start = position = end
        else:
            position = found + 1
    return "".join(pieces) + line[start:] if pieces else line


def _name_char(char: str) -> bool:
    return char.isalnum() or char in ("_", "/", "-")


def signature(tool: str, command: str, error: str) -> str:
    """The readable, stable identity of a failure: `tool | command | error`."""
    return f"{tool} | {command} | {error}"


# -- helpers ---------------------------------------------------------------------------------


def _parts(script: str) -> Iterator[str]:
    """The simple commands of a script, split at `&&`, `||`, `;`, `|`, `&` and newlines
    outside quotes; a here-document's body is skipped."""
    current: list[str] = []
    skip_to: str | None = None
    for match in _SCRIPT_TOKEN.finditer(script):
        token = match.group(0)
        if skip_to is not None:
            if match.group("sep") == "\n" or "\n" in token:
                rest = script[match.end() :]
                end = re.search(rf"(?m)^\s*{re.escape(skip_to)}\s*$", rest)
                if end is None:
                    break
                skip_to = None
                yield from _parts(rest[end.end() :])
                return
            continue
        if match.group("doc"):
            skip_to = match.group("doc")
            continue
        if match.group("sep") is not None:
            yield "".join(current)
            current = []
        else:
            current.append(token)
    if current:
        yield "".join(current)


def _split_parts(script: str) -> list[str] | None:
    """The parts of a script with no escapes, substitutions or redirected input and quotes of
    one kind, split at every separator; None when a quoted word holds a separator (a part
    would then hold an odd number of quotes) or the script is not that simple."""
    if not _SIMPLE_SCRIPT.match(script):
        return None
    quote = "'" if "'" in script else '"'
    if quote == "'" and '"' in script:
        return None
    parts = _SEPARATORS.split(script)
    return parts if all(part.count(quote) % 2 == 0 for part in parts) else None


def _part_head(part: str) -> str | None:
    first = part[:MAX_PART_CHARS].split(None, 1)
    if not first:
        return None
    program = first[0]
    if program in _PLAIN_FIRST:
        return program  # `cat x`, `sed -n '1,9p' y`: what `_parsed_head` finds, unparsed
    if _opens_as_itself(program):
        # `git commit -m 'x'`, `npm run build`: what `_parsed_head` finds, without its steps,
        # when no word it reads is quoted (quotes elsewhere change no word before them)
        arguments = part[:MAX_PART_CHARS].split()[1:MAX_WORDS]
        head, read = _subcommand(program, arguments)
        if not any(_NEEDS_QUOTING.search(word) for word in (program, *arguments[:read])):
            return head
    return _parsed_head(part)


@functools.lru_cache(maxsize=1024)
def _opens_as_itself(word: str) -> bool:
    """Whether a part whose first word is `word` is that program's: no assignment, wrapper,
    path, shell, Python or npx to look past, and no plain program."""
    return (
        _PROGRAM.match(word) is not None
        and _ASSIGNMENT.match(word) is None
        and "/" not in word
        and ")" not in word
        and word not in WRAPPERS
        and word not in SHELLS
        and word not in PLAIN_PROGRAMS
        and word not in ("npx", "bunx", "pnpx")
        and PYTHONS.match(word) is None
    )


def _parsed_head(part: str) -> str | None:
    words = _words(part)
    while words and (_ASSIGNMENT.match(words[0]) or words[0] in ("(", "{", "!")):
        words = words[1:]
    wrapper = None
    while words and words[0] in WRAPPERS:
        wrapper, words = words[0], _past_wrapper(words[0], words[1:])
        while words and _ASSIGNMENT.match(words[0]):  # `timeout 30 FOO=1 sudo make`
            words = words[1:]
    if not words:
        return wrapper  # a wrapper with no command: `xargs` runs `echo`, `sudo -v` is sudo's
    program = words[0].rstrip(")").rsplit("/", 1)[-1]
    if not program or not _PROGRAM.match(program):
        return None
    arguments = words[1:]
    if program in SHELLS:
        inner = _inline_script(arguments)
        if inner is not None:
            heads = script_heads(inner)
            return heads[0] if heads else None
    if PYTHONS.match(program) and len(arguments) > 1 and arguments[0] == "-m":
        return arguments[1]
    if program in ("npx", "bunx", "pnpx") and arguments:
        rest = [w for w in arguments if not w.startswith("-")]
        return rest[0].rsplit("/", 1)[-1] if rest else program
    if program in PLAIN_PROGRAMS or PYTHONS.match(program):
        return program
    return _with_subcommand(program, arguments)


def _past_wrapper(wrapper: str, words: list[str]) -> list[str]:
    """The words after a wrapper's options (and their values) and its own argument."""
    value_options = WRAPPER_VALUE_OPTIONS[wrapper]
    index = 0
    while index < len(words):
        word = words[index]
        if word in value_options:
            index += 2
        elif word.startswith("-") or _ASSIGNMENT.match(word):
            index += 1
        else:
            break
    if wrapper in _WRAPPERS_WITH_ARGUMENT:
        index += 1
    return words[index:]


def _with_subcommand(program: str, arguments: list[str]) -> str:
    return _subcommand(program, arguments)[0]


def _subcommand(program: str, arguments: list[str]) -> tuple[str, int]:
    """The program and its sub-command word if it has one, and how many of `arguments` that
    took to tell."""
    if _takes_no_subcommand(program):
        return program, 0  # `make vsla_static`, `gcc -I include t.c`
    skip_value = False
    for index, word in enumerate(arguments):
        if skip_value:
            skip_value = False
            continue
        if word.startswith("-"):
            skip_value = program == "git" and word in GIT_VALUE_OPTIONS
            continue
        if _SUBCOMMAND.match(word) and not _FILE_EXTENSION.search(word):
            return f"{program} {word}", index + 1
        return program, index + 1
    return program, len(arguments)


@functools.lru_cache(maxsize=1024)
def _takes_no_subcommand(program: str) -> bool:
    return program in TARGET_PROGRAMS or COMPILERS.match(program) is not None


def _inline_script(arguments: list[str]) -> str | None:
    for index, word in enumerate(arguments):
        if word.startswith("-") and "c" in word.lstrip("-") and index + 1 < len(arguments):
            return arguments[index + 1]
    return None


def _words(part: str) -> list[str]:
    """The first shell words (what a head is made of), quotes removed; a cut or unbalanced
    quote ends its word at the end."""
    part = part[:MAX_PART_CHARS]
    if not _NEEDS_QUOTING.search(part):
        return part.split()[:MAX_WORDS]
    return [_unquote(word) for word in _WORD.findall(part)[:MAX_WORDS]]


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word and "\\" not in word:
        return word
    return "".join(
        piece[1:-1] if len(piece) > 1 and piece[0] == piece[-1] and piece[0] in "'\"" else
        piece.lstrip("'\"").replace("\\", "")
        for piece in _QUOTED_PIECE.findall(word)
    )  # fmt: skip


def _argv_script(argv: list[str]) -> str:
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in SHELLS and argv[1].startswith("-"):
        return argv[2]
    return shlex.join(argv)


def _cut_json_command(arguments: str) -> str | None:
    """The command of arguments cut mid-JSON (agents' arguments are stored cut)."""
    match = re.search(r'"(?:command|cmd)"\s*:\s*"((?:[^"\\]|\\.)*)', arguments)
    if match is None:
        return None
    try:
        value: str = json.loads(f'"{match.group(1)}"')
    except ValueError:
        return match.group(1)
    return value


def _body_lines(text: str) -> list[str]:
    if len(text) > MAX_BODY_CHARS:  # its head and its tail, where errors are
        text = f"{text[: MAX_BODY_CHARS // 2]}\n{text[-MAX_BODY_CHARS // 2 :]}"
    if "tool_use_error>" in text:
        text = _TAG.sub("", text)
    if "\x1b" in text or "[0m" in text or "\\u001b" in text or "\\x1b" in text:
        text = _ANSI.sub("", text)
    # Some hooks and tools print escaped line breaks: they separate lines all the same.
    if "\\n" in text or "\\r" in text:
        text = text.replace("\\r\\n", "\n").replace("\\n", "\n").replace("\\r", "")
    text = text.strip()
    text = text.removeprefix("[error]").strip()
    lines = [line.strip() for line in text.splitlines()]
    while lines and (not lines[0] or _CLAUDE_EXIT.match(lines[0]) or _CODEX_HEADER.match(lines[0])):
        lines.pop(0)
    return [line for line in lines if line]


def _structured_error(lines: list[str]) -> str | None:
    """The error of a JSON result (`{"error": ...}`, `{"output": ..., "exit_code": 1}`)."""
    if not lines[0].startswith("{"):
        return None
    try:
        decoded = json.loads("\n".join(lines))
    except (ValueError, RecursionError):
        return None
    if not isinstance(decoded, dict):
        return None
    for key in ("error", "stderr", "output", "content", "message"):
        value = decoded.get(key)
        if isinstance(value, str) and value.strip():
            return first_error_line(value)
    return None


def _branch_placeholder(match: re.Match[str]) -> str:
    name = match.group("name")
    if name.lower() in _BRANCH_WORDS or name.startswith("<"):
        return match.group(0)
    return f"{match.group('lead')}<branch>{match.group('close')}"
