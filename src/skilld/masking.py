"""What may be shown of a URL: every path that prints, logs or stores one (status, doctor,
config, the panel, a sync round's error, git's own stderr) masks it here first.

A team remote's URL often carries a token (`https://x-access-token:TOKEN@host/…`,
`https://TOKEN@host/…`, `?private_token=…`), and git echoes the URL in its errors. Shapes
redaction knows are not enough: a token here has no prefix to find it by, so what is masked is
decided by where it sits. Standard library only: `skilld status` imports this.
"""

from __future__ import annotations

import re
import urllib.parse

#: A query or fragment key holding one of these (any case) has its value masked.
SECRET_QUERY_WORDS = ("tok", "key", "pass", "pwd", "secret", "sig", "auth", "credential")
# Patterns are compiled on first use (by `re`'s cache): `status` imports this module and most
# installations have no team remote to mask.
#: A user name kept as it is (`git@`, `alice@`): letters and `._-` only. Anything else in the
#: user info (a token used as the user name, a password) is masked.
_PLAIN_USER = r"[A-Za-z._-]{1,32}"
_MASK = "****"
_URL_USERINFO = r"://[^/?#\s]*@"
_URL_IN_TEXT = r"[A-Za-z][A-Za-z0-9+.-]{0,30}+://[^\s'\"<>`]++"


def masked_url(url: str) -> str:
    """`url` as it may be printed, logged or stored: user info other than a plain user name
    masked, and secret-looking query and fragment values."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return re.sub(_URL_USERINFO, f"://{_MASK}@", url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        shown = user if re.fullmatch(_PLAIN_USER, user) else _MASK
        netloc = f"{shown}{':' + _MASK if colon else ''}@{hostport}"
        parts = parts._replace(netloc=netloc)
    parts = parts._replace(query=_masked_pairs(parts.query), fragment=_masked_pairs(parts.fragment))
    return urllib.parse.urlunsplit(parts)


def mask_urls(text: str) -> str:
    """`text` (git's stderr, an error message) with every URL in it masked as `masked_url`."""
    return re.sub(_URL_IN_TEXT, lambda match: masked_url(match.group()), text)


def _masked_pairs(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        key, equals, value = pair.partition("=")
        secret = equals and value and any(word in key.lower() for word in SECRET_QUERY_WORDS)
        pairs.append(f"{key}={_MASK}" if secret else pair)
    return "&".join(pairs)
