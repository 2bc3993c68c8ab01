"""Offline multi-hop: a part's first evidence names what the question needs next, and the
entity graph says where it leads.

"The team that owns a misused service account gets paged: how quickly must the on-call
engineer acknowledge?" finds sts.md (the owning team is paged) and misses oncall.md (how
fast a page is acknowledged). Without a model, a hop is planned from two things:

- the **residual question**: the clause of the question the first evidence leaves open (its
  keywords mostly absent from the best document's kept chunks), else the question's
  uncovered words;
- the **bridges**: entities the graph links to documents the first evidence lacks, as the
  caller may see them: a document title the first evidence names (a link: "directed by
  Theresa Connelly"), or one the question names ("on-call") that no kept chunk comes from.
  A title the evidence names is not followed for a whole open clause that stands on its
  own ("...: what has to succeed before a production rollout?"): that clause is searched
  in its own words, where a title the evidence happens to name would lead astray; it is
  for a clause that refers back ("how fast must they answer one?") or words left open.

Nothing left open, or neither a bridge nor an open clause: no hop, and the part's answer is
what it was. Otherwise one more search, through the graph stage, for the bridges' names and
the residual question; its chunks are graded against that hop query, and those of documents
the first evidence lacked are added, down to the first one of a document it already had (the
open clause's answer is held already: graph/nodes/grading.py, `hop_evidence`).

Every count here is over the caller's visible chunks (the search's own mask), so a bridge is
never a name found only in a document the caller may not read, and the hop's search applies
the same access control as any other.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.documents import Document

from footnote.graph.clauses import OPEN_SHARE, open_share, question_clauses
from footnote.graph.grader import without_frame
from footnote.graph.offline import extractive_answer
from footnote.graph.planner import is_bridge
from footnote.models.embeddings import IndexEmbeddings
from footnote.store.entities import KIND_WEIGHT, entity_key, key_hash
from footnote.store.text import keyword_tokens
from footnote.store.types import Caller, Filters
from footnote.tools.graph_search import HUB_MIN, HUB_SHARE, question_entity_hashes

MAX_BRIDGES = 2
"""Bridge entities a hop searches for (the strongest first)."""
MAX_BRIDGE_CHUNKS = 200
"""An entity in more visible chunks than this is a topic, not a bridge."""
BRIDGE_KINDS = ("title", "link")
"""Entities that name a document: the strongest signal on wiki-like and team corpora alike
(store/entities.py); names and phrases shared by documents are too often a topic."""


@dataclass(frozen=True)
class HopPlan:
    """The second search of a part: its query, and the entities it goes through."""

    query: str
    entities: list[str]
    residual: str


def residual_question(question: str, evidence: Sequence[Document]) -> str:
    """What the evidence leaves open: the clauses of the question whose keywords it mostly
    lacks (when some clause is answered), else the question's words it lacks; "" when it
    has them all."""
    clause = open_clause(question, evidence)
    if clause:
        return clause
    present = _present(evidence)
    missing = [w for w in re.findall(r"[\w'’-]+", without_frame(question))
               if (stems := keyword_tokens(w)) and not set(stems) <= present]  # fmt: skip
    return " ".join(missing)


def open_clause(question: str, evidence: Sequence[Document]) -> str:
    """The clauses the evidence mostly lacks, when it answers another clause of the question
    ("... gets paged: how quickly must the on-call engineer acknowledge?"); else ""."""
    present = _present(evidence)
    clauses = question_clauses(question)
    open_clauses = [c for c in clauses if open_share(c, present) >= OPEN_SHARE]
    if open_clauses and len(open_clauses) < len(clauses):
        return " ".join(open_clauses)
    return ""


def best_document(evidence: Sequence[Document]) -> list[Document]:
    """The kept chunks of the best-ranked document, what the question is answered from first,
    and the other kept documents' titles. Those documents are near misses often enough
    ("Teutberga died ..." beside "Lothair II's mother") that only their titles count as
    covering the question."""
    source = evidence[0].metadata.get("source") if evidence else None
    best = [d for d in evidence if d.metadata.get("source") == source]
    # the other kept documents' titles are answered, though: the question named them
    titles = {str(d.metadata.get("title", "")) for d in evidence if d not in best}
    return best + [Document(page_content="", metadata={"title": t}) for t in sorted(titles)]


def _present(evidence: Sequence[Document]) -> set[str]:
    return set(keyword_tokens(" ".join(_text(d) for d in evidence)))


def _text(document: Document) -> str:
    metadata = document.metadata
    heading = " ".join(str(metadata.get(k) or "") for k in ("title", "section"))
    return f"{heading} {document.page_content}"


def plan_hop(
    retriever: Any, caller: Caller, question: str, evidence: Sequence[Document]
) -> HopPlan | None:
    """The offline hop from this evidence, or None: no graph, nothing left open, or neither a
    bridge to a document the evidence lacks nor a clause of the question it leaves open."""
    graph_of = getattr(retriever.reader, "graph", None)
    graph = graph_of() if graph_of is not None else None
    if graph is None or graph.entities == 0 or not evidence:
        return None
    best = best_document(evidence)
    residual = residual_question(question, best)
    if not keyword_tokens(residual):
        return None
    clause = open_clause(question, best)
    entities = bridges(retriever, graph, caller, question, evidence, clause)
    if not entities and not clause:
        return None
    return HopPlan(query=f"{' '.join(entities)} {residual}".strip(), entities=entities,
                   residual=residual)  # fmt: skip


def bridges(
    retriever: Any,
    graph: Any,
    caller: Caller,
    question: str,
    evidence: Sequence[Document],
    clause: str,
) -> list[str]:
    """Names of the entities (document titles) that lead from the evidence, or from the
    question, to visible chunks of documents the evidence does not come from; the rarest
    and strongest first, at most MAX_BRIDGES. Without such a title: the names, codes and
    phrases of the clause the evidence leaves open (`clause`, from `open_clause`) that lead
    there ("customer data")."""
    # a reader's selection as a mask over the graph's rows (PostgreSQL's is a SQL condition)
    mask = graph.row_mask(retriever.mask(caller))
    df, _, idf = graph.visible_weights(mask, 1.0, HUB_SHARE, HUB_MIN)
    own_rows = np.zeros(len(mask), dtype=bool)
    kept_rows: list[int] = []
    kept_ids = {d.id for d in evidence}
    for source in sorted({str(d.metadata.get("source", "")) for d in evidence}):
        rows = np.flatnonzero(
            graph.row_mask(retriever.mask(caller, Filters(source=glob.escape(source))))
        )
        own_rows[rows] = True
        kept_rows += [int(r) for r, c in zip(rows, retriever.reader.chunks(rows.tolist()),
                                              strict=True) if c.id in kept_ids]  # fmt: skip
    own_titles = {key_hash(entity_key(str(d.metadata.get("title", "")))) for d in evidence}
    asked = dict(question_entity_hashes(question))
    by_entity = graph.by_entity()

    def leads_elsewhere(entity: int) -> bool:
        if not (0 < df[entity] <= MAX_BRIDGE_CHUNKS) or idf[entity] <= 0:
            return False
        members = by_entity.indices[by_entity.indptr[entity] : by_entity.indptr[entity + 1]]
        return bool((mask[members] & ~own_rows[members]).any())

    scored: dict[int, float] = {}
    own = graph.lookup(sorted(own_titles)) if own_titles else np.zeros(0, dtype=np.int64)
    excluded = set(own.tolist())
    named = graph.lookup(list(asked)) if asked else np.zeros(0, dtype=np.int64)
    excluded_by_question = set(named.tolist())
    # A whole clause left open that stands on its own ("...: what has to succeed before a
    # production rollout?") is searched in its own words: a title the evidence merely names
    # ("read the security policy") would steer it away. The evidence's links are for a clause
    # that refers back to it ("how fast must they answer one?") or words left open.
    stands_alone = bool(clause) and not is_bridge(clause)
    for row in [] if stands_alone else kept_rows:  # named by the evidence, not the question
        for entity in graph.chunk_entities(row).tolist():
            if entity in excluded or entity in excluded_by_question:
                continue
            if graph.kind(entity) in BRIDGE_KINDS and leads_elsewhere(entity):
                scored[entity] = max(scored.get(entity, 0.0), KIND_WEIGHT["link"] * idf[entity])
    for entity, weight in zip(named.tolist(), asked.values(), strict=True):
        # a document the question names that no kept chunk comes from
        if entity < 0 or entity in excluded or graph.kind(entity) not in BRIDGE_KINDS:
            continue
        if leads_elsewhere(entity):
            scored[entity] = max(scored.get(entity, 0.0), weight * idf[entity])
    if not scored:
        hashes = [h for h, _ in question_entity_hashes(clause)] if clause else []
        for entity in (graph.lookup(hashes) if hashes else own[:0]).tolist():
            if entity >= 0 and entity not in excluded and leads_elsewhere(entity):
                scored[entity] = KIND_WEIGHT[graph.kind(entity)] * idf[entity]
    names = graph.names()
    best = sorted(scored, key=lambda e: (-scored[e], names[e]))[:MAX_BRIDGES]
    return [names[e] for e in best]


def hop_answer(
    question: str,
    documents: Sequence[Document],
    first: int,
    entities: Sequence[str],
    embeddings: IndexEmbeddings,
) -> str:
    """The extractive answer of a part that hopped: the first evidence answers the question,
    the hop's chunks what it left open, asked of the bridge (every chunk of the bridge's
    document is about the bridge, so its name picks none of them); the two are numbered as
    one list of sources."""
    before = extractive_answer(question, documents[:first], embeddings) if first else ""
    residual = residual_question(question, best_document(documents[:first]))
    bridge = set(keyword_tokens(" ".join(entities)))
    asked = [w for w in re.findall(r"[\w'’-]+", residual) if not set(keyword_tokens(w)) & bridge]
    focus = " ".join(asked) if keyword_tokens(" ".join(asked)) else residual or question
    after = extractive_answer(focus, documents[first:], embeddings)
    if after:
        after = re.sub(r"\[(\d+)\]", lambda m: f"[{int(m.group(1)) + first}]", after)
    return " ".join(part for part in (before, after) if part)
