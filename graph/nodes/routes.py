"""Where the graph goes after planning, grading and a hop: the edges' decisions, apart
from the nodes so the picture reads from graph.py.
"""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from langgraph.types import Send

from footnote.graph.context import Context
from footnote.graph.state import (
    PartState,
    State,
)


def route_after_planning(
    state: State,
) -> list[Send] | Literal["reply", "generate", "global_answer"]:
    """No search needed: reply. A question about the whole corpus: the global route.
    Otherwise research every part that has searches left, in parallel; a plan with none
    left goes straight to the (uncovered) answer."""
    if state.turn in ("reply", "clarify"):
        return "reply"
    if state.turn == "global":
        return "global_answer"
    sends = [
        Send(
            "research",
            {
                "index": part["index"],
                "of": len(state.plan),
                "question": part["question"],
                "standalone_question": part["question"],
                "first_query": part["research"],
                "first_strategy": part["strategy"],
                "hops": part["hops"],
                "max_searches": part["max_searches"],
                "max_model_calls": part["max_model_calls"],
            },
        )
        for part in state.plan
        if part["max_searches"] > 0
    ]
    return sends or "generate"


def route_after_grading(
    state: PartState, runtime: Runtime[Context]
) -> Literal["plan_hop", "rewrite_query", "web_search", "__end__"]:
    """Enough evidence: done, or one more hop when the plan allows it. Too little: look again
    while both budgets last (rounds per part, the part's share of searches), then the web."""
    context = Context.coerce(runtime.context)
    if state.documents:
        return "plan_hop" if state.hops > 0 and state.searches < state.max_searches else "__end__"
    if state.attempts < max(1, context.max_retrieval_attempts) and (
        state.searches < state.max_searches
    ):
        return "rewrite_query"
    if context.web_search:
        return "web_search"
    return "__end__"


def route_after_hop(state: PartState) -> Literal["tools", "__end__"]:
    """A hop that made a search call goes to the tool; otherwise the part is done."""
    calls = state.search_calls
    made_call = bool(calls) and isinstance(calls[-1], AIMessage) and bool(calls[-1].tool_calls)
    return "tools" if made_call else "__end__"
