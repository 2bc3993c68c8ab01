"""The audit log: who changed an index's sources (added, removed, synced, uploaded) or the
served API keys, when, what they named, and whether it was done, refused or failed.

One home per deployment: `$FOOTNOTE_AUDIT_LOG`, else `audit.jsonl` in the deployment's state
folder (`$FOOTNOTE_STATE_DIR`, see `footnote.store.private.state_dir`), whatever
index a record is about (each record names it). The server, `footnote audit` and
`footnote keys` use this one rule, and `footnote serve` passes the location it resolved to
its server processes, so the command line and the server read and write one file. (Earlier
releases kept a log beside each index; those files are left where they were, and
`footnote audit --file PATH` reads them.)

One JSON object per line, appended, never rewritten: writers take an exclusive lock on
`audit.jsonl.lock` beside it (replicas on one machine share the log) and append each record
in one `write`, so records from several processes never interleave and none is lost when
the log rotates. The files are mode 600 and opened without following a symlink.

Bounded and inert: each text field is one line of at most 300 characters (a named source or
upload 120), each list at most 20 names, and what was cut is said (`…[+N chars]`,
`sources_omitted`), so one record stays a few kilobytes whatever a caller sends. Characters
a terminal would act on (control characters, hence ANSI escapes; format characters such as
bidi overrides) are written out as visible escapes (`\\x1b`), and runs of whitespace become
one space, so a caller's text can neither steer a terminal nor pass for another field or
line. Rotated by size: a record that would take the log past `ROTATE_BYTES` first moves it to
`audit.jsonl.1` (`.1` to `.2`, and so on; the oldest of `KEEP_FILES` is dropped); reading
goes back through them.

Who is the authenticated identity as the server names its owner (`api_key:root`,
`jwt:alice`), or `local:<login>` for the operator at this machine's command line. The files
are read as untrusted: a line that is not a record is counted as damaged, never trusted, and
every field read is made inert again before anyone is shown it.
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

from footnote.store.backends import is_postgres
from footnote.store.private import state_dir
from footnote.store.redaction import redact

AUDIT_ENV = "FOOTNOTE_AUDIT_LOG"
AUDIT_NAME = "audit.jsonl"
Result = Literal["ok", "refused", "error"]
RESULTS: tuple[Result, ...] = ("ok", "refused", "error")
MAX_LINE = 64 * 1024
"""A longer line is not one this module wrote: counted as damaged, not parsed."""
ROTATE_BYTES = 10 * 1024 * 1024
"""The size past which the log is moved aside (to `audit.jsonl.1`) before the next record."""
KEEP_FILES = 5
"""How many moved-aside logs are kept (`.1` newest to `.5` oldest)."""
_MAX_NAMES = 20
_MAX_NAME = 120
_MAX_TEXT = 300
_REDACT_FACTOR = 4
_LIST_FIELDS = ("sources", "uploads")
_TEXT_FIELDS = ("time", "who", "action", "result", "index", "target", "reason")
_USER_INFO = re.compile(r"(?<=://)[^/@\s]+@")

log = logging.getLogger("footnote.audit")


class AuditError(OSError):
    """The audit log cannot be opened as a private regular file; the message says why."""


def audit_location() -> Path:
    """The deployment's audit log, by the rule above."""
    if explicit := os.environ.get(AUDIT_ENV, "").strip():
        return Path(explicit)
    return state_dir() / AUDIT_NAME


def local_operator() -> str:
    """Who runs a command at this machine: the login name the OS gives the process."""
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"local:uid{os.geteuid()}"


def visible(text: str) -> str:
    """`text` with every character a terminal could act on written out as `\\xNN`,
    `\\uNNNN` or `\\UNNNNNNNN`: control characters (so an ANSI escape shows as `\\x1b[...`),
    format characters (bidi overrides), separators other than the plain space, surrogates
    and unassigned code points. Shown, the result is only ever the text it says."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(ord(c)) for c in text)


def _escaped(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _one_line(value: Any) -> str:
    return visible(" ".join(str(value).split()))


def _text(value: Any, limit: int = _MAX_TEXT) -> str:
    """One inert line, passwords and URL user info hidden, at most `limit` characters and
    then how many more were cut. Only the first words, up to `_REDACT_FACTOR` times what is
    kept, are redacted at all: redaction's patterns take time that grows faster than the
    text, and a caller may send kilobytes."""
    whole = " ".join(str(value).split())
    head, cap = whole, _REDACT_FACTOR * limit
    if len(whole) > cap:  # cut between words where there are any, so a URL stays whole
        space = whole.rfind(" ", limit, cap)
        head = whole[: space if space > 0 else cap]
    line = visible(_USER_INFO.sub("***@", redact(head)))
    cut = len(line) - limit + len(whole) - len(head)
    return line if cut <= 0 else f"{line[:limit]}…[+{cut} chars]"


def _names(values: Any) -> tuple[list[str], int]:
    """The first names of a list, each bounded, and how many more there were."""
    items = values if isinstance(values, list | tuple) else []
    return [_text(v, _MAX_NAME) for v in items[:_MAX_NAMES]], max(0, len(items) - _MAX_NAMES)


def index_name(index: str) -> str:
    """How records name an index: a directory by its absolute path, a URL without its
    password. `read(index=...)` finds an index's records by it."""
    return _text(index if is_postgres(index) else Path(index).resolve())


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
    """Append one record to the log at `path` (rotating it first when it is full); returns
    it. AuditError if the log cannot be opened as a private regular file."""
    entry: dict[str, Any] = {
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "who": _text(who),
        "action": _text(action),
        "result": result,
    }
    if index:
        entry["index"] = index_name(index)
    if target:
        entry["target"] = _text(target)
    for field, values in zip(_LIST_FIELDS, (sources, uploads), strict=True):
        names, omitted = _names(values)
        if names:
            entry[field] = names
        if omitted:
            entry[f"{field}_omitted"] = omitted
    if reason:
        entry["reason"] = _text(reason)
    if summary:
        entry["summary"] = {
            _text(k, _MAX_NAME): v for k, v in list(summary.items())[:_MAX_NAMES] if _count(v)
        }
    line = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(path, exclusive=True):
        _append(path, line)
    return entry


