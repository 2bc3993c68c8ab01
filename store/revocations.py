"""The revocation log: which groups lost a document they could read, and when.

A served thread holds text its owner could read when it was written, so it is served only
while the owner's access scope is the one it was written under (`footnote.server.auth`).
An operator changing someone's groups changes the scope; a source taking a document from a
group (a collaborator removed, a page restricted, a channel left) changes the document's
readers, not anyone's groups. So each published version carries this log in its manifest,
`{group: stamp of the last version that took something from it}`, and the server folds the
latest stamp among a caller's groups into their scope: earlier threads stop being served
exactly when something they may have quoted was taken from their owner.

Only narrowing counts: a grant or a new document leaves every thread as it was, and so does
a deletion at the source (the owner could read the text when it was quoted). The log only
grows, and it is kept with the index's remembered settings, so a rebuild does not forget it
and bring old threads back. Index files are untrusted input: a log that is not a map of
group names to stamps reads as empty at publish and as `UNREADABLE` when served.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from footnote.store.types import FileRecord

MANIFEST_KEY = "revocations"
UNREADABLE = "unreadable"
"""The stamp of a served index whose log cannot be read: one fixed value, so a caller's
threads written while it is unreadable are apart from those written before and after."""
MAX_GROUPS = 100_000


def revoked_groups(before: Mapping[str, FileRecord], after: Mapping[str, FileRecord]) -> set[str]:
    """The groups that could read a document in `before` and cannot in `after`.

    A document present in both whose new access is unknown or unreadable (no one) counts
    as taken from every group that had it; one whose old access is unknown (an index older
    than access in file records) counts for nothing, there being nothing to compare."""
    lost: set[str] = set()
    for source, old in before.items():
        new = after.get(source)
        if new is None or old.access is None:
            continue
        lost |= set(old.access) - set(new.access or ())
    return lost


def checked_log(value: Any) -> dict[str, str]:
    """The log as published, or an empty one if it is not a map of names to stamps."""
    if not isinstance(value, dict) or len(value) > MAX_GROUPS:
        return {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return {}
    return dict(value)


def with_revocations(
    log: Mapping[str, str], groups: set[str], *, now: dt.datetime | None = None
) -> dict[str, str]:
    """The log after a publish that took something from `groups`."""
    merged = dict(log)
    if groups:
        stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        merged.update(dict.fromkeys(groups, stamp))
    return merged


def latest(log: Mapping[str, str], groups: Sequence[str]) -> str:
    """The latest stamp among `groups` ("" if nothing was ever taken from any of them)."""
    return max((log.get(group, "") for group in groups), default="")


def _live_log(location: str) -> tuple[str | None, Any]:
    """(live version, its log as stored) of a folder or a `postgresql://` index; a folder's
    manifest is checked as every reader checks it (size, form, signature)."""
    from footnote.store.backends import is_postgres

    if is_postgres(location):
        from footnote.store import postgres

        return postgres.current_revocations(location)
    from footnote.store import file_checks

    root = Path(location)
    version = file_checks.read_current(root)
    if version is None:
        return None, None
    manifest = file_checks.read_manifest(root, file_checks.version_dir(root, version))
    file_checks.verify_signature(root, manifest)
    return version, manifest.get(MANIFEST_KEY)


class RevocationWatch:
    """The served indexes' logs, read again whenever a live version changes: a check per
    request costs reading CURRENT (or one row of PostgreSQL), not the manifest."""

    def __init__(self, locations: Sequence[str]) -> None:
        self.locations = tuple(locations)
        self._logs: dict[str, tuple[str | None, Any]] = {}
        self._lock = threading.Lock()

    def stamp(self, groups: Sequence[str]) -> str:
        """The latest revocation stamp among `groups` across every served index."""
        stamps = []
        for location in self.locations:
            log = self._log(location)
            stamps.append(UNREADABLE if log is None else latest(log, groups))
        return max(stamps, default="")

    def _log(self, location: str) -> dict[str, str] | None:
        try:
            version, stored = self._read(location)
        except Exception:  # noqa: BLE001 - any failure to read it fails closed (UNREADABLE)
            return None
        if version is None:  # no index yet: nothing was ever taken
            return {}
        return checked_log(stored) if isinstance(stored, dict) else {}

    def _read(self, location: str) -> tuple[str | None, Any]:
        from footnote.store.backends import is_postgres

        if is_postgres(location):  # one small query: the version and the log together
            return _live_log(location)
        from footnote.store.file_checks import read_current

        version = read_current(Path(location))
        with self._lock:
            cached = self._logs.get(location)
        if cached is not None and cached[0] == version:
            return cached
        found = _live_log(location)
        with self._lock:
            self._logs[location] = found
        return found
