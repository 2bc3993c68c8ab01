"""What local OpenAI-compatible servers need, shown against the stub's llama.cpp dialect.

Structured output that adapts to what the server accepts, output budgets that reach it, an
agent step that names its tool and says when the model did not call it, and timeouts that
end a hung server's call once, with a clear error. The same behaviours against a real
llama.cpp server: tests/test_llama_cpp.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from footnote.graph.context import Context
from footnote.graph.graph import make_graph
from footnote.graph.model_calls import budget_kwargs, describe_failure, is_format_rejection
from tests.conftest import RunCli
from tests.stub_openai import (
    IGNORED_TOOLS_TEXT,
    StubOpenAI,
    error,
    hang,
    prompt_of,
    server_error,
    structured,
    text,
    tool_call,
)
from tests.test_providers import ANSWER, QUESTION, grade_where, llm_context, request

SEARCH = tool_call("search_documents", {"query": "API key rotation"})
KEEP_ROTATION = grade_where(lambda source: "90 days" in source)


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-not-a-real-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def llama(offline_env: None) -> Iterator[StubOpenAI]:
    """A stub that behaves like llama-cpp-python's server."""
    with StubOpenAI(dialect="llama.cpp") as server:
        yield server


def run(graph: Any, context: dict[str, Any], question: str = QUESTION, **kw: Any) -> dict[str, Any]:
    """Final state, plus the custom events and the agent step's tool calls of one streamed run."""
    final: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    search_calls: list[AIMessage] = []
    seen: set[str | None] = set()
    for namespace, mode, payload in graph.stream(
        request(question), context=context, stream_mode=["values", "custom"], subgraphs=True, **kw
    ):
        if mode == "values" and not namespace:
            final = payload
        elif mode == "values":  # a part's research graph: its agent step's tool calls
            for m in payload["search_calls"]:
                if isinstance(m, AIMessage) and m.id not in seen:
                    seen.add(m.id)
                    search_calls.append(m)
        elif not namespace:  # custom events, once (the research node passes them on)
            events.append(payload)
    return {**final, "events": events, "agent_calls": search_calls}


def kinds(stub: StubOpenAI) -> list[str]:
    """What each chat request asked for: agent, json_schema, function_calling, json_object,
    answer."""
    out = []
    for body in stub.chat_requests:
        response_format = (body.get("response_format") or {}).get("type")
        choice = body.get("tool_choice")
        if response_format:
            out.append(response_format)
        elif isinstance(choice, dict) and choice["function"]["name"] == "SourceGrades":
            out.append("function_calling")
        elif body.get("tools"):
            out.append("agent")
        else:
            out.append("answer")
    return out


def graded_event(final: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in final["events"] if e["event"] == "graded")


# Structured output


def test_grading_adapts_to_llama_cpp_and_remembers(llama: StubOpenAI, handbook_index: Path) -> None:
    graph = make_graph()
    context = llm_context(llama, handbook_index, model_max_retries=2)
    llama.script(SEARCH, KEEP_ROTATION, text(ANSWER))
    first = run(graph, context)

    assert kinds(llama) == ["agent", "json_schema", "function_calling", "answer"]
    assert first["footnote_notices"] == []
    assert graded_event(first)["method"] == "function_calling"
    assert first["footnote_route"][4].startswith("grade_documents:1/")
    assert first["citations"][0]["source"] == "keys.md"
    rejected = llama.requests[1]
    assert rejected.headers["x-stainless-retry-count"] == "0"

    llama.requests.clear()
    llama.script(SEARCH, KEEP_ROTATION, text(ANSWER))
    second = run(graph, context)
    assert kinds(llama) == ["agent", "function_calling", "answer"], "the method is remembered"
    assert graded_event(second)["method"] == "function_calling"
    assert second["footnote_notices"] == []


def test_transient_error_keeps_the_method(offline_env: None, handbook_index: Path) -> None:
    with StubOpenAI() as stub:
        stub.script(SEARCH, server_error(retry_after_ms=10), KEEP_ROTATION, text(ANSWER))
        final = run(make_graph(), llm_context(stub, handbook_index, model_max_retries=2))

    assert kinds(stub) == ["agent", "json_schema", "json_schema", "answer"]
    assert graded_event(final)["method"] == "json_schema"
    assert final["footnote_notices"] == []


