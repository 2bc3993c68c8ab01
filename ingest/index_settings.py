"""The settings every chunk of a new version is made with, and whether the live version's
chunks were made with the same ones (only then can they be reused)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from footnote.ingest.chunking import ChunkSettings
from footnote.ingest.context import DEFAULT_CONTEXT, ContextSettings, recorded_context
from footnote.ingest.model_context import ContextUsage, ModelContexts
from footnote.ingest.options import IngestOptions
from footnote.models.embedding_choice import IndexEmbeddings
from footnote.store.base import PreviousState
from footnote.store.embedding_cache import EmbeddingCache
from footnote.store.types import DEFAULT_ACCESS, IndexMismatch


@dataclass(frozen=True)
class IndexSettings:
    """The run's embedding model, chunking, context and default access, settled from the
    options and, where they leave one open, from what the index remembers (`kept`).
    `contexts` writes each chunk's context with a chat model, when the context is one's."""

    model_id: str
    chunking: ChunkSettings
    context: ContextSettings
    default_access: list[str]
    recorded: dict[str, Any]
    """As the manifest records them: a version whose record differs cannot be reused."""
    contexts: ModelContexts | None

    @classmethod
    def settle(
        cls,
        model: IndexEmbeddings,
        kept: dict[str, Any],
        cache: EmbeddingCache,
        options: IngestOptions,
    ) -> IndexSettings:
        chunking = options.chunking or ChunkSettings(max_tokens=model.max_tokens)
        default_access = options.default_access
        if default_access is None:
            default_access = list(kept.get("default_access") or DEFAULT_ACCESS)
        context = options.context
        if context is None:
            context = recorded_context(kept or None)
        context = context or DEFAULT_CONTEXT
        recorded = {
            "embedding": {
                "model": model.model_id,
                "dimension": model.dimension,
                "max_tokens": model.max_tokens,
            },
            "chunking": chunking.to_dict(),
            "context": context.to_dict(),
            "default_access": default_access,
        }
        contexts = ModelContexts(context.model, cache) if context.kind == "model" else None
        return cls(model.model_id, chunking, context, default_access, recorded, contexts)

    @property
    def dense_context(self) -> bool:
        """Whether each chunk's context is embedded with it, not only keyword-indexed."""
        return self.context.fields == "both"

    @property
    def context_usage(self) -> ContextUsage | None:
        """The context model's requests, tokens and cost, for the run's summary."""
        return self.contexts.usage if self.contexts is not None else None

    def reusable(
        self, live: PreviousState | None, index_dir: str | Path, rebuild: bool
    ) -> PreviousState | None:
        """The live version if its chunks can be carried over; None to make every chunk
        again. A different embedding model is refused rather than mixed in: IndexMismatch,
        naming `--rebuild`."""
        previous = None if rebuild else live
        if previous is not None and (
            previous.manifest["embedding"] != self.recorded["embedding"]
            or previous.manifest.get("chunking") != self.recorded["chunking"]
            # Every chunk of a version has the same context: a change redoes them all.
            or recorded_context(previous.manifest) != self.context
            or previous.manifest.get("default_access") != self.default_access
        ):
            if previous.manifest["embedding"]["model"] != self.model_id:
                raise IndexMismatch(
                    f"index {index_dir} was built with embeddings "
                    f"{previous.manifest['embedding']['model']!r}, not {self.model_id!r}: "
                    "pass --rebuild to re-embed everything with the new model"
                )
            previous = None
        return previous

    def manifest(self, sources: list[dict[str, Any]], failures: dict[str, str]) -> dict[str, Any]:
        """The new version's manifest settings: these, its sources, its last failures."""
        return {**self.recorded, "sources": sources, "failures": failures}
