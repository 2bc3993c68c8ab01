"""The package root: the public API, and `import footnote` loading none of it until used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever

import footnote

HEAVY = ["langchain_core", "langgraph", "faiss", "onnxruntime", "numpy", "footnote.graph.graph"]


def test_import_footnote_loads_nothing_heavy() -> None:
    probe = (
        f"import json, sys, footnote; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == []


def test_root_exports_the_public_api(handbook_index: Path) -> None:
    from footnote import (
        Context,
        Filters,
        FootnoteRetriever,
        MiniLMEmbeddings,
        answer_tool,
        make_graph,
    )

    assert set(footnote.__all__) <= set(dir(footnote))
    assert issubclass(FootnoteRetriever, BaseRetriever)
    assert issubclass(MiniLMEmbeddings, Embeddings)
    assert Context().retrieve_k > 0
    retriever = FootnoteRetriever(index=handbook_index, k=1, filters=Filters(source="keys.md"))
    assert [d.metadata["source"] for d in retriever.invoke("rotation")] == ["keys.md"]
    out = make_graph().invoke(
        {"messages": [{"role": "user", "content": "How often do I have to change my API key?"}]},
        context={"index_dir": str(handbook_index)},
    )
    assert "90 days" in out["messages"][-1].content
    assert answer_tool(context={"index_dir": str(handbook_index)}).name == "ask_documents"
