"""Where an index lives: a directory (FAISS + BM25 files, the zero-setup default) or a
PostgreSQL database (pgvector + full-text), chosen by the `--index` value alone, so the
graph's context, the CLI and evaluation only ever name an index by that string.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from footnote.store.base import IndexReader, IndexWriter

DEFAULT_INDEX = ".footnote/index"
"""Where the index lives when neither the caller nor $FOOTNOTE_INDEX says."""


def resolve_index(given: str | Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """The index meant: `given` when it names one, else $FOOTNOTE_INDEX (of `env`, by default
    the process's), else DEFAULT_INDEX. The one home of that rule, for the command line's
    --index, the graphs' contexts, the server's default index and the feedback store."""
    if given:
        return str(given)
    env = os.environ if env is None else env
    return env.get("FOOTNOTE_INDEX", "").strip() or DEFAULT_INDEX


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith(("postgresql://", "postgres://"))


def require_index(location: str | Path) -> None:
    """Raise IndexNotFound unless an index is published at `location`: for the commands
    that may answer without searching (a greeting), which would otherwise never notice."""
    if current_version(location) is None:
        from footnote.store.redaction import redact
        from footnote.store.types import IndexNotFound

        shown = redact(str(location))
        raise IndexNotFound(
            f"no index at {shown}: build one with `footnote ingest PATH --index {shown}`"
        )


def open_writer(location: str | Path) -> IndexWriter:
    """The write side for an `--index` value: a PostgreSQL URL or a directory."""
    if is_postgres(location):
        from footnote.store.postgres import PostgresWriter

        return PostgresWriter(str(location))
    from footnote.store.files import FilesWriter

    return FilesWriter(location)


def open_reader(location: str | Path) -> IndexReader[Any]:
    """The live version of the index at `location`, ready to search."""
    if is_postgres(location):
        from footnote.store.postgres import PostgresReader

        return PostgresReader(str(location))
    from footnote.store.files import FilesReader, load_index

    return FilesReader(load_index(location))


def current_version(location: str | Path) -> str | None:
    """The live version at `location` (None when there is no index): a cheap check for
    whether a reader opened earlier is still current."""
    if is_postgres(location):
        from footnote.store import postgres

        return postgres.current_version(str(location))
    from footnote.store import files

    return files.current_version(Path(location))
