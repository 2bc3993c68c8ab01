"""Offline document-aware context: made from the document alone, embedded and keyword-indexed
with each chunk, never quoted as its text, recorded in the manifest on both backends, and a
change re-embeds through the embedding cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from footnote.ingest import pipeline
from footnote.ingest.context import NO_CONTEXT, ContextSettings, chunk_contexts, recorded_context
from footnote.ingest.corpus import sync
from footnote.models import embedding_choice
from footnote.store.backends import open_writer
from footnote.store.text import embedding_text
from footnote.store.types import Caller, IndexMismatch
from footnote.tools.retrieval import Retriever
from footnote.tools.search import run_stage
from tests.conftest import Locate
from tests.counting_embedder import CountingEmbeddings

OFFLINE = ContextSettings(kind="offline")
PAGE = """# Zanzibar deployment tool

The zanzibar tool deploys services to the cluster and rolls them back when health checks fail.

## Installing

Install zanzibar from the internal package mirror. Each release of zanzibar is signed.

## Rollback

Run the rollback command with the release number. The previous release starts again within
a minute.

## Quotas

Each team may deploy twenty services. Ask the platform group for more.
"""


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> CountingEmbeddings:
    counting = CountingEmbeddings()
    monkeypatch.setattr(embedding_choice, "load_embeddings", lambda spec="": counting)
    return counting


def corpus(root: Path) -> Path:
    """Two documents; the folder's name is in every chunk, so no two tests share cached
    texts (a database's embedding cache is shared by the indexes it holds)."""
    root.mkdir(parents=True, exist_ok=True)
    tag = f"\n\nFiled as {root.parent.name}.\n"
    page = PAGE.replace("\n\n## ", f"{tag}\n## ") + tag
    (root / "zanzibar.md").write_text(page, encoding="utf-8")
    (root / "other.md").write_text(
        f"# Lunch\n\nThe canteen opens at noon. Soup is served on Fridays.{tag}", encoding="utf-8"
    )
    return root


def sent(model: CountingEmbeddings) -> int:
    return sum(len(call) for call in model.calls)


def test_contexts_summarise_the_document_and_name_the_neighbours() -> None:
    texts = [
        "The zanzibar tool deploys services to the cluster and rolls them back when needed.",
        "Install zanzibar from the internal package mirror. Each release of zanzibar is signed.",
        "Run the rollback command with the release number. The old release starts again.",
    ]
    contexts = chunk_contexts("Zanzibar", texts, OFFLINE)
    assert len(contexts) == 3 and all(contexts)
    # The lead sentence situates every chunk, even the one that never names the tool.
    assert all(c and "The zanzibar tool deploys services" in c for c in contexts)
    assert "mirror" in (contexts[2] or "") and "mirror" in (contexts[0] or "")
    assert "Nearby:" in (contexts[1] or "") and "command" in (contexts[1] or "")
    assert chunk_contexts("Zanzibar", texts, OFFLINE) == contexts  # deterministic
    assert chunk_contexts("Zanzibar", texts, NO_CONTEXT) == [None, None, None]
    # A one-chunk document has nothing around it: no summary repeating the chunk itself.
    assert chunk_contexts("Lunch", ["The canteen opens at noon. Soup on Fridays."], OFFLINE) == [
        None
    ]


def test_a_long_document_gets_no_shared_summary_and_neighbours_add_only_new_terms() -> None:
    texts = [
        "The zanzibar tool deploys services to the cluster and rolls them back when needed.",
        "Install zanzibar from the internal package mirror. Each release of zanzibar is signed.",
        "Run the rollback command with the release number. The old release starts again.",
    ]
    short = ContextSettings(kind="offline", summary_max_chunks=3, new_terms_only=True)
    long = ContextSettings(kind="offline", summary_max_chunks=2, new_terms_only=True)
    assert all(c and "The zanzibar tool deploys" in c for c in chunk_contexts("Z", texts, short))
    chunk_specific = chunk_contexts("Z", texts, long)
    assert all(c and "deploys services" not in c for c in chunk_specific)
    # The last chunk's key terms include "release", which the middle chunk already says.
    middle = chunk_specific[1] or ""
    assert "command" in middle and "release" not in middle
    repeating = ContextSettings(kind="offline", summary_max_chunks=2)
    assert "release" in (chunk_contexts("Z", texts, repeating)[1] or "")


def test_a_section_gets_the_opening_words_of_the_section_before_it() -> None:
    texts = [
        "Debian supports booting with System V init, via the sysvinit-core package.",
        "The scripts in /etc/rcN.d/ are symbolic links back to /etc/init.d/.",
        "If you like neither, you might like openrc or runit.",
        "Install the libpaper1 package to set the paper size.",
    ]
    sections = ["doc#sysvinit", "doc#sysvinit", "doc#altboot", "doc#papersize"]
    follow = ContextSettings(
        kind="offline", summary_sentences=0, neighbour_terms=0, previous_words=4
    )
    contexts = chunk_contexts("Customizing", texts, follow, sections)
    # The first section follows nothing; both chunks of a section share what came before.
    assert contexts[:2] == [None, None]
    assert contexts[2] == "After: Debian supports booting with"
    assert contexts[3] == "After: If you like neither,"
    # Without sections each chunk is its own section.
    assert chunk_contexts("Customizing", texts, follow)[1] == "After: Debian supports booting with"


def test_a_keywords_only_context_is_searched_by_bm25_and_keeps_the_plain_vectors(
    locate: Locate, tmp_path: Path, model: CountingEmbeddings
) -> None:
    docs = corpus(tmp_path / "docs")
    location = locate()
    plain = pipeline.ingest([docs], location)
    before = sent(model)
    keywords = ContextSettings(kind="offline", fields="keywords")
    summary = pipeline.ingest([docs], location, context=keywords)
    assert summary.version != plain.version and sent(model) == before  # vectors from the cache
    retriever = Retriever.open(location, context=keywords)
    admin = retriever.mask(Caller(groups=frozenset(), admin=True))
    hits = run_stage(retriever, "zanzibar team quota twenty", 5, admin, "bm25")
    quotas = next(h.chunk for h in hits if h.chunk.section.endswith("Quotas"))
    assert "zanzibar" not in quotas.text.lower() and "zanzibar" in (quotas.context or "").lower()
    assert embedding_text(quotas, with_context=False) in {t for c in model.calls for t in c}
    with pytest.raises(IndexMismatch, match="context 'offline'"):
        Retriever.open(location, context=OFFLINE)  # the same kind, placed elsewhere


def test_context_is_indexed_never_quoted_and_recorded(
    locate: Locate, tmp_path: Path, model: CountingEmbeddings
) -> None:
    docs = corpus(tmp_path / "docs")
    location = locate()
    summary = pipeline.ingest([docs], location, context=OFFLINE)
    assert not summary.failed
    live = open_writer(location).previous()
    assert live is not None and recorded_context(live.manifest) == OFFLINE
    embedded = {text for call in model.calls for text in call}
    retriever = Retriever.open(location, context=OFFLINE)
    admin = retriever.mask(Caller(groups=frozenset(), admin=True))
    # "zanzibar" is only in the quotas chunk's context (the lead sentence), not its text.
    hits = run_stage(retriever, "zanzibar team quota twenty", 5, admin, "bm25")
    quotas = next(h.chunk for h in hits if h.chunk.section.endswith("Quotas"))
    assert "zanzibar" not in quotas.text.lower()
    assert quotas.context and "zanzibar" in quotas.context.lower()
    assert embedding_text(quotas) in embedded  # embedded with its context
    for hit in hits:  # a citation quotes the document, never the context
        assert hit.chunk.context is None or hit.chunk.context not in hit.chunk.text
        assert hit.chunk.text.strip() in (docs / hit.chunk.source).read_text(encoding="utf-8")
    with pytest.raises(IndexMismatch, match="context 'offline'"):
        Retriever.open(location, context=NO_CONTEXT)


def test_changing_the_context_re_embeds_through_the_cache(
    locate: Locate, tmp_path: Path, model: CountingEmbeddings
) -> None:
    docs = corpus(tmp_path / "docs")
    location = locate()
    first = pipeline.ingest([docs], location)
    assert first.embedded_texts > 0
    before = sent(model)
    offline = pipeline.ingest([docs], location, context=OFFLINE)
    assert offline.version != first.version
    # Every multi-chunk document's chunks changed; the one-chunk page has no context.
    assert sent(model) - before == offline.chunks - 1
    before = sent(model)
    again = sync(location)  # the index's own setting is kept
    assert again.version == offline.version and sent(model) == before
    live = open_writer(location).previous()
    assert live is not None and recorded_context(live.manifest) == OFFLINE
    back = pipeline.ingest([docs], location, context=NO_CONTEXT)
    assert back.version != offline.version and sent(model) == before  # all from the cache


def test_a_changed_document_re_contextualises_only_its_own_chunks(
    tmp_path: Path, model: CountingEmbeddings
) -> None:
    docs = corpus(tmp_path / "docs")
    index = tmp_path / "index"
    pipeline.ingest([docs], index, context=OFFLINE)
    (docs / "other.md").write_text(
        "# Lunch\n\nThe canteen opens at noon.\n\n## Fridays\n\nSoup is served on Fridays.\n",
        encoding="utf-8",
    )  # now two chunks, each with a context
    model.calls.clear()
    summary = pipeline.ingest([docs], index)
    assert summary.updated == ["other.md"] and summary.unchanged == ["zanzibar.md"]
    assert all("zanzibar" not in text.lower() for call in model.calls for text in call)
    assert sent(model) == 2


def test_a_malformed_context_record_is_refused(tmp_path: Path, model: CountingEmbeddings) -> None:
    assert recorded_context({"embedding": {}}) == NO_CONTEXT  # an index older than the setting
    for bad in (
        {"kind": "psychic"},
        {"kind": "offline", "neighbour_terms": "4"},
        {"kind": "offline", "fields": "everywhere"},
        {"kind": "offline", "new_terms_only": 1},
        ["offline"],
    ):
        with pytest.raises(IndexMismatch, match="malformed"):
            recorded_context({"context": bad})
    docs = corpus(tmp_path / "docs")
    index = tmp_path / "index"
    pipeline.ingest([docs], index, context=OFFLINE)
    manifest = next(index.glob("versions/*/manifest.json"))
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["context"]["kind"] == "offline"
