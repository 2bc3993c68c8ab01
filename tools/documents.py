"""The retrieval tool the answer graph's agent calls, and the hit <-> Document conversions."""

from __future__ import annotations

import warnings
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.documents import Document
from langchain_core.tools import tool

from footnote.store.types import Caller, Hit
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import run_stage

# ToolRuntime hands the graph's dataclass state and context to a pydantic schema typed as
# dicts; the values arrive intact, but pydantic warns on every call. Silence only that.
warnings.filterwarnings(
    "ignore", message=r"Pydantic serializer warnings:\s+PydanticSerializationUnexpectedValue"
)


def setting(context: Any, name: str, default: Any) -> Any:
    """Read a context field whether the context arrived as a dataclass or a plain dict."""
    if isinstance(context, dict):
        return context.get(name, default)
    return getattr(context, name, default)


def hit_to_document(hit: Hit, features: dict[str, float]) -> Document:
    chunk = hit.chunk
    return Document(
        id=chunk.id,
        page_content=chunk.text,
        metadata={
            "chunk_id": chunk.id,
            "source": chunk.source,
            "title": chunk.title,
            "section": chunk.section,
            "page": chunk.page,
            "lines": chunk.lines,
            "url": chunk.url,
            "date": chunk.date,
            "kind": "document",
            "score": hit.score,
            **features,
        },
    )


def search_index(
    query: str, context: Any, *, extra_texts: list[str] | None = None
) -> list[Document]:
    """Hybrid search as the caller in `context` may see it, with grading evidence attached."""
    retriever = get_retriever(setting(context, "index_dir", ""), setting(context, "embeddings", ""))
    caller = Caller(
        groups=frozenset(setting(context, "user_groups", ["everyone"]) or []),
        admin=bool(setting(context, "admin", False)),
    )
    k = int(setting(context, "retrieve_k", 8))
    hits = run_stage(retriever, query, k, retriever.mask(caller), "pipeline", extra_texts)
    features = retriever.relevance_features(query, hits)
    return [hit_to_document(h, f) for h, f in zip(hits, features, strict=True)]


@tool(response_format="content_and_artifact")
def search_documents(query: str, runtime: ToolRuntime) -> tuple[str, list[Document]]:
    """Search the team's own documents (handbooks, docs, code) for passages about `query`.

    Use it for every question about the team's policies, systems or documentation. Write the
    query in the words a document would use. Returns numbered passages with their sources.
    """
    state = runtime.state
    hyde = (
        state.get("hyde_passage") if isinstance(state, dict) else getattr(state, "hyde_passage", "")
    )
    docs = search_index(query, runtime.context, extra_texts=[hyde] if hyde else None)
    if runtime.stream_writer is not None:
        runtime.stream_writer({"event": "retrieved", "query": query, "candidates": len(docs)})
    lines = [
        f"[{d.metadata['chunk_id']}] {d.metadata['source']} § {d.metadata['section']}: "
        f"{' '.join(d.page_content.split())[:300]}"
        for d in docs
    ]
    return "\n".join(lines) or "No passages found.", docs
