"""The files backend's bounded-memory writer: each part is what bm25s and faiss would build
from the whole corpus at once, the reader answers from it as from those, the batch setting
bounds what any step takes in, and the integrity checks still refuse a tampered part."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import bm25s
import faiss
import numpy as np
import pytest

from footnote.store import files as store
from footnote.store.chunkdb import ChunkDbWriter
from footnote.store.columns import ColumnsBuilder
from footnote.store.dense_writer import VectorSpool, write_dense
from footnote.store.files import (
    FilesReader,
    load_index,
    write_batch_rows,
    write_index,
    write_index_batches,
)
from footnote.store.keyword_writer import EMPTY_DOCUMENT, KeywordPostings
from footnote.store.text import embedding_text, keyword_tokens
from footnote.store.types import Caller, Chunk, IndexCorrupt

WORDS = [f"w{i}" for i in range(60)] + ["refund", "payment", "ledger", "key", "rotation"]
EVERYONE = Caller(groups=frozenset({"everyone"}))


def token_docs(n: int, seed: int) -> list[list[str]]:
    """Documents of Zipf-ish words with repeats, some a single token."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    return [rng.choices(WORDS, weights, k=rng.randint(1, 30)) for _ in range(n)]


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def corpus(n: int, seed: int = 5) -> list[Chunk]:
    rng = random.Random(seed)
    return [
        Chunk(
            id=f"doc{i % 9}.md#part:{i}",
            text=" ".join(rng.choices(WORDS, k=rng.randint(0, 25))) + ("." if i % 11 else ""),
            source=f"doc{i % 9}.md",
            title=f"Doc {i % 9}",
            section=f"Part {i % 4}",
            date=f"2024-01-{1 + i % 28:02d}" if i % 3 else None,
            access=["everyone"] if i % 5 else ["hr"],
            metadata={"n": i % 2},
        )
        for i in range(n)
    ]


def manifest(d: int) -> dict[str, Any]:
    return {
        "embedding": {"model": "test:unit", "dimension": d, "max_tokens": 256},
        "chunking": {},
        "default_access": ["everyone"],
    }


# --- each part, against the library that would build it from everything at once ------------


@pytest.mark.parametrize("per_pass", [1, 7, 10_000])
def test_keyword_files_score_as_bm25s_indexing_everything_at_once(
    tmp_path: Path, per_pass: int
) -> None:
    docs = token_docs(120, seed=1)
    postings = KeywordPostings(tmp_path / "scratch", entries_per_pass=per_pass)
    for start in range(0, len(docs), 17):
        postings.add(docs[start : start + 17])
    postings.write(tmp_path / "streamed")
    reference = bm25s.BM25()
    reference.index(docs, show_progress=False)
    reference.save(str(tmp_path / "reference"), allow_pickle=False)

    streamed = bm25s.BM25.load(str(tmp_path / "streamed"), allow_pickle=False)
    assert streamed.vocab_dict.keys() == reference.vocab_dict.keys()
    for query in (["refund"], ["w0", "key", "rotation"], ["w3", "w3", "w59"], ["absent", "w1"]):
        known = [t for t in query if t in reference.vocab_dict]
        assert np.array_equal(streamed.get_scores(known), reference.get_scores(known))
    for token, term in reference.vocab_dict.items():  # every column, byte for byte
        if token == "":
            continue
        mine = streamed.vocab_dict[token]
        for part in ("indices", "data"):
            expected = reference.scores[part][
                reference.scores["indptr"][term] : reference.scores["indptr"][term + 1]
            ]
            found = streamed.scores[part][
                streamed.scores["indptr"][mine] : streamed.scores["indptr"][mine + 1]
            ]
            assert np.array_equal(found, expected), (token, part)
    for name in ("params.index.json",):
        assert json.loads((tmp_path / "streamed" / name).read_text()) == json.loads(
            (tmp_path / "reference" / name).read_text()
        )


def spooled(tmp_path: Path, vectors: np.ndarray, batch: int) -> VectorSpool:
    spool = VectorSpool(tmp_path / "vectors.f32", vectors.shape[1])
    for start in range(0, len(vectors), batch):
        spool.add(vectors[start : start + batch])
    spool.close()
    return spool


