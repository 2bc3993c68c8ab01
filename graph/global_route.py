"""The global route: a question about the whole corpus or a large part of it ("what does the
handbook cover?", "which policies set a deadline?") answered by map-reduce over the entity
graph's communities, not from the few best chunks of one or two documents.

Select: an overview question (no topic of its own) takes the caller's visible communities,
largest first; a question with a topic ranks them by the pipeline's hits for it, each
community scored by the reciprocal ranks of its hits, and keeps those hits as its evidence.

Map, offline: one or two cited sentences per community, from its evidence chunks (or its most
central chunks for an overview), other documents before a second sentence of the same one.
With a chat model: a report per community, written from its visible central chunks and
cached by their content (store/report_cache.py), so a community is reported once until it
changes.

Overview, offline: one cited line per document the selected communities reach, by title,
each the document's first sentence (a code file's docstring without its quotes), within
`max_global_sentences` lines, then "And N more: ..." naming the rest.

Reduce, offline (a topical question): the sentences, community by community, most relevant
first, within the budgets (`max_communities`, `max_global_sentences`). With a model: one
call over the reports and their sources. Either way every sentence is checked against the
sources it cites (grounding.py) before it reaches the user.

Only the caller's visible chunks take part at every step (tools/communities.py): a
community, a sentence, an entity name or a report from a document they may not read never
reaches them. An index without communities (FOOTNOTE_GRAPH=0, or published before them)
groups the hits by document instead.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage

from footnote.graph import grounding, prompts
from footnote.graph.citations import format_sources
from footnote.graph.context import Context
from footnote.graph.grader import has_answer_type
from footnote.graph.search_tool import run_caller
from footnote.graph.state import CLEAR, Finding, State
from footnote.store.entities import KINDS, entity_key
from footnote.store.report_cache import ReportCache, report_key
from footnote.store.text import keyword_tokens
from footnote.store.types import Hit
from footnote.tools.communities import (
    CENTRAL_CHUNKS,
    CommunityView,
    best_sentence,
    document_of,
    sentence_candidates,
)
from footnote.tools.documents import hit_to_document
from footnote.tools.retrieval import Retriever, get_retriever
from footnote.tools.search import run_stage
from footnote.tools.sources import escape_source_text

SEARCH_DEPTH = 40
"""Pipeline hits a topical global question ranks communities by."""
SENTENCE_FLOOR = 0.45
"""Similarity to the question that qualifies a topical sentence on its own (the offline
grader's dense scale); otherwise it needs the topic's words (TOPIC_SHARE) or, for a
question about deadlines or amounts, a duration or number and KIND_FLOOR."""
TOPIC_SHARE = 0.5
"""Idf-weighted share of the topic's keywords a sentence must hold to qualify by words."""
KIND_FLOOR = 0.1
KIND_WEIGHT = 0.15
SENTENCES_PER_COMMUNITY = 2
"""Sentences a community gets at least room for; more when the budget spreads over few."""
REPORT_SOURCES = CENTRAL_CHUNKS
SPREAD_ROWS = 2000
"""Most central chunks of a community whose documents are looked at to spread a summary."""
SCOPE_ROWS = 20_000
"""Most chunks a title scope reads to keep only the named documents' own chunks."""
_CUE_WORDS = """summarize summarise summary overview cover covers covered contain contains
    include includes topic topics subject subjects theme themes area areas everything
    handbook documents document docs doc files file pages page corpus wiki list every all
    each which mention mentions mentioned name names talk talks about kinds kind things
    sources source sections section deal give tell main key parts part what policy policies
    guide guides rule rules"""
CUE_TOKENS = frozenset(keyword_tokens(_CUE_WORDS))
"""Words that say the question is global, not what it is about."""
_KINDS = (
    ("deadline", re.compile(r"\b(deadlines?|due|time limits?|how (soon|quickly)|by when)\b",
                            re.I)),
    ("duration", re.compile(r"\b(how (long|often)|expir\w*|periods?)\b", re.I)),
    ("number", re.compile(r"\b(limits?|amounts?|how (much|many)|maximum|minimum|costs?)\b",
                          re.I)),
)  # fmt: skip


_PARENTHESIS = re.compile(r"\s*\([^)]*\)\s*$")
"""A title's trailing "(director)": its entity is also named without it (store/entities.py)."""


@dataclass
class Selected:
    """One community chosen for the answer, with the chunks its sentences come from."""

    id: int | str
    score: float
    rows: list[int]
    entities: list[str] = field(default_factory=list)
    chunks: int = 0


def topic_of(question: str) -> str:
    """The question without the words that only make it global ("Which policies set a
    deadline?" -> "policies set deadline"); empty for an overview question."""
    words = re.findall(r"[\w'-]+", question)
    kept = [w for w in words if (t := keyword_tokens(w)) and not set(t) <= CUE_TOKENS]
    return " ".join(kept)


def title_scope(view: CommunityView, topic: str) -> np.ndarray | None:
    """The visible rows of the documents whose titles hold every word of the topic ("What
    does the FAQ cover?": the pages titled "... FAQ"), when at least two do; else None."""
    graph = view.graph
    wanted = set(entity_key(topic).split())
    if graph is None or not wanted:
        return None
    kinds = np.asarray(graph.arrays["entities.kind"])
    names = graph.names()
    titles = [
        e
        for e in np.flatnonzero((kinds == KINDS.index("title")) & (view.df > 0)).tolist()
        if wanted <= set(entity_key(names[e]).split())
    ]
    if len(titles) < 2:
        return None
    by_entity = graph.by_entity()
    rows = np.concatenate([by_entity.indices[by_entity.indptr[e] : by_entity.indptr[e + 1]]
                           for e in titles])  # fmt: skip
    visible = np.unique(rows)
    visible = visible[view.mask[visible]][:SCOPE_ROWS]
    named = {entity_key(names[e]) for e in titles}
    # a title entity is also on the chunks that name the document: keep its own chunks
    own = [row for row, chunk in zip(visible.tolist(), view.reader.chunks(visible.tolist()),
                                     strict=True) if entity_key(chunk.title) in named
           or entity_key(_PARENTHESIS.sub("", chunk.title)) in named]  # fmt: skip
    scope = np.zeros(len(view.mask), dtype=bool)
    scope[own] = True
    return scope


def select(
    retriever: Retriever[Any], view: CommunityView, mask: Any, question: str, limit: int
) -> tuple[list[Selected], int, bool]:
    """The communities to answer from, most relevant first, the searches made, and whether
    this is an overview (of everything, or of the documents a title scope names). Without
    a graph, the pipeline's hits grouped by document stand in for communities."""
    topic = topic_of(question)
    scope = title_scope(view, topic) if topic and view.available else None
    if view.available and (not topic or scope is not None):
        scoped = view if scope is None else view.narrowed(scope)
        return [
            Selected(c.id, float(len(c.rows)), _spread(retriever, c.rows), c.entities,
                     len(c.rows))
            for c in scoped.communities()[:limit]
        ], 0, True  # fmt: skip
    hits = run_stage(retriever, topic or question, SEARCH_DEPTH, mask, "pipeline")
    by_id: dict[int | str, Selected] = {}
    shown = {c.id: c for c in view.communities()} if view.available else {}
    held = view.graph.communities if view.graph is not None else None
    chunk_of = np.asarray(held.chunk) if held is not None else None
    for rank, hit in enumerate(hits):
        cid: int | str = document_of(hit.chunk)
        if chunk_of is not None and chunk_of[hit.row] >= 0:
            cid = int(chunk_of[hit.row])
        chosen = by_id.get(cid)
        if chosen is None:
            found = shown.get(cid) if isinstance(cid, int) else None
            chosen = by_id[cid] = Selected(cid, 0.0, [], found.entities if found else [],
                                           len(found.rows) if found else 0)  # fmt: skip
        chosen.score += 1.0 / (rank + 1)
        chosen.rows.append(hit.row)
    ordered = sorted(by_id.values(), key=lambda s: (-s.score, str(s.id)))
    return ordered[:limit], 1, not topic  # no graph: an overview of the documents found


def _spread(
    retriever: Retriever[Any], rows: list[int], limit: int = 3 * CENTRAL_CHUNKS
) -> list[int]:
    """A community's rows, most central first, the most central chunk of each document
    before any second chunk of one (so a summary reaches as many documents as it can)."""
    chunks = retriever.reader.chunks(rows[:SPREAD_ROWS])
    first: list[int] = []
    rest: list[int] = []
    seen: set[str] = set()
    for row, chunk in zip(rows, chunks, strict=False):
        (rest if document_of(chunk) in seen else first).append(row)
        seen.add(document_of(chunk))
    return (first + rest)[:limit]


def map_sentences(
    retriever: Retriever[Any], selected: Sequence[Selected], question: str, overview: bool
) -> list[list[tuple[str, Hit]]]:
    """Offline map: per community, its candidate sentences, best first, one per chunk and
    other documents before a second sentence of one. An overview takes each chunk's
    sentence that names most of the community's entities; a topical question the one
    closest to it, when it qualifies (SENTENCE_FLOOR, TOPIC_SHARE, KIND_FLOOR)."""
    embed = retriever.embeddings.embed_array
    topic = topic_of(question) or question
    asked = embed([question])[0]
    tokens = sorted(set(keyword_tokens(topic)))
    weights = retriever.idf_weights(tokens) if tokens else {}
    kind = next((name for name, cue in _KINDS if cue.search(topic)), "")
    out: list[list[tuple[str, Hit]]] = []
    for community in selected:
        hits = read_hits(retriever, community.rows)
        keys = [entity_key(n) for n in community.entities[:20]]
        scored: list[tuple[float, str, Hit]] = []
        for position, hit in enumerate(hits):
            if overview:
                sentence = best_sentence(hit.chunk.text, keys)
                if sentence is not None:
                    scored.append((-position, sentence, hit))
                continue
            sentences = sentence_candidates(hit.chunk.text)
            if not sentences:
                continue
            similarity = embed(sentences) @ asked
            share = np.array([_share(s, weights) for s in sentences])
            typed = np.array([float(bool(kind) and _of_kind(kind, s)) for s in sentences])
            score = 0.8 * similarity + 0.2 * share + KIND_WEIGHT * typed
            best = int(np.argmax(score))
            if (
                similarity[best] >= SENTENCE_FLOOR
                or share[best] >= TOPIC_SHARE
                or (typed[best] and similarity[best] >= KIND_FLOOR)
            ):
                scored.append((float(score[best]), sentences[best], hit))
        scored.sort(key=lambda item: -item[0])
        picked: list[tuple[str, Hit]] = []
        spare: list[tuple[str, Hit]] = []
        used: set[str] = set()
        for _, sentence, hit in scored:
            (spare if document_of(hit.chunk) in used else picked).append((sentence, hit))
            used.add(document_of(hit.chunk))
        out.append(picked + spare)
    return out


_TIME_LIMIT = re.compile(r"\b(within|by|before|ahead|every|until|no later than)\b", re.I)


def _of_kind(kind: str, sentence: str) -> bool:
    """A duration, a number, or for a deadline a duration that limits something ("within
    30 days", "two weeks ahead"), not any mention of time."""
    if kind == "deadline":
        return has_answer_type("duration", sentence) and bool(_TIME_LIMIT.search(sentence))
    return has_answer_type(kind, sentence)


def _share(sentence: str, weights: dict[str, float]) -> float:
    """Idf-weighted share of the topic's keywords the sentence holds."""
    total = sum(weights.values())
    if not total:
        return 0.0
    present = set(keyword_tokens(sentence))
    return sum(w for t, w in weights.items() if t in present) / total


def allocate(mapped: list[list[tuple[str, Hit]]], budget: int) -> list[list[tuple[str, Hit]]]:
    """The budget of sentences shared round by round, most relevant community first: first
    sentences from documents the answer does not cite yet (a community gets at most
    SENTENCES_PER_COMMUNITY, or its even share of the budget when that is more), then such
    sentences beyond that share, then any, within the share."""
    non_empty = sum(1 for m in mapped if m)
    cap = max(SENTENCES_PER_COMMUNITY, budget // max(non_empty, 1))
    left = [list(m) for m in mapped]
    chosen: list[list[tuple[str, Hit]]] = [[] for _ in mapped]
    cited: set[str] = set()
    remaining = budget
    for novel_only, limit in ((True, cap), (True, budget), (False, cap)):
        progress = True
        while remaining and progress:
            progress = False
            for i, candidates in enumerate(left):
                if not remaining or len(chosen[i]) >= limit:
                    continue
                at = next(
                    (k for k, (_, hit) in enumerate(candidates)
                     if not novel_only or document_of(hit.chunk) not in cited),
                    None,
                )  # fmt: skip
                if at is None:
                    continue
                sentence, hit = candidates.pop(at)
                chosen[i].append((sentence, hit))
                cited.add(document_of(hit.chunk))
                remaining -= 1
                progress = True
    return chosen


OVERVIEW_QUOTES = re.compile(r'^[rRbBuU]?("""|\'\'\'|["\'])\s*|\s*("""|\'\'\'|["\'])\s*$')
"""Quote marks around a code file's docstring: its text describes the file, its quotes not."""


@dataclass
class OverviewLine:
    """One document in an overview: its title, a sentence that says what it is, the chunk
    that sentence is cited from, and the community it was found in."""

    title: str
    description: str
    hit: Hit
    community: int


def overview_lines(retriever: Retriever[Any], selected: Sequence[Selected]) -> list[OverviewLine]:
    """One line per document the selected communities reach, ordered by title so a reader
    can scan it: each described by the first sentence of its earliest chunk at hand (a code
    file's docstring without its quotes), else by its title alone. Only the caller's visible
    rows are in `selected`, so a document they may not read is never listed."""
    earliest: dict[str, tuple[Hit, int]] = {}
    for index, community in enumerate(selected):
        for hit in read_hits(retriever, community.rows):
            key = document_of(hit.chunk)
            held = earliest.get(key)
            if held is None or _start(hit) < _start(held[0]):
                earliest[key] = (hit, index)
    lines = []
    for key, (hit, index) in earliest.items():
        sentences = [OVERVIEW_QUOTES.sub("", s) for s in sentence_candidates(hit.chunk.text)]
        description = next((s for s in sentences if s), "")
        lines.append(OverviewLine(key, description, hit, index))
    return sorted(lines, key=lambda line: (line.title.casefold(), line.title))


def _start(hit: Hit) -> tuple[int, str]:
    """Where a chunk starts in its document (its first line, else its id's order)."""
    return (hit.chunk.lines[0] if hit.chunk.lines else 0, hit.chunk.id)


def more_documents(lines: Sequence[OverviewLine]) -> str:
    """The closing line naming the documents past the line budget."""
    return f"And {len(lines)} more: " + ", ".join(line.title for line in lines) + "."


class Numbering:
    """The answer's sources, numbered once, in the order they are first cited."""

    def __init__(self) -> None:
        self.documents: list[Document] = []
        self.number: dict[str, int] = {}

    def __call__(self, hit: Hit) -> int:
        if hit.chunk.id not in self.number:
            self.documents.append(hit_to_document(hit))
            self.number[hit.chunk.id] = len(self.documents)
        return self.number[hit.chunk.id]


def read_hits(retriever: Retriever[Any], rows: Sequence[int]) -> list[Hit]:
    return [Hit(c, 0.0, r) for r, c in zip(rows, retriever.reader.chunks(list(rows)), strict=True)]


class GlobalAnswer:
    """The `global_answer` node's work for one turn (see the module's docstring)."""

    def __init__(self, context: Context, state: State, model: BaseChatModel | None) -> None:
        self.context = context
        self.state = state
        self.model = model
        self.calls_left = max(0, context.max_model_calls_per_turn - state.footnote_model_calls)
        self.calls = 0
        self.report_calls = 0
        self.notices: list[str] = []

    def run(self, write: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        context, question = self.context, self.state.standalone_question or self.state.question
        retriever = get_retriever(context.index_dir, context.embeddings)
        mask = retriever.mask(run_caller(context))
        view = CommunityView(retriever.reader, mask)
        selected, searches, overview = select(
            retriever, view, mask, question, context.max_communities
        )
        mapped = allocate(
            map_sentences(retriever, selected, question, overview), context.max_global_sentences
        )
        kept = [(s, m) for s, m in zip(selected, mapped, strict=True) if m]
        cite = Numbering()
        contributed: list[set[str]] = [set() for _ in kept]
        draft = None
        if self.model is not None and kept and self.calls_left >= 2:
            draft = self._model_answer(retriever, question, kept, cite, contributed)
        beyond: list[OverviewLine] = []
        if draft is None and overview and kept:
            draft, beyond = self._overview(retriever, selected, cite, kept, contributed)
        if draft is None:
            lines = []
            for (_, sentences), ids in zip(kept, contributed, strict=True):
                ids.update(h.chunk.id for _, h in sentences)
                lines.append(" ".join(f"{s} [{cite(h)}]" for s, h in sentences))
            draft = "\n".join(lines)
        documents = cite.documents
        checked = grounding.ground(draft, documents, embed=retriever.embeddings.embed_array,
                                   idf=retriever.idf_weights)  # fmt: skip
        answer = checked.text or prompts.NOT_COVERED
        if checked.text and beyond:
            answer = f"{answer}\n{more_documents(beyond)}"
        cited = {int(n) for n in re.findall(r"\[(\d+)\]", checked.text)}
        used = []
        for (community, _), ids in zip(kept, contributed, strict=True):
            sources = sorted({str(d.metadata["source"]) for d in documents
                              if d.id in ids and cite.number[str(d.id)] in cited})  # fmt: skip
            used.append({"id": community.id, "score": round(community.score, 4),
                         "chunks": community.chunks, "entities": community.entities[:5],
                         "documents": sources})  # fmt: skip
        write({"event": "answer", "text": answer})
        if checked.removed:
            self.notices.append(f"Removed {len(checked.removed)} claim(s) that the sources do "
                                "not support.")  # fmt: skip
        finding: Finding = {"index": 0, "question": question, "documents": documents,
                            "searches": searches, "model_calls": self.calls,
                            "rounds": []}  # fmt: skip
        return {
            "messages": [AIMessage(content=answer, id=f"answer-{uuid.uuid4().hex[:12]}")],
            "documents": [CLEAR, *documents],
            "findings": [finding],
            "footnote_communities": used,
            "footnote_unsupported_claims": checked.removed,
            "footnote_invalid_citations": checked.invalid,
            "footnote_searches": searches,
            "footnote_model_calls": self.state.footnote_model_calls + self.calls,
            "footnote_notices": list(dict.fromkeys(self.notices)),
            "footnote_route": [f"global_answer:{len(used)}"],
        }

    def _overview(
        self,
        retriever: Retriever[Any],
        selected: Sequence[Selected],
        cite: Numbering,
        kept: list[tuple[Selected, list[tuple[str, Hit]]]],
        contributed: list[set[str]],
    ) -> tuple[str, list[OverviewLine]]:
        """The offline answer to an overview question: one cited line per document, by
        title, within the sentence budget; the documents past it are named after the
        checked lines (see `more_documents`)."""
        lines = overview_lines(retriever, selected)
        budget = self.context.max_global_sentences
        shown, beyond = lines[:budget], lines[budget:]
        position = {id(community): k for k, (community, _) in enumerate(kept)}
        text = []
        for line in shown:
            described = f"{line.title}: {line.description}" if line.description else line.title
            text.append(f"- {described} [{cite(line.hit)}]")
            at = position.get(id(selected[line.community]))
            if at is not None:
                contributed[at].add(line.hit.chunk.id)
        return "\n".join(text), beyond

    def _model_answer(
        self,
        retriever: Retriever[Any],
        question: str,
        kept: list[tuple[Selected, list[tuple[str, Hit]]]],
        cite: Numbering,
        contributed: list[set[str]],
    ) -> str | None:
        """Reports (cached) for the communities the budget allows, then one reduce call; the
        rest keep their extractive sentences as their report. None: no call left for the
        reduce step (the offline reduce answers); "": the model found nothing to say."""
        assert self.model is not None
        cache = ReportCache(self.context.index_dir)
        model_name = self.context.model or type(self.model).__name__
        reports: list[str] = []
        for (community, sentences), ids in zip(kept, contributed, strict=True):
            ids.update(h.chunk.id for _, h in sentences)
            hits = read_hits(retriever, community.rows[:REPORT_SOURCES])
            docs = [hit_to_document(h) for h in hits]
            prompt = prompts.COMMUNITY_REPORT_PROMPT.format(sources=format_sources(docs))
            key = report_key(model_name, prompt)
            report = cache.get(key)
            if report is None and self.calls_left - self.calls > 1:
                response = self.model.invoke(
                    [HumanMessage(prompt)],
                    config={
                        "tags": ["nostream", "footnote:internal"],
                        "run_name": "community_report",
                    },
                )
                report = _text(response).strip()
                self.calls += 1
                self.report_calls += 1
                cache.put(key, report)
            if report is None:
                self.notices.append("Model-call budget spent: some communities are reported "
                                    "by their extractive sentences.")  # fmt: skip
                reports.append(" ".join(f"{s} [{cite(h)}]" for s, h in sentences))
                continue
            ids.update(h.chunk.id for h in hits)
            numbers = [cite(h) for h in hits]
            reports.append(_renumbered(report, numbers))
            for _, hit in sentences:
                cite(hit)
        if self.calls_left - self.calls < 1:
            return None
        prompt = prompts.GLOBAL_REDUCE_PROMPT.format(
            reports="\n\n".join(
                f"Report {i}: {escape_source_text(r)}" for i, r in enumerate(reports, 1)
            ),  # fmt: skip
            sources=format_sources(cite.documents),
            question=question,
        )
        response = self.model.invoke(
            [HumanMessage(prompt)],
            config={"tags": ["nostream"], "run_name": "global_reduce"},
        )
        self.calls += 1
        text = _text(response)
        return "" if text.strip() == prompts.NOT_COVERED else text


def _renumbered(text: str, numbers: Sequence[int]) -> str:
    """A report cites its own sources from 1; the reduce step numbers them across reports.
    A number naming no source of the report is dropped."""

    def swap(match: re.Match[str]) -> str:
        n = int(match.group(1))
        return f"[{numbers[n - 1]}]" if 1 <= n <= len(numbers) else ""

    return re.sub(r"\[(\d+)\]", swap, text)


def _text(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
