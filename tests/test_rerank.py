"""Rerankers are selectable by name (context, --reranker), validated, and each one reorders."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from footnote.graph import search_tool as graph_tools
from footnote.graph.context import Context
from footnote.graph.graph import make_graph
from footnote.models.embeddings import load_embeddings
from footnote.store.types import Caller
from footnote.tools import langchain_retriever as retriever_module
from footnote.tools.documents import retrieve_candidates
from footnote.tools.rerank import RerankerError, check_reranker, make_reranker
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import SearchRequest, run_stage, search
from tests.conftest import RunCli
from tests.fakes import ScriptedChatModel, tool_call

QUESTION = "How often do I have to change my API key?"


@pytest.mark.parametrize(
    "spec", ["none", "sentence", "judge", "llm", "crossencoder:/models/ms-marco"]
)
def test_known_specs_are_accepted(spec: str) -> None:
    assert check_reranker(spec) == spec
    assert Context(reranker=spec).reranker == spec


@pytest.mark.parametrize("spec", ["", "cohere", "crossencoder", "crossencoder:", "LLM"])
def test_unknown_specs_fail_with_the_choices(spec: str) -> None:
    with pytest.raises(RerankerError, match="crossencoder:PATH"):
        check_reranker(spec)
    with pytest.raises(ValueError, match="crossencoder:PATH"):
        Context.coerce({"reranker": spec})


def test_cli_rejects_an_unknown_reranker(run_cli: RunCli, handbook_index: Path) -> None:
    for command in (["search", QUESTION], ["ask", QUESTION]):
        done = run_cli(*command, "--index", str(handbook_index), "--reranker", "cohere")
        assert done.returncode == 2
        assert "unknown reranker 'cohere'" in done.stderr and "Traceback" not in done.stderr


def test_cli_search_with_the_sentence_reranker(run_cli: RunCli, handbook_index: Path) -> None:
    done = run_cli("search", QUESTION, "--index", str(handbook_index), "--reranker", "sentence")
    assert done.returncode == 0, done.stderr
    assert "keys.md" in done.stdout.splitlines()[0]


def test_llm_reranker_needs_a_model(run_cli: RunCli, handbook_index: Path) -> None:
    with pytest.raises(RerankerError, match="needs a chat model"):
        make_reranker("llm", load_embeddings(""))
    done = run_cli("search", QUESTION, "--index", str(handbook_index), "--reranker", "llm")
    assert done.returncode == 2 and "needs a chat model" in done.stderr


def _scores_reply(score: Any) -> Any:
    """A model that gives passage i (1-based) the score `score(i, n)` of n passages."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        content = str(messages[-1].content)
        numbers = re.findall(r'^<source n="(\d+)" origin="[^"\n]*">$', content, flags=re.M)
        assert len(numbers) == len(re.findall(r"^</source>$", content, flags=re.M))
        n = len(numbers)
        return tool_call("CandidateScores", {"scores": [score(i, n) for i in range(1, n + 1)]})

    return respond


def test_llm_reranker_orders_by_the_models_scores(handbook_index: Path) -> None:
    plain = search(SearchRequest(query=QUESTION, index_dir=handbook_index, k=5))
    # The model likes later candidates better: the reranked order is the reverse.
    model = ScriptedChatModel(respond=_scores_reply(lambda i, n: i), calls=[])
    request = SearchRequest(
        query=QUESTION, index_dir=handbook_index, k=5, reranker="llm", chat_model=model
    )
    reranked = search(request)
    assert len(model.calls) == 1 and "Query: " + QUESTION in str(model.calls[0][-1].content)
    retriever = get_retriever(handbook_index)
    mask = retriever.mask(Caller(groups=frozenset({"everyone"})))
    candidates = run_stage(retriever, QUESTION, 20, mask, "pipeline")
    expected = [h.chunk.id for h in reversed(candidates)][:5]
    assert [h.chunk.id for h in reranked] == expected != [h.chunk.id for h in plain]


def test_llm_reranker_keeps_the_order_on_a_bad_reply(handbook_index: Path) -> None:
    too_few = tool_call("CandidateScores", {"scores": [3, 1]})
    model = ScriptedChatModel(respond=lambda messages: too_few, calls=[])
    request = SearchRequest(
        query=QUESTION, index_dir=handbook_index, k=5, reranker="llm", chat_model=model
    )
    plain = search(SearchRequest(query=QUESTION, index_dir=handbook_index, k=5))
    assert [h.chunk.id for h in search(request)] == [h.chunk.id for h in plain]


def test_crossencoder_without_the_extra_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    hint = r"pip install 'sentence-transformers>=3' \(footnote-rag's crossencoder extra\)"
    with pytest.raises(RerankerError, match=hint):
        make_reranker(f"crossencoder:{tmp_path}", load_embeddings(""))


def test_crossencoder_loads_a_local_folder_and_reorders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, handbook_index: Path
) -> None:
    loaded: list[tuple[str, dict[str, Any]]] = []

    class CrossEncoder:
        """Scores a pair by how often 'vpn' occurs in the passage."""

        def __init__(self, path: str, **kwargs: Any) -> None:
            loaded.append((path, kwargs))

        def predict(self, pairs: list[tuple[str, str]]) -> list[float]:
            return [text.lower().count("vpn") for _, text in pairs]

    fake = types.ModuleType("sentence_transformers")
    fake.CrossEncoder = CrossEncoder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    with pytest.raises(RerankerError, match="no cross-encoder model folder"):
        make_reranker(f"crossencoder:{tmp_path / 'missing'}", load_embeddings(""))
    request = SearchRequest(
        query=QUESTION, index_dir=handbook_index, k=3, reranker=f"crossencoder:{tmp_path}"
    )
    hits = search(request)
    assert loaded == [(str(tmp_path), {"local_files_only": True})]
    assert "vpn" in hits[0].chunk.text.lower()


def test_sentence_reranker_reorders_the_pipeline_as_the_reranked_stage(
    handbook_index: Path,
) -> None:
    request = SearchRequest(query=QUESTION, index_dir=handbook_index, k=5, reranker="sentence")
    found = [c["document"].id for c in retrieve_candidates(request)]
    retriever = get_retriever(handbook_index)
    mask = retriever.mask(Caller(groups=frozenset({"everyone"})))
    assert found == [h.chunk.id for h in run_stage(retriever, QUESTION, 5, mask, "reranked")]


def test_graph_searches_with_the_context_reranker(
    handbook_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[SearchRequest] = []
    real = retriever_module.retrieve_candidates

    def recording(request: SearchRequest, question: str = "") -> Any:
        seen.append(request)
        return real(request, question)

    # The graph's search tool runs as a retriever (CandidateSearch), which retrieves there.
    monkeypatch.setattr(retriever_module, "retrieve_candidates", recording)
    out = make_graph().invoke(
        {"messages": [{"role": "user", "content": QUESTION}]},
        context={"index_dir": str(handbook_index), "reranker": "sentence"},
    )
    assert seen and all(r.reranker == "sentence" and r.chat_model is None for r in seen)
    assert "90 days" in out["messages"][-1].content


def test_llm_reranker_in_the_graph_asks_the_context_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    context = Context(reranker="llm", model="openai:gpt-4.1-mini", model_base_url="http://x")
    model = graph_tools.reranker_model(context)
    assert model is not None and type(model).__name__ == "ChatOpenAI"
    assert graph_tools.reranker_model(Context(reranker="sentence", model="openai:x")) is None
