"""Embed an ingest's texts through the embedding cache (store/embedding_cache.py): each
distinct text once, nothing the cache already holds, and every finished batch committed at
once, so a killed run's work is kept for the next."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from footnote.store.embedding_cache import EmbeddingCache, cache_key

DEFAULT_GROUP = 64
"""Texts embedded (and committed to the cache) per step for a model that says nothing."""


def embed_with_cache(
    model: Any,
    texts: Sequence[str],
    cache: EmbeddingCache | None,
    progress: Callable[[str, int, int], None] | None = None,
    check: Callable[[], None] | None = None,
) -> tuple[np.ndarray, int]:
    """Vectors for `texts` (row i for texts[i]) and how many distinct texts were embedded.

    Texts are embedded shortest first across the whole run (as `embed_array` orders one
    call): groups taken in file order mix short and long texts and pad all to the longest.
    A model's `ingest_group` says how many texts one step hands it (a provider model asks for
    enough to keep its concurrent requests busy). `check` runs before each step (a file's
    time budget raises there)."""
    keys = [cache_key(model.model_id, text) for text in texts]
    first: dict[bytes, int] = {}
    for row, key in enumerate(keys):
        first.setdefault(key, row)
    vectors: dict[bytes, np.ndarray] = cache.get(list(first), model.dimension) if cache else {}
    missing = [key for key in first if key not in vectors]
    order = sorted(missing, key=lambda key: model.count_tokens(texts[first[key]]))
    group = int(getattr(model, "ingest_group", DEFAULT_GROUP))
    for start in range(0, len(order), group):
        if check is not None:
            check()
        batch = order[start : start + group]
        embedded = np.asarray(
            model.embed_array([texts[first[key]] for key in batch]), dtype=np.float32
        )
        if cache is not None:
            cache.put(batch, embedded)
        vectors.update(zip(batch, embedded, strict=True))
        if progress:
            progress("embed", min(start + group, len(order)), len(order))
    out = np.zeros((len(texts), model.dimension), dtype=np.float32)
    for row, key in enumerate(keys):
        out[row] = vectors[key]
    return out, len(missing)
