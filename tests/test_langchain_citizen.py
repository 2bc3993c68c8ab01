"""Footnote as a LangChain user expects it: retriever conventions, embeddings given as strings
or objects, `answer_tool` as a plain tool, one meaning of `--groups`, and one-line errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic import ValidationError

import footnote
from footnote import FootnoteRetriever, MiniLMEmbeddings, answer_tool
from footnote.ingest.pipeline import ingest
from footnote.models import providers
from footnote.models.embedding_choice import embeddings_for_index, embeddings_id, remembered
from footnote.models.embeddings import DEFAULT_EMBEDDINGS, load_embeddings
from footnote.models.embeddings import MiniLMEmbeddings as Default
from footnote.store.types import IndexMismatch, caller_groups
from tests.conftest import HANDBOOK, REPO, RunCli, footnote_command
from tests.fakes import ScriptedChatModel, tool_call

QUESTION = "How often do I have to change my API key?"
ON_CALL = "How do I acknowledge a page when on call?"


# --- the retriever ------------------------------------------------------------------------


def test_retriever_honours_k_filter_and_search_kwargs(handbook_index: Path) -> None:
    index = str(handbook_index)
    assert len(FootnoteRetriever(index=index, search_kwargs={"k": 1}).invoke(QUESTION)) == 1
    only_vpn = FootnoteRetriever(index=index, filter={"source": "vpn.md"}).invoke(QUESTION)
    assert only_vpn and {d.metadata["source"] for d in only_vpn} == {"vpn.md"}
    kwargs = FootnoteRetriever(index=index, search_kwargs={"k": 2, "filter": {"source": "vpn.md"}})
    assert [d.metadata["source"] for d in kwargs.invoke(QUESTION)] == ["vpn.md", "vpn.md"]
    per_call = FootnoteRetriever(index=index, k=4).invoke(
        QUESTION, k=1, filter={"source": "holidays.md"}
    )
    assert [d.metadata["source"] for d in per_call] == ["holidays.md"]
    own_type = FootnoteRetriever(index=index, k=2).invoke(QUESTION, filters={"source": "vpn.md"})
    assert [d.metadata["source"] for d in own_type] == ["vpn.md", "vpn.md"]


def test_retriever_refuses_what_it_would_otherwise_ignore(handbook_index: Path) -> None:
    index = str(handbook_index)
    with pytest.raises(ValidationError, match="extra_forbidden|Extra inputs"):
        FootnoteRetriever(index=index, serch_kwargs={"k": 1})
    with pytest.raises(ValidationError, match=r"search_kwargs \['fetch_k'\] not supported"):
        FootnoteRetriever(index=index, search_kwargs={"fetch_k": 10})
    with pytest.raises(ValidationError, match="k must be"):
        FootnoteRetriever(index=index, search_kwargs={"k": "5"})
    with pytest.raises(TypeError, match=r"takes k=, filter= and filters=, not \['top_k'\]"):
        FootnoteRetriever(index=index).invoke(QUESTION, top_k=3)


def test_relevance_compares_across_queries_and_rank_orders_one(handbook_index: Path) -> None:
    retriever = FootnoteRetriever(index=str(handbook_index), k=3)
    on_topic = retriever.invoke(QUESTION)
    off_topic = retriever.invoke("What is the capital of Mongolia?")
    for docs in (on_topic, off_topic):
        assert [d.metadata["rank"] for d in docs] == [1, 2, 3]
        assert all(0.0 <= d.metadata["relevance"] <= 1.0 for d in docs)
    # The min-max `score` of the off-topic query's best hit is high; its relevance is not.
    assert on_topic[0].metadata["relevance"] >= 0.5 > off_topic[0].metadata["relevance"]


# --- embeddings as strings or objects ------------------------------------------------------


def test_retriever_and_ingest_take_embeddings_objects(tmp_path: Path, handbook_index: Path) -> None:
    docs = FootnoteRetriever(index=str(handbook_index), embeddings=MiniLMEmbeddings()).invoke(
        QUESTION
    )
    assert docs[0].metadata["source"] == "keys.md"
    with pytest.raises(IndexMismatch, match="DeterministicFakeEmbedding"):
        FootnoteRetriever(
            index=str(handbook_index), embeddings=DeterministicFakeEmbedding(size=384)
        ).invoke(QUESTION)

    fake = DeterministicFakeEmbedding(size=32)
    index = tmp_path / "fake-index"
    assert not ingest([HANDBOOK], index, embeddings=fake).failed
    manifest = json.loads(_manifest(index))
    assert manifest["embedding"]["model"] == embeddings_id(fake)
    assert manifest["embedding"]["dimension"] == 32
    assert FootnoteRetriever(index=str(index), embeddings=fake, k=2).invoke(QUESTION)
    with pytest.raises(IndexMismatch, match="pass them explicitly"):
        FootnoteRetriever(index=str(index)).invoke(QUESTION)


def test_the_embedded_graph_takes_an_embeddings_object(handbook_index: Path) -> None:
    from footnote import make_graph

    out = make_graph().invoke(
        {"messages": [HumanMessage(QUESTION)]},
        context={"index_dir": str(handbook_index), "embeddings": MiniLMEmbeddings()},
    )
    assert out["citations"][0]["source"] == "keys.md"
    with pytest.raises(IndexMismatch, match="DeterministicFakeEmbedding"):
        make_graph().invoke(
            {"messages": [HumanMessage(QUESTION)]},
            context={
                "index_dir": str(handbook_index),
                "embeddings": DeterministicFakeEmbedding(size=384),
            },
        )


def _manifest(index: Path) -> str:
    version = (index / "CURRENT").read_text().strip()
    return (index / "versions" / version / "manifest.json").read_text()


class FakeProviderEmbeddings(Embeddings):
    """Stands in for a provider's model (what `init_embeddings` would return)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._inner = DeterministicFakeEmbedding(size=16)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._inner.embed_query(text)


