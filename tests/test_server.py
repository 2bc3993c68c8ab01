"""The answer graph served by `langgraph dev`, used the way Studio and remote callers use it.

One server per module, started like `footnote serve` starts it (same command, same
environment) on a free loopback port, with the handbook index as its default index.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import pytest
from langchain_core.messages import AnyMessage
from langgraph.graph import START, StateGraph, add_messages
from langgraph.pregel.remote import RemoteGraph
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from footnote.server.langgraph_dev import (
    server_command,
    server_config,
    server_environment,
    stop_server,
)
from tests.stub_openai import Reply, StubOpenAI, prompt_of, structured, text
from tests.stub_openai import tool_call as stub_tool_call

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
GRAPH_ID = "footnote"
WORKED_EXAMPLE = "How often do I have to change my API key?"
NOT_COVERED = "What is the parental leave policy?"
STARTUP_TIMEOUT_S = 180.0  # a loaded shared machine can take a minute to start it
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Server:
    """A running `langgraph dev`: its URL, its log, and the threads the tests made on it."""

    url: str
    log: Path
    client: SyncLangGraphClient
    threads: list[str] = field(default_factory=list)

    def new_thread(self) -> str:
        thread_id = self.client.threads.create()["thread_id"]
        self.threads.append(thread_id)
        return thread_id


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def wait_until_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll GET /ok until the server answers; fail with the log tail if it dies or stalls."""
    pause = threading.Event()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"langgraph dev exited with {process.returncode}:\n{_tail(log)}", pytrace=False
            )
        try:
            response = httpx.get(f"{url}/ok", timeout=1.0)
            if response.status_code == 200 and response.json().get("ok"):
                return
        except httpx.HTTPError:
            pass
        pause.wait(0.2)
    pytest.fail(
        f"langgraph dev not ready after {STARTUP_TIMEOUT_S:.0f} s:\n{_tail(log)}", pytrace=False
    )


