"""Grading one part's candidates: a model's grades, or the offline grader's, and the trace
of each round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langgraph.runtime import Runtime

from footnote.graph import prompts
from footnote.graph.citations import format_sources
from footnote.graph.context import Context
from footnote.graph.grader import measured_offline_grades
from footnote.graph.model_calls import is_timeout
from footnote.graph.nodes.base import ModelNodes
from footnote.graph.nodes.messages import internal_call, trace_metadata
from footnote.graph.nodes.schemas import grades_for
from footnote.graph.search_tool import SEARCH_CALLS
from footnote.graph.state import (
    CLEAR,
    GradedChunk,
    PartState,
    Round,
)
from footnote.tools.documents import Candidate


def _round_trace(
    state: PartState,
    context: Context,
    candidates: Sequence[Candidate],
    grades: Sequence[float],
    kept: set[str | None],
    method: str,
) -> Round:
    """What "why this answer" shows of one grading round: each candidate's evidence, grade
    and fate, without its text."""
    rows: list[GradedChunk] = []
    for candidate, grade in zip(candidates, grades, strict=True):
        document = candidate["document"]
        metadata = document.metadata
        is_kept = document.id in kept
        rows.append(
            {
                "chunk_id": str(document.id or metadata.get("chunk_id", "")),
                "source": str(metadata.get("source", "")),
                "section": str(metadata.get("section", "")),
                "dense": float(candidate["evidence"]["dense"]),
                "coverage": float(candidate["evidence"]["coverage"]),
                "grade": float(grade),
                "kept": is_kept,
                "reason": "kept"
                if is_kept
                else "below threshold"
                if grade < context.grade_threshold
                else "beyond keep_k",
            }
        )
    return {
        "query": state.query,
        "strategy": state.strategy,
        "method": method,
        "threshold": context.grade_threshold,
        "keep_k": context.keep_k,
        "candidates": rows,
    }


def hop_evidence(
    first: Sequence[Document], found: Sequence[Document]
) -> tuple[list[Document], list[str]]:
    """What the graph's hop adds to the first evidence, and the documents it found.

    `found` is what the hop's search passed for the clause the best document left open,
    in retrieval order, less the best document's own chunks (the hop is planned from that
    document alone: graph/hops.py). The other documents the first round kept were not trusted
    to answer that clause; when the hop's search reaches one of them, the clause's answer is
    already in the evidence, and a chunk it ranks lower would only add a document the clause
    does not need. So the hop adds what ranks above the first chunk of a document it already
    had, and reports that document among those it found."""
    held = {d.metadata.get("source") for d in first}
    added: list[Document] = []
    for document in found:
        if document.metadata.get("source") in held:
            return added, _sources([*added, document])
        added.append(document)
    return added, _sources(added)


def _sources(documents: Sequence[Document]) -> list[str]:
    return list(dict.fromkeys(str(d.metadata.get("source", "")) for d in documents))


class GradingNodes(ModelNodes):
    """A part's grading node (on `PartState`)."""

    def grade_documents(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Score each retrieved chunk on its own and keep those above the threshold."""
        context = Context.coerce(runtime.context)
        candidates = state.candidates
        use_model = self._part_model(context, state) is not None
        graph_hop = state.strategy == "hop" and state.search_stage == "graph"
        # The graph's hop (offline) searched for what the first evidence left open: its chunks
        # are graded against that search, not the whole question ("where do I book it, and
        # how far ahead?" is answered by the booking rule, which says nothing of on-call).
        asked = state.query if graph_hop else state.question
        grades, notice, method = self._grade(context, asked, candidates, use_model)
        notices = [notice] if notice else []
        if not use_model and self.chat_model(context) is not None:
            notices += self._budget_notice(state)
        # Grades filter; they reorder only when a model gave them. The offline grade is a
        # coarser signal than the retrieval ranking it would otherwise overrule.
        order = list(range(len(candidates)))
        if use_model:
            order = sorted(order, key=lambda i: -grades[i])
        kept = [candidates[i]["document"] for i in order if grades[i] >= context.grade_threshold][
            : context.keep_k
        ]
        if graph_hop:  # the graph's hop is for what the best document left open
            best = state.documents[0].metadata.get("source") if state.documents else None
            kept = [d for d in kept if d.metadata.get("source") != best]
        trace = _round_trace(state, context, candidates, grades, {d.id for d in kept}, method)
        hop_update: dict[str, Any] = {}
        if graph_hop:
            trace["entities"] = list(state.hop_entities)
            added, found = hop_evidence(state.documents, kept)
            hop_update = {"search_stage": "", "hop_sources": found}
            kept = [*state.documents, *added]
        elif state.strategy == "hop":  # a hop adds to what the first search found
            seen = {d.id for d in state.documents}
            kept = [*state.documents, *(d for d in kept if d.id not in seen)]
        runtime.stream_writer(
            {
                "event": "graded",
                "relevant": len(kept),
                "candidates": len(candidates),
                "method": method,
                "attempt": state.attempts + 1,
            }
        )
        attempts = state.attempts + 1
        if (
            not kept
            and attempts < context.max_retrieval_attempts
            and state.searches >= state.max_searches
        ):
            notices.append(
                f'Search budget spent: "{state.question}" was searched {state.searches} '
                "time(s) (max_searches_per_turn)."
            )
        return {
            SEARCH_CALLS: CLEAR,
            "documents": [CLEAR, *kept],
            "attempts": attempts,
            "model_calls": state.model_calls + (1 if use_model and candidates else 0),
            "notices": notices,
            "route": [f"grade_documents:{len(kept)}/{len(candidates)}"],
            "rounds": [trace],
            **hop_update,
        }

    def _grade(
        self, context: Context, question: str, candidates: Sequence[Candidate], use_model: bool
    ) -> tuple[list[float], str | None, str]:
        """Grades in [0, 1], a notice when the model's grades could not be used, and how they
        were made (a structured-output method, or "offline")."""
        if not use_model or not candidates:
            return self._offline_grades(context, question, candidates), None, "offline"
        docs = [c["document"] for c in candidates]
        try:
            result, method = self.models.structured(
                context,
                grades_for(len(candidates)),
                prompts.GRADE_PROMPT.format(question=question, sources=format_sources(docs)),
                internal_call("grade_documents", trace_metadata(context)),
            )
        except Exception as exc:  # a failed grade must not end the run: fall back to evidence
            if is_timeout(exc):
                raise  # a hung server: waiting again for the answer would not help
            return (
                self._offline_grades(context, question, candidates),
                f"Grading fell back to retrieval evidence ({type(exc).__name__}).",
                "offline",
            )
        if not result.scores or len(result.scores) != len(candidates):
            notice = "Grading fell back to retrieval evidence (malformed grades)."
            return self._offline_grades(context, question, candidates), notice, "offline"
        return [max(0.0, min(1.0, s / 10)) for s in result.scores], None, method

    @staticmethod
    def _offline_grades(
        context: Context, question: str, candidates: Sequence[Candidate]
    ) -> list[float]:
        """The offline grader's grades, made only when they are used: a model's grades need
        none, and the calibrated grader's token recall costs a forward pass per chunk."""
        return measured_offline_grades(
            candidates,
            context.offline_grader,
            question,
            context.index_dir,
            context.embeddings,
            context.grade_threshold,
        )
