"""Footnote's search results as LangChain documents, with the evidence the offline grader reads.

This is the tools-layer search API the answer graph's tool and `FootnoteRetriever` share: a
`SearchRequest` in, `Document`s out whose `id` is the chunk id and whose metadata carries
everything a citation or a filter needs.
"""

from __future__ import annotations

from typing import TypedDict

from langchain_core.documents import Document

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


class Candidate(TypedDict):
    """One retrieved chunk waiting to be graded."""

    document: Document
    evidence: Evidence


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
