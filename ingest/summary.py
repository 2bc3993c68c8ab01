"""What an ingest run did, as every caller reads it: the CLI's report, the served jobs'
results, the evaluation's index build."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from footnote.ingest.model_context import ContextUsage


@dataclass
class IngestSummary:
    """What an ingest run did, per file. Every path met is in exactly one place: ingested
    (`added`, `updated`, `unchanged`), `failed` (source -> reason), or `skipped` (path ->
    reason: hidden, a symlink not followed, a special file, an unsupported type);
    `restricted` (source -> reason) names ingested files whose access could not be read
    and which only admins can see."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    restricted: dict[str, str] = field(default_factory=dict)
    deleted_why: dict[str, str] = field(default_factory=dict)
    """Why each deleted document went: gone from its root, renamed, removed."""
    chunks: int = 0
    embedded_chunks: int = 0
    embedded_texts: int = 0
    """Distinct texts sent to the model; the other chunks' vectors came from the cache."""
    version: str | None = None
    index: str = ""
    context: ContextUsage | None = None
    """With a context model: its requests, tokens and cost."""
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each connector source read, by id: where it stood (its commit), recorded with the
    version this run publishes."""

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"context": self.context.to_dict()} if self.context is not None else {}),
            "index": self.index,
            "version": self.version,
            "added": len(self.added),
            "updated": len(self.updated),
            "unchanged": len(self.unchanged),
            "deleted": len(self.deleted),
            "failed": len(self.failed),
            "skipped": len(self.skipped),
            "restricted": len(self.restricted),
            "chunks": self.chunks,
            "embedded_chunks": self.embedded_chunks,
            "embedded_texts": self.embedded_texts,
            "errors": [{"source": s, "error": e} for s, e in sorted(self.failed.items())],
            "skips": [{"path": s, "reason": r} for s, r in sorted(self.skipped.items())],
            "restrictions": [
                {"source": s, "reason": r} for s, r in sorted(self.restricted.items())
            ],
            "deletions": [{"source": s, "reason": r} for s, r in sorted(self.deleted_why.items())],
            "checkpoints": self.checkpoints,
            "files": {
                "added": self.added,
                "updated": self.updated,
                "deleted": self.deleted,
            },
        }
