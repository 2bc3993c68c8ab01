"""The answer graph: the offline default on a real index, and the LLM path with a scripted model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from footnote.graph.graph import graph as exported_graph
from footnote.graph.graph import make_graph
from footnote.graph.prompts import NOT_COVERED
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import SearchRequest, search
from tests.fakes import ScriptedChatModel, prompt_text, role_of, tool_call

SNAPSHOT = Path(__file__).parent / "snapshots" / "answer_graph.mmd"
API_KEY_QUESTION = "How often do I have to change my API key?"


def ask(graph: Any, question: str, index: Path, **context: Any) -> dict[str, Any]:
    return graph.invoke(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index), **context},
    )


def sources_in(prompt: str) -> list[str]:
    """The delimited source blocks of a grading or answer prompt, in order."""
    return re.findall(r'^<source n="\d+" origin="[^"\n]*">\n.*?\n</source>$', prompt, re.M | re.S)


def test_worked_example_offline(handbook_index: Path) -> None:
    out = ask(exported_graph, API_KEY_QUESTION, handbook_index)
    answer = out["messages"][-1].content
    assert "90 days" in answer
    assert "24-hour grace period" in answer
    assert out["citations"] and out["citations"][0]["source"] == "keys.md"
    assert out["citations"][0]["chunk_id"].startswith("keys.md#rotation")
    assert out["citations"][0]["lines"][0] >= 1
    assert "[1]" in answer
    assert out["footnote_route"][-2:] == ["generate", "verify_citations"]


def test_not_covered_offline(handbook_index: Path) -> None:
    out = ask(exported_graph, "What is the parental leave policy?", handbook_index)
    assert out["messages"][-1].content == NOT_COVERED
    assert out["citations"] == []
    assert sum(step == "call_retriever" for step in out["footnote_route"]) == 2


def test_hyde_without_a_model_is_reported(handbook_index: Path) -> None:
    out = ask(exported_graph, API_KEY_QUESTION, handbook_index, hyde=True)
    assert any("HyDE" in notice for notice in out["footnote_notices"])
    assert "90 days" in out["messages"][-1].content


def test_offline_follow_up_uses_history(handbook_index: Path) -> None:
    graph = make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "follow-up"}}
    context = {"index_dir": str(handbook_index)}
    graph.invoke(
        {"messages": [{"role": "user", "content": API_KEY_QUESTION}]}, config, context=context
    )
    out = graph.invoke(
        {"messages": [{"role": "user", "content": "and for service accounts?"}]},
        config,
        context=context,
    )
    assert out["citations"][0]["source"] == "sts.md"
    assert "STS" in out["messages"][-1].content
    assert "rewrite_query:condensed" in out["footnote_route"]


def single_question_plan(messages: list[BaseMessage]) -> AIMessage:
    """The model's plan for an ordinary question: search for it as one part."""
    question = prompt_text(messages).rsplit("Latest message: ", 1)[1].strip()
    return tool_call("TurnPlan", {"action": "search", "questions": [{"question": question}]})


def _llm_script(grades: list[int] | None = None, answer: str = "") -> ScriptedChatModel:
    def respond(messages: list[BaseMessage]) -> AIMessage:
        role = role_of(messages)
        if role == "plan":
            return single_question_plan(messages)
        if role == "agent":
            return tool_call("search_documents", {"query": "API key rotation interval"})
        if role == "grade":
            count = len(sources_in(prompt_text(messages)))
            scores = (
                grades
                if grades is not None
                else [9 if "90 days" in block else 1 for block in sources_in(prompt_text(messages))]
            )
            return tool_call("SourceGrades", {"scores": scores[:count]})
        if role in ("rewrite", "retry"):
            return AIMessage("service account credential lifetime")
        if role == "hyde":
            return AIMessage("Credentials are replaced regularly for security.")
        return AIMessage(answer)

    return ScriptedChatModel(respond=respond)


def test_llm_path_tool_call_grading_cited_answer(handbook_index: Path) -> None:
    model = _llm_script(answer="API keys are rotated every 90 days [1].")
    out = ask(make_graph(chat_model=model), API_KEY_QUESTION, handbook_index)
    assert out["messages"][-1].content == "API keys are rotated every 90 days [1]."
    assert out["citations"][0]["source"] == "keys.md"
    roles = [role_of(call) for call in model.calls]
    assert roles == ["plan", "agent", "grade", "answer"]
    assert [type(m) for m in out["messages"]] == [HumanMessage, AIMessage], (
        "the conversation holds the question and the answer, no retrieval traffic"
    )
    assert not out["messages"][-1].tool_calls
    answer_prompt = prompt_text(model.calls[-1])
    assert '<source n="1" origin="keys.md § API keys > Rotation">' in answer_prompt


