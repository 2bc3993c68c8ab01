"""Multi-hop: after grading, what a part still needs and the search that looks for it (a
model's plan, or the entity graph's walk offline).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, SystemMessage
from langgraph.runtime import Runtime

from footnote.graph import hops, prompts
from footnote.graph.citations import format_sources
from footnote.graph.context import Context
from footnote.graph.nodes.base import ModelNodes
from footnote.graph.nodes.messages import internal_call, trace_metadata
from footnote.graph.nodes.research import search_call, usable_query
from footnote.graph.search_tool import run_caller, search_documents
from footnote.graph.state import (
    PartState,
)
from footnote.tools.retrieval import get_retriever


class HopNodes(ModelNodes):
    """A part's hop node (on `PartState`)."""

    def plan_hop(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Multi-hop: shown the evidence so far and the documents the entity graph links it
        to, the model may search once more for what it names ("the team that owns billing"
        -> that team's approver). Offline, the graph plans the hop (graph/hops.py)."""
        context = Context.coerce(runtime.context)
        model = self._part_model(context, state)
        if model is None:
            return self._graph_hop(context, state, runtime)
        linked = self._hop_plan(context, state)
        prompt = prompts.HOP_PROMPT.format(
            question=state.question, sources=format_sources(state.documents)
        )
        if linked is not None and linked.entities:
            prompt += prompts.HOP_NEIGHBOURS.format(entities="; ".join(linked.entities))
        response = model.bind_tools([search_documents]).invoke(
            [SystemMessage(prompt)], config=internal_call("plan_hop", trace_metadata(context))
        )
        update: dict[str, Any] = {"hops": state.hops - 1, "model_calls": state.model_calls + 1}
        if (
            isinstance(response, AIMessage)
            and response.tool_calls
            and all(usable_query(call.get("args", {})) for call in response.tool_calls)
        ):
            response = response.model_copy(update={"tool_calls": response.tool_calls[:1]})
            query = response.tool_calls[0]["args"]["query"]
            runtime.stream_writer({"event": "rewriting", "query": query, "strategy": "hop",
                                   "attempt": state.attempts + 1})  # fmt: skip
            update.update(self._search_update(state, response, "plan_hop:search"))
            update["strategy"] = "hop"
            update["query"] = query
            return update
        update["route"] = ["plan_hop:done"]
        return update

    @staticmethod
    def _hop_plan(context: Context, state: PartState) -> hops.HopPlan | None:
        """The graph's hop from the part's evidence, for this run's caller."""
        retriever = get_retriever(context.index_dir, context.embeddings)
        return hops.plan_hop(retriever, run_caller(context), state.question, state.documents)

    def _graph_hop(
        self, context: Context, state: PartState, runtime: Runtime[Context]
    ) -> dict[str, Any]:
        """The offline hop: one more search, through the graph stage, for the bridge entities
        the first evidence (or the question) names and what it left open; within the part's
        rounds and searches."""
        if state.attempts >= context.max_retrieval_attempts or state.searches >= state.max_searches:
            return {"hops": 0, "route": ["plan_hop:budget"]}
        plan = self._hop_plan(context, state)
        if plan is None:
            return {"hops": 0, "route": ["plan_hop:done"]}
        runtime.stream_writer(
            {"event": "rewriting", "query": plan.query, "strategy": "hop",
             "attempt": state.attempts + 1, "entities": plan.entities}
        )  # fmt: skip
        return {
            **self._search_update(state, search_call(plan.query), "plan_hop:graph"),
            "hops": state.hops - 1,
            "strategy": "hop",
            "query": plan.query,
            "standalone_question": plan.query,  # the hop's chunks answer the hop's query
            "search_stage": "graph",
            "hop_entities": plan.entities,
            "hop_query": plan.query,
            "first_evidence": len(state.documents),
        }
