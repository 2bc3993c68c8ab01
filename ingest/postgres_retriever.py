"""Reading a PostgreSQL index with the same methods as `tools.retrieval.Retriever`.

The read API stays `Retriever` so the graph, the CLI and evaluation need no change: `mask()`
returns a `Selection` (caller + filters) that becomes a SQL WHERE clause, applied inside the
same statement as the ranking (a pre-filter, so a selective filter is never silently short:
when pgvector's HNSW scan comes back short, the search is redone exactly). `hybrid` with
plain RRF is one SQL statement; weighted fusion, HyDE vectors and position decay reuse the
shared Python fusion over one REPEATABLE READ snapshot, so it never mixes versions.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from footnote.ingest.embeddings import IndexEmbeddings, embeddings_for_index
from footnote.store.files import check_embeddings
from footnote.store.postgres import (
    TEXT_SEARCH_CONFIG,
    Location,
    parse_location,
    pool,
    require_index,
    vector_literal,
)
from footnote.store.text import keyword_tokens
from footnote.store.types import Caller, Chunk, Filters, Hit, chunk_position, require_date
from footnote.tools.retrieval import Fusion, Retriever

EF_SEARCH = 100
"""HNSW candidate list (pgvector's default is 40); raised to 2k for deeper searches."""
MAX_SCAN_TUPLES = 200_000
"""How far an iterative HNSW scan may go under a selective filter before the exact rerun."""


@dataclass(frozen=True)
class Selection:
    """What `mask()` returns for PostgreSQL: who asks and what they filter on."""

    caller: Caller
    filters: Filters | None = None


def glob_regex(pattern: str) -> str:
    """A POSIX regular expression matching what `fnmatch.fnmatchcase` matches."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] == "!":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            j = pattern.find("]", j)
            if j < 0:
                out.append("\\[")
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        else:
            out.append(c if c.isalnum() else "\\" + c)
        i += 1
    return "^(" + "".join(out) + ")$"


def where_clause(selection: Selection) -> tuple[str, dict[str, Any]]:
    """SQL conditions (AND-ed, `TRUE` when none) and their parameters."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    if not selection.caller.admin:
        parts.append("access && %(f_groups)s::text[]")
        params["f_groups"] = sorted(selection.caller.groups)
    filters = selection.filters
    if filters is not None:
        if filters.source:
            parts.append("source ~ %(f_source)s")
            params["f_source"] = glob_regex(filters.source)
        if filters.section:
            parts.append("strpos(lower(section), lower(%(f_section)s)) > 0")
            params["f_section"] = filters.section
        if filters.date_from:
            parts.append("chunk_date >= %(f_from)s")
            params["f_from"] = require_date(filters.date_from)
        if filters.date_to:
            parts.append("chunk_date <= %(f_to)s")
            params["f_to"] = require_date(filters.date_to)
        for i, (key, value) in enumerate(sorted(filters.metadata.items())):
            parts.append(f"coalesce(metadata -> %(f_mk{i})s, 'null'::jsonb) = %(f_mv{i})s::jsonb")
            params[f"f_mk{i}"] = key
            params[f"f_mv{i}"] = json.dumps(value)
    return (" AND ".join(parts) or "TRUE"), params


def tsquery_text(query: str) -> str:
    """The query's words OR-ed, as BM25 scores any of them; to_tsquery stems and drops
    stop words. Only word characters pass, so the text cannot be tsquery syntax."""
    words = sorted({w.lower() for w in re.findall(r"[^\W_]+", query)})
    return " | ".join(words)


class PostgresRetriever(Retriever):
    """Searches one version of a PostgreSQL index; thread-safe, connections from the pool."""

    def __init__(
        self,
        url: str,
        where: Location,
        version: str,
        manifest: dict[str, Any],
        embeddings: IndexEmbeddings,
    ) -> None:
        self.url = url
        self.where = where
        self.version = version
        self.manifest = manifest
        self.embeddings = embeddings
        self._local = threading.local()
        self._rows: int | None = None

    @classmethod
    def open(cls, index_dir: Any, embeddings: str = "") -> PostgresRetriever:
        url = str(index_dir)
        where = parse_location(url)
        with pool(where.conninfo).connection() as conn:
            version, manifest = require_index(conn, where, url)
        model = embeddings_for_index(embeddings, str(manifest["embedding"]["model"]))
        check_embeddings(manifest, url, model.model_id, model.dimension)  # type: ignore[arg-type]
        return cls(url, where, version, manifest, model)

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """The snapshot connection when inside one (see `hybrid`), else one from the pool."""
        held = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        with pool(self.where.conninfo).connection() as conn:
            yield conn

    def mask(self, caller: Caller, filters: Filters | None = None) -> Selection:  # type: ignore[override]
        where_clause(Selection(caller, filters))  # bad dates fail here, as with FAISS
        return Selection(caller, filters)

    def _hits(self, rows: list[tuple[Any, ...]]) -> list[Hit]:
        return [Hit(Chunk.from_dict(doc), float(score), int(row)) for row, doc, score in rows]

    def bm25(self, query: str, k: int, mask: Any) -> list[Hit]:
        """Full-text search ranked by ts_rank (not BM25: no idf saturation, see docs)."""
        text = tsquery_text(query)
        if not text or k <= 0:
            return []
        where, params = where_clause(mask)
        sql = (
            f"SELECT row_id, doc, ts_rank(tsv, q, 1) AS score "
            f"FROM {self.where.chunks}, to_tsquery('{TEXT_SEARCH_CONFIG}', %(q)s) q "
            f"WHERE tsv @@ q AND {where} ORDER BY score DESC, row_id LIMIT %(k)s"
        )
        with self._conn() as conn:
            return self._hits(conn.execute(sql, {**params, "q": text, "k": k}).fetchall())

    def dense(self, query: str | np.ndarray, k: int, mask: Any) -> list[Hit]:
        if k <= 0:
            return []
        vector = self.query_vector(query) if isinstance(query, str) else query
        where, params = where_clause(mask)
        sql = (
            f"SELECT row_id, doc, -(embedding <#> %(v)s::vector) AS score "
            f"FROM {self.where.chunks} WHERE {where} "
            f"ORDER BY embedding <#> %(v)s::vector LIMIT %(k)s"
        )
        args = {**params, "v": vector_literal(vector), "k": k}
        with self._conn() as conn, conn.transaction():
            self._tune(conn, k)
            rows = conn.execute(sql, args).fetchall()
            if len(rows) < k:  # HNSW gave up early under the filter: redo it exactly
                conn.execute("SET LOCAL enable_indexscan = off")
                rows = conn.execute(sql, args).fetchall()
                conn.execute("SET LOCAL enable_indexscan = on")
        hits = self._hits(rows)
        return sorted(hits, key=lambda h: (-h.score, h.row))

    @staticmethod
    def _tune(conn: Any, k: int) -> None:
        conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(EF_SEARCH, 2 * k))}")
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        conn.execute(f"SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}")

    def hybrid(
        self,
        query: str,
        k: int,
        mask: Any,
        *,
        fusion: Fusion = "rrf",
        rrf_k: int = 60,
        dense_weight: float = 0.5,
        depth: int = 100,
        extra_vectors: list[np.ndarray] | None = None,
        position_decay: float = 0.0,
    ) -> list[Hit]:
        """Plain RRF runs as one SQL statement; other fusions fuse in Python over one snapshot."""
        if fusion == "rrf" and not extra_vectors and not position_decay:
            return self.hybrid_sql(
                query, k, mask, rrf_k=rrf_k, dense_weight=dense_weight, depth=depth
            )
        with self.snapshot():
            return super().hybrid(
                query,
                k,
                mask,
                fusion=fusion,
                rrf_k=rrf_k,
                dense_weight=dense_weight,
                depth=depth,
                extra_vectors=extra_vectors,
                position_decay=position_decay,
            )

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every statement inside reads the same committed version of the index."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with pool(self.where.conninfo).connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    def hybrid_sql(
        self,
        query: str,
        k: int,
        mask: Any,
        *,
        rrf_k: int = 60,
        dense_weight: float = 0.5,
        depth: int = 100,
    ) -> list[Hit]:
        """Dense and full-text rankings fused by reciprocal rank, in one statement."""
        if k <= 0:
            return []
        where, params = where_clause(mask)
        table = self.where.chunks
        sql = f"""
            WITH dense AS (
                SELECT row_id, row_number() OVER (ORDER BY distance, row_id) AS rank
                FROM (SELECT row_id, embedding <#> %(v)s::vector AS distance
                      FROM {table} WHERE {where}
                      ORDER BY embedding <#> %(v)s::vector LIMIT %(depth)s) d),
            keyword AS (
                SELECT row_id, row_number() OVER (ORDER BY score DESC, row_id) AS rank
                FROM (SELECT row_id, ts_rank(tsv, q, 1) AS score
                      FROM {table}, to_tsquery('{TEXT_SEARCH_CONFIG}', %(q)s) q
                      WHERE tsv @@ q AND {where}
                      ORDER BY score DESC, row_id LIMIT %(depth)s) s),
            fused AS (
                SELECT row_id, sum(score) AS score FROM (
                    SELECT row_id, %(wd)s / (%(rrf_k)s + rank) AS score FROM dense
                    UNION ALL
                    SELECT row_id, %(wk)s / (%(rrf_k)s + rank) AS score FROM keyword) parts
                GROUP BY row_id)
            SELECT f.row_id, c.doc, f.score FROM fused f JOIN {table} c USING (row_id)
            ORDER BY f.score DESC, f.row_id LIMIT %(k)s"""
        args = {
            **params,
            "v": vector_literal(self.query_vector(query)),
            "q": tsquery_text(query),
            "depth": depth,
            "k": k,
            "wd": float(dense_weight),
            "wk": float(1 - dense_weight),
            "rrf_k": float(rrf_k),
        }
        with self._conn() as conn, conn.transaction():
            self._tune(conn, depth)
            rows = conn.execute(sql, args).fetchall()
            if len(rows) < k:
                conn.execute("SET LOCAL enable_indexscan = off")
                rows = conn.execute(sql, args).fetchall()
                conn.execute("SET LOCAL enable_indexscan = on")
        return self._hits(rows)

    def _decay(self, run: list[Hit], rate: float) -> list[Hit]:
        decayed = [
            Hit(h.chunk, h.score - rate * min(chunk_position(h.chunk.id), 5), h.row) for h in run
        ]
        return sorted(decayed, key=lambda h: -h.score)

    def _count(self) -> int:
        if self._rows is None:
            with self._conn() as conn:
                self._rows = int(
                    conn.execute(f"SELECT count(*) FROM {self.where.chunks}").fetchone()[0]
                )
        return self._rows

    def _doc_freqs(self, tokens: list[str]) -> dict[str, int]:
        if not tokens:
            return {}
        sql = (
            f"SELECT t, (SELECT count(*) FROM {self.where.chunks} WHERE terms @> ARRAY[t]) "
            "FROM unnest(%s::text[]) AS t"
        )
        with self._conn() as conn:
            return {str(t): int(n) for t, n in conn.execute(sql, (tokens,)).fetchall()}

    def idf(self, token: str) -> float:
        """BM25's idf from the stored keyword terms, as the FAISS backend computes it."""
        n = max(self._count(), 1)
        df = self._doc_freqs([token]).get(token, 0)
        return float(np.log(1 + (n - df + 0.5) / (df + 0.5)))

    def relevance_features(self, query: str, hits: list[Hit]) -> list[dict[str, float]]:
        if not hits:
            return []
        vector = self.query_vector(query)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT row_id, embedding::real[] FROM {self.where.chunks} WHERE row_id = ANY(%s)",
                ([h.row for h in hits],),
            ).fetchall()
        stored = {int(r): np.asarray(v, dtype=np.float32) for r, v in rows}
        terms = sorted(set(keyword_tokens(query)))
        n = max(self._count(), 1)
        weights = {
            t: float(np.log(1 + (n - df + 0.5) / (df + 0.5)))
            for t, df in self._doc_freqs(terms).items()
        }
        total = sum(weights.values())
        out = []
        for hit in hits:
            found = stored.get(hit.row)
            similarity = float(found @ vector) if found is not None else 0.0
            present = set(keyword_tokens(_body(hit.chunk)))
            covered = sum(w for t, w in weights.items() if t in present)
            out.append({"dense": similarity, "coverage": covered / total if total else 0.0})
        return out


def _body(chunk: Chunk) -> str:
    from footnote.store.text import embedding_text

    return embedding_text(chunk)


_cache: dict[tuple[str, str, str], PostgresRetriever] = {}
_cache_lock = threading.Lock()


def current_version(url: str) -> str | None:
    where = parse_location(url)
    with pool(where.conninfo).connection() as conn:
        from footnote.store.postgres import read_manifest

        found = read_manifest(conn, where)
    return found[0] if found else None


def get_postgres_retriever(url: str, embeddings: str = "") -> PostgresRetriever:
    """A retriever per index version: a new ingest is picked up on the next call."""
    key = (url, embeddings, current_version(url) or "")
    with _cache_lock:
        if key not in _cache:
            for old in [k for k in _cache if k[0] == url]:
                del _cache[old]
            _cache[key] = PostgresRetriever.open(url, embeddings)
        return _cache[key]