def test_invalid_citation_is_removed_and_reported(handbook_index: Path) -> None:
    model = _llm_script(
        grades=[9, 8, 7, 1, 1, 1, 1, 1],
        answer=(
            "Keys rotate every 90 days [1], while service accounts use short-lived STS "
            "tokens [2][7]."
        ),
    )
    out = ask(make_graph(chat_model=model), API_KEY_QUESTION, handbook_index)
    sources = sources_in(prompt_text(model.calls[-1]))
    assert len(sources) == 3 and "STS tokens" in sources[1]
    assert (
        out["messages"][-1].content
        == "Keys rotate every 90 days [1], while service accounts use short-lived STS tokens [2]."
    )
    assert out["footnote_invalid_citations"] == [7]
    assert out["footnote_unsupported_claims"] == []
    assert [c["n"] for c in out["citations"]] == [1, 2]
    assert any("[7]" in notice for notice in out["footnote_notices"])


def test_retrieval_goes_through_the_tool_into_typed_state(handbook_index: Path) -> None:
    model = _llm_script(answer="API keys are rotated every 90 days [1].")
    graph = make_graph(chat_model=model, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "typed-state"}}
    rounds = []
    for namespace, values in graph.stream(
        {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
        config,
        context={"index_dir": str(handbook_index)},
        stream_mode="values",
        subgraphs=True,  # each part's research runs as a nested graph
    ):
        if namespace and any(isinstance(m, ToolMessage) for m in values["search_calls"]):
            rounds.append(values)  # the research graph's state right after the ToolNode ran
    assert len(rounds) == 1, "retrieval runs in the ToolNode"
    candidates = rounds[0]["candidates"]
    assert candidates and candidates[0]["document"].metadata["source"] == "keys.md"
    assert set(candidates[0]["evidence"]) == {"dense", "coverage"}
    replies = [m for m in rounds[0]["search_calls"] if isinstance(m, ToolMessage)]
    assert [type(m) for m in rounds[0]["search_calls"]] == [AIMessage, ToolMessage]
    assert len(replies[0].content) < 400, "the tool's reply names chunks; it does not quote them"

    state = graph.get_state(config).values
    assert [type(m) for m in state["messages"]] == [HumanMessage, AIMessage]
    assert "search_calls" not in state, "tool traffic is not kept in the thread"
    assert "grades" not in state


def test_a_retry_is_graded_against_the_question_not_its_query(handbook_index: Path) -> None:
    """The retry query carries words from the last candidates (pseudo-relevance feedback);
    its candidates' evidence is still measured against the question."""
    question = "What is the parental leave policy?"
    graph = make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "retry-evidence"}}
    rounds: list[tuple[str, list[Any]]] = []
    for namespace, values in graph.stream(
        {"messages": [{"role": "user", "content": question}]},
        config,
        context={"index_dir": str(handbook_index)},
        stream_mode="values",
        subgraphs=True,
    ):
        if namespace and any(isinstance(m, ToolMessage) for m in values["search_calls"]):
            rounds.append((values["query"], values["candidates"]))
    assert len(rounds) == 2 and rounds[1][0] != question, rounds
    retry_query, candidates = rounds[1]
    hits = search(SearchRequest(query=retry_query, index_dir=handbook_index, k=8))
    assert [h.chunk.id for h in hits] == [c["document"].id for c in candidates]
    retriever = get_retriever(handbook_index)
    against_question = retriever.relevance_features(question, hits)
    against_query = retriever.relevance_features(retry_query, hits)
    measured = [c["evidence"]["coverage"] for c in candidates]
    assert measured == pytest.approx([f["coverage"] for f in against_question])
    assert measured != pytest.approx([f["coverage"] for f in against_query])


