"""Footnote as a host project sees it: run by tests/test_external_host.py as `test_host.py`
inside a fresh virtual environment outside the checkout, with Footnote installed from its
wheel. LangChain's own standard suites for the retriever, the embeddings and the tool, then
the tool inside `create_agent` and the graph inside a parent graph.

Everything here imports `footnote` as a host would; nothing from the checkout's tests.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_tests.integration_tests import (
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
    ToolsIntegrationTests,
)
from langchain_tests.unit_tests import EmbeddingsUnitTests, ToolsUnitTests
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

import footnote
from footnote import FootnoteRetriever, MiniLMEmbeddings, answer_tool, make_graph

INDEX = os.environ["FOOTNOTE_HOST_INDEX"]
QUESTION = "How often do I have to change my API key?"
ON_CALL = "How do I acknowledge a page when on call?"


def test_footnote_comes_from_the_installed_wheel() -> None:
    assert Path(footnote.__file__).resolve().is_relative_to(Path(os.environ["FOOTNOTE_HOST_SITE"]))
    assert (Path(footnote.__file__).parent / "py.typed").is_file()


class TestEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


class TestEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


class TestRetriever(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[FootnoteRetriever]:
        return FootnoteRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": INDEX, "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION


class _AnswerTool:
    @property
    def tool_constructor(self) -> Any:
        return answer_tool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"context": {"index_dir": INDEX}}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"question": QUESTION}


class TestAnswerToolUnit(_AnswerTool, ToolsUnitTests):
    pass


class TestAnswerToolIntegration(_AnswerTool, ToolsIntegrationTests):
    pass


class FakeToolCallingModel(BaseChatModel):
    """Calls the documents tool once, then answers with what it returned."""

    tool_name: str

    @property
    def _llm_type(self) -> str:
        return "fake-tool-calling"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeToolCallingModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(f"The documents say: {last.content}")
        else:
            call = {"name": self.tool_name, "args": {"question": last.content}, "id": "c1"}
            reply = AIMessage("", tool_calls=[{**call, "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@dataclass
class AgentContext:
    user_groups: list[str]


def test_answer_tool_in_create_agent() -> None:
    from langchain.agents import create_agent

    ask = answer_tool(context={"index_dir": INDEX})
    agent = create_agent(
        FakeToolCallingModel(tool_name=ask.name), tools=[ask], context_schema=AgentContext
    )
    out = agent.invoke(
        {"messages": [HumanMessage(ON_CALL)]}, context=AgentContext(user_groups=["engineering"])
    )
    reply = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert reply.status == "success"
    assert reply.artifact["citations"][0]["source"] == "oncall.md"
    assert out["messages"][-1].content.startswith("The documents say:")


class ParentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    citations: list[dict[str, Any]]


def test_subgraph_contract() -> None:
    """The answer graph as a node of a host's graph: the host gets the answer and the
    citations in its own keys."""
    parent = StateGraph(ParentState)
    parent.add_node("footnote", make_graph())
    parent.add_edge(START, "footnote")
    out = parent.compile().invoke(
        {"messages": [HumanMessage(QUESTION)], "citations": []}, context={"index_dir": INDEX}
    )
    assert "90 days" in out["messages"][-1].content
    assert out["citations"][0]["source"] == "keys.md"


class CollidingState(TypedDict):
    """A host whose own keys share names with Footnote's internal state."""

    messages: Annotated[list[AnyMessage], add_messages]
    citations: list[dict[str, Any]]
    route: str
    notices: str
    invalid_citations: str
    unsupported_claims: str
    searches: str


HOST_KEYS = {
    "route": "host-route",
    "notices": "host-notices",
    "invalid_citations": "host-invalid",
    "unsupported_claims": "host-unsupported",
    "searches": "host-searches",
}


def _colliding_parent() -> Any:
    parent = StateGraph(CollidingState)
    parent.add_node("footnote", make_graph())
    parent.add_edge(START, "footnote")
    return parent.compile()


def test_subgraph_keeps_the_hosts_colliding_keys() -> None:
    """Only `messages`, `citations` (and `parts`) are shared: a host's `route`, `notices`
    and the rest keep their values and types, and the host gets one AI message."""
    out = _colliding_parent().invoke(
        {"messages": [HumanMessage(QUESTION)], "citations": [], **HOST_KEYS},
        context={"index_dir": INDEX},
    )
    assert {key: out[key] for key in HOST_KEYS} == HOST_KEYS
    assert [m.type for m in out["messages"]] == ["human", "ai"]
    assert out["citations"][0]["source"] == "keys.md"


def test_streaming_with_subgraphs_shows_only_the_answer() -> None:
    """`stream_mode="messages"` with `subgraphs=True`: the search tool's call and result
    stay inside Footnote; the host sees the answer and nothing else."""
    streamed = [
        message
        for _namespace, (message, _meta) in _colliding_parent().stream(
            {"messages": [HumanMessage(QUESTION)], "citations": [], **HOST_KEYS},
            context={"index_dir": INDEX},
            stream_mode="messages",
            subgraphs=True,
        )
    ]
    assert streamed, "the answer streams"
    assert not [m for m in streamed if isinstance(m, ToolMessage) or getattr(m, "tool_calls", [])]
    assert all(isinstance(m, AIMessage) for m in streamed)
    assert "90 days" in "".join(str(m.content) for m in streamed)


@pytest.fixture(autouse=True)
def _no_network_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
