"""One entry point for searching an index, shared by the CLI, the graph's tool and evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools.retrieval import Caller, Filters, Fusion, Hit, Retriever, Stage, get_retriever

PIPELINE_FUSION: Fusion = "weighted"
PIPELINE_DENSE_WEIGHT = 0.7
"""Default fusion for `pipeline`: weighted min-max fusion leaning on dense, chosen by
measurement on pyfaq (docs/evaluation.md) where plain RRF dragged dense down."""


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
    retriever: Retriever,
    query: str,
    k: int,
    mask: np.ndarray,
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
    return retriever.hybrid(
        query,
        k,
        mask,
        fusion=PIPELINE_FUSION,
        dense_weight=PIPELINE_DENSE_WEIGHT,
        extra_vectors=extra,
    )


def search(request: SearchRequest) -> list[Hit]:
    retriever = get_retriever(request.index_dir, request.embeddings)
    filters = request.filters or Filters()
    if request.source:
        filters.source = request.source
    caller = Caller(groups=frozenset(request.user_groups), admin=request.admin)
    mask = retriever.mask(caller, filters)
    return run_stage(retriever, request.query, request.k, mask, request.stage, request.extra_texts)
