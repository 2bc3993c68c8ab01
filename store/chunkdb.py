"""Chunk texts and metadata in one SQLite file, read per hit instead of parsed whole at load.

    chunks(row INTEGER PRIMARY KEY, id TEXT, data TEXT)   data: the chunk as a JSON object

Opening is a file open and two tiny queries, whatever the size; a search reads the rows it
returns and nothing else. The file is written once into a new version's staging directory
and never changed (versions are immutable), so readers open it read-only and `immutable`:
no locks, no journal. Its bytes are covered by the manifest's checksum (verified as
store/file_checks.py describes), and every row read is checked to be a well-formed chunk before
it is used.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from footnote.store.file_checks import chunk_problem
from footnote.store.types import Chunk

_SCHEMA = ("CREATE TABLE chunks (row INTEGER PRIMARY KEY, id TEXT NOT NULL, data TEXT NOT NULL)",)
_BATCH = 500
"""Rows per `IN (...)` query: under SQLite's variable limit."""


class ChunkDbWriter:
    """Writes the chunks a batch at a time (row i = FAISS id i = BM25 doc i), holding none:
    SQLite's page cache and its sorter, for the id index, are bounded by its own settings."""

    def __init__(self, path: Path) -> None:
        self.rows = 0
        self._conn = sqlite3.connect(path)
        self._conn.execute("PRAGMA journal_mode = OFF")  # a staging file: the publish commits
        self._conn.execute("PRAGMA synchronous = OFF")  # fsynced by the writer before publishing
        for statement in _SCHEMA:
            self._conn.execute(statement)

    def add(self, chunks: Sequence[Chunk]) -> None:
        self._conn.executemany(
            "INSERT INTO chunks (row, id, data) VALUES (?, ?, ?)",
            (
                (row, chunk.id, json.dumps(chunk.to_dict(), ensure_ascii=False))
                for row, chunk in enumerate(chunks, start=self.rows)
            ),
        )
        self.rows += len(chunks)

    def close(self) -> None:
        """Index the ids and commit; the file is complete."""
        try:
            self._conn.execute("CREATE INDEX chunks_id ON chunks (id)")
            self._conn.commit()
        finally:
            self._conn.close()

    def abandon(self) -> None:
        self._conn.close()


class ChunkTable(Sequence[Chunk]):
    """The chunks of one version, row-addressed, read on demand. Thread-safe: each thread
    gets its own read-only connection."""

    def __init__(self, path: Path, rows: int) -> None:
        self.path = path
        self._rows = rows
        self._uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        self._local = threading.local()
        last = self._connection().execute("SELECT max(row) FROM chunks").fetchone()[0]
        if (last if last is not None else -1) != rows - 1:
            raise ValueError(f"chunks.sqlite ends at row {last}, not {rows - 1}")

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            conn.execute("PRAGMA query_only = ON")
            conn.execute("PRAGMA trusted_schema = OFF")
            self._local.conn = conn
        return conn

    def __len__(self) -> int:
        return self._rows

    def close(self) -> None:
        """Close this thread's connection (a writer's pass over a staged table)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @overload
    def __getitem__(self, row: int) -> Chunk: ...

    @overload
    def __getitem__(self, row: slice) -> list[Chunk]: ...

    def __getitem__(self, row: int | slice) -> Chunk | list[Chunk]:
        if isinstance(row, slice):
            return self.many(range(*row.indices(self._rows)))
        if row < 0:
            row += self._rows
        if not 0 <= row < self._rows:
            raise IndexError(row)
        return self.many([row])[0]

    def many(self, rows: Iterable[int]) -> list[Chunk]:
        """The chunks at these rows, in the order given, in one query per 500 rows."""
        wanted = [int(r) for r in rows]
        found: dict[int, Chunk] = {}
        conn = self._connection()
        for start in range(0, len(wanted), _BATCH):
            part = sorted(set(wanted[start : start + _BATCH]))
            marks = ",".join("?" * len(part))
            query = f"SELECT row, data FROM chunks WHERE row IN ({marks})"
            for row, data in conn.execute(query, part):
                found[row] = _chunk(data)
        missing = [r for r in wanted if r not in found]
        if missing:
            raise ValueError(f"chunks.sqlite has no row {missing[0]}")
        return [found[r] for r in wanted]

    def __iter__(self) -> Iterator[Chunk]:
        cursor = self._connection().execute("SELECT data FROM chunks ORDER BY row")
        for (data,) in cursor:
            yield _chunk(data)

    def ids(self) -> list[str]:
        """Every chunk id, in row order (for ingest, which compares versions)."""
        return [cid for (cid,) in self._connection().execute("SELECT id FROM chunks ORDER BY row")]

    def row_of(self, chunk_id: str) -> int | None:
        """The row of a chunk id (the last, were an id ever repeated)."""
        found = (
            self._connection()
            .execute("SELECT max(row) FROM chunks WHERE id = ?", (chunk_id,))
            .fetchone()
        )
        return None if found is None or found[0] is None else int(found[0])


def _chunk(data: Any) -> Chunk:
    value = json.loads(data) if isinstance(data, str) else None
    if not isinstance(value, dict):
        raise ValueError("chunks.sqlite holds a row that is not a chunk object")
    chunk = Chunk.from_dict(value)
    problem = chunk_problem(chunk)
    if problem:
        raise ValueError(f"chunks.sqlite holds a chunk with {problem}")
    return chunk