@pytest.mark.parametrize("clustered", [False, True])
def test_ivf_file_is_the_one_faiss_writes_from_every_vector(
    tmp_path: Path, clustered: bool
) -> None:
    vectors = unit_rows(2500, 16, seed=2)
    if clustered:  # most lists stay empty: faiss writes the sizes as sparse pairs
        vectors = np.repeat(vectors[:3], [1500, 700, 300], axis=0)
    spool = spooled(tmp_path, vectors, batch=300)
    dense = write_dense(tmp_path / "streamed.faiss", spool, ivf_from=1000, nprobe=8, batch_rows=64)

    nlist = int(np.sqrt(len(vectors)))
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, nlist, faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(0).choice(len(vectors), 32 * nlist, replace=False)
    ivf.train(vectors[np.sort(sample)])
    ivf.add(vectors)
    ivf.make_direct_map()
    faiss.write_index(ivf, str(tmp_path / "reference.faiss"))

    assert dense == {"kind": "ivf", "nlist": nlist, "nprobe": 8, "trained_on": len(sample),
                     "threshold": 1000}  # fmt: skip
    expected = (tmp_path / "reference.faiss").read_bytes()
    assert (tmp_path / "streamed.faiss").read_bytes() == expected
    assert (b"sprs" if clustered else b"full") in expected


def test_flat_file_is_the_one_faiss_writes(tmp_path: Path) -> None:
    vectors = unit_rows(300, 8, seed=4)
    spool = spooled(tmp_path, vectors, batch=7)
    assert write_dense(tmp_path / "s.faiss", spool, ivf_from=1000, nprobe=8, batch_rows=50) == {
        "kind": "flat"
    }
    flat = faiss.IndexFlatIP(8)
    flat.add(vectors)
    faiss.write_index(flat, str(tmp_path / "r.faiss"))
    assert (tmp_path / "s.faiss").read_bytes() == (tmp_path / "r.faiss").read_bytes()


# --- the reader over a streamed index ---------------------------------------------------------


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Chunk], np.ndarray, Path]:
    chunks = corpus(400)
    vectors = unit_rows(len(chunks), 16, seed=6)
    root = tmp_path_factory.mktemp("streamed") / "index"
    batches = ((chunks[i : i + 23], vectors[i : i + 23]) for i in range(0, len(chunks), 23))
    write_index_batches(root, batches=batches, files={}, manifest=manifest(16), batch_rows=9)
    return chunks, vectors, root


def test_reader_answers_from_a_streamed_index_as_from_its_references(
    streamed: tuple[list[Chunk], np.ndarray, Path],
) -> None:
    chunks, vectors, root = streamed
    reader = FilesReader(load_index(root))
    everyone = reader.select(EVERYONE)
    assert [c.text for c in reader.chunks(range(len(chunks)))] == [c.text for c in chunks]
    assert reader.chunks(range(len(chunks))) == chunks
    tokens = [keyword_tokens(embedding_text(c)) or [EMPTY_DOCUMENT] for c in chunks]
    bm25 = bm25s.BM25()
    bm25.index(tokens, show_progress=False)
    allowed = np.asarray([EVERYONE.may_see(c) for c in chunks])
    assert np.array_equal(everyone, allowed)
    for query in ("refund ledger", "key rotation w1", "w7", "doc part"):
        known = [t for t in keyword_tokens(query) if t in bm25.vocab_dict]
        scores = np.where(allowed, bm25.get_scores(known), 0).astype(np.float32)
        top = [r for r in np.lexsort((np.arange(len(scores)), -scores)) if scores[r] > 0][:10]
        hits = reader.keyword(query, 10, everyone)
        assert [h.row for h in hits] == top
        assert [h.score for h in hits] == [float(scores[r]) for r in top]
    for q in unit_rows(5, 16, seed=8):
        exact = np.argsort(-np.where(allowed, vectors @ q, -np.inf), kind="stable")[:10]
        assert [h.row for h in reader.dense(q, 10, everyone)] == exact.tolist()
    assert np.array_equal(reader.vectors(list(range(len(chunks)))), vectors)


