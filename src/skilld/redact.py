"""Secret redaction for untrusted transcript text.

Every window is redacted before it is sent to the LLM, so a secret never leaves the machine and
never reaches a skill file. Each secret is replaced by `[REDACTED:<kind>]`; the caller learns how
many secrets of which kind were replaced, never their values.

Two families of detectors find spans in the original text:

- Shaped secrets (PEM blocks, provider prefixes such as `ghp_` or `sk-ant-`, JWTs): the shape is
  the evidence, so every match counts.
- Contextual secrets: the value of an assignment to a secret-sounding key (`password=`,
  `"api_key": "…"`, `export SECRET_KEY=…`, `--token …`), of an `Authorization` scheme
  (`Bearer …`, `Basic …`), or the password of a URL (`scheme://user:pass@host`). The context is
  weak evidence, so the value must also look like a secret: long and varied enough (Shannon
  entropy), and neither a placeholder (`<token>`, `$API_KEY`, `None`) nor code
  (`os.environ[...]`, `self.token`). Only the value is replaced; the key name stays.

Overlapping spans merge into one replacement named after the most specific detector, so
`token=ghp_…` is reported as one `github_token`. A `[REDACTED:<kind>]` marker matches no
detector, which makes `redact` idempotent.

Speed: a window (up to ~100 kB) is redacted on every tick. Each detector is a separate
precompiled pattern that begins with a literal, so the regex engine skips to candidates with
its fast prefix search instead of trying every position; the keyword detectors run on a
lower-cased copy of the text for the same reason. Every repetition is bounded or possessive,
so the time stays linear in the input, even for hostile text.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["KINDS", "Redaction", "merge_counts", "redact"]


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

# (kind, pattern), most specific first: where spans overlap, the earlier rule names the
# replacement. A pattern with a group `secret` has only that span replaced.
_SHAPED_RULES: tuple[tuple[str, str], ...] = (
    (
        "gcp_service_account_key",
        rf"\"private_key\"[ \t]*:[ \t]*\"(?P<secret>{_PEM_BLOCK}(?:\\n)?)",
    ),
    ("private_key", _PEM_BLOCK),
    *(
        ("aws_access_key_id", rf"{prefix}(?<![A-Za-z0-9]{prefix})[A-Z0-9]{{16}}(?![A-Za-z0-9])")
        for prefix in ("AKIA", "ASIA", "ABIA", "ACCA")
    ),
    (
        # The prompt of `aws configure`; assignments are found by the keyword detectors.
        "aws_secret_access_key",
        r"AWS Secret Access Key \[[^\]\r\n]{0,64}\]:[ \t]*(?P<secret>[A-Za-z0-9/+]{40})"
        r"(?![A-Za-z0-9/+=])",
    ),
    (
        "github_token",
        r"g(?<![A-Za-z0-9]g)(?:h[pousr]_[A-Za-z0-9]{30,}+|ithub_pat_[A-Za-z0-9_]{30,}+)",
    ),
    ("gitlab_token", r"gl(?<![A-Za-z0-9]gl)(?:pat|dt|rt|ptt|oas)-[A-Za-z0-9_-]{20,}+"),
    ("anthropic_api_key", r"sk-ant-(?<![A-Za-z0-9_-]sk-ant-)[A-Za-z0-9_-]{20,}+"),
    # Also the `sk-` keys of OpenAI-compatible providers (DeepSeek and others). A real key holds
    # a digit; hyphenated prose such as "sk-some-long-words" does not.
    (
        "openai_api_key",
        r"sk-(?<![A-Za-z0-9_-]sk-)(?=[A-Za-z_-]*+[0-9])[A-Za-z0-9_-]{20,}+",
    ),
    *(
        (
            "slack_webhook",
            rf"{scheme}hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{{10,}}+",
        )
        for scheme in ("https://", "http://", "")
    ),
    ("slack_token", r"x(?<![A-Za-z0-9]x)(?:ox[abposre]-|app-[0-9]-)[A-Za-z0-9-]{10,}+"),
    ("gcp_api_key", r"AIza(?<![A-Za-z0-9_-]AIza)[A-Za-z0-9_-]{30,}+"),
    ("huggingface_token", r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}+"),
    ("stripe_key", r"sk_(?<![A-Za-z0-9]sk_)(?:live|test)_[A-Za-z0-9]{16,}+"),
    ("stripe_key", r"rk_(?<![A-Za-z0-9]rk_)(?:live|test)_[A-Za-z0-9]{16,}+"),
    ("stripe_key", r"pk_live_(?<![A-Za-z0-9]pk_live_)[A-Za-z0-9]{16,}+"),
    ("stripe_key", r"whsec_(?<![A-Za-z0-9]whsec_)[A-Za-z0-9]{24,}+"),
    ("npm_token", r"npm_(?<![A-Za-z0-9]npm_)[A-Za-z0-9]{36,}+"),
    ("pypi_token", r"pypi-AgE(?<![A-Za-z0-9]pypi-AgE)[A-Za-z0-9_-]{50,}+"),
    ("jwt", r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"),
)
_SHAPED: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern)) for kind, pattern in _SHAPED_RULES
)

# --- contextual secrets ----------------------------------------------------------------------

_CONTEXT_KINDS = (
    "password",
    "secret",
    "token",
    "api_key",
    "bearer_token",
    "basic_auth",
    "url_password",
)
KINDS: tuple[str, ...] = (*dict.fromkeys(kind for kind, _ in _SHAPED_RULES), *_CONTEXT_KINDS)
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
    ("token", "token"),
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
_SCHEME_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("bearer_token", re.compile(rf"bearer(?<![a-z0-9_]bearer)[ \t]+{_TOKEN68}")),
    ("basic_auth", re.compile(rf"basic(?<![a-z0-9_]basic)[ \t]+{_TOKEN68}")),
)
# `scheme://user:password@`. Neither part may hold a colon or a slash, so the scans that start
# at successive `://` never overlap.
_URL_PASSWORD = re.compile(r"://[^\s:/?#@\"'<>\[\]]{0,128}+:(?P<password>[^\s:/?#@\"'<>]{1,256}+)@")
_URL_USER = re.compile(r"[^\s:/?#@\"'<>\[\]]*+")

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


#: (kind, priority, pattern, the group of the span to replace) of each shaped rule.
_SHAPED_DETECTORS: tuple[tuple[str, int, re.Pattern[str], str | int], ...] = tuple(
    (kind, _PRIORITY[kind], pattern, "secret" if "secret" in pattern.groupindex else 0)
    for kind, pattern in _SHAPED
)
#: The counts of a text with no secret.
_NONE_FOUND: Mapping[str, int] = MappingProxyType({})


# The detectors loop over `search` rather than `finditer`: most detectors find nothing in most
# texts, and then a search costs a third of an iterator (a tick redacts every failure's line).
# No detector matches the empty string, so each search starts where the last match ended.


def _shaped_findings(text: str, findings: list[_Finding]) -> None:
    for kind, priority, pattern, secret_group in _SHAPED_DETECTORS:
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
    for kind, pattern in _SCHEME_PATTERNS:
        priority = _PRIORITY[kind]
        match = pattern.search(lowered)
        while match is not None:
            start, end = match.span("bare")
            end = start + len(text[start:end].rstrip("."))
            if judge.looks_secret(text[start:end], unquoted=True):
                findings.append((start, end, priority, kind))
            match = pattern.search(lowered, match.end())


def _url_password_findings(text: str, judge: _Judge, findings: list[_Finding]) -> None:
    priority = _PRIORITY["url_password"]
    match = _URL_PASSWORD.search(text)
    while match is not None:
        if judge.looks_secret(match.group("password"), unquoted=False):
            start, end = match.span("password")
            findings.append((start, end, priority, "url_password"))
        match = _URL_PASSWORD.search(text, match.end())


def _lowered(text: str) -> str:
    """`text` lower-cased with every character at its original offset.

    U+0130 (İ) is the only character whose lower case is two characters long.
    """
    return text.replace("\u0130", "i").lower()


def redact(text: str) -> Redaction:
    """Replace every secret in `text` by `[REDACTED:<kind>]` and count them per kind."""
    findings: list[_Finding] = []
    lowered = _lowered(text)
    _shaped_findings(text, findings)
    judge = _Judge()
    _keyword_findings(text, lowered, judge, findings)
    _scheme_findings(text, lowered, judge, findings)
    _url_password_findings(text, judge, findings)
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
