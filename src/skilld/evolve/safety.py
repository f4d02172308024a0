"""Content that must not become a persistent instruction without a person's approval.

A transcript can carry text written by anyone (a web page, a tool's output), and so can what an
agent writes through the MCP tools. A skill that tells the agent to download code and run it is
held for review even when `publish = "auto"`.

The check reads a skill the way a shell reads the commands in it, not line by line. The text
is cut into regions (each fenced block of any language; each other line, indented code and
inline code spans included, without its list marker; a line that ends in `\\`, `|` or `&&`
joined to the next), and each region is parsed into a command stream: chains split on `&&`,
`||`, `;`, `&` and newlines, pipelines on `|`, command substitutions (`$(…)`, backticks),
process substitutions (`<(…)`) and groups parsed into commands of their own. Quotes are not
honoured: a quoted `|` counts as a pipe, so text that only shows a command is judged as if it
ran, which errs toward a person looking. Each command is then seen through its wrappers
(`sudo -u root`, `env`, `xargs`, `nohup`, `sh -c`, `su -c`, …) to the program it runs, and the
whole skill (body, description and when-to-use) is judged at once, so a download on one line
and its run on another are one finding. What a download was unpacked into and then run
(`tar xf x.tgz && ./x/install`) is not traced, nor a file name only running the text would
tell (`curl -O "$(cat url.txt)"`).

Everything here is linear in the text, which a model or an agent wrote: one pass to cut
regions, one to parse each, one to judge; nesting deeper than `_MAX_DEPTH` is read as plain
text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

PIPED = "download piped to a shell"
SHELL_RUNS = "shell running a download"
EVAL = "eval of a download"
POWERSHELL = "powershell download and execute"
INTERPRETER_RUNS = "interpreter running a download"
THEN_EXECUTE = "download then execute"
CODE_RUNS = "code running a download"
#: The order findings are named in.
PATTERNS = (PIPED, SHELL_RUNS, EVAL, POWERSHELL, INTERPRETER_RUNS, THEN_EXECUTE, CODE_RUNS)

_MAX_DEPTH = 24

#: Programs that fetch from the network when they are the command.
_FETCHERS = frozenset(
    {"curl", "wget", "wget2", "fetch", "aria2c", "iwr", "irm"}
    | {"invoke-webrequest", "invoke-restmethod"}
)
#: Of those, the ones also recognised further along a line of prose ("Run: curl https://…").
_NAMED_FETCHERS = _FETCHERS - {"fetch"}
#: .NET download methods PowerShell one-liners call.
_DOTNET_DOWNLOAD = re.compile(r"\.download(?:string|data|file)\b", re.IGNORECASE)
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh"})
_SCRIPTING = frozenset({"perl", "ruby", "node", "nodejs", "php", "lua", "luajit", "tclsh"})
_PYTHON = re.compile(r"python[0-9.]*|pypy[0-9.]*")
_POWERSHELL = frozenset({"pwsh", "powershell", "powershell.exe", "pwsh.exe"})
_IEX = frozenset({"iex", "invoke-expression"})
_SOURCE = frozenset({"source", "."})
#: Commands that run the rest of their words as a command, with the options that take a value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset(
        {"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "--user", "--group"}
    ),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "--unset", "--chdir"}),
    "xargs": frozenset(
        {"-I", "-i", "-n", "-P", "-L", "-l", "-d", "-E", "-e", "-s", "-a", "--delimiter"}
    ),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "--class", "--classdata"}),
    "chrt": frozenset(),
    "taskset": frozenset(),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "busybox": frozenset(),
    "caffeinate": frozenset(),
    "unbuffer": frozenset(),
}
#: Wrappers whose first operand is not yet the command (`timeout 60 bash`, `taskset 3 sh`).
_WRAPPER_OPERAND = frozenset({"timeout", "taskset", "chrt"})
#: `sudo -s`, `sudo -i`, `doas -s`: a shell of its own, which reads its input.
_SHELL_OPTION = re.compile(r"-[A-Za-z]*[si][A-Za-z]*|--shell|--login")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_DECLARATIONS = frozenset({"export", "local", "readonly", "declare", "typeset"})
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_LIST_MARKER = re.compile(r"[ \t]*(?:>[ \t]*)*(?:(?:[-*+]|[0-9]{1,9}[.)])[ \t]+)?")
_FENCE = re.compile(r"[ \t]*+(`{3,}|~{3,})")
#: `<ACCOUNT_ID>` in documentation: a value to fill in, not a redirection.
_PLACEHOLDER = re.compile(r"<[A-Za-z_][\w.:/-]*+>")
_CONTINUATION = re.compile(r"\\\r?\n")
#: Python's, or JavaScript's, way to run what it fetched: both in one block of code, one code
#: span, or one line running an interpreter's `-c`.
_CODE_FETCH = re.compile(
    r"\b(?:urlopen|urlretrieve|requests\.get|httpx\.get|urllib3?\.request|fetch)\s*+\(",
    re.IGNORECASE,
)
_CODE_EXEC = re.compile(
    r"(?<![\w.$])(?:exec|eval|execfile)\s*+\(\s*+[^)\s]|\bnew\s++Function\s*+\("
)
_INLINE_CODE = re.compile(r"`[^`]++`")
_ONE_LINER = re.compile(r"\b(?:python[0-9.]*+|pypy[0-9.]*+|node|perl|ruby|php)\s++-[ceEr]\b")


# -- the command stream --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Word:
    """A word as written (quotes kept), with the scripts of the substitutions and groups in it."""

    text: str
    inner: tuple[Script, ...] = ()
    #: A group (`( … )`, `{ …; }`): its commands run, but its output is not run as a command.
    group: bool = False
    #: Whether a substitution or group in it downloads something.
    fetches: bool = False


@dataclass(frozen=True, slots=True)
class Command:
    """A simple command: its words, and its redirections as (operator, target)."""

    words: tuple[Word, ...]
    redirects: tuple[tuple[str, Word], ...] = ()
    #: The download the command makes, if it makes one.
    download: _Fetch | None = None


Pipeline = tuple[Command, ...]
Script = tuple[Pipeline, ...]


class _Parser:
    """A tolerant shell parser: it never fails, and reads each character once."""

    def __init__(self, text: str, *, prose: bool) -> None:
        self.text = text
        self.pos = 0
        #: Markdown prose: a word that is one backtick span is code shown, whose output is not
        #: run, and a run of backticks that opens a span holding backticks is a space.
        self.prose = prose

    def script(self, close: str | None, depth: int) -> Script:
        """Pipelines up to `close` (`)`, a backtick, `}`) or the end of the text."""
        text, end = self.text, len(self.text)
        pipelines: list[Pipeline] = []
        commands: list[Command] = []
        words: list[Word] = []
        redirects: list[tuple[str, Word]] = []

        def end_command() -> None:
            if words or redirects:
                commands.append(Command(tuple(words), tuple(redirects), _fetch(words)))
            words.clear()
            redirects.clear()

        def end_pipeline() -> None:
            end_command()
            if commands:
                pipelines.append(tuple(commands))
            commands.clear()

        while self.pos < end:
            char = text[self.pos]
            if close is not None and char == close[0] and (close != "}" or not words):
                self.pos += 1
                break
            if char in " \t\r" or (self.prose and text.startswith("``", self.pos)):
                self.pos += 1
            elif char in "\n;":
                end_pipeline()
                self.pos += 1
            elif char == "&" and text.startswith("&&", self.pos):
                end_pipeline()
                self._past_newlines(self.pos + 2)
            elif char == "&" and not text.startswith("&>", self.pos):
                end_pipeline()
                self.pos += 1
            elif char == "|" and text.startswith("||", self.pos):
                end_pipeline()
                self._past_newlines(self.pos + 2)
            elif char == "|":
                end_command()
                self._past_newlines(self.pos + (2 if text.startswith("|&", self.pos) else 1))
            elif char in "<>&" and not _word_at(text, self.pos):
                start = self.pos
                while self.pos < end and text[self.pos] in "<>&":
                    self.pos += 1
                operator = text[start : self.pos]
                while self.pos < end and text[self.pos] in " \t":
                    self.pos += 1
                redirects.append((operator, self.word(close, depth)))
            elif char in ")}":
                self.pos += 1  # a stray closer: read as a space
            elif char == "{" and not words and text[self.pos + 1 : self.pos + 2] in (" ", "\n"):
                self.pos += 1
                words.append(self._nested("}", depth))
            elif char == "(":
                self.pos += 1
                words.append(self._nested(")", depth))
            else:
                word = self.word(close, depth)
                if word.text.isdigit() and self.pos < end and text[self.pos] in "<>":
                    continue  # the file descriptor of a redirection (`2>/dev/null`)
                words.append(word)
        end_pipeline()
        return tuple(pipelines)

    def word(self, close: str | None, depth: int) -> Word:
        text, end = self.text, len(self.text)
        start = self.pos
        inner: list[Script] = []
        while self.pos < end:
            char = text[self.pos]
            if char == "<" and (placeholder := _PLACEHOLDER.match(text, self.pos)):
                self.pos = placeholder.end()
                continue
            if char in " \t\r\n;|&()<>" and not (self.pos == start and _word_at(text, start)):
                break
            if close is not None and char == close[0] and close != "}":
                break
            if self.prose and text.startswith("``", self.pos):
                break
            if char == "\\":
                self.pos += 2
            elif char in "<>" or (char == "$" and text.startswith("$(", self.pos)):
                self.pos += 2
                inner.append(self._inner(")", depth))
            elif char == "`":
                self.pos += 1
                inner.append(self._inner("`", depth))
            else:
                self.pos += 1
        self.pos = min(self.pos, end)
        if self.pos == start:  # nothing a word can start with: step over it
            self.pos += 1
        written = text[start : self.pos]
        span = self.prose and len(written) > 1 and written[0] == written[-1] == "`"
        group = span and written.count("`") == 2
        return Word(written, tuple(inner), group, any(map(_script_fetches, inner)))

    def _inner(self, close: str, depth: int) -> Script:
        if depth >= _MAX_DEPTH:
            return ()
        return self.script(close, depth + 1)

    def _nested(self, close: str, depth: int) -> Word:
        start = self.pos - 1
        inner = self._inner(close, depth)
        return Word(self.text[start : self.pos], (inner,), True, _script_fetches(inner))

    def _past_newlines(self, pos: int) -> None:
        text = self.text
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        self.pos = pos


def _word_at(text: str, pos: int) -> bool:
    """Whether a `<` or `>` at `pos` starts a word: a process substitution, a placeholder."""
    return text.startswith(("<(", ">("), pos) or _PLACEHOLDER.match(text, pos) is not None


def parse(text: str, *, prose: bool = False) -> Script:
    """The command stream of one region of text (of Markdown prose, when `prose`)."""
    return _Parser(text, prose=prose).script(None, 0)


def _lines(text: str) -> Iterator[str]:
    """The lines of `text`, a command joined with the lines it goes on to: after a `\\` at
    the end, a pipe or `&&` (not a Markdown table's `|`, and never into a fence)."""
    pending = ""
    for line in _CONTINUATION.sub(" ", text).split("\n"):
        if pending and not _FENCE.match(line):
            line, pending = pending + " " + line, ""
        elif pending:
            yield pending
            pending = ""
        if line.rstrip().endswith(("|", "&&")) and not line.lstrip().startswith("|"):
            pending = line
        else:
            yield line
    if pending:
        yield pending


def _runs_fetched_code(region: str, prose: bool) -> bool:
    """Whether code in `region` fetches and runs what it fetched (`exec(urlopen(…))`)."""
    if not prose or _ONE_LINER.search(region):
        return bool(_CODE_FETCH.search(region) and _CODE_EXEC.search(region))
    return any(
        _CODE_FETCH.search(span.group()) and _CODE_EXEC.search(span.group())
        for span in _INLINE_CODE.finditer(region)
    )


def regions(text: str) -> Iterator[tuple[str, bool]]:
    """The parts of Markdown that may hold commands, and whether each is prose: each fenced
    block (any language), and each other line without its list marker or quote prefix (its
    inline code spans, indented code and words alike)."""
    fence: str | None = None
    block: list[str] = []
    for line in _lines(text):
        opened = _FENCE.match(line)
        if fence is not None:
            closing = opened.group(1) if opened else ""
            rest = line[opened.end() :] if opened else line
            if closing[:1] == fence[0] and len(closing) >= len(fence) and not rest.strip():
                yield "\n".join(block), False
                fence, block = None, []
                continue
            block.append(line)
        elif opened is not None:
            fence = opened.group(1)
        else:
            marker = _LIST_MARKER.match(line)
            yield line[marker.end() if marker else 0 :], True
    if fence is not None:
        yield "\n".join(block), False


# -- what a command does -------------------------------------------------------------------


def _name(word: Word) -> str:
    """The program a word names: no quotes or backslashes (`b\\ash`, `"bash"` are bash to a
    shell), no trailing punctuation of prose, no directory."""
    text = _bare(word)
    if text == ".":
        return text
    name = text.rstrip(".,:;!?").rsplit("/", 1)[-1].lower()
    return "sh" if name in ("$shell", "${shell}") else name


#: What a shell removes from a word before it runs it.
_QUOTING = str.maketrans("", "", "\"'\\")


def _bare(word: Word) -> str:
    return word.text.translate(_QUOTING)


def _base(path: str) -> str:
    return path.rstrip(".,:;!?\"')").rsplit("/", 1)[-1]


def _looks_like_file(text: str) -> bool:
    return "/" in text or "." in text or "$" in text


def _unwrap(words: Sequence[Word], index: int = 0) -> tuple[int, bool, bool]:
    """The index of the word that is the program, past assignments and wrappers; whether
    `xargs` feeds it words read from its input; whether a wrapper is itself a shell reading
    its input when no program follows (`sudo -s`, `su` without `-c`)."""
    via_xargs = shell = False
    while index < len(words):
        if _ASSIGNMENT.match(_bare(words[index])):
            index += 1
            continue
        name = _name(words[index])
        if name == "su":
            command = _after_option(words, index + 1, "-c", "--command")
            shell = command >= len(words)
            index = len(words) if shell else command
            continue
        valued = _WRAPPERS.get(name)
        if valued is None:
            break
        via_xargs = via_xargs or name == "xargs"
        index += 1
        while index < len(words):
            option = _bare(words[index])
            if option == "--":
                index += 1
                break
            if _ASSIGNMENT.match(option) and name == "env":
                index += 1
            elif option.startswith("-") and len(option) > 1:
                if name in ("sudo", "doas") and _SHELL_OPTION.fullmatch(option):
                    shell = True
                index += 2 if option in valued else 1
            else:
                break
        if name in _WRAPPER_OPERAND:
            index += 1
    return min(index, len(words)), via_xargs, shell


def _after_option(words: Sequence[Word], start: int, *options: str) -> int:
    """The index after the first of `options` (`su -c CMD`: where CMD starts), or the end."""
    for index in range(start, len(words)):
        if _bare(words[index]) in options:
            return index + 1
    return len(words)


@dataclass(frozen=True, slots=True)
class _Source:
    """Where an interpreter takes its program from."""

    kind: Literal["stdin", "code", "file", "none"]  # "none": a module (`python -m`)
    at: int = -1  # the index of the code or the file word


_STDIN_FILES = frozenset({"-", "/dev/stdin", "/proc/self/fd/0"})
#: The short options with which an interpreter takes its program as a word (python: `-c`).
_CODE_FLAGS = {
    **dict.fromkeys(["perl"], "eE"),
    **dict.fromkeys(["ruby", "lua", "luajit"], "e"),
    **dict.fromkeys(["node", "nodejs"], "ep"),
    "php": "r",
}


def _program_source(name: str, words: Sequence[Word], index: int) -> _Source:
    """Where the interpreter `name`, whose options start at `index`, reads its program from."""
    code_flags = _CODE_FLAGS.get(name, "c")
    while index < len(words):
        option = _bare(words[index])
        if option in _STDIN_FILES:
            return _Source("stdin")
        if option == "--" and name not in _POWERSHELL:
            index += 1
            break
        if not option.startswith("-") or len(option) == 1:
            break
        lowered, letters = option.lower(), option[1:]
        if name in _POWERSHELL:
            if lowered in ("-c", "-command", "-encodedcommand", "-e", "-ec"):
                following = _bare(words[index + 1]) if index + 1 < len(words) else "-"
                return _Source("stdin") if following == "-" else _Source("code", index + 1)
            if lowered in ("-f", "-file"):
                return _Source("file", index + 1)
            index += 2 if lowered in ("-executionpolicy", "-ep", "-windowstyle", "-w") else 1
        elif name in _SHELLS and not option.startswith("--"):
            if "c" in letters:
                return _Source("code", index + 1)
            if "s" in letters:
                return _Source("stdin")
            index += 2 if letters[-1] in "oO" else 1
        elif name in _SHELLS:
            index += 2 if option in ("--rcfile", "--init-file") else 1
        elif option in ("--eval", "--print") or letters[0] in code_flags:
            return _Source("code", index + 1 if len(letters) == 1 or letters[0] == "-" else index)
        elif letters == "m" and name not in _SCRIPTING:
            return _Source("none")
        elif letters == "f" and name == "php":
            return _Source("file", index + 1)
        else:
            index += 2 if letters in ("W", "X", "r", "I", "d", "M") else 1
    if index >= len(words):
        return _Source("stdin")
    return _Source("file", index)


def _interpreter(name: str) -> bool:
    return (
        name in _SHELLS
        or name in _SCRIPTING
        or name in _POWERSHELL
        or _PYTHON.fullmatch(name) is not None
    )


def _piped_name(interpreter: str) -> str:
    return POWERSHELL if interpreter in _POWERSHELL or interpreter in _IEX else PIPED


def _script_fetches(script: Script) -> bool:
    """Whether any command of `script`, at any depth, downloads something (each word and
    command knows it of itself already)."""
    return any(
        command.download is not None
        or any(word.fetches for word in command.words)
        or any(target.fetches for _, target in command.redirects)
        for pipeline in script
        for command in pipeline
    )


def _runs_fetch(word: Word) -> bool:
    """Whether `word`'s value is what a download printed (`$(curl …)`, `<(wget …)`)."""
    return not word.group and (word.fetches or bool(_DOTNET_DOWNLOAD.search(word.text)))


@dataclass(frozen=True, slots=True)
class _Fetch:
    """A download: the paths it writes to as written, and the URLs it saves under their own
    names (`wget URL`, `curl -O URL`)."""

    outputs: tuple[str, ...] = ()
    saved_urls: tuple[str, ...] = ()


#: A word that names what curl or wget fetch: a URL, a variable, a host and path.
_URLISH = re.compile(r".*://|.*\$|(?:localhost|[\w-]+(?:\.[\w-]+)+)(?::[0-9]+)?(?:/|$)")


def _fetch(words: Sequence[Word]) -> _Fetch | None:
    """The download `words` make, if they make one."""
    index, _, _ = _unwrap(words)
    if index < len(words) and _name(words[index]) in _FETCHERS:
        args = words[index + 1 :]
        if any(_URLISH.match(_bare(arg)) for arg in args):
            return _fetch_outputs(_name(words[index]), args)
        return None
    last_url = max((i for i, word in enumerate(words) if "://" in word.text), default=-1)
    for position, word in enumerate(words):
        if not word.group and _DOTNET_DOWNLOAD.search(word.text):
            return _Fetch()
        if position < last_url and _name(word) in _NAMED_FETCHERS:
            return _fetch_outputs(_name(word), words[position + 1 :])
    return None


#: Short options of curl and wget that take a value (a cluster of letters ends at one).
_CURL_VALUED = frozenset("ACEHKPQTUXYbcdefhmrtuwxyz")
_WGET_VALUED = frozenset("PaeiotTUwlABDQ")
_POWERSHELL_FETCHERS = frozenset({"iwr", "irm", "invoke-webrequest", "invoke-restmethod"})


def _fetch_outputs(name: str, args: Sequence[Word]) -> _Fetch:
    """The files a fetcher writes (none when it prints what it fetched)."""
    outputs: list[str] = []
    urls: list[str] = []
    remote_name = name in ("wget", "wget2", "fetch", "aria2c")
    wget = name.startswith("wget")
    valued, output_flag = (_WGET_VALUED, "O") if wget else (_CURL_VALUED, "o")
    index = 0
    while index < len(args):
        arg = _bare(args[index])
        following = _bare(args[index + 1]) if index + 1 < len(args) else ""
        index += 1
        if name in _POWERSHELL_FETCHERS:
            if arg.lower().startswith("-out"):
                outputs.append(following)
                index += 1
            elif not arg.startswith("-"):
                urls.append(arg)
        elif arg.startswith("--"):
            option, equals, value = arg.partition("=")
            if option in ("--output", "--output-document", "--url"):
                (urls if option == "--url" else outputs).append(value if equals else following)
                index += 0 if equals else 1
            remote_name = remote_name or option in ("--remote-name", "--remote-name-all")
        elif arg.startswith("-") and len(arg) > 1:
            for position, letter in enumerate(arg[1:], 1):
                if letter == "O" and not wget:
                    remote_name = True
                elif letter == output_flag or letter in valued:
                    value = arg[position + 1 :]
                    if not value:
                        value, index = following, index + 1
                    if letter == output_flag:
                        outputs.append(value)
                    break
        else:
            urls.append(arg)
    if outputs:
        return _Fetch(tuple(output for output in outputs if output != "-"))
    return _Fetch(saved_urls=tuple(urls) if remote_name else ())


def _url_file(url: str) -> str:
    """The name wget, or `curl -O`, saves `url` under ("" when a variable hides it)."""
    if "$" in url:
        return ""
    path = re.split(r"[?#]", url.partition("://")[2] or url, maxsplit=1)[0]
    return path.partition("/")[2].rpartition("/")[2] or "index.html"


#: How deep `sh -c "sh -c …"` is followed.
_MAX_CODE_DEPTH = 8


@dataclass(slots=True)
class _Judgement:
    """What the whole text comes to, gathered command by command."""

    found: set[str] = field(default_factory=set)
    #: The names of the files downloads wrote, and of the files something ran.
    downloaded: set[str] = field(default_factory=set)
    executed: set[str] = field(default_factory=set)
    #: A pipeline feeding files into an interpreter (`cat x.sh | sh`), judged once every
    #: download is known: (the words before the interpreter, the interpreter).
    piped_files: list[tuple[set[str], str]] = field(default_factory=list)
    #: What the text set its variables to (`F=x.sh`), in the order it did.
    variables: dict[str, str] = field(default_factory=dict)

    def _file(self, path: str) -> str:
        """The name of the file `path` names, with the variables the text set filled in."""
        return _base(self._expand(path.strip("\"'")))

    def _expand(self, text: str) -> str:
        if "$" not in text:
            return text
        return _VARIABLE.sub(
            lambda match: self.variables.get(match.group(1) or match.group(2), match.group(0)),
            text,
        )

    def _assign(self, words: Sequence[Word]) -> None:
        """Remember `NAME=value` of a command that only assigns (`export NAME=value` too)."""
        start = 1 if words and _name(words[0]) in _DECLARATIONS else 0
        assignments = [_bare(word) for word in words[start:]]
        if assignments and all(_ASSIGNMENT.match(text) for text in assignments):
            for text in assignments:
                name, _, value = text.partition("=")
                self.variables[name] = self._expand(value.strip("\"'"))

    def script(self, script: Script) -> None:
        for pipeline in script:
            self.pipeline(pipeline)

    def pipeline(self, pipeline: Pipeline) -> None:
        feeding = False
        reading: set[str] = set()
        for command in pipeline:
            for word in (*command.words, *(target for _, target in command.redirects)):
                for inner in word.inner:
                    self.script(inner)
            self._assign(command.words)
            self._mentions(command.words)
            interpreter = self.command(command, 0, 0)
            if interpreter is not None and feeding:
                self.found.add(_piped_name(interpreter))
            elif interpreter is not None and reading:
                self.piped_files.append((reading, interpreter))
            fetch = command.download
            if fetch is not None:
                self.downloaded.update(map(self._file, fetch.outputs))
                self.downloaded.update(_url_file(self._expand(url)) for url in fetch.saved_urls)
            feeding = feeding or fetch is not None or any(word.fetches for word in command.words)
            if feeding:
                self._written(command)
                self._fed_substitutions(command)
            reading.update(self._file(word.text) for word in command.words[1:])

    def _written(self, command: Command) -> None:
        """The files a command writes what a download fed it into (`| tee x.sh`, `> x.sh`)."""
        index, _, _ = _unwrap(command.words)
        if index < len(command.words) and _name(command.words[index]) == "tee":
            self.downloaded.update(
                self._file(word.text)
                for word in command.words[index + 1 :]
                if not _bare(word).startswith("-")
            )
        for operator, target in command.redirects:
            if ">" in operator:
                self.downloaded.add(self._file(target.text))

    def _fed_substitutions(self, command: Command) -> None:
        """`| tee >(sh)`, `> >(bash)`: a process substitution reading what a download fed."""
        for word in (*command.words, *(target for _, target in command.redirects)):
            if word.text.startswith(">(") and word.inner and word.inner[0]:
                interpreter = self.command(word.inner[0][0][0], 0, 0)
                if interpreter is not None:
                    self.found.add(_piped_name(interpreter))

    def command(self, command: Command, start: int, depth: int) -> str | None:
        """Judge the command in `command.words[start:]`; the interpreter it is, when it runs
        what it reads from its input."""
        words = command.words
        index, via_xargs, shell = _unwrap(words, start)
        if index >= len(words):
            return "sh" if shell else None
        program = words[index]
        name = _name(program)
        if _runs_fetch(program):
            self.found.add(SHELL_RUNS)
        if name == "eval":
            if any(_runs_fetch(word) for word in words[index + 1 :]):
                self.found.add(EVAL)
            return None
        if name in _IEX:
            rest = words[index + 1 :]
            if any(word.fetches or _runs_fetch(word) for word in rest):
                self.found.add(POWERSHELL)
            return None if rest else name
        if name in _SOURCE:
            return self._runs(name, _Source("file", index + 1), command, depth)
        if not _interpreter(name):
            path = self._expand(_bare(program))
            if "/" in path and "://" not in path:
                self.executed.add(self._file(program.text))
            return None
        if via_xargs:  # `| xargs bash`: its words come from the input
            return name
        return self._runs(name, _program_source(name, words, index + 1), command, depth)

    def _runs(self, name: str, source: _Source, command: Command, depth: int) -> str | None:
        words = command.words
        running = INTERPRETER_RUNS
        if name in _SHELLS or name in _SOURCE:
            running = SHELL_RUNS
        elif name in _POWERSHELL:
            running = POWERSHELL
        if source.kind in ("code", "file") and source.at >= len(words):
            return None
        if source.kind == "code":
            if _runs_fetch(words[source.at]):
                self.found.add(running)
            if name in _SHELLS and depth < _MAX_CODE_DEPTH:
                # `sh -c "curl … | sh"`: the code is a command too.
                return self.command(command, source.at, depth + 1)
            return None
        if source.kind == "file" and _bare(words[source.at]) in _STDIN_FILES:
            source = _Source("stdin")  # `source /dev/stdin <<< "$(curl …)"`
        if source.kind == "file":
            script = words[source.at]
            if _runs_fetch(script):
                self.found.add(running)
            self.executed.add(self._file(script.text))
            # Prose ("… | sh and check") names no file: the interpreter reads its input.
            return None if _looks_like_file(_bare(script)) else name
        if source.kind == "none":
            return None
        for operator, target in command.redirects:
            if operator in ("<", "<<<") and _runs_fetch(target):
                self.found.add(running)
            elif operator == "<":
                self.executed.add(self._file(target.text))
        return name

    def _mentions(self, words: Sequence[Word]) -> None:
        """Prose names what an interpreter runs anywhere in a line: "then run bash x.sh"."""
        for position in range(len(words) - 1):
            name = _name(words[position])
            if name in _SHELLS or name in _SOURCE or _PYTHON.fullmatch(name):
                following = _bare(words[position + 1])
                if not following.startswith("-") and _looks_like_file(following):
                    self.executed.add(self._file(following))

    def settle(self) -> set[str]:
        """Every finding, now that every download and every run is known."""
        downloaded = self.downloaded - {""}
        if downloaded & self.executed:
            self.found.add(THEN_EXECUTE)
        for files, interpreter in self.piped_files:
            if files & downloaded:
                self.found.add(_piped_name(interpreter))
        return self.found


def risky_patterns(*texts: str) -> list[str]:
    """The names of the download-and-execute patterns found in `texts` (a skill's body,
    description and when-to-use, judged together), in `PATTERNS` order."""
    judgement = _Judgement()
    for text in texts:
        for region, prose in regions(text):
            if _runs_fetched_code(region, prose):
                judgement.found.add(CODE_RUNS)
            judgement.script(parse(region, prose=prose))
    found = judgement.settle()
    return [name for name in PATTERNS if name in found]


def download_hold(*texts: str) -> str | None:
    """Why a skill of `texts` waits for a person (`download-and-execute: <patterns>`), or
    None: a learned skill (`publish = "auto"` too) and one an agent writes alike."""
    risky = risky_patterns(*texts)
    return "download-and-execute: " + ", ".join(risky) if risky else None