def test_json_mode_carries_the_schema(offline_env: None, handbook_index: Path) -> None:
    with StubOpenAI(dialect="json-only") as stub:
        stub.script(KEEP_ROTATION, text(ANSWER))
        final = run(make_graph(), llm_context(stub, handbook_index))

    kinds_seen = kinds(stub)
    assert kinds_seen[:2] == ["agent", "agent"], "tool_choice refused, then tools refused"
    assert kinds_seen[2:] == ["json_schema", "function_calling", "json_object", "answer"]
    assert final["footnote_route"][3] == "call_retriever:fallback_search"
    assert any("the server refuses tools" in n for n in final["footnote_notices"])
    json_mode = stub.chat_requests[4]
    assert json_mode["response_format"]["schema"]["title"] == "SourceGrades"
    assert '"scores"' in prompt_of(json_mode), "JSON mode puts the schema in the prompt"
    assert graded_event(final)["method"] == "json_mode"
    assert final["documents"][0].metadata["source"] == "keys.md", "the model's grades kept it"
    assert final["citations"][0]["source"] == "keys.md"


def test_every_method_rejected_falls_back_with_notice(
    offline_env: None, handbook_index: Path
) -> None:
    def refuse_everything_structured(body: dict[str, Any]) -> Any:
        if body.get("response_format") or "SourceGrades" in str(body.get("tool_choice")):
            return error(400, "response_format is not supported", type_="invalid_request_error")
        return SEARCH if body.get("tools") else text(ANSWER)

    with StubOpenAI() as stub:
        stub.default = refuse_everything_structured
        final = run(make_graph(), llm_context(stub, handbook_index))

    assert kinds(stub) == ["agent", "json_schema", "function_calling", "json_object", "answer"]
    assert any("StructuredOutputUnsupported" in n for n in final["footnote_notices"])
    assert graded_event(final)["method"] == "offline"
    assert final["messages"][-1].content == ANSWER


def test_format_rejection_is_told_from_load() -> None:
    def status_error(status: int, message: str) -> openai.APIStatusError:
        import httpx2

        req = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
        response = httpx2.Response(status, request=req, json={"error": {"message": message}})
        return openai.APIStatusError(message, response=response, body=None)

    assert is_format_rejection(status_error(500, "Input should be 'text' or 'json_object'"))
    assert is_format_rejection(status_error(400, "Invalid parameter: response_format"))
    assert is_format_rejection(NotImplementedError("no json_schema"))
    assert not is_format_rejection(status_error(500, "The server had an error (stub)."))
    assert not is_format_rejection(status_error(429, "Rate limit reached for requests"))
    assert not is_format_rejection(status_error(503, "response_format: overloaded"))
    assert not is_format_rejection(TimeoutError())


# Output budget


def test_budgets_reach_the_server_as_max_tokens(llama: StubOpenAI, handbook_index: Path) -> None:
    long_answer = " ".join(["API keys are rotated every 90 days [1]."] * 40)
    llama.script(SEARCH, KEEP_ROTATION, text(long_answer))
    context = llm_context(llama, handbook_index, max_answer_tokens=24, max_internal_tokens=64)
    final = run(make_graph(), context)

    agent, rejected, grader, answer = llama.chat_requests
    assert [agent["max_tokens"], rejected["max_tokens"], grader["max_tokens"]] == [64] * 3
    assert answer["max_tokens"] == 24
    assert not any("max_completion_tokens" in body for body in llama.chat_requests)
    words = final["messages"][-1].content.split()
    assert 0 < len(words) <= 24, "the server cut the answer at the budget"
    assert final["citations"][0]["source"] == "keys.md"


def test_budget_parameter_per_provider() -> None:
    def kwargs(model: str, base_url: str = "", n: int = 100) -> dict[str, Any]:
        return budget_kwargs(Context(model=model, model_base_url=base_url), n)

    assert kwargs("openai:smollm2", "http://127.0.0.1:8080/v1") == {
        "extra_body": {"max_tokens": 100}
    }
    assert kwargs("openai:gpt-4.1-mini") == {"max_tokens": 100}  # sent as max_completion_tokens
    assert kwargs("anthropic:claude-sonnet-4-5") == {"max_tokens": 100}
    assert kwargs("ollama:llama3.1") == {"num_predict": 100}
    assert kwargs("google_genai:gemini-2.5-flash") == {"max_output_tokens": 100}
    assert kwargs("openai:smollm2", "http://x/v1", n=0) == {}


