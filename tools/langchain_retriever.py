"""`FootnoteRetriever`: any Footnote index (a directory or a `postgresql://` URL) as a LangChain
`BaseRetriever`, with Footnote's ranking, metadata filters and access control."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from footnote.store.types import Caller
from footnote.tools.documents import Candidate, relevance, retrieve_candidates
from footnote.tools.retrieval import Stage
from footnote.tools.search import Filters, SearchRequest

SEARCH_KWARGS = ("k", "filter")
"""The `search_kwargs` keys LangChain retrievers share that this one honours."""

FilterSetting = Filters | Mapping[str, Any]
"""A `Filters`, or a LangChain-style dict: `source`, `section`, `date_from` and `date_to` act
as in `Filters`; any other key must equal the chunk's front-matter field of that name."""


def as_filters(value: FilterSetting | None, base: Filters | None = None) -> Filters | None:
    """`value` merged over `base` (its conditions win); None when neither says anything."""
    if value is None:
        return base
    if isinstance(value, Filters):
        return value if base is None else _merge(base, value)
    if not isinstance(value, Mapping):
        raise ValueError(f"filter must be a dict or a Filters, not {type(value).__name__}")
    named = {f.name for f in fields(Filters)} - {"metadata"}
    given = Filters(
        **{k: v for k, v in value.items() if k in named},
        metadata={k: v for k, v in value.items() if k not in named},
    )
    return given if base is None else _merge(base, given)


def _merge(base: Filters, over: Filters) -> Filters:
    changes = {f.name: getattr(over, f.name) for f in fields(Filters) if f.name != "metadata"}
    return replace(
        base,
        **{k: v for k, v in changes.items() if v is not None},
        metadata={**base.metadata, **over.metadata},
    )


