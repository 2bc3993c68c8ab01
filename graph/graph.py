"""Wiring of the answer graph; the nodes live in nodes.py.

new_question -> rewrite_query -> call_retriever -> tools -> grade_documents
    -> generate -> verify_citations -> END
    -> rewrite_query (weak evidence, attempts left)
    -> web_search -> generate (budget spent, web search on)
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Checkpointer

from footnote.graph.context import Context
from footnote.graph.nodes import AnswerNodes, route_after_grading
from footnote.graph.state import InputState, OutputState, State
from footnote.graph.tools import SEARCH_CALLS, search_documents


def make_graph(
    *,
    chat_model: BaseChatModel | None = None,
    checkpointer: Checkpointer = None,
    name: str = "footnote",
) -> CompiledStateGraph[State, Context, InputState, OutputState]:
    """Build the answer graph; pass a checkpointer for conversations, a model to fix one."""
    nodes = AnswerNodes(chat_model)
    builder = StateGraph(
        State, context_schema=Context, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("new_question", nodes.new_question)
    builder.add_node("rewrite_query", nodes.rewrite_query)
    builder.add_node("call_retriever", nodes.call_retriever)
    builder.add_node("tools", ToolNode([search_documents], messages_key=SEARCH_CALLS))
    builder.add_node("grade_documents", nodes.grade_documents)
    builder.add_node("web_search", nodes.web_search)
    builder.add_node("generate", nodes.generate)
    builder.add_node("verify_citations", nodes.verify_citations)

    builder.add_edge(START, "new_question")
    builder.add_edge("new_question", "rewrite_query")
    builder.add_edge("rewrite_query", "call_retriever")
    builder.add_edge("call_retriever", "tools")
    builder.add_edge("tools", "grade_documents")
    builder.add_conditional_edges("grade_documents", route_after_grading)
    builder.add_edge("web_search", "generate")
    builder.add_edge("generate", "verify_citations")
    builder.add_edge("verify_citations", END)
    return builder.compile(checkpointer=checkpointer, name=name)


graph = make_graph()
"""The compiled graph served by `langgraph dev` (id `footnote` in langgraph.json)."""
