"""Secret redaction for untrusted transcript text.

Every window is redacted before it is sent to the LLM, so a secret never leaves the machine and
never reaches a skill file. Each secret is replaced by `[REDACTED:<kind>]`; the caller learns how
many secrets of which kind were replaced, never their values.

Two passes over the text, each one precompiled regular expression:

1. Secrets with a recognisable shape (PEM blocks, provider prefixes such as `ghp_` or `sk-ant-`,
   JWTs). The shape is the evidence, so every match is replaced.
2. Secrets recognised only by their context: an assignment to a secret-sounding key
   (`password=`, `"api_key": "…"`, `export SECRET_KEY=…`, `--token …`), an `Authorization`
   scheme (`Bearer …`, `Basic …`), or the password of a URL (`scheme://user:pass@host`). The
   context alone is weak evidence, so the value must also look like a secret: long enough,
   varied enough (Shannon entropy), and neither a placeholder (`<token>`, `$API_KEY`, `None`)
   nor a code expression (`os.environ[...]`, `self.token`). The key name stays in the text.

The specific pass runs first, so `token=ghp_…` is reported as a `github_token`, not a `token`.
Redacted text is a fixed point: no pattern matches a `[REDACTED:<kind>]` marker, which keeps
`redact` idempotent. Every repetition in the patterns is bounded or possessive, so the run
time stays linear in the input even for hostile text.
"""

from __future__ import annotations

import math
import re
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


# --- pass 1: secrets with a recognisable shape ----------------------------------------------

# A PEM label such as " RSA PRIVATE KEY", " ENCRYPTED PRIVATE KEY", " PGP PRIVATE KEY BLOCK".
_PEM_LABEL = r"[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?"
# A complete block: the body is anything up to the next run of five dashes, which must be END.
# Excluding "-----" keeps the scan from one BEGIN to the next, so repeated BEGINs stay linear.
_PEM_COMPLETE = rf"(?:[^-]|-(?!----)){{0,65536}}+-----END{_PEM_LABEL}-----"
# A block cut off before its END (tool output is truncated): base64 lines, real or JSON-escaped
# line breaks, and the headers of encrypted keys.
_PEM_TRUNCATED = (
    r"(?:[A-Za-z0-9+/=\r\n]|\\[rn]|(?:Proc-Type|DEK-Info|Comment|Version|Hash):[^\r\n\\]*)*+"
)
_PEM_BLOCK = rf"-----BEGIN{_PEM_LABEL}-----(?:{_PEM_COMPLETE}|{_PEM_TRUNCATED})"

# `key = value`, `key: value`, `"key": value`, `key := value`, `key => value`.
_ASSIGNMENT_SEPARATOR = r"[\"']?[ \t]*(?::=|=>|[:=])[ \t]*"

# (kind, pattern). A pattern with a group named `secret` has only that span replaced (the key
# name or JSON quotes around it stay); otherwise the whole match is the secret. At one position
# the earlier rule wins, so `sk-ant-` precedes `sk-`.
_SHAPED_RULES: tuple[tuple[str, str], ...] = (
    (
        "gcp_service_account_key",
        rf"\"private_key\"[ \t]*:[ \t]*\"(?P<secret>{_PEM_BLOCK}(?:\\n)?)",
    ),
    ("private_key", _PEM_BLOCK),
    ("aws_access_key_id", r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    (
        "aws_secret_access_key",
        # Also the prompt of `aws configure`: "AWS Secret Access Key [****abcd]: <secret>".
        r"(?i:aws[ _]?secret[ _]?access[ _]?key|secret[ _]?access[ _]?key|aws[ _]?secret[ _]?key)"
        rf"(?:[ \t]*\[[^\]\r\n]{{0,64}}\])?{_ASSIGNMENT_SEPARATOR}[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
    ),
    (
        "github_token",
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}+|github_pat_[A-Za-z0-9_]{30,}+)",
    ),
    ("gitlab_token", r"(?<![A-Za-z0-9])gl(?:pat|dt|rt|ptt|oas)-[A-Za-z0-9_-]{20,}+"),
    ("anthropic_api_key", r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,}+"),
    # Also the `sk-` keys of OpenAI-compatible providers (DeepSeek and others). A real key
    # always holds a digit; hyphenated prose such as "sk-some-long-words" does not.
    ("openai_api_key", r"(?<![A-Za-z0-9_-])sk-(?=[A-Za-z_-]*+[0-9])[A-Za-z0-9_-]{20,}+"),
    (
        "slack_webhook",
        r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}+",
    ),
    (
        "slack_token",
        r"(?<![A-Za-z0-9])(?:xox[abposre]-[A-Za-z0-9-]{10,}+|xapp-[0-9]-[A-Za-z0-9-]{10,}+)",
    ),
    ("gcp_api_key", r"(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{30,}+"),
    ("huggingface_token", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}+"),
    (
        "stripe_key",
        r"(?<![A-Za-z0-9])(?:(?:sk|rk)_(?:live|test)|pk_live|whsec)_[A-Za-z0-9]{16,}+",
    ),
    ("npm_token", r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36,}+"),
    ("pypi_token", r"(?<![A-Za-z0-9])pypi-AgE[A-Za-z0-9_-]{50,}+"),
    ("jwt", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"),
)