@pytest.mark.parametrize("hyde", [False, True])
def test_hyde_runs_only_when_the_context_says(handbook_index: Path, hyde: bool) -> None:
    model = _llm_script(grades=[0] * 8)
    events = [
        payload
        for payload in make_graph(chat_model=model).stream(
            {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
            context={"index_dir": str(handbook_index), "hyde": hyde, "max_retrieval_attempts": 2},
            stream_mode="custom",
        )
        if payload["event"] == "retrieved"
    ]
    hyde_calls = [call for call in model.calls if role_of(call) == "hyde"]
    assert len(events) == 2, "a first attempt and a retry"
    assert len(hyde_calls) == (2 if hyde else 0), "HyDE on every attempt when on, never when off"
    assert [e["hyde"] for e in events] == [hyde, hyde], "the passage reaches the search tool"


@pytest.mark.parametrize("budget", [1, 3])
def test_always_irrelevant_grader_stops_within_budget(handbook_index: Path, budget: int) -> None:
    model = _llm_script(grades=[0] * 8, answer="should not be asked")
    out = ask(
        make_graph(chat_model=model),
        API_KEY_QUESTION,
        handbook_index,
        max_retrieval_attempts=budget,
    )
    assert out["messages"][-1].content == NOT_COVERED
    assert out["citations"] == []
    assert sum(step == "call_retriever" for step in out["footnote_route"]) == budget
    assert "answer" not in [role_of(call) for call in model.calls]


def test_malformed_grades_fall_back_to_evidence(handbook_index: Path) -> None:
    def respond(messages: list[BaseMessage]) -> AIMessage:
        role = role_of(messages)
        if role == "agent":
            return tool_call("search_documents", {"query": API_KEY_QUESTION})
        if role == "grade":
            return tool_call("SourceGrades", {"scores": "ten out of ten"})
        return AIMessage("Every 90 days [1].")

    out = ask(
        make_graph(chat_model=ScriptedChatModel(respond=respond)), API_KEY_QUESTION, handbook_index
    )
    assert out["messages"][-1].content == "Every 90 days [1]."
    assert out["citations"][0]["source"] == "keys.md"


def test_llm_follow_up_is_rewritten_with_history(handbook_index: Path) -> None:
    model = _llm_script(answer="See the sources [1].")
    graph = make_graph(chat_model=model, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "llm-follow-up"}}
    context = {"index_dir": str(handbook_index)}
    graph.invoke(
        {"messages": [{"role": "user", "content": API_KEY_QUESTION}]}, config, context=context
    )
    model.calls.clear()
    out = graph.invoke(
        {"messages": [{"role": "user", "content": "and for service accounts?"}]},
        config,
        context=context,
    )
    rewrite = [call for call in model.calls if role_of(call) == "rewrite"]
    assert rewrite, "a follow-up is rewritten by the model"
    assert API_KEY_QUESTION in prompt_text(rewrite[0])
    assert "and for service accounts?" in prompt_text(rewrite[0])
    agent = [call for call in model.calls if role_of(call) == "agent"]
    assert "service account credential lifetime" in prompt_text(agent[0])
    assert out["footnote_route"][0] == "new_question"
    assert out["footnote_route"].count("call_retriever") == 1


def test_internal_llm_calls_do_not_stream(handbook_index: Path) -> None:
    model = _llm_script(answer="API keys are rotated every 90 days [1].")
    graph = make_graph(chat_model=model)
    streamed: list[tuple[str, Any]] = []
    events = []
    for mode, payload in graph.stream(
        {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
        context={"index_dir": str(handbook_index)},
        stream_mode=["messages", "custom"],
    ):
        if mode == "messages":
            streamed.append((payload[1]["langgraph_node"], payload[0]))
        else:
            events.append(payload["event"])
    nodes = {node for node, _ in streamed}
    assert "generate" in nodes
    assert not nodes & {"grade_documents", "rewrite_query"}, "internal calls must not stream"
    assert not nodes & {"call_retriever", "tools"}, "tool traffic is internal: it never streams"
    assert all(not m.tool_calls and not isinstance(m, ToolMessage) for _, m in streamed)
    assert events[:4] == ["planned", "rewriting", "retrieved", "graded"]


def test_graph_shape_snapshot() -> None:
    """The turn's wiring, then each part's research (a nested graph without a checkpointer
    of its own, so the turn's drawing shows it as one node)."""
    from footnote.graph.graph import make_research_graph

    research = make_research_graph(None)
    mermaid = exported_graph.get_graph().draw_mermaid() + research.get_graph().draw_mermaid()
    assert mermaid == SNAPSHOT.read_text(encoding="utf-8"), (
        f"the graph's wiring changed: review it and update {SNAPSHOT} if intended"
    )
