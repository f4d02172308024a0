"""Secret redaction for untrusted transcript text.

Every window is redacted before it is sent to the LLM, so a secret never leaves the machine and
never reaches a skill file. Each secret is replaced by `[REDACTED:<kind>]`; the caller learns how
many secrets of which kind were replaced, never their values.

Two families of detectors find spans in the original text:

- Shaped secrets (PEM blocks, provider prefixes such as `ghp_`, `sk-ant-` or `SG.`, JWTs, Azure
  `AccountKey=`, a 40-hex token as a URL's user): the shape is the evidence, so every match
  counts.
- Contextual secrets: the value of an assignment to a secret-sounding key (`password=`,
  `"api_key": "…"`, `export SECRET_KEY=…`, `--token …`), of an `Authorization` scheme
  (`Bearer …`, `Basic …`, `Token …`), the password of a URL (`scheme://user:pass@host`), of a
  command's password flag (`mysql -pX`, `sshpass -p X`, `docker login -p X`, `curl -u user:X`)
  or of `aws configure set`. The context is weak evidence, so the value must also look like a
  secret: long and varied enough (Shannon entropy), and neither a placeholder (`<token>`,
  `$API_KEY`, `None`) nor code (`os.environ[...]`, `self.token`). Only the value is replaced;
  the key name stays.

JSON inside a JSON string (a tool call's `{"cmd": "curl -d '{\\"password\\":\\"…\\"}'"}`,
a file written as an argument) hides its keys and values behind escapes, and an escaped line
break glues the next word to an `n`. So a text holding JSON escapes is also read unescaped, up
to two levels deep, and what is found there is mapped back onto the original text.

Overlapping spans merge into one replacement named after the most specific detector, so
`token=ghp_…` is reported as one `github_token`. A `[REDACTED:<kind>]` marker matches no
detector, which makes `redact` idempotent.

Speed: a window (up to ~100 kB) is redacted on every tick, and so is every failing tool call's
error line. Each detector is a separate precompiled pattern that begins with a literal, so the
regex engine skips to candidates with its fast prefix search instead of trying every position,
and a text without the literal costs the detector one substring test; the keyword detectors
run on a lower-cased copy of the text for the same reason. Where a literal is common (`-p`),
the costlier test (which command the flag belongs to) waits until the value looks like a
secret. Only the lines that hold escapes are read again unescaped. Every repetition is bounded
or possessive, so the time stays linear in the input, even for hostile text.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import string
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["KINDS", "Redaction", "merge_counts", "redact", "redact_strings"]


@dataclass(frozen=True)
class Redaction:
    """Redacted text and the number of secrets replaced per kind (only kinds that occurred)."""

    text: str
    counts: Mapping[str, int]


def _marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# --- shaped secrets --------------------------------------------------------------------------
# Each pattern starts with a literal; the boundary check before the literal is a lookbehind
# placed after it, which keeps the literal usable as the engine's search prefix.

# A PEM label such as " RSA PRIVATE KEY", " ENCRYPTED PRIVATE KEY", " PGP PRIVATE KEY BLOCK".
_PEM_LABEL = r"[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?"
_PEM_HEADER = r"(?:Proc-Type|DEK-Info|Comment|Version|Hash):[^\r\n\\]*+"
# What a key's body is made of: base64, line breaks and indentation (real or escaped in a JSON
# or code string), and the header lines of encrypted keys. Code that merely names the BEGIN and
# END lines (`START = b"-----BEGIN…"`) holds other characters and is not taken for a key.
_PEM_LINE_BREAK = r"(?:\r?\n|\\r\\n|\\n)"
_PEM_BODY = rf"(?:[A-Za-z0-9+/= \t]++|{_PEM_LINE_BREAK}(?:{_PEM_HEADER})?|\\.)*+"
# A block cut off before its END (tool output is truncated) must hold at least the start of a
# base64 line: a BEGIN line alone, in prose, is a mention, not a key.
_PEM_TRUNCATED = rf"(?:[ \t]|{_PEM_LINE_BREAK}(?:{_PEM_HEADER})?)*+[A-Za-z0-9+/=]{{16}}{_PEM_BODY}"
_PEM_BLOCK = (
    rf"-----BEGIN{_PEM_LABEL}-----(?:{_PEM_BODY}-----END{_PEM_LABEL}-----|{_PEM_TRUNCATED})"
)

_SLACK_WEBHOOK_PATH = r"(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}+"
_AWS_PROFILE = r"(?:[A-Za-z0-9_-]{1,64}+\.)?"
_AZURE_KEY = r"[\"']?(?P<secret>[A-Za-z0-9+/]{40,}+={0,2})"

# (kind, literal, pattern), most specific first: where spans overlap, the earlier rule names
# the replacement. Each rule matches `literal` followed by `pattern`; a text without the literal
# costs the rule one substring test, not a search. A pattern with a group `secret` has only
# that span replaced.
_SHAPED_RULES: tuple[tuple[str, str, str], ...] = (
    (
        "gcp_service_account_key",
        '"private_key"',
        rf"[ \t]*:[ \t]*\"(?P<secret>{_PEM_BLOCK}(?:\\n)?)",
    ),
    ("private_key", "-----BEGIN", _PEM_BLOCK.removeprefix("-----BEGIN")),
    *(
        ("aws_access_key_id", prefix, rf"(?<![A-Za-z0-9]{prefix})[A-Z0-9]{{16}}(?![A-Za-z0-9])")
        for prefix in ("AKIA", "ASIA", "ABIA", "ACCA")
    ),
    (
        # The prompt of `aws configure`; assignments are found by the keyword detectors.
        "aws_secret_access_key",
        "AWS Secret Access Key [",
        r"[^\]\r\n]{0,64}\]:[ \t]*(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
    ),
    # `aws configure set [profile.]aws_secret_access_key VALUE` (and the session token).
    (
        "aws_secret_access_key",
        "configure",
        rf"[ \t]+set[ \t]+{_AWS_PROFILE}aws_secret_access_key[ \t]+[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
    ),
    (
        "aws_session_token",
        "configure",
        rf"[ \t]+set[ \t]+{_AWS_PROFILE}aws_session_token[ \t]+[\"']?"
        r"(?P<secret>[A-Za-z0-9/+=]{16,}+)",
    ),
    ("github_token", "gh", r"(?<![A-Za-z0-9]gh)[pousr]_[A-Za-z0-9]{30,}+"),
    ("github_token", "github_pat_", r"(?<![A-Za-z0-9]github_pat_)[A-Za-z0-9_]{30,}+"),
    # A classic token (40 hex digits) as a URL's user: `https://<token>@github.com/o/r`. A
    # commit's hash is never a URL's user, so hashes elsewhere are left alone.
    ("github_token", "://", r"(?P<secret>[0-9a-fA-F]{40})(?=@|:x-oauth-basic@)"),
    ("gitlab_token", "gl", r"(?<![A-Za-z0-9]gl)(?:pat|dt|rt|ptt|oas)-[A-Za-z0-9_-]{20,}+"),
    ("anthropic_api_key", "sk-ant-", r"(?<![A-Za-z0-9_-]sk-ant-)[A-Za-z0-9_-]{20,}+"),
    # Also the `sk-` keys of OpenAI-compatible providers (DeepSeek and others). A real key holds
    # a digit; hyphenated prose such as "sk-some-long-words" does not.
    ("openai_api_key", "sk-", r"(?<![A-Za-z0-9_-]sk-)(?=[A-Za-z_-]*+[0-9])[A-Za-z0-9_-]{20,}+"),
    *(
        ("slack_webhook", f"{scheme}hooks.slack.com/", _SLACK_WEBHOOK_PATH)
        for scheme in ("https://", "http://", "")
    ),
    ("slack_token", "xox", r"(?<![A-Za-z0-9]xox)[abposre]-[A-Za-z0-9-]{10,}+"),
    ("slack_token", "xapp-", r"(?<![A-Za-z0-9]xapp-)[0-9]-[A-Za-z0-9-]{10,}+"),
    ("gcp_api_key", "AIza", r"(?<![A-Za-z0-9_-]AIza)[A-Za-z0-9_-]{30,}+"),
    ("huggingface_token", "hf_", r"(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}+"),
    *(
        ("stripe_key", prefix, rf"(?<![A-Za-z0-9]{prefix})(?:live|test)_[A-Za-z0-9]{{16,}}+")
        for prefix in ("sk_", "rk_")
    ),
    ("stripe_key", "pk_live_", r"(?<![A-Za-z0-9]pk_live_)[A-Za-z0-9]{16,}+"),
    ("stripe_key", "whsec_", r"(?<![A-Za-z0-9]whsec_)[A-Za-z0-9]{24,}+"),
    ("npm_token", "npm_", r"(?<![A-Za-z0-9]npm_)[A-Za-z0-9]{36,}+"),
    ("pypi_token", "pypi-AgE", r"(?<![A-Za-z0-9]pypi-AgE)[A-Za-z0-9_-]{50,}+"),
    (
        "sendgrid_api_key",
        "SG.",
        r"(?<![A-Za-z0-9_.-]SG\.)[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])",
    ),
    # The key of an Azure connection string (storage, Service Bus, Event Hubs) or of `az`.
    ("azure_key", "Key=", rf"(?:(?<=AccountKey=)|(?<=SharedAccessKey=)){_AZURE_KEY}"),
    ("azure_key", "--account-key", rf"(?:[ \t]+|=){_AZURE_KEY}"),
    (
        "jwt",
        "eyJ",
        r"(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+",
    ),
)
_SHAPED: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (kind, literal, re.compile(re.escape(literal) + pattern))
    for kind, literal, pattern in _SHAPED_RULES
)

# --- contextual secrets ----------------------------------------------------------------------

_CONTEXT_KINDS = (
    "password",
    "secret",
    "token",
    "api_key",
    "bearer_token",
    "basic_auth",
    "authorization_token",
    "url_password",
)
KINDS: tuple[str, ...] = (*dict.fromkeys(kind for kind, _, _ in _SHAPED_RULES), *_CONTEXT_KINDS)
# Where spans overlap, the lowest priority number names the replacement.
_PRIORITY = {kind: rank for rank, kind in enumerate(KINDS)}

# `key = value`, `key: value`, `"key": value`, `key := value`, `key => value`.
_SEPARATOR = r"[\"']?[ \t]*(?::=|=>|[:=])[ \t]*"
# The type annotation between `name:` and `= value` (`token: str = "…"`, PEP 8 spacing).
_ANNOTATION = r"[a-z_][\w.]{0,80}+(?:\[[\w., \[\]|]{0,80}+)?[ \t]+=(?!=)[ \t]*"
# A value too short to be a secret is not matched at all. An unquoted value ends where a shell,
# a URL query or a YAML flow mapping would end it, and is code, not a value, when a call or a
# subscript follows (`getpass(`, `os.environ[`).
_MIN_LENGTH = 8
_BARE_VALUE = rf"(?P<bare>[^\s\"'`,;&|<>(){{}}\[\]]{{{_MIN_LENGTH},1024}}+)(?![(\[])"
# A value quoted inside a JSON string, as in tool-call arguments (`{"cmd": "PW=\"…\""}`),
# has escaped quotes; escapes inside it are left to the bare rule.
_VALUE = (
    rf"(?:\\\"(?P<escaped>[^\"\\\r\n]{{{_MIN_LENGTH},1024}}+)\\\""
    rf"|\"(?P<double>(?:[^\"\\\r\n]|\\.){{{_MIN_LENGTH},1024}}+)\""
    rf"|'(?P<single>(?:[^'\\\r\n]|\\.){{{_MIN_LENGTH},1024}}+)'"
    rf"|{_BARE_VALUE})"
)
# Words that end a secret-sounding key, matched on lower-cased text, with the kind of secret
# they introduce, or None where the kind depends on the whole key (`db_pass` but not `bypass`).
# Each also takes the whitespace separator of a command-line flag (`--token VALUE`).
_KEYWORDS: tuple[tuple[str, str | None], ...] = (
    ("passphrase", "password"),
    ("password", "password"),
    ("passwd", "password"),
    ("pwd", None),
    ("pass", None),
    ("pw", None),
    ("secret", "secret"),
    ("token", None),
    ("authorization", "token"),
    ("auth", None),
    ("key", None),
)
# `…key` is a secret only with one of these qualifiers (`api_key`, `SECRET_KEY`), not `key:`;
# checking them in the pattern keeps the many plain `key: value` pairs out of the slow path.
_KEY_QUALIFIERS = ("api", "secret", "access", "signing", "encryption", "master")
_KEYWORD_GUARDS = {
    "key": "(?:"
    + "|".join(
        f"(?<={qualifier}{joiner}key)"
        for qualifier in _KEY_QUALIFIERS
        for joiner in ("", "_", "-", ".")
    )
    + ")"
}
_KEYWORD_PATTERNS: tuple[tuple[str, str | None, re.Pattern[str]], ...] = tuple(
    (
        keyword,
        kind,
        re.compile(
            rf"{keyword}{_KEYWORD_GUARDS.get(keyword, '')}"
            rf"(?:{_SEPARATOR}|(?<=-{keyword})[ \t]+(?!-))(?:{_ANNOTATION})?{_VALUE}"
        ),
    )
    for keyword, kind in _KEYWORDS
)
# The credentials of an HTTP authorization scheme are a token68 (RFC 9110) that ends the word,
# so prose such as "Basic formatting: …" is not taken for one.
_TOKEN68 = rf"(?P<bare>[a-z0-9._~+/-]{{{_MIN_LENGTH},1024}}+=*+)(?![^\s\"'`,;)\]}}>])"
#: (kind, the word the pattern begins with, pattern).
_SCHEME_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("bearer_token", "bearer", re.compile(rf"bearer(?<![a-z0-9_]bearer)[ \t]+{_TOKEN68}")),
    ("basic_auth", "basic", re.compile(rf"basic(?<![a-z0-9_]basic)[ \t]+{_TOKEN68}")),
    # Any other scheme of an `Authorization` header: `Token …` (GitHub, Django REST
    # framework), `Bot …`, `SSWS …`. Digest's credentials are parameters, not a token.
    (
        "authorization_token",
        "authorization",
        re.compile(
            rf"authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?!(?:bearer|basic|digest)[ \t])"
            rf"[a-z][a-z0-9._-]{{0,31}}+[ \t]+{_TOKEN68}"
        ),
    ),
)
# `scheme://user:password@`. Neither part may hold a colon or a slash, so the scans that start
# at successive `://` never overlap.
_URL_PASSWORD = re.compile(r"://[^\s:/?#@\"'<>\[\]]{0,128}+:(?P<password>[^\s:/?#@\"'<>]{1,256}+)@")
_URL_USER = re.compile(r"[^\s:/?#@\"'<>\[\]]*+")

# A command's password flag. `-p` takes a password attached to it for mysql and mariadb (a word
# after `-p ` is the database), either way for sshpass and a `login` command (`docker login`,
# `oc login`, `az login`); elsewhere it is anything (`mkdir -p`, `ssh -p 22`), so a flag's
# command is looked for only once its value looks like a secret. `-u`/`--user` (and curl's
# proxy `-U`) take `user:password`.
_FLAG_VALUE = (
    r"(?:\"(?P<double>[^\"\\\r\n]{1,1024}+)\""
    r"|'(?P<single>[^'\\\r\n]{1,1024}+)'"
    r"|(?P<bare>[^\s\"'`,;&|<>(){}\[\]\\]{1,1024}+))"
)
_PASSWORD_FLAG = re.compile(rf"-p(?<![^\s\"'=]-p)(?P<gap>[ \t]*+)(?!-){_FLAG_VALUE}")
_PASSWORD_FLAG_COMMAND = re.compile(
    r"(?<![\w.-])(?:(?P<attached>mysql|mariadb)[\w-]*+|sshpass|login)(?![\w.-])"
)
_COMMAND_LOOKBACK = 256
_COMMAND_SEPARATOR = re.compile(r"[\n;|&]")
_USER_FLAGS = tuple(
    re.compile(
        rf"{flag}(?<![^\s\"'=]{flag})(?:[ \t]++|=)?[\"']?[^\s:\"'\\/@]{{1,128}}+:"
        rf"(?P<bare>[^\s\"'`\\]{{1,1024}}+)"
    )
    for flag in ("-u", "--user")
)

# The key is read backwards from the keyword, over the characters a key name is made of.
_KEY_CHARACTERS = string.ascii_letters + string.digits + "_.-"
_KEY_MAX_PREFIX = 64
_KEY_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_AWS_SECRET_KEY_ENDINGS = ("secretaccesskey", "awssecretkey")
_AWS_SECRET = re.compile(r"[A-Za-z0-9/+]{40}")

_MIN_ENTROPY = 2.5
# A value of one character class (all lowercase, all digits) is mostly a word or a number, so
# it must be longer and more varied to count as a secret.
_SINGLE_CLASS_MIN_LENGTH = 16
_SINGLE_CLASS_MIN_ENTROPY = 3.3

_PLACEHOLDER_VALUES = frozenset(
    {"none", "null", "nil", "true", "false", "undefined", "password", "secret", "token"}
)
_PLACEHOLDER_FRAGMENTS = ("your", "example", "placeholder", "changeme", "redacted", "xxxx", "***")
_PLACEHOLDER_SHAPE = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\(.*\)|%[A-Za-z_][A-Za-z0-9_]*%|\{\{.*\}\}|<.*>|\.\.\..*"
)
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_WORD_WITH_UNDERSCORES = re.compile(r"[A-Za-z_]+")
# Digits only at the end of a part: `httpx2.Auth`, `hashlib.sha256`, not `ya29.a0AfH6SM…`.
_DOTTED_NAME = re.compile(r"[A-Za-z_]+[0-9]*(?:\.[A-Za-z_]+[0-9]*)+")
_DIGIT = re.compile(r"\d")

# (start, end, priority, kind) of one detected secret.
_Finding = tuple[int, int, int, str]


#: (kind, priority, literal, pattern, the group of the span to replace) of each shaped rule.
_SHAPED_DETECTORS: tuple[tuple[str, int, str, re.Pattern[str], str | int], ...] = tuple(
    (kind, _PRIORITY[kind], literal, pattern, "secret" if "secret" in pattern.groupindex else 0)
    for kind, literal, pattern in _SHAPED
)
#: The counts of a text with no secret.
_NONE_FOUND: Mapping[str, int] = MappingProxyType({})


# The detectors loop over `search` rather than `finditer`: most detectors find nothing in most
# texts, and then a search costs a third of an iterator (a tick redacts every failure's line).
# No detector matches the empty string, so each search starts where the last match ended.


def _shaped_findings(text: str, findings: list[_Finding]) -> None:
    for kind, priority, literal, pattern, secret_group in _SHAPED_DETECTORS:
        if literal not in text:
            continue
        match = pattern.search(text)
        while match is not None:
            start, end = match.span(secret_group)
            # A cut-off PEM body may end in the blank space that follows it.
            end = start + len(text[start:end].rstrip())
            findings.append((start, end, priority, kind))
            match = pattern.search(text, match.end())


def _shannon_entropy(value: str) -> float:
    length = len(value)
    return math.log2(length) - sum(n * math.log2(n) for n in map(value.count, set(value))) / length


def _character_classes(value: str) -> int:
    has_lower = value.upper() != value
    has_upper = value.lower() != value
    has_digit = _DIGIT.search(value) is not None
    has_other = not value.isalnum()
    return has_lower + has_upper + has_digit + has_other


def _is_code(value: str) -> bool:
    """Whether an unquoted value is a name from code: dotted (`os.environ`, `httpx2.Auth`), with
    underscores (`password_from_env`) or in mixed case (`accessToken`, `OAuthToken`). A random
    secret of letters alone is rare; a word in one case is left to the entropy rule."""
    if _DOTTED_NAME.fullmatch(value):
        return True
    if _WORD_WITH_UNDERSCORES.fullmatch(value) is None:
        return False
    return "_" in value or not (value.islower() or value.isupper())


def _looks_secret(value: str, *, unquoted: bool) -> bool:
    """Whether a value in a secret context is a real secret rather than a placeholder or code."""
    if len(value) < _MIN_LENGTH:
        return False
    lowered = value.lower()
    if lowered in _PLACEHOLDER_VALUES or any(f in lowered for f in _PLACEHOLDER_FRAGMENTS):
        return False
    if _PLACEHOLDER_SHAPE.fullmatch(value) or _CONSTANT_NAME.fullmatch(value):
        return False
    if unquoted and _is_code(value):
        return False
    entropy = _shannon_entropy(value)
    if _character_classes(value) >= 2:
        return entropy >= _MIN_ENTROPY
    return len(value) >= _SINGLE_CLASS_MIN_LENGTH and entropy >= _SINGLE_CLASS_MIN_ENTROPY


class _Judge:
    """`_looks_secret` with its verdicts remembered for one text, in which a flood of one
    repeated value costs one judgement."""

    def __init__(self) -> None:
        self._verdicts: dict[tuple[str, bool], bool] = {}

    def looks_secret(self, value: str, *, unquoted: bool) -> bool:
        verdict = self._verdicts.get((value, unquoted))
        if verdict is None:
            verdict = self._verdicts[value, unquoted] = _looks_secret(value, unquoted=unquoted)
        return verdict


def _key_kind(text: str, keyword_start: int, keyword: str, value: str) -> str | None:
    """The kind of secret assigned to the key that ends with `keyword`, if any."""
    before = text[max(0, keyword_start - _KEY_MAX_PREFIX) : keyword_start]
    keyword_end = keyword_start + len(keyword)
    key = before[len(before.rstrip(_KEY_CHARACTERS)) :] + text[keyword_start:keyword_end]
    segments = [segment.lower() for segment in _KEY_SEGMENT.findall(key)]
    last_segment = segments[-1] if segments else ""
    compact = "".join(segments)
    match keyword:
        case "pwd":
            # `PWD` and `OLDPWD` are the shell's working directories.
            return None if compact in ("pwd", "oldpwd") else "password"
        case "pass" | "pw":
            return "password" if last_segment == keyword else None
        case "auth":
            return "secret" if last_segment == "auth" else None
        case "token":
            return "aws_session_token" if compact.endswith("awssessiontoken") else "token"
        case _:
            # The pattern admitted only qualified keys: `api_key`, `secret_key`, `access_key`…
            if compact.endswith("apikey"):
                return "api_key"
            if compact.endswith(_AWS_SECRET_KEY_ENDINGS) and _AWS_SECRET.fullmatch(value):
                return "aws_secret_access_key"
            return "secret"


def _in_url_userinfo(lowered: str, position: int) -> bool:
    """Whether `position` is in the `user:password` part of a URL (`https://x-token:…@host`),
    which is the URL detector's to judge: a keyword's value would run on into the host."""
    window = lowered[max(0, position - 128) : position]
    scheme_end = window.rfind("://")
    return scheme_end >= 0 and _URL_USER.fullmatch(window, scheme_end + 3) is not None


def _keyword_findings(text: str, lowered: str, judge: _Judge, findings: list[_Finding]) -> None:
    for keyword, keyword_kind, pattern in _KEYWORD_PATTERNS:
        if keyword not in lowered:
            continue
        match = pattern.search(lowered)
        while match is not None:
            finding = _keyword_finding(text, lowered, judge, match, keyword, keyword_kind)
            if finding is not None:
                findings.append(finding)
            match = pattern.search(lowered, match.end())


def _keyword_finding(
    text: str,
    lowered: str,
    judge: _Judge,
    match: re.Match[str],
    keyword: str,
    keyword_kind: str | None,
) -> _Finding | None:
    group = match.lastgroup
    assert group is not None  # the value group always closes last
    start, end = match.span(group)
    if group == "bare":
        # A sentence's full stop is not part of the value.
        end = start + len(text[start:end].rstrip("."))
    value = text[start:end]
    if "@" in value and _in_url_userinfo(lowered, match.start()):
        return None
    kind = keyword_kind or _key_kind(text, match.start(), keyword, value)
    if kind is not None and judge.looks_secret(value, unquoted=group == "bare"):
        return (start, end, _PRIORITY[kind], kind)
    return None


def _scheme_findings(text: str, lowered: str, judge: _Judge, findings: list[_Finding]) -> None:
    for kind, scheme, pattern in _SCHEME_PATTERNS:
        if scheme not in lowered:
            continue
        priority = _PRIORITY[kind]
        match = pattern.search(lowered)
        while match is not None:
            start, end = match.span("bare")
            end = start + len(text[start:end].rstrip("."))
            if judge.looks_secret(text[start:end], unquoted=True):
                findings.append((start, end, priority, kind))
            match = pattern.search(lowered, match.end())


def _url_password_findings(text: str, judge: _Judge, findings: list[_Finding]) -> None:
    if "://" not in text:
        return
    priority = _PRIORITY["url_password"]
    match = _URL_PASSWORD.search(text)
    while match is not None:
        if judge.looks_secret(match.group("password"), unquoted=False):
            start, end = match.span("password")
            findings.append((start, end, priority, "url_password"))
        match = _URL_PASSWORD.search(text, match.end())


class _FlagCommands:
    """Where a text names a password-flag command (`mysql`, `sshpass`, `login`), found once,
    on the first flag whose value looks like a secret."""

    def __init__(self, lowered: str) -> None:
        self._lowered = lowered
        self._found: tuple[list[int], list[str]] | None = None

    def command_of(self, flag: int) -> str | None:
        """The command last named in the command `flag` is in: after the last line break or
        shell separator before it, at most `_COMMAND_LOOKBACK` characters back."""
        if self._found is None:
            matches = list(_PASSWORD_FLAG_COMMAND.finditer(self._lowered))
            self._found = (
                [match.start() for match in matches],
                ["mysql" if match.group("attached") else match.group() for match in matches],
            )
        starts, commands = self._found
        index = bisect.bisect_left(starts, flag) - 1
        if index < 0 or flag - starts[index] > _COMMAND_LOOKBACK:
            return None
        if _COMMAND_SEPARATOR.search(self._lowered, starts[index], flag) is not None:
            return None
        return commands[index]


def _flag_findings(text: str, lowered: str, judge: _Judge, findings: list[_Finding]) -> None:
    priority = _PRIORITY["password"]
    match = _PASSWORD_FLAG.search(lowered) if "-p" in lowered else None
    commands = _FlagCommands(lowered)
    while match is not None:
        group = match.lastgroup
        assert group is not None  # the value group always closes last
        start, end = match.span(group)
        # `-P` is mysql's port and sshpass's prompt.
        if text[match.start() + 1] == "p" and judge.looks_secret(text[start:end], unquoted=False):
            command = commands.command_of(match.start())
            if command is not None and not (command == "mysql" and match.group("gap")):
                findings.append((start, end, priority, "password"))
        match = _PASSWORD_FLAG.search(lowered, match.end())
    if "-u" not in lowered:  # also the start of `--user`
        return
    for pattern in _USER_FLAGS:
        match = pattern.search(lowered)
        while match is not None:
            start, end = match.span("bare")
            if judge.looks_secret(text[start:end], unquoted=False):
                findings.append((start, end, priority, "password"))
            match = pattern.search(lowered, match.end())


def _lowered(text: str) -> str:
    """`text` lower-cased with every character at its original offset.

    U+0130 (İ) is the only character whose lower case is two characters long.
    """
    return text.replace("\u0130", "i").lower()


def _findings(text: str, judge: _Judge, findings: list[_Finding]) -> None:
    lowered = _lowered(text)
    _shaped_findings(text, findings)
    _keyword_findings(text, lowered, judge, findings)
    _scheme_findings(text, lowered, judge, findings)
    _url_password_findings(text, judge, findings)
    _flag_findings(text, lowered, judge, findings)


# --- JSON escapes ----------------------------------------------------------------------------

#: Splits a text into its plain runs and its runs of escapes (at the odd places): two-character
#: escapes (`\"`, `\n`) and `\uXXXX` escapes, each run of one width.
_JSON_ESCAPES = re.compile(
    # One backslash first, outside the alternatives: the engine's prefix search finds it.
    r"(\\(?:[\"\\/bfnrt](?:\\[\"\\/bfnrt])*+|u[0-9a-fA-F]{4}(?:\\u[0-9a-fA-F]{4})*+))"
)
#: The character each two-character escape stands for, by the letter after its backslash.
_ESCAPED_LETTERS = str.maketrans('"\\/bfnrt', '"\\/\b\f\n\r\t')
#: Most runs are one escape: looked up, not decoded.
_SINGLE_ESCAPES = {"\\" + letter: letter.translate(_ESCAPED_LETTERS) for letter in '"\\/bfnrt'}
#: How many levels of JSON in JSON are read unescaped: a tool call's arguments hold a command
#: whose JSON holds the secret; deeper nesting is rare.
_UNESCAPE_LEVELS = 2


class _Unescaped:
    """The lines of a text that hold JSON escapes, with the escapes undone, and the way back to
    the offsets of the source.

    Findings never span a line break of the source (a PEM block does, but its escaped form is
    one line, and its plain form is found in the source), so the lines without an escape, most
    of a window, are left out: each run of them becomes one line break. The text alternates
    plain runs, as in the source, and replacements: a run of escapes of one width (each escape
    one character of `text`) or a run of lines left out (one line break). For each replacement
    `_at` and `_view_ends` hold where it is in `text`, `_starts` and `_ends` what it stands for
    in the source. A span that begins or ends inside a replacement grows to the whole escape,
    or the whole run of lines, so a replacement never cuts an escape in two.

    Everything is sliced and summed a list at a time, never an escape at a time: a text of
    escapes only costs little more than one without."""

    __slots__ = ("_at", "_ends", "_starts", "_view_ends", "text")

    def __init__(self, texts: list[str], replaced: list[str], characters: list[str]) -> None:
        """`texts[i]` is followed by `replaced[i]` in the source and by `characters[i]` in
        `text`; there is one text more than replacements."""
        view = [""] * (2 * len(replaced) + 1)
        view[0::2], view[1::2] = texts, characters
        source = view.copy()
        source[1::2] = replaced
        view_ends = list(itertools.accumulate(map(len, view)))
        source_ends = list(itertools.accumulate(map(len, source)))
        self.text = "".join(view)
        self._at = view_ends[0:-1:2]
        self._view_ends = view_ends[1::2]
        self._starts = source_ends[0:-1:2]
        self._ends = source_ends[1::2]

    def _unit(self, position: int) -> tuple[int, int]:
        """The span in the source of the character at `position` of `text`: inside a
        replacement, its whole escape (or run of lines)."""
        index = bisect.bisect_right(self._at, position) - 1
        if index < 0:
            return position, position + 1
        at, view_end, end = self._at[index], self._view_ends[index], self._ends[index]
        if position >= view_end:
            source = end + position - view_end
            return source, source + 1
        start = self._starts[index]
        width = (end - start) // (view_end - at)
        unit = start + (position - at) * width
        return unit, unit + width

    def source_start(self, position: int) -> int:
        return self._unit(position)[0]

    def source_end(self, position: int) -> int:
        """Where a span that ends at `position` (exclusive) ends in the source."""
        return self._unit(position - 1)[1]


def _decoded(run: str) -> str:
    if run[1] == "u":
        return "".join(chr(int(run[index + 2 : index + 6], 16)) for index in range(0, len(run), 6))
    return run[1::2].translate(_ESCAPED_LETTERS)


def _unescaped(source: str) -> _Unescaped | None:
    """The lines of `source` that hold JSON escapes, unescaped; None when it holds none."""
    parts = _JSON_ESCAPES.split(source)
    if len(parts) == 1:
        return None
    texts, replaced = parts[0::2], parts[1::2]
    characters = [_SINGLE_ESCAPES.get(run) or _decoded(run) for run in replaced]
    # Left out: the lines before the first escape's line, those after the last escape's, and
    # those between two escapes' lines (a plain run with two line breaks or more).
    texts[-1] = texts[-1].partition("\n")[0]
    left_out = [index for index, text in enumerate(texts) if text.count("\n") > 1]
    if texts[0].count("\n") == 1:
        left_out.insert(0, 0)
    if not left_out:
        return _Unescaped(texts, replaced, characters)
    kept_texts: list[str] = []
    kept_replaced: list[str] = []
    kept_characters: list[str] = []
    done = 0
    for index in left_out:
        text = texts[index]
        first = 0 if index == 0 else text.index("\n")
        last = text.rindex("\n") + 1
        kept_texts += texts[done:index]
        kept_texts.append(text[:first])
        kept_replaced += replaced[done:index]
        kept_replaced.append(text[first:last])
        kept_characters += characters[done:index]
        kept_characters.append("\n")
        texts[index] = text[last:]
        done = index
    kept_texts += texts[done:]
    kept_replaced += replaced[done:]
    kept_characters += characters[done:]
    return _Unescaped(kept_texts, kept_replaced, kept_characters)


def _unescaped_findings(text: str, judge: _Judge, findings: list[_Finding]) -> None:
    """What the detectors find in `text` read unescaped, at `text`'s own offsets."""
    levels: list[_Unescaped] = []
    view = text
    while len(levels) < _UNESCAPE_LEVELS and "\\" in view:
        unescaped = _unescaped(view)
        if unescaped is None:
            return
        levels.append(unescaped)
        view = unescaped.text
        found: list[_Finding] = []
        _findings(view, judge, found)
        for start, end, priority, kind in found:
            for level in reversed(levels):
                start, end = level.source_start(start), level.source_end(end)
            findings.append((start, end, priority, kind))