def test_an_index_built_with_provider_embeddings_reloads_them_without_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []

    def fake_init(spec: str, **kwargs: Any) -> Embeddings:
        built.append(spec)
        return FakeProviderEmbeddings(spec.split(":", 1)[1])

    monkeypatch.setattr("langchain.embeddings.init_embeddings", fake_init)
    index = tmp_path / "provider-index"
    assert not ingest([HANDBOOK], index, embeddings="openai/text-embedding-3-small").failed
    assert json.loads(_manifest(index))["embedding"]["model"] == "openai:text-embedding-3-small"
    assert remembered(index) == "openai:text-embedding-3-small"
    assert FootnoteRetriever(index=str(index), k=1).invoke(QUESTION)  # no embeddings= given
    assert built and set(built) == {"openai:text-embedding-3-small"}
    # A copy (or a manifest someone edited) names the provider on its own word: refused.
    copy = tmp_path / "copy"
    shutil.copytree(index, copy)
    with pytest.raises(IndexMismatch, match="pass them explicitly"):
        embeddings_for_index("", "openai:text-embedding-3-small", str(copy))


def test_the_default_models_recorded_name_is_footnotes_own() -> None:
    assert isinstance(load_embeddings(DEFAULT_EMBEDDINGS), Default)
    assert load_embeddings(DEFAULT_EMBEDDINGS) is load_embeddings("")
    assert embeddings_id(MiniLMEmbeddings()) == DEFAULT_EMBEDDINGS
    from langchain_openai import OpenAIEmbeddings

    assert (
        embeddings_id(OpenAIEmbeddings(model="text-embedding-3-small", api_key="sk-x"))  # type: ignore[arg-type]
        == "openai:text-embedding-3-small"
    )


def test_provider_model_spellings() -> None:
    assert providers.normalize_spec("openai/gpt-4.1-mini", "chat") == "openai:gpt-4.1-mini"
    assert providers.normalize_spec("openai:meta-llama/Llama-3", "chat") == (
        "openai:meta-llama/Llama-3"
    )
    assert providers.normalize_spec("ollama/nomic-embed-text", "embeddings") == (
        "ollama:nomic-embed-text"
    )
    assert providers.normalize_spec("gpt-4.1-mini", "chat") == "gpt-4.1-mini"


# --- answer_tool ----------------------------------------------------------------------------


def test_answer_tool_is_callable_directly(handbook_index: Path) -> None:
    ask = answer_tool(context={"index_dir": str(handbook_index)})
    text = ask.invoke({"question": QUESTION})
    assert "90 days" in text and "keys.md" in text
    message = ask.invoke(
        {"name": ask.name, "args": {"question": QUESTION}, "id": "c1", "type": "tool_call"}
    )
    assert isinstance(message, ToolMessage) and message.status == "success"
    assert message.artifact["citations"][0]["source"] == "keys.md"


def test_answer_tool_reads_groups_from_its_config_when_called_directly(
    handbook_index: Path,
) -> None:
    ask = answer_tool(context={"index_dir": str(handbook_index)})
    call = {"name": ask.name, "args": {"question": ON_CALL}, "id": "c1", "type": "tool_call"}
    engineer = ask.invoke(call, config={"configurable": {"user_groups": ["engineering"]}})
    assert engineer.artifact["citations"][0]["source"] == "oncall.md"
    anyone = ask.invoke(call)
    assert "oncall.md" not in [c["source"] for c in anyone.artifact["citations"]]


