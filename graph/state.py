"""The answer graph's state: a narrow chat input, typed working fields, and a cited output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NotRequired, TypeVar

from langchain_core.documents import Document
from langchain_core.messages import AnyMessage
from langgraph.graph import add_messages
from typing_extensions import TypedDict

from footnote.tools.documents import Candidate

CLEAR: Literal["clear"] = "clear"
"""Send this to an appending field to empty it (a new question, a new retrieval round)."""

T = TypeVar("T")


def planned_route(path: Sequence[str]) -> str | None:
    """The route the planner chose for the turn ("search", "global", "reply", or a model's
    "clarify"; None for a run without a planner), read from the step list (`footnote_route`,
    a surface's `path`) that records it as plan_turn:<route>:<parts>: every surface reports
    `route` and `path` from this one reading."""
    for step in path:
        if step.startswith("plan_turn:"):
            return step.split(":")[1]
    return None


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


class Part(TypedDict):
    """One part of a question, as the answer reports it."""

    question: str
    covered: bool
    citations: list[int]


@dataclass(kw_only=True)
class OutputState:
    """What a caller gets back: the conversation with the answer, its sources and per-part
    coverage. Only `messages`, `citations` and `parts` are meant to be shared with a parent
    graph; Footnote's own reporting lives in `footnote_*` keys so a parent's keys of the same
    plain names (`route`, `notices`, ...) are never overwritten."""

    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    citations: list[dict[str, Any]] = field(default_factory=list)
    """One entry per source cited in the answer: n, chunk_id, source, section, page or
    lines, url."""
    parts: list[Part] = field(default_factory=list)
    """The question's parts: each with whether the documents covered it and the citation
    numbers of its answer. A single question has one part; a turn that needed no search none."""
    footnote_route: Annotated[list[str], append_or_clear] = field(default_factory=list)
    """The path taken through the graph, e.g. plan_turn:search:1, rewrite_query, ...; what
    clients get as `path`, beside its `route` (`planned_route`)."""
    footnote_notices: Annotated[list[str], append_or_clear] = field(default_factory=list)
    """Things the user should know (HyDE unavailable offline, web search off, budget spent)."""
    footnote_invalid_citations: list[int] = field(default_factory=list)
    """Citation numbers the answer used that name no given source; removed from it."""
    footnote_unsupported_claims: list[dict[str, Any]] = field(default_factory=list)
    """Cited sentences that the sources they cite do not support, removed from the answer:
    claim, citations, and the evidence (lexical share, rarest missing keyword, similarity)."""
    footnote_searches: int = 0
    """Searches of the index this turn made (all parts, all rounds)."""
    footnote_model_calls: int = 0
    """Chat-model calls this turn made (0 offline)."""
    footnote_communities: list[dict[str, Any]] = field(default_factory=list)
    """A global answer's communities (graph/global_route.py), most relevant first: id,
    score, visible chunks, a few entities, and the documents the answer cites from it."""
    footnote_hops: list[Hop] = field(default_factory=list)
    """Parts that followed their first evidence through the entity graph to other documents:
    the entities they went through (shown in "Why this answer")."""


class PlannedPart(TypedDict):
    """A sub-question the planner will have researched, with its share of the turn's budget."""

    index: int
    question: str
    strategy: str
    """How the question was made standalone: as_asked, condensed, llm_rewrite, split, planned."""
    hops: int
    """Extra searches allowed with what the first evidence names (multi-hop; model only)."""
    max_searches: int
    max_model_calls: int
    research: str
    """What the part is first searched with: `question`, or for a part that refers back to the
    one before (strategy "bridged"), that part's words with its own. Its chunks are still
    graded and answered against `question`, the user's words, which head the part's answer:
    the earlier part's words find the subject, and would otherwise draw the earlier part's
    answer again."""


class GradedChunk(TypedDict):
    """One candidate of a retrieval round as it was graded (no text: the trace stays small)."""

    chunk_id: str
    source: str
    section: str
    dense: float
    """Embedding similarity to the part's question."""
    coverage: float
    """Share of the question's keywords the chunk contains."""
    grade: float
    kept: bool
    reason: str
    """Why it was kept or dropped: "kept", "below threshold", "beyond keep_k"."""


class Round(TypedDict):
    """One retrieval round of a part, kept for "why this answer": the subgraph's own
    checkpoints are not in the thread's history, so the part carries its trace out."""

    query: str
    strategy: str
    method: str
    """How the grades were made: "offline" or the model's structured-output method."""
    threshold: float
    keep_k: int
    candidates: list[GradedChunk]
    entities: NotRequired[list[str]]
    """For a round searched through the entity graph (an offline hop): the bridge entities
    it went through."""


class Finding(TypedDict):
    """One part's research: the chunks it kept, what it spent, and how each round went."""

    index: int
    question: str
    documents: list[Document]
    searches: int
    model_calls: int
    rounds: list[Round]
    hop_entities: NotRequired[list[str]]
    """The entities an offline hop went through to reach documents the first evidence lacked
    (empty for a hop that searched the clause the evidence left open and found no entity)."""
    hop_query: NotRequired[str]
    """The offline hop's search (graph/hops.py); empty when the part made none."""
    first_evidence: NotRequired[int]
    """How many of `documents` the first search kept; those after it are the hop's."""
    hop_sources: NotRequired[list[str]]
    """The documents the offline hop found for what the first evidence left open: those it
    added, and the first one it found again among the first evidence."""


class Hop(TypedDict):
    """A part's hop through the entity graph, as the answer reports it."""

    part: int
    entities: list[str]
    query: str
    sources: list[str]
    """The documents the hop found: those it added, then the first it already had (if any)."""


@dataclass(kw_only=True)
class State(OutputState):
    """Working fields of one turn; reset at the start of each question."""

    question: str = ""
    """The latest human message, as asked."""
    standalone_question: str = ""
    """The question rewritten to stand on its own (follow-ups resolved), before planning."""
    turn: str = ""
    """What the planner decided: "search", "global" (a question about the whole corpus),
    "reply" (no documents needed) or "clarify"."""
    reply: str = ""
    """The direct reply of a turn that needs no search (or the clarifying question)."""
    plan: list[PlannedPart] = field(default_factory=list)
    """The sub-questions to research, in the order they were asked."""
    findings: Annotated[list[Finding], append_or_clear] = field(default_factory=list)
    """What each researched part found (appended by the parallel research branches)."""
    previous_citations: list[dict[str, Any]] = field(default_factory=list)
    """The previous turn's citations, for questions about the conversation itself."""
    documents: Annotated[list[Document], append_or_clear] = field(default_factory=list)
    """Every part's kept chunks, in the order they are numbered as sources."""


@dataclass(kw_only=True)
class PartState:
    """One sub-question's research (a `Send` per part runs the research graph with it)."""

    index: int = 0
    """The part's position in the plan."""
    of: int = 1
    """How many parts the plan has (progress events name the part when there are several)."""
    question: str = ""
    """The part as a standalone question; its chunks are graded and answered against it."""
    standalone_question: str = ""
    """Same as `question`: the search tool grades its candidates against this field."""
    first_strategy: str = "as_asked"
    """How the part's question was made standalone (the first query's strategy)."""
    first_query: str = ""
    """The first search's query when it is not `question`: a bridged part's words with those
    of the part before, which name what it refers to (PlannedPart.research)."""
    query: str = ""
    """The search query written for this attempt."""
    hyde_passage: str = ""
    """A hypothetical answer whose embedding is searched alongside the query (HyDE on and a
    chat model configured); handed to the search tool, hidden from the model."""
    strategy: str = ""
    """How the current query was written: as_asked, condensed, llm_rewrite, prf, hyde, hop."""
    search_calls: Annotated[list[AnyMessage], append_or_clear] = field(default_factory=list)
    """The agent step's tool call and the tool's replies for the current round: internal
    traffic, kept out of `messages` and emptied once the round is graded."""
    candidates: Annotated[list[Candidate], merge_candidates] = field(default_factory=list)
    """What the last retrieval round found, with its grading evidence (feeds PRF on a retry)."""
    documents: Annotated[list[Document], append_or_clear] = field(default_factory=list)
    """Chunks judged relevant, in the order they will be numbered as sources."""
    attempts: int = 0
    """Retrieval rounds done for this part; bounded by `max_retrieval_attempts` and the
    part's share of the turn's search budget."""
    hops: int = 0
    """Multi-hop searches still allowed for this part (a model's, or offline the graph's)."""
    search_stage: str = ""
    """The stage the next search runs: "" (the pipeline) or "graph" (an offline hop); handed
    to the search tool, hidden from the model."""
    hop_entities: list[str] = field(default_factory=list)
    """The bridge entities an offline hop went through (graph/hops.py)."""
    hop_query: str = ""
    """The offline hop's search: the bridges' names and what the first evidence left open."""
    first_evidence: int = 0
    """How many of `documents` came before the hop."""
    hop_sources: list[str] = field(default_factory=list)
    """The documents the offline hop found: those it added, and the first it already had."""
    max_searches: int = 1
    """The part's share of the turn's search budget."""
    max_model_calls: int = 0
    """The part's share of the turn's model-call budget."""
    model_calls: int = 0
    """Model calls this part made."""
    searches: int = 0
    """Searches this part made (one per search call; a model may make several at once)."""
    route: Annotated[list[str], append_or_clear] = field(default_factory=list)
    """The part's path, passed on to the turn's `footnote_route`."""
    notices: Annotated[list[str], append_or_clear] = field(default_factory=list)
    """The part's notices, passed on to the turn's `footnote_notices`."""
    rounds: Annotated[list[Round], append_or_clear] = field(default_factory=list)
    """Each grading round's trace, passed on to the part's `Finding`."""
