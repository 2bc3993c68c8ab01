"""Retrieval stages over a Footnote index, each callable on its own so each can be measured.

    bm25 -> keyword scores        dense -> embedding similarity
    hybrid -> fused (RRF or weighted normalised scores)
    pipeline -> what `footnote ask` uses by default

Access control and metadata filters are applied *before* ranking (a boolean row mask), so a
selective filter still returns k results when k exist, and a chunk a caller may not see is
never scored, let alone returned.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Literal

import faiss
import numpy as np

from footnote.ingest.embeddings import IndexEmbeddings, embeddings_for_index
from footnote.store.files import Index, check_embeddings, load_index
from footnote.store.text import embedding_text, keyword_tokens
from footnote.store.types import Caller, Filters, Hit, chunk_position

Fusion = Literal["rrf", "weighted"]
Stage = Literal["bm25", "dense", "hybrid", "reranked", "prf", "pipeline"]
STAGES: tuple[Stage, ...] = ("bm25", "dense", "hybrid", "reranked", "prf", "pipeline")
"""Every stage `tools.search.run_stage` can run, so evaluation reports each one."""


class Retriever:
    """Searches one loaded index. Thread-safe for reads; build once, reuse."""

    def __init__(self, index: Index, embeddings: IndexEmbeddings) -> None:
        self.index = index
        self.embeddings = embeddings
        self._n = len(index.chunks)
        self._vector_cache: np.ndarray | None = None
        self._position = np.array([chunk_position(c.id) for c in index.chunks], dtype=np.int32)
        indptr = np.asarray(index.bm25.scores["indptr"])
        self._doc_freq = np.diff(indptr)

    @classmethod
    def open(cls, index_dir: str | Path, embeddings: str = "") -> Retriever:
        """Load the index and its embedding model, refusing a model the index was not built with."""
        index = load_index(index_dir)
        model = embeddings_for_index(embeddings, index.embedding_model)
        check_embeddings(index.manifest, index.path, model.model_id, model.dimension)
        return cls(index, model)

    def mask(self, caller: Caller, filters: Filters | None = None) -> np.ndarray:
        """Rows this caller may see that pass the filters."""
        return np.fromiter(
            (
                caller.may_see(c) and (filters is None or filters.matches(c))
                for c in self.index.chunks
            ),
            dtype=bool,
            count=self._n,
        )

    def bm25(self, query: str, k: int, mask: np.ndarray) -> list[Hit]:
        tokens = [t for t in keyword_tokens(query) if t in self.index.bm25.vocab_dict]
        if not tokens or self._n == 0:
            return []
        scores = np.asarray(self.index.bm25.get_scores(tokens), dtype=np.float32)[: self._n]
        return self._top(np.where(mask & (scores > 0), scores, -np.inf), k)

    def dense(self, query: str | np.ndarray, k: int, mask: np.ndarray) -> list[Hit]:
        allowed = np.flatnonzero(mask)
        if len(allowed) == 0:
            return []
        vector = self.query_vector(query) if isinstance(query, str) else query
        k = min(k, len(allowed))
        params = None
        selector = None  # must outlive the search: faiss keeps only a raw pointer to it
        if len(allowed) < self._n:
            selector = faiss.IDSelectorBatch(allowed.astype(np.int64))
            params = faiss.SearchParameters()
            params.sel = selector
        scores, rows = self.index.vectors.search(
            vector[None, :].astype(np.float32), k, params=params
        )
        return [
            Hit(self.index.chunks[r], float(s), int(r))
            for s, r in zip(scores[0], rows[0], strict=True)
            if r >= 0
        ]

    def hybrid(
        self,
        query: str,
        k: int,
        mask: np.ndarray,
        *,
        fusion: Fusion = "rrf",
        rrf_k: int = 60,
        dense_weight: float = 0.5,
        depth: int = 100,
        extra_vectors: list[np.ndarray] | None = None,
        position_decay: float = 0.0,
    ) -> list[Hit]:
        """Fuse BM25 and dense rankings (and extra query vectors, e.g. a HyDE passage).

        `position_decay` lowers the dense score of a section's later chunks (by up to five
        steps): a section's opening says what it is about, while its continuation chunks
        match many questions a little, so long sections would otherwise win too often.
        """
        keyword = self.bm25(query, depth, mask)
        vectors = [self.query_vector(query), *(extra_vectors or [])]
        dense_runs = [self.dense(v, depth, mask) for v in vectors]
        if position_decay:
            dense_runs = [self._decay(run, position_decay) for run in dense_runs]
        fused: dict[int, float] = defaultdict(float)
        runs = [(1 - dense_weight, keyword)] + [
            (dense_weight / len(dense_runs), run) for run in dense_runs
        ]
        for weight, run in runs:
            scores = (
                {hit.row: 1 / (rrf_k + rank + 1) for rank, hit in enumerate(run)}
                if fusion == "rrf"
                else _minmax(run)
            )
            for row, score in scores.items():
                fused[row] += weight * score
        best = sorted(fused.items(), key=lambda item: -item[1])[:k]
        chunks = {hit.row: hit.chunk for _, run in runs for hit in run}
        return [Hit(chunks[row], float(score), row) for row, score in best]

    def _decay(self, run: list[Hit], rate: float) -> list[Hit]:
        decayed = [
            Hit(h.chunk, h.score - rate * min(int(self._position[h.row]), 5), h.row) for h in run
        ]
        return sorted(decayed, key=lambda h: -h.score)

    def idf(self, token: str) -> float:
        """BM25 idf of a keyword token; unseen tokens get the highest idf (they are rare)."""
        n = max(self._n, 1)
        row = self.index.bm25.vocab_dict.get(token)
        df = 0 if row is None else int(self._doc_freq[row])
        return float(np.log(1 + (n - df + 0.5) / (df + 0.5)))

    def relevance_features(self, query: str, hits: list[Hit]) -> list[dict[str, float]]:
        """Evidence for grading each hit on its own: embedding similarity to the question, and
        the idf-weighted share of the question's keywords the chunk contains."""
        if not hits:
            return []
        vector = self.query_vector(query)
        rows = np.array([h.row for h in hits], dtype=np.int64)
        dense = self._vectors()[rows] @ vector
        terms = set(keyword_tokens(query))
        weights = {t: self.idf(t) for t in terms}
        total = sum(weights.values())
        out = []
        for hit, similarity in zip(hits, dense, strict=True):
            present = set(keyword_tokens(embedding_text(hit.chunk)))
            covered = sum(w for t, w in weights.items() if t in present)
            out.append({"dense": float(similarity), "coverage": covered / total if total else 0.0})
        return out

    def _vectors(self) -> np.ndarray:
        if self._vector_cache is None:
            self._vector_cache = self.index.all_vectors()
        return self._vector_cache

    def query_vector(self, text: str) -> np.ndarray:
        return self.embeddings.embed_array([text])[0]

    def _top(self, scores: np.ndarray, k: int) -> list[Hit]:
        finite = np.flatnonzero(np.isfinite(scores))
        if len(finite) == 0:
            return []
        k = min(k, len(finite))
        best = finite[np.argpartition(-scores[finite], k - 1)[:k]]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [Hit(self.index.chunks[r], float(scores[r]), int(r)) for r in best]