def test_answer_tool_errors_come_back_as_tool_errors(tmp_path: Path) -> None:
    ask = answer_tool(context={"index_dir": str(tmp_path / "missing")})
    message = ask.invoke(
        {"name": ask.name, "args": {"question": QUESTION}, "id": "c1", "type": "tool_call"}
    )
    assert isinstance(message, ToolMessage)
    assert message.status == "error"
    assert "missing" in message.content and "\n" not in message.content


@dataclass
class AgentContext:
    user_groups: list[str]


def test_answer_tool_in_create_agent_with_the_agents_groups(handbook_index: Path) -> None:
    from langchain.agents import create_agent

    ask = answer_tool(context={"index_dir": str(handbook_index)})

    def respond(messages: list[Any]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(f"From the handbook: {last.content}")
        return tool_call(ask.name, {"question": ON_CALL}, "c1")

    agent = create_agent(
        ScriptedChatModel(respond=respond), tools=[ask], context_schema=AgentContext
    )
    out = agent.invoke(
        {"messages": [HumanMessage(ON_CALL)]}, context=AgentContext(user_groups=["engineering"])
    )
    reply = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert reply.artifact["citations"][0]["source"] == "oncall.md"
    assert out["messages"][-1].content.startswith("From the handbook:")


# --- --groups means one thing everywhere -------------------------------------------------


def test_groups_always_include_everyone_unless_strict(
    handbook_index: Path, run_cli: RunCli
) -> None:
    assert caller_groups(["engineering"]) == ("engineering", "everyone")
    assert caller_groups(["engineering"], strict=True) == ("engineering",)
    index = str(handbook_index)
    wide = FootnoteRetriever(index=index, k=20, user_groups=["engineering"]).invoke(ON_CALL)
    strict = FootnoteRetriever(
        index=index, k=20, user_groups=["engineering"], strict_groups=True
    ).invoke(ON_CALL)
    assert "keys.md" in {d.metadata["source"] for d in wide}
    assert {d.metadata["source"] for d in strict} == {"oncall.md"}

    def sources(*extra: str) -> set[str]:
        result = run_cli("search", ON_CALL, "--index", index, "-k", "20", "--json", *extra)
        assert result.returncode == 0, result.stderr
        return {item["source"] for item in json.loads(result.stdout)}

    assert "keys.md" in sources("--groups", "engineering")
    assert sources("--groups", "engineering", "--strict-groups") == {"oncall.md"}


KEYS = "How often do I have to change my API key?"


def test_ask_and_the_embedded_graph_take_strict_groups(
    handbook_index: Path, run_cli: RunCli
) -> None:
    """`keys.md` is open to `everyone`: named groups still see it, strict groups do not."""
    index = str(handbook_index)

    def cited(*extra: str) -> set[str]:
        result = run_cli("ask", KEYS, "--index", index, "--json", *extra)
        assert result.returncode == 0, result.stderr
        return {c["source"] for c in json.loads(result.stdout)["citations"]}

    assert "keys.md" in cited("--groups", "engineering")
    assert "keys.md" not in cited("--groups", "engineering", "--strict-groups")

    from footnote import make_graph

    graph = make_graph()
    for strict, expected in ((False, True), (True, False)):
        out = graph.invoke(
            {"messages": [HumanMessage(KEYS)]},
            context={"index_dir": index, "user_groups": ["engineering"], "strict_groups": strict},
        )
        assert ("keys.md" in {c["source"] for c in out["citations"]}) is expected
    with pytest.raises(ValueError, match="'strict_groups' must be true or false"):
        graph.invoke(
            {"messages": [HumanMessage(KEYS)]},
            context={"index_dir": index, "strict_groups": "yes"},
        )


# --- one-line errors ----------------------------------------------------------------------

BLOCKER = """\
import os, sys
BLOCKED = set(os.environ.get("FOOTNOTE_TEST_BLOCK", "").split(","))
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Blocker())
"""


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def footnote_run(
    tmp_path: Path, *args: str, block: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`footnote ARGS` with some packages made absent (as on a host without them)."""
    site = tmp_path / "blocker"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    environment = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    environment.pop("FOOTNOTE_INDEX", None)
    if block:
        environment["PYTHONPATH"] = str(site)
        environment["FOOTNOTE_TEST_BLOCK"] = block
    return subprocess.run(
        [*footnote_command(), *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(lines) == 1, result.stderr
    return lines[0]


ERROR_CASES = {
    "chat model package missing": (
        ["ask", QUESTION, "--model", "anthropic:claude-sonnet-4-5"],
        "langchain_anthropic,anthropic",
        {},
        2,
        r"needs the langchain-anthropic package: "
        r"pip install 'langchain-anthropic>=1.0' \(footnote-rag's anthropic extra\)",
    ),
    "openai package missing": (
        ["ask", QUESTION, "--model", "openai:gpt-4.1-mini"],
        "langchain_openai,openai",
        {},
        2,
        r"needs the langchain-openai package: "
        r"pip install 'langchain-openai>=1.0' \(footnote-rag's openai extra\)",
    ),
    "embeddings package missing": (
        ["ingest", str(HANDBOOK), "--embeddings", "openai:text-embedding-3-small"],
        "langchain_openai,openai",
        {},
        2,
        "the embeddings 'openai:text-embedding-3-small' needs the langchain-openai package",
    ),
    "search embeddings package missing": (
        ["search", QUESTION, "--embeddings", "ollama/nomic-embed-text"],
        "langchain_ollama,ollama",
        {},
        2,
        r"pip install 'langchain-ollama>=1.0' \(footnote-rag's ollama extra\)",
    ),
    "unknown chat spelling": (
        ["ask", QUESTION, "--model", "foo:bar"],
        "",
        {},
        2,
        "unknown chat model 'foo:bar': write provider:model or provider/model",
    ),
    "unknown chat name": (
        ["search", QUESTION, "--reranker", "llm", "--model", "mystery"],
        "",
        {},
        2,
        "unknown chat model 'mystery'",
    ),
    "eval with an unknown chat model": (
        ["eval", "{dataset}", "--stages", "pipeline", "--reranker", "llm", "--model", "foo/bar"],
        "",
        {},
        2,
        "unknown chat model 'foo/bar'",
    ),
    "unknown embeddings spelling": (
        ["ingest", str(HANDBOOK), "--embeddings", "nomic-embed-text"],
        "",
        {},
        2,
        "unknown embeddings 'nomic-embed-text': write provider:model or provider/model",
    ),
    "chat server unreachable (provider/model accepted)": (
        ["ask", QUESTION, "--model", "openai/gpt-4.1-mini", "--timeout", "5", "--quiet"],
        "",
        {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1"},
        3,
        r"no answer from the model server at http://127\.0\.0\.1:{port}/v1",
    ),
    "embeddings server unreachable": (
        ["ingest", str(HANDBOOK), "--embeddings", "openai:text-embedding-3-small"],
        "",
        {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1"},
        3,
        # Offline, the client fails first fetching its tokenizer; online, at the stub port.
        r"the embeddings 'openai:text-embedding-3-small': could not reach https?://\S+: \S",
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_provider_problems_are_one_line(case: str, tmp_path: Path, handbook_index: Path) -> None:
    args, block, env, status, expected = ERROR_CASES[case]
    port = str(closed_port())
    env = {k: v.replace("{port}", port) for k, v in env.items()}
    index = str(tmp_path / "index") if args[0] in ("ingest", "eval") else str(handbook_index)
    dataset = tmp_path / "beir_tiny"
    shutil.copytree(REPO / "tests" / "fixtures" / "beir_tiny", dataset)
    args = [str(dataset) if a == "{dataset}" else a for a in args]
    result = footnote_run(tmp_path, *args, "--index", index, block=block, env=env)
    line = one_line(result)
    assert result.returncode == status, (result.returncode, line)
    assert line.startswith("footnote: ")
    assert re.search(expected.replace("{port}", port), line), line


def test_debug_shows_the_traceback(tmp_path: Path, handbook_index: Path) -> None:
    result = footnote_run(
        tmp_path, "ask", QUESTION, "--model", "foo:bar", "--index", str(handbook_index), "--debug"
    )
    assert result.returncode == 1 and "Traceback" in result.stderr
    assert "ProviderProblem: unknown chat model 'foo:bar'" in result.stderr


# --- packaging and the command line -------------------------------------------------------


def test_version_everywhere(run_cli: RunCli) -> None:
    from importlib.metadata import version

    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"footnote {footnote.__version__}"
    assert version("footnote-rag") == footnote.__version__
    assert (Path(footnote.__file__).parent / "py.typed").is_file()


def test_every_subcommand_has_examples() -> None:
    import argparse

    from footnote.cli.main import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) >= {"ingest", "search", "ask", "serve", "eval"}
    for name, sub in commands.choices.items():
        text = sub.format_help()
        assert "examples:\n  footnote" in text or "examples:\n  python" in text, name
        assert "--debug" in text, name


def test_the_build_is_warning_free(tmp_path: Path) -> None:
    """Built the way test_packaging builds the wheel, with setuptools' own output shown."""
    source = tmp_path / "source"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v"]
        + ["-w", str(tmp_path / "out"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = (result.stdout + result.stderr).replace(str(tmp_path), "TMP")
    # pip's own notes about this machine's package mirror are not the build's.
    warnings = [
        line
        for line in output.splitlines()
        if re.search(r"warn|deprecat|would be ignored", line, re.I) and "pypi-more" not in line
    ]
    assert not warnings, warnings
