"""Footnote: answers from your team's own documents, every claim cited.

The public API, imported on first use so that `import footnote` (and the `footnote` command)
stays fast:

    from footnote import make_graph, FootnoteRetriever, MiniLMEmbeddings

- `make_graph(chat_model=None, checkpointer=None)`: the answer graph, to run or to add as a
  node of your own graph; `Context` is its run-time configuration.
- `answer_tool(context=...)`: the graph as a tool for another agent.
- `FootnoteRetriever(index=..., k=...)`: a LangChain retriever over any Footnote index.
- `MiniLMEmbeddings()`: the offline embedding model (LangChain `Embeddings`).
- `Filters`: narrows a retriever's search (source glob, section, dates, front matter).
- `add_documents(index, documents, ids=None)`: add LangChain `Document`s from any loader
  (appending, as `VectorStore.add_documents` does; returns their ids), keeping their source,
  page and URL for citations and their `access` metadata. `replace_documents(index,
  documents)` makes a batch all its source gives; `delete(index, ids)` removes by id.

Indexes are built with `footnote ingest` or `footnote.ingest.pipeline.ingest(paths, index)`
(not re-exported here: `footnote.ingest` is the package of that name).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
"""The package version (pyproject.toml reads it from here: one home)."""

_EXPORTS = {
    "make_graph": "footnote.graph.graph",
    "Context": "footnote.graph.context",
    "answer_tool": "footnote.graph.agent_tool",
    "FootnoteRetriever": "footnote.tools.langchain_retriever",
    "Filters": "footnote.tools.search",
    "MiniLMEmbeddings": "footnote.models.embeddings",
    "add_documents": "footnote.ingest.corpus",
    "replace_documents": "footnote.ingest.corpus",
    "delete": "footnote.ingest.corpus",
}

__all__ = [
    "Context",
    "Filters",
    "FootnoteRetriever",
    "MiniLMEmbeddings",
    "add_documents",
    "answer_tool",
    "delete",
    "make_graph",
    "replace_documents",
]

if TYPE_CHECKING:
    from footnote.graph.agent_tool import answer_tool
    from footnote.graph.context import Context
    from footnote.graph.graph import make_graph
    from footnote.ingest.corpus import add_documents, delete, replace_documents
    from footnote.models.embeddings import MiniLMEmbeddings
    from footnote.tools.langchain_retriever import FootnoteRetriever
    from footnote.tools.search import Filters


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'footnote' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
