"""The audit log: who changed an index's sources (added, removed, synced, uploaded) or the
served API keys, when, what they named, and whether it was done, refused or failed.

One JSON object per line, appended, never rewritten: each record is one `write` on a file
opened `O_APPEND` (under an exclusive lock, since replicas on one machine share it), so
records from several processes never interleave. The file is mode 600 and opened without
following a symlink. Where: `$FOOTNOTE_AUDIT_LOG`, else `audit.jsonl` beside the index
directory (as `feedback.sqlite3` is), else, for a `postgresql://` index, in the user's
Footnote folder. The server, `footnote audit` and `footnote keys` use the same rule.

Who is the authenticated identity as the server names its owner (`api_key:root`,
`jwt:alice`), or `local:<login>` for the operator at this machine's command line. The file
is read as untrusted: a line that is not a record is counted as damaged, never trusted.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import getpass
import json
import logging
import os
import re
import stat
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from footnote.models.embedding_choice import state_dir
from footnote.store.backends import default_index, is_postgres
from footnote.store.postgres import redact

AUDIT_ENV = "FOOTNOTE_AUDIT_LOG"
AUDIT_NAME = "audit.jsonl"
Result = Literal["ok", "refused", "error"]
MAX_LINE = 64 * 1024
"""A longer line is not one this module wrote: counted as damaged, not parsed."""
_MAX_NAMES = 50
_MAX_TEXT = 300
_USER_INFO = re.compile(r"(?<=://)[^/@\s]+@")

log = logging.getLogger("footnote.audit")


class AuditError(OSError):
    """The audit log cannot be opened as a private regular file; the message says why."""


def audit_location(index: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Where the audit log of `index` (default: $FOOTNOTE_INDEX) lives, by the rule above."""
    env = os.environ if env is None else env
    if explicit := env.get(AUDIT_ENV, "").strip():
        return Path(explicit)
    index = index or default_index()
    if is_postgres(index):
        return state_dir() / AUDIT_NAME
    return Path(index).resolve().parent / AUDIT_NAME


def local_operator() -> str:
    """Who runs a command at this machine: the login name the OS gives the process."""
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"local:uid{os.geteuid()}"


def _text(value: Any) -> str:
    """One line, short, with passwords and URL user info hidden."""
    line = " ".join(str(value).split())
    return _USER_INFO.sub("***@", redact(line))[:_MAX_TEXT]


def _names(values: Any) -> list[str]:
    items = list(values) if isinstance(values, list | tuple) else []
    return [_text(v) for v in items[:_MAX_NAMES]]


def record(
    path: Path,
    *,
    who: str,
    action: str,
    result: Result,
    reason: str = "",
    index: str = "",
    target: str = "",
    sources: Any = (),
    uploads: Any = (),
    summary: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Append one record to the log at `path`; returns it. AuditError if the log cannot be
    opened as a private regular file."""
    entry: dict[str, Any] = {
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "who": _text(who),
        "action": _text(action),
        "result": result,
    }
    if index:
        entry["index"] = _text(index)
    if target:
        entry["target"] = _text(target)
    if sources:
        entry["sources"] = _names(sources)
    if uploads:
        entry["uploads"] = _names(uploads)
    if reason:
        entry["reason"] = _text(reason)
    if summary:
        entry["summary"] = {k: v for k, v in summary.items() if isinstance(v, int)}
    line = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        descriptor = os.open(
            path,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            0o600,
        )
    except OSError as exc:
        raise AuditError(f"audit log {path}: {exc.strerror or exc}") from None
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise AuditError(f"audit log {path} is not a regular file")
        if stat.S_IMODE(found.st_mode) != 0o600:
            os.fchmod(descriptor, 0o600)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
    return entry


def record_quietly(path: Path, **fields: Any) -> None:
    """`record`, logging (not raising) when the log cannot be written: the action it records
    has already been done or refused, and must be reported as such to its caller."""
    try:
        record(path, **fields)
    except (AuditError, OSError) as exc:
        log.error("footnote: could not write the audit log: %s", exc)


def read(path: Path, limit: int = 100) -> tuple[list[dict[str, Any]], int]:
    """The last `limit` records, oldest first, and how many lines were not records."""
    if limit < 1:
        return [], 0
    kept: deque[dict[str, Any]] = deque(maxlen=limit)
    damaged = 0
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise AuditError(f"audit log {path}: {exc.strerror or exc}") from None
    with os.fdopen(descriptor, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise AuditError(f"audit log {path} is not a regular file")
        for raw in source:
            entry = _parsed(raw)
            if entry is None:
                damaged += 1
            else:
                kept.append(entry)
    return list(kept), damaged


def _parsed(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > MAX_LINE or not raw.endswith(b"\n"):
        return None
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    wanted = {"time": str, "who": str, "action": str, "result": str}
    if not isinstance(entry, dict) or not all(
        isinstance(entry.get(k), t) for k, t in wanted.items()
    ):
        return None
    return entry
