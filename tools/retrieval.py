"""Retrieval stages over any Footnote index, each callable on its own so each can be measured.

    bm25 -> keyword scores        dense -> embedding similarity
    hybrid -> fused (RRF or weighted normalised scores)
    pipeline -> what `footnote ask` uses by default

A `Retriever` embeds the query and composes the stages over an `IndexReader` (store/base.py),
whichever backend holds the index: fusion, section decay, pseudo-relevance feedback and the
relevance features for grading are written here, once. Access control and metadata filters
are applied *before* ranking (the reader's selection), so a selective filter still returns k
results when k exist, and a chunk a caller may not see is never scored, let alone returned.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from footnote.ingest.context import ContextSettings, check_context
from footnote.models.embedding_choice import (
    EmbeddingsSetting,
    embeddings_for_index,
    setting_key,
)
from footnote.models.embeddings import IndexEmbeddings
from footnote.store.backends import current_version, is_postgres, open_reader
from footnote.store.base import IndexReader
from footnote.store.text import STOPWORDS, embedding_text, keyword_tokens
from footnote.store.types import Caller, Filters, Hit, Ranked, check_embeddings
from footnote.tools.stages import STAGES as STAGES
from footnote.tools.stages import Stage as Stage

Fusion = Literal["rrf", "weighted"]
MAX_DECAY_STEPS = 5

S = TypeVar("S")


class Retriever(Generic[S]):
    """Searches one index version through its reader. Thread-safe; build once, reuse."""

    def __init__(self, reader: IndexReader[S], embeddings: IndexEmbeddings) -> None:
        self.reader = reader
        self.embeddings = embeddings

    @classmethod
    def open(
        cls,
        location: str | Path,
        embeddings: EmbeddingsSetting = "",
        context: ContextSettings | None = None,
    ) -> Retriever[Any]:
        """Open the live version and its embedding model (a name or an `Embeddings` object),
        refusing a model the index was not built with, a malformed context record, and a
        `context` other than the one it was built with when one is asked for."""
        reader = open_reader(location)
        built_with = str(reader.manifest["embedding"]["model"])
        model = embeddings_for_index(embeddings, built_with, str(location))
        check_embeddings(reader.manifest, reader.location, model.model_id, model.dimension)
        check_context(reader.manifest, str(reader.location), context)
        return Retriever(reader, model)

    @property
    def version(self) -> str:
        return self.reader.version

    def mask(self, caller: Caller, filters: Filters | None = None) -> S:
        """What this caller may see that passes the filters, in the reader's own form."""
        return self.reader.select(caller, filters)

    def bm25(self, query: str, k: int, mask: S) -> list[Hit]:
        with self.reader.snapshot():
            return self.read(self.reader.keyword(query, k, mask))

    def dense(self, query: str | np.ndarray, k: int, mask: S) -> list[Hit]:
        vector = self.query_vector(query) if isinstance(query, str) else query
        with self.reader.snapshot():
            return self.read(self.reader.dense(vector, k, mask))

    def read(self, ranked: list[Ranked]) -> list[Hit]:
        """Hits with their chunks, read in one batch."""
        chunks = self.reader.chunks([r.row for r in ranked])
        return [Hit(c, r.score, r.row) for c, r in zip(chunks, ranked, strict=True)]

    def hybrid_ranked(
        self,
        query: str,
        k: int,
        mask: S,
        *,
        fusion: Fusion = "rrf",
        rrf_k: int = 60,
        dense_weight: float = 0.5,
        depth: int = 100,
        extra_vectors: list[np.ndarray] | None = None,
        position_decay: float = 0.0,
    ) -> list[Ranked]:
        """Fuse BM25 and dense rankings (and extra query vectors, e.g. a HyDE passage).

        `position_decay` lowers the dense score of a section's later chunks (by up to five
        steps): a section's opening says what it is about, while its continuation chunks
        match many questions a little, so long sections would otherwise win too often.
        All runs read one snapshot, so a concurrent ingest never mixes two versions; only
        the fused top k chunks are read.
        """
        vectors = [self.query_vector(query), *(extra_vectors or [])]
        with self.reader.snapshot():
            keyword = self.reader.keyword(query, depth, mask)
            dense_runs = [self.reader.dense(v, depth, mask) for v in vectors]
            if position_decay:
                dense_runs = [_decay(run, position_decay) for run in dense_runs]
            fused: dict[int, float] = defaultdict(float)
            found = {r.row: r for run in [keyword, *dense_runs] for r in run}
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
            return [Ranked(row, score, found[row].position) for row, score in best]

    def hybrid(self, query: str, k: int, mask: S, **options: Any) -> list[Hit]:
        """`hybrid_ranked`'s rows with their chunks (every run read from one snapshot)."""
        with self.reader.snapshot():
            return self.read(self.hybrid_ranked(query, k, mask, **options))

    def idf(self, token: str) -> float:
        """BM25 idf of a keyword token; unseen tokens get the highest idf (they are rare)."""
        total, frequencies = self.reader.document_frequencies([token])
        return _idf(total, frequencies.get(token, 0))

    def idf_weights(self, tokens: Sequence[str]) -> dict[str, float]:
        """BM25 idf of several keyword tokens in one look-up (see `idf`)."""
        total, frequencies = self.reader.document_frequencies(sorted(set(tokens)))
        return {t: _idf(total, frequencies.get(t, 0)) for t in tokens}

    def relevance_features(self, query: str, hits: list[Hit]) -> list[dict[str, float]]:
        """Evidence for grading each hit on its own: embedding similarity to the question, and
        the idf-weighted share of the question's keywords the chunk contains."""
        if not hits:
            return []
        vector = self.query_vector(query)
        dense = self.reader.vectors([h.row for h in hits]) @ vector
        total, frequencies = self.reader.document_frequencies(sorted(set(keyword_tokens(query))))
        weights = {t: _idf(total, df) for t, df in frequencies.items()}
        weight_sum = sum(weights.values())
        out = []
        for hit, similarity in zip(hits, dense, strict=True):
            present = set(keyword_tokens(embedding_text(hit.chunk)))
            covered = sum(w for t, w in weights.items() if t in present)
            out.append(
                {
                    "dense": float(similarity),
                    "coverage": covered / weight_sum if weight_sum else 0.0,
                }
            )
        return out

    def token_recalls(self, question: str, texts: Sequence[str]) -> list[dict[str, float]]:
        """How well each text matches the question word by word (`token_recall`): for each
        of the question's content words, its best cosine against the text's contextual token
        vectors, averaged (`token_recall`) and the weakest (`token_recall_min`), as
        BERTScore's recall does. A near miss matches the topic but leaves a word unmatched
        ("parental leave" against annual leave); a paraphrase finds a partner for each.
        Empty dicts when the embedder has no token vectors (a provider's)."""
        token_vectors = getattr(self.embeddings, "token_vectors", None)
        if token_vectors is None or not texts:
            return [{} for _ in texts]
        asked, *found = token_vectors([question, *texts])
        words = [i for i, t in enumerate(asked.tokens) if _is_content_piece(t)]
        if not words:
            return [{} for _ in texts]
        out = []
        for passage in found:
            if not len(passage.vectors):
                out.append({"token_recall": 0.0, "token_recall_min": 0.0})
                continue
            best = (asked.vectors[words] @ passage.vectors.T).max(axis=1)
            out.append({"token_recall": float(best.mean()), "token_recall_min": float(best.min())})
        return out

    def query_vector(self, text: str) -> np.ndarray:
        return self.embeddings.embed_array([text])[0]


