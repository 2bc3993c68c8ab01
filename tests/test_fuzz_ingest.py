"""A bounded fuzz campaign: generated hostile corpora (tests/hostile_files.py) through a
real ingest. The long run with figures is benchmarks/fuzz_ingest.py; this one keeps the
suite fast and checks the same things: no crash, no hang, a reason for every file not
ingested, nothing more visible than its front matter allowed, no hidden text indexed,
every good file ingested."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from footnote.ingest.pipeline import ingest
from footnote.store.files import load_index
from tests.hostile_files import HashEmbeddings, check, generate, make_outside

_embeddings: list[HashEmbeddings] = []


def hash_embeddings(spec: str = "") -> HashEmbeddings:
    if not _embeddings:
        _embeddings.append(HashEmbeddings())
    return _embeddings[0]


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(6, 12))
def test_hostile_corpus_is_ingested_safely(seed: int, count: int) -> None:
    with tempfile.TemporaryDirectory(prefix="footnote-fuzz-") as work:
        root = Path(work)
        outside = make_outside(root / "out")
        planted = generate(random.Random(seed), root / "docs", outside, count, size=0.05)
        with mock.patch("footnote.models.embedding_choice.load_embeddings", hash_embeddings):
            summary = ingest([root / "docs"], root / "index", max_seconds=60)
        chunks = load_index(root / "index").chunks if summary.version else []
        figures = check(planted, summary, chunks)
        assert figures.clean(), (seed, figures)
