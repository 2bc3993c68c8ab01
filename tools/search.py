"""One entry point for searching an index, shared by the CLI, the graph's tool and evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from footnote.store.types import Caller, Filters, Hit
from footnote.tools.rerank import make_reranker
from footnote.tools.retrieval import Fusion, Retriever, Stage, expand_query, get_retriever

PIPELINE_FUSION: Fusion = "weighted"
PIPELINE_DENSE_WEIGHT = 0.7
PIPELINE_POSITION_DECAY = 0.04
"""The default pipeline: weighted min-max fusion leaning on dense (plain RRF dragged dense
down), with later chunks of a section decayed. Chosen by measurement on pyfaq; the grid and
the numbers are in docs/evaluation.md."""
PIPELINE_RERANKER = "none"
"""Reranker of the default pipeline (see tools/rerank.py); `reranked` always uses `sentence`."""
RERANK_DEPTH = 20

S = TypeVar("S")


@dataclass(kw_only=True)
class SearchRequest:
    query: str
    index_dir: str | Path
    k: int = 5
    stage: Stage = "pipeline"
    source: str | None = None
    filters: Filters | None = None
    user_groups: tuple[str, ...] = ("everyone",)
    admin: bool = False
    embeddings: str = ""
    extra_texts: list[str] = field(default_factory=list)
    """More texts whose embeddings are searched alongside the query (a HyDE passage)."""


def run_stage(
    retriever: Retriever[S],
    query: str,
    k: int,
    mask: S,
    stage: Stage,
    extra_texts: list[str] | None = None,
) -> list[Hit]:
    """Run one named retrieval stage; `pipeline` is what `footnote ask` uses."""
    if stage == "bm25":
        return retriever.bm25(query, k, mask)
    if stage == "dense":
        return retriever.dense(query, k, mask)
    extra = [retriever.query_vector(t) for t in extra_texts or []]
    if stage == "hybrid":
        return retriever.hybrid(query, k, mask, fusion="rrf", extra_vectors=extra)

    def fused(text: str, depth: int) -> list[Hit]:
        return retriever.hybrid(
            text,
            depth,
            mask,
            fusion=PIPELINE_FUSION,
            dense_weight=PIPELINE_DENSE_WEIGHT,
            extra_vectors=extra,
            position_decay=PIPELINE_POSITION_DECAY,
        )

    if stage == "prf":
        feedback = [h.chunk.text for h in fused(query, 3)]
        return fused(expand_query(query, feedback), k)
    if stage == "reranked" or PIPELINE_RERANKER != "none":
        candidates = fused(query, max(k, RERANK_DEPTH))
        reranker = make_reranker(
            "sentence" if stage == "reranked" else PIPELINE_RERANKER, retriever.embeddings
        )
        reranked = reranker(query, candidates[:RERANK_DEPTH]) if reranker else candidates
        return (reranked + candidates[RERANK_DEPTH:])[:k]
    return fused(query, k)


def search(request: SearchRequest) -> list[Hit]:
    retriever = get_retriever(request.index_dir, request.embeddings)
    filters = request.filters or Filters()
    if request.source:
        filters.source = request.source
    caller = Caller(groups=frozenset(request.user_groups), admin=request.admin)
    mask = retriever.mask(caller, filters)
    return run_stage(retriever, request.query, request.k, mask, request.stage, request.extra_texts)
