"""Community reports a chat model wrote, kept so a community is reported once and redone only
when what it holds changes.

    DIR/community-reports.sqlite    files backend: beside CURRENT and versions/
    (in memory, per process)        PostgreSQL locations

An entry is (key, text, check): key = SHA-256 of the model's name and the exact prompt, which
holds the community's visible chunks (ids and texts); so a changed, added or removed chunk,
or a caller who sees other chunks of it, makes another key, and a report is only ever
served to a caller who may read every chunk it was written from. check = SHA-256 of key and
text (an HMAC with FOOTNOTE_INDEX_KEY when that is set): an edited entry is refused with
IndexCorrupt, naming the file, never fed to a prompt.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sqlite3
import threading
from pathlib import Path

from footnote.store.backends import is_postgres
from footnote.store.file_checks import KEY_ENV
from footnote.store.private import private_file
from footnote.store.types import IndexCorrupt

CACHE_FILE = "community-reports.sqlite"
_MEMORY: dict[str, str] = {}
_LOCK = threading.Lock()


def report_key(model: str, prompt: str) -> str:
    return hashlib.sha256(f"{model}\0{prompt}".encode()).hexdigest()


def _check(key: str, text: str) -> str:
    secret = os.environ.get(KEY_ENV, "").encode()
    message = f"{key}\0{text}".encode()
    if secret:
        return hmac.new(secret, message, hashlib.sha256).hexdigest()
    return hashlib.sha256(message).hexdigest()


class ReportCache:
    """Reports by key for one index location."""

    def __init__(self, location: str | Path) -> None:
        self.path = None if is_postgres(str(location)) else Path(location) / CACHE_FILE

    def _open(self) -> sqlite3.Connection:
        assert self.path is not None
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS reports "
            "(key TEXT PRIMARY KEY, text TEXT NOT NULL, check_ TEXT NOT NULL)"
        )
        return conn

    def get(self, key: str) -> str | None:
        if self.path is None:
            with _LOCK:
                return _MEMORY.get(key)
        if not self.path.exists():
            return None
        conn = self._open()
        try:
            row = conn.execute("SELECT text, check_ FROM reports WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise IndexCorrupt(f"{self.path} cannot be read ({exc})") from exc
        finally:
            conn.close()
        if row is None:
            return None
        text, check = row
        if not isinstance(text, str) or not hmac.compare_digest(str(check), _check(key, text)):
            raise IndexCorrupt(
                f"community report cache {self.path}: an entry does not match its check: it "
                "was edited or damaged; delete the file (reports are written again)"
            )
        return text

    def put(self, key: str, text: str) -> None:
        if self.path is None:
            with _LOCK:
                _MEMORY[key] = text
            return
        private_file(self.path)  # reports quote documents; SQLite's journal copies its mode
        conn = self._open()
        try:
            with conn:
                conn.execute("INSERT OR REPLACE INTO reports VALUES (?, ?, ?)",
                             (key, text, _check(key, text)))  # fmt: skip
        finally:
            conn.close()
