"""Wiring of the answer graph; the nodes live in graph/nodes/, one module per step.

The turn:      new_question -> plan_turn -> reply -> END                 (no search needed)
                                        -> global_answer -> verify_citations -> END
                                           (the whole corpus: map-reduce over communities)
                                        -> research x N (Send, parallel) -> generate
                                           -> verify_citations -> END
One part's research (the `research` node runs it once per part):
               rewrite_query -> call_retriever -> tools -> grade_documents
                   -> END (enough evidence)   -> plan_hop -> tools | END (multi-hop, model)
                   -> rewrite_query (weak evidence, attempts and searches left)
                   -> web_search -> END (budget spent, web search on)
"""

from __future__ import annotations

from typing import cast

from langchain_core.language_models import BaseChatModel
from langgraph.constants import TAG_HIDDEN
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.pregel.protocol import PregelProtocol
from langgraph.types import Checkpointer

from footnote.graph.context import Context
from footnote.graph.nodes.answer import AnswerNodes
from footnote.graph.nodes.grading import GradingNodes
from footnote.graph.nodes.hop import HopNodes
from footnote.graph.nodes.research import ResearchNodes
from footnote.graph.nodes.routes import route_after_grading, route_after_hop, route_after_planning
from footnote.graph.nodes.turn import TurnNodes
from footnote.graph.search_tool import SEARCH_CALLS, search_documents
from footnote.graph.state import InputState, OutputState, PartState, State

INTERNAL_NODES = ("call_retriever", "tools", "plan_hop")
"""Research steps whose outputs are tool traffic (tool-call messages, the tool's replies).
Their tasks carry LangGraph's hidden tag, which `stream_mode="messages"` honours, so a parent
streaming with `subgraphs=True` sees the answer and nothing else. Their `updates` are hidden
too; the research graph's `values` still show them."""


def make_research_graph(
    chat_model: BaseChatModel | None = None,
) -> CompiledStateGraph[PartState, Context]:
    """One part's search, grading and retries; its own state, so parts run side by side."""
    search, grading, hop = ResearchNodes(chat_model), GradingNodes(chat_model), HopNodes(chat_model)
    builder = StateGraph(PartState, context_schema=Context)
    builder.add_node("rewrite_query", search.rewrite_query)
    builder.add_node("call_retriever", search.call_retriever)
    builder.add_node("tools", ToolNode([search_documents], messages_key=SEARCH_CALLS))
    builder.add_node("grade_documents", grading.grade_documents)
    builder.add_node("plan_hop", hop.plan_hop)
    builder.add_node("web_search", search.web_search)

    builder.add_edge(START, "rewrite_query")
    builder.add_edge("rewrite_query", "call_retriever")
    builder.add_edge("call_retriever", "tools")
    builder.add_edge("tools", "grade_documents")
    builder.add_conditional_edges("grade_documents", route_after_grading)
    builder.add_conditional_edges("plan_hop", route_after_hop)
    builder.add_edge("web_search", END)
    # No checkpointer of its own: a part runs inside one step of the parent, and a sync
    # nested run on an async saver (the production server's) would block its event loop.
    research = builder.compile(name="footnote_research", checkpointer=False)
    for name in INTERNAL_NODES:
        research.nodes[name].tags = [*(research.nodes[name].tags or []), TAG_HIDDEN]
    return research


def make_graph(
    *,
    chat_model: BaseChatModel | None = None,
    checkpointer: Checkpointer = None,
    name: str = "footnote",
) -> CompiledStateGraph[State, Context, InputState, OutputState]:
    """Build the answer graph; pass a checkpointer for conversations, a model to fix one."""
    turn, answer = TurnNodes(chat_model), AnswerNodes(chat_model)
    builder = StateGraph(
        State, context_schema=Context, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("new_question", turn.new_question)
    builder.add_node("plan_turn", turn.plan_turn)
    builder.add_node("reply", turn.reply)
    research = make_research_graph(chat_model)
    builder.add_node("research", turn.research_node(research))
    builder.add_node("generate", answer.generate)
    builder.add_node("global_answer", turn.global_answer)
    builder.add_node("verify_citations", answer.verify_citations)

    builder.add_edge(START, "new_question")
    builder.add_edge("new_question", "plan_turn")
    builder.add_conditional_edges(
        "plan_turn", route_after_planning, ["reply", "research", "generate", "global_answer"]
    )
    builder.add_edge("global_answer", "verify_citations")
    builder.add_edge("reply", END)
    builder.add_edge("research", "generate")
    builder.add_edge("generate", "verify_citations")
    builder.add_edge("verify_citations", END)
    compiled = builder.compile(checkpointer=checkpointer, name=name)
    # The node runs the research graph nested, once per part; having no checkpointer of its
    # own, LangGraph does not find it there by itself. Named, it is drawn inside `research`
    # by get_graph(xray=True) and in Studio, so the loop can be watched.
    compiled.nodes["research"].subgraphs = [cast(PregelProtocol, research)]
    return compiled


graph = make_graph()
"""The compiled graph served by `langgraph dev` (id `footnote` in langgraph.json)."""
