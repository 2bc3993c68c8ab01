"""The embedding cache: resume after SIGKILL without re-embedding, duplicates embedded once,
a chunking change re-embeds only what changed, a tampered cache refused, a bounded size."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from footnote.ingest import pipeline
from footnote.ingest.chunking import ChunkSettings
from footnote.models import embedding_choice
from footnote.models.cached import embed_with_cache
from footnote.store.embedding_cache import CACHE_FILE, EmbeddingCache, cache_key
from footnote.store.files import load_index
from footnote.store.types import IndexCorrupt
from tests.counting_embedder import CountingEmbeddings, logged_texts, vector
from tests.pg_fixture import PgServer
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]


def make_corpus(root: Path, pages: int = 12, sections: int = 4) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for page in range(pages):
        body = "\n\n".join(
            f"## Part {part}\n\n" + " ".join(f"w{page}x{part}y{i}" for i in range(30))
            for part in range(sections)
        )
        (root / f"page{page:02d}.md").write_text(f"# Page {page}\n\n{body}\n")
    return root


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingEmbeddings:
    model = CountingEmbeddings()
    monkeypatch.setattr(embedding_choice, "load_embeddings", lambda spec="": model)
    return model


def stored_texts(index: Path) -> list[str]:
    from footnote.store.text import embedding_text

    return [embedding_text(chunk) for chunk in load_index(index).chunks]


def test_duplicate_texts_are_embedded_once(tmp_path: Path, counting: CountingEmbeddings) -> None:
    corpus = make_corpus(tmp_path / "docs", pages=2)
    licence = "# Licence\n\nPermission is granted to copy this text, unchanged, anywhere.\n"
    for name in ("a", "b", "c"):
        (corpus / name).mkdir()
        (corpus / name / "LICENCE.md").write_text(licence)
    summary = pipeline.ingest([corpus], tmp_path / "index")
    texts = stored_texts(tmp_path / "index")
    assert summary.chunks == len(texts) == 2 * 4 + 3
    assert len(counting.texts) == len(set(counting.texts)) == len(set(texts)) == 2 * 4 + 1
    assert summary.embedded_texts == len(counting.texts)
    rows = load_index(tmp_path / "index").all_vectors()
    for row, text in enumerate(texts):  # every copy got the vector of its own text
        assert np.allclose(rows[row], vector(text), atol=1e-6)


def test_rebuild_and_chunking_change_reuse_the_cache(
    tmp_path: Path, counting: CountingEmbeddings
) -> None:
    corpus = make_corpus(tmp_path / "docs")
    index = tmp_path / "index"
    pipeline.ingest([corpus], index)
    first = len(counting.texts)
    summary = pipeline.ingest([corpus], index, rebuild=True)
    assert len(counting.texts) == first and summary.embedded_texts == 0
    assert summary.embedded_chunks == summary.chunks == first
    # Another chunking setting (overlap: no section here is long enough to be split), and one
    # file changed: the index is rebuilt, but only the one new text is embedded.
    (corpus / "page00.md").write_text("# Page 0\n\n## Part 0\n\nshort\n")
    summary = pipeline.ingest([corpus], index, settings=ChunkSettings(overlap_tokens=10))
    assert summary.embedded_chunks == summary.chunks == first - 3
    assert counting.calls[-1] == ["Page 0 > Part 0\nshort"]
    assert summary.embedded_texts == 1


def test_resume_after_sigkill_re_embeds_nothing_already_done(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    index, log = tmp_path / "index", tmp_path / "calls.jsonl"
    command = [sys.executable, "-m", "tests.counting_embedder", str(corpus), str(index)]
    process = subprocess.Popen([*command, str(log), "0.3"], cwd=REPO)
    try:
        # 16 logged: the embedder logs a batch of 4 as it embeds it, and the cache commits
        # it after, so the first 12 are committed once the fourth batch is logged
        wait_for(
            lambda: len(logged_texts(log)) >= 16,
            process=process,
            what="the fourth batch to be embedded",
            timeout_s=60,
        )
        assert process.poll() is None, "ingest ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert not (index / "CURRENT").exists()  # killed before publishing anything
    first = logged_texts(log)
    cache = EmbeddingCache(index)
    kept = len(cache)
    cache.close()
    total = 12 * 4
    assert 12 <= kept < total and kept <= len(first)

    again = tmp_path / "again.jsonl"
    result = subprocess.run([*command, str(again)], cwd=REPO, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    second = logged_texts(again)
    # Exactly what the cache did not hold was embedded: nothing finished is done twice.
    assert len(second) == total - kept
    assert len(set(first[:kept]) & set(second)) == 0
    assert set(first) | set(second) == set(stored_texts(index))


def test_tampered_cache_is_refused_and_the_live_index_kept(
    tmp_path: Path, counting: CountingEmbeddings
) -> None:
    corpus = make_corpus(tmp_path / "docs", pages=3)
    index = tmp_path / "index"
    pipeline.ingest([corpus], index)
    version = (index / "CURRENT").read_text().strip()
    with sqlite3.connect(index / CACHE_FILE) as conn:  # one vector edited, its check not
        key, raw = conn.execute("SELECT key, vector FROM entries LIMIT 1").fetchone()
        edited = np.frombuffer(raw, dtype="<f4").copy()
        edited[0] += 0.5
        conn.execute("UPDATE entries SET vector = ? WHERE key = ?", (edited.tobytes(), key))
    with pytest.raises(IndexCorrupt, match="embedding cache .* fails its checksum"):
        pipeline.ingest([corpus], index, rebuild=True)
    assert (index / "CURRENT").read_text().strip() == version
    assert load_index(index).version == version

    (index / CACHE_FILE).write_bytes(b"not a database at all" * 100)
    with pytest.raises(IndexCorrupt, match="embedding cache .* not a SQLite database"):
        pipeline.ingest([corpus], index, rebuild=True)


def test_entries_are_checked_by_key_and_model(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    model = CountingEmbeddings()
    keys = [cache_key(model.model_id, t) for t in ("one", "two")]
    cache.put(keys, np.stack([vector("one"), vector("two")]))
    with sqlite3.connect(tmp_path / CACHE_FILE) as conn:  # a swapped pair: each check fails
        rows = dict(conn.execute("SELECT key, vector FROM entries").fetchall())
        conn.execute("UPDATE entries SET vector = ? WHERE key = ?", (rows[keys[1]], keys[0]))
    assert cache_key("other:model", "one") != keys[0]
    with pytest.raises(IndexCorrupt):
        cache.get(keys, model.dimension)
    cache.close()


def test_cache_is_bounded_least_recently_used_first(
    tmp_path: Path, counting: CountingEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    cache = EmbeddingCache(index)
    old = [cache_key(counting.model_id, f"old {i}") for i in range(5)]
    cache.put(old, np.stack([vector(f"old {i}") for i in range(5)]))
    cache.close()
    monkeypatch.setenv("FOOTNOTE_EMBED_CACHE_MAX", "8")
    summary = pipeline.ingest([make_corpus(tmp_path / "docs", pages=2)], index)
    assert summary.embedded_texts == 8
    cache = EmbeddingCache(index)
    assert len(cache) == 8
    assert cache.get(old, counting.dimension) == {}  # the older run's entries went first
    vectors, embedded = embed_with_cache(counting, stored_texts(index), cache)
    assert embedded == 0 and vectors.shape == (8, counting.dimension)
    cache.close()


def test_postgres_backend_keeps_its_cache_in_the_database(
    tmp_path: Path, counting: CountingEmbeddings, pg_server: PgServer
) -> None:
    import psycopg

    from footnote.store.embedding_cache import PG_TABLE
    from footnote.store.postgres import drop_index

    url = f"{pg_server.url}?index=cached"
    corpus = make_corpus(tmp_path / "docs", pages=3)
    keys: list[bytes] = []
    try:
        first = pipeline.ingest([corpus], url)
        again = pipeline.ingest([corpus], url, rebuild=True)
        assert first.embedded_texts == 12 and again.embedded_texts == 0
        assert len(counting.texts) == 12
        assert not (tmp_path / "docs" / "embedding-cache.sqlite").exists()
        keys.extend(cache_key(counting.model_id, text) for text in counting.texts)
        with psycopg.connect(pg_server.url) as conn:
            conn.execute(
                f"UPDATE {PG_TABLE} SET vector = vector || '\\x00'::bytea WHERE key = %s",
                (keys[0],),
            )
        with pytest.raises(IndexCorrupt, match=f"embedding cache table {PG_TABLE}"):
            pipeline.ingest([corpus], url, rebuild=True)
    finally:
        with psycopg.connect(pg_server.url) as conn:  # the table is the database's, not ours
            conn.execute(f"DELETE FROM {PG_TABLE} WHERE key = ANY(%s)", (keys,))
        drop_index(url)


def test_cache_command_shows_prunes_and_refuses_a_damaged_cache(
    tmp_path: Path, counting: CountingEmbeddings, capsys: pytest.CaptureFixture[str]
) -> None:
    from footnote.cli.main import main

    index, corpus = tmp_path / "index", make_corpus(tmp_path / "docs", pages=3)
    pipeline.ingest([corpus], index)
    assert main(["cache", "--index", str(index), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["entries"], shown["removed"]) == (12, 0)

    assert main(["cache", "prune", "--keep", "5", "--index", str(index), "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)
    assert (pruned["entries"], pruned["removed"]) == (5, 7)
    assert pruned["bytes"] <= shown["bytes"]
    assert pipeline.ingest([corpus], index, rebuild=True).embedded_texts == 7, "only what went"

    (index / CACHE_FILE).write_bytes(b"not a database at all")
    assert main(["cache", "prune", "--keep", "0", "--index", str(index)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "is not a SQLite database" in error
    assert main(["cache", "--index", str(tmp_path / "absent")]) == 2
    assert "no index at" in capsys.readouterr().err
    assert not (tmp_path / "absent").exists()


def test_documents_are_embedded_together_shortest_first(
    tmp_path: Path, counting: CountingEmbeddings
) -> None:
    """Each document mixes a short and a long section. Embedded one document at a time,
    every step would pad a short text to a long one; together, each step (4 texts) holds
    texts of one length."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b", "c", "d"):
        long_text = " ".join(f"{name}long{i}" for i in range(60))
        (docs / f"{name}.md").write_text(
            f"# {name}\n\n## Short\n\n{name} brief.\n\n## Long\n\n{long_text}\n"
        )
    summary = pipeline.ingest([docs], tmp_path / "index")
    assert summary.embedded_texts == 8 and len(counting.calls) == 2
    lengths = [sorted(counting.count_tokens(t) for t in call) for call in counting.calls]
    assert max(lengths[0]) < min(lengths[1]), lengths