def _combine(rules: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    """One alternation over all rules, so the text is scanned once; group `r<i>` is rule i."""
    branches = []
    kind_by_group: dict[str, str] = {}
    for index, (kind, pattern) in enumerate(rules):
        group = f"r{index}"
        kind_by_group[group] = kind
        branches.append(f"(?P<{group}>{pattern.replace('(?P<secret>', f'(?P<s{index}>')})")
    return re.compile("|".join(branches)), kind_by_group


_SHAPED, _SHAPED_KIND_BY_GROUP = _combine(_SHAPED_RULES)


# --- pass 2: secrets recognised by their context --------------------------------------------

# A secret-sounding word directly before a separator. The whole key (`DB_PASSWORD`, `x-api-key`)
# is recovered by scanning backwards, which is cheaper than matching every identifier.
# `[ \t]+` is the separator of a command-line flag (`--token VALUE`), accepted only after `-`.
_CONTEXT = re.compile(
    r"(?P<keyword>(?i:passphrase|password|passwd|pwd|pass|pw|secret|token|authorization|auth|key))"
    rf"(?P<separator>{_ASSIGNMENT_SEPARATOR}|[ \t]+)"
    r"|(?P<scheme>\b(?i:bearer|basic)[ \t]+)"
    r"|(?P<userinfo>://[^\s:/?#@\"'<>\[\]]{0,128}+:)"
)
_QUOTED_VALUE = re.compile(r"\"((?:[^\"\\\r\n]|\\.){1,1024}+)\"|'((?:[^'\\\r\n]|\\.){1,1024}+)'")
# An unquoted value ends where a shell, a URL query or a YAML flow mapping would end it.
_BARE_VALUE = re.compile(r"[^\s\"'`,;&|<>(){}\[\]]{1,1024}+")
_URL_PASSWORD = re.compile(r"([^\s/?#@\"'<>]{1,256}+)@")
# The type annotation between `name:` and `= value` (`token: str = "…"`).
_ANNOTATION = re.compile(r"[A-Za-z_][\w.]{0,80}+(?:\[[\w., \[\]|]{0,80}+)?[ \t]*=(?!=)[ \t]*")
_KEY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_KEY_MAX_LENGTH = 64
_KEY_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# `…_key` is a secret only with one of these qualifiers (`api_key`, `SECRET_KEY`), not `key:`.
_SECRET_KEY_SUFFIXES = (
    "secretkey",
    "accesskey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "authkey",
)
_SCHEME_KINDS = {"bearer": "bearer_token", "basic": "basic_auth"}

_MIN_LENGTH = 8
_MIN_ENTROPY = 2.5
# Text of a single character class (all lowercase, all digits) is mostly words and numbers, so
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
# Unquoted values that are code: `os.environ`, `password_from_env`, `accessToken`, `Optional`.
_CODE_IDENTIFIER = re.compile(
    r"[A-Za-z_]+(?:\.[A-Za-z_]+)+|_?[a-z]+(?:_[a-z]+)+|_?[a-z]+(?:[A-Z][a-z]+)+|(?:[A-Z][a-z]+)+"
)

KINDS: tuple[str, ...] = (
    *(kind for kind, _ in _SHAPED_RULES),
    "password",
    "secret",
    "token",
    "api_key",
    "bearer_token",
    "basic_auth",
    "url_password",
)


def _shannon_entropy(value: str) -> float:
    length = len(value)
    return -sum(n / length * math.log2(n / length) for n in Counter(value).values())


def _character_classes(value: str) -> int:
    return (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
        + any(not c.isalnum() for c in value)
    )


def _looks_secret(value: str, *, unquoted: bool) -> bool:
    """Whether a value in a secret context is a real secret rather than a placeholder or code."""
    if len(value) < _MIN_LENGTH:
        return False
    lowered = value.lower()
    if lowered in _PLACEHOLDER_VALUES or any(f in lowered for f in _PLACEHOLDER_FRAGMENTS):
        return False
    if _PLACEHOLDER_SHAPE.fullmatch(value) or _CONSTANT_NAME.fullmatch(value):
        return False
    if unquoted and _CODE_IDENTIFIER.fullmatch(value):
        return False
    entropy = _shannon_entropy(value)
    if _character_classes(value) >= 2:
        return entropy >= _MIN_ENTROPY
    return len(value) >= _SINGLE_CLASS_MIN_LENGTH and entropy >= _SINGLE_CLASS_MIN_ENTROPY


def _key_ending_at(text: str, keyword_start: int, keyword_end: int) -> str:
    start = keyword_start
    limit = max(0, keyword_start - _KEY_MAX_LENGTH)
    while start > limit and text[start - 1] in _KEY_CHARACTERS:
        start -= 1
    return text[start:keyword_end]


def _assignment_kind(key: str, keyword: str) -> str | None:
    """The kind of secret assigned to `key` (which ends with `keyword`), or None if none."""
    segments = [segment.lower() for segment in _KEY_SEGMENT.findall(key)]
    last_segment = segments[-1] if segments else ""
    compact = "".join(segments)
    match keyword.lower():
        case "password" | "passwd" | "passphrase":
            return "password"
        case "pwd":
            # `PWD` and `OLDPWD` are the shell's working directories.
            return "password" if compact not in ("pwd", "oldpwd") else None
        case "pass" | "pw" as short:
            return "password" if last_segment == short else None
        case "secret":
            return "secret"
        case "token" | "authorization":
            return "token"
        case "auth":
            return "secret" if last_segment == "auth" else None
        case _:
            if compact.endswith("apikey"):
                return "api_key"
            return "secret" if compact.endswith(_SECRET_KEY_SUFFIXES) else None


def _assignment_value(
    text: str, match: re.Match[str], *, flag_only: bool
) -> tuple[int, int, bool] | None:
    """Span of the assigned value and whether it is unquoted, or None if there is none."""
    position = match.end()
    quoted = _QUOTED_VALUE.match(text, position)
    if quoted is not None and not flag_only:
        group = 1 if quoted.group(1) is not None else 2
        return quoted.start(group), quoted.end(group), False
    bare = _BARE_VALUE.match(text, position)
    if bare is None:
        return None
    if flag_only and bare.group().startswith("-"):
        return None
    if ":" in match.group("separator"):
        annotated = _ANNOTATION.match(text, position)
        if annotated is not None:
            quoted = _QUOTED_VALUE.match(text, annotated.end())
            if quoted is not None:
                group = 1 if quoted.group(1) is not None else 2
                return quoted.start(group), quoted.end(group), False
            bare = _BARE_VALUE.match(text, annotated.end())
            if bare is None:
                return None
    # A call or a subscript (`getpass(`, `os.environ[`) is code, not a value.
    if text[bare.end() : bare.end() + 1] in ("(", "["):
        return None
    return bare.start(), bare.end(), True


def _judge_context(text: str, match: re.Match[str]) -> tuple[int, int, str] | None:
    """The span and kind of the secret this context introduces, or None."""
    if match.group("userinfo") is not None:
        password = _URL_PASSWORD.match(text, match.end())
        if password is None or not _looks_secret(password.group(1), unquoted=False):
            return None
        return password.start(1), password.end(1), "url_password"
    if match.group("scheme") is not None:
        value = _BARE_VALUE.match(text, match.end())
        if value is None or not _looks_secret(value.group(), unquoted=True):
            return None
        scheme = match.group("scheme").strip().lower()
        return value.start(), value.end(), _SCHEME_KINDS[scheme]
    key = _key_ending_at(text, match.start("keyword"), match.end("keyword"))
    is_flag = key.startswith("-")
    flag_only = not match.group("separator").strip()
    if flag_only and not is_flag:
        return None
    kind = _assignment_kind(key.lstrip("-."), match.group("keyword"))
    if kind is None:
        return None
    value = _assignment_value(text, match, flag_only=flag_only)
    if value is None:
        return None
    start, end, unquoted = value
    if not _looks_secret(text[start:end], unquoted=unquoted):
        return None
    return start, end, kind


def _redact_context(text: str, counts: Counter[str]) -> str:
    pieces: list[str] = []
    cursor = 0
    for match in _CONTEXT.finditer(text):
        if match.start() < cursor:
            continue
        found = _judge_context(text, match)
        if found is None:
            continue
        start, end, kind = found
        pieces.append(text[cursor:start])
        pieces.append(_marker(kind))
        cursor = end
        counts[kind] += 1
    if not pieces:
        return text
    pieces.append(text[cursor:])
    return "".join(pieces)


def _redact_shaped(text: str, counts: Counter[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        group = match.lastgroup
        assert group is not None  # every alternative is a named group
        kind = _SHAPED_KIND_BY_GROUP[group]
        counts[kind] += 1
        secret_group = f"s{group[1:]}"
        if secret_group not in _SHAPED.groupindex:
            return _marker(kind)
        start, end = match.span(secret_group)
        whole_start, whole_end = match.span()
        return text[whole_start:start] + _marker(kind) + text[end:whole_end]

    return _SHAPED.sub(replace, text)


def redact(text: str) -> Redaction:
    """Replace every secret in `text` by `[REDACTED:<kind>]` and count them per kind."""
    counts: Counter[str] = Counter()
    redacted = _redact_context(_redact_shaped(text, counts), counts)
    return Redaction(text=redacted, counts=MappingProxyType(_ordered(counts)))


def merge_counts(*counts: Mapping[str, int]) -> dict[str, int]:
    """Sum per-kind counts (of several windows), dropping kinds that sum to zero."""
    total: Counter[str] = Counter()
    for mapping in counts:
        total.update(mapping)
    return _ordered(total)


def _ordered(counts: Counter[str]) -> dict[str, int]:
    known = [kind for kind in KINDS if counts[kind] > 0]
    unknown = sorted(kind for kind, n in counts.items() if n > 0 and kind not in KINDS)
    return {kind: counts[kind] for kind in (*known, *unknown)}
