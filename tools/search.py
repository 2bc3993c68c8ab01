"""One entry point for searching an index, shared by the CLI, the graph's tool and evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from footnote.models.embedding_choice import EmbeddingsSetting
from footnote.store.types import Caller, Filters, Hit, Ranked
from footnote.tools.graph_search import graph_search
from footnote.tools.rerank import Reranker, make_reranker, sentence_reranker
from footnote.tools.retrieval import Fusion, Retriever, Stage, expand_query, get_retriever

PIPELINE_FUSION: Fusion = "weighted"
PIPELINE_DENSE_WEIGHT = 0.7
PIPELINE_POSITION_DECAY = 0.04
"""The default pipeline: weighted min-max fusion leaning on dense (plain RRF dragged dense
down), with later chunks of a section decayed. Chosen by measurement on pyfaq; the grid and
the numbers are in docs/evaluation.md."""
if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

RERANK_DEPTH = 20
"""How many of the pipeline's candidates a reranker reorders (see tools/rerank.py)."""

S = TypeVar("S")


@dataclass(kw_only=True)
class SearchRequest:
    query: str
    index_dir: str | Path
    k: int = 5
    stage: Stage = "pipeline"
    source: str | None = None
    filters: Filters | None = None
    caller: Caller = field(default_factory=lambda: Caller.of_groups(()))
    """Who the search is for (by default a caller in `everyone` alone), made by the surface
    that knows them and carried here unchanged."""
    embeddings: EmbeddingsSetting = ""
    """A `provider:model` string or an `Embeddings` object; empty: the index's own model."""
    extra_texts: list[str] = field(default_factory=list)
    """More texts whose embeddings are searched alongside the query (a HyDE passage)."""
    reranker: str = "none"
    """Reranker of the pipeline stage: none, sentence, judge, llm or crossencoder:PATH."""
    chat_model: BaseChatModel | None = None
    """The chat model the `llm` reranker asks."""


def run_stage(
    retriever: Retriever[S],
    query: str,
    k: int,
    mask: S,
    stage: Stage,
    extra_texts: list[str] | None = None,
    reranker: Reranker | None = None,
) -> list[Hit]:
    """Run one named retrieval stage; `pipeline` is what `footnote ask` uses, reordered by
    `reranker` when one is given; `reranked` is the pipeline reordered by `sentence`."""
    if stage == "bm25":
        return retriever.bm25(query, k, mask)
    if stage == "dense":
        return retriever.dense(query, k, mask)
    extra = [retriever.query_vector(t) for t in extra_texts or []]
    if stage == "hybrid":
        return retriever.hybrid(query, k, mask, fusion="rrf", extra_vectors=extra)

    pipeline: dict[str, Any] = {  # the default pipeline's fusion, for both rankings
        "fusion": PIPELINE_FUSION,
        "dense_weight": PIPELINE_DENSE_WEIGHT,
        "extra_vectors": extra,
        "position_decay": PIPELINE_POSITION_DECAY,
    }

    def fused(text: str, depth: int) -> list[Hit]:
        return retriever.hybrid(text, depth, mask, **pipeline)

    if stage == "graph":

        def ranked(text: str, depth: int) -> list[Ranked]:
            return retriever.hybrid_ranked(text, depth, mask, **pipeline)

        return graph_search(retriever, query, k, mask, ranked)
    if stage == "prf":
        feedback = [h.chunk.text for h in fused(query, 3)]
        return fused(expand_query(query, feedback), k)
    if stage == "reranked":
        reranker = sentence_reranker(retriever.embeddings)
    if reranker is None:
        return fused(query, k)
    candidates = fused(query, max(k, RERANK_DEPTH))
    reranked = reranker(query, candidates[:RERANK_DEPTH])
    return (reranked + candidates[RERANK_DEPTH:])[:k]


def search(request: SearchRequest) -> list[Hit]:
    retriever = get_retriever(request.index_dir, request.embeddings)
    filters = request.filters or Filters()
    if request.source:
        filters.source = request.source
    mask = retriever.mask(request.caller, filters)
    reranker = make_reranker(request.reranker, retriever.embeddings, request.chat_model)
    return run_stage(
        retriever, request.query, request.k, mask, request.stage, request.extra_texts, reranker
    )
