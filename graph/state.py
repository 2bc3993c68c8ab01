"""The answer graph's state: a narrow chat input, typed working fields, and a cited output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from langchain_core.documents import Document
from langchain_core.messages import AnyMessage
from langgraph.graph import add_messages

from footnote.tools.documents import Candidate

CLEAR: Literal["clear"] = "clear"
"""Send this to an appending field to empty it (a new question, a new retrieval round)."""

T = TypeVar("T")


def append_or_clear(existing: list[T] | None, new: list[Any] | Literal["clear"] | None) -> list[T]:
    """Append items; `CLEAR` alone empties the list, `[CLEAR, *items]` starts it over."""
    if new == CLEAR:
        return []
    if new and new[0] == CLEAR:
        return list(new[1:])
    return [*(existing or []), *(new or [])]


def merge_candidates(
    existing: list[Candidate] | None, new: list[Any] | Literal["clear"] | None
) -> list[Candidate]:
    """`append_or_clear`, keeping the first of several hits on one chunk (parallel searches)."""
    seen: set[str | None] = set()
    merged: list[Candidate] = []
    for candidate in append_or_clear(existing, new):
        key = candidate["document"].id
        if key not in seen:
            seen.add(key)
            merged.append(candidate)
    return merged


@dataclass(kw_only=True)
class InputState:
    """What a caller passes: the conversation, as chat messages (Studio's chat speaks this)."""

    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    """The conversation; the last human message is the question."""


@dataclass(kw_only=True)
class OutputState:
    """What a caller gets back: the conversation with the answer, and its sources."""

    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    citations: list[dict[str, Any]] = field(default_factory=list)
    """One entry per source cited in the answer: n, chunk_id, source, section, page or
    lines, url."""
    route: Annotated[list[str], append_or_clear] = field(default_factory=list)
    """The path taken through the graph, e.g. rewrite_query, retrieve, grade:0/8, ..."""
    notices: Annotated[list[str], append_or_clear] = field(default_factory=list)
    """Things the user should know (HyDE unavailable offline, web search off, ...)."""
    invalid_citations: list[int] = field(default_factory=list)
    """Citation numbers the answer used that name no given source; removed from it."""
    unsupported_claims: list[dict[str, Any]] = field(default_factory=list)
    """Cited sentences that the sources they cite do not support, removed from the answer:
    claim, citations, and the evidence (lexical share, rarest missing keyword, similarity)."""


@dataclass(kw_only=True)
class State(OutputState):
    """Working fields of one answer; reset at the start of each question."""

    question: str = ""
    """The latest human message, as asked."""
    standalone_question: str = ""
    """The question rewritten to stand on its own (follow-ups resolved); graded and answered."""
    query: str = ""
    """The standalone search query written for this attempt."""
    hyde_passage: str = ""
    """A hypothetical answer whose embedding is searched alongside the query (HyDE on and a
    chat model configured); handed to the search tool, hidden from the model."""
    strategy: str = ""
    """How the current query was written: as_asked, condensed, llm_rewrite, prf, hyde."""
    search_calls: Annotated[list[AnyMessage], append_or_clear] = field(default_factory=list)
    """The agent step's tool call and the tool's replies for the current round: internal
    traffic, kept out of `messages` and emptied once the round is graded."""
    candidates: Annotated[list[Candidate], merge_candidates] = field(default_factory=list)
    """What the last retrieval round found, with its grading evidence (feeds PRF on a retry)."""
    documents: Annotated[list[Document], append_or_clear] = field(default_factory=list)
    """Chunks judged relevant, in the order they will be numbered as sources."""
    attempts: int = 0
    """Retrieval rounds done for this question; bounded by `max_retrieval_attempts`."""
