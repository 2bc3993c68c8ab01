"""One part's search: the query it asks (HyDE with a model, the question offline), the
call to the retrieval tool, and the web search when the budget is spent.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, SystemMessage
from langgraph.runtime import Runtime

from footnote.graph import offline, prompts
from footnote.graph.context import Context
from footnote.graph.nodes.base import ModelNodes
from footnote.graph.nodes.messages import internal_call, trace_metadata
from footnote.graph.search_tool import search_documents
from footnote.graph.state import (
    CLEAR,
    PartState,
)
from footnote.tools.web import WebSearchError, search_web, web_search_available


def search_call(query: str, fallback: str = "") -> AIMessage:
    """A search_documents call made by the graph itself; `fallback` says why, for the trace."""
    return AIMessage(
        content="",
        tool_calls=[
            {
                "name": search_documents.name,
                "args": {"query": query},
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "tool_call",
            }
        ],
        response_metadata={"footnote_fallback_search": fallback} if fallback else {},
    )


def usable_query(args: Any) -> bool:
    """A search call's arguments name a query with at least one word in it."""
    query = args.get("query") if isinstance(args, dict) else None
    return isinstance(query, str) and any(ch.isalnum() for ch in query)


class ResearchNodes(ModelNodes):
    """A part's search nodes (on `PartState`)."""

    def rewrite_query(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Write the search query for this attempt: the part's question first, a different
        query on a retry."""
        context = Context.coerce(runtime.context)
        model = self._part_model(context, state)
        notices: list[str] = []
        calls = 0
        hyde = ""
        if state.attempts == 0:
            query, strategy = state.first_query or state.question, state.first_strategy
        elif model is not None:
            query = self._ask(
                model,
                prompts.RETRY_PROMPT.format(query=state.query, question=state.question),
                "rewrite_query",
            )
            strategy, calls = "llm_retry", 1
        else:
            if self.chat_model(context) is not None:
                notices += self._budget_notice(state)
            query, strategy = offline.retry_query(state.query, state.candidates), "prf"
        if context.hyde:
            if self.chat_model(context) is None:
                if state.attempts == 0:
                    notices.append("HyDE needs a chat model; it is unavailable offline.")
            elif state.model_calls + calls < state.max_model_calls:
                hyde = self._ask(
                    model or self.models.get(context),  # type: ignore[arg-type]
                    prompts.HYDE_PROMPT.format(question=state.question),
                    "hyde",
                )
                strategy, calls = strategy + "+hyde", calls + 1
        query = query.strip().strip('"') or state.question
        runtime.stream_writer(
            {
                "event": "rewriting",
                "attempt": state.attempts + 1,
                "query": query,
                "strategy": strategy,
            }
        )
        return {
            "query": query,
            "standalone_question": state.question,
            "hyde_passage": hyde,
            "strategy": strategy,
            "model_calls": state.model_calls + calls,
            "notices": notices,
            "route": [f"rewrite_query:{strategy}"],
        }

    def call_retriever(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """The agent step: a model chooses its search calls; offline, one call with the query.

        The graph only gets here when it must search, so the model is asked for the tool by
        name where it accepts that. A model that still makes no call gets the same fallback
        search as the offline path, and the route, a notice and the trace say so.
        """
        context = Context.coerce(runtime.context)
        if self._part_model(context, state) is None:
            update = self._search_update(state, search_call(state.query), "call_retriever")
            if self.chat_model(context) is not None:
                update["notices"] = self._budget_notice(state)
            return update
        prompt = prompts.AGENT_PROMPT.format(question=state.standalone_question, query=state.query)
        response, how = self.models.call_tool(
            context,
            search_documents,
            [SystemMessage(prompt)],
            internal_call("call_retriever", trace_metadata(context, state)),
        )
        calls = state.model_calls + 1
        if isinstance(response, AIMessage) and response.tool_calls:
            if all(usable_query(call.get("args", {})) for call in response.tool_calls):
                # The part's search budget bounds the calls one reply may make.
                allowed = max(1, state.max_searches - state.searches)
                if len(response.tool_calls) > allowed:
                    response = response.model_copy(
                        update={"tool_calls": response.tool_calls[:allowed]}
                    )
                return {**self._search_update(state, response, "call_retriever"),
                        "model_calls": calls}  # fmt: skip
            # A forced call from a small model can carry an empty or non-text query.
            return {**self._fallback_search(
                state, runtime, "model's search call had no usable query",
                "The model's search call had no usable query",
            ), "model_calls": calls}  # fmt: skip
        asked = {
            "named": "asked for it by name",
            "offered": "offered the tool",
            "refused": "the server refuses tools",
        }[how]
        return {**self._fallback_search(
            state, runtime, f"model made no tool call ({asked})",
            f"The model made no search call ({asked})",
        ), "model_calls": calls}  # fmt: skip

    def _fallback_search(
        self, state: PartState, runtime: Runtime[Context], why: str, told: str
    ) -> dict[str, Any]:
        """The graph's own search with the rewritten query; `why` goes to the trace, `told`
        opens the notice."""
        runtime.stream_writer({"event": "fallback_search", "query": state.query})
        update = self._search_update(
            state, search_call(state.query, fallback=why), "call_retriever:fallback_search"
        )
        update["notices"] = [f"{told}; Footnote searched with the rewritten query itself."]
        return update

    def web_search(self, state: PartState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Last resort when the index cannot answer: Tavily results as labelled web sources."""
        context = Context.coerce(runtime.context)
        reason = web_search_available()
        if reason:
            return {"notices": [reason], "route": ["web_search:off"]}
        runtime.stream_writer({"event": "web_search", "query": state.query})
        try:
            docs = search_web(state.question, max_results=context.keep_k)
        except WebSearchError as exc:
            return {"notices": [str(exc)], "route": ["web_search:failed"]}
        return {"documents": [CLEAR, *docs], "route": [f"web_search:{len(docs)}"]}
