"""Embed an ingest's texts through the embedding cache (store/embedding_cache.py): each
distinct text once, nothing the cache already holds, and every finished batch committed at
once, so a killed run's work is kept for the next."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
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


def embed_together(
    model: Any,
    texts_by_owner: Mapping[str, Sequence[str]],
    cache: EmbeddingCache,
    charge: Callable[[str, float], bool],
    progress: Callable[[str, int, int], None] | None = None,
) -> int:
    """Put into the cache every text the owners (an ingest's documents) need and it lacks,
    shortest first across all of them, and return how many were embedded.

    Per document, short and long chunks share each step and are padded to the longest; across
    documents, each step holds texts of about one length. Each step's time is charged to the
    owners of its texts in proportion to their tokens; once `charge` says an owner is over
    its budget (False), the texts only it needs leave the queue."""
    owners: dict[bytes, set[str]] = {}
    text_of: dict[bytes, str] = {}
    for owner, texts in texts_by_owner.items():
        for text in texts:
            key = cache_key(model.model_id, text)
            owners.setdefault(key, set()).add(owner)
            text_of[key] = text
    if not owners:
        return 0  # nothing to embed: the cache is not even opened
    held = cache.get(list(owners), model.dimension)
    tokens = {key: max(1, model.count_tokens(text_of[key])) for key in owners if key not in held}
    order = sorted(tokens, key=tokens.__getitem__)
    group = int(getattr(model, "ingest_group", DEFAULT_GROUP))
    over: set[str] = set()
    done = 0
    while order:
        batch = [key for key in order[:group] if owners[key] - over]
        order = order[group:]
        if not batch:
            continue
        started = time.monotonic()
        embedded = np.asarray(model.embed_array([text_of[k] for k in batch]), dtype=np.float32)
        cache.put(batch, embedded)
        elapsed = time.monotonic() - started
        done += len(batch)
        total_tokens = sum(tokens[key] for key in batch)
        share: dict[str, float] = {}
        for key in batch:
            alive = owners[key] - over
            for owner in alive:
                share[owner] = share.get(owner, 0.0) + tokens[key] / len(alive) / total_tokens
        over.update(owner for owner, part in share.items() if not charge(owner, elapsed * part))
        if progress:
            progress("embed", done, done + len(order))
    return done
