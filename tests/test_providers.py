"""The LLM path through a real provider client: langchain-openai against a loopback stub."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI

from footnote.graph.grader import offline_grades
from footnote.graph.graph import make_graph
from footnote.graph.nodes.schemas import SourceGrades
from tests.stub_openai import (
    Reply,
    StubOpenAI,
    hang,
    malformed,
    prompt_of,
    rate_limited,
    server_error,
    structured,
    text,
    tool_call,
    tool_names,
)

QUESTION = "How often are API keys rotated?"
ANSWER = "API keys are rotated every 90 days [1]."


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubOpenAI]:
    """A started stub, a dummy key for the client, and nothing that could reach a network."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-not-a-real-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with StubOpenAI() as server:
        yield server


def llm_context(stub: StubOpenAI, index: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "model": "openai:stub-model",
        "model_base_url": stub.base_url,
        "model_timeout_s": 10.0,
        "model_max_retries": 0,
        "index_dir": str(index),
        "planner": "rules",  # these scripts cover the search, grading and answer calls
        **overrides,
    }


def request(question: str = QUESTION) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": question}]}


def final_state(graph: Any, context: dict[str, Any], question: str = QUESTION) -> dict[str, Any]:
    """The whole state after the run (notices included), as the CLI reads it, plus the last
    candidates its (single) part's research graded."""
    final: dict[str, Any] = {}
    candidates: list[Any] = []
    for namespace, values in graph.stream(
        request(question), context=context, stream_mode="values", subgraphs=True
    ):
        if namespace:
            candidates = values.get("candidates", candidates)
        else:
            final = values
    return {**final, "candidates": candidates}


def numbered_sources(body: dict[str, Any]) -> list[str]:
    """The delimited <source> blocks of a grading or answer prompt, in order."""
    return re.findall(
        r'^<source n="\d+" origin="[^"\n]*">\n.*?\n</source>$', prompt_of(body), re.M | re.S
    )


def grade_where(predicate: Any) -> Any:
    """A scripted grader: 9 for each source the predicate accepts, 1 for the others."""

    def respond(body: dict[str, Any]) -> Reply:
        return structured({"scores": [9 if predicate(s) else 1 for s in numbered_sources(body)]})

    return respond


def happy_path() -> list[Any]:
    """Agent tool call, structured grades that keep the rotation chunk, a cited answer."""
    return [
        tool_call("search_documents", {"query": "API key rotation"}),
        grade_where(lambda source: "90 days" in source),
        text(ANSWER),
    ]


def test_real_client_drives_the_whole_graph(stub: StubOpenAI, handbook_index: Path) -> None:
    stub.script(*happy_path())
    final = final_state(make_graph(), llm_context(stub, handbook_index))

    assert final["messages"][-1].content == ANSWER
    assert final["citations"][0]["source"] == "keys.md"
    assert final["citations"][0]["chunk_id"].startswith("keys.md#rotation")
    assert final["footnote_route"][:4] == [
        "new_question",
        "plan_turn:search:1",
        "rewrite_query:as_asked",
        "call_retriever",
    ]
    assert final["footnote_route"][4].startswith("grade_documents:1/")
    assert final["footnote_route"][5:] == ["generate", "verify_citations"]
    assert not any(isinstance(m, AIMessage) and m.tool_calls for m in final["messages"]), (
        "the agent step's tool call stays out of the conversation"
    )
    assert "search_calls" not in final, "tool traffic never reaches the turn's state"
    assert final["candidates"][0]["document"].metadata["source"] == "keys.md"

    agent, grader, answer = stub.chat_requests
    assert stub.pending == 0
    assert all(body["model"] == "stub-model" for body in stub.chat_requests)
    assert tool_names(agent) == ["search_documents"]
    parameters = agent["tools"][0]["function"]["parameters"]
    assert list(parameters["properties"]) == ["query"], "the tool runtime leaked into the schema"
    assert grader["response_format"]["type"] == "json_schema"
    assert grader["response_format"]["json_schema"]["name"] == SourceGrades.__name__
    assert answer["messages"][0]["role"] == "system"
    assert '<source n="1" origin="keys.md' in prompt_of(answer)
    assert stub.requests[0].headers["authorization"] == "Bearer sk-stub-not-a-real-key"


def test_a_streamed_run_shows_only_the_checked_answer(
    stub: StubOpenAI, handbook_index: Path
) -> None:
    """The draft is checked sentence by sentence before anyone sees it (graph/grounding.py):
    its tokens are not passed on, and the answer node streams the checked message once."""
    stub.script(*happy_path())
    graph = make_graph()
    streamed, final = [], {}
    for mode, payload in graph.stream(
        request(),
        context=llm_context(stub, handbook_index),
        stream_mode=["messages", "values"],
    ):
        if mode == "values":
            final = payload
        elif payload[1]["langgraph_node"] == "generate":
            streamed.append(payload[0])

    assert stub.chat_requests
    assert not [m for m in streamed if isinstance(m, AIMessageChunk)], "the draft streamed"
    assert [m.content for m in streamed] == [ANSWER]
    assert final["messages"][-1].content == ANSWER
    assert final["citations"][0]["source"] == "keys.md"