def test_batch_setting_changes_no_byte_of_the_index(
    streamed: tuple[list[Chunk], np.ndarray, Path], tmp_path: Path
) -> None:
    chunks, vectors, root = streamed
    write_index(tmp_path / "whole", chunks=chunks, vectors=vectors, files={}, manifest=manifest(16))
    assert (
        load_index(tmp_path / "whole").manifest["checksums"]
        == load_index(root).manifest["checksums"]
    )


def test_version_keeps_no_scratch_and_refuses_a_tampered_part(tmp_path: Path) -> None:
    chunks = corpus(60)
    root = tmp_path / "index"
    write_index(root, chunks=chunks, vectors=unit_rows(60, 8, seed=1), files={},
                manifest=manifest(8))  # fmt: skip
    index = load_index(root)
    vdir = root / "versions" / index.version
    on_disk = {str(p.relative_to(vdir)) for p in vdir.rglob("*") if p.is_file()}
    assert on_disk == {*index.manifest["checksums"], "manifest.json"}
    part = vdir / "bm25" / "data.csc.index.npy"
    raw = bytearray(part.read_bytes())
    raw[-1] ^= 0x01  # one score's last byte
    part.write_bytes(bytes(raw))
    with pytest.raises(IndexCorrupt, match="data.csc.index.npy"):
        load_index(root).checksums.wait()


def test_empty_index_is_written_and_loads(tmp_path: Path) -> None:
    write_index(tmp_path / "i", chunks=[], vectors=np.zeros((0, 8), np.float32), files={},
                manifest=manifest(8))  # fmt: skip
    reader = FilesReader(load_index(tmp_path / "i"))
    assert reader.keyword("anything", 5, reader.select(EVERYONE)) == []


# --- memory: no step takes in more than the batch setting ------------------------------------


def test_no_step_takes_in_more_rows_than_the_batch_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: dict[str, list[int]] = {}

    def spy_rows(cls: type, name: str) -> None:
        real = getattr(cls, name)

        def wrapper(self: Any, rows: Any) -> Any:
            rows = rows if isinstance(rows, list | np.ndarray) else list(rows)
            taken.setdefault(f"{cls.__name__}.{name}", []).append(len(rows))
            return real(self, rows)

        monkeypatch.setattr(cls, name, wrapper)

    for cls in (ChunkDbWriter, ColumnsBuilder, VectorSpool, KeywordPostings):
        spy_rows(cls, "add")
    real_batches, real_postings = VectorSpool.batches, KeywordPostings._postings

    def batches(self: VectorSpool, batch_rows: int) -> Any:
        for start, block in real_batches(self, batch_rows):
            taken.setdefault("VectorSpool.batches", []).append(len(block))
            yield start, block

    def postings(self: KeywordPostings, first: int, last: int) -> Any:
        found = real_postings(self, first, last)
        if last - first > 1:  # a single term's postings are bounded by the rows, not here
            taken.setdefault("KeywordPostings._postings", []).append(len(found[0]))
        return found

    monkeypatch.setattr(VectorSpool, "batches", batches)
    monkeypatch.setattr(KeywordPostings, "_postings", postings)
    monkeypatch.setenv("FOOTNOTE_WRITE_BATCH", "8")
    monkeypatch.setattr(store, "DENSE_IVF_FROM", 100)  # the IVF path, trained and laid out
    write_index(tmp_path / "i", chunks=corpus(300), vectors=unit_rows(300, 8, seed=3),
                files={}, manifest=manifest(8))  # fmt: skip

    assert load_index(tmp_path / "i").dense["kind"] == "ivf"
    rows = {name: sizes for name, sizes in taken.items() if name != "KeywordPostings._postings"}
    assert len(rows) == 5 and all(max(sizes) <= 8 for sizes in rows.values()), rows
    assert sum(taken["ChunkDbWriter.add"]) == sum(taken["KeywordPostings.add"]) == 300
    passes = taken["KeywordPostings._postings"]
    assert len(passes) > 1 and max(passes) <= store.KEYWORD_POSTINGS_PER_ROW * 8


