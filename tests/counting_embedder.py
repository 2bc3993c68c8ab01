"""A fake embedding model that records every text it is asked to embed, for cache tests.

Run as a script it ingests with that model, so a test can SIGKILL the process mid-embedding:

    python -m tests.counting_embedder CORPUS INDEX LOG [DELAY_S]

Each call to `embed_array` appends one JSON line (the texts) to LOG, flushed, before it
returns; DELAY_S (default 0) is slept per call so a kill lands mid-run.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class CountingEmbeddings:
    """Deterministic vectors from each text's hash; `calls` holds each call's texts."""

    model_id = "test:counting"
    dimension = 8
    max_tokens = 256
    ingest_group = 4

    def __init__(self, log: Path | None = None, delay: float = 0.0) -> None:
        self.calls: list[list[str]] = []
        self.log = log
        self.delay = delay

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(self.delay)
        self.calls.append(list(texts))
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(list(texts)) + "\n")
        return np.stack([vector(text) for text in texts]).astype(np.float32)

    def embed_query(self, text: str) -> list[float]:
        return vector(text).tolist()

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]


def vector(text: str) -> np.ndarray:
    raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], dtype=np.uint8)
    v = raw.astype(np.float32) + 1.0
    return v / np.linalg.norm(v)


def logged_texts(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [text for line in log.read_text().splitlines() if line for text in json.loads(line)]


if __name__ == "__main__":
    from footnote.ingest import pipeline
    from footnote.models import embedding_choice

    corpus, index, log = (Path(arg) for arg in sys.argv[1:4])
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    model = CountingEmbeddings(log, delay)
    embedding_choice.load_embeddings = lambda spec="": model  # type: ignore[assignment]
    summary = pipeline.ingest([corpus], index)
    print(json.dumps(summary.to_dict()))
