"""Contexts written by Anthropic's real client (langchain-anthropic) against a loopback
Messages API stub: each document is sent as the shared prefix marked
`cache_control: {"type": "ephemeral"}`, the chunk after it, and the prompt cache's writes
and reads the provider reports reach ingest's --json (and its cost)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from footnote.cli.main import main
from footnote.models import embedding_choice
from tests.counting_embedder import CountingEmbeddings
from tests.stub_anthropic import EPHEMERAL, StubAnthropic

CHUNK = re.compile(r"<chunk>\n(.*?)\n</chunk>", re.S)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubAnthropic]:
    with StubAnthropic() as server:
        server.reply = lambda body: "Situated: a part of the quarry handbook."
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.delenv("ANTHROPIC_API_URL", raising=False)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("FOOTNOTE_EMBED_CONCURRENCY", "4")
        monkeypatch.setenv("FOOTNOTE_CONTEXT_COST", "3,15,0.3,3.75")
        counting = CountingEmbeddings()
        monkeypatch.setattr(embedding_choice, "load_embeddings", lambda spec="": counting)
        yield server


def test_documents_are_the_cached_prefix_and_cache_usage_is_reported(
    tmp_path: Path, stub: StubAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in range(2):
        parts = "\n\n".join(
            f"## Part {n}\n\nStone {page}-{n} is cut with wire saws and lifted." for n in range(3)
        )
        (docs / f"page{page}.md").write_text(f"# Quarry page {page}\n\n{parts}\n")
    command = ["ingest", str(docs), "--index", str(tmp_path / "index")]
    command += ["--context-model", "anthropic:claude-stub", "--json", "--quiet"]
    assert main(command) == 0
    reported = json.loads(capsys.readouterr().out)["context"]

    assert len(stub.requests) == 6
    by_document: dict[str, list[dict[str, Any]]] = {}
    for body in stub.requests:
        assert body["model"] == "claude-stub" and body["temperature"] == 0
        (message,) = body["messages"]
        document, chunk = message["content"]
        assert document["cache_control"] == EPHEMERAL and "<document>" in document["text"]
        assert "cache_control" not in chunk and CHUNK.search(chunk["text"])
        by_document.setdefault(document["text"], []).append(body)
    assert sorted(len(bodies) for bodies in by_document.values()) == [3, 3]
    for text, bodies in by_document.items():
        page = re.search(r"Quarry page (\d)", text).group(1)  # type: ignore[union-attr]
        assert all(f"Stone {page}-{n} " in text for n in range(3))  # the whole document
        chunks = {CHUNK.findall(b["messages"][0]["content"][1]["text"])[0] for b in bodies}
        assert len(chunks) == 3

    # Each document is written to the cache once (its first chunk goes alone) and read by
    # its other two chunks, even though those are sent together.
    assert stub.cache_writes > 0 and stub.cache_reads == 2 * stub.cache_writes
    assert reported["requests"] == 6
    assert reported["cache_write_tokens"] == stub.cache_writes
    assert reported["cache_read_tokens"] == stub.cache_reads
    assert reported["input_tokens"] > stub.cache_writes + stub.cache_reads
    fresh = reported["input_tokens"] - stub.cache_writes - stub.cache_reads
    expected = (
        fresh * 3 + stub.cache_reads * 0.3 + stub.cache_writes * 3.75
        + reported["output_tokens"] * 15
    ) / 1e6  # fmt: skip
    assert reported["cost_usd"] == pytest.approx(expected, abs=1e-6)

    assert main(command) == 0  # unchanged: every context comes from the cache
    assert len(stub.requests) == 6
    assert json.loads(capsys.readouterr().out)["context"]["requests"] == 0
