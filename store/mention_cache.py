"""Each chunk's entity mentions, kept between publishes of a files-backend index, so that a
sync which changes ten documents finds the mentions of those documents' chunks and reads
the others' back (store/graph_files.py), instead of finding every chunk's again.

    DIR/mention-cache.sqlite    beside CURRENT and versions/

An entry is (key, mentions, check): key = SHA-256 of the extraction rules (the source of
store/entities.py itself), the corpus's titles and the chunk's title, section and text, so a
change to any of them makes another key (a new document's title may be named by every other
chunk; a change to the rules invalidates everything without anyone remembering to);
mentions = JSON `[[kind, key, name], ...]`; check = SHA-256 of key and mentions (an HMAC
with FOOTNOTE_INDEX_KEY when that is set). Only the entries the last publish used are kept,
so the file stays the size of the corpus.

The file is untrusted input. An entry whose check fails, that does not parse, or that names
anything its own chunk does not say (a key that is not its name's key, a name found in
neither the chunk's title, section nor text) is found again from the text, as if missing: a
cached entry can only ever repeat its own chunk's words, and the chunk's readers are the
readers of anything shown from it. A file that is not SQLite is replaced; a path that is not
a regular file (a link) is left alone and the publish runs without the cache.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from footnote.store import entities
from footnote.store.entities import KINDS, Mention, entity_key
from footnote.store.file_checks import KEY_ENV
from footnote.store.private import private_file
from footnote.store.types import Chunk

CACHE_FILE = "mention-cache.sqlite"
FORMAT = b"footnote-mentions-v1"
_BATCH = 500  # keys per lookup statement: under SQLite's parameter limit
_SPACES = re.compile(r"\s+")


@functools.cache
def rules_digest() -> bytes:
    """What the extraction rules are: the bytes of store/entities.py."""
    return hashlib.sha256(Path(entities.__file__).read_bytes()).digest()


def corpus_digest(titles: Iterable[str]) -> bytes:
    """The part of every key a publish shares: the rules and the corpus's titles."""
    hasher = hashlib.sha256(FORMAT + b"\0" + rules_digest())
    for title in sorted(set(titles)):
        hasher.update(b"\0" + title.encode("utf-8", "surrogatepass"))
    return hasher.digest()


def entry_key(corpus: bytes, chunk: Chunk) -> bytes:
    text = "\0".join((chunk.title, chunk.section, chunk.text))
    return hashlib.sha256(corpus + text.encode("utf-8", "surrogatepass")).digest()


def _check(key: bytes, payload: str) -> bytes:
    message = key + payload.encode("utf-8", "surrogatepass")
    secret = os.environ.get(KEY_ENV)
    if secret:
        return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()
    return hashlib.sha256(message).digest()


def encode(mentions: Sequence[Mention]) -> str:
    return json.dumps([[m.kind, m.key, m.name] for m in mentions], ensure_ascii=False)


def decode(payload: str, chunk: Chunk) -> list[Mention] | None:
    """The mentions an entry holds, or None unless every one is its own chunk's words."""
    try:
        rows = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(rows, list):
        return None
    said: list[str] | None = None
    out: list[Mention] = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3):
            return None
        kind, key, name = row
        if type(kind) is not int or not 0 <= kind < len(KINDS):
            return None
        if not (isinstance(key, str) and isinstance(name, str) and key and key == entity_key(name)):
            return None
        if name not in chunk.title and name not in chunk.section and name not in chunk.text:
            if said is None:  # names and links are found with their whitespace made one space
                flat = _SPACES.sub(" ", chunk.text)
                said = [flat, flat.lower()]
            if not any(name in text for text in said):
                return None
        out.append(Mention(key, name, kind))
    return out


class MentionCache:
    """One publish's use of the cache: `get` a batch (every key the publish has), `put` what
    was found anew, `close` to keep exactly the entries this publish used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = self._open()
        self.pending: list[tuple[bytes, str, bytes]] = []

    def _open(self) -> sqlite3.Connection | None:
        if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
            return None
        for _ in range(2):
            private_file(self.path)  # mentions quote documents; the journal copies its mode
            db = sqlite3.connect(self.path)
            try:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS mentions (key BLOB PRIMARY KEY, "
                    "mentions TEXT NOT NULL, check_ BLOB NOT NULL) WITHOUT ROWID"
                )
                db.execute("CREATE TEMP TABLE used (key BLOB PRIMARY KEY) WITHOUT ROWID")
                return db
            except sqlite3.DatabaseError:  # not a database: a cache is found again
                db.close()
                self.path.unlink(missing_ok=True)
        return None

    def get(self, keys: Sequence[bytes]) -> dict[bytes, str]:
        """The entries held for these keys whose check holds."""
        if self.db is None:
            return {}
        found: dict[bytes, str] = {}
        try:
            for start in range(0, len(keys), _BATCH):
                part = keys[start : start + _BATCH]
                self.db.executemany("INSERT OR IGNORE INTO used VALUES (?)", ((k,) for k in part))
                marks = ",".join("?" * len(part))
                rows = self.db.execute(
                    f"SELECT key, mentions, check_ FROM mentions WHERE key IN ({marks})", part
                )
                for key, payload, check in rows:
                    if isinstance(payload, str) and isinstance(check, bytes) and \
                            hmac.compare_digest(check, _check(key, payload)):  # fmt: skip
                        found[key] = payload
        except sqlite3.DatabaseError:
            self._abandon()
            return {}
        return found

    def put(self, key: bytes, mentions: Sequence[Mention]) -> None:
        if self.db is not None:
            payload = encode(mentions)
            self.pending.append((key, payload, _check(key, payload)))

    def close(self, *, keep: bool) -> None:
        """With `keep`, write the new entries and drop those this publish did not use, in one
        commit; without (a publish that failed), change nothing."""
        if self.db is None:
            return
        try:
            if keep:
                with self.db:
                    self.db.executemany("INSERT OR REPLACE INTO mentions VALUES (?, ?, ?)",
                                        self.pending)  # fmt: skip
                    self.db.execute("DELETE FROM mentions WHERE key NOT IN (SELECT key FROM used)")
        except sqlite3.DatabaseError:
            self._abandon()
        finally:
            if self.db is not None:
                self.db.close()
                self.db = None

    def _abandon(self) -> None:
        """A cache that fails mid-publish is dropped: the graph never waits on it."""
        if self.db is not None:
            with contextlib.suppress(sqlite3.Error):
                self.db.close()
            self.db = None
        self.path.unlink(missing_ok=True)
