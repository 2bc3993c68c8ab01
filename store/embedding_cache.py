"""The embedding cache: vectors keyed by (embedding model, exact input text), kept beside the
index so that a killed ingest resumes without re-embedding what it finished, a chunking
change re-embeds only the texts that changed, and a text met twice is embedded once.

    DIR/embedding-cache.sqlite      files backend: beside CURRENT and versions/
    footnote_embedding_cache        PostgreSQL backend: one table shared by the database's indexes

Each entry is (key, vector, check, used): key = SHA-256 of the model id and the text, vector =
raw little-endian float32 bytes (no pickle), check = SHA-256 of key and vector (an HMAC with
FOOTNOTE_INDEX_KEY when that is set, so an edit cannot be made to fit). A read whose check
fails refuses the whole cache with IndexCorrupt, naming the file: a damaged or edited cache
never feeds an index. `used` is the ingest run that last used the entry; `prune` keeps the
most recently used `max_entries`, so the cache is bounded by a setting, not by history.

Entries are committed batch by batch while ingest embeds: what a killed run finished is on
disk (SQLite's journal makes each commit all-or-nothing).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from footnote.store.backends import is_postgres
from footnote.store.file_checks import KEY_ENV
from footnote.store.private import private_dir, private_file
from footnote.store.types import IndexCorrupt

CACHE_FILE = "embedding-cache.sqlite"
PG_TABLE = "footnote_embedding_cache"
MAX_ENTRIES_ENV = "FOOTNOTE_EMBED_CACHE_MAX"
DEFAULT_MAX_ENTRIES = 2_000_000
"""About 3 GB of 384-dimension vectors on disk; entries beyond it, least recently used
first, are pruned after each ingest."""
_BATCH = 500  # keys per lookup statement: under every driver's parameter limit
_SQLITE_MAGIC = b"SQLite format 3\x00"


def cache_key(model_id: str, text: str) -> bytes:
    """The entry's key: model and text both, so two models never share a vector."""
    return hashlib.sha256(f"{model_id}\x00{text}".encode("utf-8", "surrogatepass")).digest()


def _check(key: bytes, vector: bytes) -> bytes:
    secret = os.environ.get(KEY_ENV)
    if secret:
        return hmac.new(secret.encode("utf-8"), key + vector, hashlib.sha256).digest()
    return hashlib.sha256(key + vector).digest()


def max_entries() -> int:
    """The cache's bound: $FOOTNOTE_EMBED_CACHE_MAX entries, else DEFAULT_MAX_ENTRIES."""
    value = os.environ.get(MAX_ENTRIES_ENV, "")
    return int(value) if value.strip() else DEFAULT_MAX_ENTRIES


