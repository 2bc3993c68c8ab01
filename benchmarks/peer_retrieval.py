"""The LangChain peer Footnote is compared with: the textbook hybrid retriever.

`EnsembleRetriever(retrievers=[BM25Retriever, FAISS.as_retriever()], weights=[0.5, 0.5])`,
built over the SAME chunks (their embedded text: title and heading path, then body) and the
SAME MiniLM vectors as a Footnote index, so any difference comes from retrieval itself, not
from chunking or the embedding model. The vectors are read from the index rather than
re-embedded. Both retrievers keep LangChain's defaults otherwise (whitespace-split BM25 via
rank_bm25, FAISS L2 distance), because that is what the peer is when people use it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from footnote.evaluation.retrieval import StageRunner
from footnote.store.files import FilesReader
from footnote.store.text import embedding_text
from footnote.store.types import Hit
from footnote.tools.retrieval import Retriever


def _ensemble_class() -> Any:
    """EnsembleRetriever moved to langchain-classic in LangChain 1.x."""
    try:
        from langchain_classic.retrievers import EnsembleRetriever
    except ImportError:  # LangChain 0.x
        from langchain.retrievers import EnsembleRetriever  # type: ignore[no-redef]
    return EnsembleRetriever


def langchain_peer(retriever: Retriever[Any], k: int = 100) -> StageRunner:
    """A stage runner (query -> chunk hits) for the LangChain ensemble over this index."""
    if not isinstance(retriever.reader, FilesReader):
        raise ValueError("the LangChain peer is built over a files index, not a database")
    index = retriever.reader.index
    chunks = list(index.chunks)
    if not chunks:
        return lambda query: []
    run = langchain_peer_from(
        [embedding_text(chunk) for chunk in chunks], index.all_vectors(), retriever.embeddings, k=k
    )
    return lambda query: [Hit(chunks[row], score, row) for row, score in run(query)]


def langchain_peer_from(
    texts: Sequence[str], vectors: Any, embeddings: Any, k: int = 100
) -> Callable[[str], list[tuple[int, float]]]:
    """The ensemble over given texts and their vectors: query -> (row, 1/rank) pairs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.retrievers import BM25Retriever
        from langchain_community.vectorstores import FAISS

    metadatas = [{"row": row} for row in range(len(texts))]
    keyword = BM25Retriever.from_texts(texts, metadatas=metadatas, k=k)
    store = FAISS.from_embeddings(
        text_embeddings=list(zip(texts, vectors.tolist(), strict=True)),
        embedding=embeddings,
        metadatas=metadatas,
    )
    ensemble = _ensemble_class()(
        retrievers=[keyword, store.as_retriever(search_kwargs={"k": k})], weights=[0.5, 0.5]
    )

    def run(query: str) -> list[tuple[int, float]]:
        documents = ensemble.invoke(query)[:k]
        return [(doc.metadata["row"], 1.0 / rank) for rank, doc in enumerate(documents, 1)]

    return run
