"""Secrets hidden from what Footnote prints and logs: a database URL or libpq setting in an
error message keeps its host and name and loses its password. Apart from the PostgreSQL store
(postgres.py) because every command reports errors through it, and a command's start-up
should not import numpy and the store to do so."""

from __future__ import annotations

import re
from urllib.parse import unquote

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_QUERY_PARAM = re.compile(r"([?&;])([^=&#\s]+)=([^&#\s]*)")
_KEY_VALUE = re.compile(
    r"(?i)\b([a-z_]*(?:pass|secret|token)[a-z_]*)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'&;,]+)"
)
_SECRET_NAME = re.compile(r"(?i)pass|secret|token")
"""Setting names whose values are hidden: password, sslpassword, and the like."""


def redact(text: str) -> str:
    """`text` (a URL, a libpq `key=value` string or a message holding either) with every
    password hidden: in a URL's user info, in its query (`?password=`, `&sslpassword=`,
    percent-encoded names included) and in `password=...` settings."""
    text = _URL.sub(lambda m: _redact_url(m.group(0)), text)
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    at = rest.rfind("@")
    if at >= 0:  # everything before the last @ is user info (over-hiding beats leaking)
        user, colon, _password = rest[:at].partition(":")
        rest = f"{user}{colon}{'***' if colon else ''}{rest[at:]}"

    def param(m: re.Match[str]) -> str:
        hidden = _SECRET_NAME.search(unquote(m.group(2))) or _KEY_VALUE.search(
            unquote(m.group(3))  # a value that itself holds `password=...`, encoded or not
        )
        return f"{m.group(1)}{m.group(2)}={'***' if hidden else m.group(3)}"

    return f"{scheme}://{_QUERY_PARAM.sub(param, rest)}"