def expand_query(query: str, feedback: list[str], terms: int = 6) -> str:
    """Pseudo-relevance feedback without an LLM: add the words that recur most in the top
    passages and are not already in the query (its stems)."""
    counts: Counter[str] = Counter()
    asked = set(keyword_tokens(query))
    first_form: dict[str, str] = {}
    for text in feedback[:3]:
        for word in re.findall(r"[A-Za-z][A-Za-z0-9_.-]{2,}", text):
            stems = keyword_tokens(word)
            if len(stems) != 1 or stems[0] in asked:
                continue
            counts[stems[0]] += 1
            first_form.setdefault(stems[0], word.lower().strip(".-"))
    extra = [first_form[stem] for stem, _ in counts.most_common(terms)]
    return " ".join([query, *extra]).strip()


def _minmax(run: list[Hit]) -> dict[int, float]:
    if not run:
        return {}
    scores = np.array([h.score for h in run])
    low, high = float(scores.min()), float(scores.max())
    span = high - low or 1.0
    return {h.row: (h.score - low) / span for h in run}


_cache: dict[tuple[str, str, str | None], Retriever] = {}
_cache_lock = threading.Lock()


def get_retriever(index_dir: str | Path, embeddings: str = "") -> Retriever:
    """A process-wide retriever per index version, loaded once (and off any event loop).

    A `postgresql://` URL gives a PostgresRetriever: same methods, searched in the database.
    """
    from footnote.store.backends import is_postgres
    from footnote.store.files import current_version

    if is_postgres(index_dir):
        from footnote.ingest.postgres_retriever import get_postgres_retriever

        return get_postgres_retriever(str(index_dir), embeddings)
    path = str(Path(index_dir).resolve())
    key = (path, embeddings, current_version(Path(path)))
    with _cache_lock:
        if key not in _cache:
            _cache.clear()
            _cache[key] = Retriever.open(path, embeddings)
        return _cache[key]