def test_batch_setting_must_be_a_positive_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOOTNOTE_WRITE_BATCH", "0")
    with pytest.raises(ValueError, match="FOOTNOTE_WRITE_BATCH"):
        write_batch_rows()
    monkeypatch.delenv("FOOTNOTE_WRITE_BATCH")
    assert write_batch_rows() == store.DEFAULT_WRITE_BATCH


def test_ingest_hands_the_writer_one_document_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a file to a live index: each kept document's chunks are read from the live
    version only when the writer reaches them, batches are written in between, and nothing
    changes in what is published."""
    from footnote.ingest import pipeline
    from footnote.models import embedding_choice
    from tests.counting_embedder import CountingEmbeddings
    from tests.test_embedding_cache import make_corpus

    model = CountingEmbeddings()
    monkeypatch.setattr(embedding_choice, "load_embeddings", lambda spec="": model)
    monkeypatch.setenv("FOOTNOTE_WRITE_BATCH", "3")
    docs, index = make_corpus(tmp_path / "docs", pages=6), tmp_path / "index"
    pipeline.ingest([docs], index)
    (docs / "page99.md").write_text("# New page\n\n## Only part\n\nfresh words here\n")

    events: list[str] = []
    original_lookup, original_write = store._faiss_lookup, store.write_index_batches

    def counting_lookup(root: Path, version: str) -> Any:
        lookup = original_lookup(root, version)

        def logged(ids: list[str], partial: bool) -> Any:
            events.append("lookup")
            return lookup(ids, partial)

        return logged

    def counting_write(root: Path, *, batches: Any, **rest: Any) -> str:
        def logged() -> Any:
            for batch in batches:
                events.append("batch")
                yield batch

        return original_write(root, batches=logged(), **rest)

    monkeypatch.setattr(store, "_faiss_lookup", counting_lookup)
    monkeypatch.setattr(store, "write_index_batches", counting_write)
    summary = pipeline.ingest([docs], index)
    assert summary.added == ["page99.md"] and len(summary.unchanged) == 6
    assert events.count("lookup") == 6, "one read of the live version per kept document"
    assert events.index("batch") < len(events) - 1 - events[::-1].index("lookup"), events
    live = store.load_index(index)
    assert live is not None and summary.chunks == 6 * 4 + 1 == len(live.chunk_ids())


def test_a_runs_fresh_work_waits_on_disk_not_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first ingest embeds and spools its documents whenever a writer batch of chunks is
    waiting, while it is still reading; the index it publishes is the one it would publish
    holding everything."""
    from footnote.ingest import pipeline, spool
    from footnote.models import embedding_choice
    from tests.counting_embedder import CountingEmbeddings
    from tests.test_embedding_cache import make_corpus

    model = CountingEmbeddings()
    monkeypatch.setattr(embedding_choice, "load_embeddings", lambda spec="": model)
    docs = make_corpus(tmp_path / "docs", pages=6)  # 6 documents of 4 chunks
    events: list[str] = []
    waiting: list[int] = []
    put = spool.FreshSpool.put

    def logged_put(self: spool.FreshSpool, source: str, chunks: Any, vectors: Any) -> None:
        waiting.append(len(chunks))
        put(self, source, chunks, vectors)

    monkeypatch.setattr(spool.FreshSpool, "put", logged_put)
    monkeypatch.setenv("FOOTNOTE_WRITE_BATCH", "8")
    small = pipeline.ingest(
        [docs], tmp_path / "small", progress=lambda phase, done, total: events.append(phase)
    )
    last_parse = len(events) - 1 - events[::-1].index("parse")
    assert events.index("embed") < last_parse, "embedding began while documents were read"
    assert waiting == [4] * 6 and small.embedded_chunks == 24

    monkeypatch.setenv("FOOTNOTE_WRITE_BATCH", "10000")
    whole = pipeline.ingest([docs], tmp_path / "whole")
    a, b = store.load_index(tmp_path / "small"), store.load_index(tmp_path / "whole")
    assert a is not None and b is not None and whole.chunks == small.chunks == 24
    assert a.chunk_ids() == b.chunk_ids()
    assert a.read_chunks(range(24)) == b.read_chunks(range(24))
    assert np.array_equal(a.all_vectors(), b.all_vectors())