def _tail(log: Path, lines: int = 60) -> str:
    """The end of the server log, without terminal colours."""
    text = ANSI_COLOUR.sub("", log.read_text(errors="replace"))
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="module")
def server(handbook_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`langgraph dev` on a free port, with the config `footnote serve` writes, run in that
    config's own folder as `footnote serve` runs it (no source tree needed)."""
    port = free_port()
    url = f"http://{HOST}:{port}"
    workdir = tmp_path_factory.mktemp("server")
    log = workdir / "langgraph-dev.log"
    config = server_config(directory=workdir)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            server_command(host=HOST, port=port, config=config),
            env=server_environment(index_dir=str(handbook_index)),
            cwd=workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_ready(url, process, log)
        running = Server(url=url, log=log, client=get_sync_client(url=url))
        yield running
        for thread_id in running.threads:
            running.client.threads.delete(thread_id)
    finally:
        stop_server(process)


def ask(server: Server, thread_id: str | None, question: str, **context: Any) -> dict[str, Any]:
    """One run to completion; returns the graph's output (messages, citations, route)."""
    return server.client.runs.wait(
        thread_id,
        GRAPH_ID,
        input={"messages": [{"role": "user", "content": question}]},
        context=context or None,
    )


def answer_text(output: dict[str, Any]) -> str:
    return output["messages"][-1]["content"]


def sources(output: dict[str, Any]) -> set[str]:
    return {c["source"] for c in output["citations"]}


def test_worked_example_on_a_thread(server: Server) -> None:
    output = ask(server, server.new_thread(), WORKED_EXAMPLE)

    assert "90 days" in answer_text(output)
    assert "keys.md" in sources(output)
    assert output["footnote_unsupported_claims"] == []  # an extractive answer quotes its sources
    assert output["footnote_route"][-2:] == ["generate", "verify_citations"]


FABRICATED = "Rotated keys are archived on magnetic tape in Reykjavik for seven years [1]."


def _model_replies(body: dict[str, Any]) -> Reply:
    """A chat model behind the stub: searches, keeps every source, and answers with one true
    sentence and one its source does not say."""
    prompt = prompt_of(body)
    if "search_documents tool" in prompt:
        return stub_tool_call("search_documents", {"query": "API key rotation"})
    if "Score how well each numbered source" in prompt:
        return structured({"scores": [9] * len(re.findall(r"^<source n=", prompt, re.M))})
    return text(f"API keys are rotated every 90 days [1]. {FABRICATED}")


@pytest.fixture(scope="module")
def model_server(
    handbook_index: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A second server whose operator configured a chat model: the loopback OpenAI stub."""
    port = free_port()
    url = f"http://{HOST}:{port}"
    workdir = tmp_path_factory.mktemp("model-server")
    log = workdir / "langgraph-dev.log"
    with StubOpenAI() as stub, log.open("wb") as sink:
        stub.default = _model_replies
        process = subprocess.Popen(
            server_command(host=HOST, port=port, config=server_config(directory=workdir)),
            env={
                **server_environment(index_dir=str(handbook_index)),
                "FOOTNOTE_MODEL": "openai:stub-model",
                "FOOTNOTE_MODEL_BASE_URL": stub.base_url,
                "OPENAI_API_KEY": "sk-stub-not-a-real-key",  # the stub's; never a real key
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
            },
            cwd=workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_ready(url, process, log)
            yield Server(url=url, log=log, client=get_sync_client(url=url))
        finally:
            stop_server(process)


def test_unsupported_claims_come_out_over_the_server(model_server: Server) -> None:
    """A model's sentence that its cited source does not support leaves the answer and is
    listed in `unsupported_claims`, next to `invalid_citations`, in the served output."""
    output = ask(model_server, model_server.new_thread(), WORKED_EXAMPLE)

    assert answer_text(output) == "API keys are rotated every 90 days [1]."
    claims = output["footnote_unsupported_claims"]
    assert [(c["claim"], c["citations"]) for c in claims] == [(FABRICATED[:-5], [1])]
    assert claims[0]["lexical"] < 0.8
    assert output["footnote_invalid_citations"] == []
    assert sources(output) == {"keys.md"}
    assert any("do not support" in notice for notice in output["footnote_notices"])


def test_stream_reports_progress_before_the_final_state(server: Server) -> None:
    parts = [
        (part.event, part.data)
        for part in server.client.runs.stream(
            server.new_thread(),
            GRAPH_ID,
            input={"messages": [{"role": "user", "content": WORKED_EXAMPLE}]},
            stream_mode=["custom", "updates", "values", "messages-tuple"],
        )
    ]
    events = [event for event, _ in parts]
    custom = [(i, data) for i, (event, data) in enumerate(parts) if event == "custom"]
    progress = [data["event"] for _, data in custom]
    updated = [node for event, data in parts if event == "updates" for node in data]
    answer_at, answer = custom[-1]
    last_values = max(i for i, event in enumerate(events) if event == "values")
    streamed = [
        data[0]["content"]
        for event, data in parts
        if event == "messages" and data[1].get("langgraph_node") == "generate"
    ]

    assert "error" not in events, parts
    assert progress == ["planned", "rewriting", "retrieved", "graded", "answer"]
    # The part's research (rewrite, search, grade) is one step of the turn; its progress
    # events above still reach a caller that does not stream subgraphs.
    assert updated == ["new_question", "plan_turn", "research", "generate", "verify_citations"]
    assert "90 days" in answer["text"]
    assert answer_at < last_values
    assert any("90 days" in text for text in streamed)
    final = parts[last_values][1]
    assert "90 days" in answer_text(final)
    assert "keys.md" in sources(final)


def test_follow_up_on_the_same_thread_uses_the_conversation(server: Server) -> None:
    thread_id = server.new_thread()
    first = ask(server, thread_id, WORKED_EXAMPLE)
    follow_up = ask(server, thread_id, "and for service accounts?")

    assert "keys.md" in sources(first)
    assert "sts.md" in sources(follow_up)
    assert "rewrite_query:condensed" in follow_up["footnote_route"]
    questions = [m["content"] for m in follow_up["messages"] if m["type"] == "human"]
    assert questions == [WORKED_EXAMPLE, "and for service accounts?"]


def test_context_schema_describes_every_setting(server: Server) -> None:
    (assistant,) = server.client.assistants.search(
        graph_id=GRAPH_ID, metadata={"created_by": "system"}
    )
    schemas = server.client.assistants.get_schemas(assistant["assistant_id"])
    properties = schemas["context_schema"]["properties"]

    for name in ("index_dir", "max_retrieval_attempts", "retrieve_k", "user_groups"):
        assert properties[name]["description"].strip(), name
    assert properties["max_retrieval_attempts"]["default"] == 2
    assert set(schemas["input_schema"]["properties"]) == {"messages"}
    output_fields = set(schemas["output_schema"]["properties"])
    assert {"messages", "citations", "parts", "footnote_route"} <= output_fields


def test_retrieval_budget_comes_from_the_run_context(server: Server) -> None:
    default = ask(server, None, NOT_COVERED)
    one_attempt = ask(server, None, NOT_COVERED, max_retrieval_attempts=1)

    assert default["citations"] == one_attempt["citations"] == []
    assert default["footnote_route"].count("call_retriever") == 2
    assert one_attempt["footnote_route"].count("call_retriever") == 1


def test_retrieve_k_comes_from_the_run_context(server: Server) -> None:
    output = ask(server, None, WORKED_EXAMPLE, retrieve_k=3)

    graded = [step for step in output["footnote_route"] if step.startswith("grade_documents:")]
    assert graded and all(step.endswith("/3") for step in graded), output["footnote_route"]
    assert "90 days" in answer_text(output)


class ParentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    citations: list[dict[str, Any]]


def test_deployed_graph_as_a_node_of_another_graph(server: Server) -> None:
    builder = StateGraph(ParentState)
    builder.add_node("footnote", RemoteGraph(GRAPH_ID, url=server.url))
    builder.add_edge(START, "footnote")
    parent = builder.compile()

    output = parent.invoke({"messages": [{"role": "user", "content": WORKED_EXAMPLE}]})

    assert "90 days" in output["messages"][-1].content
    assert "keys.md" in {c["source"] for c in output["citations"]}


def test_server_log_has_no_blocking_calls(server: Server) -> None:
    log = server.log.read_text(errors="replace")

    assert "BlockingError" not in log, _tail(server.log)
    assert "Blocking call" not in log, _tail(server.log)


ONCALL = "How quickly must I acknowledge a page when I am on call?"


def refused(server: Server, **context: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}/runs/wait",
        json={
            "assistant_id": GRAPH_ID,
            "input": {"messages": [{"role": "user", "content": ONCALL}]},
            "context": context,
        },
        timeout=60,
    )


def test_anonymous_callers_see_only_what_everyone_may_see(server: Server) -> None:
    """With no keys or identity provider configured the server still starts and answers, but
    every caller is anonymous: groups [everyone], never admin, whatever the request says."""
    output = ask(server, None, ONCALL)

    assert "oncall.md" not in sources(output)
    assert "within 5 minutes" not in answer_text(output)
    for context in (
        {"user_groups": ["engineering"]},
        {"admin": True},
        {"admin": "false"},
        {"index_dir": "/"},
        {"model": "openai:gpt-4.1-mini", "model_base_url": "http://127.0.0.1:9/v1"},
    ):
        response = refused(server, **context)
        assert response.status_code in (403, 422), (context, response.text)
        assert "within 5 minutes" not in response.text


PARTIAL = "What is the parental leave policy and how do I rotate an API key?"


def test_served_output_has_parts_and_searches(server: Server) -> None:
    output = ask(server, server.new_thread(), PARTIAL)

    assert [p["covered"] for p in output["parts"]] == [False, True]
    assert output["parts"][0]["question"] == "What is the parental leave policy?"
    assert output["parts"][1]["citations"] == [1]
    assert output["footnote_searches"] == 3
    assert 'do not cover "What is the parental leave policy?"' in answer_text(output)


def test_served_conversational_turn_makes_no_search(server: Server) -> None:
    thread = server.new_thread()
    ask(server, thread, WORKED_EXAMPLE)
    output = ask(server, thread, "thanks!")

    assert output["footnote_searches"] == 0
    assert output["citations"] == [] and output["parts"] == []


class AgenticParentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    citations: list[dict[str, Any]]
    parts: list[dict[str, Any]]
    route: str


def test_deployed_graph_as_a_node_shares_only_its_contract(server: Server) -> None:
    builder = StateGraph(AgenticParentState)
    builder.add_node("footnote", RemoteGraph(GRAPH_ID, url=server.url))
    builder.add_edge(START, "footnote")
    parent = builder.compile()

    output = parent.invoke({"messages": [{"role": "user", "content": PARTIAL}], "route": "mine"})

    assert [m.type for m in output["messages"]] == ["human", "ai"], "one AI message per turn"
    assert output["route"] == "mine"
    assert [p["covered"] for p in output["parts"]] == [False, True]
