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
#: An ssh login kept as it is (`ssh://git@host/`): letters and `._-` only. In any other URL the
#: whole user info is masked, whatever it looks like: an https server takes the token as the
#: user name (`https://TOKEN@host/`, `https://TOKEN:x-oauth-basic@host/`) as well as the
#: password, and a short token of letters alone looks like any user name.
_PLAIN_USER = r"[A-Za-z._-]{1,32}"
_LOGIN_SCHEMES = ("ssh", "git+ssh", "ssh+git")
_MASK = "****"
_URL_USERINFO = r"://[^/?#\s]*@"
_URL_IN_TEXT = r"[A-Za-z][A-Za-z0-9+.-]{0,30}+://[^\s'\"<>`]++"


def masked_url(url: str) -> str:
    """`url` as it may be printed, logged or stored: its user info masked (but a plain ssh
    login), and secret-looking query and fragment values; the host and path as they are."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return re.sub(_URL_USERINFO, f"://{_MASK}@", url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        login = parts.scheme.lower() in _LOGIN_SCHEMES and re.fullmatch(_PLAIN_USER, user)
        shown = user if login else _MASK
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