QUESTION_WORDS = frozenset(
    {"i", "my", "me", "do", "does", "get", "can", "must", "have", "what", "how", "when", "who",
     "which", "where", "will", "need", "often", "many", "much", "long", "is", "are", "s", "t"}
)  # fmt: skip
"""Words of a question's frame, not of its topic: no passage needs to match them."""


def _is_content_piece(token: str) -> bool:
    """A word piece that starts a topic word: not a continuation ("##n"), punctuation, a
    stopword or a question word."""
    return (
        not token.startswith("##")
        and bool(re.match(r"\w", token))
        and token.lower() not in STOPWORDS
        and token.lower() not in QUESTION_WORDS
    )


def _idf(total: int, df: int) -> float:
    n = max(total, 1)
    return float(np.log(1 + (n - df + 0.5) / (df + 0.5)))


def _decay(run: list[Ranked], rate: float) -> list[Ranked]:
    decayed = [
        Ranked(r.row, r.score - rate * min(r.position, MAX_DECAY_STEPS), r.position) for r in run
    ]
    return sorted(decayed, key=lambda h: -h.score)


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


def _minmax(run: list[Ranked]) -> dict[int, float]:
    if not run:
        return {}
    scores = np.array([h.score for h in run])
    low, high = float(scores.min()), float(scores.max())
    span = high - low or 1.0
    return {h.row: (h.score - low) / span for h in run}


_cache: dict[tuple[str, str, str | None], Retriever[Any]] = {}
_cache_lock = threading.Lock()
CACHED_INDEXES = 4
"""Open indexes kept per process; a new version of one replaces its old one."""


def get_retriever(location: str | Path, embeddings: EmbeddingsSetting = "") -> Retriever[Any]:
    """A process-wide retriever per index version, opened once (and off any event loop):
    a new ingest is picked up on the next call. An `Embeddings` object is cached by identity
    (the cached retriever holds it)."""
    where = str(location) if is_postgres(location) else str(Path(location).resolve())
    key = (where, setting_key(embeddings), current_version(where))
    with _cache_lock:
        if key not in _cache:
            for stale in [k for k in _cache if k[:2] == key[:2]]:
                del _cache[stale]
            while len(_cache) >= CACHED_INDEXES:
                del _cache[next(iter(_cache))]
            _cache[key] = Retriever.open(where, embeddings)
        return _cache[key]
