"""A run's freshly embedded documents, kept on disk until the writer takes them.

Ingest embeds new and changed documents as it reads them but publishes only at the end of
the run (and only if something changed). Held in memory, that fresh work grows with the
corpus; here it costs disk instead, one document read back at a time. The spool is a SQLite
file in a private temporary folder that this process creates and deletes: chunks as JSON,
vectors as raw float32 (no pickle).

The folder is named for its process (`footnote-ingest-<pid>-...`). A run that ends normally,
with an error or interrupted deletes it on the way out; one that cannot (SIGKILL, SIGTERM, a
served job ended with `os._exit`) leaves it, and the next spool made on the machine deletes
every such folder of this user whose process is gone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from footnote.store.types import Chunk

PREFIX = "footnote-ingest-"
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def sweep_leftovers(folder: str | None = None) -> list[str]:
    """Delete the spool folders (in `folder`, default the temporary one) of this user's
    processes that are gone; returns their names. A live process's folder, another user's,
    or a link is never touched."""
    removed = []
    root = Path(folder or tempfile.gettempdir())
    for entry in root.glob(f"{PREFIX}*"):
        owner = _OWNED.match(entry.name)
        if owner is None or _alive(int(owner.group(1))):
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        if entry.is_symlink() or not entry.is_dir() or info.st_uid != os.getuid():
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed


class FreshSpool:
    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        sweep_leftovers()
        self._folder = tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-")
        try:
            self._db = sqlite3.connect(Path(self._folder.name) / "fresh.sqlite")
            self._db.execute("PRAGMA journal_mode=OFF")
            self._db.execute(
                "CREATE TABLE fresh (source TEXT NOT NULL, position INTEGER NOT NULL,"
                " chunk TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (source, position))"
            )
        except BaseException:
            self._folder.cleanup()
            raise

    def put(self, source: str, chunks: Sequence[Chunk], vectors: Sequence[Any]) -> None:
        """One document's chunks and vectors, replacing any it had."""
        self._db.execute("DELETE FROM fresh WHERE source = ?", (source,))
        self._db.executemany(
            "INSERT INTO fresh VALUES (?, ?, ?, ?)",
            (
                (source, i, json.dumps(chunk.to_dict()), np.asarray(v, np.float32).tobytes())
                for i, (chunk, v) in enumerate(zip(chunks, vectors, strict=True))
            ),
        )

    def take(self, source: str) -> list[tuple[Chunk, np.ndarray]]:
        """One document's chunks and vectors, in order, let go from the spool."""
        rows = self._db.execute(
            "SELECT chunk, vector FROM fresh WHERE source = ? ORDER BY position", (source,)
        ).fetchall()
        self._db.execute("DELETE FROM fresh WHERE source = ?", (source,))
        return [
            (Chunk.from_dict(json.loads(chunk)), np.frombuffer(vector, dtype=np.float32))
            for chunk, vector in rows
        ]

    def close(self) -> None:
        self._db.close()
        self._folder.cleanup()