class FootnoteRetriever(BaseRetriever):
    """Search a Footnote index built by `footnote ingest`, with LangChain's retriever
    conventions: `k`, `filter` and `search_kwargs={"k": ..., "filter": ...}` as fields, the
    same per call (`retriever.invoke(query, k=3, filter={"team": "sre"})`, and Footnote's own
    `filters=`), and any other field or keyword refused rather than ignored.

    Only chunks shared with one of `user_groups` (plus `everyone`, unless `strict_groups`) are
    searched, filtered before ranking, so `k` results come back when `k` exist.

    Each `Document`'s `id` is the chunk id (`keys.md#rotation:0`); its metadata holds the
    document's front-matter fields, then Footnote's own keys:

    - `chunk_id`, `source`, `title`, `section`, `lines` (first, last) or `page`, `url`, `date`,
      `access` (the groups it is shared with), `kind` (`document`);
    - `rank`: 1 for the best result of this query, then 2, 3, ...;
    - `relevance`: the chunk's offline grade in [0, 1] from its own evidence (embedding
      similarity to the query and keyword coverage), comparable across queries; 0.5 is the
      operating point from which the answer graph keeps a chunk by default;
    - `score`: the fusion score that ordered this query's results (meaningful only within
      one query: compare `relevance` across queries).

        retriever = FootnoteRetriever(index=".footnote/index", k=4, user_groups=["engineering"],
                                      filter={"source": "runbooks/*"})
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    index: str | Path
    """Index directory, or a `postgresql://...?index=NAME` URL."""
    k: int = Field(default=4, ge=1)
    """Documents returned per query."""
    filter: FilterSetting | None = None
    """Metadata filter, as a dict (`{"source": "runbooks/*", "team": "sre"}`) or `Filters`."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """LangChain's spelling: `{"k": 2, "filter": {...}}`; these win over `k` and `filter`."""
    filters: Filters | None = None
    """Footnote's own filter type (source glob, section, date range, front-matter fields);
    `filter` is merged over it."""
    user_groups: list[str] = Field(default_factory=lambda: ["everyone"])
    """Access groups of the person the search is for."""
    strict_groups: bool = False
    """Search only `user_groups`; otherwise `everyone` is added, as on the server."""
    admin: bool = False
    """See every chunk, including those with missing or malformed access data."""
    embeddings: str | Embeddings = ""
    """A `provider:model` string or any LangChain `Embeddings` object; empty: the model the
    index was built with."""
    stage: Stage = "pipeline"
    """Retrieval stage: `pipeline` (Footnote's default), `hybrid`, `dense`, `bm25`, ..."""

    @field_validator("search_kwargs")
    @classmethod
    def _known_search_kwargs(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(SEARCH_KWARGS))
        if unknown:
            raise ValueError(
                f"search_kwargs {unknown} not supported: use {', '.join(SEARCH_KWARGS)}"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> FootnoteRetriever:
        self._effective_k(self.search_kwargs.get("k"))
        as_filters(self.search_kwargs.get("filter"), as_filters(self.filter, self.filters))
        return self

    def _effective_k(self, k: int | None) -> int:
        value = k if k is not None else self.search_kwargs.get("k", self.k)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"k must be a whole number of at least 1, got {value!r}")
        return value

    def _request(self, query: str, k: int | None, filter: Any, **per_call: Any) -> SearchRequest:
        """The search for one call; per-call `k`, `filter` and `filters` win over the fields,
        and any other keyword is refused (LangChain would pass it on unread)."""
        unknown = sorted(set(per_call) - {"filters"})
        if unknown:
            raise TypeError(
                f"FootnoteRetriever.invoke() takes k=, filter= and filters=, not {unknown}"
            )
        filters = as_filters(self.filter, self.filters)
        filters = as_filters(self.search_kwargs.get("filter"), filters)
        filters = as_filters(per_call.get("filters"), filters)
        return SearchRequest(
            query=query,
            index_dir=self.index,
            k=self._effective_k(k),
            stage=self.stage,
            filters=as_filters(filter, filters),
            caller=Caller.of_groups(self.user_groups, strict=self.strict_groups, admin=self.admin),
            embeddings=self.embeddings,
        )

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filter: FilterSetting | None = None,
        **per_call: Any,
    ) -> list[Document]:
        return _documents(self._request(query, k, filter, **per_call))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        filter: FilterSetting | None = None,
        **per_call: Any,
    ) -> list[Document]:
        # Loading an index and embedding the query block: keep them off the event loop.
        return await asyncio.to_thread(_documents, self._request(query, k, filter, **per_call))


def _documents(request: SearchRequest) -> list[Document]:
    out = []
    for rank, candidate in enumerate(retrieve_candidates(request), 1):
        document = candidate["document"]
        document.metadata["rank"] = rank
        document.metadata["relevance"] = round(relevance(candidate), 4)
        out.append(document)
    return out


class CandidateSearch(BaseRetriever):
    """One search of the answer graph, run as a LangChain retriever run: callbacks (and so
    LangSmith) see `on_retriever_start` with the query and `on_retriever_end` with the chunks
    found, nested under the tool call that asked for them. The graph grades the candidates'
    evidence too, so they are kept on the instance for the caller to read after `invoke`.

        search = CandidateSearch(request=request, question=question)
        documents = search.invoke(request.query)
        candidates = search.candidates
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    request: Any
    """The `SearchRequest` to run (its query is the one `invoke` is given)."""
    question: str = ""
    """What the evidence is measured against (`retrieve_candidates`)."""
    _candidates: list[Candidate] = PrivateAttr(default_factory=list)

    @field_validator("request")
    @classmethod
    def _a_search_request(cls, value: Any) -> SearchRequest:
        if not isinstance(value, SearchRequest):
            raise ValueError(f"request must be a SearchRequest, not {type(value).__name__}")
        return value

    @property
    def candidates(self) -> list[Candidate]:
        return self._candidates

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        self._candidates = retrieve_candidates(replace(self.request, query=query), self.question)
        return [candidate["document"] for candidate in self._candidates]


__all__ = ["CandidateSearch", "Filters", "FootnoteRetriever"]