def test_hosted_openai_gets_max_completion_tokens(
    offline_env: None, monkeypatch: pytest.MonkeyPatch, handbook_index: Path
) -> None:
    """Without model_base_url the OpenAI form is used: max_completion_tokens."""
    with StubOpenAI() as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
        stub.script(SEARCH, KEEP_ROTATION, text(ANSWER))
        run(make_graph(), llm_context(stub, handbook_index, model_base_url=""))

    assert [b.get("max_completion_tokens") for b in stub.chat_requests] == [256, 256, 512]
    assert not any("max_tokens" in body for body in stub.chat_requests)


# The agent step


def test_agent_step_names_the_tool(llama: StubOpenAI, handbook_index: Path) -> None:
    llama.script(SEARCH, KEEP_ROTATION, text(ANSWER))
    final = run(make_graph(), llm_context(llama, handbook_index))

    agent = llama.chat_requests[0]
    assert agent["tool_choice"] == {"type": "function", "function": {"name": "search_documents"}}
    assert final["footnote_route"][3] == "call_retriever"
    [call] = final["agent_calls"]
    assert call.tool_calls[0]["args"] == {"query": "API key rotation"}
    assert "footnote_fallback_search" not in call.response_metadata


def test_no_tool_call_is_reported(llama: StubOpenAI, handbook_index: Path) -> None:
    llama.script(text("Keys are probably rotated yearly."), KEEP_ROTATION, text(ANSWER))
    final = run(make_graph(), llm_context(llama, handbook_index))

    assert final["footnote_route"][3] == "call_retriever:fallback_search"
    assert any("made no search call (asked for it by name)" in n for n in final["footnote_notices"])
    assert {"event": "fallback_search", "query": QUESTION} in final["events"]
    [call] = final["agent_calls"]
    assert call.tool_calls[0]["args"] == {"query": QUESTION}
    assert "asked for it by name" in call.response_metadata["footnote_fallback_search"]
    assert final["citations"][0]["source"] == "keys.md"


def test_search_call_without_a_usable_query_falls_back(
    llama: StubOpenAI, handbook_index: Path
) -> None:
    """A forced call from a small model can carry an empty query: searching for nothing would
    find nothing, so the graph searches with its own query and says so."""
    llama.script(tool_call("search_documents", {"query": " ?! "}), KEEP_ROTATION, text(ANSWER))
    final = run(make_graph(), llm_context(llama, handbook_index))

    assert final["footnote_route"][3] == "call_retriever:fallback_search"
    assert any("had no usable query" in n for n in final["footnote_notices"])
    [call] = final["agent_calls"]
    assert call.tool_calls[0]["args"] == {"query": QUESTION}
    assert final["citations"][0]["source"] == "keys.md"


def test_grading_schema_fixes_the_number_of_scores(llama: StubOpenAI, handbook_index: Path) -> None:
    """The grades schema sent to the server has exactly one score per candidate, so a server
    that compiles the schema to a grammar (llama.cpp) cannot return the wrong count; a reply
    with the wrong count still falls back with a notice."""
    llama.script(SEARCH, KEEP_ROTATION, text(ANSWER))
    final = run(make_graph(), llm_context(llama, handbook_index))
    [grader] = [b for b in llama.chat_requests if "tools" in b and b is not llama.chat_requests[0]]
    scores = grader["tools"][0]["function"]["parameters"]["properties"]["scores"]
    candidates = graded_event(final)["candidates"]
    assert scores["minItems"] == scores["maxItems"] == candidates > 1
    assert final["footnote_notices"] == []

    llama.requests.clear()
    llama.script(SEARCH, structured({"scores": [9]}), text(ANSWER))
    short = run(make_graph(), llm_context(llama, handbook_index))
    assert graded_event(short)["method"] == "offline"
    assert any("Grading fell back" in n for n in short["footnote_notices"])