def redact(text: str) -> Redaction:
    """Replace every secret in `text` by `[REDACTED:<kind>]` and count them per kind."""
    if len(text) < _MIN_LENGTH:  # every detector needs that much of a value
        return Redaction(text=text, counts=_NONE_FOUND)
    findings: list[_Finding] = []
    judge = _Judge()
    _findings(text, judge, findings)
    if "\\" in text:
        _unescaped_findings(text, judge, findings)
    if not findings:
        return Redaction(text=text, counts=_NONE_FOUND)
    findings.sort()

    counts: Counter[str] = Counter()
    pieces: list[str] = []
    cursor = 0
    index = 0
    while index < len(findings):
        start, end, priority, kind = findings[index]
        index += 1
        # Overlapping spans become one replacement, named by the most specific detector.
        while index < len(findings) and findings[index][0] < end:
            _, other_end, other_priority, other_kind = findings[index]
            end = max(end, other_end)
            if other_priority < priority:
                priority, kind = other_priority, other_kind
            index += 1
        pieces.append(text[cursor:start])
        pieces.append(_marker(kind))
        cursor = end
        counts[kind] += 1
    pieces.append(text[cursor:])
    return Redaction(text="".join(pieces), counts=MappingProxyType(_ordered(counts)))


def redact_strings(value: Any) -> Any:
    """`value`, a JSON-like structure (mappings, lists, strings, numbers), with every string in
    it redacted; any other value becomes its redacted `str`. Keys are kept: they are the names
    the caller chose, not text it was given."""
    if isinstance(value, str):
        return redact(value).text
    if isinstance(value, Mapping):
        return {key: redact_strings(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_strings(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact(str(value)).text  # what `json.dumps(..., default=str)` would write


def merge_counts(*counts: Mapping[str, int]) -> dict[str, int]:
    """Sum per-kind counts (of several windows), dropping kinds that sum to zero."""
    total: Counter[str] = Counter()
    for mapping in counts:
        total.update(mapping)
    return _ordered(total)


def _ordered(counts: Counter[str]) -> dict[str, int]:
    known = [kind for kind in KINDS if counts[kind] > 0]
    unknown = sorted(kind for kind, n in counts.items() if n > 0 and kind not in _PRIORITY)
    return {kind: counts[kind] for kind in (*known, *unknown)}
