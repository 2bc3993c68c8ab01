"""Footnote's search results as LangChain documents, with the evidence the offline grader reads.

This is the tools-layer search API the answer graph's tool and `FootnoteRetriever` share: a
`SearchRequest` in, `Document`s out whose `id` is the chunk id and whose metadata carries
everything a citation or a filter needs.
"""

from __future__ import annotations

import math
from typing import NotRequired, TypedDict

from langchain_core.documents import Document

from footnote.store.text import heading_prefix
from footnote.store.types import Hit
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import SearchRequest, search


class Evidence(TypedDict):
    """Grading evidence for one chunk, measured against the question when one is given, else
    the query it was found with."""

    dense: float
    """Cosine similarity of the chunk's embedding to the question's."""
    coverage: float
    """Idf-weighted share of the question's keywords the chunk contains, in [0, 1]."""
    token_recall: NotRequired[float]
    """Mean over the question's content words of their best contextual-token cosine in the
    chunk (tools/retrieval.py `token_recalls`); absent when the embedder has no token
    vectors."""
    token_recall_min: NotRequired[float]
    """The weakest of those matches: the question word the chunk answers least."""


class Candidate(TypedDict):
    """One retrieved chunk waiting to be graded."""

    document: Document
    evidence: Evidence


OPERATING_GRADE = 0.5
"""The grade at which each offline grader's operating point sits (graph/grader.py)."""
LINEAR_DENSE_WEIGHT = 0.6
"""Weight of embedding similarity in the linear grade; the rest is keyword coverage."""
LINEAR_THRESHOLD = 0.415
"""The linear blend's operating point on pyfaq-core (about 5% of answerable questions wrongly
abstained; docs/evaluation.md)."""


def logit(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


def sigmoid(z: float) -> float:
    if z >= 0:
        return 1 / (1 + math.exp(-z))
    e = math.exp(z)
    return e / (1 + e)


def recentred(p: float, threshold: float) -> float:
    """`p` moved in logit space so that `threshold` reads OPERATING_GRADE (monotone)."""
    return sigmoid(logit(p) - logit(threshold) + logit(OPERATING_GRADE))


def linear_score(candidate: Candidate) -> float:
    """The linear blend in [0, 1]: 0.6 x similarity + 0.4 x keyword coverage."""
    evidence = candidate["evidence"]
    score = (
        LINEAR_DENSE_WEIGHT * evidence["dense"] + (1 - LINEAR_DENSE_WEIGHT) * evidence["coverage"]
    )
    return max(0.0, min(1.0, float(score)))


def relevance(candidate: Candidate) -> float:
    """The linear offline grade in [0, 1]: read from the chunk's own evidence, not its place
    among the other results, so it compares across queries; 0.5 is the operating point (where
    the answer graph keeps a chunk by default)."""
    return recentred(linear_score(candidate), LINEAR_THRESHOLD)


def hit_to_document(hit: Hit) -> Document:
    """A chunk as a Document: front-matter fields first, so they never shadow Footnote's own."""
    chunk = hit.chunk
    return Document(
        id=chunk.id,
        page_content=chunk.text,
        metadata={
            **chunk.metadata,
            "chunk_id": chunk.id,
            "source": chunk.source,
            "title": chunk.title,
            "section": chunk.section,
            "page": chunk.page,
            "lines": chunk.lines,
            "url": chunk.url,
            "date": chunk.date,
            "access": chunk.access,
            "kind": "document",
            "score": hit.score,
        },
    )


def retrieve_documents(request: SearchRequest) -> list[Document]:
    """Search an index as the request's caller may see it; best first."""
    return [hit_to_document(hit) for hit in search(request)]


def retrieve_candidates(request: SearchRequest, question: str = "") -> list[Candidate]:
    """Search, and measure each hit's relevance evidence for grading.

    The evidence is measured against `question` when given: a retry query carries words taken
    from the last candidates (pseudo-relevance feedback), and grading chunks against their own
    words would make any near miss look relevant.
    """
    hits = search(request)
    retriever = get_retriever(request.index_dir, request.embeddings)
    features = retriever.relevance_features(question or request.query, hits)
    return [
        Candidate(
            document=hit_to_document(hit),
            evidence=Evidence(dense=f["dense"], coverage=f["coverage"]),
        )
        for hit, f in zip(hits, features, strict=True)
    ]


def with_token_recall(
    candidates: list[Candidate],
    question: str,
    index_dir: str,
    embeddings: str = "",
    measure: list[bool] | None = None,
) -> list[Candidate]:
    """The candidates with `token_recall` evidence added (where the index's embedder has
    token vectors). Apart from `retrieve_candidates` because it costs a forward pass per
    chunk, and only the calibrated grader reads it. `measure` names the candidates worth
    the pass; the others get the lowest recall, 0."""
    measure = measure if measure is not None else [True] * len(candidates)
    chosen = [c for c, m in zip(candidates, measure, strict=True) if m]
    retriever = get_retriever(index_dir, embeddings)
    measured = iter(
        retriever.token_recalls(question, [embedding_text_of(c["document"]) for c in chosen])
    )
    unmeasured = {"token_recall": 0.0, "token_recall_min": 0.0}
    return [
        Candidate(
            document=c["document"],
            evidence={**c["evidence"], **(next(measured) if m else unmeasured)},  # type: ignore[typeddict-item]
        )
        for c, m in zip(candidates, measure, strict=True)
    ]


def embedding_text_of(document: Document) -> str:
    """What the embedder saw for a search result: its heading path, then its text."""
    meta = document.metadata
    prefix = heading_prefix(str(meta.get("title") or ""), str(meta.get("section") or ""))
    return f"{prefix}\n{document.page_content}"
