"""Where an index lives: a directory (FAISS + BM25 files, the zero-setup default) or a
PostgreSQL database (pgvector + full-text), chosen by the `--index` value alone.

Ingest writes through `IndexBackend` (store/base.py); `tools.retrieval.get_retriever` reads
the same location, so the graph's context only ever names the index by that string.
"""

from __future__ import annotations

from pathlib import Path

from footnote.store.base import IndexBackend


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith(("postgresql://", "postgres://"))


def open_backend(location: str | Path) -> IndexBackend:
    """The backend for an `--index` value: a PostgreSQL URL or a directory."""
    if is_postgres(location):
        from footnote.store.postgres import PostgresBackend

        return PostgresBackend(str(location))
    from footnote.store.files import FaissBackend

    return FaissBackend(location)
