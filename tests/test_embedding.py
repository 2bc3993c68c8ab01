"""Footnote inside another application: as a subgraph node, as a tool, with the host's context."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel
from typing_extensions import TypedDict

from footnote.graph.agent_tool import answer_tool
from footnote.graph.context import Context
from footnote.graph.graph import make_graph
from tests.fakes import tool_call

API_KEY_QUESTION = "How often do I have to change my API key?"
ON_CALL_QUESTION = "How do I acknowledge a page when on call?"


class ParentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@dataclass
class HostContext:
    """A host application's own context: some fields Footnote knows, some it does not."""

    tenant: str
    index_dir: str
    user_groups: list[str] = field(default_factory=lambda: ["everyone"])
    temperature: float = 0.2


@dataclass(kw_only=True)
class HostState:
    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    citations: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0


def count_turn(state: HostState) -> dict[str, Any]:
    return {"turns": state.turns + 1}


def test_compiled_graph_as_subgraph_node(handbook_index: Path) -> None:
    parent = StateGraph(ParentState)
    parent.add_node("footnote", make_graph())
    parent.add_edge(START, "footnote")
    out = parent.compile().invoke(
        {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
        context={"index_dir": str(handbook_index)},
    )
    assert "90 days" in out["messages"][-1].content


def test_parent_with_its_own_context_and_state_gains_one_answer_per_question(
    handbook_index: Path,
) -> None:
    parent = StateGraph(HostState, context_schema=HostContext)
    parent.add_node("count_turn", count_turn)
    parent.add_node("footnote", make_graph())
    parent.add_edge(START, "count_turn")
    parent.add_edge("count_turn", "footnote")
    app = parent.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "host"}}
    host = HostContext(
        tenant="acme", index_dir=str(handbook_index), user_groups=["everyone", "engineering"]
    )

    first = app.invoke({"messages": [HumanMessage(API_KEY_QUESTION)]}, config, context=host)
    assert [type(m) for m in first["messages"]] == [HumanMessage, AIMessage]
    assert "90 days" in first["messages"][-1].content
    assert first["citations"][0]["source"] == "keys.md", "citations reach a parent declaring them"

    second = app.invoke({"messages": [HumanMessage(ON_CALL_QUESTION)]}, config, context=host)
    assert [type(m) for m in second["messages"]] == [HumanMessage, AIMessage] * 2
    assert not any(m.tool_calls for m in second["messages"] if isinstance(m, AIMessage))
    assert second["citations"][0]["source"] == "oncall.md", "the host's groups were read"
    assert second["turns"] == 2
    assert set(second) == {"messages", "citations", "turns"}


class HostSettings(BaseModel):
    index_dir: str
    user_groups: list[str]
    region: str = "eu"


@pytest.mark.parametrize(
    "given",
    [
        {"index_dir": "/x", "user_groups": ["hr"], "unknown": 1},
        HostContext(tenant="acme", index_dir="/x", user_groups=["hr"]),
        HostSettings(index_dir="/x", user_groups=["hr"]),
    ],
    ids=["dict", "dataclass", "pydantic"],
)
def test_context_is_read_from_any_host_object(given: Any) -> None:
    context = Context.coerce(given)
    assert (context.index_dir, context.user_groups) == ("/x", ["hr"])
    assert context.retrieve_k == Context().retrieve_k, "unknown to the host: Footnote's default"


def test_graph_wrapped_as_tool_for_another_agent(handbook_index: Path) -> None:
    handbook = answer_tool(make_graph(), context={"index_dir": str(handbook_index)})

    @tool
    def unrelated(text: str) -> str:
        """Echo text."""
        return text

    def agent(state: ParentState) -> dict[str, Any]:
        return {"messages": [tool_call(handbook.name, {"question": API_KEY_QUESTION}, "c1")]}

    outer = StateGraph(ParentState)
    outer.add_node("agent", agent)
    outer.add_node("tools", ToolNode([handbook, unrelated]))
    outer.add_edge(START, "agent")
    outer.add_edge("agent", "tools")
    result = outer.compile().invoke({"messages": [{"role": "user", "content": "hi"}]})
    reply = result["messages"][-1]
    assert isinstance(reply, ToolMessage)
    assert "90 days" in reply.content
    assert "keys.md" in reply.content
    assert reply.artifact["answer"] in reply.content
    assert reply.artifact["citations"][0]["source"] == "keys.md"
    assert reply.artifact["citations"][0]["chunk_id"].startswith("keys.md#rotation")


@dataclass
class AgentContext:
    user_groups: list[str]


def test_answer_tool_reads_the_callers_groups_at_call_time(handbook_index: Path) -> None:
    """One tool instance; each request's groups come from the calling agent's runtime."""
    handbook = answer_tool(context={"index_dir": str(handbook_index)})
    assert set(handbook.tool_call_schema.model_json_schema()["properties"]) == {"question"}

    def agent(state: ParentState) -> dict[str, Any]:
        return {"messages": [tool_call(handbook.name, {"question": ON_CALL_QUESTION}, "c1")]}

    outer = StateGraph(ParentState, context_schema=AgentContext)
    outer.add_node("agent", agent)
    outer.add_node("tools", ToolNode([handbook]))
    outer.add_edge(START, "agent")
    outer.add_edge("agent", "tools")
    app = outer.compile()
    request = {"messages": [HumanMessage("hi")]}

    engineer = app.invoke(request, context=AgentContext(user_groups=["engineering"]))
    sources = [c["source"] for c in engineer["messages"][-1].artifact["citations"]]
    assert sources and sources[0] == "oncall.md"
    everyone = app.invoke(request, context=AgentContext(user_groups=["everyone"]))
    assert "oncall.md" not in [c["source"] for c in everyone["messages"][-1].artifact["citations"]]
