"""`FootnoteRetriever`: any Footnote index (a directory or a `postgresql://` URL) as a LangChain
`BaseRetriever`, with Footnote's ranking, metadata filters and access control."""

from __future__ import annotations

import asyncio
from pathlib import Path

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from footnote.tools.documents import retrieve_documents
from footnote.tools.retrieval import Stage
from footnote.tools.search import Filters, SearchRequest


class FootnoteRetriever(BaseRetriever):
    """Search a Footnote index built by `footnote ingest`.

    Returns `Document`s whose `id` is the chunk id (`keys.md#rotation:0`) and whose metadata
    carries `chunk_id`, `source`, `title`, `section`, `lines` or `page`, `url`, `date`,
    `access`, `score` and the document's other front-matter fields. Only chunks shared with
    one of `user_groups` are searched (filtered before ranking, so `k` results come back when
    `k` exist). `k` can also be given per call: `retriever.invoke(query, k=3)`.

        retriever = FootnoteRetriever(index=".footnote/index", k=4, user_groups=["engineering"],
                                      filters=Filters(source="runbooks/*"))
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: str | Path
    """Index directory, or a `postgresql://...?index=NAME` URL."""
    k: int = Field(default=4, ge=1)
    """Documents returned per query."""
    filters: Filters | None = None
    """Metadata filters (source glob, section, date range, front-matter fields)."""
    user_groups: list[str] = Field(default_factory=lambda: ["everyone"])
    """Access groups of the person the search is for."""
    admin: bool = False
    """See every chunk, including those with missing or malformed access data."""
    embeddings: str = ""
    """Embeddings as 'provider:model'; empty: the model the index was built with."""
    stage: Stage = "pipeline"
    """Retrieval stage: `pipeline` (Footnote's default), `hybrid`, `dense`, `bm25`, ..."""

    def _request(self, query: str, k: int | None) -> SearchRequest:
        if k is not None and k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return SearchRequest(
            query=query,
            index_dir=self.index,
            k=self.k if k is None else k,
            stage=self.stage,
            filters=self.filters,
            user_groups=tuple(self.user_groups),
            admin=self.admin,
            embeddings=self.embeddings,
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return retrieve_documents(self._request(query, k))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        # Loading an index and embedding the query block: keep them off the event loop.
        return await asyncio.to_thread(retrieve_documents, self._request(query, k))


__all__ = ["Filters", "FootnoteRetriever"]