def test_retries_rate_limit_and_server_error(stub: StubOpenAI, handbook_index: Path) -> None:
    stub.script(rate_limited(retry_after_ms=10), server_error(retry_after_ms=10), *happy_path())
    started = time.monotonic()
    final = final_state(make_graph(), llm_context(stub, handbook_index, model_max_retries=2))

    assert time.monotonic() - started < 15
    assert final["messages"][-1].content == ANSWER
    assert len(stub.chat_requests) == 5
    first_three = stub.requests[:3]
    assert [r.headers.get("x-stainless-retry-count") for r in first_three] == ["0", "1", "2"]
    assert all(r.body == first_three[0].body for r in first_three)


def test_persistent_server_error_surfaces(stub: StubOpenAI, handbook_index: Path) -> None:
    stub.default = server_error(retry_after_ms=10)
    with pytest.raises(openai.InternalServerError) as raised:
        make_graph().invoke(
            request(), context=llm_context(stub, handbook_index, model_max_retries=2)
        )
    assert raised.value.status_code == 500
    assert "500" in str(raised.value) or "Internal" in str(raised.value)
    assert len(stub.chat_requests) == 3


def test_hanging_server_times_out(stub: StubOpenAI, handbook_index: Path) -> None:
    stub.default = hang()
    context = llm_context(stub, handbook_index, model_timeout_s=1.0, model_max_retries=0)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        make_graph().invoke(request(), context=context)

    assert time.monotonic() - started < 8
    assert len(stub.chat_requests) == 1
    assert float(stub.requests[0].headers["x-stainless-read-timeout"]) == 1.0


@pytest.mark.parametrize(
    "raw",
    ["not json {", '{"scores": "high"}', '{"grades": [9, 1]}', '{"scores": [9]}'],
    ids=["invalid-json", "wrong-type", "wrong-key", "wrong-count"],
)
@pytest.mark.parametrize("grader", ["linear", "calibrated"])
def test_malformed_grades_fall_back(
    stub: StubOpenAI, handbook_index: Path, raw: str, grader: str
) -> None:
    stub.script(tool_call("search_documents", {"query": "API key rotation"}), malformed(raw))
    stub.script(text(ANSWER))
    final = final_state(make_graph(), llm_context(stub, handbook_index, offline_grader=grader))

    assert final["messages"][-1].content == ANSWER
    assert any("Grading fell back" in notice for notice in final["footnote_notices"])
    pool = final["candidates"]
    grades = offline_grades(pool, grader)  # type: ignore[arg-type]
    ranked = sorted(range(len(pool)), key=lambda i: -grades[i])
    assert final["documents"] == [pool[i]["document"] for i in ranked if grades[i] >= 0.5][:4], (
        "the offline grades decide what is kept"
    )
    assert final["documents"][0].metadata["source"] == "keys.md"
    graded = next(step for step in final["footnote_route"] if step.startswith("grade_documents:"))
    assert int(graded.split(":")[1].split("/")[0]) > 0
    assert final["footnote_route"][-2:] == ["generate", "verify_citations"]
    assert len(stub.chat_requests) == 3


def test_invalid_citation_is_removed(stub: StubOpenAI, handbook_index: Path) -> None:
    def first_three(body: dict[str, Any]) -> Reply:
        count = len(numbered_sources(body))
        return structured({"scores": [9, 9, 9] + [1] * (count - 3)})

    stub.script(
        tool_call("search_documents", {"query": "API key rotation"}),
        first_three,
        text("API keys are rotated every 90 days [1][7]."),
    )
    final = final_state(make_graph(), llm_context(stub, handbook_index))

    assert len(final["documents"]) == 3
    assert final["messages"][-1].content == ANSWER
    assert final["footnote_invalid_citations"] == [7]
    assert [c["n"] for c in final["citations"]] == [1]
    assert any("[7]" in notice for notice in final["footnote_notices"])


def test_stub_answers_function_calling_and_lists_models(stub: StubOpenAI) -> None:
    """The stub's other structured-output dialect, used by providers without json_schema."""
    stub.script(structured({"scores": [4, 7]}))
    model = ChatOpenAI(base_url=stub.base_url, model="stub-model", max_retries=0, timeout=5)
    grades = model.with_structured_output(SourceGrades, method="function_calling").invoke("x")

    assert grades == SourceGrades(scores=[4, 7])
    assert stub.chat_requests[0]["tool_choice"]["function"]["name"] == "SourceGrades"
    client = openai.OpenAI(base_url=stub.base_url, max_retries=0, timeout=5)
    assert [m.id for m in client.models.list()] == ["stub-model"]