class EmbeddingCache:
    """Vectors by (model, text) for one index location; see the module docstring."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location)
        self._postgres = is_postgres(location)
        self._param = "%s" if self._postgres else "?"
        self._run: int | None = None
        if not self._postgres:
            self.path = Path(location) / CACHE_FILE
            self._sqlite: sqlite3.Connection | None = None

    # -- connections -------------------------------------------------------------------------

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """A connection whose block is one committed transaction."""
        if self._postgres:
            from footnote.store.postgres import parse_location, pool

            connection = pool(parse_location(self.location).conninfo).connection()
            with connection as conn, conn.transaction():
                yield conn
            return
        conn = self._open_sqlite()
        try:
            with conn:
                yield conn
        except sqlite3.DatabaseError as exc:
            raise self._damaged(f"cannot be read ({exc})") from exc

    def _open_sqlite(self) -> sqlite3.Connection:
        if self._sqlite is not None:
            return self._sqlite
        if self.path.exists():
            with self.path.open("rb") as handle:
                head = handle.read(len(_SQLITE_MAGIC))
            if head and head != _SQLITE_MAGIC:
                raise self._damaged("is not a SQLite database")
        private_dir(self.path.parent)
        private_file(self.path)  # before SQLite makes it: its journal copies its mode
        conn = sqlite3.connect(self.path, check_same_thread=False)
        try:
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS entries (key BLOB PRIMARY KEY, vector BLOB NOT NULL,"
                " checksum BLOB NOT NULL, used INTEGER NOT NULL) WITHOUT ROWID"
            )
            conn.execute("CREATE TABLE IF NOT EXISTS runs (run INTEGER PRIMARY KEY)")
            conn.commit()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._damaged(f"cannot be read ({exc})") from exc
        self._sqlite = conn
        return conn

    def _ensure_pg_table(self, conn: Any) -> None:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {PG_TABLE} (key bytea PRIMARY KEY, vector bytea NOT NULL,"
            " checksum bytea NOT NULL, used bigint NOT NULL)"
        )

    def close(self) -> None:
        if not self._postgres and self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None

    def _damaged(self, what: str) -> IndexCorrupt:
        where = self.path if not self._postgres else f"table {PG_TABLE}"
        return IndexCorrupt(
            f"embedding cache {where} {what}: it was edited or damaged; delete it "
            "(the next ingest embeds again) and check who can write the index"
        )

    @property
    def _table(self) -> str:
        return PG_TABLE if self._postgres else "entries"

    def run_number(self) -> int:
        """This process's ingest run, one more than the last: entries it touches are marked
        with it, so pruning drops the least recently used."""
        if self._run is None:
            with self._conn() as conn:
                if self._postgres:
                    self._ensure_pg_table(conn)
                    row = conn.execute(f"SELECT coalesce(max(used), 0) FROM {PG_TABLE}").fetchone()
                else:
                    row = conn.execute(
                        "SELECT max(coalesce((SELECT max(run) FROM runs), 0),"
                        " coalesce((SELECT max(used) FROM entries), 0))"
                    ).fetchone()
                self._run = int(row[0]) + 1
                if not self._postgres:
                    conn.execute("INSERT OR IGNORE INTO runs (run) VALUES (?)", (self._run,))
        return self._run

    # -- entries -----------------------------------------------------------------------------

    def get(self, keys: Sequence[bytes], dimension: int) -> dict[bytes, np.ndarray]:
        """The cached vectors among `keys` (each checked), marked as used by this run."""
        return {
            key: np.frombuffer(raw, dtype="<f4").astype(np.float32)
            for key, raw in self.get_raw(keys).items()
            if len(raw) == dimension * 4  # same key, other dimension: only by a clash
        }

    def get_raw(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The stored bytes among `keys` (each checked), marked as used by this run: a
        vector, or another entry kept beside the vectors (a model-written chunk context,
        under keys of its own, see `ingest.model_context`), checked and pruned alike."""
        run = self.run_number()
        found: dict[bytes, bytes] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _BATCH):
            batch = unique[start : start + _BATCH]
            marks = ",".join([self._param] * len(batch))
            with self._conn() as conn:
                rows = conn.execute(
                    f"SELECT key, vector, checksum FROM {self._table} WHERE key IN ({marks})",
                    batch,
                ).fetchall()
                hits = []
                for key, vector, checksum in rows:
                    key, vector = bytes(key), bytes(vector)
                    if not hmac.compare_digest(bytes(checksum), _check(key, vector)):
                        raise self._damaged("holds an entry that fails its checksum")
                    found[key] = vector
                    hits.append(key)
                if hits:
                    marks = ",".join([self._param] * len(hits))
                    conn.execute(
                        f"UPDATE {self._table} SET used = {self._param} WHERE key IN ({marks})",
                        [run, *hits],
                    )
        return found

    def put(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Store vectors (row i for keys[i]) in one committed transaction."""
        array = np.asarray(vectors, dtype="<f4")
        self.put_raw(keys, [vector.tobytes() for vector in array])

    def put_raw(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Store bytes (values[i] for keys[i]) in one committed transaction."""
        run = self.run_number()
        rows = [(key, raw, _check(key, raw), run) for key, raw in zip(keys, values, strict=True)]
        if not rows:
            return
        p = self._param
        upsert = (
            f"INSERT INTO {self._table} (key, vector, checksum, used) VALUES ({p},{p},{p},{p}) "
            + (
                "ON CONFLICT (key) DO UPDATE SET vector = excluded.vector, "
                "checksum = excluded.checksum, used = excluded.used"
            )
        )
        with self._conn() as conn:
            if self._postgres:
                with conn.cursor() as cursor:
                    cursor.executemany(upsert, rows)
            else:
                conn.executemany(upsert, rows)

    def __len__(self) -> int:
        with self._conn() as conn:
            if self._postgres:
                self._ensure_pg_table(conn)
            return int(conn.execute(f"SELECT count(*) FROM {self._table}").fetchone()[0])

    def prune(self, keep: int | None = None) -> int:
        """Drop all but the `keep` (default: the setting) most recently used entries; returns
        how many went."""
        keep = max_entries() if keep is None else keep
        with self._conn() as conn:
            if self._postgres:
                self._ensure_pg_table(conn)
            total = int(conn.execute(f"SELECT count(*) FROM {self._table}").fetchone()[0])
            if total <= keep:
                return 0
            p = self._param
            conn.execute(
                f"DELETE FROM {self._table} WHERE key IN (SELECT key FROM {self._table} "
                f"ORDER BY used ASC LIMIT {p})",
                (total - keep,),
            )
        return total - keep  # freed pages are reused by later entries: the file stays bounded

    def compact(self) -> None:
        """Give pruned space back to the file system (SQLite's VACUUM; PostgreSQL's own
        autovacuum reuses it)."""
        if not self._postgres:
            conn = self._open_sqlite()
            try:
                conn.execute("VACUUM")
            except sqlite3.DatabaseError as exc:
                raise self._damaged(f"cannot be read ({exc})") from exc


def prune_cache(cache: EmbeddingCache) -> None:
    """Bound the cache after an ingest (see `max_entries`), then let its file go."""
    try:
        cache.prune()
    finally:
        cache.close()