def test_local_server_needs_no_api_key(
    llama: StubOpenAI, handbook_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    llama.script(SEARCH, KEEP_ROTATION, text(ANSWER))
    final = run(make_graph(), llm_context(llama, handbook_index))
    assert final["citations"][0]["source"] == "keys.md"


def test_tool_choice_refused_once_then_offered(offline_env: None, handbook_index: Path) -> None:
    graph = make_graph()
    with StubOpenAI(dialect="no-tool-choice") as stub:
        context = llm_context(stub, handbook_index, model_max_retries=2)
        stub.script(SEARCH, KEEP_ROTATION, text(ANSWER))
        first = run(graph, context)
        stub.requests.clear()
        stub.script(SEARCH, KEEP_ROTATION, text(ANSWER))
        run(graph, context)

    assert first["footnote_route"][3] == "call_retriever"
    assert "tool_choice" not in stub.chat_requests[0], "the refusal is remembered"
    assert len(stub.chat_requests) == 3


def test_stub_ignores_tools_unless_named(llama: StubOpenAI) -> None:
    """The dialect itself: what an unforced tool call turns into."""
    from langchain_openai import ChatOpenAI

    from footnote.graph.search_tool import search_documents

    llama.script(SEARCH)
    model = ChatOpenAI(base_url=llama.base_url, model="stub-model", max_retries=0, timeout=5)
    reply = model.bind_tools([search_documents]).invoke("rotate keys?")
    assert reply.content == IGNORED_TOOLS_TEXT and not reply.tool_calls


def test_follow_up_sends_no_null_content(llama: StubOpenAI, handbook_index: Path) -> None:
    """llama.cpp refuses an assistant message with null content; the graph never sends one."""
    graph = make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "local"}}
    context = llm_context(llama, handbook_index)
    llama.script(SEARCH, KEEP_ROTATION, text(ANSWER))
    graph.invoke(request(), config, context=context)
    keep_sts = grade_where(lambda source: "STS tokens" in source)
    sts_answer = "Service accounts use short-lived STS tokens instead of API keys [1]."
    llama.script(text("service account key rotation"), SEARCH, keep_sts, text(sts_answer))
    out = graph.invoke(request("and for service accounts?"), config, context=context)

    assert out["messages"][-1].content == sts_answer
    assert out["footnote_unsupported_claims"] == []
    for body in llama.chat_requests:
        assert all(m.get("content") is not None for m in body["messages"])


# Timeouts


def test_hung_server_ends_once_with_a_clear_error(offline_env: None, handbook_index: Path) -> None:
    with StubOpenAI() as stub:
        stub.default = hang()
        context = llm_context(stub, handbook_index, model_timeout_s=1.0, model_max_retries=2)
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError) as raised:
            make_graph().invoke(request(), context=context)
        ended = time.monotonic()

    assert len(stub.chat_requests) == 1, "a timeout is not retried"
    # The client's clock starts before the stub sees the request, so the lower bound is
    # measured from the run's start; a retry would add at least another second per attempt.
    assert ended - started >= 1.0
    assert ended - stub.requests[0].at < 2.9
    message = describe_failure(raised.value)
    assert message is not None and "1 s (model_timeout_s)" in message
    assert stub.base_url in message


def test_hang_during_grading_is_not_swallowed(offline_env: None, handbook_index: Path) -> None:
    with StubOpenAI() as stub:
        stub.script(SEARCH, hang())
        context = llm_context(stub, handbook_index, model_timeout_s=1.0, model_max_retries=2)
        with pytest.raises(openai.APITimeoutError):
            make_graph().invoke(request(), context=context)
    assert len(stub.chat_requests) == 2


def test_cli_against_llama_cpp_stub(
    llama: StubOpenAI, handbook_index: Path, run_cli: RunCli
) -> None:
    llama.script(SEARCH, KEEP_ROTATION, text(ANSWER + " [5]"))
    result = run_cli(
        "ask", QUESTION, "--index", str(handbook_index), "--model", "openai:stub-model",
        "--base-url", llama.base_url, "--max-answer-tokens", "40", "--planner", "rules",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert ANSWER in result.stdout and "[5]" not in result.stdout
    assert "(function_calling)" in result.stderr
    assert "Removed citation(s) [5]" in result.stderr
    assert [b["max_tokens"] for b in llama.chat_requests][-1] == 40


def test_cli_reports_a_hung_server(
    offline_env: None, handbook_index: Path, run_cli: RunCli
) -> None:
    with StubOpenAI() as stub:
        stub.default = hang()
        result = run_cli(
            "ask", QUESTION, "--index", str(handbook_index), "--model", "openai:stub-model",
            "--base-url", stub.base_url, "--timeout", "1",
        )  # fmt: skip
    assert result.returncode == 3
    assert "sent nothing for 1 s (model_timeout_s)" in result.stderr
    assert "Traceback" not in result.stderr
