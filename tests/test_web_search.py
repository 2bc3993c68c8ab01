"""Web search fallback against a loopback Tavily stub, and tracing that stays off the network."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.graph.graph import make_graph
from footnote.graph.prompts import NOT_COVERED
from tests.stub_tavily import StubTavily

REPO = Path(__file__).resolve().parents[1]
OFF_TOPIC = "What is the capital of Australia?"
GOOD_KEY = "tvly-good-key"


@pytest.fixture
def tavily(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubTavily]:
    """A started Tavily stub, with the environment pointing tavily-python at it."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with StubTavily(api_key=GOOD_KEY) as server:
        monkeypatch.setenv("TAVILY_API_KEY", GOOD_KEY)
        monkeypatch.setenv("TAVILY_API_BASE_URL", server.url)
        yield server


def final_state(index: Path, question: str = OFF_TOPIC, **context: Any) -> dict[str, Any]:
    """The whole state after an offline run with web search on (notices included)."""
    final: dict[str, Any] = {}
    for values in make_graph().stream(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index), "web_search": True, **context},
        stream_mode="values",
    ):
        final = values
    return final


def test_web_fallback_cites_the_page(tavily: StubTavily, handbook_index: Path) -> None:
    final = final_state(handbook_index)

    assert final["footnote_route"].count("call_retriever") == 2
    assert final["footnote_route"][-3:] == ["web_search:2", "generate", "verify_citations"]
    answer = final["messages"][-1].content
    assert "Canberra is the capital city of Australia" in answer
    assert "[1]" in answer
    cited = final["citations"][0]
    assert cited["kind"] == "web"
    assert cited["url"] == cited["source"] == "https://en.wikipedia.org/wiki/Canberra"
    assert final["footnote_notices"] == []

    (sent,) = tavily.requests
    assert sent.path == "/search"
    assert sent.headers["authorization"] == f"Bearer {GOOD_KEY}"
    assert sent.body["max_results"] == 4
    assert "Australia" in sent.body["query"]


def test_no_key_is_one_notice(
    tavily: StubTavily, handbook_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAVILY_API_KEY")
    final = make_graph().invoke(
        {"messages": [{"role": "user", "content": OFF_TOPIC}]},
        context={"index_dir": str(handbook_index), "web_search": True},
    )

    assert final["footnote_notices"] == ["Web search is off: set TAVILY_API_KEY to enable it."]
    assert final["messages"][-1].content == NOT_COVERED
    assert final["citations"] == []
    assert "web_search:off" in final["footnote_route"]
    assert tavily.requests == []


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("failure", "notice"),
    [
        ("wrong-key", "Tavily rejected the API key (HTTP 401): check TAVILY_API_KEY"),
        ("rate-limited", "Tavily usage limit reached (HTTP 429)"),
        ("server-error", "web search failed: HTTPError: 500"),
        ("unreachable", "web search failed: ConnectionError"),
    ],
    ids=["wrong-key", "rate-limited", "server-error", "unreachable"],
)
def test_web_search_failure_is_one_notice(
    tavily: StubTavily,
    handbook_index: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
    notice: str,
) -> None:
    if failure == "wrong-key":
        monkeypatch.setenv("TAVILY_API_KEY", "tvly-wrong-key")
    elif failure == "rate-limited":
        tavily.status = 429
    elif failure == "server-error":
        tavily.status = 500
    else:
        monkeypatch.setenv("TAVILY_API_BASE_URL", f"http://127.0.0.1:{unused_port()}")
    final = final_state(handbook_index)

    assert len(final["footnote_notices"]) == 1
    assert final["footnote_notices"][0].startswith(notice)
    assert final["messages"][-1].content == NOT_COVERED
    assert final["citations"] == []
    assert "web_search:failed" in final["footnote_route"]
    assert len(tavily.requests) == (0 if failure == "unreachable" else 1)


AUDIT_SCRIPT = """
import atexit, ipaddress, json, socket, sys

seen = {"external": [], "loopback": []}

def is_loopback(host):
    if host in ("localhost", "None", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False

def hook(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple):
        host, port = str(args[1][0]), args[1][1]
        seen["loopback" if is_loopback(host) else "external"].append(f"connect {host}:{port}")
    elif event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        if not is_loopback(host):
            seen["external"].append(f"getaddrinfo {host}")

def report():
    with open(sys.argv[2], "w") as out:
        json.dump(seen, out)

sys.addaudithook(hook)
atexit.register(report)

from footnote.graph.graph import make_graph

out = make_graph().invoke(
    {"messages": [{"role": "user", "content": "How often are API keys rotated?"}]},
    context={"index_dir": sys.argv[1]},
)
print(out["messages"][-1].content)
with socket.create_server(("127.0.0.1", 0)) as server:
    socket.create_connection(server.getsockname()).close()
"""


@pytest.mark.parametrize(
    "tracing_env",
    [{}, {"LANGSMITH_TRACING": "false", "LANGSMITH_API_KEY": "lsv2-not-a-real-key"}],
    ids=["unset", "false-with-key"],
)
def test_tracing_is_off_by_default(
    handbook_index: Path, tmp_path: Path, tracing_env: dict[str, str]
) -> None:
    """An offline run opens no connection beyond loopback, up to interpreter exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(tracing_env, TOKENIZERS_PARALLELISM="false")
    report = tmp_path / "sockets.json"
    done = subprocess.run(
        [sys.executable, "-c", AUDIT_SCRIPT, str(handbook_index), str(report)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert "90 days" in done.stdout
    seen = json.loads(report.read_text())
    assert seen["loopback"], "the audit hook saw nothing: it is not watching"
    assert seen["external"] == []


def test_a_model_answer_from_web_sources_is_checked_for_support(
    tavily: StubTavily, handbook_index: Path
) -> None:
    """Web results are checked like documents: a paraphrase they support stays (with the
    index's embeddings, not as a bare quote), a sentence they do not say is removed."""
    from langchain_core.messages import AIMessage, BaseMessage

    from tests.fakes import ScriptedChatModel, prompt_text, role_of, tool_call

    answer = (
        "Canberra is Australia's capital city [1]. "
        "Canberra has been the capital of New Zealand since 1850 [1]."
    )

    def respond(messages: list[BaseMessage]) -> AIMessage:
        role = role_of(messages)
        if role == "agent":
            return tool_call("search_documents", {"query": OFF_TOPIC})
        if role == "grade":  # nothing in the handbook answers it: off to the web
            return tool_call(
                "SourceGrades", {"scores": [0] * prompt_text(messages).count("</source>")}
            )
        if role in ("rewrite", "retry"):
            return AIMessage("capital city of Australia")
        return AIMessage(answer)

    out = make_graph(chat_model=ScriptedChatModel(respond=respond, calls=[])).invoke(
        {"messages": [{"role": "user", "content": OFF_TOPIC}]},
        context={"index_dir": str(handbook_index), "web_search": True},
    )
    assert out["footnote_route"][-3:] == ["web_search:2", "generate", "verify_citations"]
    assert out["messages"][-1].content == "Canberra is Australia's capital city [1]."
    assert [c["claim"] for c in out["footnote_unsupported_claims"]] == [
        "Canberra has been the capital of New Zealand since 1850"
    ]
    assert out["citations"][0]["kind"] == "web"
