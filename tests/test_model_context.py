"""Contexts written by a chat model, against a loopback OpenAI-compatible stub: written once
per chunk and cached (re-ingest and sync ask nothing), a changed document asks only for its
own chunks, prompt-cache fields sent, a context never quoted, a provider failure leaves the
live index as it was, a killed run resumes without asking again; both backends."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.ingest import pipeline
from footnote.ingest.context import ContextSettings, recorded_context
from footnote.ingest.corpus import sync
from footnote.ingest.model_context import ContextFailed, context_key
from footnote.models import embedding_choice
from footnote.store.backends import open_writer
from footnote.store.embedding_cache import CACHE_FILE, EmbeddingCache
from footnote.store.text import embedding_text
from footnote.store.types import Caller
from footnote.tools.retrieval import Retriever
from footnote.tools.search import run_stage
from tests.conftest import Locate
from tests.counting_embedder import CountingEmbeddings
from tests.stub_openai import Reply, StubOpenAI, error, prompt_of, rate_limited, text
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
MODEL = ContextSettings(kind="model", model="openai:stub-model")
CHUNK = re.compile(r"<chunk>\n(.*?)\n</chunk>", re.S)


def situate(body: dict[str, Any]) -> Reply:
    """A context naming the chunk's first words, so each chunk's context is its own."""
    match = CHUNK.search(prompt_of(body))
    words = match.group(1).split()[:3] if match else ["?"]
    return text(f"Situated: about {' '.join(words)} in the quarry handbook.")


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        server.default = situate
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("FOOTNOTE_EMBED_RETRIES", "2")
        monkeypatch.setenv("FOOTNOTE_CONTEXT_COST", "1,4,0.1")
        yield server


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> CountingEmbeddings:
    counting = CountingEmbeddings()
    monkeypatch.setattr(embedding_choice, "load_embeddings", lambda spec="": counting)
    return counting


def corpus(root: Path, pages: int = 2) -> Path:
    """`pages` documents of three sections; the folder's name keeps them apart from other
    tests' (a database's caches are shared by its indexes)."""
    root.mkdir(parents=True, exist_ok=True)
    tag = root.parent.name
    for page in range(pages):
        sections = "\n\n".join(
            f"## Part {part}\n\nStone {page}-{part} of {tag} is cut with wire saws and lifted."
            for part in range(3)
        )
        (root / f"page{page}.md").write_text(f"# Quarry page {page}\n\n{sections}\n")
    return root


def test_contexts_are_written_once_cached_and_never_quoted(
    locate: Locate, tmp_path: Path, stub: StubOpenAI, model: CountingEmbeddings
) -> None:
    docs = corpus(tmp_path / "docs")
    location = locate()
    first = pipeline.ingest([docs], location, context=MODEL)
    assert not first.failed and first.chunks == 6
    assert len(stub.chat_requests) == 6
    used = first.to_dict()["context"]
    assert used["requests"] == 6 and used["cached_contexts"] == 0
    assert used["input_tokens"] > 0 and used["output_tokens"] > 0
    assert used["cost_usd"] is not None and used["cost_usd"] > 0
    live = open_writer(location).previous()
    assert live is not None and recorded_context(live.manifest) == MODEL

    retriever = Retriever.open(location, context=MODEL)
    admin = retriever.mask(Caller(groups=frozenset(), admin=True))
    hits = run_stage(retriever, "situated quarry handbook", 10, admin, "bm25")
    assert len(hits) == 6  # found by words only the contexts hold
    embedded = {t for call in model.calls for t in call}
    for hit in hits:
        assert hit.chunk.context and hit.chunk.context.startswith("Situated: about Stone")
        assert "Situated" not in hit.chunk.text and "quarry" not in hit.chunk.text.lower()
        assert embedding_text(hit.chunk) in embedded

    again = pipeline.ingest([docs], location)
    assert again.version == first.version and len(stub.chat_requests) == 6
    synced = sync(location)
    assert synced.version == first.version and len(stub.chat_requests) == 6

    (docs / "page1.md").write_text((docs / "page1.md").read_text() + "\nA new closing line.\n")
    changed = pipeline.ingest([docs], location)
    assert changed.updated == ["page1.md"]
    asked = stub.chat_requests[6:]
    assert len(asked) == 3 and all("Quarry page 1" in prompt_of(b) for b in asked)
    assert changed.to_dict()["context"]["requests"] == 3


def test_prompt_cache_fields_share_the_document_prefix(
    tmp_path: Path, stub: StubOpenAI, model: CountingEmbeddings
) -> None:
    docs = corpus(tmp_path / "docs")
    pipeline.ingest([docs], tmp_path / "index", context=MODEL)
    by_document: dict[str, list[dict[str, Any]]] = {}
    for body in stub.chat_requests:
        key = body.get("prompt_cache_key")
        assert isinstance(key, str) and key.startswith("footnote-")
        by_document.setdefault(key, []).append(body)
        assert body["temperature"] == 0
    assert sorted(len(bodies) for bodies in by_document.values()) == [3, 3]
    for bodies in by_document.values():
        # The system message and the document are byte-identical, so a prefix cache serves
        # them; only the chunk at the end differs.
        prefixes = set()
        for body in bodies:
            system, user = body["messages"]
            assert system["role"] == "system" and user["role"] == "user"
            prefixes.add((system["content"], user["content"].split("Here is the chunk")[0]))
        assert len(prefixes) == 1
        assert "<document>" in next(iter(prefixes))[1]
        assert len({CHUNK.search(prompt_of(b)).group(1) for b in bodies}) == 3  # type: ignore[union-attr]


def test_rate_limits_are_retried(
    tmp_path: Path, stub: StubOpenAI, model: CountingEmbeddings
) -> None:
    stub.script(rate_limited(20), rate_limited(20))
    summary = pipeline.ingest([corpus(tmp_path / "docs", pages=1)], tmp_path / "idx", context=MODEL)
    assert not summary.failed and summary.to_dict()["context"]["requests"] == 3
    assert len(stub.chat_requests) == 5


def test_a_provider_failure_leaves_the_live_index_untouched(
    locate: Locate, tmp_path: Path, stub: StubOpenAI, model: CountingEmbeddings
) -> None:
    docs = corpus(tmp_path / "docs")
    location = locate()
    before = pipeline.ingest([docs], location)
    stub.default = error(401, "Incorrect API key provided (stub).", type_="invalid_request_error")
    with pytest.raises(ContextFailed) as failed:
        pipeline.ingest([docs], location, context=MODEL)
    message = str(failed.value)
    assert "\n" not in message and "HTTP 401" in message and "not changed" in message
    live = open_writer(location).previous()
    assert live is not None and live.version == before.version
    assert recorded_context(live.manifest) == ContextSettings()


def test_cli_reports_contexts_and_a_failure_in_one_line(
    tmp_path: Path, stub: StubOpenAI, model: CountingEmbeddings, capsys: pytest.CaptureFixture[str]
) -> None:
    from footnote.cli.main import main

    docs, index = corpus(tmp_path / "docs", pages=1), str(tmp_path / "index")
    command = ["ingest", str(docs), "--index", index, "--context-model", "openai:stub-model"]
    assert main([*command, "--json", "--quiet"]) == 0
    reported = json.loads(capsys.readouterr().out)["context"]
    assert reported["requests"] == 3 and reported["cost_usd"] is not None
    (docs / "page0.md").write_text("# Changed\n\n## A\n\nOne.\n\n## B\n\nTwo.\n")
    stub.default = error(400, "model not found (stub)", type_="invalid_request_error")
    assert main([*command, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "HTTP 400" in err and "not changed" in err


def test_a_killed_ingest_resumes_without_asking_again(
    tmp_path: Path, stub: StubOpenAI, model: CountingEmbeddings
) -> None:
    """SIGKILL mid-run: every context the killed run stored is served from the cache; the
    model is asked only for the chunks it had not finished."""
    docs, index = corpus(tmp_path / "docs", pages=8), tmp_path / "index"

    answered, killed = [0], threading.Event()

    def slow(body: dict[str, Any]) -> Reply:
        """Ten answers, then none until the run is killed: it cannot finish first."""
        answered[0] += 1
        if answered[0] > 10:
            killed.wait(30)
        return situate(body)

    stub.default = slow
    env = {
        **os.environ,
        "OPENAI_BASE_URL": stub.base_url,
        "OPENAI_API_KEY": "k",
        "FOOTNOTE_EMBED_CONCURRENCY": "1",
    }
    script = (
        "import sys; from footnote.ingest import pipeline; "
        "from footnote.ingest.context import ContextSettings; "
        "from tests.counting_embedder import CountingEmbeddings; "
        "from footnote.models import embedding_choice; "
        "embedding_choice.load_embeddings = lambda spec='': CountingEmbeddings(); "
        "pipeline.ingest([sys.argv[1]], sys.argv[2], "
        "context=ContextSettings(kind='model', model='openai:stub-model'))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(docs), str(index)], cwd=REPO, env=env
    )
    texts = [
        f"Stone {page}-{part} of {tmp_path.name} is cut with wire saws and lifted."
        for page in range(8)
        for part in range(3)
    ]

    def stored_contexts() -> int:
        """The contexts in the index's cache (none before the run has made the cache file:
        opening it would make it)."""
        if not (index / CACHE_FILE).exists():
            return 0
        cache = EmbeddingCache(index)
        stored = 0
        for page in range(8):
            digest = hashlib.sha256((docs / f"page{page}.md").read_bytes()).hexdigest()
            keys = [context_key(MODEL.model, digest, t) for t in texts[page * 3 : page * 3 + 3]]
            stored += len(cache.get_raw(keys))
        cache.close()
        return stored

    try:
        wait_for(lambda: len(stub.chat_requests) >= 10, what="ten context requests",
                 process=process)  # fmt: skip
        assert process.poll() is None, "ingest ended before it could be killed"
        # the answered documents' contexts reach the cache
        wait_for(lambda: stored_contexts() >= 3, what="a whole document's contexts stored",
                 process=process)  # fmt: skip
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
        killed.set()
    assert not (index / "CURRENT").exists()  # killed before publishing
    asked_before = len(stub.chat_requests)
    stored = stored_contexts()
    assert 3 <= stored < 24  # whole documents were stored before the kill, not all of them

    resumed = pipeline.ingest([docs], index, context=MODEL)
    assert not resumed.failed and resumed.chunks == 24
    used = resumed.to_dict()["context"]
    assert used["cached_contexts"] == stored and used["requests"] == 24 - stored
    assert len(stub.chat_requests) - asked_before == 24 - stored
    assert json.loads(json.dumps(used))  # reported as JSON