def record_quietly(path: Path, **fields: Any) -> None:
    """`record`, logging (not raising) when the log cannot be written: the action it records
    has already been done or refused, and must be reported as such to its caller."""
    try:
        record(path, **fields)
    except (AuditError, OSError) as exc:
        log.error("footnote: could not write the audit log: %s", exc)


def _history(path: Path, number: int) -> Path:
    """The `number`th log moved aside (1 is the newest)."""
    return path.with_name(f"{path.name}.{number}")


@contextmanager
def _locked(path: Path, *, exclusive: bool) -> Iterator[None]:
    """The log's lock file held: exclusively by a writer (created if need be), shared by a
    reader (none to hold before anything was ever written), so a reader never sees a
    rotation half done and writers take turns."""
    lock = path.with_name(f"{path.name}.lock")
    mode = os.O_RDWR | os.O_CREAT if exclusive else os.O_RDONLY
    try:
        descriptor = os.open(lock, mode | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        if exclusive:
            raise AuditError(f"audit log lock {lock}: its folder is gone") from None
        yield
        return
    except OSError as exc:
        raise AuditError(f"audit log lock {lock}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise AuditError(f"audit log lock {lock} is not a regular file")
        fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)


def _open_log(path: Path) -> int:
    """The log opened for appending, created mode 600, refused unless a regular file."""
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
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _append(path: Path, line: bytes) -> None:
    """Under the writer's lock: `line` at the end of the log, which is first rotated when
    the line would take a log that already holds records past `ROTATE_BYTES`."""
    descriptor = _open_log(path)
    try:
        size = os.fstat(descriptor).st_size
        if not size or size + len(line) <= ROTATE_BYTES:
            os.write(descriptor, line)
            return
    finally:
        os.close(descriptor)
    _rotate(path)
    _append(path, line)  # into a new, empty log


def _rotate(path: Path) -> None:
    """Under the writer's lock: each moved-aside log one number older, the oldest dropped,
    and the log itself moved to `.1`. Renames, so nothing is copied or lost midway."""
    _history(path, KEEP_FILES).unlink(missing_ok=True)
    for number in range(KEEP_FILES - 1, 0, -1):
        with suppress(FileNotFoundError):  # fewer moved-aside logs than kept so far
            os.replace(_history(path, number), _history(path, number + 1))
    os.replace(path, _history(path, 1))


def read(
    path: Path, limit: int = 100, index: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The last `limit` records (only those about `index` when given), oldest first, going
    back through the moved-aside logs as far as needed, and how many lines of the files read
    were not records."""
    if limit < 1:
        return [], 0
    wanted = None if index is None else index_name(index)
    kept: list[dict[str, Any]] = []
    damaged = 0
    with _locked(path, exclusive=False):
        for file in [path, *(_history(path, n) for n in range(1, KEEP_FILES + 1))]:
            entries, bad = _read_file(file, limit - len(kept), wanted)
            kept[:0] = entries
            damaged += bad
            if len(kept) >= limit:
                break
    return kept, damaged


def _read_file(path: Path, limit: int, index: str | None) -> tuple[list[dict[str, Any]], int]:
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
            elif index is None or entry.get("index") == index:
                kept.append(entry)
    return list(kept), damaged


def _parsed(raw: bytes) -> dict[str, Any] | None:
    """A record as it may be shown: only the fields records have, each of its kind, every
    text made one inert line again (the file may have been written by anyone who could)."""
    if len(raw) > MAX_LINE or not raw.endswith(b"\n"):
        return None
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("result") not in RESULTS:
        return None
    if not all(isinstance(entry.get(k), str) for k in ("time", "who", "action")):
        return None
    shown: dict[str, Any] = {
        k: _one_line(entry[k]) for k in _TEXT_FIELDS if isinstance(entry.get(k), str)
    }
    for field in _LIST_FIELDS:
        if isinstance(names := entry.get(field), list):
            shown[field] = [_one_line(n) for n in names if isinstance(n, str)]
        if _count(omitted := entry.get(f"{field}_omitted")):
            shown[f"{field}_omitted"] = omitted
    if isinstance(summary := entry.get("summary"), dict):
        shown["summary"] = {_one_line(k): v for k, v in summary.items() if _count(v)}
    return shown


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
