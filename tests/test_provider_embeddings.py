"""Provider embeddings over real HTTP (the openai client inside langchain-openai) against a
loopback stub: concurrent requests, 429s with Retry-After, timeouts, a one-line failure that
leaves the live index untouched."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from langchain.embeddings import init_embeddings

from footnote.ingest import pipeline
from footnote.models import embedding_choice, embeddings
from footnote.models.embeddings import (
    EmbeddingFailed,
    ProviderEmbeddings,
    ProviderSettings,
    _client_options,
)
from footnote.store.files import load_index
from tests.conftest import RunCli
from tests.stub_embeddings import StubEmbeddings, stub_vector

SPEC = "openai:stub-embed"


@pytest.fixture(autouse=True)
def _provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def provider(stub: StubEmbeddings, **settings: float) -> ProviderEmbeddings:
    chosen = ProviderSettings(**{"backoff_s": 0.05, **settings})  # type: ignore[arg-type]
    model = init_embeddings(SPEC, base_url=stub.base_url, **_client_options(SPEC, chosen))
    return ProviderEmbeddings(SPEC, model, chosen)


def texts(n: int) -> list[str]:
    return [f"text number {i}" for i in range(n)]


def test_vectors_come_back_in_order_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    with StubEmbeddings() as stub:
        model = provider(stub, batch_size=5, concurrency=3)
        vectors = model.embed_array(texts(23))
    assert vectors.shape == (23, 16)
    assert np.allclose(vectors, [stub_vector(t) for t in texts(23)], atol=1e-6)
    sizes = sorted(len(inputs) for _, _, inputs in stub.requests[1:])  # [0]: the probe
    assert sizes == [3, 5, 5, 5, 5]


def test_throughput_grows_with_concurrency() -> None:
    seconds = {}
    for concurrency in (1, 4):
        with StubEmbeddings(latency=0.2) as stub:
            model = provider(stub, batch_size=4, concurrency=concurrency)
            started = time.perf_counter()
            model.embed_array(texts(64))  # 16 requests
            seconds[concurrency] = time.perf_counter() - started
            assert stub.max_in_flight == concurrency
    assert seconds[1] >= 16 * 0.2
    assert seconds[4] < seconds[1] / 2.5


def test_429_is_retried_after_the_servers_retry_after() -> None:
    with StubEmbeddings(latency=0.01) as stub:
        model = provider(stub, batch_size=4, concurrency=2)
        stub.rate_limited, stub.retry_after = 3, "1"
        started = time.perf_counter()
        vectors = model.embed_array(texts(8))
        elapsed = time.perf_counter() - started
    assert np.allclose(vectors, [stub_vector(t) for t in texts(8)], atol=1e-6)
    statuses = [status for _, status, _ in stub.requests[1:]]
    assert statuses.count(429) == 3 and statuses.count(200) == 2
    assert elapsed >= 1.0  # each retry waited the second the server asked for
    assert sorted(stub.ok_inputs[1:]) == sorted(texts(8))


def test_no_retry_after_backs_off_and_gives_up_with_one_line() -> None:
    with StubEmbeddings() as stub:
        model = provider(stub, batch_size=4, retries=2)
        stub.rate_limited, stub.retry_after = 100, None
        with pytest.raises(EmbeddingFailed) as failure:
            model.embed_array(texts(4))
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(f"embeddings {SPEC}: a batch of 4 texts failed after 3 tries")
    assert "HTTP 429" in message
    assert len(stub.requests) == 1 + 3


def test_a_request_that_hangs_times_out_and_is_retried() -> None:
    with StubEmbeddings() as stub:
        model = provider(stub, batch_size=4, retries=1, timeout_s=0.5)
        stub.hang = 3.0
        started = time.perf_counter()
        with pytest.raises(EmbeddingFailed, match="after 2 tries: APITimeoutError"):
            model.embed_array(texts(4))
        assert time.perf_counter() - started < 2.5
    assert len(stub.requests) == 1 + 2


def test_failed_ingest_keeps_the_live_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"p{i}.md").write_text(f"# Page {i}\n\n" + f"words of page {i} " * 20)
    index = tmp_path / "index"
    with StubEmbeddings() as stub:
        model = provider(stub, batch_size=2, concurrency=2, retries=1)
        monkeypatch.setattr(embedding_choice, "load_embeddings", lambda spec="": model)
        first = pipeline.ingest([corpus], index, embeddings=SPEC)
        assert first.embedded_texts == 6
        version = (index / "CURRENT").read_text().strip()
        (corpus / "p0.md").write_text("# Page 0\n\nchanged")
        (corpus / "p9.md").write_text("# Page 9\n\nnew")
        stub.rate_limited, stub.retry_after = 100, "0"
        with pytest.raises(EmbeddingFailed, match="HTTP 429"):
            pipeline.ingest([corpus], index, embeddings=SPEC)
    assert (index / "CURRENT").read_text().strip() == version
    assert load_index(index).version == version


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOOTNOTE_EMBED_CONCURRENCY", "8")
    monkeypatch.setenv("FOOTNOTE_EMBED_TIMEOUT", "2.5")
    settings = ProviderSettings.from_env()
    assert (settings.concurrency, settings.timeout_s, settings.batch_size) == (8, 2.5, 64)
    assert embeddings._client_options(SPEC, settings)["request_timeout"] == 2.5


def test_cli_failure_is_one_line_and_the_index_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nalpha beta gamma")
    index = tmp_path / "index"
    with StubEmbeddings() as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
        monkeypatch.setenv("FOOTNOTE_EMBED_RETRIES", "1")
        args = ("ingest", str(corpus), "--index", str(index), "--embeddings", SPEC, "--quiet")
        assert run_cli(*args).returncode == 0
        version = (index / "CURRENT").read_text().strip()
        (corpus / "b.md").write_text("# B\n\ndelta")
        stub.rate_limited, stub.retry_after = 100, "0"
        result = run_cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"footnote: embeddings {SPEC}: a batch of 1 texts failed after 2 tries: HTTP 429: "
        "Error code: 429 - Rate limit reached"
    ]
    assert (index / "CURRENT").read_text().strip() == version
